"""A synthetic contextual bandit with a known answer, to measure regret.

Each round shows ``n_arms`` arms whose contexts are drawn uniformly on the unit sphere of
R^D. The expected reward of an arm is

    h(x) = 0.5 + 0.4 · g(θ·x),   g(u) = u ("linear")  or  g(u) = cos(3u) ("cosine"),

with θ drawn uniformly on the unit sphere (so θ·x ∈ [−1, 1] and h ∈ [0.1, 0.9]); the observed
reward adds U(−noise, noise) noise (noise <= 0.1), so it always lies in [0, 1] and its mean is
exactly h. The cosine problem is even in θ·x: no linear score ranks its arms well, which is
what separates the neural policies from the linear ones (it is EE-Net's h₃ = cos(3aᵀx)).

Regret of a slate = Σ of the ``budget`` largest h among the allowed arms − Σ h of the slate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bandits._checks import check_choice, check_float, check_int
from bandits.base import Policy

REWARD_SHAPES = ("linear", "cosine")


@dataclass
class SyntheticBandit:
    """Synthetic contextual bandit (see the module docstring).

    Attributes:
        context_dim: D. Default 10.
        n_arms: K, arms per round. Default 20.
        reward: "linear" or "cosine". Default "linear".
        noise: half-width of the uniform reward noise, in [0, 0.1]. Default 0.1.
        seed: seeds θ and every context and noise draw.
    """

    context_dim: int = 10
    n_arms: int = 20
    reward: str = "linear"
    noise: float = 0.1
    seed: int = 0
    theta: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int(self, "context_dim", minimum=1)
        check_int(self, "n_arms", minimum=1)
        check_choice(self, "reward", REWARD_SHAPES)
        check_float(self, "noise", minimum=0.0, maximum=0.1)
        check_int(self, "seed", minimum=0)
        self.reset()

    def reset(self) -> None:
        """Redraw θ and restart the context and noise streams from ``seed``."""
        self._rng = np.random.default_rng(np.random.SeedSequence([self.seed, 7]))
        self.theta = _unit_rows(self._rng.standard_normal((1, self.context_dim)))[0]

    def sample_contexts(self) -> np.ndarray:
        """(n_arms, D) float32 contexts of a new round."""
        rows = self._rng.standard_normal((self.n_arms, self.context_dim))
        return _unit_rows(rows).astype(np.float32)

    def expected_rewards(self, contexts: np.ndarray) -> np.ndarray:
        """(n, D) -> (n,) float64 h(x)."""
        projection = np.asarray(contexts, dtype=np.float64) @ self.theta
        shape = projection if self.reward == "linear" else np.cos(3.0 * projection)
        return 0.5 + 0.4 * shape

    def sample_rewards(self, contexts: np.ndarray) -> np.ndarray:
        """(n, D) -> (n,) float64 noisy rewards in [0, 1] with mean h(x)."""
        mean = self.expected_rewards(contexts)
        return mean + self._rng.uniform(-self.noise, self.noise, size=mean.shape)


@dataclass
class RegretTrace:
    """Per-round results of :func:`run_policy`.

    Attributes:
        regret: (n_rounds,) slate regret of each round.
        reward: (n_rounds,) sum of the observed rewards of each round's slate.
    """

    regret: np.ndarray
    reward: np.ndarray

    @property
    def cumulative_regret(self) -> float:
        return float(self.regret.sum())


def run_policy(
    policy: Policy, bandit: SyntheticBandit, n_rounds: int, budget: int = 1
) -> RegretTrace:
    """Play ``n_rounds`` rounds of ``bandit`` with ``policy`` (select, observe, update)."""
    regret = np.empty(n_rounds)
    reward = np.empty(n_rounds)
    for round_index in range(n_rounds):
        contexts = bandit.sample_contexts()
        chosen = policy.select(contexts, None, budget)
        expected = bandit.expected_rewards(contexts)
        best = np.sort(expected)[::-1][:budget].sum()
        observed = bandit.sample_rewards(contexts[chosen])
        policy.update(contexts[chosen], observed)
        regret[round_index] = best - expected[chosen].sum()
        reward[round_index] = observed.sum()
    return RegretTrace(regret=regret, reward=reward)


def _unit_rows(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)
