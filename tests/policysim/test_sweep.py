"""Grid sweeps: grid files, the local backend, the Ray backend on a local 2-CPU cluster, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policysim.sweep import SweepConfig, Trial, load_grid, print_table, run_sweep, run_trial
from tests.support import ROOT, small_env

TINY = small_env(num_users=120, rounds=2, candidate_users=20, budget=2)


def _config(tmp_path: Path, **changes) -> SweepConfig:
    values = {
        "name": "t",
        "policies": ("origin", "mmr"),
        "seeds": (0, 1),
        "env_kwargs": TINY,
        "grid": {"users": ["surrogate", "lorenz"]},
        "out_dir": str(tmp_path),
    }
    return SweepConfig(**{**values, **changes})


def test_example_grid_file_parses() -> None:
    config = load_grid(ROOT / "examples" / "sweep.yaml")
    assert config.env_id == "PolicySim-Rec-v0" and "eenet" in config.policies
    assert config.grid["budget"] == [2, 5] and config.env_kwargs["num_users"] == 1000
    assert len(config.trials()) == len(config.policies) * len(config.seeds) * 4
    config.validate()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("method: random\nparameters: {policy: {values: [random]}}", "method"),
        ("parameters: {budget: {min: 1, max: 5}}", "value"),
        ("parameters: {env_id: {values: [PolicySim-Rec-v0, PolicySim-Exposure-v0]}}", "env_id"),
        ("name: x", "parameters"),
    ],
)
def test_bad_grid_files_name_the_problem(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_grid(path)


def test_bad_sweep_configs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="greedy"):
        run_sweep(_config(tmp_path, policies=("greedy",)), backend="local")
    with pytest.raises(ValueError, match="num_agents"):
        run_sweep(_config(tmp_path, env_kwargs={"num_agents": 5}), backend="local")
    with pytest.raises(ValueError, match="backend"):
        run_sweep(_config(tmp_path), backend="dask")
    with pytest.raises(ValueError, match="grid"):
        SweepConfig(grid={"seed": [1, 2]})


def test_local_sweep_writes_table_and_json(tmp_path: Path) -> None:
    result = run_sweep(_config(tmp_path), backend="local")
    assert not result.failures and len(result.trials) == 8
    assert len(result.table) == 4  # 2 policies x 2 configs
    for entry in result.table:
        assert entry["seeds"] == 2
        assert {"reward", "cross_interaction_ratio", "bias", "diversity"} <= set(entry)
        assert (entry["slot_reward"]["mean"] == 0.0) == (entry["policy"] == "origin")
    saved = json.loads((tmp_path / "t" / "sweep.json").read_text())
    assert saved["table"] == json.loads(json.dumps(result.table))
    assert (tmp_path / "t" / "rounds.csv").read_text().count("\n") == 8 * 2 + 1
    print_table(result)


def test_sweep_logs_one_wandb_run_per_trial(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    result = run_sweep(
        _config(tmp_path, policies=("random",), seeds=(0,), wandb="offline"), backend="local"
    )
    assert not result.failures
    assert len(list((tmp_path / "t" / "wandb").glob("wandb/offline-run-*"))) == 2  # 2 configs


def test_failed_trials_are_reported_not_fatal(tmp_path: Path) -> None:
    result = run_sweep(_config(tmp_path, grid={"budget": [0, 2]}, seeds=(0,)), backend="local")
    assert len(result.failures) == 2 and "budget" in result.failures[0]["error"]
    assert len(result.table) == 2 and all(e["config"] == {"budget": 2} for e in result.table)


def test_ray_sweep_on_a_local_two_cpu_cluster_matches_the_local_sweep(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    config = _config(tmp_path, grid={}, seeds=(0, 1))
    local = run_sweep(config, backend="local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        distributed = run_sweep(_config(tmp_path / "ray", grid={}, seeds=(0, 1)), backend="ray")
        assert ray.is_initialized()  # a cluster it did not start stays up
    finally:
        ray.shutdown()
    assert not distributed.failures and distributed.backend == "ray"
    assert len({t["pid"] for t in distributed.trials}) >= 1
    assert [e["reward"] for e in distributed.table] == [e["reward"] for e in local.table]
    assert [t["rows"] for t in distributed.trials] == [t["rows"] for t in local.trials]


def test_run_trial_logs_into_a_given_wandb_run(tmp_path: Path) -> None:
    wandb = pytest.importorskip("wandb")
    run = wandb.init(
        project="policysim-test", mode="offline", dir=str(tmp_path), reinit="finish_previous"
    )
    trial = Trial(
        index=0,
        name="x",
        env_id="PolicySim-Rec-v0",
        policy="random",
        seed=0,
        episodes=2,
        config_index=0,
        config={},
        env_kwargs=TINY,
        policy_kwargs={},
    )
    result = run_trial(trial, wandb_run=run)
    assert run.summary["final/reward"] == pytest.approx(result["summary"]["reward"]["mean"])
    run.finish()
    assert len(result["rows"]) == 4 and {r["episode"] for r in result["rows"]} == {0, 1}


def test_cli_sweep_local(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from policysim.cli import app

    out = CliRunner().invoke(
        app,
        [
            "sweep",
            "--backend",
            "local",
            "--policy",
            "origin",
            "--policy",
            "popularity",
            "--seed",
            "0",
            "--num-users",
            "120",
            "--rounds",
            "2",
            "--vary",
            '{"budget": [1, 3]}',
            "--env-kwargs",
            '{"candidate_users": 20}',
            "--out",
            str(tmp_path),
            "--name",
            "cli",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "popularity" in out.output and "budget=3" in out.output
    assert len(json.loads((tmp_path / "cli" / "sweep.json").read_text())["table"]) == 4
    bad = CliRunner().invoke(
        app, ["sweep", "--backend", "local", "--policy", "nope", "--out", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "nope" in bad.output


def test_finished_trials_are_kept_when_a_sweep_dies_and_resume_runs_the_rest(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, policies=("random",), seeds=(0, 1), grid={"budget": [0, 2]})

    def die_after_two(result: dict, done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(config, backend="local", progress=die_after_two)
    log = [json.loads(line) for line in (tmp_path / "t" / "trials.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all("error" in r for r in log)  # budget=0 trials failed first
    assert log[0]["error"].startswith("ValueError: budget=0") and "Traceback" in log[0]["traceback"]

    def die_after_three(result: dict, done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(config, backend="local", progress=die_after_three, resume=True)
    ran: list[str] = []
    result = run_sweep(
        config,
        backend="local",
        resume=True,
        progress=lambda r, done, total: ran.append(r["trial"]["name"]),
    )
    assert ran == ["random-c0-s0", "random-c0-s1", "random-c1-s1"]  # c1-s0 was kept
    assert len(result.trials) == 4 and len(result.failures) == 2
    fresh = run_sweep(
        _config(tmp_path / "fresh", policies=("random",), seeds=(0, 1), grid={"budget": [0, 2]}),
        backend="local",
    )

    def timeless(table: list[dict]) -> list[dict]:
        return [{k: v for k, v in entry.items() if k != "seconds"} for entry in table]

    assert timeless(result.table) == timeless(fresh.table)


def test_resume_keeps_only_trials_run_under_the_same_configuration(tmp_path: Path) -> None:
    """Issue 21: ``--rounds 5`` then ``--rounds 9 --resume`` reruns every trial at 9 rounds."""
    five = _config(tmp_path, policies=("random",), seeds=(0, 1), grid={"budget": [2]})
    five.env_kwargs = {**five.env_kwargs, "rounds": 2}
    run_sweep(five, backend="local")
    nine = _config(tmp_path, policies=("random",), seeds=(0, 1), grid={"budget": [2]})
    nine.env_kwargs = {**nine.env_kwargs, "rounds": 3}
    ran: list[str] = []
    result = run_sweep(
        nine,
        backend="local",
        resume=True,
        progress=lambda r, done, total: ran.append(r["trial"]["name"]),
    )
    assert ran == ["random-c0-s0", "random-c0-s1"]
    assert all(
        len(t["rows"]) == 3 and t["trial"]["env_kwargs"]["rounds"] == 3 for t in result.trials
    )
    log = (tmp_path / "t" / "trials.jsonl").read_text().splitlines()
    assert len(log) == 2 and all(
        json.loads(line)["trial"]["env_kwargs"]["rounds"] == 3 for line in log
    )
    (tmp_path / "t" / "trials.jsonl").write_text(
        "\n".join([*log, "[1, 2]", '{"trial": 3}', '{"tri']) + "\n"
    )
    again: list[str] = []
    run_sweep(nine, backend="local", resume=True, progress=lambda r, done, total: again.append(r))
    assert again == []  # same configuration: both kept; malformed lines skipped


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n"
                for i in range(8)
            )
            + "parameters: {policy: {values: *i}}\n",
            r"aliases \(\*a\) are not allowed",
        ),
        ("parameters: &p {policy: {value: *p}}\n", r"aliases \(\*p\) are not allowed"),
        ("[" * 100_000 + "]" * 100_000, "nested more than 32 levels deep"),
        ("parameters: {policy: {values: [random]\n", "not valid YAML"),
    ],
)
def test_hostile_grid_files_are_refused_before_expansion(
    tmp_path: Path, text: str, error: str
) -> None:
    """Issue 21 (of the same kind as the event files): a grid file is YAML read from disk."""
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"grid file {path}: {error}"):
        load_grid(path)
