"""Who is active in a round: the default Bernoulli model and an opt-in self-exciting
(Hawkes-style) model after POSIM.

Default (``activity=None``): user i is active in round t with its scenario probability p_i,
independently of everything else (the paper's model).

Hawkes (``activity={"model": "hawkes", ...}``): user i acts in round t with probability
``1 − exp(−λ_i(t))``, where the per-round intensity is

    λ_i(t) = μ_i + x_i(t) + y(t)
    x_i(t + 1) = ρ_int · x_i(t) + α_int · (notifications of i in round t)
    y(t + 1)   = ρ_ext · y(t)   + α_ext · (news events in round t)

μ_i = −ln(1 − p_i) keeps the baseline at the scenario's activity (so with no excitation the
model reduces to the default, draw for draw). Notifications are the replies and retweets
(``notify_kinds``) other users gave to i's posts in the round — a reply is also how a user is
mentioned in this model.

POSIM's constants are per minute over 10-minute steps: internal excitation 0.003 decaying at
0.05/min, external 0.15 decaying at 0.003/min (and μ = 0.05/min, which we replace by the
scenario's calibrated p_i). They map to rounds of ``minutes_per_round`` minutes (default 10,
POSIM's step) by integrating the exponential kernel over the round: a jump α per minute adds
α·Δ to the round's rate, and a decay rate β per minute keeps ρ = exp(−β·Δ) of the excitation
from one round to the next. With Δ = 10: α_int = 0.03 per notification, ρ_int = 0.61,
α_ext = 1.5 per news event, ρ_ext = 0.97.

Everything is vectorized over users; the only random draw is the usual one of
``Stream.ACTIVE`` (one uniform per user), so the model is seeded like the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from agent_models.types import Behaviour, NewsEvent, RoundOutput

ACTIVITY_MODELS = ("bernoulli", "hawkes")
NOTIFY_KINDS = ("reply", "retweet", "like", "dislike")


def _check(condition: bool, name: str, allowed: str, value: Any) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class HawkesConfig:
    """The self-exciting activity model (module docstring). Per-minute constants are POSIM's.

    Attributes:
        model: "hawkes" (or "bernoulli": the default model, for switching in a sweep).
        minutes_per_round: Δ, the minutes one round stands for.
        internal_excitation: α per minute per notification (POSIM 0.003).
        internal_decay: β per minute of the notification excitation (POSIM 0.05).
        external_excitation: α per minute per news event (POSIM 0.15).
        external_decay: β per minute of the news excitation (POSIM 0.003).
        notify_kinds: reactions to a user's posts that notify the user.
        max_probability: cap on the per-round activity probability.
    """

    model: str = "hawkes"
    minutes_per_round: float = 10.0
    internal_excitation: float = 0.003
    internal_decay: float = 0.05
    external_excitation: float = 0.15
    external_decay: float = 0.003
    notify_kinds: tuple[str, ...] = ("reply", "retweet")
    max_probability: float = 0.99

    def __post_init__(self) -> None:
        _check(
            self.model in ACTIVITY_MODELS, "activity.model", f"one of {ACTIVITY_MODELS}", self.model
        )
        _check(
            self.minutes_per_round > 0,
            "activity.minutes_per_round",
            "a number > 0",
            self.minutes_per_round,
        )
        for name in (
            "internal_excitation",
            "internal_decay",
            "external_excitation",
            "external_decay",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and value >= 0,
                f"activity.{name}",
                "a number >= 0",
                value,
            )
        kinds = tuple(self.notify_kinds)
        _check(
            set(kinds) <= set(NOTIFY_KINDS),
            "activity.notify_kinds",
            f"a subset of {NOTIFY_KINDS}",
            kinds,
        )
        object.__setattr__(self, "notify_kinds", kinds)
        _check(
            0 < self.max_probability < 1,
            "activity.max_probability",
            "a number in (0, 1)",
            self.max_probability,
        )

    @classmethod
    def from_spec(cls, spec: Any) -> HawkesConfig | None:
        """``None`` / "bernoulli" → None (default model); "hawkes" or a dict → a config."""
        if spec is None or isinstance(spec, cls):
            return spec if spec is None or spec.model == "hawkes" else None
        if isinstance(spec, str):
            _check(
                spec in ACTIVITY_MODELS,
                "activity",
                f"None, one of {ACTIVITY_MODELS} or a dict",
                spec,
            )
            return cls() if spec == "hawkes" else None
        _check(
            isinstance(spec, dict), "activity", f"None, one of {ACTIVITY_MODELS} or a dict", spec
        )
        allowed = {f.name for f in fields(cls)}
        unknown = set(spec) - allowed
        _check(not unknown, "activity", f"keys among {sorted(allowed)}", sorted(unknown))
        config = cls(**spec)
        return config if config.model == "hawkes" else None

    # per-round parameters (module docstring)
    @property
    def internal_jump(self) -> float:
        return self.internal_excitation * self.minutes_per_round

    @property
    def internal_retention(self) -> float:
        return math.exp(-self.internal_decay * self.minutes_per_round)

    @property
    def external_jump(self) -> float:
        return self.external_excitation * self.minutes_per_round

    @property
    def external_retention(self) -> float:
        return math.exp(-self.external_decay * self.minutes_per_round)


class HawkesActivity:
    """Per-user excitation state of the Hawkes model; see the module docstring.

    State: ``internal`` (N,) float64 notification excitation, ``external`` float news
    excitation (shared by all users), both plain arrays/floats (checkpoint-friendly).
    """

    def __init__(self, config: HawkesConfig) -> None:
        self.config = config
        self._kinds = np.array([int(Behaviour[k.upper()]) for k in config.notify_kinds], np.int8)
        self.internal = np.zeros(0)
        self.external = 0.0
        self.baseline = np.zeros(0)

    def reset(self, activity: np.ndarray) -> None:
        """Start an episode; ``activity`` (N,) is the scenario's per-round probability p_i."""
        p = np.clip(np.asarray(activity, np.float64), 0.0, self.config.max_probability)
        self.baseline = -np.log1p(-p)
        self.internal = np.zeros(len(p))
        self.external = 0.0

    def probability(self, activity: np.ndarray) -> np.ndarray:
        """(N,) probability of acting this round. Without excitation it is ``activity`` itself."""
        if self.external == 0.0 and not self.internal.any():
            return activity
        rate = self.baseline + self.internal + self.external
        return np.minimum(-np.expm1(-rate), self.config.max_probability)

    def observe(self, output: RoundOutput, post_author: np.ndarray, news: list[NewsEvent]) -> None:
        """Decay the excitation by one round and add this round's notifications and news."""
        cfg = self.config
        notified = np.isin(output.react_kind, self._kinds)
        author = post_author[output.react_post[notified]]
        self_reaction = author == output.react_user[notified]
        counts = np.bincount(author[~self_reaction], minlength=len(self.internal))
        self.internal = cfg.internal_retention * self.internal + cfg.internal_jump * counts
        self.external = cfg.external_retention * self.external + cfg.external_jump * len(news)

    def state_dict(self) -> dict[str, Any]:
        return {
            "internal": self.internal.copy(),
            "external": float(self.external),
            "baseline": self.baseline.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.internal = np.asarray(state["internal"], np.float64).copy()
        self.external = float(state["external"])
        self.baseline = np.asarray(state["baseline"], np.float64).copy()


def make_activity_model(spec: Any) -> HawkesActivity | None:
    """``None`` for the default Bernoulli model, else the Hawkes model of ``spec``
    ("hawkes", a dict of :class:`HawkesConfig` fields, or a config)."""
    config = HawkesConfig.from_spec(spec)
    return None if config is None else HawkesActivity(config)
