"""Policies on a PolicySim env: the registry of the names ``policysim run`` and ``sweep``
accept (origin, the bandits, the graph bandits and the plugins' policies; name →
:class:`PolicyEntry`, declared once), building one by name, and acting with one: a slate
capped at ``per_user`` arms per sampled user, with its propensities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from policysim_infra.validation import did_you_mean


@dataclass(frozen=True)
class PolicyEntry:
    """A policy name's implementation: ``build(env, seed, **hyper-parameters)`` (``env``
    unwrapped) returns an object with ``select``, ``update`` and ``reset``; ``source`` is
    where it comes from (``socialenv``, ``bandits`` or the plugin's package) and ``summary``
    what it is, in a sentence (the docs table of policies is generated from these)."""

    build: Callable[..., Any]
    source: str
    summary: str


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


#: Bandits that also read the follow graph (``observe_graph``; ``run`` feeds it the graph),
#: built with ``cls.build``: name -> "module:class".
GRAPH_POLICIES = {"eenet_gnn": "bandits.graph_eenet:GraphEENet"}

#: Every policy ``policysim run`` and ``sweep`` accept, by name: filled on first use with
#: origin, the bandits of ``bandits.POLICIES`` and :data:`GRAPH_POLICIES`, then by the plugins
#: (the shipped ``baselines`` plugin adds its rules; :mod:`policysim_infra.plugins`).
_REGISTRY: dict[str, PolicyEntry] = {}


def register_policy(
    name: str, factory: Callable[..., Any], summary: str | None = None, source: str | None = None
) -> None:
    """Make ``name`` a policy of ``policysim run`` / ``sweep``: ``factory(env, seed, **kw)``
    (``env`` unwrapped) returns an object with ``select``, ``update`` and ``reset``;
    ``summary`` (default: the first sentence of the factory's docstring) names it in docs,
    ``source`` (default: the factory's package) says where it comes from."""
    function = getattr(factory, "func", factory)
    _REGISTRY[name] = PolicyEntry(
        factory,
        getattr(function, "__module__", "").split(".")[0] if source is None else source,
        first_sentence(function.__doc__) if summary is None else summary,
    )


def _build_origin(env: Any, seed: int, **hyperparameters: Any) -> OriginPolicy:
    del seed, hyperparameters
    return OriginPolicy(env.no_op)


def _build_bandit(name: str, env: Any, seed: int, **hyperparameters: Any) -> Any:
    from bandits import make_policy

    policy = make_policy(name, context_dim=env.context_dim, seed=seed, **hyperparameters)
    if getattr(policy, "learns_costs", False):
        arm_cost_key(name, env)
    return policy


def arm_cost_key(policy_name: str, env: Any) -> str:
    """The ``info`` key of the per-arm cost that ``env`` (a PolicySim env, wrapped or not)
    reports for a policy that learns costs.

    Raises:
        ValueError: naming the policy and the env, when the env reports no cost.
    """
    base = getattr(env, "unwrapped", env)
    key = base.arm_cost_key()
    if key is None:
        raise ValueError(
            f"policy={policy_name!r} learns per-arm costs, and {type(base).__name__} with "
            f"reward form {base.config.reward.form!r} reports none: use PolicySim-Rec-v0 with "
            'reward={"form": "objective"} (info["arm_toxicity"])'
        )
    return key


def _build_graph_bandit(target: str, env: Any, seed: int, **hyperparameters: Any) -> Any:
    import importlib

    module, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module), cls_name)
    return cls.build(context_dim=env.context_dim, seed=seed, **hyperparameters)


def _register_builtins() -> None:
    import importlib

    from bandits import POLICIES

    if "origin" not in _REGISTRY:
        register_policy("origin", _build_origin, first_sentence(OriginPolicy.__doc__))
    for name, cls in POLICIES.items():
        if name not in _REGISTRY:
            summary = first_sentence(cls.__doc__)
            register_policy(name, partial(_build_bandit, name), summary, "bandits")
    for name, target in GRAPH_POLICIES.items():
        if name not in _REGISTRY:
            module, cls_name = target.split(":")
            doc = getattr(importlib.import_module(module), cls_name).__doc__
            summary = first_sentence(doc)
            register_policy(name, partial(_build_graph_bandit, target), summary, "bandits")


def policy_registry() -> dict[str, PolicyEntry]:
    """Every policy ``run`` and ``sweep`` accept, by name: origin, the bandits, the graph
    bandits, then the plugins' policies (loads the plugins)."""
    from policysim_infra.plugins import load_plugins

    _register_builtins()
    load_plugins()
    builtin = ("origin", *_bandit_names(), *GRAPH_POLICIES)
    return {name: _REGISTRY[name] for name in dict.fromkeys((*builtin, *_REGISTRY))}


def _bandit_names() -> tuple[str, ...]:
    from bandits import POLICIES

    return tuple(POLICIES)


def policy_names() -> tuple[str, ...]:
    """Every policy name ``run`` and ``sweep`` accept (:func:`policy_registry`)."""
    return tuple(policy_registry())


class OriginPolicy:
    """No intervention (the paper's Origin row): every slot of the slate is left empty."""

    def __init__(self, no_op: int) -> None:
        self.no_op = no_op

    def select(self, contexts: np.ndarray, mask: np.ndarray, budget: int) -> np.ndarray:
        return np.full(budget, self.no_op, np.int64)

    def inclusion_probabilities(
        self, contexts: np.ndarray, mask: np.ndarray | None = None, budget: int = 1
    ) -> tuple[np.ndarray, str]:
        """No arm is ever chosen: every inclusion probability is 0."""
        return np.zeros(len(contexts)), "deterministic"

    def is_deterministic(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> bool:
        return True

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards

    def reset(self) -> None:
        pass


def make_run_policy(name: str, env: Any, seed: int, **kwargs: Any) -> Any:
    """A policy for ``env`` (an unwrapped PolicySim env), built by its registry entry
    (:func:`policy_registry`): "origin", any bandit name, a graph bandit of
    :data:`GRAPH_POLICIES`, or a plugin's policy (:func:`register_policy`)."""
    registry = _REGISTRY if name in _REGISTRY else policy_registry()
    if name not in registry:
        allowed = tuple(registry)
        raise ValueError(
            f"policy={name!r} is not allowed: use one of {allowed}{did_you_mean(name, allowed)}"
        )
    return registry[name].build(env, seed, **kwargs)


def arm_groups(env: Any) -> np.ndarray:
    """(K,) the sampled user each arm belongs to; at most ``env.per_user`` arms of a group
    take effect in a round (Rec: recommended slots per user; Exposure: one level per user)."""
    return getattr(env, "unwrapped", env).arm_groups()


def select_action(policy: Any, obs: dict[str, np.ndarray], env: Any) -> np.ndarray:
    """The (slate_size,) slate ``policy`` picks for ``obs`` on ``env`` (a PolicySim env): at most
    ``per_user`` arms per sampled user (:func:`bandits.slate.select_per_group`), padded with
    empty slots (``no_op``) if fewer arms are allowed than the slate holds."""
    from bandits.slate import select_per_group

    base = getattr(env, "unwrapped", env)
    if base.config.action_format != "slate":
        raise ValueError(
            f"select_action builds slates of arm indices; this env takes action_format="
            f'{base.config.action_format!r}: make it with action_format="slate" (the default)'
        )
    mask = obs["action_mask"].astype(bool)
    action = np.full(base.slate_size, base.no_op, np.int64)
    if isinstance(policy, OriginPolicy) or not mask.any():
        return action
    picks = select_per_group(
        policy, obs["arms"], mask, base.slate_size, base.arm_groups(), base.per_user
    )
    action[: len(picks)] = picks
    return action


def select_logged_action(
    policy: Any, obs: dict[str, np.ndarray], env: Any
) -> tuple[np.ndarray, np.ndarray, str]:
    """:func:`select_action` and the propensity of each slot's arm: the (slate_size,) slate,
    the (slate_size,) inclusion probabilities (NaN for empty slots) and how they were
    obtained (:data:`bandits.base.PROPENSITY_METHODS`; :func:`bandits.slate.per_group_inclusion`).
    The slate is the one ``select_action`` picks."""
    from bandits.slate import per_group_inclusion

    base = getattr(env, "unwrapped", env)
    mask = obs["action_mask"].astype(bool)
    propensities = np.full(base.slate_size, np.nan)
    if isinstance(policy, OriginPolicy) or not mask.any():
        return np.full(base.slate_size, base.no_op, np.int64), propensities, "deterministic"
    probs, method = per_group_inclusion(
        policy, obs["arms"], mask, base.slate_size, base.arm_groups(), base.per_user
    )
    action = select_action(policy, obs, base)
    picked = action[action != base.no_op]
    propensities[: len(picked)] = probs[picked]
    if method == "monte_carlo":
        propensities = np.maximum(propensities, 1.0 / (policy.propensity_draws + 1))
    return action, propensities, method
