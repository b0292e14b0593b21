"""The envs behave as Gymnasium and Stable-Baselines3 expect."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import socialenv  # noqa: F401
from tests.support import LEVER_ENV_IDS, MODERATION, small_env

ENV_IDS = LEVER_ENV_IDS
SMALL = small_env(rounds=4)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id: str) -> None:
    env = gym.make(env_id, **SMALL)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*Box observation space (minimum|maximum) value.*"
        )
        check_env(env.unwrapped)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id: str) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")
        sb3_check_env(gym.make(env_id, **SMALL).unwrapped, warn=True)


def test_graph_and_user_observations_pass_check_env() -> None:
    env = gym.make("PolicySim-Rec-v0", graph_observation=True, observe_users=True, **SMALL)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space.*")
        check_env(env.unwrapped)
    obs, _ = env.reset(seed=1)
    n = env.unwrapped.sim.users.stance.shape[0]
    assert obs["user_context"].shape == (n, 64)
    assert obs["graph"].edge_links.shape[1] == 2
    # the arm contexts are the same whether computed on the neighbourhood or the full graph
    plain = gym.make("PolicySim-Rec-v0", **SMALL)
    plain_obs, _ = plain.reset(seed=1)
    np.testing.assert_allclose(plain_obs["arms"], obs["arms"], rtol=1e-5, atol=1e-6)


def test_make_without_import_prefix() -> None:
    env = gym.make("socialenv:PolicySim-Rec-v0", **SMALL)
    obs, _ = env.reset(seed=0)
    assert obs["arms"].dtype == np.float32


def test_make_with_paper_kwargs() -> None:
    env = gym.make(
        "PolicySim-Rec-v0",
        num_users=300,
        rounds=3,
        budget=3,
        candidate_users=50,
        scenario="abortion",
        seed=5,
    )
    obs, info = env.reset()
    base = env.unwrapped
    assert env.action_space.shape == (base.slate_size,) == (50 * 3,)
    assert (env.action_space.nvec == base.num_arms + 1).all() and base.no_op == base.num_arms
    assert obs["arms"].shape[0] == base.num_arms == 50 * 8  # 8 candidates per user
    assert base.per_user == 3
    steps = 0
    truncated = False
    while not truncated:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert not terminated
        assert np.isfinite(reward)
        steps += 1
    assert steps == 3
    for key in ("arm_indices", "arm_rewards", "metrics", "over_user_cap"):
        assert key in info
    assert set(socialenv.core.metrics.METRIC_NAMES) <= set(info["metrics"])
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(env.action_space.sample())
    # budget counts recommended slots per user: at most recommender.personalized (5)
    with pytest.raises(ValueError, match="budget=7 is not allowed.*personalized=5"):
        gym.make("PolicySim-Rec-v0", num_users=300, budget=7)
    with pytest.raises(ValueError, match="budget=2 is not allowed for PolicySim-Exposure-v0"):
        gym.make("PolicySim-Exposure-v0", num_users=300, budget=2)


def test_seed_kwarg_sets_first_reset() -> None:
    a = gym.make("PolicySim-Rec-v0", seed=11, **SMALL)
    b = gym.make("PolicySim-Rec-v0", **SMALL)
    np.testing.assert_array_equal(a.reset()[0]["arms"], b.reset(seed=11)[0]["arms"])


@pytest.mark.parametrize("env_id", [*ENV_IDS, MODERATION])
def test_kept_observations_never_change_and_dropped_ones_are_refilled(env_id: str) -> None:
    """Arm contexts are written into a matrix the caller has dropped (no fresh pages per step);
    one the caller keeps is never written again."""
    keeping = gym.make(env_id, **SMALL)
    dropping = gym.make(env_id, **SMALL)
    kept = [keeping.reset(seed=3)[0]["arms"]]
    copies = [kept[0].copy()]
    dropping.reset(seed=3)
    addresses = set()
    for _ in range(3):
        action = np.full(keeping.action_space.shape, keeping.unwrapped.no_op)
        arms = keeping.step(action)[0]["arms"]
        kept.append(arms)
        copies.append(arms.copy())
        refilled = dropping.step(action)[0]["arms"]
        addresses.add(refilled.__array_interface__["data"][0])
        np.testing.assert_array_equal(refilled, arms)
        del refilled
    for arms, copy in zip(kept, copies, strict=True):
        np.testing.assert_array_equal(arms, copy)
    assert len({a.__array_interface__["data"][0] for a in kept}) == len(kept)
    # Gymnasium's passive checker holds the reset's observation until the first step
    assert len(addresses) <= 2
    assert dropping.unwrapped._context_arrays.reused >= 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs(mode: str) -> None:
    envs = gym.make_vec("PolicySim-Rec-v0", num_envs=2, vectorization_mode=mode, **SMALL)
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert obs["arms"].shape[0] == 2
        assert not np.array_equal(obs["arms"][0], obs["arms"][1])
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert reward.shape == (2,)
        assert "metrics" in info
    finally:
        envs.close()


def test_empty_slots_mean_no_intervention() -> None:
    env = gym.make("PolicySim-Rec-v0", **SMALL)
    env.reset(seed=0)
    no_op = env.unwrapped.no_op
    _, reward, _, _, info = env.step(np.full(env.action_space.shape, no_op))
    assert info["metrics"]["slot_reward"] == 0.0 and reward == info["metrics"]["objective"]
    assert info["empty_slots"] == env.action_space.shape[0]
    assert not info["arm_applied"].any()


def test_duplicate_and_masked_arms_score_zero() -> None:
    env = gym.make(
        "PolicySim-Rec-v0", candidate_users=10, budget=2, reward={"form": "paper"}, **SMALL
    ).unwrapped
    obs, _ = env.reset(seed=3)
    size = env.slate_size
    assert size == 20
    allowed = np.flatnonzero(obs["action_mask"])
    slate = np.full(size, allowed[0])
    obs, reward, _, _, info = env.step(slate)
    assert info["duplicate_arms"] == size - 1 and info["over_user_cap"] == 0
    assert info["arm_applied"].tolist() == [True] + [False] * (size - 1)
    assert (info["arm_rewards"][1:] == 0).all()
    assert reward == pytest.approx(info["arm_rewards"][0] / size)
    padded = gym.make("PolicySim-Rec-v0", candidate_users=150, budget=1, **SMALL).unwrapped
    obs, _ = padded.reset(seed=3)
    masked = np.flatnonzero(obs["action_mask"] == 0)
    assert len(masked) > 0, "fewer active users than candidate_users must leave padded arms"
    assert not obs["arms"][masked].any()
    _, reward, _, _, info = padded.step(np.full(padded.slate_size, masked[0]))
    assert info["invalid_arms"] == 1 and info["duplicate_arms"] == padded.slate_size - 1
    assert not info["arm_applied"].any() and info["metrics"]["slot_reward"] == 0.0


def test_arms_beyond_a_users_budget_are_not_applied() -> None:
    env = gym.make("PolicySim-Rec-v0", candidate_users=10, budget=2, **SMALL).unwrapped
    obs, _ = env.reset(seed=4)
    groups = env.arm_groups()
    np.testing.assert_array_equal(groups, np.arange(env.num_arms) // 8)
    allowed = np.flatnonzero(obs["action_mask"])
    user = groups[allowed[0]]
    mine = allowed[groups[allowed] == user][:3]  # 3 arms of one user
    other = allowed[groups[allowed] != user][:2]
    assert len(mine) == 3 and len(other) == 2
    slate = np.full(env.slate_size, env.no_op)
    slate[:6] = [mine[0], other[0], mine[1], mine[2], other[1], mine[0]]
    arm_post = env._arms["post"].copy()
    _, _, _, _, info = env.step(slate)
    # the third arm of `user` in slate order is over the cap of 2; the repeat is a duplicate
    assert info["over_user_cap"] == 1 and info["duplicate_arms"] == 1 and info["invalid_arms"] == 0
    assert info["arm_applied"][:6].tolist() == [True, True, True, False, True, False]
    assert info["arm_rewards"][3] == 0.0 and info["arm_rewards"][5] == 0.0
    assert info["empty_slots"] == env.slate_size - 6
    # the applied arms' posts are marked recommended
    assert env.sim.posts.recommended[arm_post[slate[:6][info["arm_applied"][:6]]]].all()


def test_render_ansi() -> None:
    env = gym.make("PolicySim-Rec-v0", render_mode="ansi", **SMALL)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert "stance" in env.render()


def test_gym_api_misuse_is_refused() -> None:
    """Issue 21: unknown reset options, reset(seed=True), stepping a closed env and complex
    scores were accepted."""
    env = gym.make("PolicySim-Rec-v0", **small_env(num_users=60, rounds=2)).unwrapped
    with pytest.raises(
        ValueError, match=r"options=\{'nosuch': 1\} is not allowed: this env takes no reset options"
    ):
        env.reset(seed=0, options={"nosuch": 1})
    for seed in (True, -1, 1.5, "3"):
        with pytest.raises(ValueError, match="is not allowed: an integer >= 0 or None"):
            env.reset(seed=seed)
    env.reset(seed=0, options={})
    env.step(np.full(env.slate_size, env.no_op))
    env.close()
    with pytest.raises(RuntimeError, match="the env is closed"):
        env.step(np.full(env.slate_size, env.no_op))
    with pytest.raises(RuntimeError, match="the env is closed"):
        env.reset(seed=0)
    scored = gym.make(
        "PolicySim-Rec-v0", **small_env(num_users=60, rounds=2, action_format="scores")
    )
    scored.reset(seed=0)
    k = scored.unwrapped.num_arms
    with pytest.raises(ValueError, match="complex scores are not allowed"):
        scored.step(np.ones(k) + 1j)
    scored.step(np.ones(k))
