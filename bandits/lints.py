"""Linear Thompson sampling (Agrawal & Goyal, ICML 2013)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bandits._checks import check_float
from bandits.ridge import RidgePolicy


@dataclass(eq=False)
class LinTS(RidgePolicy):
    """Thompson sampling with a linear payoff model.

    Each round draws one θ̃ ~ N(θ̂, v²·A⁻¹) (A = λI + Σ x xᵀ, θ̂ = A⁻¹ Σ r·x, A⁻¹ kept by
    Sherman–Morrison) and ranks the arms by θ̃·x; the whole slate comes from the same draw.
    The Cholesky factor of A⁻¹ is cached until the next update.

    Attributes:
        posterior_scale: v, the scale of the posterior draw. Agrawal & Goyal's theoretical
            v = R·sqrt(24 d ln(1/δ)/ε) explores far too much in practice; 0.2 suits rewards
            in [0, 1]. Default 0.2.
        regularization: ridge λ > 0. Default 1.0.
        fit_intercept: append a constant 1 feature. Default True.
        null_reward: the reward of leaving a slot empty (a null arm; see
            :class:`~bandits.ridge.RidgePolicy`), or None to fill every slot. Default None.
            An arm whose sampled score is below it is not picked.
    """

    posterior_scale: float = 0.2
    regularization: float = 1.0
    fit_intercept: bool = True
    null_reward: float | None = None

    name: ClassVar[str] = "lints"
    randomized_scores: ClassVar[bool] = True

    def _check_hyperparameters(self) -> None:
        check_float(self, "posterior_scale", minimum=0.0)
        self._check_ridge()

    def _reset(self) -> None:
        super()._reset()
        self._cholesky: np.ndarray | None = None

    def _posterior_sample(self) -> np.ndarray:
        noise = self._rng.standard_normal(self._ridge.theta.shape[0])
        return self._ridge.theta + self.posterior_scale * (self._cholesky_factor() @ noise)

    def _cholesky_factor(self) -> np.ndarray:
        """Cholesky factor of A⁻¹, cached until the next update."""
        if self._cholesky is None:
            A_inv = self._ridge.A_inv
            try:
                self._cholesky = np.linalg.cholesky(A_inv)
            except np.linalg.LinAlgError:
                jitter = 1e-10 * np.trace(A_inv) / A_inv.shape[0]
                self._cholesky = np.linalg.cholesky(A_inv + jitter * np.eye(A_inv.shape[0]))
        return self._cholesky

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        theta = self._posterior_sample()
        scores = contexts.astype(np.float64) @ theta[: self.context_dim] + self._reward_offset
        return scores + theta[self.context_dim] if self.fit_intercept else scores

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        """Monte-Carlo: the top-``budget`` set of correlated Gaussian scores has no closed-form
        inclusion probability, so ``propensity_draws`` posterior draws (from a generator derived
        from the policy's state, leaving ``self._rng`` untouched) are ranked."""
        state = self._rng.bit_generator.state["state"]
        rng = np.random.default_rng([self.seed, 2, state["state"] % 2**63, state["inc"] % 2**63])
        draws = self.propensity_draws
        noise = rng.standard_normal((self._ridge.theta.shape[0], draws))
        thetas = self._ridge.theta[:, None] + self.posterior_scale * (
            self._cholesky_factor() @ noise
        )
        scores = contexts.astype(np.float64) @ thetas[: self.context_dim] + self._reward_offset
        if self.fit_intercept:
            scores += thetas[self.context_dim]
        top = np.argpartition(-scores, budget - 1, axis=0)[:budget]
        if self.score_floor is not None:  # a picked arm must reach the null arm's score
            top = top[np.take_along_axis(scores, top, axis=0) >= self.score_floor]
        counts = np.bincount(top.ravel(), minlength=contexts.shape[0])
        return counts / draws, "monte_carlo"

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        super()._update(contexts, rewards)
        self._cholesky = None

    def _load_state(self, learned: dict[str, Any]) -> None:
        super()._load_state(learned)
        self._cholesky = None
