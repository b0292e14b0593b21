"""Calibration of the surrogate population against the paper's Origin row and Fig. 3.

    python benchmarks/calibration.py                 # 1,000 users, 10 rounds, 5 seeds

Runs the no-intervention platform ("Origin": every slot of the slate empty) and prints, per
seed: the cross-stance interaction ratio and toxicity (averaged over the rounds) on the
abortion scenario and the misinformation ratio at the last round of the misinformation
scenario, next to the paper's 0.04 / 0.0556 / 40%. Then the macro dynamics of Fig. 3 on the
abortion scenario (news at rounds 0, 4, 7): stance mean and std per round, with the
personalized recommender on (5 posts) and off. Writes ``benchmarks/results/calibration.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv

RESULTS = Path(__file__).parent / "results" / "calibration.json"
PAPER_ORIGIN = {"cross_interaction_ratio": 0.04, "toxicity": 0.0556, "misinformation_ratio": 0.40,
                "stance_mean": 0.014, "stance_std": 0.47}


def origin_episode(env: RecEnv | ExposureEnv, seed: int) -> list[dict[str, float]]:
    env.reset(seed=seed)
    start = {"stance_mean": float(env.sim.users.stance.mean()),
             "stance_std": float(env.sim.users.stance.std())}
    rows = [start]
    for _ in range(env.config.rounds):
        _, _, _, _, info = env.step(np.full(env.config.budget, env.no_op))
        rows.append(info["metrics"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    per_seed = []
    print(f"Origin, {args.users} users, {args.rounds} rounds "
          f"(paper: cross {PAPER_ORIGIN['cross_interaction_ratio']}, toxicity "
          f"{PAPER_ORIGIN['toxicity']}, misinformation {PAPER_ORIGIN['misinformation_ratio']:.0%})")
    print(f"{'seed':>4} {'cross':>7} {'toxicity':>9} {'stance':>15} {'misinformed':>12}")
    for seed in range(args.seeds):
        rec = origin_episode(RecEnv(num_users=args.users, rounds=args.rounds), seed)[1:]
        mis = origin_episode(ExposureEnv(num_users=args.users, rounds=args.rounds), seed)[1:]
        row = {
            "seed": seed,
            "cross_interaction_ratio": float(np.mean([r["cross_interaction_ratio"] for r in rec])),
            "toxicity": float(np.mean([r["toxicity"] for r in rec])),
            "stance_mean": rec[-1]["stance_mean"],
            "stance_std": rec[-1]["stance_std"],
            "misinformation_ratio": mis[-1]["misinformation_ratio"],
        }
        per_seed.append(row)
        print(f"{seed:>4} {row['cross_interaction_ratio']:7.3f} {row['toxicity']:9.4f} "
              f"{row['stance_mean']:+7.3f} ± {row['stance_std']:.3f} {row['misinformation_ratio']:12.1%}")
    means = {k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0] if k != "seed"}
    print(f"mean {means['cross_interaction_ratio']:7.3f} {means['toxicity']:9.4f} "
          f"{means['stance_mean']:+7.3f} ± {means['stance_std']:.3f} {means['misinformation_ratio']:12.1%}")

    macro = {}
    for personalized in (5, 0):
        paths = [origin_episode(RecEnv(num_users=args.users, rounds=args.rounds,
                                       recommender={"personalized": personalized}), seed)
                 for seed in range(args.seeds)]
        macro[f"personalized_{personalized}"] = {
            key: np.mean([[r[key] for r in path] for path in paths], axis=0).round(4).tolist()
            for key in ("stance_mean", "stance_std")
        }
    print("\nFig. 3 dynamics (abortion, news at rounds 0, 4, 7; column t = after round t-1):")
    for name, series in macro.items():
        for key, values in series.items():
            print(f"{name:>15} {key:>11}: " + " ".join(f"{v:+.3f}" for v in values))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": {k: str(v) for k, v in vars(args).items()},
                                    "paper_origin": PAPER_ORIGIN, "per_seed": per_seed,
                                    "mean": means, "macro": macro}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
