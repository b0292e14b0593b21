"""ε-greedy on a neural (MLP) reward model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from bandits._checks import check_float, check_hidden_sizes
from bandits.egreedy import EpsilonGreedySlates
from bandits.networks import Regressor, to_tensor
from bandits.neural import NeuralPolicy


@dataclass(eq=False)
class NeuralEpsilonGreedy(EpsilonGreedySlates, NeuralPolicy):
    """ε-greedy with an MLP reward estimate f(x), trained like EE-Net's f1 (MSE, Adam,
    ``train_steps`` mini-batches from a bounded replay buffer after each ``update``).

    Attributes:
        epsilon: exploration probability per slot, in [0, 1]. Default 0.1.
        hidden_sizes: f's hidden layer widths. Default (64,).
        learning_rate: Adam step size. Default 1e-3.
        train_steps: Adam steps per ``update``. Default 10.
        batch_size: mini-batch size. Default 64.
        buffer_size: replay buffer capacity. Default 10,000.
    """

    epsilon: float = 0.1
    hidden_sizes: tuple[int, ...] = (64,)
    learning_rate: float = 1e-3
    train_steps: int = 10
    batch_size: int = 64
    buffer_size: int = 10_000

    name: ClassVar[str] = "egreedy_neural"
    learned_parts: ClassVar[tuple[str, ...]] = ("network",)

    def _check_hyperparameters(self) -> None:
        check_float(self, "epsilon", minimum=0.0, maximum=1.0)
        check_hidden_sizes(self, "hidden_sizes")
        check_float(self, "learning_rate", minimum=0.0, exclusive_minimum=True)
        self._check_training()

    def _build(self, init_generator: torch.Generator) -> None:
        self._network = Regressor(
            self.context_dim,
            self.hidden_sizes,
            self.learning_rate,
            self.buffer_size,
            init_generator,
        )

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return self._network.predict(to_tensor(contexts)).numpy().astype(np.float64)

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        self._network.buffer.add(to_tensor(contexts), torch.from_numpy(rewards.astype(np.float32)))
        self._network.fit(self.train_steps, self.batch_size, self._generator)
