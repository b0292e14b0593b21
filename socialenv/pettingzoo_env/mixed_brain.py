"""The brain of a mixed population: controlled users act from outside, the rest by a brain.

:class:`ExternalActionBrain` wraps the env's brain (surrogate, LLM or an ABM population):
each round the controlled users' rows come from the behaviours set with
:meth:`ExternalActionBrain.set_actions` (reactions only to posts actually delivered to the
user this round), every other active user's from one batched call of the inner brain;
:func:`merge_outputs` joins the two. Controlled users write civil text unless
``reply_toxicity`` / ``post_toxicity`` say otherwise; their stance, misinformation state and
memory keep evolving by the platform's and the inner brain's rules.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from agent_models.base import Brain
from agent_models.types import Behaviour, PostColumns, RoundInput, RoundOutput, UserColumns
from socialenv.core import kernels
from socialenv.pettingzoo_env.actions import ExternalActions

_REACTION_KINDS = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)


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
    post_latent = (
        np.concatenate(latents).astype(np.float32)
        if latents
        else (np.zeros((0, d), np.float32) if d is not None else None)
    )
    return RoundOutput(
        react_user=_cat([inner.react_user, external.react_user], np.int64),
        react_post=_cat([inner.react_post, external.react_post], np.int64),
        react_kind=_cat([inner.react_kind, external.react_kind], np.int8),
        react_stance=_cat([inner.react_stance, external.react_stance], np.float32),
        react_toxicity=_cat([inner.react_toxicity, external.react_toxicity], np.float32),
        react_text=_texts(
            inner.react_text, len(inner.react_user), external.react_text, len(external.react_user)
        ),
        post_user=_cat([inner.post_user, external.post_user], np.int64),
        post_latent=post_latent,
        post_stance=_cat([inner.post_stance, external.post_stance], np.float32),
        post_toxicity=_cat([inner.post_toxicity, external.post_toxicity], np.float32),
        post_misinfo=_cat([inner.post_misinfo, external.post_misinfo], np.bool_),
        post_text=_texts(
            inner.post_text, len(inner.post_user), external.post_text, len(external.post_user)
        ),
        follow_src=_cat([inner.follow_src, external.follow_src], np.int64),
        follow_dst=_cat([inner.follow_dst, external.follow_dst], np.int64),
        unfollow_src=_cat([inner.unfollow_src, external.unfollow_src], np.int64),
        unfollow_dst=_cat([inner.unfollow_dst, external.unfollow_dst], np.int64),
        stance_user=inner.stance_user,
        stance_discrete=inner.stance_discrete,
        opinion_user=inner.opinion_user,
        opinion_value=inner.opinion_value,
        misinformed_user=inner.misinformed_user,
        misinformed_value=inner.misinformed_value,
        invalid=dict(inner.invalid),
        stats={**inner.stats, **external.stats},
    )


class ExternalActionBrain(Brain):
    """A brain for mixed populations: controlled users act as told from outside, every
    other active user as the ``inner`` brain decides (in one batched call without them).

    Set the controlled users' behaviours with :meth:`set_actions` before each round; a
    controlled user without actions does nothing. Reactions apply only to posts that were
    actually delivered to the user this round (see :mod:`socialenv.pettingzoo_env`).
    """

    def __init__(
        self,
        inner: Brain,
        controlled: np.ndarray | None = None,
        reply_toxicity: float = 0.0,
        post_toxicity: float = 0.0,
    ) -> None:
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
            round_input,
            active=active[~outside],
            feed=round_input.feed[~outside],
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
        row = kernels.index_of(ri.active, acts.user)
        here = row >= 0
        user, observed = acts.user[here], acts.feed[here]
        behaviours, post = acts.behaviours[here], acts.post[here]
        slot = np.searchsorted(self.controlled, user)  # controlled is sorted
        delivered_feed = ri.feed[row[here]]  # (C', F')
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
        react_stance = np.where(
            is_retweet, posts.stance[react_post], users.opinion[react_user]
        ).astype(np.float32)
        react_toxicity = np.where(react_kind == Behaviour.REPLY, self.reply_toxicity, 0.0).astype(
            np.float32
        )

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
            react_user=react_user,
            react_post=react_post,
            react_kind=react_kind,
            react_stance=react_stance,
            react_toxicity=react_toxicity,
            post_user=poster.astype(np.int64),
            post_latent=latent,
            post_stance=users.opinion[poster].astype(np.float32),
            post_toxicity=np.full(len(poster), self.post_toxicity, np.float32),
            post_misinfo=users.misinformed[poster].astype(bool),
            follow_src=user[follow_c],
            follow_dst=posts.author[observed[follow_c, follow_s]],
            unfollow_src=user[unfollow_c],
            unfollow_dst=posts.author[observed[unfollow_c, unfollow_s]],
            stats={
                "external_reactions": float(len(react_user)),
                "external_posts": float(len(poster)),
                "external_dropped_reactions": float(dropped.sum()),
            },
        )
