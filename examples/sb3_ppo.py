"""PPO (Stable-Baselines3) on PolicySim-Rec-v0 against random and the bandits.

PPO with ``MultiInputPolicy`` sees the Dict observation (K arm contexts, action mask) and
outputs the slate (``MultiDiscrete``); it learns across episodes. The bandits learn online
from each arm's reward. Everyone is evaluated on the same held-out seeds:

- ppo: the trained policy, deterministic, frozen;
- random, origin: no learning;
- <bandit>: a fresh bandit per evaluation seed, learning within the 10-round episode
  (the paper's protocol);
- <bandit>-warm: the bandit after its learning-curve episodes, still learning.

The env's lever is sized for PPO (``baselines.sb3.PPO_ENV_KWARGS``: the policy recommends to
20 sampled users per round, 2 slots each; ``--candidate-users`` / ``--budget`` change it):
PPO's MultiDiscrete head has one (K + 1)-way categorical per slate slot, which at the env
defaults at 1,000 users (room for 57 users × 5 slots, K = 456) is 130,245 logits.

Writes a learning-curve PNG (mean step reward per episode vs env steps) and a JSON.

    python examples/sb3_ppo.py                      # 2k PPO steps, ~1-2 min on 2 CPU cores
    python examples/sb3_ppo.py --benchmark          # 50k steps -> benchmarks/results/sb3_ppo.{json,png}
    python examples/sb3_ppo.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import socialenv  # noqa: F401  (registers the env ids)
from baselines import make_policy, play_episode
from baselines.sb3 import DEFAULT_PPO_KWARGS, PPO_ENV_KWARGS, SB3Actor, smooth_curve, train_ppo
from policysim.summary import format_mean_ci, summarize

METRICS = ("reward", "cross_interaction_ratio", "toxicity", "recommended_reaction_rate")


def online_curve(env: gym.Env, policy, episodes: int, seed: int) -> list[tuple[int, float]]:
    """(env steps so far, mean step reward) per episode of one policy learning across episodes."""
    curve, steps = [], 0
    for episode in range(episodes):
        rows = play_episode(env, policy, seed if episode == 0 else None)
        steps += len(rows)
        curve.append((steps, float(np.mean([r["reward"] for r in rows]))))
    return curve


def plot_curves(curves: dict[str, list[tuple[int, float]]], path: Path, title: str) -> None:
    """Learning curves (moving averages over episodes) vs env steps, log x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, curve in curves.items():
        window = max(1, len(curve) // 50) if name == "ppo" else 5
        steps, smooth = smooth_curve(curve, window=window)
        label = (
            f"{name} (training, mean of {window} episodes)"
            if name == "ppo"
            else f"{name} (online, mean of {window} episodes)"
        )
        ax.plot(steps, smooth, label=label)
    ax.set(
        xscale="log",
        xlabel="env steps (platform rounds)",
        ylabel="mean step reward per episode",
        title=title,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SB3 PPO vs bandits on PolicySim-Rec-v0")
    parser.add_argument("--timesteps", type=int, default=2048, help="PPO training env steps")
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--candidate-users",
        type=int,
        default=PPO_ENV_KWARGS["candidate_users"],
        help="users per round the policy recommends to",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=PPO_ENV_KWARGS["budget"],
        help="recommended slots per sampled user",
    )
    parser.add_argument("--bandits", nargs="+", default=["linucb", "eenet"])
    parser.add_argument(
        "--bandit-episodes", type=int, default=5, help="episodes of each bandit's learning curve"
    )
    parser.add_argument("--eval-seeds", nargs="+", type=int, default=[100, 101, 102])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_ppo"))
    parser.add_argument("--benchmark", action="store_true", help="the BENCHMARKS.md run (long)")
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args = parser.parse_args(argv)
    if args.benchmark:
        args.timesteps, args.bandit_episodes = 50_000, 30
        # published figures go to the clone's benchmarks/results
        args.eval_seeds, args.out = (
            [100, 101, 102, 103, 104],
            Path(__file__).resolve().parents[1] / "benchmarks" / "results",
        )
    ppo_kwargs = {}
    if args.smoke:
        args.timesteps, args.n_envs, args.users, args.rounds = 64, 1, 150, 2
        args.candidate_users, args.budget = 8, 1
        args.bandits, args.bandit_episodes, args.eval_seeds = ["linucb"], 2, [100]
        ppo_kwargs = {"n_steps": 32, "batch_size": 32, "n_epochs": 1}

    import torch

    torch.set_num_threads(args.threads)
    env_kwargs = {
        "num_users": args.users,
        "rounds": args.rounds,
        "candidate_users": args.candidate_users,
        "budget": args.budget,
    }
    print(
        f"training PPO for {args.timesteps} steps on {args.n_envs} envs ({args.users} users, "
        f"{args.candidate_users} sampled users x {args.budget} slots)..."
    )
    trained = train_ppo(
        env_kwargs=env_kwargs,
        total_timesteps=args.timesteps,
        seed=args.seed,
        n_envs=args.n_envs,
        ppo_kwargs=ppo_kwargs,
    )
    print(f"  {trained.seconds:.0f} s, {len(trained.curve)} episodes")

    env = gym.make("PolicySim-Rec-v0", **env_kwargs)
    curves = {"ppo": trained.curve}
    warm = {}
    for name in ["random", *args.bandits]:
        start = time.perf_counter()
        warm[name] = make_policy(name, env, seed=args.seed)
        curves[name] = online_curve(env, warm[name], args.bandit_episodes, seed=args.seed)
        print(
            f"  {name}: {args.bandit_episodes} learning-curve episodes in {time.perf_counter() - start:.0f} s"
        )

    contenders = {
        "origin": lambda s: make_policy("origin", env, seed=s),
        "random": lambda s: make_policy("random", env, seed=s),
        "ppo": lambda s: SB3Actor(trained.model),
    }
    for name in args.bandits:
        contenders[name] = lambda s, name=name: make_policy(name, env, seed=s)
        contenders[f"{name}-warm"] = lambda s, name=name: warm[name]
    table = {}
    for name, build in contenders.items():
        rows = [
            {"seed": s, "episode": 0, **r}
            for s in args.eval_seeds
            for r in play_episode(env, build(s), s)
        ]
        table[name] = summarize(rows, METRICS)
    env.close()

    print(f"\nheld-out seeds {args.eval_seeds}: mean ± 95% CI over seeds (per-round means)")
    print(f"{'policy':>14} " + " ".join(f"{m[:20]:>21}" for m in METRICS))
    for name, s in table.items():
        print(f"{name:>14} " + " ".join(f"{format_mean_ci(s[m]):>21}" for m in METRICS))

    args.out.mkdir(parents=True, exist_ok=True)
    plot_curves(curves, args.out / "sb3_ppo.png", f"PolicySim-Rec-v0, {args.users} users")
    payload = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "ppo_kwargs": {**DEFAULT_PPO_KWARGS, **ppo_kwargs},
        "ppo_train_seconds": trained.seconds,
        "curves": curves,
        "eval": table,
    }
    (args.out / "sb3_ppo.json").write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out / 'sb3_ppo.png'} and {args.out / 'sb3_ppo.json'}")


if __name__ == "__main__":
    main()
