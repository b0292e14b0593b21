"""Per-arm PPO (Stable-Baselines3, :mod:`baselines.per_arm`) against random and the bandits,
on held-out seeds, in both envs.

    python benchmarks/per_arm_ppo.py                                   # both envs, 20k steps each
    python benchmarks/per_arm_ppo.py --out benchmarks/results/per_arm_ppo   # publish
    python benchmarks/per_arm_ppo.py --env rec --rec-step slots       # Rec trained on the slot reward
    python benchmarks/per_arm_ppo.py --smoke

For each env: trains PPO with :class:`baselines.per_arm.PerArmPolicy` for ``--timesteps``
env steps (training envs seeded ``0..n_envs-1``; their later episodes draw seeds from those
streams), evaluates the frozen deterministic policy every ``--eval-every`` steps on the
held-out evaluation seeds (``--eval-seeds``, episode seed ``seed * 1000`` as in
:func:`baselines.compare.evaluate`), then plays origin, random, LinUCB and EE-Net (fresh per
seed, learning online within the episode, the paper's protocol) on the same seeds and
reports PPO − random paired by seed (mean ± 95% CI). Writes ``per_arm_ppo.json`` and one
learning-curve PNG per env (held-out reward of PPO vs env steps, with the levels of random,
LinUCB and EE-Net on the same seeds) to ``--out`` (default ``runs/benchmarks``, untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.progress import add_quiet_option, show_progress

ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "rec": ("PolicySim-Rec-v0", {"num_users": 300}),
    "exposure": ("PolicySim-Exposure-v0", {"num_users": 300}),
}
REFERENCES = ("origin", "random", "linucb", "eenet")


def evaluate_model(
    model: Any, env_id: str, env_kwargs: dict[str, Any], seeds: list[int]
) -> list[dict[str, float]]:
    """One :func:`baselines.compare.episode_summary` per seed for the frozen, deterministic model."""
    import gymnasium as gym

    from baselines.compare import episode_summary
    from baselines.per_arm import PerArmActor
    from socialenv.envs.episodes import play_episode

    out = []
    for seed in seeds:
        env = gym.make(env_id, **env_kwargs)
        out.append(
            episode_summary(play_episode(env, PerArmActor(model, env), seed * 1000, learn=False))
        )
        env.close()
    return out


def held_out_callback(
    env_id: str,
    env_kwargs: dict[str, Any],
    seeds: list[int],
    every: int,
    curve: list[tuple[int, float]],
) -> Any:
    """SB3 callback: every ``every`` env steps, the mean held-out reward of the current policy."""
    from stable_baselines3.common.callbacks import BaseCallback

    class HeldOut(BaseCallback):
        def _on_training_start(self) -> None:
            self._next = 0

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self._next:
                rows = evaluate_model(self.model, env_id, env_kwargs, seeds)
                curve.append((int(self.num_timesteps), float(np.mean([r["reward"] for r in rows]))))
                self._next = self.num_timesteps + every

        def _on_step(self) -> bool:
            return True

    return HeldOut()


def plot(
    path: Path,
    title: str,
    curve: list[tuple[int, float]],
    train_curve: list[tuple[int, float]],
    reference: dict[str, dict[str, float]],
    final: tuple[int, dict[str, float]],
) -> None:
    """PPO's held-out reward vs env steps, its training episodes (moving average) and the
    references' held-out levels (mean ± 95% CI bands)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from baselines.sb3 import smooth_curve

    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps, values = smooth_curve(train_curve, window=20)
    ax.plot(steps, values, color="tab:blue", alpha=0.35, label="PPO, training episodes (avg of 20)")
    xs = [c[0] for c in curve] + [final[0]]
    ys = [c[1] for c in curve] + [final[1]["mean"]]
    ax.plot(xs, ys, "o-", color="tab:blue", label="PPO, held-out seeds (deterministic)")
    ax.errorbar(
        [final[0]], [final[1]["mean"]], yerr=[final[1]["ci95"]], color="tab:blue", capsize=4
    )
    colors = {"random": "gray", "linucb": "tab:orange", "eenet": "tab:green", "origin": "black"}
    for name, level in reference.items():
        color = colors.get(name, "tab:red")
        ax.axhline(level["mean"], color=color, ls="--", lw=1, label=f"{name} (held-out)")
        ax.axhspan(
            level["mean"] - level["ci95"], level["mean"] + level["ci95"], color=color, alpha=0.1
        )
    ax.set_xlabel("env steps (platform rounds) of PPO training")
    ax.set_ylabel("mean step reward per episode")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_env(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from baselines.compare import evaluate, levels, mean_ci95, paired_deltas
    from baselines.per_arm import PER_ARM_PPO_KWARGS, train_per_arm_ppo

    env_id, env_kwargs = ENVS[name]
    env_kwargs = {
        **env_kwargs,
        "num_users": args.users or env_kwargs["num_users"],
        "rounds": args.rounds,
    }
    if args.smoke:
        env_kwargs.update(
            num_users=120, **({"candidate_users": 8} if name == "rec" else {"exposure_users": 16})
        )
    if name == "rec" and args.rec_step != "objective":
        env_kwargs["reward"] = {"step": args.rec_step}
    seeds = list(range(args.eval_seeds[0], args.eval_seeds[0] + args.eval_seeds[1]))
    curve: list[tuple[int, float]] = []
    ppo_kwargs = {"n_steps": 16, "batch_size": 32} if args.smoke else {}
    for item in args.ppo:
        key, _, value = item.partition("=")
        ppo_kwargs[key] = None if value == "None" else type(PER_ARM_PPO_KWARGS.get(key, 0.0))(value)
    callback = held_out_callback(env_id, env_kwargs, seeds, args.eval_every, curve)
    if show_progress(args.quiet):
        from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback

        callback = CallbackList([callback, ProgressBarCallback()])
    result = train_per_arm_ppo(
        env_id,
        env_kwargs,
        total_timesteps=args.timesteps,
        seed=args.seed,
        n_envs=args.n_envs,
        ppo_kwargs=ppo_kwargs,
        callback=callback,
    )
    print(
        f"{name}: trained {result.model.num_timesteps} steps in {result.seconds:.0f} s", flush=True
    )
    results = {
        "ppo": evaluate_model(result.model, env_id, env_kwargs, seeds),
        **evaluate(env_id, REFERENCES, seeds, env_kwargs),
    }
    delta = paired_deltas(results, "random")
    level = levels(results)
    report = {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "eval_seeds": seeds,
        "ppo_kwargs": {**PER_ARM_PPO_KWARGS, **ppo_kwargs},
        "n_envs": args.n_envs,
        "timesteps": int(result.model.num_timesteps),
        "train_seconds": result.seconds,
        "held_out_curve": curve,
        "train_curve": result.curve,
        "levels": level,
        "delta_vs_random": delta,
        "ppo_minus_random_reward": mean_ci95(
            [
                p["reward"] - r["reward"]
                for p, r in zip(results["ppo"], results["random"], strict=True)
            ]
        ),
        "per_seed_reward": {k: [r["reward"] for r in v] for k, v in results.items()},
    }
    d = report["ppo_minus_random_reward"]
    print(
        f"{name}: reward "
        + ", ".join(
            f"{k} {v['reward']['mean']:.4f}±{v['reward']['ci95']:.4f}" for k, v in level.items()
        ),
        flush=True,
    )
    print(
        f"{name}: ppo - random = {d['mean']:+.4f} ± {d['ci95']:.4f} (paired, {len(seeds)} held-out seeds)",
        flush=True,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    plot(
        args.out / f"per_arm_ppo_{name}{step_suffix(name, args)}.png",
        f"{env_id}: per-arm PPO ({env_kwargs['num_users']} users, {len(seeds)} held-out seeds)",
        curve,
        result.curve,
        {k: level[k]["reward"] for k in ("random", "linucb", "eenet")},
        (int(result.model.num_timesteps), level["ppo"]["reward"]),
    )
    return report


def step_suffix(name: str, args: argparse.Namespace) -> str:
    """``_slots`` for Rec trained on ``reward={"step": "slots"}``, else nothing."""
    return f"_{args.rec_step}" if name == "rec" and args.rec_step != "objective" else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=[*ENVS, "both"], default="both")
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument(
        "--eval-seeds", type=int, nargs=2, default=(100, 8), metavar=("FIRST", "COUNT")
    )
    parser.add_argument("--users", type=int, default=None, help="num_users (default: 300)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--ppo",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="PPO overrides of baselines.per_arm.PER_ARM_PPO_KWARGS, e.g. learning_rate=3e-3",
    )
    parser.add_argument(
        "--rec-step",
        choices=("objective", "slots"),
        default="objective",
        help="Rec's step reward (reward.step): the objective (default) or the arms' ΣΔ per "
        "governed user; 'slots' adds _slots to the file names",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny envs, a few hundred steps")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.timesteps, args.eval_every, args.eval_seeds, args.rounds, args.n_envs = (
            128,
            64,
            (100, 2),
            2,
            2,
        )
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    names = list(ENVS) if args.env == "both" else [args.env]
    report = {
        "command": "python benchmarks/per_arm_ppo.py " + " ".join(os.sys.argv[1:]),
        "envs": {name: run_env(name, args) for name in names},
    }
    report["seconds"] = time.perf_counter() - start
    path = args.out / "per_arm_ppo.json"
    if len(names) == 1:
        path = args.out / f"per_arm_ppo_{names[0]}{step_suffix(names[0], args)}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path} ({report['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
