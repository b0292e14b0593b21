"""LinUCB (Li, Chu, Langford & Schapire, WWW 2010)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandits._checks import check_float
from bandits.ridge import RidgePolicy


@dataclass(eq=False)
class LinUCB(RidgePolicy):
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
        null_reward: the reward of leaving a slot empty (a null arm; see
            :class:`~bandits.ridge.RidgePolicy`), or None to fill every slot. Default None.
    """

    alpha: float = 0.5
    regularization: float = 1.0
    fit_intercept: bool = True
    null_reward: float | None = None

    name: ClassVar[str] = "linucb"

    def _check_hyperparameters(self) -> None:
        check_float(self, "alpha", minimum=0.0)
        self._check_ridge()

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return self._predict(contexts) + self.alpha * np.sqrt(self._ridge.variance(contexts))
