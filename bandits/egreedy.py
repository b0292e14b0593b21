"""ε-greedy on a linear ridge reward model (the paper's ε-greedy baseline)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandits._checks import check_float
from bandits.base import tie_averaged, top_ranked
from bandits.ridge import RidgePolicy


def epsilon_greedy_slate(
    greedy_scores: np.ndarray,
    budget: int,
    epsilon: float,
    rng: np.random.Generator,
    floor: float | None = None,
) -> np.ndarray:
    """A slate of ``budget`` distinct positions of ``greedy_scores`` (K,).

    Each slot independently explores with probability ε. The m exploring slots get distinct
    arms drawn uniformly from those the greedy part did not take; the other budget − m slots
    get the budget − m best-scored arms, in score order. Explored arms keep their slot. With a
    ``floor`` (the null arm's score) a greedy slot whose arm would score below it stays empty
    and is dropped, so the slate may be shorter; the exploring slots are kept.
    """
    explore = rng.random(budget) < epsilon
    n_explore = int(explore.sum())
    greedy = top_ranked(greedy_scores, budget - n_explore, rng)
    slate = np.empty(budget, dtype=np.int64)
    slate[~explore] = greedy
    if n_explore:
        remaining = np.setdiff1d(np.arange(greedy_scores.shape[0]), greedy, assume_unique=True)
        slate[explore] = rng.choice(remaining, size=n_explore, replace=False)
    if floor is not None:
        slate = slate[explore | (np.asarray(greedy_scores, np.float64)[slate] >= floor)]
    return slate


def epsilon_greedy_inclusion(
    greedy_scores: np.ndarray, budget: int, epsilon: float, floor: float | None = None
) -> np.ndarray:
    """(K,) exact probability that :func:`epsilon_greedy_slate` includes each arm.

    With m ~ Binomial(budget, ε) exploring slots, the arm ranked r (0 = best) is in the slate
    if r < budget − m, or otherwise with probability m / (K − budget + m) (the explored arms
    are drawn uniformly from the K − (budget − m) arms the greedy part left). Arms tied in
    score share their ranks uniformly (:func:`bandits.base.tie_averaged`). With a ``floor``,
    an arm scored below it is in the slate only when explored.
    """
    n_arms = len(greedy_scores)
    explore = np.arange(budget + 1)
    weight = np.asarray(
        [math.comb(budget, m) * epsilon**m * (1 - epsilon) ** (budget - m) for m in explore]
    )
    greedy_count = budget - explore
    leftover = n_arms - greedy_count
    explore_share = np.divide(explore, leftover, out=np.zeros(budget + 1), where=leftover > 0)
    ranks = np.arange(n_arms)[:, None]
    in_greedy = ranks < greedy_count[None, :]
    rank_probs = np.where(in_greedy, 1.0, explore_share[None, :]) @ weight
    probs = tie_averaged(rank_probs, greedy_scores)
    if floor is not None:
        below = np.asarray(greedy_scores, np.float64) < floor
        explored = np.where(in_greedy, 0.0, explore_share[None, :]) @ weight
        probs[below] = tie_averaged(explored, greedy_scores)[below]
    return probs


class EpsilonGreedySlates:
    """``select`` and propensities of ε-greedy over the greedy ``_scores`` of the policy it
    is mixed into (before its :class:`~bandits.base.ScoredPolicy` base), which has an
    ``epsilon`` field."""

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        floor = getattr(self, "score_floor", None)
        return epsilon_greedy_slate(self._scores(contexts), budget, self.epsilon, self._rng, floor)

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        floor = getattr(self, "score_floor", None)
        probs = epsilon_greedy_inclusion(self._scores(contexts), budget, self.epsilon, floor)
        return probs, "deterministic" if np.all((probs == 0) | (probs == 1)) else "exact"

    def _deterministic(self, contexts: np.ndarray) -> bool:
        return self.epsilon == 0 and super()._deterministic(contexts)


@dataclass(eq=False)
class LinearEpsilonGreedy(EpsilonGreedySlates, RidgePolicy):
    """ε-greedy with a ridge-regression reward estimate θ̂·x (A⁻¹ kept by Sherman–Morrison).

    Scores are the greedy estimates; ``select`` explores each slot with probability ε (see
    :func:`epsilon_greedy_slate`).

    Attributes:
        epsilon: exploration probability per slot, in [0, 1]. Default 0.1.
        regularization: ridge λ > 0. Default 1.0.
        fit_intercept: append a constant 1 feature. Default True.
        null_reward: the reward of leaving a slot empty (a null arm; see
            :class:`~bandits.ridge.RidgePolicy`), or None to fill every slot. Default None.
            With it the greedy slots take only arms estimated at or above it; the exploring
            slots still draw from all arms.
    """

    epsilon: float = 0.1
    regularization: float = 1.0
    fit_intercept: bool = True
    null_reward: float | None = None

    name: ClassVar[str] = "egreedy"

    def _check_hyperparameters(self) -> None:
        check_float(self, "epsilon", minimum=0.0, maximum=1.0)
        self._check_ridge()

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return self._predict(contexts)
