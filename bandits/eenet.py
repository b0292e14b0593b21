"""EE-Net (Ban, Yan, Banerjee & He, "EE-Net: Exploitation-Exploration Neural Networks in
Contextual Bandits", ICLR 2022; arXiv 2110.03177, 2021) — the policy PolicySim's paper uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from bandits._checks import check_choice, check_float, check_hidden_sizes, check_int
from bandits.networks import (
    INITIALIZATIONS,
    GradientPooling,
    Regressor,
    arms_per_chunk,
    factored_bytes_per_arm,
    gradient_factors,
    pooled_gradients_loop,
    pooled_gradients_vmap,
    symmetric_init_,
    to_tensor,
)
from bandits.neural import NeuralPolicy

GRADIENT_METHODS = ("factored", "vmap", "loop")


@dataclass(eq=False)
class EENet(NeuralPolicy):
    """Exploitation network f1 plus an exploration network f2 that reads f1's gradient.

    - f1: MLP D → hidden_sizes → 1 (default one hidden layer of 64: the paper's two-layer
      network) estimating the reward r̂ = f1(x).
    - φ(x) = block means of ∇θ f1(x) (all of f1's parameters, flattened, ``pool_block_size``
      entries per block, last block zero-padded: ceil(P / B) features, 1,027 at D = 800) —
      the reference code's pooling.
    - f2: MLP ceil(P / B) → exploration_hidden_sizes → 1, trained on φ(x) with target
      r − f1(x) + 1 (the potential gain, shifted by 1 as in the reference code); f1(x) and
      φ(x) are evaluated in ``update`` before that update trains f1, i.e. with the f1 that
      scored the arm when ``update`` follows its ``select``.
    - score(x) = f1(x) + exploration_weight · (f2(φ(x)) − 1); the ``budget`` best arms are
      picked, best first.

    After each ``update`` both networks take ``train_steps`` Adam steps on mini-batches of
    ``batch_size`` drawn from their replay buffers (the most recent ``buffer_size`` pairs).

    The per-arm gradients of all K arms come from one batched ``torch.func`` call (``vmap``
    of ``grad_and_value`` over ``functional_call``), chunked so scratch memory stays below
    ``gradient_memory_mb``; see :mod:`bandits.networks` for the factored form that never
    materialises the K × 51k gradient matrix.

    Attributes:
        hidden_sizes: f1's hidden layer widths. Default (64,).
        exploration_hidden_sizes: f2's hidden layer widths. Default (64,).
        pool_block_size: B, gradient entries averaged into one f2 input. Default 50.
        exploration_weight: w in f1 + w·(f2 − 1). Default 0.1.
        learning_rate: Adam step size of f1. Default 1e-3.
        exploration_learning_rate: Adam step size of f2. Default 1e-3.
        train_steps: Adam steps per network per ``update``. Default 10.
        batch_size: mini-batch size of those steps. Default 64.
        buffer_size: replay buffer capacity (pairs) of each network. Default 10,000.
        gradient_method: "factored" (default; fast, memory O(K·(D + P/B))), "vmap"
            (``vmap(grad)`` of the full gradient, pooled inside the vmapped function) or
            "loop" (one backward pass per arm, like the reference code). All three give the
            same scores up to float32 round-off; the last two exist for tests and benchmarks.
        gradient_memory_mb: approximate bound on the scratch memory of one batched gradient
            call; K is split into chunks to respect it. Default 64.
        initialization: "symmetric" (default) starts f1 and f2 at an exact-zero output
            (:func:`bandits.networks.symmetric_init_`), so the first slates are uniformly
            random instead of locked onto the arms a random network favours; "default" is
            PyTorch's initialisation (the reference code's).
        exploration_input_scale: "rms" (default) divides φ(x) by its root mean square over
            the first update's arms (fixed from then on, saved with the state), so f2 sees
            inputs of order 1 rather than the ~1e-3 block means of the raw gradient; "none"
            feeds the raw block means (the reference code's).
    """

    hidden_sizes: tuple[int, ...] = (64,)
    exploration_hidden_sizes: tuple[int, ...] = (64,)
    pool_block_size: int = 50
    exploration_weight: float = 0.1
    learning_rate: float = 1e-3
    exploration_learning_rate: float = 1e-3
    train_steps: int = 10
    batch_size: int = 64
    buffer_size: int = 10_000
    gradient_method: str = "factored"
    gradient_memory_mb: float = 64.0
    initialization: str = "symmetric"
    exploration_input_scale: str = "rms"

    name: ClassVar[str] = "eenet"
    learned_parts: ClassVar[tuple[str, ...]] = ("exploitation", "exploration")

    def _check_hyperparameters(self) -> None:
        check_hidden_sizes(self, "hidden_sizes")
        check_hidden_sizes(self, "exploration_hidden_sizes")
        check_int(self, "pool_block_size", minimum=1)
        check_float(self, "exploration_weight", minimum=0.0)
        check_float(self, "learning_rate", minimum=0.0, exclusive_minimum=True)
        check_float(self, "exploration_learning_rate", minimum=0.0, exclusive_minimum=True)
        self._check_training()
        check_choice(self, "gradient_method", GRADIENT_METHODS)
        check_float(self, "gradient_memory_mb", minimum=0.0, exclusive_minimum=True)
        check_choice(self, "initialization", INITIALIZATIONS)
        check_choice(self, "exploration_input_scale", ("rms", "none"))

    def _build(self, init_generator: torch.Generator) -> None:
        self._exploitation = Regressor(
            self.context_dim,
            self.hidden_sizes,
            self.learning_rate,
            self.buffer_size,
            init_generator,
        )
        self._pooling = GradientPooling(self._exploitation.model, self.pool_block_size)
        self._exploration = Regressor(
            self._pooling.n_blocks,
            self.exploration_hidden_sizes,
            self.exploration_learning_rate,
            self.buffer_size,
            init_generator,
        )
        if self.initialization == "symmetric":
            symmetric_init_(self._exploitation.model)
            symmetric_init_(self._exploration.model)
        self._phi_scale: float | None = None

    @property
    def n_exploration_inputs(self) -> int:
        """Length of φ(x), f2's input: ceil(P / pool_block_size)."""
        return self._pooling.n_blocks

    def exploitation_and_gradient_features(
        self, contexts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(K, D) contexts -> f1(x) (K,) and φ(x) (K, ceil(P / B)) as float32 arrays."""
        with torch.no_grad():
            inputs = to_tensor(self._validated_contexts(contexts, "contexts"))
            values, pooled = self._features(inputs)
        return values.numpy(), pooled.numpy()

    def _features(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, D) -> f1(x) (n,), φ(x) (n, n_exploration_inputs), computed chunk by chunk."""
        chunk = self._chunk_size()
        parts = [
            self._values_and_pooled(inputs[start : start + chunk])
            for start in range(0, len(inputs), chunk)
        ]
        if len(parts) == 1:
            return parts[0]
        return torch.cat([v for v, _ in parts]), torch.cat([g for _, g in parts])

    def _chunk_size(self) -> int:
        """Arms per batched gradient call, so that its scratch stays near gradient_memory_mb."""
        model = self._exploitation.model
        if self.gradient_method == "vmap":
            bytes_per_arm = 3 * 4 * model.n_parameters
        else:
            bytes_per_arm = factored_bytes_per_arm(model, self.pool_block_size)
        return arms_per_chunk(bytes_per_arm, self.gradient_memory_mb)

    def _values_and_pooled(self, contexts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk of (n, D) contexts -> f1(x) (n,), φ(x) (n, n_exploration_inputs)."""
        model = self._exploitation.model
        if self.gradient_method == "loop":
            return pooled_gradients_loop(model, self._pooling, contexts)
        if self.gradient_method == "vmap":
            return pooled_gradients_vmap(model, self._pooling, contexts, contexts.shape[0])
        factors = gradient_factors(model, contexts, contexts.shape[0])
        return factors.values, self._pooling.from_factors(contexts, factors)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        def score(part: torch.Tensor, chunk: int) -> torch.Tensor:
            values, pooled = self._values_and_pooled(part)
            potential_gain = self._exploration.predict(self._scaled(pooled)) - 1.0
            return values + self.exploration_weight * potential_gain

        return self._chunked_scores(contexts, self._chunk_size(), score)

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        inputs = to_tensor(contexts)
        targets = torch.from_numpy(rewards.astype(np.float32))
        with torch.no_grad():
            values, pooled = self._features(inputs)
        if self.exploration_input_scale == "rms" and self._phi_scale is None:
            rms = float(torch.sqrt(torch.mean(pooled.double() ** 2)))
            self._phi_scale = 1.0 / rms if rms > 0 else 1.0
        self._exploitation.buffer.add(inputs, targets)
        self._exploration.buffer.add(self._scaled(pooled), targets - values + 1.0)
        self._exploitation.fit(self.train_steps, self.batch_size, self._generator)
        self._exploration.fit(self.train_steps, self.batch_size, self._generator)

    def _scaled(self, pooled: torch.Tensor) -> torch.Tensor:
        """φ(x) as f2 sees it (see ``exploration_input_scale``)."""
        return pooled if self._phi_scale is None else pooled * self._phi_scale

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "phi_scale": self._phi_scale}

    def _load_state(self, learned: dict[str, Any]) -> None:
        super()._load_state(learned)
        self._phi_scale = learned.get("phi_scale")
