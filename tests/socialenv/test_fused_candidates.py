"""The Rec env's candidates as three compiled kernels (issue 24, item 2): the same candidates,
sources and generator state as the unfused path (``socialenv.core.candidates``), on the
numba kernels and against the NumPy backend, in worlds as they evolve and in the corners
(empty windows and pools, engagement beyond the counting sort, unindexed clusters)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

from socialenv.core import candidates, kernels
from socialenv.core.candidates import CandidateSet, generate_candidates
from socialenv.core.platform import FeedContext
from socialenv.envs.rec import RecEnv

pytest.importorskip("numba")

MIXES: tuple[dict[str, int], ...] = (
    {"interest": 2, "opposite": 3, "popular": 2, "fresh": 1},
    {"interest": 3, "fresh": 2},
    {"opposite": 1, "popular": 5},
    {"fresh": 4},
    {"popular": 1, "interest": 1},
)
#: (window, popular_pool, oversample)
SETTINGS = ((2, 100, 4), (1, 3, 1), (5, 10_000, 2))


def _candidates(
    ctx: FeedContext,
    users: np.ndarray,
    mix: dict[str, int],
    setting: tuple[int, int, int],
    seed: int,
    fused: bool,
    backend: str = "numba",
) -> tuple[CandidateSet, float]:
    """The candidates one way, and the next uniform of the generator after them."""
    window, pool, oversample = setting
    rng = np.random.default_rng(seed)
    previous_backend, previous_users = kernels.BACKEND, candidates.FUSED_CANDIDATE_USERS
    kernels.use_backend(backend)
    candidates.FUSED_CANDIDATE_USERS = previous_users if fused else 0
    try:
        got = generate_candidates(ctx, users, mix, window, pool, rng, oversample)
    finally:
        kernels.use_backend(previous_backend)
        candidates.FUSED_CANDIDATE_USERS = previous_users
    return got, rng.random()


def _assert_all_ways_alike(ctx: FeedContext, users: np.ndarray, seed: int) -> None:
    for mix in MIXES:
        for setting in SETTINGS:
            fused, after = _candidates(ctx, users, mix, setting, seed, fused=True)
            for way in (
                _candidates(ctx, users, mix, setting, seed, fused=False),
                _candidates(ctx, users, mix, setting, seed, fused=False, backend="numpy"),
            ):
                expected, expected_after = way
                assert fused.post.dtype == expected.post.dtype == np.int64
                assert fused.source.dtype == expected.source.dtype == np.int8
                np.testing.assert_array_equal(fused.post, expected.post)
                np.testing.assert_array_equal(fused.source, expected.source)
                assert after == expected_after  # the same uniforms were taken


def _world(num_users: int, seed: int, rounds: int) -> RecEnv:
    env = RecEnv(num_users=num_users, rounds=rounds + 1)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


@pytest.mark.parametrize(("num_users", "seed"), [(300, 1), (1000, 0)])
def test_fused_candidates_equal_the_unfused_path_round_after_round(num_users, seed):
    env = _world(num_users, seed, rounds=6)
    for t in range(6):
        sim = env.sim
        draw = np.random.default_rng(t)
        for size in (1, 7, min(len(sim.active), 60)):
            users = np.sort(draw.choice(sim.active, size=size, replace=False))
            _assert_all_ways_alike(sim.feed_context(), users, seed=10 * t + size)
        env.step(env.action_space.sample())


def _corner(ctx: FeedContext, **posts_columns: Any) -> FeedContext:
    posts = copy.deepcopy(ctx.posts)
    for name, value in posts_columns.items():
        getattr(posts, name)[: len(posts)] = value
    return dataclasses.replace(ctx, posts=posts)


def test_fused_candidates_equal_the_unfused_path_in_the_corners():
    env = _world(400, 3, rounds=3)
    for _ in range(3):
        env.step(env.action_space.sample())
    ctx = env.sim.feed_context()
    users = np.sort(np.random.default_rng(0).choice(env.sim.active, size=30, replace=False))
    starts = ctx.round_start
    corners = {
        # no post in the last rounds (empty window and last round), then none in the last one
        "empty windows": dataclasses.replace(ctx, round_start=np.full_like(starts, starts[-1])),
        "empty last round": dataclasses.replace(
            ctx, round_start=np.concatenate([starts[:-1], starts[-2:-1]])
        ),
        "every post recommended": _corner(ctx, recommended=True),
        "no opposite pool": _corner(ctx, stance=np.float32(0.9)),
        "a stance on the cut": _corner(ctx, stance=np.float32(-1 / 3)),
        "engagement past the counting sort": _corner(ctx, likes=np.int32(10**7)),
        "negative engagement": _corner(ctx, likes=np.int32(-5)),
        "a cluster the kernel does not index": _corner(ctx, cluster=np.int16(999)),
    }
    for corner in corners.values():
        _assert_all_ways_alike(corner, users, seed=5)


def test_the_fused_path_runs_up_to_its_threshold_only(monkeypatch):
    env = _world(1000, 0, rounds=2)
    env.step(env.action_space.sample())
    ctx = env.sim.feed_context()
    calls: list[int] = []
    draws = kernels.candidate_draws

    def spy(*args: Any) -> None:
        calls.append(len(args[2]))
        draws(*args)

    monkeypatch.setattr(kernels, "candidate_draws", spy)
    monkeypatch.setattr(candidates, "FUSED_CANDIDATE_USERS", 20)
    active = env.sim.active
    for size in (20, 21):
        _candidates(ctx, active[:size], MIXES[0], SETTINGS[0], 0, fused=True)
    assert calls == [20]
