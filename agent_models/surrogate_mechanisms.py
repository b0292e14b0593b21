"""The surrogate brain's opinion and belief mechanisms, one class each.

Each mechanism is a small frozen dataclass holding its own parameters (named locally, e.g.
``rate``), built from the flat :class:`~agent_models.surrogate.SurrogateConfig` through its
``FIELDS`` (local name → config field), and switched off by the config values in ``OFF``.
:data:`MECHANISMS` lists them in the order a round applies them; the surrogate composes
them, ``benchmarks/calibration.py`` switches each off in turn and
``tests/agent_models/test_mechanisms.py`` checks each on its own.

Three kinds:

- :class:`ReactionMechanism`: moves the persistent opinion of a user who reacted to a post.
  ``moves`` selects the reactions it acts on and ``step`` gives each one's move; the moves
  of all reaction mechanisms are added per reaction, and a user's moves add up scaled by
  1/√(number of moving reactions), so many reactions push further than one, but less than
  linearly. A reaction a mechanism selects counts in that number even when the mechanism's
  rate is 0.
- :class:`OpinionMechanism`: acts on every user's opinion after the reactions' moves
  (``apply`` changes the (N,) opinions in place).
- :class:`BeliefMechanism`: the misinformation contagion (``spread``), after the opinions.

Adding a mechanism: one class here (its config fields added to ``SurrogateConfig``), one
entry of :data:`MECHANISMS`, one test in ``tests/agent_models/test_mechanisms.py``; the
calibration benchmark picks it up from :data:`MECHANISMS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from agent_models.surrogate_kernels import built_in_reaction_moves, flagged_per_row, sigmoid
from agent_models.types import Behaviour, RoundInput


@dataclass(frozen=True)
class Reacted:
    """A round's reactions as the opinion mechanisms see them (one row per reaction).

    Attributes:
        opinion: (M,) the reacting user's persistent opinion o_u before the update.
        stance: (M,) the stance s_p of the post reacted to.
        kind: (M,) the :class:`~agent_models.types.Behaviour` of the reaction.
        positive: (M,) a like or retweet.
        hostile: (M,) a dislike or a toxic reply.

    The derived columns (``delta``, ``distance``, ``civil``) are computed once, on first use,
    and shared by every mechanism: read them, never write into them.
    """

    opinion: np.ndarray
    stance: np.ndarray
    kind: np.ndarray
    positive: np.ndarray
    hostile: np.ndarray

    @cached_property
    def delta(self) -> np.ndarray:
        """(M,) s_p − o_u."""
        return self.stance - self.opinion

    @cached_property
    def distance(self) -> np.ndarray:
        """(M,) |s_p − o_u|."""
        return np.abs(self.delta)

    @cached_property
    def civil(self) -> np.ndarray:
        """(M,) a positive reaction or a reply that is not hostile."""
        return self.positive | ((self.kind == Behaviour.REPLY) & ~self.hostile)


class Mechanism:
    """A mechanism of the surrogate: its parameters, read from the config through ``FIELDS``;
    ``OFF`` holds the config overrides that switch it off; ``metric`` is the env metric whose
    change shows it acting (the calibration benchmark reports it)."""

    name: ClassVar[str]
    FIELDS: ClassVar[dict[str, str]]
    OFF: ClassVar[dict[str, float]]
    metric: ClassVar[str] = "stance_std"

    @classmethod
    def from_config(cls, config: Any) -> Any:
        """The mechanism with its parameters read from a ``SurrogateConfig``."""
        return cls(**{local: getattr(config, field) for local, field in cls.FIELDS.items()})


class ReactionMechanism(Mechanism, ABC):
    @abstractmethod
    def moves(self, reacted: Reacted) -> np.ndarray:
        """(M,) bool: the reactions this mechanism moves."""

    @abstractmethod
    def step(self, reacted: Reacted) -> np.ndarray:
        """(M,) float64: each reaction's move (0 where :meth:`moves` is False)."""


class OpinionMechanism(Mechanism, ABC):
    @abstractmethod
    def apply(self, opinion: np.ndarray, round_input: RoundInput, anchor: np.ndarray) -> None:
        """Update the (N,) float64 ``opinion`` in place (``anchor``: the opinions at reset)."""


