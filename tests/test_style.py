"""The repository stays lint-clean and formatted: ``ruff check`` and ``ruff format --check``
(configured in pyproject.toml) on every file, as the house rules require of each commit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff")
    executable = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return subprocess.run(
        [executable, *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_check_is_clean():
    result = ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = ruff("format", "--no-cache", "--check", ".")
    assert result.returncode == 0, (
        "files ruff format would change (run `ruff format <files>`):\n"
        + result.stdout
        + result.stderr
    )
