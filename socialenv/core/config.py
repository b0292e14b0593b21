"""Typed configuration. Every constant the paper does not publish is a named field here,
with its default documented in one place (see also ``shared/PAPER.md``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Annotated, Any

from policysim_infra.validation import Limit, check_fields, check_keys, field_limits
from policysim_infra.validation import check as _check

#: The lever fields EnvConfig held before each env got its own lever config (issue 25).
LEGACY_LEVER_FIELDS: tuple[str, ...] = (
    "budget",
    "lever_share",
    "candidate_users",
    "candidates",
    "exposure_users",
    "exposure_levels",
    "moderation",
)
#: Most arms an env may have (each is a row of the observation's context matrix).
MAX_ARMS = 1_000_000


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
            search; exact search over all posts is O(users × posts)). The default 4 (20
            candidates for 5 slots) leaves the stance term room to filter (with the earlier
            2, ranking by stance agreement changed the final stance std by −0.005 ± 0.005).
        num_clusters: clusters of the IVF index, fitted by k-means on user embeddings.
        headline_pool: the headline channel samples from the top ``headline_pool`` posts.
        popular_pool: PolicySim-Rec-v0's "popular" candidate source samples from the
            ``popular_pool`` most engaged recent posts.
        candidate_oversample: each interest / opposite / popular candidate is the most
            interesting of this many draws (the retrieval stage's shortlist factor).
    """

    relational: Annotated[int, Limit(ge=0, le=100)] = 5
    personalized: Annotated[int, Limit(ge=0, le=100)] = 5
    headline: Annotated[int, Limit(ge=0, le=100)] = 2
    window: Annotated[int, Limit(ge=1, le=10_000)] = 2
    personalized_stance_weight: Annotated[float, Limit(ge=0, le=10)] = 1.0
    candidates_per_slot: Annotated[int, Limit(ge=1, le=64)] = 4
    num_clusters: Annotated[int, Limit(ge=1, le=4096)] = 16
    headline_pool: Annotated[int, Limit(ge=1, le=100_000)] = 20
    popular_pool: int = 100
    candidate_oversample: int = 4

    def __post_init__(self) -> None:
        check_fields(self, "recommender.")  # types and the limits declared with the fields
        _check(
            isinstance(self.popular_pool, int) and self.popular_pool >= 1,
            "recommender.popular_pool",
            "an integer >= 1",
            self.popular_pool,
        )
        _check(
            isinstance(self.candidate_oversample, int) and 1 <= self.candidate_oversample <= 64,
            "recommender.candidate_oversample",
            "an integer in [1, 64]",
            self.candidate_oversample,
        )


#: Engagement weight e(reaction) of Eq. 9 (ours; the paper does not publish them). Hostile
#: reactions (a dislike, a reply at or above ``RewardConfig.hostile_toxicity``) earn nothing.
DEFAULT_ENGAGEMENT_WEIGHTS: dict[str, float] = {
    "reply": 1.0,
    "retweet": 0.8,
    "like": 0.6,
    "follow": 0.6,
    "dislike": 0.0,
    "nothing": 0.0,
}

#: Sources of PolicySim-Rec-v0's candidate posts, in the order of a user's candidate row.
CANDIDATE_SOURCES: tuple[str, ...] = ("interest", "opposite", "popular", "fresh")
#: Candidate posts per source for each sampled user of PolicySim-Rec-v0
#: (see :mod:`socialenv.core.candidates`).
DEFAULT_CANDIDATE_MIX: dict[str, int] = {"interest": 2, "opposite": 3, "popular": 2, "fresh": 1}
#: Default share of a round's active users whose recommended slots (Rec) or exposure level
#: (Exposure) the policy sets: Origin keeps serving the other 85%. 0.15 rather than 0.25 so that
#: a flat deep-RL policy (SB3 PPO, CleanRL-style PPO, MaskablePPO) on the default ids fits 4 GiB
#: over a 2,048-step rollout (issue 26; :mod:`socialenv.envs.sizing`).
DEFAULT_LEVER_SHARE = 0.15


