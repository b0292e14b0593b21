"""Typed configuration. Every constant the paper does not publish is a named field here,
with its default documented in one place (see also ``shared/PAPER.md``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any


def _check(condition: bool, name: str, allowed: str, value: Any) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class RecommenderConfig:
    """The three feed channels of §2.2.1 and their sizes.

    Attributes:
        relational: posts from followees written in the previous round (paper: visible the
            round after posting).
        personalized: posts nearest the user's interests (profile ⊕ memory embedding).
        headline: globally trending posts (engagement over ``window`` rounds).
        window: how many recent rounds of posts the personalized and headline channels see.
        personalized_stance_weight: weight of stance agreement in the personalized score
            (a recommender trained on engagement learns that users engage with agreeing
            content; 0 = pure semantic similarity).
        candidates_per_slot: the personalized channel scores this many candidates per slot,
            drawn from the user's interest cluster (an IVF-style approximate nearest-neighbour
            search; exact search over all posts is O(users × posts)).
        num_clusters: clusters of the IVF index, fitted by k-means on user embeddings.
        headline_pool: the headline channel samples from the top ``headline_pool`` posts.
    """

    relational: int = 5
    personalized: int = 5
    headline: int = 2
    window: int = 2
    personalized_stance_weight: float = 0.5
    candidates_per_slot: int = 2
    num_clusters: int = 16
    headline_pool: int = 20

    def __post_init__(self) -> None:
        for name in ("relational", "personalized", "headline"):
            value = getattr(self, name)
            _check(isinstance(value, int) and 0 <= value <= 100, f"recommender.{name}",
                   "an integer in [0, 100]", value)
        _check(isinstance(self.window, int) and self.window >= 1, "recommender.window",
               "an integer >= 1", self.window)
        _check(self.candidates_per_slot >= 1, "recommender.candidates_per_slot", ">= 1",
               self.candidates_per_slot)
        _check(1 <= self.num_clusters <= 4096, "recommender.num_clusters", "in [1, 4096]",
               self.num_clusters)
        _check(self.headline_pool >= 1, "recommender.headline_pool", ">= 1", self.headline_pool)


#: Engagement weight e(reaction) of Eq. 9 (ours; the paper does not publish them).
DEFAULT_ENGAGEMENT_WEIGHTS: dict[str, float] = {
    "reply": 1.0, "retweet": 0.8, "like": 0.6, "follow": 0.6, "dislike": 0.2, "nothing": 0.0,
}


MISINFORMATION_REWARD_MODES = ("effect", "paper")


@dataclass(frozen=True)
class RewardConfig:
    """Rewards of §3 (Eq. 9 and Eq. 10), each in [0, 1].

    Eq. 9 (recommendation arm: post by sender u shown to receiver v):
        r = clip(w_s·|S_u − S_v|/2·[v reacted] − w_t·tox(reaction) + w_e·e(reaction), 0, 1)
    The divergence term counts only when v reacted (``divergence_needs_reaction``): an
    ignored post is no cross-viewpoint *interaction*.

    Eq. 10 (exposure arm: user i at level p):
        "paper":  r = (1 − w_v)·(1 − share of i's receivers misinformed at t+1) + w_v·p
        "effect": r = clip(0.5 + 0.5·(removed_mis − w_v·removed_clean − harmed) / n, 0, 1)
    The visibility terms keep "suppress everyone" from being optimal (beyond the paper); see
    ``socialenv.envs.exposure.ExposureEnv`` for why "effect" is the default.
    """

    stance_weight: float = 0.5
    toxicity_weight: float = 0.5
    engagement_weight: float = 0.5
    engagement: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ENGAGEMENT_WEIGHTS))
    divergence_needs_reaction: bool = True
    visibility_weight: float = 0.5
    misinformation_mode: str = "effect"

    def __post_init__(self) -> None:
        for name in ("stance_weight", "toxicity_weight", "engagement_weight"):
            value = getattr(self, name)
            _check(0 <= value <= 1, f"reward.{name}", "a number in [0, 1]", value)
        _check(0 <= self.visibility_weight <= 1, "reward.visibility_weight", "in [0, 1]",
               self.visibility_weight)
        _check(self.misinformation_mode in MISINFORMATION_REWARD_MODES,
               "reward.misinformation_mode", f"one of {MISINFORMATION_REWARD_MODES}",
               self.misinformation_mode)
        unknown = set(self.engagement) - set(DEFAULT_ENGAGEMENT_WEIGHTS)
        _check(not unknown, "reward.engagement", f"keys among {sorted(DEFAULT_ENGAGEMENT_WEIGHTS)}",
               sorted(unknown))
        for key, value in self.engagement.items():
            _check(0 <= value <= 1, f"reward.engagement[{key!r}]", "in [0, 1]", value)


@dataclass(frozen=True)
class ContextConfig:
    """Context propagation of Eq. 8: C ← α·C + (1 − α)·D⁻¹A·C, ``hops`` times."""

    alpha: float = 0.5
    hops: int = 2

    def __post_init__(self) -> None:
        _check(0 <= self.alpha <= 1, "context.alpha", "a number in [0, 1]", self.alpha)
        _check(isinstance(self.hops, int) and 0 <= self.hops <= 10, "context.hops",
               "an integer in [0, 10]", self.hops)


ENV_OBJECTIVES = ("cross_viewpoint", "misinformation")


@dataclass(frozen=True)
class EnvConfig:
    """Configuration shared by both envs (keyword arguments of ``gym.make``).

    Attributes:
        num_users: population size (synthetic scenarios).
        rounds: rounds per episode (one ``step`` = one round).
        budget: arms the policy picks per round (the slate size).
        scenario: "abortion", "misinformation", a path to a saved scenario, or a Scenario.
        candidate_users, candidate_posts: Rec arms = candidate_users × candidate_posts.
        exposure_users: Exposure arms = exposure_users × len(exposure_levels).
        exposure_levels: the probability levels an exposure arm can set.
        users: "surrogate", "llm" or a Brain instance; ``llm`` / ``surrogate`` configure them.
        stance_ema: β of Eq. 2.
        memory_ema: weight of the old memory embedding when a user engages with posts.
        observe_users: add user-level arrays (propagated context (N, 2d), stance (N,)) to the
            observation.
        graph_observation: add a ``gymnasium.spaces.Graph`` of the follow graph.
        observe_response: add the reactions to the previous round's slate to the observation
            (``response_applied``, ``response_reward``, ``response_reacted``, (budget,) each).
        feed_recommender: a :class:`socialenv.platform.Recommender` (subclass) instance to
            build feeds instead of the default one built from ``recommender``.
        exposure_control: a :class:`socialenv.platform.ExposureControl` (subclass) instance.
    """

    num_users: int = 1000
    rounds: int = 10
    budget: int = 10
    scenario: Any = "abortion"
    candidate_users: int = 20
    candidate_posts: int = 10
    exposure_users: int = 40
    exposure_levels: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    users: Any = "surrogate"
    llm: Any = None
    surrogate: Any = None
    recommender: RecommenderConfig = field(default_factory=RecommenderConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    stance_ema: float = 0.8
    memory_ema: float = 0.5
    observe_users: bool = False
    graph_observation: bool = False
    observe_response: bool = False
    feed_recommender: Any = None
    exposure_control: Any = None

    def __post_init__(self) -> None:
        _check(isinstance(self.num_users, int) and self.num_users >= 10, "num_users",
               "an integer >= 10", self.num_users)
        _check(isinstance(self.rounds, int) and self.rounds >= 1, "rounds", "an integer >= 1",
               self.rounds)
        _check(isinstance(self.budget, int) and self.budget >= 1, "budget", "an integer >= 1",
               self.budget)
        for name in ("candidate_users", "candidate_posts", "exposure_users"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)
        levels = tuple(self.exposure_levels)
        _check(len(levels) >= 1 and all(0 <= p <= 1 for p in levels), "exposure_levels",
               "a non-empty sequence of probabilities in [0, 1]", self.exposure_levels)
        object.__setattr__(self, "exposure_levels", tuple(float(p) for p in levels))
        _check(0 <= self.stance_ema < 1, "stance_ema", "a number in [0, 1)", self.stance_ema)
        _check(0 <= self.memory_ema < 1, "memory_ema", "a number in [0, 1)", self.memory_ema)
        _check(self.feed_recommender is None or callable(getattr(self.feed_recommender, "build_feeds", None)),
               "feed_recommender", "None or an object with build_feeds(ctx, active, rng)",
               self.feed_recommender)
        _check(self.exposure_control is None or callable(getattr(self.exposure_control, "filter", None)),
               "exposure_control", "None or an object with filter(feed, post_author, exposure, rng)",
               self.exposure_control)
        for name, cls in (("recommender", RecommenderConfig), ("reward", RewardConfig),
                          ("context", ContextConfig)):
            value = getattr(self, name)
            if isinstance(value, dict):
                allowed = {f.name for f in fields(cls)}
                unknown = set(value) - allowed
                _check(not unknown, name, f"keys among {sorted(allowed)}", sorted(unknown))
                object.__setattr__(self, name, cls(**value))
            else:
                _check(isinstance(value, cls), name, f"a dict or {cls.__name__}", value)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EnvConfig:
        allowed = {f.name for f in fields(cls)}
        unknown = set(kwargs) - allowed
        if unknown:
            raise ValueError(
                f"unknown env argument(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        return cls(**kwargs)

    def replace(self, **changes: Any) -> EnvConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (objects that are not plain config become their repr)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if is_dataclass(value) and not isinstance(value, type):
                try:
                    value = asdict(value)
                except TypeError:
                    value = repr(value)
            elif not isinstance(value, str | int | float | bool | tuple | list | dict | None):
                value = repr(value)
            out[f.name] = value
        return out
