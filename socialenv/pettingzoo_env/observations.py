"""What a controlled user observes: the feed the platform will serve it this round, and itself.

``"feed"`` (F, d + 11): per slot the post embedding and :data:`FEED_FEATURES`;
``"feed_mask"`` (F,); ``"state"`` (12,): :data:`STATE_FEATURES`; ``"embedding"`` (2d,): the
user's profile ⊕ memory embedding. The feed is the one the round then serves (the
recommender is wrapped in :class:`CachedFeeds`), before the platform's own picks of the
round, with the user's own posts removed and the posts moved to the front.

The platform agent observes the gym env's observation with ``action_mask`` renamed
``arm_mask`` (:func:`platform_observation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from agent_models.types import FeedChannel
from socialenv.core import kernels
from socialenv.core.simulation import Stream

#: Per-slot scalar features of a user's feed observation (after the post embedding).
FEED_FEATURES: tuple[str, ...] = (
    "post_stance",
    "author_stance",
    "stance_gap",
    "toxicity",
    "log_engagement",
    "age",
    "misinfo",
    "relational",
    "personalized",
    "headline",
    "similarity",
)
#: A user's own state in its observation.
STATE_FEATURES: tuple[str, ...] = (
    "active",
    "stance",
    "opinion",
    "discrete_stance",
    "misinformed",
    "exposure",
    "activity",
    "toxicity_propensity",
    "susceptibility",
    "log_followers",
    "log_followees",
    "progress",
)


class CachedFeeds:
    """Recommender wrapper that remembers the last feeds it built, so the feed shown to the
    controlled users is exactly the one the round then serves (same inputs, same stream)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._key: tuple | None = None
        self._value: tuple[np.ndarray, np.ndarray] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def clear(self) -> None:
        self._key, self._value = None, None

    def build_feeds(
        self, ctx: Any, active: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        key = (ctx.round, len(ctx.posts), len(ctx.graph), active.tobytes())
        if key != self._key or self._value is None:
            self._value = self.inner.build_feeds(ctx, active, rng)
            self._key = key
        feed, channel = self._value
        return feed.copy(), channel.copy()


def _compact(feed: np.ndarray, channel: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Move each row's posts to the front (order kept) and cut / pad to ``width`` columns."""
    order = np.argsort(feed < 0, axis=1, kind="stable")
    feed = np.take_along_axis(feed, order, axis=1)[:, :width]
    channel = np.take_along_axis(channel, order, axis=1)[:, :width]
    if feed.shape[1] < width:
        pad = width - feed.shape[1]
        feed = np.pad(feed, ((0, 0), (0, pad)), constant_values=-1)
        channel = np.pad(channel, ((0, 0), (0, pad)), constant_values=0)
    return feed, channel


@dataclass
class UserFeeds:
    """The feeds of C controlled users this round.

    Attributes:
        feed: (C, F) int64 post ids (-1 = empty slot), posts first.
        channel: (C, F) int8 :class:`FeedChannel` of each slot.
        active: (C,) bool, the user is active this round (an inactive user's feed is empty).
    """

    feed: np.ndarray
    channel: np.ndarray
    active: np.ndarray


def user_feeds(base: Any, controlled: np.ndarray, feeds: CachedFeeds, feed_slots: int) -> UserFeeds:
    """The feeds the ``controlled`` users of ``base`` (an unwrapped PolicySim env) see this
    round, cut / padded to ``feed_slots``."""
    sim = base.sim
    f = feed_slots
    posts, ctrl = sim.posts, controlled
    c = len(ctrl)
    active = sim.active
    pos = kernels.index_of(active, ctrl)
    is_active = pos >= 0
    feed = np.full((c, f), -1, np.int64)
    channel = np.zeros((c, f), np.int8)
    if is_active.any() and sim.round < base.config.rounds:
        all_feed, all_channel = feeds.build_feeds(
            sim.feed_context(), active, sim.rng(sim.round, Stream.FEED)
        )
        rows = pos[is_active]
        mine, ch = all_feed[rows], all_channel[rows]
        own = (mine >= 0) & (posts.author[np.maximum(mine, 0)] == ctrl[is_active][:, None])
        mine = kernels.dedupe_rows(np.where(own, -1, mine), in_place=True)
        feed[is_active], channel[is_active] = _compact(mine, ch, f)
    return UserFeeds(feed=feed, channel=channel, active=is_active)


def user_observations(
    base: Any, controlled: np.ndarray, seen: UserFeeds
) -> list[dict[str, np.ndarray]]:
    """Each controlled user's observation (in ``controlled`` order) of its feed ``seen``."""
    sim = base.sim
    users, posts, ctrl = sim.users, sim.posts, controlled
    c = len(ctrl)
    feed, channel, is_active = seen.feed, seen.channel, seen.active
    valid = feed >= 0
    p = np.maximum(feed, 0)
    opinion = users.opinion[ctrl][:, None]
    engagement = (posts.likes[p] + posts.retweets[p] + posts.replies[p] + posts.dislikes[p]).astype(
        np.float32
    )
    features = np.stack(
        [
            posts.stance[p],
            users.stance[posts.author[p]],
            np.abs(posts.stance[p] - opinion) / 2,
            posts.toxicity[p],
            np.log1p(engagement),
            (sim.round - posts.round[p]).astype(np.float32),
            posts.misinfo[p].astype(np.float32),
            (channel == FeedChannel.RELATIONAL).astype(np.float32),
            (channel == FeedChannel.PERSONALIZED).astype(np.float32),
            (channel == FeedChannel.HEADLINE).astype(np.float32),
            np.einsum("cd,cfd->cf", users.latent[ctrl], posts.latent[p]),
        ],
        axis=2,
    )
    feed_obs = np.concatenate([posts.latent[p], features], axis=2).astype(np.float32)
    feed_obs[~valid] = 0.0
    followers_indptr, _ = sim.graph.followers_csr()
    followees_indptr, _ = sim.graph.followees_csr()
    state = np.stack(
        [
            is_active.astype(np.float32),
            users.stance[ctrl],
            users.opinion[ctrl],
            users.discrete_stance[ctrl].astype(np.float32),
            users.misinformed[ctrl].astype(np.float32),
            users.exposure[ctrl],
            users.activity[ctrl],
            users.toxicity_propensity[ctrl],
            users.susceptibility[ctrl],
            np.log1p(np.diff(followers_indptr)[ctrl]).astype(np.float32),
            np.log1p(np.diff(followees_indptr)[ctrl]).astype(np.float32),
            np.full(c, sim.round / base.config.rounds, np.float32),
        ],
        axis=1,
    ).astype(np.float32)
    embedding = np.concatenate([users.latent[ctrl], users.memory_latent[ctrl]], axis=1).astype(
        np.float32
    )
    return [
        {
            "feed": feed_obs[i],
            "feed_mask": valid[i].astype(np.int8),
            "state": state[i],
            "embedding": embedding[i],
        }
        for i in range(c)
    ]


def user_observation_space(feed_slots: int, latent_dim: int) -> spaces.Dict:
    """A controlled user's observation space (a new object per call: one per agent, so
    seeding one agent's space does not touch another's)."""
    f, d = feed_slots, latent_dim
    return spaces.Dict(
        {
            "feed": spaces.Box(-np.inf, np.inf, (f, d + len(FEED_FEATURES)), np.float32),
            "feed_mask": spaces.MultiBinary(f),
            "state": spaces.Box(-np.inf, np.inf, (len(STATE_FEATURES),), np.float32),
            "embedding": spaces.Box(-np.inf, np.inf, (2 * d,), np.float32),
        }
    )


def platform_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """The gym env's observation (or its space's entries) with ``action_mask`` renamed
    ``arm_mask``: PettingZoo reserves ``action_mask`` for masks of the agent's own action space."""
    return {("arm_mask" if k == "action_mask" else k): v for k, v in obs.items()}
