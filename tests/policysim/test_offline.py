"""Offline-RL export: runs recorded as Minari datasets, read back with the real minari."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minari")

import minari  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from bandits.ope import LoggedRounds  # noqa: E402
from policysim.cli import app  # noqa: E402
from policysim.runner import RunConfig, run  # noqa: E402
from tests.support import small_rec

SMALL = small_rec(candidates={"interest": 4, "opposite": 4, "popular": 1, "fresh": 1})
#: arms (20 users × 10 candidates) and slate slots (20 users × 2) of SMALL
ARMS, SLOTS = 200, 40


def test_recorded_run_reads_back_with_minari(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(
        RunConfig(
            env_id="PolicySim-Rec-v0",
            policy="egreedy",
            seeds=(0, 1),
            episodes=2,
            env_kwargs=SMALL,
            out_dir=str(tmp_path / "runs"),
            plots=False,
            progress=False,
            record=str(tmp_path / "datasets"),
        )
    )
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    dataset = minari.load_dataset("policysim-rec/egreedy-v0")
    assert dataset.total_episodes == 4 and dataset.total_steps == 12
    assert (
        dataset.spec.env_spec.id == "PolicySim-Rec-v0"
        and dataset.spec.env_spec.max_episode_steps == 3
    )
    log = LoggedRounds.load(result.out_dir)
    for i, episode in enumerate(dataset.iterate_episodes()):
        rows = result.rows[3 * i : 3 * i + 3]
        assert episode.observations["arms"].shape == (4, ARMS, log.contexts.shape[2])
        assert episode.observations["action_mask"].shape == (4, ARMS)
        np.testing.assert_array_equal(
            episode.observations["arms"][:3], log.contexts[3 * i : 3 * i + 3]
        )
        np.testing.assert_array_equal(
            episode.actions,
            np.where(log.arms[3 * i : 3 * i + 3] >= 0, log.arms[3 * i : 3 * i + 3], ARMS),
        )
        np.testing.assert_allclose(episode.rewards, [r["reward"] for r in rows], rtol=1e-6)
        np.testing.assert_array_equal(episode.truncations, [False, False, True])
        assert not episode.terminations.any()
        infos = episode.infos
        assert np.isnan(infos["propensity"][0]).all()  # the reset entry
        np.testing.assert_allclose(infos["propensity"][1:], log.propensities[3 * i : 3 * i + 3])
        np.testing.assert_allclose(infos["arm_rewards"][1:], log.rewards[3 * i : 3 * i + 3])
        np.testing.assert_allclose(infos["metric_toxicity"][1:], [r["toxicity"] for r in rows])
    env = dataset.recover_environment()
    assert env.unwrapped.config.num_users == 150 and env.spec.max_episode_steps == 3


def test_cli_record_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = [
        "run",
        "--env",
        "PolicySim-Exposure-v0",
        "--policy",
        "random",
        "--users",
        "150",
        "--rounds",
        "2",
        "--out",
        str(tmp_path / "runs"),
        "--no-plots",
        "--record",
        str(tmp_path / "ds"),
        "--record-id",
        "mine/exposure-v1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    dataset = minari.load_dataset("mine/exposure-v1")
    # room for 0.15 of the expected active users + 3 sd: 0.15 · (48.6 + 3·√48.6) → 11 authors
    assert dataset.total_episodes == 1 and dataset[0].actions.shape == (2, 11)
    again = CliRunner().invoke(app, args)  # the same id again is refused before running
    assert again.exit_code == 2 and "already exists" in again.output
    bad = CliRunner().invoke(app, [*args[:-1], "not an id"])
    assert bad.exit_code == 2 and "record_id" in bad.output
    with pytest.raises(ValueError, match="graph_observation"):
        run(
            RunConfig(
                policy="random",
                env_kwargs={**SMALL, "graph_observation": True},
                out_dir=None,
                plots=False,
                progress=False,
                record=str(tmp_path / "graph"),
            )
        )
