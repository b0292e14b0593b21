"""The feed-cap lever's keyword arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from policysim_infra.validation import Limit, check, check_fields
from socialenv.core.config import DEFAULT_LEVER_SHARE
from socialenv.core.lever import LeverConfig


@dataclass(frozen=True)
class FeedCapConfig(LeverConfig):
    """Attributes:
    lever_share: the users whose feeds the policy caps, as a share of the active users.
    caps: the feed lengths an arm can set (posts kept per feed, first slots first).
    """

    users_field: ClassVar[str | None] = None
    size_fields: ClassVar[tuple[str, ...]] = ("lever_share", "caps")

    lever_share: Annotated[float, Limit(gt=0, le=1)] = DEFAULT_LEVER_SHARE
    caps: Annotated[tuple[int, ...], Limit(max_len=32)] = (0, 4, 8)

    def __post_init__(self) -> None:
        check_fields(self, "")
        check(
            len(self.caps) >= 1 and all(0 <= c <= 100 for c in self.caps),
            "caps",
            "a non-empty sequence of integers in [0, 100]",
            self.caps,
        )
