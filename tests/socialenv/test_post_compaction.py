"""Bounded memory: posts beyond the feeds' horizon are dropped without changing results."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from socialenv.core.world import PostTable
from socialenv.envs import load_env
from tests.support import assert_same, small_env

SMALL = small_env(num_users=120, rounds=40)
#: Each env's lever (the Exposure lever at its defaults).
LEVER = {
    "PolicySim-Rec-v0": {
        "budget": 4,
        "candidate_users": 8,
        "candidates": {"interest": 2, "opposite": 2, "fresh": 1},
    },
    "PolicySim-Exposure-v0": {},
}


def _episode(env_id: str, compact: bool, users: str = "surrogate", window: int = 2):
    env = gym.make(
        env_id, **SMALL, lever=LEVER[env_id], users=users, recommender={"window": window}
    )
    env.unwrapped.sim.compact_posts_enabled = compact
    rng = np.random.default_rng(3)
    obs, _ = env.reset(seed=11)
    out = [obs]
    sizes = []
    for _ in range(SMALL["rounds"]):
        mask = obs["action_mask"].astype(bool)
        valid = np.flatnonzero(mask)
        action = np.full(env.action_space.shape, env.unwrapped.no_op)
        picks = rng.choice(valid, min(len(valid), len(action)), replace=False)
        action[: len(picks)] = picks
        obs, reward, _, _, info = env.step(action)
        out.append((obs, reward, info["arm_rewards"], info["metrics"]))
        sizes.append(len(env.unwrapped.sim.posts))
    return out, sizes, env.unwrapped.sim


@pytest.mark.parametrize(
    ("env_id", "users", "window"),
    [
        ("PolicySim-Rec-v0", "surrogate", 2),
        ("PolicySim-Rec-v0", "surrogate", 5),
        ("PolicySim-Exposure-v0", "surrogate", 2),
        ("PolicySim-Rec-v0", "lorenz", 3),
    ],
)
def test_compaction_changes_no_result(env_id: str, users: str, window: int) -> None:
    full, full_sizes, full_sim = _episode(env_id, compact=False, users=users, window=window)
    compact, sizes, sim = _episode(env_id, compact=True, users=users, window=window)
    assert_same(full, compact)
    assert sim.posts_dropped > 0 and len(sim.posts) + sim.posts_dropped == len(full_sim.posts)
    assert max(sizes[-10:]) < full_sizes[-1] / 2  # bounded: about two horizons of posts, not all


def test_save_and_load_after_compaction(tmp_path: Path) -> None:
    env = gym.make("PolicySim-Rec-v0", **SMALL)
    obs, _ = env.reset(seed=2)
    for _ in range(20):
        obs, *_ = env.step(env.action_space.sample())
    assert env.unwrapped.sim.posts_dropped > 0
    path = env.unwrapped.save(tmp_path / "env.ckpt")
    restored = load_env(path)
    assert restored.sim.posts_dropped == env.unwrapped.sim.posts_dropped
    for _ in range(5):
        action = env.action_space.sample()
        a = env.step(action)
        b = restored.step(action)
        assert a[1] == b[1]
        np.testing.assert_array_equal(a[0]["arms"], b[0]["arms"])


def test_post_table_drop_before_renumbers_and_unlinks_parents() -> None:
    table = PostTable(latent_dim=2, capacity=4)
    ids = table.append(
        author=np.arange(6),
        round_=0,
        kind=0,
        parent=np.array([-1, 0, 1, 2, 0, 4]),
        latent=np.ones((6, 2)),
        stance=np.zeros(6),
        toxicity=np.zeros(6),
        misinfo=np.zeros(6, bool),
        cluster=np.zeros(6, np.int16),
    )
    assert ids.tolist() == list(range(6))
    table.drop_before(3)
    assert len(table) == 3 and table.author[:3].tolist() == [3, 4, 5]
    assert table.parent[:3].tolist() == [-1, -1, 1]  # parents 2 and 0 were dropped; 4 is now 1
    with pytest.raises(ValueError, match="cut=9 is not allowed"):
        table.drop_before(9)


def test_round_starts_hold_each_rounds_first_post_and_shift_with_compaction() -> None:
    """``sim.round_start`` (an int64 array) holds each round's first post id through 150
    rounds, shifted by what compaction dropped; an array handed out earlier keeps its
    values."""
    rounds = 150
    sims = {}
    for compact in (False, True):
        env = gym.make("PolicySim-Rec-v0", **{**SMALL, "rounds": rounds})
        sim = env.unwrapped.sim
        sim.compact_posts_enabled = compact
        env.reset(seed=5)
        early = None
        for t in range(rounds):
            env.step(np.full(env.action_space.shape, env.unwrapped.no_op))
            if t == 10:
                early = sim.round_start
                early_values = early.tolist()
        assert early is not None and early.tolist() == early_values
        assert sim.round_start.dtype == np.int64 and len(sim.round_start) == rounds + 2
        sims[compact] = sim
    full, compacted = sims[False], sims[True]
    assert compacted.posts_dropped > 0
    round_of_post = full.posts.round[: len(full.posts)]
    first_post = np.searchsorted(round_of_post, np.arange(rounds + 1), side="left")
    np.testing.assert_array_equal(full.round_start[1:], first_post)
    np.testing.assert_array_equal(
        compacted.round_start, np.maximum(full.round_start - compacted.posts_dropped, 0)
    )
