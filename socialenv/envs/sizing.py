"""Will a flat deep-RL policy fit? An estimate at construction, and the advice when it won't.

The standard recipes (SB3 ``PPO("MultiInputPolicy", ...)``, a CleanRL-style PPO,
sb3-contrib's ``MaskablePPO``) flatten the observation into one vector and give the slate
action one categorical head of ``slate_size × (K + 1)`` logits. Their memory grows with
both: the rollout buffer holds every step's observation (and, for MaskablePPO, every
step's ``slate_size × (K + 1)`` action mask as float32), and the head's weights, gradients
and Adam moments scale with the logits. :func:`flat_ppo_memory` estimates the peak
resident memory of a 2,048-step PPO rollout and update for each recipe (calibrated on
``benchmarks/rl_libraries.py``, see BENCHMARKS.md, *RL libraries*); when one of them passes
:data:`MEMORY_BUDGET`, the env warns once at construction with a
:class:`LargeActionSpaceWarning` that names the recipe and what to use instead. Bandits
(``policysim run``) and the per-arm policy (:mod:`baselines.per_arm`) score arms one by
one and are not concerned.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

GIB = 1024**3
#: The memory a flat recipe may need before the env warns (one core, a 4 GiB laptop budget).
MEMORY_BUDGET = 4 * GIB
#: Env steps of the rollout the estimate assumes (2 envs × 1,024 steps).
ROLLOUT_STEPS = 2048
#: Python, torch, the two envs and the libraries before any buffer (measured: 0.5-0.7 GiB).
BASE_BYTES = int(0.7 * GIB)
#: Float32 copies of a minibatch's logits alive during an update (logits, normalised
#: logits, probabilities, entropy terms and their gradients; 6 fits the measured peaks).
LOGIT_COPIES = 6


class LargeActionSpaceWarning(UserWarning):
    """The env's flattened observation or slate action is too large for a flat deep-RL
    policy within :data:`MEMORY_BUDGET`; the message says which form and sizes to use."""


def _flat_size(space: spaces.Space) -> int:
    """Floats of ``space`` flattened (spaces without a flat form, such as Graph, count 0)."""
    if isinstance(space, spaces.Dict):
        return sum(_flat_size(s) for s in space.spaces.values())
    try:
        return int(spaces.flatdim(space))
    except (ValueError, NotImplementedError, TypeError):
        return 0


def flat_ppo_memory(
    observation_space: spaces.Space, action_space: spaces.Space, steps: int = ROLLOUT_STEPS
) -> dict[str, int]:
    """Estimated peak resident bytes of a ``steps``-step PPO rollout and update, per recipe:
    ``"sb3"`` (PPO, ``MultiInputPolicy``, 64 × 64 MLPs, minibatch 64), ``"cleanrl"``
    (``ppo.py``: minibatch ``steps / 4``) and ``"maskable"`` (MaskablePPO: SB3 plus a float32
    action mask per step)."""
    obs = _flat_size(observation_space)
    if isinstance(action_space, spaces.MultiDiscrete):
        logits = int(np.sum(action_space.nvec))
    else:
        logits = 2 * _flat_size(action_space)  # Gaussian mean and log-std
    return _estimate(obs, logits, steps)


def _estimate(obs: int, logits: int, steps: int = ROLLOUT_STEPS) -> dict[str, int]:
    params = obs * 64 * 2 + 64 * logits  # the two first layers and the action head
    weights = params * 4 * 4  # float32 weights, gradients, Adam's two moments
    # SB3 swaps and flattens its buffers into a copy before the update
    sb3 = BASE_BYTES + 2 * steps * obs * 4 + weights + 64 * logits * 4 * LOGIT_COPIES
    cleanrl = (
        BASE_BYTES + steps * obs * 4 + weights + (steps // 4) * (obs + logits * LOGIT_COPIES) * 4
    )
    # float32 masks, partly copied when the buffer is flattened (1.5 copies fit the measured peaks)
    maskable = sb3 + 1.5 * steps * logits * 4
    return {"sb3": int(sb3), "cleanrl": int(cleanrl), "maskable": int(maskable)}


def _env_id(env: Any) -> str:
    """The registered id of ``env``'s class (its spec is set only after construction)."""
    import gymnasium as gym

    cls = type(env)
    for env_id, spec in gym.registry.items():
        if isinstance(spec.entry_point, str) and spec.entry_point.endswith(f":{cls.__name__}"):
            return env_id
    return cls.__name__


