"""Bursty activity: the default Bernoulli activity model against the opt-in Hawkes model.

    python benchmarks/activity_bursts.py                       # 1,000 users, 30 rounds, 5 seeds
    python benchmarks/activity_bursts.py --rounds 10 --seeds 3 --out runs/bench

No intervention ("Origin"), abortion scenario (news at rounds 0, 4, 7) and misinformation
scenario. Per model and seed it measures, from who was active in each round:

- ``user_autocorr``: lag-1 autocorrelation of each user's 0/1 activity series (pooled over
  users after removing each user's mean; 0 for memoryless activity);
- ``population_autocorr``: lag-1 autocorrelation of the number of active users per round;
- ``population_cv``: coefficient of variation of that number;
- ``burst_mean`` / ``burst_p95`` / ``burst_max``: lengths of runs of consecutive active
  rounds (a burst), over all users;
- ``burstiness``: Goh–Barabási B = (σ − μ)/(σ + μ) of the gaps between a user's active
  rounds (−1 regular, ≈0 memoryless, → 1 bursty), pooled over users with >= 3 gaps;
- and the paper's Origin metrics: cross-stance interaction and toxicity (abortion, mean over
  rounds), misinformation ratio at the last round (paper: 0.04, 0.0556, 40%).

Writes ``<out>/activity_bursts.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from policysim_infra.progress import add_quiet_option, progress_bar
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv

MODELS: dict[str, object] = {
    "bernoulli (default)": None,
    "hawkes (POSIM)": "hawkes",
    "hawkes (notif. only)": {"external_excitation": 0.0},
    "hawkes (news/10, 3x decay)": {"external_excitation": 0.015, "external_decay": 0.03},
}
PAPER = {"cross_interaction_ratio": 0.04, "toxicity": 0.0556, "misinformation_ratio": 0.40}


def activity_matrix(
    env: RecEnv | ExposureEnv, seed: int
) -> tuple[np.ndarray, list[dict[str, float]]]:
    """(rounds, N) bool who acted in each round, and the rounds' metrics (no intervention)."""
    env.reset(seed=seed)
    n = len(env.sim.users.stance)
    rows, metrics = [], []
    for _ in range(env.config.rounds):
        _, _, _, _, info = env.step(np.full(env.slate_size, env.no_op))
        active = np.zeros(n, bool)
        active[env._last_result.active] = True
        rows.append(active)
        metrics.append(info["metrics"])
    return np.stack(rows), metrics


def lag1(x: np.ndarray) -> float:
    x = x - x.mean()
    denom = float((x * x).sum())
    return float((x[1:] * x[:-1]).sum() / denom) if denom > 0 else 0.0


def burst_statistics(active: np.ndarray) -> dict[str, float]:
    """Statistics of a (T, N) activity matrix (see the module docstring)."""
    t, n = active.shape
    centred = active - active.mean(axis=0, keepdims=True)
    num = float((centred[1:] * centred[:-1]).sum())
    den = float((centred * centred).sum()) * (t - 1) / t
    counts = active.sum(axis=1).astype(np.float64)
    padded = np.concatenate([np.zeros((1, n), bool), active, np.zeros((1, n), bool)]).astype(
        np.int8
    )
    edges = np.diff(padded, axis=0)
    starts_t, starts_u = np.nonzero(edges == 1)
    ends_t, ends_u = np.nonzero(edges == -1)
    so, eo = np.lexsort((starts_t, starts_u)), np.lexsort((ends_t, ends_u))
    runs = ends_t[eo] - starts_t[so]
    gaps_b = []
    for u in range(n):
        when = np.flatnonzero(active[:, u])
        if len(when) >= 4:
            gaps_b.append(np.diff(when))
    b_values = []
    for g in gaps_b:
        mu, sigma = g.mean(), g.std()
        b_values.append((sigma - mu) / (sigma + mu))
    return {
        "user_autocorr": num / den if den > 0 else 0.0,
        "population_autocorr": lag1(counts),
        "population_cv": float(counts.std() / max(counts.mean(), 1e-9)),
        "active_share": float(active.mean()),
        "burst_mean": float(runs.mean()) if len(runs) else 0.0,
        "burst_p95": float(np.percentile(runs, 95)) if len(runs) else 0.0,
        "burst_max": float(runs.max()) if len(runs) else 0.0,
        "burstiness": float(np.mean(b_values)) if b_values else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()

    results: dict[str, dict] = {}
    start = time.perf_counter()
    bar = progress_bar(total=len(MODELS) * args.seeds, unit="episode", quiet=args.quiet)
    for name, spec in MODELS.items():
        per_seed = []
        for seed in range(args.seeds):
            bar.set_description(f"{name} seed {seed}")
            bar.update()
            rec_active, rec_metrics = activity_matrix(
                RecEnv(num_users=args.users, rounds=args.rounds, activity=spec), seed
            )
            _, mis_metrics = activity_matrix(
                ExposureEnv(num_users=args.users, rounds=args.rounds, activity=spec), seed
            )
            row = burst_statistics(rec_active)
            row["cross_interaction_ratio"] = float(
                np.mean([m["cross_interaction_ratio"] for m in rec_metrics])
            )
            row["toxicity"] = float(np.mean([m["toxicity"] for m in rec_metrics]))
            row["misinformation_ratio"] = mis_metrics[-1]["misinformation_ratio"]
            row["active_per_round"] = [float(m["active_users"]) for m in rec_metrics]
            per_seed.append(row)
        keys = [k for k in per_seed[0] if k != "active_per_round"]
        summary = {}
        for k in keys:
            v = np.array([r[k] for r in per_seed])
            summary[k] = {
                "mean": float(v.mean()),
                "ci95": float(1.96 * v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0,
            }
        results[name] = {"per_seed": per_seed, "summary": summary}

    keys = [
        "user_autocorr",
        "population_autocorr",
        "population_cv",
        "active_share",
        "burst_mean",
        "burst_p95",
        "burst_max",
        "burstiness",
        "cross_interaction_ratio",
        "toxicity",
        "misinformation_ratio",
    ]
    print(
        f"{args.users} users, {args.rounds} rounds, {args.seeds} seeds, no intervention (mean ± 95% CI)"
    )
    print(f"{'metric':<24}" + "".join(f"{n:>28}" for n in results) + f"{'paper':>8}")
    for k in keys:
        cells = "".join(
            f"{results[n]['summary'][k]['mean']:>18.4f} ± {results[n]['summary'][k]['ci95']:<7.4f}"
            for n in results
        )
        print(f"{k:<24}{cells}{PAPER.get(k, float('nan')):>8.4g}")
    for n in results:
        print(
            f"active users per round, seed 0, {n}: {[int(a) for a in results[n]['per_seed'][0]['active_per_round']]}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "activity_bursts.json"
    path.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "results": results,
                "seconds": time.perf_counter() - start,
            },
            indent=1,
        )
    )
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
