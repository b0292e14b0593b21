"""Identifiability of `policysim fit` on known ground truth, its CPU time, and the trace
storage formats.

For each size (users × rounds) and each of ``--draws`` random surrogates
(:data:`socialenv.fitting.ground_truth.DRAW_RANGES`, draw d uses ``default_rng(1000 + d)``), one
episode of PolicySim-Rec-v0 on the misinformation scenario with a random policy filling the
slots of ``candidate_users = users // 10`` users (so the policy's channel is observed beside
the built-in one) is recorded and fitted. Reported per parameter: coverage of the 95% Wald
interval (estimate ± 1.96·SE), mean and max absolute error, z-score mean / sd; the opinion
rates (deterministic given the reactions) are checked to 1e-3 and the thresholds' intervals
for containing the truth. Fit CPU seconds (one thread) per size. With ``--formats`` it also
writes one 1,000-user × 30-round trace as Parquet and as .npz and times loading each.

    OMP_NUM_THREADS=1 python benchmarks/fit.py --out benchmarks/results/fit --draws 20 --formats --held-out

Writes ``draws.jsonl`` (one line per fit, appended as they finish) and ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from policysim_infra.progress import add_quiet_option, progress_bar

#: |estimate − truth| allowed at 1,000 users × 30 rounds (stochastic parameters).
TOLERANCE = {
    "like_bias": 0.2,
    "dislike_bias": 0.2,
    "retweet_bias": 0.2,
    "reply_bias": 0.2,
    "interest_weight": 0.2,
    "agreement_weight": 0.2,
    "retweet_agreement_weight": 0.3,
    "reply_gap_weight": 0.3,
    "recommended_attention": 0.2,
    "promoted_attention": 0.2,
    "post_rate": 0.03,
    "stance_noise": 0.01,
    "reply_toxicity_base": 0.05,
    "reply_toxicity_gap": 0.5,
    "civility_threshold": 0.03,
    "post_toxicity_scale": 0.02,
    "follow_prob": 0.02,
    "unfollow_prob": 0.05,
    "misinfo_recovery": 0.03,
    "misinfo_adoption": 0.3,
    "misinfo_steepness": 2.0,
    "misinfo_threshold": 0.8,
    "misinfo_post_share": 0.1,
}
DETERMINISTIC_TOLERANCE = 1e-3


def one_fit(users: int, rounds: int, draw: int) -> dict:
    from socialenv.fitting.ground_truth import random_surrogate, synthetic_trace
    from socialenv.fitting.likelihood import fit_trace

    config = random_surrogate(np.random.default_rng(1000 + draw))
    began = time.process_time()
    trace = synthetic_trace(
        config, users, rounds, seed=draw, env_kwargs={"candidate_users": max(users // 10, 10)}
    )
    simulate = time.process_time() - began
    result = fit_trace(trace, seed=draw)
    truth = asdict(config)
    return {
        "users": users,
        "rounds": rounds,
        "draw": draw,
        "simulate_cpu_s": simulate,
        "fit_cpu_s": result.cpu_seconds,
        "rows": trace.meta["tables"],
        "parameters": {k: {**e.to_json(), "truth": truth[k]} for k, e in result.estimates.items()},
    }


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for size in sorted({(r["users"], r["rounds"]) for r in rows}):
        group = [r for r in rows if (r["users"], r["rounds"]) == size]
        params: dict = {}
        for name in group[0]["parameters"]:
            entries = [r["parameters"][name] for r in group]
            fitted = [e for e in entries if e["status"] == "fitted" and e["se"]]
            entry: dict = {"statuses": sorted({e["status"] for e in entries})}
            if fitted:
                err = np.array([e["value"] - e["truth"] for e in fitted])
                z = err / np.array([e["se"] for e in fitted])
                entry.update(
                    {
                        "draws_fitted": len(fitted),
                        "coverage95": float(np.mean(np.abs(z) <= 1.96)),
                        "z_mean": float(z.mean()),
                        "z_sd": float(z.std(ddof=1)) if len(z) > 1 else None,
                        "mean_abs_error": float(np.abs(err).mean()),
                        "max_abs_error": float(np.abs(err).max()),
                        "mean_se": float(np.mean([e["se"] for e in fitted])),
                    }
                )
                if name in TOLERANCE:
                    entry["tolerance"] = TOLERANCE[name]
                    entry["within_tolerance"] = float(np.mean(np.abs(err) <= TOLERANCE[name]))
            deterministic = [e for e in entries if e["status"] == "deterministic"]
            if deterministic:
                err = np.array([abs(e["value"] - e["truth"]) for e in deterministic])
                entry.update(
                    {
                        "draws_deterministic": len(deterministic),
                        "max_abs_error": float(err.max()),
                        "within_tolerance": float(np.mean(err <= DETERMINISTIC_TOLERANCE)),
                        "tolerance": DETERMINISTIC_TOLERANCE,
                    }
                )
            intervals = [e for e in entries if e["status"] in ("interval", "boundary")]
            if intervals:
                inside = [
                    e["interval"][0] - 1e-9 <= e["truth"] <= e["interval"][1] + 1e-9
                    for e in intervals
                ]
                entry.update(
                    {
                        "interval_contains_truth": float(np.mean(inside)),
                        "mean_interval_width": float(
                            np.mean([e["interval"][1] - e["interval"][0] for e in intervals])
                        ),
                    }
                )
            params[name] = entry
        stochastic = [p for p in params.values() if "coverage95" in p]
        pooled = [r["parameters"][n] for r in group for n, p in params.items() if "coverage95" in p]
        pooled = [e for e in pooled if e["status"] == "fitted" and e["se"]]
        out[f"{size[0]}x{size[1]}"] = {
            "draws": len(group),
            "fit_cpu_s": {
                "median": float(np.median([r["fit_cpu_s"] for r in group])),
                "max": float(np.max([r["fit_cpu_s"] for r in group])),
            },
            "simulate_cpu_s_median": float(np.median([r["simulate_cpu_s"] for r in group])),
            "pooled_coverage95": float(
                np.mean([abs(e["value"] - e["truth"]) <= 1.96 * e["se"] for e in pooled])
            ),
            "stochastic_parameters": len(stochastic),
            "parameters": params,
        }
    return out


def formats(folder: Path) -> dict:
    """Write one 1,000 × 30 trace in both storages; sizes and load CPU times (median of 5)."""
    from socialenv.fitting.ground_truth import random_surrogate, synthetic_trace
    from socialenv.fitting.trace import load_trace, write_trace

    trace = synthetic_trace(
        random_surrogate(np.random.default_rng(1000)),
        1000,
        30,
        seed=0,
        env_kwargs={"candidate_users": 100},
    )
    report = {}
    for storage in ("parquet", "npz"):
        path = folder / f"format_probe.{storage}.trace"
        began = time.process_time()
        write_trace(trace, path, storage)
        write_s = time.process_time() - began
        loads = []
        for _ in range(5):
            began = time.process_time()
            load_trace(path)
            loads.append(time.process_time() - began)
        report[storage] = {
            "bytes": sum(f.stat().st_size for f in path.iterdir()),
            "write_cpu_s": write_s,
            "load_cpu_s_median": float(np.median(loads)),
        }
        for file in path.iterdir():
            file.unlink()
        path.rmdir()
    report["rows"] = trace.meta["tables"]
    return report


def held_out_draw(users: int, rounds: int, draw: int = 0) -> dict:
    """Held-out log-likelihood and action-mix JSD of the fitted, default and null models on a
    trace of draw ``draw`` (parameters away from the defaults)."""
    from socialenv.fitting.ground_truth import random_surrogate, synthetic_trace
    from socialenv.fitting.held_out import held_out

    trace = synthetic_trace(
        random_surrogate(np.random.default_rng(1000 + draw)),
        users,
        rounds,
        seed=draw,
        env_kwargs={"candidate_users": max(users // 10, 10)},
    )
    report = held_out(trace, seed=0)
    return {
        "num_users": users,
        "num_rounds": rounds,
        "draw": draw,
        **{
            f"split_{split}": {k: v for k, v in report[split].items() if k != "observed_mix"}
            for split in ("users", "rounds")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="results folder")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument(
        "--sizes", default="300x10,300x30,1000x10,1000x30", help="users x rounds, comma-separated"
    )
    parser.add_argument("--formats", action="store_true", help="also compare Parquet and .npz")
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="also the held-out validation (user and round splits) of draw 0 at the largest size",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(1)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    lines = args.out / "draws.jsonl"
    rows = [json.loads(line) for line in lines.read_text().splitlines()] if lines.exists() else []
    done = {(r["users"], r["rounds"], r["draw"]) for r in rows}
    todo = [
        (draw, users, rounds)
        for draw in range(args.draws)
        for users, rounds in sizes
        if (users, rounds, draw) not in done
    ]
    for draw, users, rounds in progress_bar(todo, unit="fit", quiet=args.quiet):
        row = one_fit(users, rounds, draw)
        rows.append(row)
        with lines.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{users}x{rounds} draw {draw}: fit {row['fit_cpu_s']:.1f} s CPU", flush=True)
    summary = {
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python benchmarks/fit.py "
        f"--out {args.out} --draws {args.draws} --sizes {args.sizes}"
        + (" --formats" if args.formats else "")
        + (" --held-out" if args.held_out else ""),
        "sizes": summarize(
            [r for r in rows if (r["users"], r["rounds"]) in sizes and r["draw"] < args.draws]
        ),
    }
    if args.formats:
        summary["formats"] = formats(args.out)
    if args.held_out:
        summary["held_out"] = held_out_draw(*max(sizes))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    for size, entry in summary["sizes"].items():
        print(
            f"{size}: pooled coverage {entry['pooled_coverage95']:.3f}, fit CPU median {entry['fit_cpu_s']['median']:.1f} s "
            f"(max {entry['fit_cpu_s']['max']:.1f} s)"
        )


if __name__ == "__main__":
    main()
