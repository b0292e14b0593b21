"""LinUCB (Li, Chu, Langford & Schapire, WWW 2010)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bandits._checks import check_bool, check_float
from bandits.base import ScoredPolicy
from bandits.ridge import OnlineRidge


@dataclass(eq=False)
class LinUCB(ScoredPolicy):
    """LinUCB with one parameter vector shared by all arms.

    Arms here are described only by their contexts (they change every round), so this is the
    shared-θ form of Li et al. (2010), Algorithm 1 with a single ridge model:

        UCB(x) = θ̂·x + alpha · sqrt(xᵀ A⁻¹ x),   A = λI + Σ x xᵀ,   θ̂ = A⁻¹ Σ r·x,

    with A⁻¹ updated by Sherman–Morrison (O(d²) per observation, no matrix inversion).

    Attributes:
        alpha: width of the confidence bonus (Li et al.'s α). Default 0.5.
        regularization: ridge λ > 0 (A starts at λ·I). Default 1.0.
        fit_intercept: append a constant 1 feature, so that the reward's offset is not
            forced through θ. Default True.
    """

    alpha: float = 0.5
    regularization: float = 1.0
    fit_intercept: bool = True

    name: ClassVar[str] = "linucb"

    def _check_hyperparameters(self) -> None:
        check_float(self, "alpha", minimum=0.0)
        check_float(self, "regularization", minimum=0.0, exclusive_minimum=True)
        check_bool(self, "fit_intercept")

    def _reset(self) -> None:
        self._ridge = OnlineRidge(self.context_dim, self.regularization, self.fit_intercept)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return self._ridge.predict(contexts) + self.alpha * np.sqrt(self._ridge.variance(contexts))

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        self._ridge.update(contexts, rewards)

    def _state(self) -> dict[str, Any]:
        return self._ridge.state()

    def _load_state(self, learned: dict[str, Any]) -> None:
        self._ridge.load_state(learned)
