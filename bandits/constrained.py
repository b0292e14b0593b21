"""ε-greedy under a cost constraint: maximise the reward among the arms whose estimated cost is
within a limit (a linear safe-set bandit).

A platform may want more of one thing without more of another: dialogue across stances
without more toxicity. The reward alone cannot say that when the reward's own optimum raises
the cost (PolicySim-Rec-v0: the objective's oracle raises the toxicity metric). This policy
learns two ridge models, one for the reward and one for a per-arm cost the caller passes to
``update`` (PolicySim-Rec-v0: ``info["arm_toxicity"]``), and only ever picks an arm whose
estimated cost is at most ``cost_limit``: greedy and exploring slots alike (safe
exploration). An untrained cost model estimates 0 for every arm, so at ``cost_limit`` 0 every
arm starts eligible and drops out once its kind of arm is seen to cost.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bandits._checks import check_float
from bandits.egreedy import LinearEpsilonGreedy, epsilon_greedy_inclusion, epsilon_greedy_slate
from bandits.ridge import OnlineRidge


@dataclass(eq=False)
class ConstrainedEpsilonGreedy(LinearEpsilonGreedy):
    """ε-greedy over the arms whose ridge-estimated cost is at most ``cost_limit``.

    ``select`` takes the eligible arms (estimated cost ĉ(x) ≤ ``cost_limit``) and builds the
    ε-greedy slate of :func:`bandits.egreedy.epsilon_greedy_slate` among them only; with
    fewer eligible arms than the budget (or a null arm, ``null_reward``) the slate is
    shorter. ``update(contexts, rewards, costs)`` trains the reward ridge on the rewards and
    the cost ridge on the costs; without ``costs`` the cost model learns nothing that round
    (a warning says so once). Propensities are exact (the ε-greedy closed form over the
    eligible arms, 0 for the others).

    Attributes:
        epsilon: exploration probability per slot, among the eligible arms. Default 0.1.
        regularization: ridge λ > 0 of both models. Default 1.0.
        fit_intercept: append a constant 1 feature in both models. Default True.
        null_reward: the reward of leaving a slot empty (:class:`bandits.ridge.RidgePolicy`),
            or None. Default None.
        cost_limit: the largest estimated cost an arm may have to be picked, in the cost's
            units (PolicySim-Rec-v0's ``arm_toxicity``: excess reply toxicity against the
            displaced slot, so 0 = "no more toxic than the platform's own choice").
            Default 0.0.
    """

    cost_limit: float = 0.0

    name: ClassVar[str] = "egreedy_constrained"
    #: ``update`` takes per-arm ``costs`` (the env's loop passes them; see
    #: :func:`socialenv.envs.episodes.learn_from_step`).
    learns_costs: ClassVar[bool] = True

    def _check_hyperparameters(self) -> None:
        super()._check_hyperparameters()
        check_float(self, "cost_limit")

    def _reset(self) -> None:
        super()._reset()
        self._cost_ridge = OnlineRidge(self.context_dim, self.regularization, self.fit_intercept)
        self._warned_without_costs = False

    def eligible(self, contexts: np.ndarray) -> np.ndarray:
        """(K, D) contexts -> (K,) bool: the estimated cost is within ``cost_limit``."""
        return self._eligible(self._validated_contexts(contexts, "contexts"))

    def _eligible(self, contexts: np.ndarray) -> np.ndarray:
        return self._cost_ridge.predict(contexts) <= self.cost_limit

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        eligible = np.flatnonzero(self._eligible(contexts))
        if len(eligible) == 0:
            return np.zeros(0, np.int64)
        picked = epsilon_greedy_slate(
            self._scores(contexts[eligible]),
            min(budget, len(eligible)),
            self.epsilon,
            self._rng,
            self.score_floor,
        )
        return eligible[picked]

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        probs = np.zeros(contexts.shape[0])
        eligible = np.flatnonzero(self._eligible(contexts))
        if len(eligible):
            probs[eligible] = epsilon_greedy_inclusion(
                self._scores(contexts[eligible]),
                min(budget, len(eligible)),
                self.epsilon,
                self.score_floor,
            )
        return probs, "deterministic" if np.all((probs == 0) | (probs == 1)) else "exact"

    def update(
        self, contexts: np.ndarray, rewards: np.ndarray, costs: np.ndarray | None = None
    ) -> None:
        """Learn the rewards (as every policy does) and the per-arm ``costs`` (n,), finite.
        Bad ``costs`` are refused before anything is learnt."""
        n = np.asarray(contexts).shape[0] if np.asarray(contexts).ndim else 0
        if costs is not None:
            costs = np.asarray(costs)
            if costs.shape != (n,) or costs.dtype.kind not in "biuf":
                raise ValueError(
                    f"costs must be real numbers of shape (n,) = ({n},) to match contexts; got "
                    f"shape {costs.shape}, dtype {costs.dtype}"
                )
            if not np.all(np.isfinite(costs)):
                raise ValueError(f"costs must be finite; got {costs[~np.isfinite(costs)][:5]}")
        n_before = self.n_observations
        super().update(contexts, rewards)
        if self.n_observations == n_before:  # an empty batch
            return
        if costs is None:
            if not self._warned_without_costs:
                warnings.warn(
                    f"{self.name}.update() got no costs: its cost model learns nothing this "
                    "round (pass update(contexts, rewards, costs=...), e.g. "
                    'info["arm_toxicity"] of PolicySim-Rec-v0)',
                    stacklevel=2,
                )
                self._warned_without_costs = True
            return
        self._cost_ridge.update(
            self._validated_contexts(contexts, "contexts"), costs.astype(np.float64)
        )

    def _state(self) -> dict[str, Any]:
        return {"reward": super()._state(), "cost": self._cost_ridge.state()}

    def _load_state(self, learned: dict[str, Any]) -> None:
        super()._load_state(learned["reward"])
        self._cost_ridge.load_state(learned["cost"])
