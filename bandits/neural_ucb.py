"""NeuralUCB (Zhou, Li & Gu, "Neural Contextual Bandits with UCB-based Exploration",
ICML 2020), with the diagonal approximation of Z used by its reference code (NeuralUCBDiag)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from bandits._checks import check_choice, check_float, check_hidden_sizes
from bandits.networks import (
    INITIALIZATIONS,
    DiagonalGradientCovariance,
    Regressor,
    arms_per_chunk,
    factored_bytes_per_arm,
    gradient_factors,
    symmetric_init_,
    to_tensor,
)
from bandits.neural import NeuralPolicy


@dataclass(eq=False)
class NeuralUCB(NeuralPolicy):
    """Upper confidence bound on a neural reward estimate, with diagonal Z.

        UCB(x) = f(x; θ) + exploration · sqrt( Σ_j g_j(x)² / Z_j ),   g = ∇θ f(x; θ),
        Z = regularization · 1 + Σ_{observed arms} g∘g   (the gradient at the round it was
        observed, before that round's training).

    Zhou et al. write the bonus γ·sqrt(gᵀ Z⁻¹ g / m); the 1/m width factor and γ are folded
    into ``exploration``. Their reference code's sqrt(λ·ν·Σ g²/Z) is exploration = sqrt(λ·ν).
    f is trained by mean squared error with Adam, ``train_steps`` mini-batches from a replay
    buffer of the latest ``buffer_size`` observations after each ``update``.

    Attributes:
        hidden_sizes: f's hidden layer widths. Default (64,).
        exploration: width of the bonus (γ/√m above). Default 0.1.
        regularization: λ > 0, Z's initial diagonal. Default 1.0.
        learning_rate: Adam step size. Default 1e-3.
        train_steps: Adam steps per ``update``. Default 10.
        batch_size: mini-batch size. Default 64.
        buffer_size: replay buffer capacity. Default 10,000.
        gradient_memory_mb: approximate bound on the scratch memory of one batched gradient
            call (K is chunked to respect it). Default 64.
        initialization: "symmetric" (default; Zhou et al. 2020's exact-zero output, see
            :func:`bandits.networks.symmetric_init_`) or "default" (PyTorch's).
    """

    hidden_sizes: tuple[int, ...] = (64,)
    exploration: float = 0.1
    regularization: float = 1.0
    learning_rate: float = 1e-3
    train_steps: int = 10
    batch_size: int = 64
    buffer_size: int = 10_000
    gradient_memory_mb: float = 64.0
    initialization: str = "symmetric"

    name: ClassVar[str] = "neural_ucb"
    learned_parts: ClassVar[tuple[str, ...]] = ("network", "covariance")

    def _check_hyperparameters(self) -> None:
        check_hidden_sizes(self, "hidden_sizes")
        check_float(self, "exploration", minimum=0.0)
        check_float(self, "regularization", minimum=0.0, exclusive_minimum=True)
        check_float(self, "learning_rate", minimum=0.0, exclusive_minimum=True)
        self._check_training()
        check_float(self, "gradient_memory_mb", minimum=0.0, exclusive_minimum=True)
        check_choice(self, "initialization", INITIALIZATIONS)

    def _build(self, init_generator: torch.Generator) -> None:
        self._network = Regressor(
            self.context_dim,
            self.hidden_sizes,
            self.learning_rate,
            self.buffer_size,
            init_generator,
        )
        if self.initialization == "symmetric":
            symmetric_init_(self._network.model)
        self._covariance = DiagonalGradientCovariance(self._network.model, self.regularization)

    def _chunk_size(self) -> int:
        model = self._network.model
        return arms_per_chunk(factored_bytes_per_arm(model), self.gradient_memory_mb)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        def ucb(part: torch.Tensor, chunk: int) -> torch.Tensor:
            factors = gradient_factors(self._network.model, part, chunk)
            bonus = torch.sqrt(self._covariance.gradient_norms(part, factors))
            return factors.values + self.exploration * bonus

        return self._chunked_scores(contexts, self._chunk_size(), ucb)

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        inputs = to_tensor(contexts)
        with torch.no_grad():
            for start in range(0, inputs.shape[0], chunk := self._chunk_size()):
                part = inputs[start : start + chunk]
                self._covariance.add(part, gradient_factors(self._network.model, part, chunk))
        self._network.buffer.add(inputs, torch.from_numpy(rewards.astype(np.float32)))
        self._network.fit(self.train_steps, self.batch_size, self._generator)
