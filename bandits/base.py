"""The interface shared by every intervention policy.

A policy sees arrays only: the contexts of the K candidate arms of a round, an optional mask
of the arms it may pick, and how many it must pick (``budget``); later, the contexts of the arms
it picked and the rewards they earned. It never sees the environment.

Round protocol::

    chosen = policy.select(contexts, mask, budget)     # contexts (K, D) -> (budget,) int64
    policy.update(contexts[chosen], rewards)           # (n, D), (n,) with rewards in [0, 1]

Hyper-parameters are dataclass fields with documented defaults (in the style of the Open
Bandit Pipeline); everything learned lives in private attributes that ``reset`` rebuilds and
``state_dict`` / ``load_state_dict`` save and restore.

Logged propensities (for off-policy evaluation, :mod:`bandits.ope`)::

    logged = policy.select_with_propensities(contexts, mask, budget)
    logged.arms, logged.propensities, logged.method   # same slate as select(); see LoggedSlate

A slate's propensity is defined per arm: the probability that the arm is in the slate
(its inclusion probability), given the contexts, the mask and the policy's current state.
"""

from __future__ import annotations

import copy
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Integral
from typing import Any, ClassVar

import numpy as np

from bandits._checks import check_int
from policysim_infra.validation import check_keys, config_error

#: How a propensity was obtained: "deterministic" (the policy's choice is a function of its
#: inputs and state, every propensity is 1), "exact" (closed form), "monte_carlo" (estimated
#: by re-drawing the policy's randomness; see :attr:`Policy.propensity_draws`).
PROPENSITY_METHODS: tuple[str, ...] = ("deterministic", "exact", "monte_carlo")


@dataclass(frozen=True)
class LoggedSlate:
    """A slate and the probability with which the policy chose each of its arms.

    Attributes:
        arms: (m,) int64 arm indices, as :meth:`Policy.select` returns them.
        propensities: (m,) float64, P(arm is in the slate | contexts, mask, policy state), in
            (0, 1]. A Monte-Carlo estimate is floored at 1 / (draws + 1) so that a logged arm
            never has propensity 0.
        method: one of :data:`PROPENSITY_METHODS`.
    """

    arms: np.ndarray
    propensities: np.ndarray
    method: str

    @property
    def deterministic(self) -> bool:
        return self.method == "deterministic"


