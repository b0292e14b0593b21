"""The policy's lever: what an env's policy controls on the platform, as one component.

:class:`Simulation` knows one :class:`Lever` and calls its hooks at fixed points of the
round (the phases of :meth:`socialenv.core.simulation.Simulation.run_round`); the lever alone
changes the platform for the policy. An env owns one lever (``socialenv/envs/<name>/lever.py``)
and one lever config (``config.py`` beside it), which ``gym.make`` takes under ``lever=``.

The hooks, in the order a round calls them:

| hook | when | default |
|---|---|---|
| :meth:`Lever.apply` | the env's step, before the round: the policy's choices take effect | nothing applied |
| :meth:`Lever.barred` | sampling the active users (and when choices are applied) | nobody barred |
| :meth:`Lever.place_recommendations` | building the feeds | feeds unchanged |
| :meth:`Lever.filter_feeds` | filtering the feeds, before exposure control | feeds unchanged |
| :meth:`Lever.adjust_output` | after the brain answered, before the output is applied | output unchanged |
| :meth:`Lever.effects` | measuring the round: what the policy's choices caused | no choice, no impression |
| :meth:`Lever.remap_posts` | post compaction: the ids it holds shift down | nothing held |
| :meth:`Lever.state_dict` | checkpoints | no state |
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from agent_models.types import RoundOutput
from policysim_infra.validation import check_keys, config_error


@dataclass
class PolicyEffects:
    """What the policy's choices of one round caused, as the lever reports it (the rewards
    read this and never work it out again from the world).

    Attributes:
        choice: per applied choice (C,), in the order of :meth:`Lever.apply`: the lever's
            columns (e.g. "user", "post", "author"; see each lever's docstring).
        impression: per impression whose fate the lever decided (I,): "user", "post",
            "author" and the lever's own columns (e.g. "choice", "removed").
        reaction_choice: (R,) for each reaction of the round (``output.react_*``), the index
            of the applied choice it responds to (-1: none).
    """

    choice: dict[str, np.ndarray] = field(default_factory=dict)
    impression: dict[str, np.ndarray] = field(default_factory=dict)
    reaction_choice: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True)
class LeverConfig:
    """Base of the lever configs: a frozen dataclass whose fields are the env's own keyword
    arguments (``gym.make(env_id, lever={...})`` or each field as a keyword).
    ``users_field`` names the field that fixes how many users the lever governs per round
    (None: the lever has none), so that tools size any env's lever without knowing it;
    ``size_fields`` lists the fields that set the lever's size, for the advice of
    :mod:`socialenv.envs.sizing` (each a field name, optionally followed by ``=`` and what to
    set in it; a fixed size before the share of active users: the advice scales the first
    numeric one as its example)."""

    users_field: ClassVar[str | None] = None
    size_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_spec(cls, spec: Any = None, **shorthand: Any) -> LeverConfig:
        """The config of ``lever=spec`` (None, a dict of fields or an instance) with the
        fields given as keywords on top; a field given both ways is refused."""
        if spec is None:
            values: dict[str, Any] = {}
        elif isinstance(spec, cls):
            values = {name: getattr(spec, name) for name in cls.field_names()}
        elif isinstance(spec, dict):
            check_keys(spec, cls.field_names(), "lever", f"field(s) of {cls.__name__}")
            values = dict(spec)
        else:
            raise config_error("lever", spec, f"None, a dict of fields or a {cls.__name__}")
        both = sorted(set(values) & set(shorthand)) if spec is not None else []
        if both and not isinstance(spec, cls):
            raise config_error(
                "lever", both, "each field once: in lever={...} or as a keyword, not both"
            )
        return cls(**{**values, **shorthand})


class Lever:
    """The policy's handle on the platform; subclasses override the hooks they need.

    ``config_class`` is the env's lever config; ``supports_post_compaction`` says whether
    the lever may hold post ids across rounds that :meth:`remap_posts` keeps valid (False:
    the simulation keeps every post)."""

    config_class: ClassVar[type[LeverConfig]] = LeverConfig
    supports_post_compaction: ClassVar[bool] = True

    def __init__(self, config: LeverConfig) -> None:
        self.config = config
        #: the :class:`socialenv.core.simulation.Simulation` that calls the hooks
        self.sim: Any = None

    def attach(self, sim: Any) -> None:
        """Called once by the simulation (:class:`socialenv.core.simulation.Simulation`) that
        calls the hooks."""
        self.sim = sim

    # ------------------------------------------------------------------ episode
    def reset(self, num_users: int) -> None:
        """A new episode: no decision in force."""

    # ------------------------------------------------------------------ hooks
    def apply(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        """The policy's choices of the coming round take effect (``choice``: per chosen arm,
        the env's arm columns). Returns the indices into the choices that took effect."""
        return np.arange(len(next(iter(choice.values()), ())), dtype=np.int64)

    def barred(self, round_: int) -> np.ndarray | None:
        """(N,) bool: the users the lever keeps from acting in ``round_`` (None: nobody)."""
        del round_
        return None

    def place_recommendations(
        self, feed: np.ndarray, channel: np.ndarray, active: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Put the policy's recommendations into the (B, F) feeds of the ``active`` users."""
        del active
        return feed, channel

    def filter_feeds(
        self, feed: np.ndarray, owner: np.ndarray, round_: int, rng: np.random.Generator
    ) -> np.ndarray:
        """The (B, F) feeds (owner (B, F) user ids) after the decisions in force."""
        del owner, round_, rng
        return feed

    def adjust_output(
        self, output: RoundOutput, misinformed_before: np.ndarray, rng: np.random.Generator
    ) -> None:
        """Change the brain's output in place before it is applied."""
        del output, misinformed_before, rng

    def effects(self, round_: Any) -> PolicyEffects:
        """What the choices applied this round caused (``round_``: the round's
        :class:`socialenv.core.simulation.RoundResult`, metrics not yet set)."""
        return PolicyEffects(reaction_choice=np.full(len(round_.output.react_user), -1, np.int64))

    def remap_posts(self, cut: int) -> None:
        """Post compaction dropped the posts before id ``cut``; kept ids shift down by it."""
        del cut

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any] | None:
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        del state


def shift_post_ids(ids: np.ndarray, cut: int) -> np.ndarray:
    """``ids`` after compaction dropped the posts before ``cut`` (-1 for a dropped post)."""
    return np.where(ids >= cut, ids - cut, -1)
