"""The base of the policies that learn torch networks (EE-Net, NeuralUCB, neural ε-greedy)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from bandits._checks import check_int
from bandits.base import ScoredPolicy
from bandits.networks import enable_deterministic_torch, to_tensor, torch_generator


class NeuralPolicy(ScoredPolicy):
    """A :class:`~bandits.base.ScoredPolicy` whose learned state is torch networks.

    ``reset`` makes torch deterministic and seeds two generators from ``seed``: stream 1
    draws the initial weights (handed to :meth:`_build`), stream 2 (``self._generator``) the
    training mini-batches. The saved state holds, under its name, the ``state()`` of each
    attribute ``self._<name>`` listed in :attr:`learned_parts`, then the mini-batch generator;
    a subclass with more state extends ``_state`` / ``_load_state``.
    """

    #: attributes ``self._<name>`` with ``state()`` / ``load_state()``, saved under ``<name>``
    learned_parts: ClassVar[tuple[str, ...]] = ()

    def _check_training(self) -> None:
        """The replay-training hyper-parameters of every subclass (part of its
        ``_check_hyperparameters``)."""
        check_int(self, "train_steps", minimum=0)
        check_int(self, "batch_size", minimum=1)
        check_int(self, "buffer_size", minimum=1)

    def _reset(self) -> None:
        enable_deterministic_torch()
        self._generator = torch_generator(self.seed, 2)
        self._build(torch_generator(self.seed, 1))

    @abstractmethod
    def _build(self, init_generator: torch.Generator) -> None:
        """Create the networks, their weights drawn from ``init_generator``."""

    @staticmethod
    def _chunked_scores(
        contexts: np.ndarray, chunk: int, score: Callable[[torch.Tensor, int], torch.Tensor]
    ) -> np.ndarray:
        """(K,) float64 ``score(part, chunk)`` of the (K, D) contexts, ``chunk`` arms at a
        time (bounding the scratch memory of per-arm gradients), without autograd."""
        inputs = to_tensor(contexts)
        scores = np.empty(inputs.shape[0])
        with torch.no_grad():
            for start in range(0, inputs.shape[0], chunk):
                scores[start : start + chunk] = score(inputs[start : start + chunk], chunk).numpy()
        return scores

    def _state(self) -> dict[str, Any]:
        state = {name: getattr(self, f"_{name}").state() for name in self.learned_parts}
        state["generator"] = self._generator.get_state()
        return state

    def _load_state(self, learned: dict[str, Any]) -> None:
        for name in self.learned_parts:
            getattr(self, f"_{name}").load_state(learned[name])
        self._generator.set_state(learned["generator"].clone())
