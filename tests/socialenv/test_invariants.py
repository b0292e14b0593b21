"""Property-based checks of the world's invariants over random configs and actions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_models.types import FeedChannel
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv


def _check_world(env: RecEnv | ExposureEnv) -> None:
    sim = env.sim
    users = sim.users
    assert np.all((users.stance >= -1) & (users.stance <= 1))
    assert np.all((users.opinion >= -1) & (users.opinion <= 1))
    assert np.all((users.exposure >= 0) & (users.exposure <= 1))
    assert np.all((users.activity >= 0) & (users.activity <= 1))
    posts = sim.posts.view()
    assert np.all((posts.toxicity >= 0) & (posts.toxicity <= 1))
    assert np.all((posts.stance >= -1) & (posts.stance <= 1))
    src, dst = sim.graph.src, sim.graph.dst
    assert not np.any(src == dst), "self-follow"
    assert len(np.unique(src * len(users.stance) + dst)) == len(src), "duplicate edge"
    assert np.all(np.diff(sim.graph.keys) > 0)
    result = env._last_result
    if result is not None:
        feed = result.feed
        round_first_post = sim.round_start[result.round + 1]
        assert np.all(feed >= -1)
        assert np.all(feed < round_first_post), "feed shows a post that did not exist yet"
        shown = feed[feed >= 0]
        assert np.all(posts.author[shown] != np.repeat(result.active, (feed >= 0).sum(axis=1)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_users=st.integers(10, 250),
    seed=st.integers(0, 2**16),
    relational=st.integers(0, 6),
    personalized=st.integers(0, 6),
    headline=st.integers(0, 3),
    hops=st.integers(0, 3),
    alpha=st.floats(0, 1),
    exposure=st.booleans(),
)
def test_invariants_hold_over_an_episode(
    num_users: int,
    seed: int,
    relational: int,
    personalized: int,
    headline: int,
    hops: int,
    alpha: float,
    exposure: bool,
) -> None:
    cls = ExposureEnv if exposure else RecEnv
    kwargs = dict(
        num_users=num_users,
        rounds=4,
        recommender={"relational": relational, "personalized": personalized, "headline": headline},
        context={"hops": hops, "alpha": alpha},
    )
    lever = (
        {"exposure_users": 6}
        if exposure
        else {
            "candidate_users": 5,
            "candidates": {"interest": 1, "opposite": 1, "popular": 1, "fresh": 1},
            "budget": min(2, personalized),
        }
    )
    if lever.get("budget") == 0:  # Rec without recommended slots has nothing for a policy to fill
        with pytest.raises(ValueError, match="personalized=0"):
            cls(**kwargs, lever={**lever, "budget": 1})
        return
    env = cls(**kwargs, lever=lever)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    _check_world(env)
    for _ in range(4):
        assert np.isfinite(obs["arms"]).all()
        action = rng.integers(0, env.num_arms + 1, env.slate_size)
        obs, reward, _, _, info = env.step(action)
        assert np.isfinite(reward) and reward == pytest.approx(
            info["metrics"]["objective"] if exposure else reward
        )
        assert np.all((info["arm_rewards"] >= 0) & (info["arm_rewards"] <= 1))
        assert info["arm_applied"].sum() <= env.slate_size
        _check_world(env)
        channel = env._last_result.feed_channel
        injected = channel == int(FeedChannel.INJECTED)
        assert injected.sum(axis=1).max(initial=0) <= env.per_user
        if exposure:
            assert not injected.any()
