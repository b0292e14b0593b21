"""Progress bars for long commands: drawn on a terminal, silent under --quiet and when the
output goes to a pipe (checked through a pseudo-terminal, as a person runs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from policysim_infra.progress import progress_bar, show_progress
from tests.support import ROOT

BAR = re.compile(r"\d+%\|.*(round/s|s/round)")
BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
RUN = ["-m", "policysim.cli", "run", "--num-users", "60", "--rounds", "3", "--no-plots"]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "120",
    }


def _on_terminal(args: list[str], cwd: Path) -> str:
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable, args, env=_env(), cwd=str(cwd), encoding="utf-8", timeout=120
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


def test_run_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    shown = _on_terminal([*RUN, "--out", str(tmp_path / "a")], tmp_path)
    assert BAR.search(shown), shown  # the tqdm bar
    quiet = _on_terminal([*RUN, "--out", str(tmp_path / "b"), "--quiet"], tmp_path)
    assert not BAR.search(quiet) and "run folder:" in quiet
    piped = subprocess.run(
        [sys.executable, *RUN, "--out", str(tmp_path / "c")],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert not BAR.search(piped.stderr + piped.stdout) and "run folder:" in piped.stdout


def test_progress_bar_is_disabled_when_quiet_or_not_a_terminal() -> None:
    assert not show_progress(quiet=True)
    assert show_progress() == sys.stderr.isatty()
    assert progress_bar(range(3), quiet=True).disable


@pytest.mark.parametrize("script", BENCHMARKS)
def test_every_benchmark_takes_quiet(script: str) -> None:
    shown = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "--quiet" in shown.stdout, shown.stdout


@pytest.mark.parametrize(
    "command", [["fit"], ["train", "sft"], ["train", "dpo"], ["run"], ["sweep"]]
)
def test_long_commands_take_quiet(command: list[str]) -> None:
    from typer.testing import CliRunner

    from policysim.cli import app

    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "--quiet" in shown.output, shown.output


def test_train_shows_the_trainer_bar_only_when_asked() -> None:
    from policysim.train_cli import _config

    assert _config(quiet=True).progress is False  # type: ignore[attr-defined]
    assert _config().progress is sys.stderr.isatty()  # type: ignore[attr-defined]
