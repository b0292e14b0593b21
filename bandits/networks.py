"""Neural building blocks of the neural policies.

- :class:`MLP`: the scalar network f(x; θ), initialised from a ``torch.Generator`` of its own.
- :func:`gradient_factors`: per-arm gradients ∇θ f(x_k) for all K arms in one batched
  ``torch.func`` call (``vmap`` of ``grad_and_value`` over ``functional_call``), in a factored
  form that never materialises the (K, H1·D) input-layer block.
- :class:`GradientPooling`: the block means of the flattened gradient that EE-Net feeds its
  exploration network, computed from the factors (exact, O(K·(D + H1·D/B)) memory).
- :class:`DiagonalGradientCovariance`: NeuralUCB's diagonal Z and its bonus, from the factors.
- :func:`pooled_gradients_vmap` / :func:`pooled_gradients_loop`: the materialising
  ``vmap(grad)`` and the naive one-backward-pass-per-arm computations of the same pooled
  gradients, kept as references for tests and the latency benchmark.
- :class:`ReplayBuffer` and :class:`Regressor`: bounded replay and Adam training.

Why factored: for the input layer z1 = W1 x + b1 (W1 is H1×D), ∂f/∂W1 = δ xᵀ with
δ = ∂f/∂z1 (H1,). At D = 800, H1 = 64 that block is 51,200 of the 51,329 parameters; for
K = 10,000 arms it would be 2 GB of float32. We differentiate with respect to a zero offset
added to z1 (which yields δ) and to every other parameter, and contract δ xᵀ with what the
consumer needs (block sums, or Σ g²/Z) analytically.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap


def enable_deterministic_torch() -> None:
    """Ask torch for deterministic kernels (warn, rather than fail, where none exists)."""
    if not torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(True, warn_only=True)


def torch_generator(seed: int, stream: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for ``stream`` of ``seed`` (independent of the global RNG)."""
    state = np.random.SeedSequence([seed, stream]).generate_state(1, dtype=np.uint64)[0]
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(state) & (2**63 - 1))
    return generator


class MLP(nn.Module):
    """f(x) = W_L relu(… relu(W_1 x + b_1) …) + b_L: (…, input_dim) -> (…) scalars.

    ``hidden_sizes=(64,)`` is the two-layer network of EE-Net and NeuralUCB. Weights and
    biases are drawn U(−1/√fan_in, 1/√fan_in) (PyTorch's default ranges) from ``generator``.
    """

    def __init__(
        self, input_dim: int, hidden_sizes: tuple[int, ...], generator: torch.Generator
    ) -> None:
        super().__init__()
        widths = (input_dim, *hidden_sizes, 1)
        self.layers = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, fan_in, fan_out)
            for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)
        )
        with torch.no_grad():
            for layer in self.layers:
                bound = 1.0 / math.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)

    @property
    def input_dim(self) -> int:
        return self.layers[0].in_features

    @property
    def first_width(self) -> int:
        """H1, the width of the first hidden layer."""
        return self.layers[0].out_features

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, inputs: torch.Tensor, first_preactivation_offset: torch.Tensor | None = None
    ) -> torch.Tensor:
        """inputs (…, D) -> (…). ``first_preactivation_offset`` (…, H1) is added to W_1 x + b_1
        (zero in use; differentiating with respect to it yields δ = ∂f/∂z_1)."""
        hidden = self.layers[0](inputs)
        if first_preactivation_offset is not None:
            hidden = hidden + first_preactivation_offset
        for layer in self.layers[1:]:
            hidden = layer(torch.relu(hidden))
        return hidden.squeeze(-1)


#: Network initialisations: PyTorch's default ranges, or that with an exact-zero output.
INITIALIZATIONS = ("default", "symmetric")


def symmetric_init_(model: MLP) -> None:
    """Make a one-hidden-layer :class:`MLP` output exactly 0 for every input while keeping its
    random features (NeuralUCB's initialisation, Zhou et al. 2020, Alg. 1): the second half of
    the hidden units copies the first half and the output layer weighs the halves +w and −w,
    with output bias 0. An untrained policy then scores every arm the same, so its first
    slates are uniformly random (the tie-break) instead of the argmax of a random network.

    Raises:
        ValueError: unless the model has exactly one hidden layer of even width.
    """
    first, last = model.layers[0], model.layers[-1]
    if len(model.layers) != 2 or first.out_features % 2:
        raise ValueError(
            "initialization='symmetric' needs one hidden layer of even width "
            f"(hidden_sizes=(64,)); got widths {[layer.out_features for layer in model.layers]}"
        )
    half = first.out_features // 2
    with torch.no_grad():
        first.weight[half:] = first.weight[:half]
        first.bias[half:] = first.bias[:half]
        last.weight[:, half:] = -last.weight[:, :half]
        last.bias.zero_()


