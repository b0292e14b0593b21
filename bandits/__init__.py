"""Intervention policies for PolicySim: contextual bandits over arrays of arm contexts.

Every policy implements :class:`bandits.base.Policy`::

    policy = make_policy("eenet", context_dim=D, seed=0)
    chosen = policy.select(contexts, mask, budget)   # (K, D), (K,) bool | None -> (budget,)
    policy.update(contexts[chosen], rewards)         # rewards in [0, 1]

This package depends on NumPy and torch only; it never imports ``socialenv``.
"""

from __future__ import annotations

from typing import Any

from bandits.base import Policy, ScoredPolicy
from bandits.constrained import ConstrainedEpsilonGreedy
from bandits.eenet import EENet
from bandits.egreedy import LinearEpsilonGreedy
from bandits.egreedy_neural import NeuralEpsilonGreedy
from bandits.lints import LinTS
from bandits.linucb import LinUCB
from bandits.neural_ucb import NeuralUCB
from bandits.random_policy import RandomPolicy
from policysim_infra.validation import check

#: Registry: policy name -> class.
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        EENet,
        NeuralUCB,
        LinUCB,
        LinTS,
        LinearEpsilonGreedy,
        ConstrainedEpsilonGreedy,
        NeuralEpsilonGreedy,
        RandomPolicy,
    )
}


def make_policy(name: str, context_dim: int, seed: int = 0, **hyperparameters: Any) -> Policy:
    """Build the policy registered as ``name`` (see ``POLICIES``).

    Raises:
        ValueError: for an unknown name (listing the valid ones), an unknown hyper-parameter
            (listing the policy's), or an invalid value (naming the field).
    """
    check(name in POLICIES, "policy", f"one of {', '.join(sorted(POLICIES))}", name)
    return POLICIES[name].build(context_dim, seed, **hyperparameters)


__all__ = [
    "POLICIES",
    "ConstrainedEpsilonGreedy",
    "EENet",
    "LinTS",
    "LinUCB",
    "LinearEpsilonGreedy",
    "NeuralEpsilonGreedy",
    "NeuralUCB",
    "Policy",
    "RandomPolicy",
    "ScoredPolicy",
    "make_policy",
]
