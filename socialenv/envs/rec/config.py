"""PolicySim-Rec-v0's lever config: how many users the policy recommends to, and what."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, ClassVar

import numpy as np

from policysim_infra.validation import Limit, check, check_fields
from socialenv.core.config import (
    CANDIDATE_SOURCES,
    DEFAULT_CANDIDATE_MIX,
    DEFAULT_LEVER_SHARE,
    MAX_ARMS,
)
from socialenv.core.lever import LeverConfig


@dataclass(frozen=True)
class RecLeverConfig(LeverConfig):
    """The Rec lever (``gym.make("PolicySim-Rec-v0", lever={...})``, or each field as a
    keyword).

    Attributes:
        lever_share: the users the policy recommends to, as a share of the round's active
            users (so that the lever means the same at any population size); the
            observation holds room for ``lever_share`` × (expected active users + 3
            standard deviations) users (:meth:`socialenv.envs.base.PolicySimEnv.lever_capacity`).
        budget: recommended slots the policy fills for each sampled user (at most
            ``recommender.personalized``; the built-in recommender fills the rest).
        candidate_users: a fixed number of users per round instead of ``lever_share``
            (None: from the share).
        candidates: candidate posts per source for each sampled user (keys of
            :data:`socialenv.core.config.CANDIDATE_SOURCES`); arms = lever capacity × C, C = the
            sum of the values.
    """

    users_field: ClassVar[str | None] = "candidate_users"
    size_fields: ClassVar[tuple[str, ...]] = (
        "candidate_users",
        "lever_share",
        "candidates",
        "budget",
    )

    lever_share: Annotated[float, Limit(gt=0, le=1)] = DEFAULT_LEVER_SHARE
    budget: Annotated[int, Limit(ge=1, le=10_000)] = 5
    candidate_users: Annotated[int | None, Limit(ge=1, le=100_000)] = None
    candidates: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_CANDIDATE_MIX))

    def __post_init__(self) -> None:
        check_fields(self, "")
        mix = self.candidates
        check(
            isinstance(mix, dict)
            and set(mix) <= set(CANDIDATE_SOURCES)
            and all(
                isinstance(v, int | np.integer) and not isinstance(v, bool) and 0 <= v <= 100
                for v in mix.values()
            )
            and sum(mix.values()) >= 1,
            "candidates",
            f"a dict of integers in [0, 100] with keys among {CANDIDATE_SOURCES} "
            "and a positive sum",
            mix,
        )
        object.__setattr__(self, "candidates", {k: int(v) for k, v in mix.items()})
        check(
            self.candidate_users is None
            or self.candidate_users * sum(self.candidates.values()) <= MAX_ARMS,
            "candidate_users",
            f"candidate_users × candidate posts per user <= {MAX_ARMS} arms (or None)",
            self.candidate_users,
        )