@dataclass(eq=False)
class Policy(ABC):
    """Base class of all policies.

    Attributes:
        context_dim: D, the length of one arm's context vector.
        seed: seeds every random draw the policy makes (NumPy and torch generators of its
            own; the global RNGs are never touched). Same seed, same inputs -> the same
            selections, bit for bit.
    """

    context_dim: int
    seed: int = 0

    #: Registry name of the policy (``bandits.POLICIES`` key).
    name: ClassVar[str] = ""
    #: Re-draws of the policy's randomness per Monte-Carlo propensity estimate.
    propensity_draws: ClassVar[int] = 500

    @classmethod
    def hyperparameter_names(cls) -> list[str]:
        """The keyword arguments ``make_policy`` passes on: the dataclass fields but
        ``context_dim`` and ``seed`` (class variables such as ``name`` are not fields)."""
        return [
            f.name
            for f in dataclasses.fields(cls)
            if f.init and f.name not in ("context_dim", "seed")
        ]

    def __post_init__(self) -> None:
        check_int(self, "context_dim", minimum=1)
        check_int(self, "seed", minimum=0)
        self._check_hyperparameters()
        self.reset()

    # ------------------------------------------------------------------ public API

    def select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray:
        """Pick ``budget`` distinct arms, best first.

        Args:
            contexts: (K, D) arm contexts (converted to float32; must be finite).
            mask: (K,) bool, True where the arm may be picked; None allows every arm.
            budget: number of arms to pick, 1 <= budget <= number of allowed arms.

        Returns:
            (budget,) int64 indices into ``contexts`` of distinct allowed arms, best first;
            fewer when the policy has a null arm (:attr:`ScoredPolicy.score_floor`, e.g. the
            ridge policies' ``null_reward``) and fewer arms are worth more than leaving the
            slot empty.

        Raises:
            ValueError: on a malformed ``contexts`` / ``mask`` / ``budget``, or when fewer than
                ``budget`` arms are allowed.
        """
        contexts = self._validated_contexts(contexts, "contexts")
        allowed = _validated_mask(mask, contexts.shape[0])
        budget = _validated_budget(budget, allowed, contexts.shape[0])
        candidates = contexts if allowed is None else contexts[allowed]
        picked = self._select(candidates, budget)
        indices = picked if allowed is None else allowed[picked]
        return np.asarray(indices, dtype=np.int64)

    def inclusion_probabilities(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> tuple[np.ndarray, str]:
        """The probability that each arm would be in the slate ``select`` picks now.

        Computing it leaves the policy's random generator untouched: ``select`` afterwards
        picks exactly what it would have picked without this call.

        Args:
            contexts, mask, budget: as :meth:`select`.

        Returns:
            (K,) float64 inclusion probabilities (0 for masked arms; they sum to ``budget``)
            and the method (:data:`PROPENSITY_METHODS`).
        """
        contexts = self._validated_contexts(contexts, "contexts")
        allowed = _validated_mask(mask, contexts.shape[0])
        budget = _validated_budget(budget, allowed, contexts.shape[0])
        candidates = contexts if allowed is None else contexts[allowed]
        probs, method = self._inclusion(candidates, budget)
        if allowed is None:
            return probs, method
        full = np.zeros(contexts.shape[0])
        full[allowed] = probs
        return full, method

    def is_deterministic(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> bool:
        """Whether ``select`` ranks the allowed arms without any randomness now (at every
        budget), e.g. a scored policy whose scores are distinct. False when unsure."""
        contexts = self._validated_contexts(contexts, "contexts")
        allowed = _validated_mask(mask, contexts.shape[0])
        return self._deterministic(contexts if allowed is None else contexts[allowed])

    def deterministic_select(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> np.ndarray | None:
        """The slate ``select`` would pick now if no random draw can change it, up to swaps
        of exchangeable arms (:meth:`exchangeable_arms`: of those the draws decide only which
        ones fill the slate, not how many); else None (also when unsure). Leaves the policy's
        generator untouched.

        Args:
            contexts, mask, budget: as :meth:`select`.
        """
        contexts = self._validated_contexts(contexts, "contexts")
        allowed = _validated_mask(mask, contexts.shape[0])
        budget = _validated_budget(budget, allowed, contexts.shape[0])
        picked = self._deterministic_select(
            contexts if allowed is None else contexts[allowed], budget
        )
        if picked is None:
            return None
        return np.asarray(picked if allowed is None else allowed[picked], dtype=np.int64)

    def exchangeable_arms(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """(K,) int64 label per arm: the policy treats allowed arms of one label alike in any set
        of arms it is offered (it reads only what they share) and breaks ties among them
        uniformly at random, so the slate's distribution is the same under any swap of them.
        Default: no two arms alike (every label distinct); masked arms never share a label."""
        contexts = self._validated_contexts(contexts, "contexts")
        allowed = _validated_mask(mask, contexts.shape[0])
        if allowed is None:
            return np.asarray(self._exchangeable(contexts), np.int64)
        labels = -1 - np.arange(contexts.shape[0], dtype=np.int64)
        labels[allowed] = self._exchangeable(contexts[allowed])
        return labels

    def select_with_propensities(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> LoggedSlate:
        """:meth:`select` and the propensity of each chosen arm (its inclusion probability,
        :meth:`inclusion_probabilities`). The slate is the one ``select`` would return."""
        probs, method = self.inclusion_probabilities(contexts, mask, budget)
        arms = self.select(contexts, mask, budget)
        propensities = probs[arms]
        if method == "monte_carlo":
            propensities = np.maximum(propensities, 1.0 / (self.propensity_draws + 1))
        return LoggedSlate(arms, propensities, method)

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        """Learn from the arms picked last round.

        Args:
            contexts: (n, D) contexts of the picked arms (n may be 0: nothing happens).
            rewards: (n,) rewards in [0, 1].
        """
        rewards = np.asarray(rewards)
        contexts = np.asarray(contexts)
        if rewards.size == 0 and contexts.size == 0:
            return
        contexts = self._validated_contexts(contexts, "contexts")
        if rewards.shape != (contexts.shape[0],):
            raise ValueError(
                f"rewards must have shape (n,) = ({contexts.shape[0]},) to match contexts; "
                f"got {rewards.shape}"
            )
        if rewards.dtype.kind not in "biuf":
            raise ValueError(f"rewards must be real numbers in [0, 1]; got dtype {rewards.dtype}")
        rewards = rewards.astype(np.float64)
        if not np.all(np.isfinite(rewards)) or rewards.min() < 0.0 or rewards.max() > 1.0:
            bad = rewards[~(np.isfinite(rewards) & (rewards >= 0.0) & (rewards <= 1.0))]
            raise ValueError(f"rewards must lie in [0, 1]; got {bad[:5].tolist()}")
        self._update(contexts, rewards)
        self._n_observations += contexts.shape[0]

    def reset(self) -> None:
        """Forget everything learned and re-seed: the policy behaves as if newly built."""
        self._rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0]))
        self._n_observations = 0
        self._reset()

    @property
    def n_observations(self) -> int:
        """Number of (context, reward) pairs learned from since the last reset."""
        return self._n_observations

    def hyperparameters(self) -> dict[str, Any]:
        """The dataclass fields (context_dim, seed and the policy's hyper-parameters)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the run exactly: hyper-parameters, RNG states, learned
        parameters, optimiser states and replay buffers. The returned objects are copies
        (NumPy arrays, torch tensors and Python scalars), safe to ``torch.save`` or pickle."""
        return {
            "policy": self.name,
            "hyperparameters": self.hyperparameters(),
            "rng": copy.deepcopy(self._rng.bit_generator.state),
            "n_observations": self._n_observations,
            "learned": self._state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``; the policy then continues exactly as the saved one would.

        Raises:
            ValueError: if the state belongs to another policy or other hyper-parameters.
        """
        if state.get("policy") != self.name:
            raise ValueError(
                f"state['policy'] is {state.get('policy')!r}; this policy is {self.name!r}"
            )
        saved = state["hyperparameters"]
        for key, value in self.hyperparameters().items():
            if saved.get(key) != value:
                raise ValueError(
                    f"state['hyperparameters'][{key!r}] is {saved.get(key)!r}; this policy has "
                    f"{key}={value!r} (build it with Policy.from_state_dict to match)"
                )
        self.reset()
        self._rng.bit_generator.state = copy.deepcopy(state["rng"])
        self._n_observations = int(state["n_observations"])
        self._load_state(state["learned"])

    @classmethod
    def build(cls, context_dim: int, seed: int = 0, **hyperparameters: Any) -> Policy:
        """A policy of this class; ValueError naming an unknown hyper-parameter (listing the
        class's) or an invalid value (naming the field)."""
        check_keys(
            hyperparameters,
            cls.hyperparameter_names(),
            "hyperparameters",
            f"hyper-parameter(s) of policy {cls.name!r}",
        )
        return cls(context_dim=context_dim, seed=seed, **hyperparameters)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Policy:
        """Build a policy of this class with the saved hyper-parameters and load the state."""
        policy = cls(**state["hyperparameters"])
        policy.load_state_dict(state)
        return policy

    # ------------------------------------------------------------ subclass hooks

    def _deterministic(self, contexts: np.ndarray) -> bool:
        """Whether the ranking of the (M, D) allowed arms involves no randomness."""
        del contexts
        return False

    def _exchangeable(self, contexts: np.ndarray) -> np.ndarray:
        """(M,) labels of the (M, D) allowed arms, >= 0, equal for arms the policy treats alike."""
        return np.arange(contexts.shape[0])

    def _deterministic_select(self, contexts: np.ndarray, budget: int) -> np.ndarray | None:
        """(budget,) positions ``_select`` picks from the (M, D) allowed arms when no random
        draw can change them (up to swaps of exchangeable arms), else None. Default:
        ``_select`` on a copy of the generator when ``_deterministic`` holds."""
        if not self._deterministic(contexts):
            return None
        with spared_generator(self):
            return self._select(contexts, budget)

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        """(M,) inclusion probabilities over the allowed arms and the method. Default: a
        Monte-Carlo estimate over re-draws of ``self._rng`` (:func:`monte_carlo_inclusion`);
        policies with a closed form override it."""
        return monte_carlo_inclusion(
            self, lambda: self._select(contexts, budget), contexts.shape[0]
        ), "monte_carlo"

    def _check_hyperparameters(self) -> None:  # noqa: B027 - optional hook
        """Validate the subclass's dataclass fields (raise ValueError naming the field)."""

    @abstractmethod
    def _reset(self) -> None:
        """Rebuild the learned state from ``self.seed``."""

    @abstractmethod
    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        """(M, D) float32 contexts of the allowed arms -> (budget,) distinct row positions."""

    @abstractmethod
    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        """(n, D) float32 contexts, (n,) float64 rewards in [0, 1], n >= 1."""

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """Copies of the learned state."""

    @abstractmethod
    def _load_state(self, learned: dict[str, Any]) -> None:
        """Restore what ``_state`` returned (called right after ``reset``)."""

    # --------------------------------------------------------------- helpers

    def _validated_contexts(self, contexts: Any, name: str) -> np.ndarray:
        array = np.asarray(contexts)
        if array.ndim != 2 or array.shape[1] != self.context_dim:
            raise ValueError(
                f"{name} must have shape (K, context_dim) = (K, {self.context_dim}); "
                f"got {array.shape}"
            )
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{name} must hold real numbers; got dtype {array.dtype}")
        array = np.ascontiguousarray(array, dtype=np.float32)
        if not np.all(np.isfinite(array)):
            rows = np.flatnonzero(~np.all(np.isfinite(array), axis=1))
            raise ValueError(
                f"{name} must be finite (no NaN or inf, and within float32 range); "
                f"rows {rows[:5].tolist()} are not"
            )
        return array


class ScoredPolicy(Policy):
    """A policy that scores every arm and picks the ``budget`` highest scores.

    Ties are broken uniformly at random (from the policy's own generator), so an untrained
    policy whose scores are all equal does not always favour the first arms. Propensities
    are exact (:func:`top_k_inclusion`): 1 for the arms above the cut, the share of the
    remaining slots for arms tied at the cut; "deterministic" when no tie straddles the cut.
    A subclass whose ``_scores`` draw randomness must override ``_inclusion``.
    """

    #: True when ``_scores`` draws randomness (then ``_inclusion`` must be overridden).
    randomized_scores: ClassVar[bool] = False
    #: True when an overridden ``_select`` still takes each group's arms best score first
    #: (ties at random) under :func:`bandits.slate.select_per_group`, whatever order it gives
    #: across groups; the plain top-k ``_select`` does, ε-greedy's exploration does not.
    score_order_within_groups: ClassVar[bool] = False

    @property
    def score_floor(self) -> float | None:
        """The score of the null arm (leaving a slot empty, to the env's default action), or
        None when the policy fills every slot. An arm scored below it is never picked:
        ``select`` and :func:`bandits.slate.select_per_group` return fewer arms."""
        return None

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        probs = top_k_inclusion(self._scores(contexts), budget, self.score_floor)
        return probs, "deterministic" if np.all((probs == 0) | (probs == 1)) else "exact"

    def _deterministic(self, contexts: np.ndarray) -> bool:
        if self.randomized_scores:
            return False
        scores = self._scores(contexts)
        return len(np.unique(scores)) == len(scores)

    def scores(self, contexts: np.ndarray) -> np.ndarray:
        """(K, D) contexts -> (K,) float64 scores, the quantity ``select`` ranks by (higher is
        better). A randomised policy draws fresh randomness here, as ``select`` does."""
        return self._scores(self._validated_contexts(contexts, "contexts"))

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        return top_ranked(self._scores(contexts), budget, self._rng, self.score_floor)

    @abstractmethod
    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        """Scores of validated (K, D) float32 contexts."""


def top_ranked(
    scores: np.ndarray, budget: int, rng: np.random.Generator, floor: float | None = None
) -> np.ndarray:
    """Positions of the ``budget`` largest of ``scores`` (K,), best first, random tie-break;
    with a ``floor``, only of the scores at or above it (so possibly fewer)."""
    scores = np.asarray(scores, dtype=np.float64)
    tie_breaker = rng.random(scores.shape[0])
    order = np.lexsort((tie_breaker, -scores))
    if floor is not None:
        budget = min(budget, int(np.count_nonzero(scores >= floor)))
    return order[:budget]


def top_k_inclusion(scores: np.ndarray, budget: int, floor: float | None = None) -> np.ndarray:
    """(K,) probability that each arm is among the ``budget`` best of ``scores`` (K,) when ties
    are broken uniformly at random (as :func:`top_ranked` does); with a ``floor``, 0 for arms
    scored below it, which :func:`top_ranked` never picks."""
    scores = np.asarray(scores, dtype=np.float64)
    if floor is not None:
        eligible = scores >= floor
        budget = min(budget, int(eligible.sum()))
        if budget == 0:
            return np.zeros(len(scores))
        probs = np.zeros(len(scores))
        probs[eligible] = top_k_inclusion(scores[eligible], budget)
        return probs
    cut = np.sort(scores)[::-1][budget - 1]
    above = scores > cut
    at_cut = scores == cut
    probs = above.astype(np.float64)
    probs[at_cut] = (budget - above.sum()) / at_cut.sum()
    return probs


def tie_averaged(rank_probs: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """(K,) per-arm probability from ``rank_probs`` (K,), the probability of the arm ranked r
    (0 = best), when ranks among equal ``scores`` are assigned uniformly at random."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    sizes = np.diff(np.r_[starts, len(scores)])
    group_mean = np.add.reduceat(np.asarray(rank_probs, np.float64), starts) / sizes
    out = np.empty(len(scores))
    out[order] = np.repeat(group_mean, sizes)
    return out


@contextmanager
def spared_generator(policy: Policy, stand_in: np.random.Generator | None = None) -> Iterator[None]:
    """Within the block ``policy._rng`` is ``stand_in`` (default: a copy of the policy's
    generator); the generator itself is restored after, so draws made in the block change
    nothing the policy does next."""
    saved = policy._rng
    policy._rng = copy.deepcopy(saved) if stand_in is None else stand_in
    try:
        yield
    finally:
        policy._rng = saved


def class_averaged(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(K,) ``probs`` (K,) averaged over the arms of each label (K,)."""
    _, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.reshape(-1)
    return (np.bincount(inverse, weights=probs) / np.bincount(inverse))[inverse]


def monte_carlo_inclusion(
    policy: Policy, draw_slate: Any, n_arms: int, draws: int | None = None
) -> np.ndarray:
    """(K,) share of ``draws`` re-runs of ``draw_slate()`` (returns arm positions) that
    include each arm. Each re-run sees a fresh generator in ``policy._rng`` derived from the
    seed and the current generator state; the policy's own generator is restored after, so
    the call changes nothing the policy does next."""
    draws = policy.propensity_draws if draws is None else draws
    state = policy._rng.bit_generator.state["state"]
    key = [
        policy.seed,
        1,
        *(int(v) % 2**63 for v in (state.values() if isinstance(state, dict) else [state])),
    ]
    counts = np.zeros(n_arms)
    for draw in range(draws):
        with spared_generator(policy, np.random.default_rng([*key, draw])):
            counts[np.asarray(draw_slate(), np.int64)] += 1
    return counts / draws


def _validated_mask(mask: Any, n_arms: int) -> np.ndarray | None:
    """None (all arms allowed) or the sorted int64 indices of the allowed arms."""
    if mask is None:
        return None
    array = np.asarray(mask)
    if array.dtype != np.bool_ or array.shape != (n_arms,):
        raise ValueError(
            f"mask must be None or a boolean array of shape (K,) = ({n_arms},) marking allowed "
            f"arms; got dtype {array.dtype} and shape {array.shape}"
        )
    return np.flatnonzero(array)


def _validated_budget(budget: Any, allowed: np.ndarray | None, n_arms: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, Integral) or budget < 1:
        raise config_error("budget", budget, "an integer >= 1")
    n_allowed = n_arms if allowed is None else allowed.size
    if budget > n_allowed:
        raise ValueError(
            f"budget={int(budget)} exceeds the number of allowed arms: mask allows {n_allowed} "
            f"of {n_arms} arms"
        )
    return int(budget)
