"""One trial of a sweep: a fresh env and policy, ``episodes`` episodes, every round logged.

The policy is built by name through :func:`baselines.policies.make_policy` (origin, the
bandits, the baselines and every policy a plugin registered, :mod:`policysim_infra.plugins`),
so a trial runs the same on a Ray worker as in this process.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from policysim.sweep.config import Trial
from policysim_infra.extras import require
from policysim_infra.redaction import to_json_data


def run_trial(
    trial: Trial,
    *,
    wandb_mode: str | None = None,
    wandb_project: str = "policysim",
    group: str = "sweep",
    out_dir: str | None = None,
    threads: int | None = None,
    wandb_run: Any = None,
) -> dict[str, Any]:
    """Run one trial; returns its definition, rows (one per round), summary and timing.

    Args:
        trial: what to run.
        wandb_mode: start a W&B run in this mode (None = no W&B, unless ``wandb_run``).
        wandb_project, group: W&B project and group (the sweep name).
        out_dir: folder for the W&B files of the trial.
        threads: torch threads for the policy (1 on a Ray worker, so trials do not fight
            over cores); None leaves torch's setting.
        wandb_run: an already started W&B run to log into (a W&B sweep agent's run).
    """
    import gymnasium as gym

    from baselines.policies import make_policy
    from policysim.summary import summarize
    from socialenv.envs.episodes import opinion_metrics, play_episode

    if threads is not None:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    start = time.perf_counter()
    own_run = False
    if wandb_run is None and wandb_mode is not None:
        wandb = require("wandb", "wandb", "wandb_mode (W&B logging of a sweep)")

        run_dir = Path(out_dir) if out_dir else None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
        wandb_run = wandb.init(
            project=wandb_project,
            group=group,
            name=trial.name,
            job_type=trial.policy,
            mode=wandb_mode,
            dir=str(run_dir) if run_dir else None,
            reinit="finish_previous",
            config={**to_json_data(asdict(trial))},
            settings=wandb.Settings(silent=True, console="off"),  # one line per trial is enough
        )
        own_run = True
    # population names such as "lorenz" are resolved by the env: one fresh brain per env
    env = gym.make(trial.env_id, **trial.env_kwargs)
    rows: list[dict[str, Any]] = []
    try:
        policy = make_policy(trial.policy, env.unwrapped, trial.seed, **trial.policy_kwargs)
        for episode in range(trial.episodes):
            for row in play_episode(
                env, policy, trial.seed * 1000 + episode, extra_metrics=opinion_metrics
            ):
                row = {"seed": trial.seed, "episode": episode, **row}
                if wandb_run is not None:
                    wandb_run.log({k: v for k, v in row.items() if k != "seed"}, step=len(rows))
                rows.append(row)
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")]
        summary = summarize(rows, keys)
        if wandb_run is not None:
            wandb_run.summary.update(
                {
                    f"final/{k}": v["mean"]
                    for k, v in summary.items()
                    if isinstance(v, dict) and "mean" in v
                }
            )
    finally:
        env.close()
        if own_run:
            wandb_run.finish()
    return {
        "trial": to_json_data(asdict(trial)),
        "rows": rows,
        "summary": summary,
        "seconds": time.perf_counter() - start,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def trial_failure(trial: Trial, err: BaseException) -> dict[str, Any]:
    """The record of a failed trial: its definition, the error and where it was raised."""
    import traceback

    return {
        "trial": to_json_data(asdict(trial)),
        "error": f"{type(err).__name__}: {err}",
        "traceback": "".join(traceback.format_exception(err, limit=-8)),
    }
