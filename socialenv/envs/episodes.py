"""Play episodes of a PolicySim env with any policy, the same way for every policy.

A *policy* here is either

- a slate policy with the bandit interface (``select(contexts, mask, budget)``,
  ``update(contexts, rewards)``): origin, the bandits, the baselines — it learns online
  from the reward of every arm it applied; or
- an *actor*: any object with ``act(obs) -> action`` (e.g. :class:`baselines.sb3.SB3Actor`
  around a trained Stable-Baselines3 model), which does not learn here.

The episode seed convention is the runner's (``seed * 1000 + episode``), so numbers are
comparable with ``policysim run``. The sweep plays its trials with :func:`play_episode`;
``baselines`` re-exports these functions (``from baselines import play_episode``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core.metrics import bias, diversity
from socialenv.envs.policy_registry import arm_cost_key, select_action


def learn_from_step(policy: Any, arms: np.ndarray, info: dict[str, Any], env: Any) -> None:
    """Let ``policy`` learn from the arms it applied in the step that returned ``info``
    (``arms``: the (K, D) arm contexts of the observation it acted on): ``update(contexts,
    rewards)``, and ``costs=`` from the env's :meth:`arm_cost_key` for a policy that
    ``learns_costs``. Nothing for an actor or a policy without ``update``.

    Raises:
        ValueError: when the policy learns costs and the env reports none.
    """
    applied = info["arm_applied"]
    if not applied.any() or not hasattr(policy, "update"):
        return
    contexts = arms[info["arm_indices"][applied]]
    rewards = info["arm_rewards"][applied]
    if not getattr(policy, "learns_costs", False):
        policy.update(contexts, rewards)
        return
    key = arm_cost_key(getattr(policy, "name", type(policy).__name__), env)
    policy.update(contexts, rewards, costs=info[key][applied])


def slate_for(policy: Any, obs: dict[str, np.ndarray], env: Any) -> np.ndarray:
    """The (slate_size,) slate a policy picks for ``obs``, as ``policysim run`` picks it: an
    actor's ``act(obs)``, or the slate policy's selection (one arm per user where the env
    applies only one, graph-aware policies shown the current follow graph first)."""
    base = env.unwrapped
    if hasattr(policy, "act"):
        return np.asarray(policy.act(obs), np.int64)
    if hasattr(policy, "observe_graph"):
        policy.observe_graph(base.graph_data())
    return select_action(policy, obs, base)


def play_episode(
    env: Any, policy: Any, seed: int | None, *, learn: bool = True, extra_metrics: Any = None
) -> list[dict[str, Any]]:
    """Play one episode of ``env`` (a gymnasium env, wrapped or not) from ``reset(seed=seed)``.

    Args:
        env: a PolicySim env.
        policy: a slate policy (``select``/``update``) or an actor (``act``).
        seed: reset seed (None continues the env's random stream).
        learn: call ``policy.update`` with the applied arms' rewards after each round.
        extra_metrics: optional callable ``(env) -> dict[str, float]`` evaluated after each
            round and merged into the row (e.g. ABM bias / diversity).

    Returns:
        One row per round: ``round``, ``reward`` and every ``info["metrics"]`` entry.
    """
    obs, _ = env.reset(seed=seed)
    rows: list[dict[str, Any]] = []
    done = False
    while not done:
        action = slate_for(policy, obs, env)
        arms = obs["arms"]
        obs, reward, terminated, truncated, info = env.step(action)
        if learn:
            learn_from_step(policy, arms, info, env)
        row = {"round": int(info["round"]), "reward": float(reward), **info["metrics"]}
        if extra_metrics is not None:
            row.update(extra_metrics(env))
        rows.append(row)
        done = bool(terminated or truncated)
    return rows


def opinion_metrics(env: Any) -> dict[str, float]:
    """HiSim's macro metrics of the current population: ``bias`` (mean attitude) and
    ``diversity`` (its variance). The attitude is the latent opinion for surrogate and ABM
    users, and the smoothed stance S (Eq. 2) for other brains (LLM agents keep no latent
    opinion of their own)."""
    from agent_models.surrogate import SurrogateBrain

    base = env.unwrapped
    brain = getattr(base.brain, "inner", base.brain)  # unwrap the PettingZoo mixed-population brain
    users = base.sim.users
    attitude = users.opinion if isinstance(brain, SurrogateBrain) else users.stance
    return {"bias": bias(attitude), "diversity": diversity(attitude)}