def _fitting_scale(env: Any, budget: int) -> float:
    """The largest share s of the lever (K and the slate both times s) at which every recipe
    fits ``budget``; the arms' part of the observation scales with K, the rest does not."""
    arms = env.num_arms * (env.context_dim + 1)
    other = _flat_size(env.observation_space) - arms
    slate = getattr(env.action_space, "shape", (env.num_arms,))[0]
    multi = isinstance(env.action_space, spaces.MultiDiscrete)

    def fits(share: float) -> bool:
        logits = slate * share * (env.num_arms * share + 1) if multi else 2 * env.num_arms * share
        return max(_estimate(int(other + arms * share), int(logits)).values()) <= budget

    low, high = 0.0, 1.0
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _significant(x: float, digits: int = 2) -> float:
    """``x`` rounded to ``digits`` significant digits (a small share must not print as 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def sizing_advice(env: Any, budget: int = MEMORY_BUDGET) -> str | None:
    """The message for an env (unwrapped PolicySim env) some flat recipe will not fit, or None."""
    estimate = flat_ppo_memory(env.observation_space, env.action_space)
    over = {name: size for name, size in estimate.items() if size > budget}
    if not over:
        return None
    names = {
        "sb3": "SB3 PPO('MultiInputPolicy')",
        "cleanrl": "a CleanRL-style PPO",
        "maskable": "sb3-contrib MaskablePPO",
    }
    lever = list(type(env.lever_config).size_fields)  # as the lever config declares them
    form = (
        f"the slate action MultiDiscrete([{env.num_arms + 1}] * {env.slate_size})"
        if isinstance(env.action_space, spaces.MultiDiscrete)
        else f"the scores action Box({env.num_arms},)"
    )
    needs = ", ".join(f"{names[n]} ≈ {size / GIB:.1f} GiB" for n, size in over.items())
    share = _fitting_scale(env, budget)
    example = next(
        (
            (k, getattr(env.lever_config, k))
            for k in lever
            if isinstance(getattr(env.lever_config, k, None), int | float)
            and not isinstance(getattr(env.lever_config, k), bool)
        ),
        None,
    )
    target = f"K ≈ {int(env.num_arms * share)} arms"
    if example is not None:
        value = example[1] * share
        shown = max(int(value), 1) if isinstance(example[1], int) else f"{_significant(value):g}"
        target += f", e.g. {example[0]}={shown}"
    per_arm = (
        "action_format='scores' or baselines.per_arm (PerUserChoice + PerArmPolicy: one shared "
        "network scores each arm from its context, so neither the head nor the rollout grows with K)"
    )
    return (
        f"{_env_id(env)}: K = {env.num_arms} arms × {env.context_dim} "
        f"features and {form}; a flat deep-RL policy over a {ROLLOUT_STEPS}-step PPO rollout needs more than "
        f"{budget / GIB:.0f} GiB ({needs}). Use {per_arm}, or shrink the lever "
        f"({', '.join(lever) or 'its size arguments'}) to about {_significant(share * 100):g}% ({target}). "
        "Bandits (policysim run --policy ...) are not affected. "
        "BENCHMARKS.md, 'RL libraries', gives the sizes that fit."
    )


def warn_if_too_large(env: Any) -> None:
    """Warn (:class:`LargeActionSpaceWarning`) when a flat recipe will not fit the budget."""
    message = sizing_advice(env)
    if message is not None:
        warnings.warn(message, LargeActionSpaceWarning, stacklevel=3)