class BeliefMechanism(Mechanism, ABC):
    @abstractmethod
    def spread(
        self, round_input: RoundInput, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """The users whose belief flipped this round and their new belief."""


@dataclass(frozen=True)
class Assimilation(ReactionMechanism):
    """Bounded-confidence assimilation: a civil reaction to a post within
    ``confidence_bound`` (|s_p − o_u| ≤ 2·confidence_bound; 1 = no bound) moves o_u by
    rate·(s_p − o_u)."""

    rate: float
    confidence_bound: float

    name: ClassVar[str] = "assimilation"
    FIELDS: ClassVar[dict[str, str]] = {
        "rate": "assimilation_rate",
        "confidence_bound": "confidence_bound",
    }
    OFF: ClassVar[dict[str, float]] = {"assimilation_rate": 0.0}

    def moves(self, reacted: Reacted) -> np.ndarray:
        return reacted.civil & (reacted.distance <= 2 * self.confidence_bound)

    def step(self, reacted: Reacted) -> np.ndarray:
        return np.where(self.moves(reacted), np.float64(self.rate) * reacted.delta, 0.0)


@dataclass(frozen=True)
class Backfire(ReactionMechanism):
    """Backfire: a hostile reaction to a post at least 2·gap away moves o_u away from it by
    rate·(s_p − o_u)."""

    rate: float
    gap: float

    name: ClassVar[str] = "backfire"
    FIELDS: ClassVar[dict[str, str]] = {"rate": "backfire_rate", "gap": "backfire_gap"}
    OFF: ClassVar[dict[str, float]] = {"backfire_rate": 0.0}

    def moves(self, reacted: Reacted) -> np.ndarray:
        return reacted.hostile & (reacted.distance >= 2 * self.gap)

    def step(self, reacted: Reacted) -> np.ndarray:
        return np.where(self.moves(reacted), np.float64(-self.rate) * reacted.delta, 0.0)


@dataclass(frozen=True)
class Reinforcement(ReactionMechanism):
    """Group polarization: an assimilated post that agrees with the user (same sign, outside
    ±1/3) pushes o_u toward its extreme by rate·sign(s_p)·(1 − |o_u|)."""

    rate: float
    confidence_bound: float

    name: ClassVar[str] = "reinforcement"
    FIELDS: ClassVar[dict[str, str]] = {
        "rate": "reinforcement_rate",
        "confidence_bound": "confidence_bound",
    }
    OFF: ClassVar[dict[str, float]] = {"reinforcement_rate": 0.0}

    def moves(self, reacted: Reacted) -> np.ndarray:
        assimilated = reacted.civil & (reacted.distance <= 2 * self.confidence_bound)
        return (
            assimilated
            & (np.sign(reacted.stance) == np.sign(reacted.opinion))
            & (np.abs(reacted.stance) > 1 / 3)
        )

    def step(self, reacted: Reacted) -> np.ndarray:
        push = self.rate * np.sign(reacted.stance) * (1 - np.abs(reacted.opinion))
        return np.where(self.moves(reacted), push, 0.0)


@dataclass(frozen=True)
class ExposureAssimilation(OpinionMechanism):
    """Mere exposure: every active user who saw posts moves toward their mean stance by
    rate·(mean seen stance − o_u) (0 = off, the default)."""

    rate: float

    name: ClassVar[str] = "exposure_assimilation"
    FIELDS: ClassVar[dict[str, str]] = {"rate": "exposure_assimilation"}
    OFF: ClassVar[dict[str, float]] = {"exposure_assimilation": 0.0}

    def apply(self, opinion: np.ndarray, round_input: RoundInput, anchor: np.ndarray) -> None:
        feed = round_input.feed
        if self.rate <= 0 or not len(feed):
            return
        valid = feed >= 0
        stance = round_input.posts.stance
        seen_stance = np.where(valid, stance[np.where(valid, feed, 0)], 0.0).sum(axis=1)
        mean_seen = seen_stance / np.maximum(valid.sum(axis=1), 1)
        active = round_input.active
        opinion[active] += self.rate * (mean_seen - opinion[active]) * valid.any(axis=1)


@dataclass(frozen=True)
class Anchoring(OpinionMechanism):
    """Every opinion returns toward the user's opinion at reset by rate·(anchor − o_u)."""

    rate: float

    name: ClassVar[str] = "anchoring"
    FIELDS: ClassVar[dict[str, str]] = {"rate": "anchor_rate"}
    OFF: ClassVar[dict[str, float]] = {"anchor_rate": 0.0}

    def apply(self, opinion: np.ndarray, round_input: RoundInput, anchor: np.ndarray) -> None:
        opinion += self.rate * (anchor - opinion)


@dataclass(frozen=True)
class Contagion(BeliefMechanism):
    """Misinformation as a complex contagion: an active user who saw k misinformation posts
    adopts it with probability susceptibility·adoption·σ(steepness·(k − threshold)) (0
    when k = 0); believers recover with probability ``recovery``. One uniform draw per
    active user from the round's generator."""

    threshold: float
    steepness: float
    adoption: float
    recovery: float

    name: ClassVar[str] = "contagion"
    FIELDS: ClassVar[dict[str, str]] = {
        "threshold": "misinfo_threshold",
        "steepness": "misinfo_steepness",
        "adoption": "misinfo_adoption",
        "recovery": "misinfo_recovery",
    }
    OFF: ClassVar[dict[str, float]] = {"misinfo_adoption": 0.0}
    metric: ClassVar[str] = "misinformation_ratio"

    def spread(
        self, round_input: RoundInput, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        users, posts = round_input.users, round_input.posts
        active, feed = round_input.active, round_input.feed
        seen_misinfo = flagged_per_row(feed, posts.misinfo)
        believer = users.misinformed[active]
        adopt_prob = (
            users.susceptibility[active]
            * self.adoption
            * sigmoid(self.steepness * (seen_misinfo - self.threshold))
        )
        adopt_prob = np.where(seen_misinfo > 0, adopt_prob, 0.0)
        u = rng.random(len(active))
        new_belief = np.where(believer, u >= self.recovery, u < adopt_prob)
        flipped = new_belief != believer
        return active[flipped], new_belief[flipped]


#: Every mechanism, in the order a round applies them within its kind.
MECHANISMS: tuple[type[Mechanism], ...] = (
    Assimilation,
    Backfire,
    Reinforcement,
    ExposureAssimilation,
    Anchoring,
    Contagion,
)


def reaction_moves(
    mechanisms: list[ReactionMechanism], reacted: Reacted
) -> tuple[np.ndarray, np.ndarray]:
    """(moved, step): the reactions any mechanism moves and each one's summed move (with
    numba, the built-in three in one compiled pass: the same values)."""
    params = _built_in_params(mechanisms)
    if params is not None:
        fused = built_in_reaction_moves(
            reacted.opinion, reacted.stance, reacted.kind, reacted.positive, reacted.hostile, params
        )
        if fused is not None:
            return fused
    moved = np.zeros(len(reacted.opinion), bool)
    step = np.zeros(len(reacted.opinion), np.float64)
    for index, mechanism in enumerate(mechanisms):
        moved |= mechanism.moves(reacted)
        part = mechanism.step(reacted)
        step = part.astype(np.float64) if index == 0 else step + part
    return moved, step


def _built_in_params(mechanisms: list[ReactionMechanism]) -> tuple[float, ...] | None:
    """The parameters of :func:`built_in_reaction_moves` when ``mechanisms`` are exactly the
    built-in assimilation, backfire and reinforcement, in that order, with Python numbers (the
    weak scalars NumPy casts to the float32 columns' type); else None."""
    if len(mechanisms) != 3:
        return None
    assimilation, backfire, reinforcement = mechanisms
    if not (
        type(assimilation) is Assimilation
        and type(backfire) is Backfire
        and type(reinforcement) is Reinforcement
    ):
        return None
    values = (
        assimilation.rate,
        assimilation.confidence_bound,
        backfire.rate,
        backfire.gap,
        reinforcement.rate,
        reinforcement.confidence_bound,
    )
    if not all(type(value) in (int, float) for value in values):
        return None
    return (
        float(assimilation.rate),
        2 * assimilation.confidence_bound,
        float(backfire.rate),
        2 * backfire.gap,
        float(reinforcement.rate),
        2 * reinforcement.confidence_bound,
    )