@dataclass(frozen=True)
class ClassifierConfig:
    """The platform's misinformation classifier: what the platform (and so the policy) sees
    of a post's misinformation label. Each post is flagged once, when written:
    P(flag | misinformation) = ``recall``, P(flag | clean) = ``false_positive_rate``. At the
    defaults and Origin's ≈ 20–40% misinformation share of posts the precision is ≈ 0.85–0.93.
    ``recall=1, false_positive_rate=0`` gives the platform the hidden truth."""

    recall: float = 0.7
    false_positive_rate: float = 0.05

    def __post_init__(self) -> None:
        for name in ("recall", "false_positive_rate"):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1,
                f"classifier.{name}",
                "a number in [0, 1]",
                value,
            )


MISINFORMATION_REWARD_MODES = ("effect", "paper")
#: ``reward.form``: "objective" (each arm's contribution to the env's declared objective,
#: ``info["metrics"]["objective"]``) or "paper" (the literal Eq. 9 / Eq. 10 of v0).
REWARD_FORMS = ("objective", "paper")
#: ``reward.step`` (objective form): the step reward is the round's objective ("objective", every
#: env) or, in PolicySim-Rec-v0 only, the applied arms' rewards summed per governed user ("slots")
REWARD_STEPS = ("objective", "slots")


@dataclass(frozen=True)
class RewardConfig:
    """Rewards of §3 (Eq. 9 and Eq. 10), each in [0, 1].

    Eq. 9 (recommendation arm: post by sender u shown to receiver v), with s the *discrete*
    stances (−1/0/+1) at the start of the round — the ones the cross-stance metric uses:
        r = clip(w_s·|s_u − s_v|/2·[civil] + w_e·e(reaction)·[civil] − w_t·tox(reaction), 0, 1)
    where [civil] = v reacted (like, retweet, follow, or a reply below ``hostile_toxicity``)
    and not with hostility (a dislike, a reply at or above ``hostile_toxicity``): hostility
    earns neither divergence nor engagement. With ``divergence_needs_reaction=False`` the
    divergence term counts for every delivered post (exposure rather than interaction).

    Eq. 10 (exposure arm: user i at level p), over the impressions of i's posts this round:
        "effect": r = clip(0.5 + 0.5·(removed_at_risk − delivered_at_risk − w_v·removed_clean
                                     − harmed) / n, 0, 1)
            removed_at_risk / delivered_at_risk: misinformation impressions the filter removed /
            let through whose receiver was not yet misinformed; removed_clean: clean
            impressions removed (lost visibility); harmed: delivered misinformation
            impressions whose receiver is newly misinformed at t+1 (Eq. 10's outcome); n: the
            impressions of i's posts.
        "paper":  r = (1 − w_v)·(1 − share of i's receivers misinformed at t+1) + w_v·p
    The visibility terms keep "suppress everyone" from being optimal (beyond the paper).

    These are ``form="paper"``. The default ``form="objective"`` pays each arm its
    contribution to the env's declared objective (``info["metrics"]["objective"]``, see
    each env's docstring), with these weights:

    - Rec, per reaction across opposite discrete stances: +1 for a civil one,
      −``hostile_weight`` for a hostile one (a dislike, a reply at or above
      ``hostile_toxicity``), −``reply_toxicity_weight`` × the toxicity of a reply; a reaction
      within a stance or with a neutral user counts 0.
    - Exposure: a clean impression removed costs ``clean_removal_cost`` (in users newly
      misinformed: 0.001 = 1,000 removed clean impressions weigh as much as one user misled;
      measured against 0, 0.0005, 0.002 and 0.02 in BENCHMARKS.md, *Policy zoo*).

    ``step`` (objective form): "objective" (default), the step reward is the round's objective
    in every env, so an episode's return is the objective summed over its rounds; "slots"
    (PolicySim-Rec-v0 only) is the applied arms' changes summed per governed user, 0 for
    Origin: the arms' own credit, without the effects beyond their slots.
    """

    stance_weight: Annotated[float, Limit(ge=0, le=1)] = 1.0
    toxicity_weight: Annotated[float, Limit(ge=0, le=1)] = 0.5
    engagement_weight: Annotated[float, Limit(ge=0, le=1)] = 0.1
    engagement: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ENGAGEMENT_WEIGHTS))
    divergence_needs_reaction: bool = True
    hostile_toxicity: Annotated[float, Limit(ge=0, le=1)] = 0.5
    visibility_weight: Annotated[float, Limit(ge=0, le=1)] = 0.3
    misinformation_mode: str = "effect"
    form: str = "objective"
    hostile_weight: Annotated[float, Limit(ge=0, le=10)] = 1.0
    reply_toxicity_weight: Annotated[float, Limit(ge=0, le=10)] = 1.0
    clean_removal_cost: Annotated[float, Limit(ge=0, le=1)] = 0.001
    step: str = "objective"

    def __post_init__(self) -> None:
        check_fields(self, "reward.")  # types and the limits declared with the fields
        _check(self.form in REWARD_FORMS, "reward.form", f"one of {REWARD_FORMS}", self.form)
        _check(self.step in REWARD_STEPS, "reward.step", f"one of {REWARD_STEPS}", self.step)
        _check(
            self.misinformation_mode in MISINFORMATION_REWARD_MODES,
            "reward.misinformation_mode",
            f"one of {MISINFORMATION_REWARD_MODES}",
            self.misinformation_mode,
        )
        unknown = set(self.engagement) - set(DEFAULT_ENGAGEMENT_WEIGHTS)
        _check(
            not unknown,
            "reward.engagement",
            f"keys among {sorted(DEFAULT_ENGAGEMENT_WEIGHTS)}",
            sorted(unknown),
        )
        for key, value in self.engagement.items():
            _check(0 <= value <= 1, f"reward.engagement[{key!r}]", "in [0, 1]", value)


