"""PolicySim-Moderation-v0's lever config: the governance actions per round and their settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from policysim_infra.validation import Limit, check_fields
from socialenv.core.lever import LeverConfig
from socialenv.mechanisms.governance import ModerationConfig


@dataclass(frozen=True)
class ModerationLeverConfig(LeverConfig):
    """The Moderation lever (``gym.make("PolicySim-Moderation-v0", lever={...})``, or each
    field as a keyword).

    Attributes:
        budget: governance actions per round (the slate length).
        moderation: a dict of :class:`socialenv.mechanisms.governance.ModerationConfig` fields, or the
            config (None: the defaults); becomes a ``ModerationConfig``.
    """

    size_fields: ClassVar[tuple[str, ...]] = ('moderation={"targets": ...}', "budget")

    budget: Annotated[int, Limit(ge=1, le=10_000)] = 10
    moderation: Any = None

    def __post_init__(self) -> None:
        check_fields(self, "")
        object.__setattr__(self, "moderation", ModerationConfig.from_spec(self.moderation))
