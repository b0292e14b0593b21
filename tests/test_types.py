"""The type checker's baseline only shrinks: mypy (configured in pyproject.toml, no cache) on
the core packages, error counts per module against ``tests/mypy_baseline.json``.

    python tests/test_types.py            # print the counts next to the baseline
    python tests/test_types.py --update   # lower the baseline to the current counts
    python tests/test_types.py --recount  # write the current counts whatever they are (after
                                          # modules moved or mypy changed version; say so)

A module whose count grows fails the test (fix the new errors, or write the ignore with the
error code where mypy is wrong); a module whose count fell should have its baseline lowered
with ``--update``, which never raises a count.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(__file__).with_name("mypy_baseline.json")
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


def mypy_counts(packages: list[str]) -> Counter[str]:
    """Errors per file (repository-relative path) of mypy on ``packages``."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            os.devnull,
            "--no-error-summary",
            "--hide-error-context",
            *packages,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1) or result.stderr.strip():
        raise RuntimeError(f"mypy failed to run (exit {result.returncode}):\n{result.stderr}")
    counts: Counter[str] = Counter()
    for line in result.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            counts[match["path"]] += 1
    return counts


def versions() -> dict[str, str]:
    """The versions the counts depend on (mypy, and NumPy's type stubs)."""
    from importlib.metadata import version

    return {name: version(name) for name in ("mypy", "numpy")}


def grown(baseline: dict[str, int], counts: Counter[str]) -> dict[str, tuple[int, int]]:
    """Modules with more errors than their baseline: path -> (baseline, now)."""
    return {
        path: (baseline.get(path, 0), count)
        for path, count in sorted(counts.items())
        if count > baseline.get(path, 0)
    }


def test_grown_finds_new_and_larger_counts():
    baseline = {"a.py": 2, "b.py": 1}
    assert grown(baseline, Counter({"a.py": 2, "b.py": 0})) == {}
    assert grown(baseline, Counter({"a.py": 3, "c.py": 1})) == {"a.py": (2, 3), "c.py": (0, 1)}


def test_mypy_error_counts_do_not_grow():
    pytest.importorskip("mypy")
    spec = json.loads(BASELINE.read_text())
    counts = mypy_counts(spec["packages"])
    worse = grown(spec["errors"], counts)
    assert not worse, (
        "mypy finds more errors than tests/mypy_baseline.json allows (baseline, now): "
        f"{worse}; run `python -m mypy {' '.join(spec['packages'])}` and fix the new ones "
        f"(the baseline was counted with {spec['versions']}, this run used {versions()})"
    )


def main() -> None:
    spec = json.loads(BASELINE.read_text())
    counts = mypy_counts(spec["packages"])
    for path in sorted(set(spec["errors"]) | set(counts)):
        print(f"{spec['errors'].get(path, 0):5d} {counts.get(path, 0):5d}  {path}")
    print(f"{sum(spec['errors'].values()):5d} {sum(counts.values()):5d}  total (baseline, now)")
    if "--update" in sys.argv[1:] or "--recount" in sys.argv[1:]:
        worse = grown(spec["errors"], counts)
        if worse and "--recount" not in sys.argv[1:]:
            raise SystemExit(f"not lowering: counts grew {worse}")
        spec["errors"] = {path: counts[path] for path in sorted(counts)}
        spec["versions"] = versions()
        BASELINE.write_text(json.dumps(spec, indent=1) + "\n")
        print(f"wrote {BASELINE}")


if __name__ == "__main__":
    main()