@dataclass(frozen=True)
class ContextConfig:
    """Context propagation of Eq. 8: C ← α·C + (1 − α)·D⁻¹A·C, ``hops`` times."""

    alpha: Annotated[float, Limit(ge=0, le=1)] = 0.5
    hops: Annotated[int, Limit(ge=0, le=10)] = 2

    def __post_init__(self) -> None:
        check_fields(self, "context.")  # types and the limits declared with the fields


ENV_OBJECTIVES = ("cross_viewpoint", "misinformation")
ACTION_FORMATS = ("slate", "scores")


@dataclass(frozen=True)
class EnvConfig:
    """The platform settings every env shares (keyword arguments of ``gym.make``); the
    env's own lever settings are its lever config, in ``lever``.

    Attributes:
        num_users: population size (synthetic scenarios).
        rounds: rounds per episode (one ``step`` = one round).
        scenario: "abortion", "misinformation", a path to a saved scenario, or a Scenario.
        action_format: "slate" (``MultiDiscrete``: arm indices, the value K leaves a slot to
            the platform) or "scores" (``Box``: one score per arm; the env applies each user's
            best-scored allowed arms).
        classifier: the platform's noisy misinformation classifier (``ClassifierConfig``).
        users: "surrogate", "llm" or a Brain instance; ``llm`` / ``surrogate`` configure them.
        stance_ema: β of Eq. 2.
        memory_ema: weight of the old memory embedding when a user engages with posts.
        observe_users: add user-level arrays (propagated context (N, 2d), stance (N,)) to the
            observation.
        graph_observation: add a ``gymnasium.spaces.Graph`` of the follow graph.
        observe_response: add the reactions to the previous round's slate to the observation
            (``response_applied``, ``response_reward``, ``response_reacted``, (budget,) each).
        feed_recommender: a :class:`socialenv.core.platform.Recommender` (subclass) instance to
            build feeds instead of the default one built from ``recommender``.
        exposure_control: a :class:`socialenv.core.platform.ExposureControl` (subclass) instance.
        activity: None (each user active with its scenario probability) or "hawkes" / a dict
            of :class:`socialenv.mechanisms.activity.HawkesConfig` fields (self-exciting activity).
        events: scenario events added to the scenario's own: a list of event dicts or a
            .yaml/.json file (see :mod:`socialenv.mechanisms.events`).
        lever: the env's lever config (:class:`socialenv.core.lever.LeverConfig`; e.g.
            :class:`socialenv.envs.rec.RecLeverConfig`), set by the env from ``lever=`` and
            its own keywords.

    Every field is checked for its type (no bool for an integer, NumPy numbers accepted,
    finite numbers only) and against the limits declared with it (``num_users:
    Annotated[int, Limit(ge=10, le=1_000_000)]``; :data:`ENV_LIMITS` lists them),
    with at most :data:`MAX_ARMS` arms, before anything is allocated.
    """

    num_users: Annotated[int, Limit(ge=10, le=1_000_000)] = 1000
    rounds: Annotated[int, Limit(ge=1, le=1_000_000)] = 10
    scenario: Any = "abortion"
    action_format: str = "slate"
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    users: Any = "surrogate"
    llm: Any = None
    surrogate: Any = None
    recommender: RecommenderConfig = field(default_factory=RecommenderConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    stance_ema: Annotated[float, Limit(ge=0, lt=1)] = 0.8
    memory_ema: Annotated[float, Limit(ge=0, lt=1)] = 0.5
    observe_users: bool = False
    graph_observation: bool = False
    observe_response: bool = False
    feed_recommender: Any = None
    exposure_control: Any = None
    activity: Any = None
    events: Any = None
    lever: Any = None

    def __post_init__(self) -> None:
        check_fields(self, "")  # types and the limits declared with the fields
        _check(
            self.action_format in ACTION_FORMATS,
            "action_format",
            f"one of {ACTION_FORMATS}",
            self.action_format,
        )
        _check(
            self.feed_recommender is None
            or callable(getattr(self.feed_recommender, "build_feeds", None)),
            "feed_recommender",
            "None or an object with build_feeds(ctx, active, rng)",
            self.feed_recommender,
        )
        _check(
            self.exposure_control is None
            or callable(getattr(self.exposure_control, "filter", None)),
            "exposure_control",
            "None or an object with filter(feed, post_author, exposure, rng)",
            self.exposure_control,
        )
        from socialenv.mechanisms.activity import HawkesConfig
        from socialenv.mechanisms.events import load_events

        object.__setattr__(self, "activity", HawkesConfig.from_spec(self.activity))
        object.__setattr__(self, "events", tuple(load_events(self.events)))
        for name, cls in (
            ("recommender", RecommenderConfig),
            ("reward", RewardConfig),
            ("context", ContextConfig),
            ("classifier", ClassifierConfig),
        ):
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
        check_keys(
            kwargs, sorted(f.name for f in fields(cls)), "kwargs", "env argument(s)", keyword=True
        )
        return cls(**kwargs)

    @classmethod
    def upgrade_checkpoint_fields(cls, saved: dict[str, Any]) -> dict[str, Any]:
        """The fields of an EnvConfig saved before the lever settings moved to the env's
        lever config (issue 25): the flat lever fields become a ``lever`` dict, which the
        env narrows to its own fields (:meth:`socialenv.envs.base.PolicySimEnv.load`)."""
        legacy = sorted(set(saved) & set(LEGACY_LEVER_FIELDS))
        if not legacy or "lever" in saved:
            return saved
        upgraded = {k: v for k, v in saved.items() if k not in LEGACY_LEVER_FIELDS}
        upgraded["lever"] = {k: saved[k] for k in legacy}
        return upgraded

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


#: The limits :class:`EnvConfig` declares on its fields (derived; for docs and messages).
ENV_LIMITS = field_limits(EnvConfig)
