"""Policies on a PolicySim env: the names ``policysim run`` and ``sweep`` accept (origin, the
bandits, the graph bandits and the plugins' policies), building one by name, and acting with
one: a slate capped at ``per_user`` arms per sampled user, with its propensities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agent_models.validation import did_you_mean

#: Policies that are not bandits: "origin" leaves every slot empty (no intervention);
#: the bandit names come from ``bandits.POLICIES``.
BUILTIN_POLICIES = ("origin",)


#: Bandits that also read the follow graph (``observe_graph``); name -> "module:class".
GRAPH_POLICIES = {"eenet_gnn": "bandits.graph_eenet:GraphEENet"}


#: Policies registered by plugins: name -> factory(env, seed, **hyper-parameters) (the shipped
#: ``baselines`` plugin adds popularity, mmr and suppress_flagged; :mod:`agent_models.plugins`).
_PLUGIN_POLICIES: dict[str, Callable[..., Any]] = {}


def register_policy(name: str, factory: Callable[..., Any]) -> None:
    """Make ``name`` a policy of ``policysim run`` / ``sweep``: ``factory(env, seed, **kw)``
    (``env`` unwrapped) returns an object with ``select``, ``update`` and ``reset``."""
    _PLUGIN_POLICIES[name] = factory


def policy_names() -> tuple[str, ...]:
    """Every policy name ``run`` and ``sweep`` accept: origin, the bandits, the graph
    bandits and the plugins' policies."""
    from agent_models.plugins import load_plugins
    from bandits import POLICIES

    load_plugins()
    return tuple(
        dict.fromkeys(
            BUILTIN_POLICIES + tuple(POLICIES) + tuple(GRAPH_POLICIES) + tuple(_PLUGIN_POLICIES)
        )
    )


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
    """A policy for ``env`` (an unwrapped PolicySim env): "origin", any bandit name, a graph
    bandit of :data:`GRAPH_POLICIES` (built with ``cls.build``; ``run`` feeds it the graph),
    or a plugin's policy (:func:`register_policy`)."""
    if name == "origin":
        return OriginPolicy(env.no_op)
    if name not in _PLUGIN_POLICIES:
        allowed = policy_names()  # loads the plugins, which register their policies
        if name not in allowed:
            raise ValueError(
                f"policy={name!r} is not allowed: use one of {allowed}{did_you_mean(name, allowed)}"
            )
    if name in _PLUGIN_POLICIES:
        return _PLUGIN_POLICIES[name](env, seed, **kwargs)
    if name in GRAPH_POLICIES:
        import importlib

        module, cls_name = GRAPH_POLICIES[name].split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        return cls.build(context_dim=env.context_dim, seed=seed, **kwargs)
    from bandits import make_policy

    return make_policy(name, context_dim=env.context_dim, seed=seed, **kwargs)


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
