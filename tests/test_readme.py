"""Every Python block of README.md runs as written, each in a fresh interpreter in an empty
folder. A block preceded by ``<!-- readme-test: slow -->`` runs in the slow suite; one
preceded by ``<!-- readme-test: skip (reason) -->`` (it needs a model file, a GPU or a
server) is reported as skipped with its reason. Blocks whose imports are not installed
(an extra) are skipped with the missing module's name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

BLOCK = re.compile(
    r"(?:<!--\s*readme-test:\s*(?P<mark>[^>]*?)\s*-->\s*\n)?(?P<indent>[ \t]*)```python\n"
    r"(?P<code>.*?)\n(?P=indent)```",
    re.S,
)


def readme_blocks() -> list[tuple[str, str, str]]:
    """(id, marker, code) of every ```python block of README.md, dedented."""
    text = (ROOT / "README.md").read_text()
    out = []
    for match in BLOCK.finditer(text):
        indent = match["indent"]
        code = "\n".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in match["code"].splitlines()
        )
        line = text[: match.start("code")].count("\n") + 1
        out.append((f"README.md:{line}", (match["mark"] or "").strip(), code))
    return out


def _params() -> list:
    params = []
    for block_id, mark, code in readme_blocks():
        marks = []
        if mark.startswith("skip"):
            marks.append(pytest.mark.skip(reason=mark))
        elif mark == "slow":
            marks.append(pytest.mark.slow)
        elif mark:
            raise ValueError(
                f"{block_id}: unknown readme-test marker {mark!r}: use slow or skip (reason)"
            )
        params.append(pytest.param(code, id=block_id, marks=marks))
    return params


def test_readme_has_python_blocks_and_markers_are_known() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 4
    assert all(mark in ("", "slow") or mark.startswith("skip") for _, mark, _ in blocks)


@pytest.mark.parametrize("code", _params())
def test_readme_block_runs(code: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "WANDB_MODE": "offline",
        "PYTHONWARNINGS": "ignore",
    }
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", result.stderr)
    if (
        result.returncode
        and missing
        and missing[1].split(".")[0]
        not in ("policysim_infra", "socialenv", "bandits", "baselines", "agent_models", "policysim")
    ):
        pytest.skip(f"needs {missing[1]} (an extra)")
    assert result.returncode == 0, f"{code}\n--- stderr:\n{result.stderr[-3000:]}"
