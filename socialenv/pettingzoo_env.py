"""PettingZoo ParallelEnv view of PolicySim: users (and optionally the platform) as agents.

    import socialenv
    env = socialenv.parallel_env("PolicySim-Rec-v0", controlled_users=10, num_users=1000)
    obs, infos = env.reset(seed=0)
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        obs, rewards, terminations, truncations, infos = env.step(actions)

**Agents.** ``"user_<id>"`` for each *controlled* user (default the first 10 ids; pass a
list of ids for others) and, with ``platform_agent=True`` (default), ``"platform"``. Every
other user keeps the env's brain (surrogate, LLM or an ABM population), so populations are
mixed: controlled agents act from outside, the rest from the brain, in the same round. One
``step`` is one platform round; agents are truncated together after ``rounds`` rounds.

**User observation** (``Dict``), built from the feed the platform will serve this round:
    "feed": (F, d + 11) float32, per slot the post embedding (d) and :data:`FEED_FEATURES`.
    "feed_mask": (F,) int8, 1 where the slot holds a post.
    "state": (12,) float32, :data:`STATE_FEATURES` (``active`` is 0 when the user is not
        active this round: its action is then ignored and its feed is empty).
    "embedding": (2d,) float32, the user's profile ⊕ memory embedding (Eq. 7).
F = relational + personalized + headline slots (``feed_slots`` to override).

**User action**: ``MultiBinary(F·6 + 1)``: for slot s, entries ``6s .. 6s+5`` are
:data:`USER_BEHAVIOURS` (like, dislike, retweet, reply, follow the author, unfollow the
author) and the last entry writes an original post. Several behaviours may be chosen at
once, all zeros is "do nothing". :func:`encode_user_action` builds one from a (F, 6) array.

**Platform agent**: observation = the gym env's (``"arms"`` (K, D), ``"arm_mask"`` (K,) —
renamed from ``action_mask``, which PettingZoo reserves for masks of the agent's own action
space — and the optional user/graph arrays); action = the env's
``MultiDiscrete([K + 1] * slate_size)`` (or its ``Box`` of scores with
``action_format="scores"``); reward = the env's reward. Without a platform agent,
``platform_policy`` (a policy name such as ``"eenet"``, a policy object, or None = no
intervention) chooses the slate and learns from its rewards.

**Rewards of users**: the weighted reactions the user's posts received this round
(``user_reward_weights``, default like +1, retweet +1, reply +1, dislike −1).

**Timing within a round.** All agents move simultaneously: controlled users see the feed
built by the platform's channels before the platform's own action of the round, so they do
not see the posts the platform's policy recommends in the same round; a post that the
policy's picks then displace from a sampled user's recommended slots, or that exposure
control hides, cannot be reacted to (the reaction is dropped and counted in the user's info
as ``dropped_reactions``). Controlled users write civil text unless ``reply_toxicity`` /
``post_toxicity`` say otherwise; their stance, misinformation state and memory keep evolving
by the platform's and the inner brain's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv

from agent_models.base import Brain
from agent_models.types import (
    Behaviour,
    FeedChannel,
    PostColumns,
    RoundInput,
    RoundOutput,
    UserColumns,
)
from socialenv.platform import dedupe_rows
from socialenv.simulation import Stream

PLATFORM = "platform"
#: Behaviours of a controlled user on one feed slot (the layout of its action).
USER_BEHAVIOURS: tuple[str, ...] = ("like", "dislike", "retweet", "reply", "follow", "unfollow")
_REACTION_KINDS = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)
#: Per-slot scalar features of a user's feed observation (after the post embedding).
FEED_FEATURES: tuple[str, ...] = (
    "post_stance", "author_stance", "stance_gap", "toxicity", "log_engagement", "age",
    "misinfo", "relational", "personalized", "headline", "similarity",
)
#: A user's own state in its observation.
STATE_FEATURES: tuple[str, ...] = (
    "active", "stance", "opinion", "discrete_stance", "misinformed", "exposure", "activity",
    "toxicity_propensity", "susceptibility", "log_followers", "log_followees", "progress",
)
DEFAULT_USER_REWARD_WEIGHTS: dict[str, float] = {"like": 1.0, "retweet": 1.0, "reply": 1.0, "dislike": -1.0}


def user_agent(user_id: int) -> str:
    return f"user_{int(user_id)}"


def encode_user_action(behaviours: np.ndarray, post: bool = False) -> np.ndarray:
    """The ``MultiBinary(F·6 + 1)`` action from ``behaviours`` (F, 6) bool (columns in
    :data:`USER_BEHAVIOURS` order) and the ``post`` flag."""
    behaviours = np.asarray(behaviours)
    if behaviours.ndim != 2 or behaviours.shape[1] != len(USER_BEHAVIOURS):
        raise ValueError(f"behaviours must have shape (F, {len(USER_BEHAVIOURS)}); got {behaviours.shape}")
    return np.concatenate([behaviours.astype(np.int8).reshape(-1), [np.int8(bool(post))]])


@dataclass
class ExternalActions:
    """Behaviours of C controlled users on the feeds they observed.

    Attributes:
        user: (C,) int64 user ids.
        feed: (C, F) int64 post ids the user observed (-1 = empty slot).
        behaviours: (C, F, 6) bool, :data:`USER_BEHAVIOURS` per slot.
        post: (C,) bool, write an original post.
    """

    user: np.ndarray
    feed: np.ndarray
    behaviours: np.ndarray
    post: np.ndarray


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _texts(a: list | None, n_a: int, b: list | None, n_b: int) -> list | None:
    if a is None and b is None:
        return None
    return list(a if a is not None else [None] * n_a) + list(b if b is not None else [None] * n_b)


def merge_outputs(inner: RoundOutput, external: RoundOutput) -> RoundOutput:
    """Rows of both outputs (reactions, posts, graph edits); user state updates (stance,
    opinion, misinformation) come from ``inner`` only."""
    d = None
    for latent in (inner.post_latent, external.post_latent):
        if latent is not None and latent.ndim == 2:
            d = latent.shape[1]
    latents = [x for x in (inner.post_latent, external.post_latent) if x is not None and len(x)]
    post_latent = np.concatenate(latents).astype(np.float32) if latents else (
        np.zeros((0, d), np.float32) if d is not None else None)
    return RoundOutput(
        react_user=_cat([inner.react_user, external.react_user], np.int64),
        react_post=_cat([inner.react_post, external.react_post], np.int64),
        react_kind=_cat([inner.react_kind, external.react_kind], np.int8),
        react_stance=_cat([inner.react_stance, external.react_stance], np.float32),
        react_toxicity=_cat([inner.react_toxicity, external.react_toxicity], np.float32),
        react_text=_texts(inner.react_text, len(inner.react_user), external.react_text, len(external.react_user)),
        post_user=_cat([inner.post_user, external.post_user], np.int64),
        post_latent=post_latent,
        post_stance=_cat([inner.post_stance, external.post_stance], np.float32),
        post_toxicity=_cat([inner.post_toxicity, external.post_toxicity], np.float32),
        post_misinfo=_cat([inner.post_misinfo, external.post_misinfo], np.bool_),
        post_text=_texts(inner.post_text, len(inner.post_user), external.post_text, len(external.post_user)),
        follow_src=_cat([inner.follow_src, external.follow_src], np.int64),
        follow_dst=_cat([inner.follow_dst, external.follow_dst], np.int64),
        unfollow_src=_cat([inner.unfollow_src, external.unfollow_src], np.int64),
        unfollow_dst=_cat([inner.unfollow_dst, external.unfollow_dst], np.int64),
        stance_user=inner.stance_user, stance_discrete=inner.stance_discrete,
        opinion_user=inner.opinion_user, opinion_value=inner.opinion_value,
        misinformed_user=inner.misinformed_user, misinformed_value=inner.misinformed_value,
        invalid=dict(inner.invalid), stats={**inner.stats, **external.stats},
    )


class ExternalActionBrain(Brain):
    """A brain for mixed populations: controlled users act as told from outside, every
    other active user as the ``inner`` brain decides (in one batched call without them).

    Set the controlled users' behaviours with :meth:`set_actions` before each round; a
    controlled user without actions does nothing. Reactions apply only to posts that were
    actually delivered to the user this round (see the module docstring).
    """

    def __init__(self, inner: Brain, controlled: np.ndarray | None = None,
                 reply_toxicity: float = 0.0, post_toxicity: float = 0.0) -> None:
        for name, value in (("reply_toxicity", reply_toxicity), ("post_toxicity", post_toxicity)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} is not allowed: a number in [0, 1]")
        self.inner = inner
        self.reply_toxicity = float(reply_toxicity)
        self.post_toxicity = float(post_toxicity)
        self.pending: ExternalActions | None = None
        #: per controlled user (aligned with ``controlled``), after each round: reactions
        #: applied, reactions dropped (post not delivered), whether it posted
        self.set_controlled(np.zeros(0, np.int64) if controlled is None else controlled)

    @property
    def embedding_dim(self) -> int | None:  # type: ignore[override]
        return self.inner.embedding_dim

    @property
    def needs_text(self) -> bool:  # type: ignore[override]
        return self.inner.needs_text

    def set_controlled(self, controlled: np.ndarray) -> None:
        """Set the controlled user ids (stored sorted and unique)."""
        self.controlled = np.unique(np.asarray(controlled, np.int64))
        self.last_reactions = np.zeros(len(self.controlled), np.int64)
        self.last_dropped = np.zeros(len(self.controlled), np.int64)
        self.last_posted = np.zeros(len(self.controlled), bool)

    def set_actions(self, actions: ExternalActions | None) -> None:
        self.pending = actions

    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> np.ndarray | None:
        self.pending = None
        return self.inner.reset(users, posts, seed)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_texts(texts)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "controlled": self.controlled.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])
        self.set_controlled(state["controlled"])

    def close(self) -> None:
        self.inner.close()

    def act(self, round_input: RoundInput) -> RoundOutput:
        active = round_input.active
        n = len(round_input.users)
        is_controlled = np.zeros(n, bool)
        is_controlled[self.controlled] = True
        outside = is_controlled[active]
        inner_input = replace(
            round_input, active=active[~outside], feed=round_input.feed[~outside],
            feed_channel=round_input.feed_channel[~outside],
        )
        inner_out = self.inner.act(inner_input)
        return merge_outputs(inner_out, self._external(round_input))

    def _external(self, ri: RoundInput) -> RoundOutput:
        """The controlled users' rows of the round."""
        c = len(self.controlled)
        self.last_reactions = np.zeros(c, np.int64)
        self.last_dropped = np.zeros(c, np.int64)
        self.last_posted = np.zeros(c, bool)
        acts = self.pending
        d = ri.users.latent.shape[1]
        if acts is None or len(acts.user) == 0 or len(ri.active) == 0:
            return RoundOutput(post_latent=np.zeros((0, d), np.float32))
        row = np.searchsorted(ri.active, acts.user)
        row_clipped = np.minimum(row, len(ri.active) - 1)
        here = (row < len(ri.active)) & (ri.active[row_clipped] == acts.user)
        user, observed = acts.user[here], acts.feed[here]
        behaviours, post = acts.behaviours[here], acts.post[here]
        slot = np.searchsorted(self.controlled, user)                           # controlled is sorted
        delivered_feed = ri.feed[row_clipped[here]]                              # (C', F')
        seen = observed >= 0
        delivered = seen & (observed[:, :, None] == delivered_feed[:, None, :]).any(axis=2)
        posts, users = ri.posts, ri.users

        r_user, r_post, r_kind = [], [], []
        for b, kind in enumerate(_REACTION_KINDS):
            ci, si = np.nonzero(behaviours[:, :, b] & delivered)
            r_user.append(user[ci])
            r_post.append(observed[ci, si])
            r_kind.append(np.full(len(ci), int(kind), np.int8))
        react_user, react_post = _cat(r_user, np.int64), _cat(r_post, np.int64)
        react_kind = _cat(r_kind, np.int8)
        is_retweet = react_kind == Behaviour.RETWEET
        react_stance = np.where(is_retweet, posts.stance[react_post], users.opinion[react_user]).astype(np.float32)
        react_toxicity = np.where(react_kind == Behaviour.REPLY, self.reply_toxicity, 0.0).astype(np.float32)

        follow_c, follow_s = np.nonzero(behaviours[:, :, 4] & delivered)
        unfollow_c, unfollow_s = np.nonzero(behaviours[:, :, 5] & delivered)
        poster = user[post.astype(bool)]
        latent = users.latent[poster].astype(np.float32)
        latent /= np.maximum(np.linalg.norm(latent, axis=1, keepdims=True), 1e-8)

        dropped = (behaviours[:, :, :4] & (seen & ~delivered)[:, :, None]).sum(axis=(1, 2))
        self.last_dropped[slot] = dropped
        self.last_reactions[slot] = (behaviours[:, :, :4] & delivered[:, :, None]).sum(axis=(1, 2))
        self.last_posted[slot] = post.astype(bool)
        return RoundOutput(
            react_user=react_user, react_post=react_post, react_kind=react_kind,
            react_stance=react_stance, react_toxicity=react_toxicity,
            post_user=poster.astype(np.int64), post_latent=latent,
            post_stance=users.opinion[poster].astype(np.float32),
            post_toxicity=np.full(len(poster), self.post_toxicity, np.float32),
            post_misinfo=users.misinformed[poster].astype(bool),
            follow_src=user[follow_c], follow_dst=posts.author[observed[follow_c, follow_s]],
            unfollow_src=user[unfollow_c], unfollow_dst=posts.author[observed[unfollow_c, unfollow_s]],
            stats={"external_reactions": float(len(react_user)), "external_posts": float(len(poster)),
                   "external_dropped_reactions": float(dropped.sum())},
        )


