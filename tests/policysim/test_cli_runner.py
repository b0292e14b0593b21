"""`policysim run`, the runner's run folder and W&B logging."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from policysim.cli import app
from policysim.runner import RunConfig, run


def test_policysim_run_writes_a_run_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--policy",
            "linucb",
            "--num-users",
            "120",
            "--rounds",
            "3",
            "--seed",
            "0",
            "--seed",
            "1",
            "--out",
            str(tmp_path),
            "--name",
            "demo",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "cross-stance interactions" in result.output
    folder = tmp_path / "demo"
    for name in ("config.json", "rounds.csv", "summary.json", "stance.png", "objectives.png"):
        assert (folder / name).exists(), name
    rows = list(csv.DictReader((folder / "rounds.csv").open()))
    assert len(rows) == 2 * 3
    assert list(rows[0])[:4] == ["seed", "episode", "round", "reward"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["seeds"] == 2 and "ci95" in summary["cross_interaction_ratio"]


def test_policysim_run_exposure_origin(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--env",
            "PolicySim-Exposure-v0",
            "--policy",
            "origin",
            "--num-users",
            "150",
            "--rounds",
            "2",
            "--out",
            str(tmp_path),
            "--name",
            "exp",
            "--no-plots",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "exp" / "summary.json").read_text())
    # Origin governs nobody and filters nothing; the step reward still scores the platform:
    # it is the objective, the users newly misled (less those who recovered) per active user
    assert summary["governed_users"]["mean"] == 0.0 and summary["policy_share"]["mean"] == 0.0
    assert summary["exposure_removed"]["mean"] == 0.0
    assert summary["reward"]["mean"] == pytest.approx(summary["objective"]["mean"])
    assert summary["reward"]["mean"] < 0.0
    assert 0.0 < summary["misinformation_ratio"]["mean"] < 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "magic"], "policy='magic' is not allowed"),
        (["--env-kwargs", "[1, 2]"], "JSON object"),
        (["--num-users", "2"], "num_users=2 is not allowed"),
        (["--env-kwargs", "[" * 100_000 + "]" * 100_000], "a JSON object nested less deeply"),
    ],
)
def test_policysim_run_rejects_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path), "--rounds", "1", *args])
    assert result.exit_code != 0
    assert message in result.output


def test_runner_logs_to_wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    seen = []
    result = run(
        RunConfig(
            policy="random",
            env_kwargs={"num_users": 100, "rounds": 2},
            out_dir=str(tmp_path),
            run_name="wb",
            wandb="offline",
            progress=False,
            plots=False,
        ),
        on_round=seen.append,
    )
    assert len(seen) == 2 and len(result.rows) == 2
    offline_runs = list((tmp_path / "wb").rglob("offline-run-*"))
    assert offline_runs, "wandb wrote no offline run"
    assert any(p.suffix == ".wandb" for p in offline_runs[0].rglob("*"))


def test_policysim_run_that_cannot_write_says_so_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk mid-run: a clear error (exit 2, no traceback), summary.json says failed, and
    ``--resume`` completes the run to the rows of an uninterrupted one."""
    import policysim.runner as runner

    args = ["run", "--num-users", "120", "--rounds", "4", "--no-plots", "--quiet"]
    reference = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--name", "ref"])
    assert reference.exit_code == 0, reference.output
    real_save, calls = runner._write_run_checkpoint, []

    def disk_full_at_round_3(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(runner, "_write_run_checkpoint", disk_full_at_round_3)
    failed = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path), "--name", "full", "--checkpoint-every", "1"]
    )
    assert failed.exit_code == 2, failed.output
    assert "could not write" in failed.output and "No space left on device" in failed.output
    assert "Traceback" not in failed.output
    assert json.loads((tmp_path / "full" / "summary.json").read_text())["status"] == "failed"
    monkeypatch.setattr(runner, "_write_run_checkpoint", real_save)
    resumed = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "full"), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert (tmp_path / "full" / "rounds.csv").read_text() == (
        tmp_path / "ref" / "rounds.csv"
    ).read_text()
