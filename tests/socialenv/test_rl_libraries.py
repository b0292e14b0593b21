"""The RL libraries people use, each with the real library (skipped when it is absent):
TorchRL's ``GymEnv`` and ``check_env_specs``, RLlib's PPO through its Gymnasium path, the
construction-time sizing message, and the memory benchmark of SB3 PPO, a CleanRL-style
PPO and MaskablePPO."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

import socialenv
from policysim_infra.validation import UnknownKeywordError
from socialenv.envs.sizing import GIB, LargeActionSpaceWarning, flat_ppo_memory
from tests.support import REC, ROOT, small_env, small_rec


def test_unknown_kwarg_is_a_value_error_and_a_type_error() -> None:
    with pytest.raises(UnknownKeywordError) as caught:
        gym.make(REC, **small_env(), frameskip=4)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TypeError)
    assert "unexpected keyword argument 'frameskip'" in str(caught.value)
    assert "kwargs=['frameskip'] is not allowed" in str(caught.value)
    with pytest.raises(ValueError, match="did you mean 'num_users'"):
        gym.make(REC, num_user=100)


@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_torchrl_gym_env_builds_and_passes_check_env_specs(env_id: str) -> None:
    pytest.importorskip("torchrl")
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import check_env_specs

    env = GymEnv(env_id)  # default kwargs; TorchRL passes frameskip first
    check_env_specs(env)
    rollout = env.rollout(2)
    assert rollout["next", "arms"].shape[-2:] == env.observation_spec["arms"].shape[-2:]


def test_sizing_warning_names_the_form_and_the_kwargs() -> None:
    with pytest.warns(LargeActionSpaceWarning) as caught:
        env = gym.make(REC, candidate_users=320).unwrapped  # the first version's default lever
    text = str(caught[0].message)
    k, slate = env.num_arms, env.slate_size
    for needed in (
        "PolicySim-Rec-v0",
        f"K = {k}",
        f"MultiDiscrete([{k + 1}] * {slate})",
        "action_format='scores'",
        "baselines.per_arm",
        "candidate_users",
        "MaskablePPO",
    ):
        assert needed in text, needed
    advised = int(re.search(r"e\.g\. candidate_users=(\d+)", text)[1])
    assert 0 < advised < 320
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeActionSpaceWarning)
        gym.make(REC, candidate_users=advised)  # the advised size fits: no message
        gym.make(REC, **small_rec())
        gym.make("PolicySim-Moderation-v0")


def test_memory_estimate_grows_with_the_head_and_the_observation() -> None:
    small = gym.make(REC, **small_rec()).unwrapped
    large = gym.make(REC, **small_env(num_users=400), candidate_users=40).unwrapped
    a = flat_ppo_memory(small.observation_space, small.action_space)
    b = flat_ppo_memory(large.observation_space, large.action_space)
    assert all(b[k] > a[k] for k in a) and a["maskable"] > a["sb3"]
    scores = gym.make(
        REC, **small_env(num_users=400), candidate_users=40, action_format="scores"
    ).unwrapped
    assert flat_ppo_memory(scores.observation_space, scores.action_space)["sb3"] < b["sb3"]


@pytest.mark.slow
def test_rl_libraries_benchmark_measures_each_library(tmp_path: Path) -> None:
    """Each library trains in its own process; peak RSS is measured and within the estimate."""
    for module in ("stable_baselines3", "sb3_contrib"):
        pytest.importorskip(module)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kwargs = json.dumps({"num_users": 200, "exposure_users": 40})
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/rl_libraries.py"),
            "--out",
            str(tmp_path),
            "--steps",
            "256",
            "--envs",
            "--kwargs",
            f"PolicySim-Exposure-v0={kwargs}",
            "--quiet",
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    records = json.loads((tmp_path / "rl_libraries.json").read_text())["records"]
    assert [r["library"] for r in records] == ["sb3", "cleanrl", "maskable"]
    probe = gym.make("PolicySim-Exposure-v0", num_users=200, exposure_users=40).unwrapped
    estimate = flat_ppo_memory(probe.observation_space, probe.action_space, steps=256)
    for r in records:
        assert r["status"] == "ok", r
        assert 0.2 < r["peak_rss_gib"] < estimate[r["library"]] / GIB * 1.5, (r, estimate)
        assert r["cpu_s"] > 0 and r["num_arms"] == 200
    assert (tmp_path / "rl_libraries.md").read_text().count("| ok |") == 3


@pytest.mark.slow
@pytest.mark.parametrize("env_id", socialenv.ENV_IDS)
def test_rllib_ppo_trains_one_iteration(env_id: str) -> None:
    """RLlib's PPO, one iteration on each id through RLlib's Gymnasium path (small sizes)."""
    # ray without its rllib extra has the ray.rllib package but not its dependencies
    pytest.importorskip(
        "ray.rllib.algorithms.ppo",
        reason="RLlib is not installed (its own environment: pip install -e '.[rllib]')",
    )
    spec = importlib.util.spec_from_file_location("rllib_ppo", ROOT / "examples/rllib_ppo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    sizes = {
        "PolicySim-Rec-v0": small_rec(num_users=200),
        "PolicySim-Exposure-v0": small_env(num_users=200, exposure_users=20),
        "PolicySim-Moderation-v0": small_env(num_users=200),
    }
    (result,) = example.train_ppo_iteration(env_id, sizes[env_id], iterations=1, batch_size=64)
    assert result["env_steps"] >= 64
    assert result["learner"] and all(abs(v) < 1e6 for v in result["learner"].values())
