"""A grid sweep with one Weights & Biases run per trial (offline by default, no account).

Reads the grid from ``examples/sweep.yaml`` (W&B sweep format), shrinks it to a laptop size
unless told otherwise, runs every (policy, config, seed) trial in parallel on a local Ray
cluster (``--backend local`` for one process), logs each round of each trial to W&B
(grouped by the sweep name) and prints the table (mean ± 95% CI over seeds).

    python examples/wandb_sweep.py                      # 300 users, 2 seeds, W&B offline
    python examples/wandb_sweep.py --users 1000 --seeds 0 1 2 --wandb online
    python examples/wandb_sweep.py --smoke

The same file is the program of a native W&B sweep: ``wandb sweep examples/sweep.yaml``
then ``wandb agent <id>``; the agent starts this script once per grid point, and it then
runs that single trial inside the agent's W&B run (``WANDB_SWEEP_ID`` is set).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from policysim.sweep import (
    RUN_PARAMETERS,
    SweepConfig,
    Trial,
    load_grid,
    print_table,
    run_sweep,
    run_trial,
)


def run_as_wandb_agent() -> None:
    """One trial from the W&B agent's config (policy, seed, env arguments)."""
    import wandb

    run = wandb.init()
    config = dict(run.config)
    policy, seed = config.pop("policy", "random"), int(config.pop("seed", 0))
    trial = Trial(
        index=0,
        name=run.name or f"{policy}-s{seed}",
        env_id=config.pop("env_id", "PolicySim-Rec-v0"),
        policy=policy,
        seed=seed,
        episodes=int(config.pop("episodes", 1)),
        config_index=0,
        config={},
        env_kwargs={k: v for k, v in config.items() if k not in RUN_PARAMETERS},
        policy_kwargs=dict(config.get("policy_kwargs", {}).get(policy, {})),
    )
    result = run_trial(trial, wandb_run=run)
    print(f"{trial.name}: final reward {result['summary']['reward']['mean']:.3f}")
    run.finish()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="PolicySim grid sweep with W&B logging")
    parser.add_argument("--grid", type=Path, default=Path(__file__).with_name("sweep.yaml"))
    parser.add_argument(
        "--users", type=int, default=300, help="num_users (overrides the grid file)"
    )
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--policies", nargs="+", default=None, help="default: the grid file's")
    parser.add_argument("--backend", choices=["ray", "local"], default="ray")
    parser.add_argument(
        "--address", default=None, help="Ray cluster address (default: start a local one)"
    )
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--wandb", choices=["online", "offline", "disabled"], default="offline")
    parser.add_argument("--project", default="policysim")
    parser.add_argument("--out", type=Path, default=Path("runs/sweeps"))
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args, _ = parser.parse_known_args(argv)  # a W&B agent appends --key=value arguments
    if os.environ.get("WANDB_SWEEP_ID"):
        run_as_wandb_agent()
        return
    grid = load_grid(args.grid)
    if args.smoke:
        args.users, args.rounds, args.seeds, args.backend = 150, 2, [0], "local"
        args.policies = args.policies or ["origin", "linucb"]
    env_kwargs = {**grid.env_kwargs, "num_users": args.users}
    if args.smoke:  # a small lever: 20 sampled users per round
        env_kwargs["candidate_users"] = 20
    if args.rounds is not None:
        env_kwargs["rounds"] = args.rounds
    config = SweepConfig(
        name=grid.name,
        env_id=grid.env_id,
        policies=args.policies or grid.policies,
        seeds=args.seeds,
        episodes=grid.episodes,
        env_kwargs=env_kwargs,
        grid=grid.grid,
        policy_kwargs={
            k: v for k, v in grid.policy_kwargs.items() if k in (args.policies or grid.policies)
        },
        wandb=args.wandb,
        wandb_project=args.project,
        out_dir=str(args.out),
    )
    print(
        f"{len(config.trials())} trials on {args.backend}; W&B {args.wandb} "
        f"(files under {args.out / config.name / 'wandb'})"
    )
    result = run_sweep(config, backend=args.backend, address=args.address, num_cpus=args.num_cpus)
    print_table(
        result,
        title=f"{config.name}: {args.users} users, mean ± 95% CI over seeds {list(args.seeds)}",
    )
    print(f"sweep folder: {result.out_dir}")


if __name__ == "__main__":
    main()
