"""Compare intervention policies on PolicySim-Rec-v0 over the same seeds.

Non-learned baselines (origin = no intervention, random, popularity, MMR diversity
re-ranking) against contextual bandits that learn online within the episode (LinUCB,
NeuralUCB, EE-Net — the paper's method). Every policy sees the same seeds, hence the same
populations and arm sets at round 0. Prints mean ± 95% CI over seeds and writes a plot of
the reward per round.

    python examples/bandit_comparison.py                      # 1,000 users, 3 seeds, ~1 min
    python examples/bandit_comparison.py --seeds 0 1 2 3 4 --policies origin linucb eenet
    python examples/bandit_comparison.py --smoke
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import gymnasium as gym
import numpy as np

import socialenv  # noqa: F401  (registers the env ids)
from baselines import make_policy, play_episode
from policysim.summary import format_mean_ci, summarize

METRICS = ("reward", "cross_interaction_ratio", "toxicity", "stance_mean", "stance_std")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="bandits vs baselines on PolicySim-Rec-v0")
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["origin", "random", "popularity", "mmr", "linucb", "neural_ucb", "eenet"],
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--candidate-users",
        type=int,
        default=None,
        help="users per round the policy recommends to (default: the env's)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="recommended slots per sampled user (default: the env's)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bandit_comparison"))
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.users, args.rounds, args.seeds = 150, 2, [0]
        args.candidate_users, args.budget = args.candidate_users or 20, args.budget or 2
        args.policies = ["origin", "mmr", "linucb", "eenet"]

    env_kwargs = {"num_users": args.users, "rounds": args.rounds}
    if args.candidate_users is not None:
        env_kwargs["candidate_users"] = args.candidate_users
    if args.budget is not None:
        env_kwargs["budget"] = args.budget
    env = gym.make("PolicySim-Rec-v0", **env_kwargs)
    results: dict[str, list[dict]] = {}
    for name in args.policies:
        rows = []
        for seed in args.seeds:
            policy = make_policy(name, env, seed=seed)  # fresh policy per seed
            rows += [
                {"seed": seed, "episode": 0, **r} for r in play_episode(env, policy, seed * 1000)
            ]
        results[name] = rows
    env.close()

    print(
        f"\n{args.users} users, {args.rounds} rounds, seeds {args.seeds}: mean ± 95% CI over seeds "
        "(reward and interaction/toxicity averaged over rounds, stance at the last round)"
    )
    print(f"{'policy':>12} " + " ".join(f"{m:>22}" for m in METRICS))
    for name, rows in results.items():
        s = summarize(rows, METRICS)
        print(f"{name:>12} " + " ".join(f"{format_mean_ci(s[m]):>22}" for m in METRICS))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in results.items():
        rounds = sorted({r["round"] for r in rows})
        ax.plot(
            rounds,
            [np.mean([r["reward"] for r in rows if r["round"] == t]) for t in rounds],
            marker="o",
            label=name,
        )
    ax.set(
        xlabel="round", ylabel="mean arm reward (Eq. 9)", title="PolicySim-Rec-v0: reward per round"
    )
    ax.legend(fontsize=8)
    args.out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.out / "reward_by_round.png", dpi=120)
    print(f"plot: {args.out / 'reward_by_round.png'}")


if __name__ == "__main__":
    main()
