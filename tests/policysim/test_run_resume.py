"""Run folders are written round by round; a failed run is marked and resumes exactly."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from policysim.cli import app
from policysim.runner import RunConfig, resume, run
from tests.support import small_env

SMALL = small_env(
    num_users=80, budget=3, candidate_users=6, candidates={"interest": 2, "opposite": 1, "fresh": 1}
)


def _config(tmp_path: Path, name: str, policy: str = "linucb") -> RunConfig:
    seeds = (0,) if policy == "eenet" else (0, 1)  # a neural policy: fewer rounds, same paths
    return RunConfig(
        policy=policy,
        seeds=seeds,
        episodes=2,
        env_kwargs=dict(SMALL),
        out_dir=str(tmp_path),
        run_name=name,
        progress=False,
        plots=False,
    )


class Boom(RuntimeError):
    pass


def _fail_after(n: int):
    seen: list[dict[str, Any]] = []

    def on_round(row: dict[str, Any]) -> None:
        seen.append(row)
        summary = json.loads((Path(row_dir[0]) / "summary.json").read_text())
        assert summary["status"] == "running" and summary["rounds_done"] == len(seen)
        if len(seen) == n:
            raise Boom(f"crash after round {n}")

    row_dir: list[str] = []
    return on_round, row_dir


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


@pytest.mark.parametrize(
    ("policy", "crash_after"),
    [("linucb", 2), ("linucb", 3), ("linucb", 6), ("linucb", 11), ("eenet", 4)],
)
def test_a_failed_run_is_marked_and_resumes_to_the_same_result(
    tmp_path: Path, policy: str, crash_after: int
) -> None:
    full = run(_config(tmp_path, "full", policy))
    assert json.loads((tmp_path / "full" / "summary.json").read_text())["status"] == "complete"

    on_round, row_dir = _fail_after(crash_after)
    row_dir.append(str(tmp_path / "broken"))
    with pytest.raises(Boom):
        run(_config(tmp_path, "broken", policy), on_round=on_round)
    folder = tmp_path / "broken"
    summary = json.loads((folder / "summary.json").read_text())
    assert (
        summary["status"] == "failed"
        and summary["error"] == f"Boom: crash after round {crash_after}"
    )
    assert summary["rounds_done"] == crash_after and "--resume" in summary["resume"]
    assert len(_csv(folder / "rounds.csv")) == crash_after  # nothing finished is lost

    resumed = resume(folder)
    assert resumed.rows == full.rows
    for key in ("reward", "cross_interaction_ratio", "stance_mean"):
        assert resumed.summary[key] == full.summary[key]
    assert _csv(folder / "rounds.csv") == _csv(tmp_path / "full" / "rounds.csv")
    assert json.loads((folder / "summary.json").read_text())["status"] == "complete"


def test_cli_resume_and_clean_errors(tmp_path: Path) -> None:
    on_round, row_dir = _fail_after(4)
    row_dir.append(str(tmp_path / "r"))
    with pytest.raises(Boom):
        run(_config(tmp_path, "r"), on_round=on_round)
    result = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "r"), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "(resumed)" in result.output and len(_csv(tmp_path / "r" / "rounds.csv")) == 12
    result = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no checkpoint.ckpt to resume from" in result.output
    with pytest.raises(ValueError, match="resume cannot change"):
        resume(tmp_path / "r", seeds=(5,))


def test_one_seed_summary_says_n_a_and_names_its_aggregation(tmp_path: Path) -> None:
    result = run(
        RunConfig(
            policy="random",
            env_kwargs=dict(SMALL),
            out_dir=str(tmp_path),
            run_name="one",
            progress=False,
            plots=False,
            checkpoint_every=0,
        )
    )
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["reward"]["ci95"] is None and summary["ci95"].startswith("n/a")
    assert summary["reward"]["aggregation"].startswith("mean over the rounds")
    assert summary["stance_mean"]["aggregation"] == "value at the last round"
    assert not (tmp_path / "one" / "checkpoint.ckpt").exists() and len(result.rows) == 3
    cli = CliRunner().invoke(
        app,
        [
            "run",
            "--users",
            "80",
            "--rounds",
            "2",
            "--out",
            str(tmp_path),
            "--name",
            "cli",
            "--no-plots",
        ],
    )
    assert cli.exit_code == 0, cli.output
    assert "± n/a" in cli.output and "round mean" in cli.output and "last round" in cli.output


def test_a_run_with_a_brain_instance_checkpoints_but_does_not_resume(tmp_path: Path) -> None:
    from baselines.opinion_dynamics import OpinionDynamicsBrain

    on_round, row_dir = _fail_after(2)
    row_dir.append(str(tmp_path / "b"))
    config = RunConfig(
        policy="random",
        env_kwargs={**SMALL, "users": OpinionDynamicsBrain("lorenz")},
        out_dir=str(tmp_path),
        run_name="b",
        progress=False,
        plots=False,
    )
    with pytest.raises(Boom):
        run(config, on_round=on_round)
    with pytest.raises(
        ValueError, match=r"cannot be resumed: env_kwargs\['users'\] was a OpinionDynamicsBrain"
    ):
        resume(tmp_path / "b")
