"""The docs tables generated from the registries: the inference backends
(:data:`agent_models.llm.config.BACKENDS`), the policies
(:func:`socialenv.envs.policy_registry.policy_registry`) and the env ids
(:data:`socialenv.envs.registration.ENV_IDS`). README.md holds each between markers::

    <!-- generated: backends (python -m policysim.docs_tables --write) -->
    ...
    <!-- end generated: backends -->

``python -m policysim.docs_tables --write`` rewrites them; ``--check`` (and
``tests/test_docs_tables.py``) fails when one drifts from its registry.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def backends_table() -> str:
    from agent_models.llm.config import BACKENDS, CommonLLMConfig

    common = set(CommonLLMConfig.model_fields)
    rows = [
        "| `backend` | what | install | its settings (besides the common ones) |",
        "|---|---|---|---|",
    ]
    for name, spec in BACKENDS.items():
        settings = ", ".join(f"`{f}`" for f in spec.settings.model_fields if f not in common)
        rows.append(
            f'| `{name}` | {spec.summary} | `pip install "policysim[{spec.extra}]"` | '
            f"{settings} ({spec.settings.__name__}) |"
        )
    return "\n".join(rows)


def policies_table() -> str:
    from socialenv.envs.policy_registry import policy_registry

    rows = ["| `--policy` | from | what |", "|---|---|---|"]
    for name, entry in policy_registry().items():
        rows.append(f"| `{name}` | `{entry.source}` | {entry.summary} |")
    return "\n".join(rows)


def env_ids_table() -> str:
    from socialenv.envs.registration import ENV_IDS

    rows = ["| env id | class |", "|---|---|"]
    for env_id, target in ENV_IDS.items():
        rows.append(f"| `{env_id}` | `{target}` |")
    return "\n".join(rows)


#: Each generated table of README.md: name -> its generator.
TABLES: dict[str, Callable[[], str]] = {
    "backends": backends_table,
    "policies": policies_table,
    "env ids": env_ids_table,
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} [^\n]*-->\n)(.*?)(\n<!-- end generated: "
        rf"{re.escape(name)} -->)",
        re.S,
    )


def render(text: str) -> str:
    """``text`` (README.md) with every generated block rewritten from its registry."""
    for name, table in TABLES.items():
        pattern = _block(name)
        match = pattern.search(text)
        if match is None:
            raise ValueError(f"README.md has no generated block {name!r}")
        text = text[: match.start(2)] + table() + text[match.end(2) :]
    return text


def drifted(text: str) -> list[str]:
    """The generated blocks of ``text`` that differ from their registry."""
    out = []
    for name, table in TABLES.items():
        match = _block(name).search(text)
        if match is None or match[2] != table():
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite README.md's tables")
    group.add_argument("--check", action="store_true", help="exit 1 if a table drifted")
    args = parser.parse_args(argv)
    text = README.read_text()
    if args.write:
        README.write_text(render(text))
        return 0
    stale = drifted(text)
    if stale:
        print(f"README.md tables out of date: {stale}; run python -m policysim.docs_tables --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