class _CachedFeeds:
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

    def build_feeds(self, ctx: Any, active: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
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


class PolicySimParallelEnv(ParallelEnv):
    """PettingZoo ParallelEnv over a PolicySim gym env; see the module docstring.

    Args:
        env_id: "PolicySim-Rec-v0" or "PolicySim-Exposure-v0".
        controlled_users: how many users are agents (ids 0..n−1) or a sequence of user ids.
        platform_agent: include the "platform" agent.
        platform_policy: without a platform agent: a policy name (origin, a bandit, a
            baseline), a policy object (``select``/``update`` or ``act``), or None (origin).
        feed_slots: F, the feed slots observed per user (default: the recommender's channel
            sizes summed).
        user_reward_weights: reaction kind -> weight of the user's reward.
        reply_toxicity, post_toxicity: toxicity of the texts controlled users write.
        render_mode: None, "ansi" or "rgb_array" (the gym env's frames).
        **env_kwargs: the gym env's arguments (``num_users``, ``rounds``, ``users`` — a
            brain, "surrogate", "llm" or an ABM name —, ``scenario``, ...).
    """

    metadata = {"name": "policysim_parallel_v0", "render_modes": ["ansi", "rgb_array"], "is_parallelizable": True}

    def __init__(self, env_id: str = "PolicySim-Rec-v0", controlled_users: int | Any = 10,
                 platform_agent: bool = True, platform_policy: Any = None,
                 feed_slots: int | None = None, user_reward_weights: dict[str, float] | None = None,
                 reply_toxicity: float = 0.0, post_toxicity: float = 0.0,
                 render_mode: str | None = None, **env_kwargs: Any) -> None:
        import socialenv  # noqa: F401 - registers the env ids
        from agent_models.factory import make_brain

        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r} is not allowed: use one of {self.metadata['render_modes']} or None")
        self.render_mode = render_mode
        users = env_kwargs.pop("users", "surrogate")
        if isinstance(users, str) and users not in ("surrogate", "llm"):
            from baselines.opinion_dynamics import make_population

            users = make_population(users)
        inner = make_brain(users, llm=env_kwargs.get("llm"), surrogate=env_kwargs.get("surrogate"))
        self.brain = ExternalActionBrain(inner, reply_toxicity=reply_toxicity, post_toxicity=post_toxicity)
        self.env = gym.make(env_id, users=self.brain, render_mode=render_mode, **env_kwargs)
        base = self.base = self.env.unwrapped
        n = base._num_users()
        if isinstance(controlled_users, int | np.integer) and not isinstance(controlled_users, bool):
            if not 0 <= controlled_users <= n:
                raise ValueError(f"controlled_users={controlled_users} is not allowed: an integer in [0, {n}] or a list of user ids")
            controlled = np.arange(int(controlled_users), dtype=np.int64)
        else:
            controlled = np.unique(np.asarray(list(controlled_users), np.int64))
            if len(controlled) and (controlled.min() < 0 or controlled.max() >= n):
                raise ValueError(f"controlled_users holds ids outside [0, {n})")
        self.controlled = controlled
        self.brain.set_controlled(controlled)
        self._feeds = _CachedFeeds(base.sim.recommender)
        base.sim.recommender = self._feeds

        rec = base.config.recommender
        self.feed_slots = int(feed_slots if feed_slots is not None else rec.relational + rec.personalized + rec.headline)
        if self.feed_slots < 1:
            raise ValueError(f"feed_slots={self.feed_slots} is not allowed: an integer >= 1")
        weights = dict(DEFAULT_USER_REWARD_WEIGHTS if user_reward_weights is None else user_reward_weights)
        unknown = set(weights) - {"like", "dislike", "retweet", "reply"}
        if unknown:
            raise ValueError(f"user_reward_weights has unknown key(s) {sorted(unknown)}: use like, dislike, retweet, reply")
        self._kind_weight = np.zeros(max(int(b) for b in Behaviour) + 1)
        for name, value in weights.items():
            self._kind_weight[int(Behaviour[name.upper()])] = float(value)

        self.platform_agent = bool(platform_agent)
        if self.platform_agent and platform_policy is not None:
            raise ValueError("platform_policy is used only without a platform agent (platform_agent=False)")
        if base.config.action_format == "scores" and not self.platform_agent:
            raise ValueError(
                'action_format="scores" needs the platform agent (platform_agent=True): a score '
                "action has no empty slot, so platform_policy slates and no intervention cannot "
                'be expressed in it (use action_format="slate")'
            )
        self._platform_policy_spec = platform_policy
        self.platform_policy = self._make_platform_policy(platform_policy)

        self.possible_agents = ([PLATFORM] if self.platform_agent else []) + [user_agent(u) for u in controlled]
        self.agents: list[str] = []
        d = base._latent_dim
        f = self.feed_slots
        self.observation_spaces: dict[str, spaces.Space] = {}
        self.action_spaces: dict[str, spaces.Space] = {}
        for u in controlled:
            # one space object per agent, so seeding one agent's space does not touch another's
            self.observation_spaces[user_agent(u)] = spaces.Dict({
                "feed": spaces.Box(-np.inf, np.inf, (f, d + len(FEED_FEATURES)), np.float32),
                "feed_mask": spaces.MultiBinary(f),
                "state": spaces.Box(-np.inf, np.inf, (len(STATE_FEATURES),), np.float32),
                "embedding": spaces.Box(-np.inf, np.inf, (2 * d,), np.float32),
            })
            self.action_spaces[user_agent(u)] = spaces.MultiBinary(f * len(USER_BEHAVIOURS) + 1)
        if self.platform_agent:
            platform_obs = {("arm_mask" if k == "action_mask" else k): s for k, s in base.observation_space.spaces.items()}
            self.observation_spaces[PLATFORM] = spaces.Dict(platform_obs)
            self.action_spaces[PLATFORM] = base.action_space
        self.state_space = spaces.Box(-1.0, 1.0, (2 * n,), np.float32)
        self._position = np.full(n, -1, np.int64)
        self._position[controlled] = np.arange(len(controlled))
        self._gym_obs: dict[str, Any] | None = None
        self._user_feed = np.full((len(controlled), f), -1, np.int64)
        self._user_active = np.zeros(len(controlled), bool)
        self._acted = np.zeros(len(controlled), bool)
        self.last_info: dict[str, Any] = {}

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    # ------------------------------------------------------------------ helpers
    def _make_platform_policy(self, spec: Any) -> Any:
        if spec is None or not isinstance(spec, str):
            return spec
        from baselines.policies import make_policy

        return make_policy(spec, self.base, seed=0)

    def _platform_obs(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {("arm_mask" if k == "action_mask" else k): v for k, v in obs.items()}

    def _observe_users(self) -> dict[str, dict[str, np.ndarray]]:
        base, sim = self.base, self.base.sim
        f = self.feed_slots
        users, posts, ctrl = sim.users, sim.posts, self.controlled
        c = len(ctrl)
        active = sim.active
        pos = np.searchsorted(active, ctrl)
        is_active = (pos < len(active)) & (active[np.minimum(pos, max(len(active) - 1, 0))] == ctrl) if len(active) else np.zeros(c, bool)
        feed = np.full((c, f), -1, np.int64)
        channel = np.zeros((c, f), np.int8)
        if is_active.any() and sim.round < base.config.rounds:
            all_feed, all_channel = self._feeds.build_feeds(sim.feed_context(), active, sim.rng(sim.round, Stream.FEED))
            rows = pos[is_active]
            mine, ch = all_feed[rows], all_channel[rows]
            own = (mine >= 0) & (posts.author[np.maximum(mine, 0)] == ctrl[is_active][:, None])
            mine = dedupe_rows(np.where(own, -1, mine))
            feed[is_active], channel[is_active] = _compact(mine, ch, f)
        self._user_feed = feed
        self._user_channel = channel
        self._user_active = is_active
        valid = feed >= 0
        p = np.maximum(feed, 0)
        opinion = users.opinion[ctrl][:, None]
        engagement = (posts.likes[p] + posts.retweets[p] + posts.replies[p] + posts.dislikes[p]).astype(np.float32)
        features = np.stack([
            posts.stance[p], users.stance[posts.author[p]], np.abs(posts.stance[p] - opinion) / 2,
            posts.toxicity[p], np.log1p(engagement), (sim.round - posts.round[p]).astype(np.float32),
            posts.misinfo[p].astype(np.float32),
            (channel == FeedChannel.RELATIONAL).astype(np.float32),
            (channel == FeedChannel.PERSONALIZED).astype(np.float32),
            (channel == FeedChannel.HEADLINE).astype(np.float32),
            np.einsum("cd,cfd->cf", users.latent[ctrl], posts.latent[p]),
        ], axis=2)
        feed_obs = np.concatenate([posts.latent[p], features], axis=2).astype(np.float32)
        feed_obs[~valid] = 0.0
        followers_indptr, _ = sim.graph.followers_csr()
        followees_indptr, _ = sim.graph.followees_csr()
        state = np.stack([
            is_active.astype(np.float32), users.stance[ctrl], users.opinion[ctrl],
            users.discrete_stance[ctrl].astype(np.float32), users.misinformed[ctrl].astype(np.float32),
            users.exposure[ctrl], users.activity[ctrl], users.toxicity_propensity[ctrl],
            users.susceptibility[ctrl], np.log1p(np.diff(followers_indptr)[ctrl]).astype(np.float32),
            np.log1p(np.diff(followees_indptr)[ctrl]).astype(np.float32),
            np.full(c, sim.round / base.config.rounds, np.float32),
        ], axis=1).astype(np.float32)
        embedding = np.concatenate([users.latent[ctrl], users.memory_latent[ctrl]], axis=1).astype(np.float32)
        return {
            user_agent(u): {"feed": feed_obs[i], "feed_mask": valid[i].astype(np.int8),
                            "state": state[i], "embedding": embedding[i]}
            for i, u in enumerate(ctrl)
        }

    def _observe(self) -> dict[str, Any]:
        obs: dict[str, Any] = self._observe_users()
        if self.platform_agent:
            obs = {PLATFORM: self._platform_obs(self._gym_obs), **obs}
        return obs

    def _external_actions(self, actions: dict[str, Any]) -> ExternalActions:
        f, b = self.feed_slots, len(USER_BEHAVIOURS)
        size = f * b + 1
        rows, decoded = [], []
        for i, u in enumerate(self.controlled):
            agent = user_agent(u)
            if agent not in actions or actions[agent] is None:
                continue
            a = np.asarray(actions[agent])
            if a.shape != (size,) or not np.isin(a, (0, 1)).all():
                raise ValueError(
                    f"action of {agent} must be a 0/1 array of shape ({size},) = feed_slots·{b} + 1 "
                    f"(behaviours {USER_BEHAVIOURS} per slot, then post); got shape {a.shape}"
                )
            rows.append(i)
            decoded.append(a.astype(bool))
        if not rows:
            return ExternalActions(np.zeros(0, np.int64), np.zeros((0, f), np.int64),
                                   np.zeros((0, f, b), bool), np.zeros(0, bool))
        arr = np.stack(decoded)
        idx = np.asarray(rows)
        return ExternalActions(user=self.controlled[idx], feed=self._user_feed[idx],
                               behaviours=arr[:, :-1].reshape(len(idx), f, b), post=arr[:, -1])

    # ------------------------------------------------------------------ PettingZoo API
    def reset(self, seed: int | None = None, options: dict | None = None):
        self._feeds.clear()
        if isinstance(self._platform_policy_spec, str):
            self.platform_policy = self._make_platform_policy(self._platform_policy_spec)
        self._gym_obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        obs = self._observe()
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if self.platform_agent:
            infos[PLATFORM] = dict(info)
        self.last_info = dict(info)
        return obs, infos

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode is over (all agents truncated): call reset()")
        unknown = set(actions) - set(self.possible_agents)
        if unknown:
            raise ValueError(f"actions for unknown agent(s) {sorted(unknown)}; agents: {self.agents}")
        base = self.base
        no_slate = np.full(base.slate_size, base.no_op, np.int64)
        gym_obs = self._gym_obs
        if self.platform_agent:
            slate = actions.get(PLATFORM)
            if slate is None and base.config.action_format == "scores":
                raise ValueError('the "platform" agent must act every step with action_format="scores" '
                                 "(one score per arm; a score action has no empty slot)")
            slate = no_slate if slate is None else slate
        elif self.platform_policy is None:
            slate = no_slate
        else:
            from baselines.episodes import slate_for

            slate = slate_for(self.platform_policy, gym_obs, self.env)
        self._acted = self._user_active.copy()
        self.brain.set_actions(self._external_actions(actions))
        try:
            self._gym_obs, reward, terminated, truncated, info = self.env.step(slate)
        finally:
            self.brain.set_actions(None)
        applied = info["arm_applied"]
        if not self.platform_agent and applied.any() and hasattr(self.platform_policy, "update"):
            self.platform_policy.update(gym_obs["arms"][info["arm_indices"][applied]], info["arm_rewards"][applied])
        out = base._last_result.output
        author = base.sim.posts.author[out.react_post]
        slot = self._position[author]
        mine = slot >= 0
        user_reward = np.bincount(slot[mine], weights=self._kind_weight[out.react_kind[mine]],
                                  minlength=len(self.controlled))
        obs = self._observe()
        rewards: dict[str, float] = {user_agent(u): float(user_reward[i]) for i, u in enumerate(self.controlled)}
        infos: dict[str, dict[str, Any]] = {
            user_agent(u): {"active": bool(self._acted[i]),
                            "reactions": int(self.brain.last_reactions[i]),
                            "dropped_reactions": int(self.brain.last_dropped[i]),
                            "posted": bool(self.brain.last_posted[i])}
            for i, u in enumerate(self.controlled)
        }
        if self.platform_agent:
            rewards = {PLATFORM: float(reward), **rewards}
            infos = {PLATFORM: dict(info), **infos}
        self.last_info = dict(info)
        done = bool(terminated or truncated)
        terminations = dict.fromkeys(self.agents, bool(terminated))
        truncations = dict.fromkeys(self.agents, bool(truncated))
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def inject_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Add a scenario event mid-run (see :mod:`socialenv.events`); same as the gym env's."""
        return self.base.inject_event(event)

    def interview(self, user_ids: Any, question: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Ask users a question without changing any state (see :mod:`socialenv.interview`)."""
        return self.base.interview(user_ids, question, **kwargs)

    def state(self) -> np.ndarray:
        """Global state (2N,) float32: every user's smoothed stance, then latent opinion."""
        users = self.base.sim.users
        return np.concatenate([users.stance, users.opinion]).astype(np.float32)

    def render(self) -> str | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def parallel_env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> PolicySimParallelEnv:
    """Build the PettingZoo ParallelEnv (see :class:`PolicySimParallelEnv` for arguments)."""
    return PolicySimParallelEnv(env_id, **kwargs)


def env(env_id: str = "PolicySim-Rec-v0", **kwargs: Any) -> AECEnv:
    """The same game as an AEC env (agents act one after another within a round; the round is
    played once the last agent has acted), by PettingZoo's own ``parallel_to_aec``
    conversion. Arguments as :class:`PolicySimParallelEnv`."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(PolicySimParallelEnv(env_id, **kwargs))
