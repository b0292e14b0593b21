"""The feed-cap lever: a capped user sees only the first ``cap`` posts of their feed."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core.lever import Lever, PolicyEffects
from tests.socialenv.example_lever.config import FeedCapConfig


class FeedCapLever(Lever):
    """:meth:`apply` takes ``choice["user"]`` and ``choice["cap"]`` for the coming round;
    :meth:`filter_feeds` keeps the first ``cap`` posts of those users' feeds; :meth:`effects`
    reports per choice the posts it removed ("removed") and each reaction of a capped user."""

    config_class = FeedCapConfig

    def __init__(self, config: FeedCapConfig) -> None:
        super().__init__(config)
        self.reset(0)

    def reset(self, num_users: int) -> None:
        self._user = np.zeros(0, np.int64)
        self._cap = np.zeros(0, np.int64)
        self._removed = np.zeros(0, np.int64)

    def apply(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        self._user = np.asarray(choice["user"], np.int64)
        self._cap = np.asarray(choice["cap"], np.int64)
        return np.arange(len(self._user), dtype=np.int64)

    def filter_feeds(
        self, feed: np.ndarray, owner: np.ndarray, round_: int, rng: np.random.Generator
    ) -> np.ndarray:
        cap_of = np.full(len(self.sim.users.stance), np.iinfo(np.int64).max)
        cap_of[self._user] = self._cap
        valid = feed >= 0
        rank = np.cumsum(valid, axis=1) - 1
        cut = valid & (rank >= cap_of[owner])
        position = np.full(len(cap_of), -1, np.int64)
        position[self._user] = np.arange(len(self._user))
        self._removed = np.bincount(position[owner[cut]], minlength=len(self._user)).astype(
            np.int64
        )
        return np.where(cut, -1, feed)

    def effects(self, round_: Any) -> PolicyEffects:
        position = np.full(len(self.sim.users.stance), -1, np.int64)
        position[self._user] = np.arange(len(self._user))
        effects = PolicyEffects(
            choice={"user": self._user, "cap": self._cap, "removed": self._removed},
            reaction_choice=position[round_.output.react_user],
        )
        self.reset(0)
        return effects
