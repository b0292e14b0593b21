"""Determinism, save/resume and errors for bad input."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv
from socialenv.envs import load_env
from tests.support import LEVER_ENV_IDS, assert_same, small_env

SMALL = small_env(num_users=200, rounds=6)


def _episode(env: gym.Env, seed: int, actions: list[np.ndarray]) -> list:
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    for action in actions:
        obs, reward, _, _, info = env.step(action)
        trace.append((obs, reward, info["arm_rewards"], info["metrics"]))
    return trace


@pytest.mark.parametrize("env_id", LEVER_ENV_IDS)
def test_same_seed_same_episode(env_id: str) -> None:
    rng = np.random.default_rng(0)
    env = gym.make(env_id, **SMALL)
    actions = [rng.integers(0, env.unwrapped.num_arms, env.action_space.shape) for _ in range(6)]
    first = _episode(env, 42, actions)
    second = _episode(gym.make(env_id, **SMALL), 42, actions)
    assert_same(first, second)
    other = _episode(gym.make(env_id, **SMALL), 43, actions)
    assert not np.array_equal(first[0]["arms"], other[0]["arms"])


@pytest.mark.parametrize("env_id", LEVER_ENV_IDS)
def test_save_and_resume_equals_uninterrupted(env_id: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    env = gym.make(env_id, **SMALL)
    actions = [rng.integers(0, env.unwrapped.num_arms, env.action_space.shape) for _ in range(6)]
    full = _episode(env, 7, actions)

    interrupted = gym.make(env_id, **SMALL)
    interrupted.reset(seed=7)
    for action in actions[:3]:
        interrupted.step(action)
    path = interrupted.unwrapped.save(tmp_path / "env.ckpt")
    del interrupted

    resumed = load_env(path)
    tail = []
    for action in actions[3:]:
        obs, reward, _, _, info = resumed.step(action)
        tail.append((obs, reward, info["arm_rewards"], info["metrics"]))
    assert_same(full[4:], tail)


def test_load_rejects_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"\x80\x05N.")
    with pytest.raises(ValueError, match="format-1 \\(pickle\\) save"):
        load_env(bad)
    with pytest.raises(FileNotFoundError):
        load_env(tmp_path / "missing.pkl")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_users": 3}, "num_users"),
        ({"rounds": 0}, "rounds"),
        ({"budget": 0}, "budget"),
        ({"budget": 6}, "budget"),  # above recommender.personalized
        ({"candidate_users": 0}, "candidate_users"),
        ({"candidates": {"random": 3}}, "candidates"),
        ({"candidates": {"interest": 0}}, "candidates"),
        ({"action_format": "ranks"}, "action_format"),
        ({"classifier": {"recall": 1.5}}, "classifier.recall"),
        ({"scenario": "mars"}, "scenario"),
        ({"users": "robots"}, "users"),
        ({"exposure_levels": (0.5, 1.5)}, "exposure_levels"),
        ({"stance_ema": 1.0}, "stance_ema"),
        ({"recommender": {"personalized": -1}}, "recommender.personalized"),
        ({"recommender": {"colour": 1}}, "recommender"),
        ({"reward": {"engagement": {"hug": 0.5}}}, "reward.engagement"),
        ({"reward": {"misinformation_mode": "magic"}}, "reward.misinformation_mode"),
        ({"reward": {"form": "eq9"}}, "reward.form"),
        ({"reward": {"hostile_weight": -0.1}}, "reward.hostile_weight"),
        ({"reward": {"reply_toxicity_weight": 20.0}}, "reward.reply_toxicity_weight"),
        ({"reward": {"clean_removal_cost": 1.5}}, "reward.clean_removal_cost"),
        ({"lever_share": 0.0}, "lever_share"),
        ({"lever_share": 1.5}, "lever_share"),
        ({"lever_share": "half"}, "lever_share"),
        ({"context": {"alpha": 2.0}}, "context.alpha"),
        ({"surrogate": {"post_rate": 3.0}}, "surrogate.post_rate"),
        ({"num_agents": 5}, "num_agents"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        env = gym.make("PolicySim-Rec-v0", **{"num_users": 100, **kwargs})
        env.reset(seed=0)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.zeros(3, np.int64), "shape"),
        (np.full(10, -1), "arm index -1"),
        (np.full(10, 10_000), "arm index 10000"),
        (np.full(10, 0.5), "integer"),
        ("abc", "shape"),
    ],
)
def test_bad_action_names_what_is_allowed(action: object, message: str) -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=100, candidate_users=5, budget=2).unwrapped
    assert env.slate_size == 10
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        env.step(action)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.zeros(3), r"shape \(3,\); expected \(50,\)"),
        (np.zeros(10, np.int64), "one score per arm"),  # a slate is not a score action
        (np.full(50, np.nan), "finite"),
        (np.r_[np.zeros(49), np.inf], "finite"),
        ("abc", "real scores"),
    ],
)
def test_bad_score_action_names_what_is_allowed(action: object, message: str) -> None:
    env = gym.make(
        "PolicySim-Rec-v0",
        num_users=100,
        candidate_users=5,
        budget=2,
        action_format="scores",
        candidates={"interest": 3, "opposite": 4, "popular": 2, "fresh": 1},
    ).unwrapped
    assert env.action_space.shape == (env.num_arms,) == (50,)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(50))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        env.step(action)


def test_scenario_instance_and_saved_scenario(tmp_path: Path) -> None:
    scenario = socialenv.make_scenario("abortion", 120, seed=3)
    path = scenario.save(tmp_path / "pop")
    a = gym.make("PolicySim-Rec-v0", scenario=scenario, rounds=2)
    b = gym.make("PolicySim-Rec-v0", scenario=str(path), rounds=2)
    np.testing.assert_array_equal(a.reset(seed=0)[0]["arms"], b.reset(seed=0)[0]["arms"])
    assert a.unwrapped.sim.users.stance.shape == (120,)
