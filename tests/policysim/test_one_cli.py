"""One CLI: the names sweep accepts are accepted by run and gym.make; clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import socialenv  # noqa: F401 - registers the env ids
from agent_models.factory import population_names
from baselines.opinion_dynamics import POPULATIONS
from baselines.policies import policy_names as sweep_policy_names
from policysim.cli import app
from socialenv.envs.policy_registry import policy_names as run_policy_names


def test_run_accepts_every_policy_and_population_sweep_accepts() -> None:
    assert set(sweep_policy_names()) == set(run_policy_names())
    assert {"mmr", "popularity", "suppress_flagged", "origin", "eenet_gnn"} <= set(
        run_policy_names()
    )
    assert set(POPULATIONS) == set(population_names())


@pytest.mark.parametrize("population", ["bounded_confidence", "lorenz", "relative_agreement"])
def test_gym_make_accepts_abm_population_names(population: str) -> None:
    env = gym.make("PolicySim-Rec-v0", users=population, num_users=40, rounds=1)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert type(env.unwrapped.brain).__name__ == "OpinionDynamicsBrain"
    other = gym.make("PolicySim-Rec-v0", users=population, num_users=40, rounds=1)
    assert other.unwrapped.brain is not env.unwrapped.brain  # a fresh brain per env
    with pytest.raises(
        ValueError, match=r"users='nobody' is not allowed: use one of \('surrogate', 'llm', "
    ):
        gym.make("PolicySim-Rec-v0", users="nobody", num_users=40)


def test_abm_population_env_saves_and_loads_by_name(tmp_path: Path) -> None:
    env = gym.make("PolicySim-Rec-v0", users="lorenz", num_users=40, rounds=3)
    env.reset(seed=1)
    env.step(env.action_space.sample())
    path = env.unwrapped.save(tmp_path / "abm.ckpt")
    action = env.action_space.sample()
    _, reward, _, _, _ = env.step(action)
    restored = socialenv.load_env(path)
    _, reward2, _, _, _ = restored.step(action)
    assert reward == reward2


def test_cli_run_with_a_baseline_policy_and_an_abm_population(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--policy",
            "mmr",
            "--users",
            "lorenz",
            "--num-users",
            "60",
            "--rounds",
            "2",
            "--out",
            str(tmp_path),
            "--name",
            "m",
            "--no-plots",
        ],
    )
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["policy"] == "mmr" and config["env_kwargs"]["users"] == "lorenz"


def test_deprecated_spellings_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import policysim.cli as cli

    monkeypatch.setattr(cli, "_warned", set())  # warned once per process: start afresh
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--brain",
            "surrogate",
            "--users",
            "60",
            "--rounds",
            "1",
            "--out",
            str(tmp_path),
            "--name",
            "old",
            "--no-plots",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "--brain is deprecated" in result.output and "use --num-users 60" in result.output
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    assert config["env_kwargs"]["num_users"] == 60 and config["env_kwargs"]["users"] == "surrogate"


@pytest.mark.parametrize("command", [["run"], ["sweep", "--backend", "local"]])
def test_unknown_env_id_is_a_clean_error(tmp_path: Path, command: list[str]) -> None:
    result = CliRunner().invoke(
        app, [*command, "--env", "PolicySim-Foo-v0", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "PolicySim-Foo-v0" in result.output and "PolicySim-Rec-v0" in result.output
    assert "Traceback" not in result.output


def test_plots_mark_news_show_origin_and_label_bands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from policysim import plots
    from policysim.runner import RunConfig, run

    captured: dict = {}
    original = plots.plot_run

    def spy(rows, out_dir, title="", **kwargs):
        captured.update(kwargs, rows=rows)
        return original(rows, out_dir, title, **kwargs)

    monkeypatch.setattr(plots, "plot_run", spy)
    run(
        RunConfig(
            policy="random",
            seeds=(0, 1),
            env_kwargs={"num_users": 60, "rounds": 5},
            out_dir=str(tmp_path),
            run_name="p",
            progress=False,
        )
    )
    assert captured["news_rounds"] == [0, 4, 7]  # the abortion scenario (the plot shows 0 and 4)
    origin = captured["origin_rows"]
    assert len(origin) == 10 and all(r["slot_reward"] == 0.0 for r in origin)
    assert all(r["reward"] == r["objective"] for r in origin)
    assert (tmp_path / "p" / "origin_rounds.csv").exists()
    for name in ("stance.png", "objectives.png"):
        assert (tmp_path / "p" / name).stat().st_size > 10_000

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels: list[list[str]] = []
    real_savefig = plt.Figure.savefig

    def record(fig, *args, **kwargs):
        texts = [
            t.get_text()
            for legend in [*fig.legends, *(a.get_legend() for a in fig.axes)]
            if legend
            for t in legend.get_texts()
        ]
        labels.append(texts)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", record)
    original(captured["rows"], tmp_path, "t", news_rounds=[0, 4], origin_rows=origin)
    stance, objectives = labels
    assert "news" in stance and "Origin (no intervention)" in stance
    assert "± stance std within the population" in stance
    assert "± std of the stance mean across 2 seeds" in stance
    assert {"news", "Origin", "± std across 2 seeds", "this policy"} <= set(objectives)


def test_unknown_population_is_refused_before_any_trial_or_folder(tmp_path: Path) -> None:
    from policysim.runner import RunConfig, run
    from policysim.sweep import SweepConfig

    with pytest.raises(ValueError, match="users='martians' is not allowed: use one of"):
        run(RunConfig(env_kwargs={"users": "martians"}, out_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match=r"grid\['users'\]\[1\]='martians' is not allowed"):
        SweepConfig(grid={"users": ["lorenz", "martians"]}, out_dir=str(tmp_path)).validate()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "sweep", "play"])
def test_help_names_the_registries_and_reads_at_80_columns(command: str) -> None:
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    text = subprocess.run(
        [sys.executable, "-m", "policysim.cli", command, "--help"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert max(len(line) for line in text.splitlines()) <= 80, text
    words = set(text.replace(",", " ").replace(".", " ").split())
    assert set(socialenv.ENV_IDS) <= words  # whole, from gym's registry
    assert set(run_policy_names()) <= words and set(population_names()) <= words
    for option in ("--env", "--policy", "--num-users", "--users", "--rounds", "--seed"):
        assert option in words, option  # one vocabulary in run, sweep and play
    assert "…" not in text


def test_misspelt_names_get_did_you_mean(tmp_path: Path) -> None:
    for args, hint in (
        (["--policy", "linucbb"], "did you mean 'linucb'"),
        (["--users", "lorentz"], "did you mean 'lorenz'"),
        (["--env-kwargs", '{"num_user": 50}'], "did you mean 'num_users'"),
    ):
        result = CliRunner().invoke(
            app,
            [
                "run",
                "--rounds",
                "1",
                "--num-users",
                "60",
                "--out",
                str(tmp_path),
                "--no-plots",
                *args,
            ],
        )
        assert result.exit_code == 2 and hint in " ".join(result.output.split()), (
            args,
            result.output,
        )


def test_play_speaks_the_same_options_and_deprecated_spellings_warn_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import policysim.cli as cli
    import policysim.play

    calls = []
    monkeypatch.setattr(policysim.play, "play", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(cli, "_warned", set())
    runner = CliRunner()
    result = runner.invoke(
        app, ["play", "--num-users", "80", "--users", "lorenz", "--policy", "linucb"]
    )
    assert result.exit_code == 0, result.output
    assert calls[-1][1]["num_users"] == 80 and calls[-1][1]["users"] == "lorenz"
    assert calls[-1][1]["platform_policy"] == "linucb" and "deprecated" not in result.output
    old = ["play", "--users", "90", "--brain", "lorenz", "--platform-policy", "mmr"]
    first, second = runner.invoke(app, old), runner.invoke(app, old)
    assert calls[-1][1]["num_users"] == 90 and calls[-1][1]["users"] == "lorenz"
    assert calls[-1][1]["platform_policy"] == "mmr"
    for spelling in (
        "--users 90 as a number",
        "--brain is deprecated",
        "--platform-policy is deprecated",
    ):
        assert first.output.count(spelling) == 1 and spelling not in second.output, first.output
