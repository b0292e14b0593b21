"""PolicySim-Exposure-v0's lever config: whose exposure the policy sets, and to what levels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from policysim_infra.validation import Limit, check, check_fields
from socialenv.core.config import DEFAULT_LEVER_SHARE, MAX_ARMS
from socialenv.core.lever import LeverConfig


@dataclass(frozen=True)
class ExposureLeverConfig(LeverConfig):
    """The Exposure lever (``gym.make("PolicySim-Exposure-v0", lever={...})``, or each field
    as a keyword).

    Attributes:
        lever_share: the recent authors whose level the policy sets, as a share of the
            round's active users (see :class:`socialenv.envs.rec.RecLeverConfig`).
        budget: must be 1: one level per sampled author (size the lever with
            ``lever_share`` or ``exposure_users``).
        exposure_users: a fixed number of recent authors per round instead of
            ``lever_share`` (None: from the share); arms = lever capacity ×
            len(exposure_levels).
        exposure_levels: the probability levels an arm can set (1.0 = no filtering).
    """

    users_field: ClassVar[str | None] = "exposure_users"
    size_fields: ClassVar[tuple[str, ...]] = ("exposure_users", "lever_share", "exposure_levels")

    lever_share: Annotated[float, Limit(gt=0, le=1)] = DEFAULT_LEVER_SHARE
    budget: Annotated[int, Limit(ge=1, le=10_000)] = 1
    exposure_users: Annotated[int | None, Limit(ge=1, le=100_000)] = None
    exposure_levels: Annotated[tuple[float, ...], Limit(max_len=100)] = (0.0, 0.25, 0.5, 0.75, 1.0)

    def __post_init__(self) -> None:
        check_fields(self, "")
        if self.budget != 1:
            raise ValueError(
                f"budget={self.budget!r} is not allowed for PolicySim-Exposure-v0: "
                "one level per sampled author, budget=1 (size the lever with exposure_users)"
            )
        levels = tuple(self.exposure_levels)
        check(
            len(levels) >= 1 and all(0 <= p <= 1 for p in levels),
            "exposure_levels",
            "a non-empty sequence of probabilities in [0, 1]",
            self.exposure_levels,
        )
        object.__setattr__(self, "exposure_levels", tuple(float(p) for p in levels))
        check(
            self.exposure_users is None
            or self.exposure_users * len(self.exposure_levels) <= MAX_ARMS,
            "exposure_users",
            f"exposure_users × len(exposure_levels) <= {MAX_ARMS} arms (or None)",
            self.exposure_users,
        )
