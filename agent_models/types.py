"""The small data types shared by the platform (`socialenv`) and the user brains.

A brain never sees the platform's internals: once per round it receives a
:class:`RoundInput` (who is active, what is in their feeds, read-only columns of the
world) and returns a :class:`RoundOutput` (what every active user did). Everything is
columnar: one NumPy array per field, one row per user / post / action.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum

import numpy as np


class Behaviour(IntEnum):
    """User behaviours of the paper (§2.1.2). Several may be chosen in one round."""

    POST = 0
    RETWEET = 1
    REPLY = 2
    LIKE = 3
    DISLIKE = 4
    FOLLOW = 5
    UNFOLLOW = 6
    NOTHING = 7


BEHAVIOUR_NAMES: tuple[str, ...] = tuple(b.name.lower() for b in Behaviour)
#: Behaviours that react to a post in the feed (one row of ``RoundOutput.react_*``).
REACTION_BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour.RETWEET,
    Behaviour.REPLY,
    Behaviour.LIKE,
    Behaviour.DISLIKE,
)


class PostKind(IntEnum):
    """What a row of the post table is."""

    POST = 0
    RETWEET = 1
    REPLY = 2


class FeedChannel(IntEnum):
    """Which recommender channel put a post in a feed (§2.2.1)."""

    RELATIONAL = 0
    PERSONALIZED = 1
    HEADLINE = 2
    INJECTED = 3


@dataclass
class Categorical:
    """A categorical column: ``codes`` (N,) int32 index into ``vocab``."""

    codes: np.ndarray
    vocab: tuple[str, ...]

    def __getitem__(self, i: int) -> str:
        return self.vocab[int(self.codes[i])]


@dataclass
class Profiles:
    """The paper's four profile attributes (§2.1.1) as columns for N users.

    Attributes:
        identity: likely identity (e.g. "journalist").
        interests: (N, T) bool multi-hot over ``topics``: interested areas.
        topics: names of the T interest areas.
        posting_style: e.g. "sarcastic, short, many hashtags".
        interaction_role: role derived from interaction statistics (e.g. "broadcaster").
        post_retweet_ratio, reply_frequency, follower_following_ratio: (N,) float32, the
            interaction-behaviour statistics the role is derived from.
        names: optional (N,) screen names (real data); synthetic users are "user_<id>".
    """

    identity: Categorical
    interests: np.ndarray
    topics: tuple[str, ...]
    posting_style: Categorical
    interaction_role: Categorical
    post_retweet_ratio: np.ndarray
    reply_frequency: np.ndarray
    follower_following_ratio: np.ndarray
    names: list[str] | None = None

    def __len__(self) -> int:
        return len(self.identity.codes)

    def name(self, i: int) -> str:
        return self.names[i] if self.names is not None else f"user_{i}"

    def describe(self, i: int) -> dict[str, str]:
        """The four attributes of user ``i`` as text, for prompting."""
        areas = [t for t, on in zip(self.topics, self.interests[i], strict=True) if on]
        return {
            "likely_identity": self.identity[i],
            "interested_areas": ", ".join(areas) if areas else "general news",
            "posting_style": self.posting_style[i],
            "interaction_behaviour": (
                f"{self.interaction_role[i]} (posts/retweets {self.post_retweet_ratio[i]:.1f}, "
                f"replies {self.reply_frequency[i]:.0%} of activity, "
                f"followers/following {self.follower_following_ratio[i]:.1f})"
            ),
        }

    def subset(self, index: np.ndarray) -> Profiles:
        """Profiles of the users ``index`` (renumbered 0..len(index)-1)."""
        return Profiles(
            identity=Categorical(self.identity.codes[index], self.identity.vocab),
            interests=self.interests[index],
            topics=self.topics,
            posting_style=Categorical(self.posting_style.codes[index], self.posting_style.vocab),
            interaction_role=Categorical(
                self.interaction_role.codes[index], self.interaction_role.vocab
            ),
            post_retweet_ratio=self.post_retweet_ratio[index],
            reply_frequency=self.reply_frequency[index],
            follower_following_ratio=self.follower_following_ratio[index],
            names=None if self.names is None else [self.names[int(j)] for j in index],
        )


@dataclass
class UserColumns:
    """Read-only view of all N users handed to a brain.

    Attributes:
        profiles: the four profile attributes.
        latent: (N, d) float32 interest embedding (profile embedding of Eq. 7).
        memory_latent: (N, d) float32 embedding of recent memory (Eq. 7), kept by the platform
            as an exponential moving average of the posts a user engaged with.
        stance: (N,) float32 smoothed stance S_i^t in [-1, 1] (Eq. 2).
        opinion: (N,) float32 continuous latent opinion in [-1, 1] (surrogate brain state;
            the LLM brain leaves it equal to ``stance``).
        activity: (N,) float32 probability of being active in a round.
        toxicity_propensity: (N,) float32 in [0, 1].
        susceptibility: (N,) float32 in [0, 1], to misinformation.
        misinformed: (N,) bool, m_i^t of Eq. 10.
        exposure: (N,) float32 in [0, 1], p_i^t: probability a post of i passes the filter.
    """

    profiles: Profiles
    latent: np.ndarray
    memory_latent: np.ndarray
    stance: np.ndarray
    opinion: np.ndarray
    activity: np.ndarray
    toxicity_propensity: np.ndarray
    susceptibility: np.ndarray
    misinformed: np.ndarray
    exposure: np.ndarray

    def __len__(self) -> int:
        return len(self.stance)


@dataclass
class PostColumns:
    """Read-only view of the P posts created so far (row index = post id).

    Attributes:
        author: (P,) int64 user id.
        round: (P,) int32 round created (-1 = history before the simulation).
        kind: (P,) int8 :class:`PostKind`.
        parent: (P,) int64 post id a retweet/reply refers to, -1 otherwise.
        latent: (P, d) float32 content embedding.
        stance: (P,) float32 stance expressed, in [-1, 1].
        toxicity: (P,) float32 in [0, 1].
        misinfo: (P,) bool, carries the misinformation message.
        likes, dislikes, retweets, replies: (P,) int32 engagement counters.
        text: optional texts (None on the text-free surrogate path).
    """

    author: np.ndarray
    round: np.ndarray
    kind: np.ndarray
    parent: np.ndarray
    latent: np.ndarray
    stance: np.ndarray
    toxicity: np.ndarray
    misinfo: np.ndarray
    likes: np.ndarray
    dislikes: np.ndarray
    retweets: np.ndarray
    replies: np.ndarray
    text: list[str | None] | None

    def __len__(self) -> int:
        return len(self.author)


@dataclass(frozen=True)
class NewsEvent:
    """A news item injected at ``round``: every user sees it; it pulls opinion by ``shift``."""

    round: int
    headline: str
    shift: float


@dataclass
class RoundInput:
    """What a brain sees in one round.

    Attributes:
        round: round index t (0-based).
        active: (B,) int64 ids of the users acting this round.
        feed: (B, F) int64 post ids shown to each active user, -1 = empty slot.
        feed_channel: (B, F) int8 :class:`FeedChannel` of each slot.
        users, posts: read-only columns of the world.
        following_indptr, following_indices: CSR of the follow graph (row u lists whom u follows).
        news: news events of this round.
        topic: the scenario's topic description.
        misinformation_message: the message misinformed users spread (None if the scenario
            has none).
        rng: generator for this round's random draws (derived from the env seed).
    """

    round: int
    active: np.ndarray
    feed: np.ndarray
    feed_channel: np.ndarray
    users: UserColumns
    posts: PostColumns
    following_indptr: np.ndarray
    following_indices: np.ndarray
    news: list[NewsEvent]
    topic: str
    misinformation_message: str | None
    rng: np.random.Generator

    def followees(self, user: int) -> np.ndarray:
        return self.following_indices[self.following_indptr[user] : self.following_indptr[user + 1]]


def _empty(dtype, *shape: int) -> np.ndarray:
    return np.zeros(shape if shape else (0,), dtype=dtype)


@dataclass
class RoundOutput:
    """What the active users did in one round, as columns.

    Reactions to feed posts (retweet, reply, like, dislike), one row each:
        react_user (M,) int64, react_post (M,) int64, react_kind (M,) int8 :class:`Behaviour`,
        react_stance (M,) float32 stance expressed (replies/retweets), react_toxicity (M,)
        float32 in [0, 1] of the reaction's text (0 for likes), react_text (M texts) or None.
    New original posts, one row each:
        post_user (P,) int64, post_latent (P, d) float32, post_stance (P,), post_toxicity (P,),
        post_misinfo (P,) bool, post_text (P texts) or None.
    Graph edits: follow_src/follow_dst, unfollow_src/unfollow_dst (E,) int64.
    Stance observations for Eq. 2: stance_user (S,) int64, stance_discrete (S,) int8 in {-1,0,1}.
    Latent opinions (surrogate): opinion_user (S',) int64, opinion_value (S',) float32.
    Misinformation state m^{t+1}: misinformed_user (Q,) int64, misinformed_value (Q,) bool.
    Model-output problems: ``invalid`` maps a reason to how many agent answers had it; an
        agent with an invalid answer does nothing that round.
    ``stats`` carries brain-specific numbers for ``info`` (token counts, timings).
    """

    react_user: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    react_post: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    react_kind: np.ndarray = field(default_factory=lambda: _empty(np.int8))
    react_stance: np.ndarray = field(default_factory=lambda: _empty(np.float32))
    react_toxicity: np.ndarray = field(default_factory=lambda: _empty(np.float32))
    react_text: list[str | None] | None = None
    post_user: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    post_latent: np.ndarray | None = None
    post_stance: np.ndarray = field(default_factory=lambda: _empty(np.float32))
    post_toxicity: np.ndarray = field(default_factory=lambda: _empty(np.float32))
    post_misinfo: np.ndarray = field(default_factory=lambda: _empty(np.bool_))
    post_text: list[str | None] | None = None
    follow_src: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    follow_dst: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    unfollow_src: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    unfollow_dst: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stance_user: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    stance_discrete: np.ndarray = field(default_factory=lambda: _empty(np.int8))
    opinion_user: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    opinion_value: np.ndarray = field(default_factory=lambda: _empty(np.float32))
    misinformed_user: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    misinformed_value: np.ndarray = field(default_factory=lambda: _empty(np.bool_))
    invalid: dict[str, int] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)

    def validate(self, num_users: int, num_posts: int, embedding_dim: int) -> None:
        """Raise ``ValueError`` naming the field if shapes or ids are inconsistent."""
        m = len(self.react_user)
        for name in ("react_post", "react_kind", "react_stance", "react_toxicity"):
            if len(getattr(self, name)) != m:
                raise ValueError(
                    f"RoundOutput.{name} has length {len(getattr(self, name))}, expected {m} (= len(react_user))"
                )
        p = len(self.post_user)
        for name in ("post_stance", "post_toxicity", "post_misinfo"):
            if len(getattr(self, name)) != p:
                raise ValueError(
                    f"RoundOutput.{name} has length {len(getattr(self, name))}, expected {p} (= len(post_user))"
                )
        if p and (self.post_latent is None or self.post_latent.shape != (p, embedding_dim)):
            shape = None if self.post_latent is None else self.post_latent.shape
            raise ValueError(
                f"RoundOutput.post_latent has shape {shape}, expected ({p}, {embedding_dim})"
            )
        for name, limit in (
            ("react_user", num_users),
            ("react_post", num_posts),
            ("post_user", num_users),
            ("follow_src", num_users),
            ("follow_dst", num_users),
            ("unfollow_src", num_users),
            ("unfollow_dst", num_users),
            ("stance_user", num_users),
            ("opinion_user", num_users),
            ("misinformed_user", num_users),
        ):
            arr = getattr(self, name)
            if len(arr) and (arr.min() < 0 or arr.max() >= limit):
                raise ValueError(f"RoundOutput.{name} holds ids outside [0, {limit})")
        if len(self.stance_discrete) and not np.isin(self.stance_discrete, (-1, 0, 1)).all():
            raise ValueError("RoundOutput.stance_discrete must hold only -1, 0, 1")
        for name in ("react_toxicity", "post_toxicity"):
            arr = getattr(self, name)
            if len(arr) and (arr.min() < 0 or arr.max() > 1):
                raise ValueError(f"RoundOutput.{name} must lie in [0, 1]")

    def field_names(self) -> list[str]:
        return [f.name for f in fields(self)]
