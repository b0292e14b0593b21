"""Run a policy on a PolicySim env for several seeds and episodes; log every round.

Each run writes a folder with ``config.json``, ``rounds.csv`` (one row per seed × episode ×
round: reward and every platform metric), ``summary.json`` (final-round metrics, mean ± 95%
CI over seeds), ``logged_rounds.npz`` (the logged bandit feedback for off-policy evaluation:
every round's arm contexts, mask, slate, the propensity of each picked arm and the slot
rewards; :class:`bandits.ope.LoggedRounds`) and PNG plots; with ``wandb=`` it also logs each
round to Weights & Biases. With ``record=DIR`` the episodes also go to a Minari dataset in
DIR (:mod:`socialenv.offline`).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Policies that are not bandits: "origin" leaves every slot empty (no intervention);
#: the bandit names come from ``bandits.POLICIES``.
BUILTIN_POLICIES = ("origin",)
WANDB_MODES = ("online", "offline", "disabled")


#: Bandits that also read the follow graph (``observe_graph``); name -> "module:class".
GRAPH_POLICIES = {"eenet_gnn": "bandits.graph_eenet:GraphEENet"}


def policy_names() -> tuple[str, ...]:
    from bandits import POLICIES

    return BUILTIN_POLICIES + tuple(POLICIES) + tuple(GRAPH_POLICIES)


@dataclass
class RunConfig:
    """What to run. ``env_kwargs`` go to ``gym.make``; ``policy_kwargs`` to the policy."""

    env_id: str = "PolicySim-Rec-v0"
    policy: str = "random"
    seeds: Sequence[int] = (0,)
    episodes: int = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    out_dir: str | None = "runs"
    run_name: str | None = None
    wandb: str | None = None
    wandb_project: str = "policysim"
    plots: bool = True
    progress: bool = True
    log_propensities: bool = True
    #: a directory: record the episodes there as a Minari dataset (:mod:`socialenv.offline`)
    record: str | None = None
    record_id: str | None = None

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes={self.episodes} is not allowed: an integer >= 1")
        if not self.seeds:
            raise ValueError("seeds must name at least one seed")
        if self.wandb is not None and self.wandb not in WANDB_MODES:
            raise ValueError(f"wandb={self.wandb!r} is not allowed: one of {WANDB_MODES} or None")


@dataclass
class RunResult:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    out_dir: Path | None


class OriginPolicy:
    """No intervention (the paper's Origin row): every slot of the slate is left empty."""

    def __init__(self, no_op: int) -> None:
        self.no_op = no_op

    def select(self, contexts: np.ndarray, mask: np.ndarray, budget: int) -> np.ndarray:
        return np.full(budget, self.no_op, np.int64)

    def inclusion_probabilities(self, contexts: np.ndarray, mask: np.ndarray | None = None,
                                budget: int = 1) -> tuple[np.ndarray, str]:
        """No arm is ever chosen: every inclusion probability is 0."""
        return np.zeros(len(contexts)), "deterministic"

    def is_deterministic(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> bool:
        return True

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards

    def reset(self) -> None:
        pass


def make_run_policy(name: str, env: Any, seed: int, **kwargs: Any) -> Any:
    """A policy for ``env`` (an unwrapped PolicySim env): "origin", any bandit name, or a graph
    bandit of :data:`GRAPH_POLICIES` (built with ``cls.build``; ``run`` feeds it the graph)."""
    if name == "origin":
        return OriginPolicy(env.no_op)
    if name in GRAPH_POLICIES:
        import importlib

        module, cls_name = GRAPH_POLICIES[name].split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        return cls.build(context_dim=env.context_dim, seed=seed, **kwargs)
    from bandits import make_policy

    return make_policy(name, context_dim=env.context_dim, seed=seed, **kwargs)


def arm_groups(env: Any) -> np.ndarray | None:
    """(K,) group of each arm when the env applies at most one arm per group, else None.

    PolicySim-Exposure-v0: arm k = (user k // L, level k % L) and a second arm on the same
    user is discarded (it scores 0), so the group is k // L. Rec arms have no such limit."""
    from socialenv.envs.exposure import ExposureEnv

    base = getattr(env, "unwrapped", env)
    if isinstance(base, ExposureEnv):
        return np.arange(base.num_arms, dtype=np.int64) // len(base.config.exposure_levels)
    return None


def select_action(policy: Any, obs: dict[str, np.ndarray], budget: int, no_op: int,
                  groups: np.ndarray | None = None) -> np.ndarray:
    """The slate for ``obs``: the policy's picks, padded with empty slots if it picked fewer
    (fewer valid arms than the budget). With ``groups`` (K,) (see :func:`arm_groups`) the
    slate holds at most one arm per group (:func:`bandits.slate.select_one_per_group`)."""
    mask = obs["action_mask"].astype(bool)
    k = min(budget, int(mask.sum()))
    if isinstance(policy, OriginPolicy) or k == 0:
        return np.full(budget, no_op, np.int64)
    if groups is not None:
        from bandits.slate import select_one_per_group

        picks = select_one_per_group(policy, obs["arms"], mask, k, groups)
    else:
        picks = np.asarray(policy.select(obs["arms"], mask, k), np.int64)
    action = np.full(budget, no_op, np.int64)
    action[: len(picks)] = picks
    return action


def select_logged_action(policy: Any, obs: dict[str, np.ndarray], budget: int, no_op: int,
                         groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """:func:`select_action` and the propensity of each slot's arm: the slate (budget,), the
    (budget,) inclusion probabilities (NaN for empty slots) and how they were obtained
    (:data:`bandits.base.PROPENSITY_METHODS`). The slate is the one ``select_action`` picks."""
    mask = obs["action_mask"].astype(bool)
    k = min(budget, int(mask.sum()))
    propensities = np.full(budget, np.nan)
    if isinstance(policy, OriginPolicy) or k == 0:
        return np.full(budget, no_op, np.int64), propensities, "deterministic"
    if groups is not None:
        from bandits.slate import one_per_group_inclusion, select_one_per_group

        probs, method = one_per_group_inclusion(policy, obs["arms"], mask, k, groups)
        picks = select_one_per_group(policy, obs["arms"], mask, k, groups)
        picked = probs[picks]
        if method == "monte_carlo":
            picked = np.maximum(picked, 1.0 / (policy.propensity_draws + 1))
    else:
        logged = policy.select_with_propensities(obs["arms"], mask, k)
        picks, picked, method = logged.arms, logged.propensities, logged.method
    action = np.full(budget, no_op, np.int64)
    action[: len(picks)] = picks
    propensities[: len(picks)] = picked
    return action, propensities, method


def _ci95(values: Sequence[float]) -> float:
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def summarize(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Per-seed value of each key (final round of the last episode for state metrics,
    mean over that episode's rounds for flow metrics), then mean ± 95% CI over seeds."""
    flow = {"reward", "toxicity", "cross_interaction_ratio", "cross_interaction_ratio_recommended",
            "engagement", "exposure_removed", "recommended_reaction_rate"}
    last_episode = max(r["episode"] for r in rows)
    per_seed: dict[int, dict[str, float]] = {}
    for seed in sorted({r["seed"] for r in rows}):
        episode = [r for r in rows if r["seed"] == seed and r["episode"] == last_episode]
        per_seed[seed] = {
            k: float(np.mean([r[k] for r in episode])) if k in flow else float(episode[-1][k])
            for k in keys if k in episode[-1]
        }
    out: dict[str, Any] = {"seeds": len(per_seed), "per_seed": per_seed}
    for k in keys:
        values = [s[k] for s in per_seed.values() if k in s]
        if values:
            out[k] = {"mean": float(np.mean(values)), "ci95": _ci95(values)}
    return out


def run(config: RunConfig, on_round: Callable[[dict[str, Any]], None] | None = None,
        wandb_run: Any = None) -> RunResult:
    """Run ``config``; returns every round's row and the summary (also written to disk)."""
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the env ids

    allowed = policy_names()
    if config.policy not in allowed:
        raise ValueError(f"policy={config.policy!r} is not allowed: use one of {allowed}")
    if config.record:
        from socialenv.offline import check_dataset_free, default_dataset_id

        check_dataset_free(config.record, config.record_id or default_dataset_id(config.env_id, config.policy))
    out_dir = None
    if config.out_dir is not None:
        name = config.run_name or f"{config.env_id}-{config.policy}-{time.strftime('%Y%m%d-%H%M%S')}"
        out_dir = Path(config.out_dir) / name
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(asdict(config), indent=2, default=repr))

    own_wandb = False
    if wandb_run is None and config.wandb is not None:
        import wandb

        wandb_run = wandb.init(
            project=config.wandb_project, mode=config.wandb, name=config.run_name,
            config=asdict(config), dir=str(out_dir) if out_dir else None, reinit="finish_previous",
        )
        own_wandb = True

    total = len(config.seeds) * config.episodes
    rows: list[dict[str, Any]] = []
    from tqdm.auto import tqdm

    bar = tqdm(total=None, disable=not config.progress,
               desc=f"{config.policy} on {config.env_id}", unit="round")
    step = 0
    logger = recorder = None
    try:
        for seed in config.seeds:
            env = gym.make(config.env_id, **config.env_kwargs)
            base = env.unwrapped
            if bar.total is None:
                bar.total = total * base.config.rounds
                bar.refresh()
            policy = make_run_policy(config.policy, base, seed, **config.policy_kwargs)
            if config.log_propensities and (out_dir is not None or config.record) and logger is None:
                from bandits.ope import RoundLogger

                logger = RoundLogger(groups=arm_groups(base))
            if config.record and recorder is None:
                from socialenv.offline import EpisodeRecorder

                recorder = EpisodeRecorder(base.observation_space, base.config.budget)
            for episode in range(config.episodes):
                obs, reset_info = env.reset(seed=seed * 1000 + episode)
                if logger is not None:
                    logger.start_episode()
                if recorder is not None:
                    recorder.reset(obs, reset_info, seed=seed * 1000 + episode)
                done = False
                while not done:
                    if hasattr(policy, "observe_graph"):
                        policy.observe_graph(base.graph_data())
                    if logger is not None:
                        action, propensities, method = select_logged_action(
                            policy, obs, base.config.budget, base.no_op, groups=arm_groups(base))
                    else:
                        action = select_action(policy, obs, base.config.budget, base.no_op,
                                               groups=arm_groups(base))
                    arms, arm_mask = obs["arms"], obs["action_mask"]
                    obs, reward, terminated, truncated, info = env.step(action)
                    if logger is not None:
                        logger.add(arms, arm_mask, action, propensities, method,
                                   info["arm_rewards"], info["arm_applied"])
                    if recorder is not None:
                        recorder.step(action, obs, reward, terminated, truncated, info,
                                      propensities if logger is not None else None)
                    applied = info["arm_applied"]
                    if applied.any():
                        policy.update(arms[info["arm_indices"][applied]], info["arm_rewards"][applied])
                    done = terminated or truncated
                    row = {"seed": seed, "episode": episode, "round": info["round"],
                           "reward": reward, **info["metrics"]}
                    rows.append(row)
                    if wandb_run is not None:
                        wandb_run.log({f"{k}": v for k, v in row.items()}, step=step)
                    if on_round is not None:
                        on_round(row)
                    step += 1
                    bar.update(1)
            env.close()
    finally:
        bar.close()
        if own_wandb:
            wandb_run.finish()

    keys = [k for k in rows[0] if k not in ("seed", "episode", "round")]
    summary = {"env_id": config.env_id, "policy": config.policy, **summarize(rows, keys)}
    if out_dir is not None:
        with (out_dir / "rounds.csv").open("w", newline="") as fh:
            fieldnames = list(rows[0]) + sorted({k for r in rows for k in r} - set(rows[0]))
            writer = csv.DictWriter(fh, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        if logger is not None and len(logger):
            logger.rounds().save(out_dir / "logged_rounds.npz")
        if config.plots:
            from socialenv.plots import plot_run

            plot_run(rows, out_dir, title=f"{config.policy} on {config.env_id}")
    if recorder is not None:
        from socialenv.offline import default_dataset_id

        recorder.write(config.record, config.record_id or default_dataset_id(config.env_id, config.policy),
                       base, algorithm_name=config.policy,
                       description=f"{config.policy} on {config.env_id}, seeds {list(config.seeds)}")
    return RunResult(rows=rows, summary=summary, out_dir=out_dir)
