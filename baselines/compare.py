"""Paired comparison of policies: the same seeds give every policy the same population and
random streams, so policy effects are measured as per-seed differences (mean ± 95% CI).

    results = evaluate("PolicySim-Rec-v0", ["origin", "random", "linucb"], seeds=range(5))
    table = paired_deltas(results, reference="origin")   # policy -> metric -> {mean, ci95}

Policies are any name :func:`baselines.make_policy` accepts, or an oracle of
:data:`baselines.oracles.ORACLES` (which reads the hidden state: an upper bound).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: Metrics reported per episode: flow metrics are averaged over the episode's rounds,
#: state metrics are read at its last round.
FLOW_METRICS: tuple[str, ...] = (
    "reward",
    "cross_interaction_ratio",
    "cross_interaction_ratio_recommended",
    "toxicity",
    "engagement",
    "exposure_removed",
    "policy_share",
    "recommended_reaction_rate",
    "objective",
    "civil_cross_reactions_per_user",
    "hostile_reactions_per_user",
    "hostile_cross_reactions_per_user",
    "slot_reward",
    "clean_removed_per_user",
)
STATE_METRICS: tuple[str, ...] = ("stance_mean", "stance_std", "misinformation_ratio")


def mean_ci95(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and the half-width of its 95% Student-t interval (``None`` for one value)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return {"mean": float(v.mean()) if len(v) else None, "ci95": None, "n": len(v)}
    from scipy import stats

    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return {"mean": float(v.mean()), "ci95": float(half), "n": len(v)}


def episode_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """One episode's rows -> flow metrics averaged over rounds, state metrics at the end."""
    out = {k: float(np.mean([r[k] for r in rows])) for k in FLOW_METRICS if k in rows[0]}
    out.update({k: float(rows[-1][k]) for k in STATE_METRICS if k in rows[-1]})
    return out


def build_policy(name: str, env: Any, seed: int, **kwargs: Any) -> Any:
    """A baseline, bandit or oracle policy for ``env``."""
    from baselines.oracles import ORACLES
    from baselines.policies import make_policy

    if name in ORACLES:
        return ORACLES[name](env)
    return make_policy(name, env, seed=seed, **kwargs)


def evaluate(
    env_id: str,
    policies: Iterable[str],
    seeds: Iterable[int],
    env_kwargs: dict[str, Any] | None = None,
    policy_kwargs: dict[str, dict[str, Any]] | None = None,
    progress: Any = None,
    aliases: dict[str, str] | None = None,
) -> dict[str, list[dict[str, float]]]:
    """policy -> one :func:`episode_summary` per seed (the episode seed is ``seed * 1000``,
    the runner's convention). ``aliases`` maps a row name to the policy it builds (with that
    row's ``policy_kwargs``), for variants of one policy."""
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the env ids
    from socialenv.envs.episodes import play_episode

    results: dict[str, list[dict[str, float]]] = {}
    seeds = list(seeds)
    for name in policies:
        results[name] = []
        for seed in seeds:
            env = gym.make(env_id, **(env_kwargs or {}))
            policy = build_policy(
                (aliases or {}).get(name, name), env, seed, **(policy_kwargs or {}).get(name, {})
            )
            results[name].append(episode_summary(play_episode(env, policy, seed * 1000)))
            env.close()
            if progress is not None:
                progress(name, seed)
    return results


def paired_deltas(
    results: dict[str, list[dict[str, float]]], reference: str
) -> dict[str, dict[str, dict[str, float]]]:
    """policy -> metric -> mean ± 95% CI of (policy − reference), paired by seed."""
    base = results[reference]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, per_seed in results.items():
        if name == reference:
            continue
        out[name] = {
            key: mean_ci95([run[key] - ref[key] for run, ref in zip(per_seed, base, strict=True)])
            for key in per_seed[0]
            if key in base[0]
        }
    return out


def levels(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """policy -> metric -> mean ± 95% CI over seeds (unpaired levels, for reading off values)."""
    return {
        name: {key: mean_ci95([run[key] for run in per_seed]) for key in per_seed[0]}
        for name, per_seed in results.items()
    }