@dataclass
class GradientFactors:
    """Per-arm gradients of f with respect to all its parameters, in factored form.

    Attributes:
        values: (K,) f(x_k).
        delta: (K, H1) δ_k = ∂f/∂z1 at x_k; the gradient for the input-layer weight W1 (H1, D)
            is the outer product δ_k x_kᵀ (never materialised).
        rest: (K, P − H1·D) gradients of every other parameter (b1, W2, b2, …), each flattened
            row-major and concatenated in ``named_parameters`` order, i.e. the tail of
            ``torch.cat([p.grad.flatten() for p in model.parameters()])``.
    """

    values: torch.Tensor
    delta: torch.Tensor
    rest: torch.Tensor


def arms_per_chunk(bytes_per_arm: float, memory_mb: float) -> int:
    """How many arms one batched call may hold so its scratch stays under ``memory_mb``."""
    return max(1, int(memory_mb * 2**20 // max(bytes_per_arm, 1.0)))


def factored_bytes_per_arm(model: MLP, block_size: int | None = None) -> float:
    """Rough scratch memory (bytes) per arm of ``gradient_factors`` (plus
    ``GradientPooling.from_factors`` when ``block_size`` is given)."""
    rest = model.n_parameters - model.first_width * model.input_dim
    activations = 4 * 6 * sum(layer.out_features for layer in model.layers)
    total = 4 * model.input_dim + 8 * rest + activations
    if block_size is not None:
        segments = model.input_dim // block_size + 2
        n_blocks = math.ceil(model.n_parameters / block_size)
        total += 8 * (model.input_dim + 1) + 24 * model.first_width * segments + 8 * n_blocks
    return total


def gradient_factors(model: MLP, contexts: torch.Tensor, chunk_size: int) -> GradientFactors:
    """∇θ f(x_k) for all K arms: ``vmap(grad_and_value(f))`` over arms, ``chunk_size`` arms per
    call. contexts (K, D) float32 -> :class:`GradientFactors`."""
    names = [name for name, _ in model.named_parameters()]
    params = {name: p.detach() for name, p in model.named_parameters()}
    first_weight_name = names[0]
    first_weight = params[first_weight_name]
    rest_params = {name: params[name] for name in names[1:]}

    def output(
        offset: torch.Tensor, rest: dict[str, torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        return functional_call(
            model,
            {first_weight_name: first_weight, **rest},
            (x,),
            {"first_preactivation_offset": offset},
        )

    per_arm = vmap(grad_and_value(output, argnums=(0, 1)), in_dims=(None, None, 0))
    zero_offset = torch.zeros(model.first_width)
    values, deltas, rests = [], [], []
    for start in range(0, contexts.shape[0], chunk_size):
        chunk = contexts[start : start + chunk_size]
        (delta, rest_grads), value = per_arm(zero_offset, rest_params, chunk)
        values.append(value)
        deltas.append(delta)
        rests.append(torch.cat([rest_grads[n].reshape(chunk.shape[0], -1) for n in names[1:]], 1))
    if len(values) == 1:
        return GradientFactors(values[0], deltas[0], rests[0])
    return GradientFactors(torch.cat(values), torch.cat(deltas), torch.cat(rests))


class GradientPooling:
    """Block means of the flattened parameter gradient, EE-Net's input to its exploration net.

    The flattened gradient g (P,) — parameters in ``named_parameters`` order, each flattened
    row-major, i.e. ``torch.cat([p.grad.flatten() for p in model.parameters()])`` — is cut
    into ``n_blocks = ceil(P / block_size)`` consecutive blocks and each block is replaced by
    its sum / block_size. The last, partial block is zero-padded, exactly as
    ``skimage.measure.block_reduce(g, block_size, np.mean)`` in EE-Net's reference code.
    """

    def __init__(self, model: MLP, block_size: int) -> None:
        self.block_size = block_size
        self.n_parameters = model.n_parameters
        self.n_blocks = math.ceil(self.n_parameters / block_size)
        width, dim = model.first_width, model.input_dim
        self._input_dim = dim
        self._first_weight_size = width * dim
        self._aligned = dim % block_size == 0
        # Row i of W1 covers flat indices [i·D, (i+1)·D); split it where blocks begin.
        row_start = torch.arange(width)[:, None] * dim
        blocks = row_start // block_size + torch.arange(dim // block_size + 2)[None, :]
        self._segment_start = (blocks * block_size - row_start).clamp(0, dim)
        self._segment_end = ((blocks + 1) * block_size - row_start).clamp(0, dim)
        self._first_blocks = blocks.clamp(max=self.n_blocks - 1).reshape(-1)
        self._rest_blocks = torch.arange(self._first_weight_size, self.n_parameters) // block_size

    def from_factors(self, contexts: torch.Tensor, factors: GradientFactors) -> torch.Tensor:
        """contexts (K, D), their factors -> (K, n_blocks) pooled gradients."""
        n_arms = contexts.shape[0]
        pooled = torch.zeros(n_arms, self.n_blocks)
        if self._aligned:
            # Every block lies inside one row of W1: block (i, c) sums δ_i · x[cB:(c+1)B].
            segment_sums = contexts.reshape(n_arms, -1, self.block_size).sum(-1)
            first = (factors.delta[:, :, None] * segment_sums[:, None, :]).reshape(n_arms, -1)
            pooled[:, : first.shape[1]] = first
        else:
            prefix = torch.zeros(n_arms, self._input_dim + 1, dtype=torch.float64)
            torch.cumsum(contexts.to(torch.float64), dim=1, out=prefix[:, 1:])
            segment_sums = (prefix[:, self._segment_end] - prefix[:, self._segment_start]).float()
            first = (factors.delta[:, :, None] * segment_sums).reshape(n_arms, -1)
            pooled.index_add_(1, self._first_blocks, first)
        pooled.index_add_(1, self._rest_blocks, factors.rest)
        return pooled.div_(self.block_size)

    def from_flat(self, flat_gradient: torch.Tensor) -> torch.Tensor:
        """(…, P) flattened gradients -> (…, n_blocks) (works inside ``vmap``)."""
        padding = self.n_blocks * self.block_size - self.n_parameters
        padded = nn.functional.pad(flat_gradient, (0, padding))
        return padded.reshape(*flat_gradient.shape[:-1], self.n_blocks, self.block_size).mean(-1)


def pooled_gradients_vmap(
    model: MLP, pooling: GradientPooling, contexts: torch.Tensor, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: ``vmap(grad)`` of the full gradient, pooled inside the vmapped function.

    Materialises (chunk_size, P) gradients per call; use a chunk size of ~100 at D = 800.
    Returns values (K,) and pooled gradients (K, n_blocks).
    """
    params = {name: p.detach() for name, p in model.named_parameters()}

    def one_arm(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grads, value = grad_and_value(lambda p: functional_call(model, p, (x,)))(params)
        return value, pooling.from_flat(torch.cat([g.reshape(-1) for g in grads.values()]))

    batched = vmap(one_arm)
    outputs = [
        batched(contexts[s : s + chunk_size]) for s in range(0, contexts.shape[0], chunk_size)
    ]
    return torch.cat([v for v, _ in outputs]), torch.cat([g for _, g in outputs])


def pooled_gradients_loop(
    model: MLP, pooling: GradientPooling, contexts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: one forward and one backward pass per arm (what EE-Net's code does).

    Returns values (K,) and pooled gradients (K, n_blocks).
    """
    values, pooled = [], []
    with torch.enable_grad():
        for x in contexts:
            model.zero_grad(set_to_none=True)
            value = model(x)
            value.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            values.append(value.detach())
            pooled.append(pooling.from_flat(flat))
    model.zero_grad(set_to_none=True)
    return torch.stack(values), torch.stack(pooled)


class DiagonalGradientCovariance:
    """NeuralUCB's Z ≈ diag(λ + Σ_observed g∘g) and the bonus Σ_j g_j² / Z_j.

    Z is stored as (H1, D) for the input-layer weight and (P − H1·D,) for the rest; with
    g_W1 = δ xᵀ, Σ_ij (δ_i x_j)² / Z_ij = Σ_i δ_i² · ((x∘x) · (1/Z_W1)_i), one (K, D)×(D, H1)
    product instead of a (K, H1·D) gradient.
    """

    def __init__(self, model: MLP, regularization: float) -> None:
        rest = model.n_parameters - model.first_width * model.input_dim
        self.first = torch.full((model.first_width, model.input_dim), regularization)
        self.rest = torch.full((rest,), regularization)

    def gradient_norms(self, contexts: torch.Tensor, factors: GradientFactors) -> torch.Tensor:
        """(K,) Σ_j g_j(x_k)² / Z_j."""
        first = ((factors.delta**2) * ((contexts**2) @ self.first.reciprocal().T)).sum(1)
        return first + ((factors.rest**2) / self.rest).sum(1)

    def add(self, contexts: torch.Tensor, factors: GradientFactors) -> None:
        """Z += Σ_k g(x_k)∘g(x_k) over the (n, D) observed contexts."""
        self.first += (factors.delta**2).T @ (contexts**2)
        self.rest += (factors.rest**2).sum(0)

    def state(self) -> dict[str, torch.Tensor]:
        return {"first": self.first.clone(), "rest": self.rest.clone()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.first = state["first"].clone()
        self.rest = state["rest"].clone()


class ReplayBuffer:
    """The most recent ``capacity`` (input (F,), target) pairs; the oldest are overwritten."""

    def __init__(self, feature_dim: int, capacity: int) -> None:
        self.capacity = capacity
        self._inputs = torch.empty(capacity, feature_dim)
        self._targets = torch.empty(capacity)
        self._size = 0
        self._next = 0

    def __len__(self) -> int:
        return self._size

    def add(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """inputs (n, F), targets (n,)."""
        inputs, targets = inputs[-self.capacity :], targets[-self.capacity :]
        slots = (self._next + torch.arange(inputs.shape[0])) % self.capacity
        self._inputs[slots] = inputs
        self._targets[slots] = targets
        self._next = (self._next + inputs.shape[0]) % self.capacity
        self._size = min(self._size + inputs.shape[0], self.capacity)

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Everything if it holds <= batch_size pairs, else batch_size drawn with replacement."""
        if self._size <= batch_size:
            return self._inputs[: self._size], self._targets[: self._size]
        rows = torch.randint(self._size, (batch_size,), generator=generator)
        return self._inputs[rows], self._targets[rows]

    def state(self) -> dict[str, Any]:
        return {
            "inputs": self._inputs[: self._size].clone(),
            "targets": self._targets[: self._size].clone(),
            "next": self._next,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        size = state["inputs"].shape[0]
        self._inputs[:size] = state["inputs"]
        self._targets[:size] = state["targets"]
        self._size = size
        self._next = int(state["next"])


class Regressor:
    """An :class:`MLP` fitted to (input, target) pairs by mean squared error with Adam,
    ``steps`` mini-batches from a bounded :class:`ReplayBuffer` per ``fit``."""

    def __init__(
        self,
        input_dim: int,
        hidden_sizes: tuple[int, ...],
        learning_rate: float,
        buffer_size: int,
        generator: torch.Generator,
    ) -> None:
        self.model = MLP(input_dim, hidden_sizes, generator)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate, fused=True)
        self.buffer = ReplayBuffer(input_dim, buffer_size)

    def predict(self, inputs: torch.Tensor) -> torch.Tensor:
        """(n, F) -> (n,)."""
        with torch.no_grad():
            return self.model(inputs)

    def fit(self, steps: int, batch_size: int, generator: torch.Generator) -> float:
        """Run ``steps`` Adam steps; returns the last mini-batch loss (nan if no data)."""
        loss_value = float("nan")
        if len(self.buffer) == 0:
            return loss_value
        with torch.enable_grad():
            for _ in range(steps):
                inputs, targets = self.buffer.sample(batch_size, generator)
                self.optimizer.zero_grad(set_to_none=True)
                loss = torch.mean((self.model(inputs) - targets) ** 2)
                loss.backward()
                self.optimizer.step()
                loss_value = loss.item()
        return loss_value

    def state(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "buffer": self.buffer.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.buffer.load_state(state["buffer"])


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A float32 CPU tensor sharing memory with a C-contiguous float32 array (else copied)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
