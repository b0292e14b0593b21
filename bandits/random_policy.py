"""The uniformly random policy: the floor every learning policy must beat."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bandits.base import Policy


@dataclass(eq=False)
class RandomPolicy(Policy):
    """Picks ``budget`` distinct allowed arms uniformly at random; learns nothing."""

    name: ClassVar[str] = "random"

    def _reset(self) -> None:
        pass

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        return self._rng.choice(contexts.shape[0], size=budget, replace=False)

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        return np.full(contexts.shape[0], budget / contexts.shape[0]), "exact"

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        pass

    def _state(self) -> dict[str, Any]:
        return {}

    def _load_state(self, learned: dict[str, Any]) -> None:
        pass
