"""Select / update latency of the bandit policies at PolicySim's context size (D = 800).

For K = 100, 1,000 and 10,000 candidate arms it times ``select`` (K arms, a slate of
``--budget``) and ``update`` (the slate's contexts and rewards) for

- EE-Net, per-arm gradients by the fast factored ``torch.func`` path (the default),
- EE-Net, ``vmap(grad)`` of the full gradient, pooled inside the vmapped function,
- EE-Net, one backward pass per arm (the reference code's way; only K <= --loop-max-arms,
  since at K = 10,000 one select takes tens of seconds),
- NeuralUCB (diagonal) and LinUCB for reference,

each configuration in a fresh subprocess so its peak memory (``ru_maxrss``) is its own.
Reported: the median (and minimum) over ``--repeats`` calls, the peak resident memory above
the worker's baseline, and the speed-up of the fast EE-Net over the per-arm loop measured in
the same run. Writes ``--output`` (default ``runs/benchmarks/bandit_latency.json``, untracked)
and prints a table.

    python benchmarks/bandit_latency.py                 # full run, ~2-4 minutes
    python benchmarks/bandit_latency.py --arms 100 1000 --repeats 3   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "runs" / "benchmarks" / "bandit_latency.json"

# (label, policy name, EE-Net gradient method or None)
CONFIGURATIONS = [
    ("eenet", "eenet", "factored"),
    ("eenet-vmap-full", "eenet", "vmap"),
    ("eenet-per-arm-loop", "eenet", "loop"),
    ("neural_ucb", "neural_ucb", None),
    ("linucb", "linucb", None),
]
TARGET_SELECT_MS_AT_1000 = 50.0
TARGET_SPEEDUP = 10.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=800, help="context dimension D (default 800)")
    parser.add_argument(
        "--arms", type=int, nargs="+", default=[100, 1000, 10_000], help="values of K"
    )
    parser.add_argument("--budget", type=int, default=10, help="arms picked per select")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement")
    parser.add_argument(
        "--loop-repeats", type=int, default=3, help="timed calls for the per-arm loop (slow)"
    )
    parser.add_argument(
        "--loop-max-arms", type=int, default=1000, help="largest K for the per-arm loop"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for torch, OpenMP and NumPy's BLAS in the workers (default: libraries' "
        "own, i.e. all cores); 1 is steadier on a shared machine",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON result path")
    parser.add_argument("--worker", type=str, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress (there is no bar when the output is not a terminal either)",
    )
    return parser.parse_args(argv)


def current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one (policy, K) configuration in this process; returns the measurements."""
    import numpy as np
    import torch

    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from bandits import make_policy

    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    dim, n_arms, budget = spec["dim"], spec["arms"], spec["budget"]
    kwargs = {} if spec["method"] is None else {"gradient_method": spec["method"]}
    policy = make_policy(spec["policy"], dim, seed=0, **kwargs)
    rng = np.random.default_rng(0)
    contexts = (rng.standard_normal((n_arms, dim)) / np.sqrt(dim)).astype(np.float32)
    warm = (rng.standard_normal((256, dim)) / np.sqrt(dim)).astype(np.float32)
    policy.update(warm, rng.uniform(size=256))  # non-empty replay buffers and models
    baseline_mb = current_rss_mb()

    select_s, update_s = [], []
    for call in range(spec["repeats"] + 1):  # the first call is a warm-up
        start = time.perf_counter()
        chosen = policy.select(contexts, None, budget)
        selected = time.perf_counter()
        policy.update(contexts[chosen], rng.uniform(size=budget))
        updated = time.perf_counter()
        if call:
            select_s.append(selected - start)
            update_s.append(updated - selected)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "select_ms": 1e3 * statistics.median(select_s),
        "select_min_ms": 1e3 * min(select_s),
        "update_ms": 1e3 * statistics.median(update_s),
        "update_min_ms": 1e3 * min(update_s),
        "baseline_rss_mb": baseline_mb,
        "peak_rss_mb": peak_mb,
        "peak_above_baseline_mb": max(0.0, peak_mb - baseline_mb),
        "torch_threads": torch.get_num_threads(),
    }


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    if spec["threads"] is not None:  # NumPy's BLAS (LinUCB) and OpenMP pools as well
        for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[variable] = str(spec["threads"])
    completed = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"worker {spec} failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def format_table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'policy':<20} {'K':>6} {'select ms':>10} {'(min)':>8} {'update ms':>10} "
        f"{'peak MB':>8} {'loop/fast':>10}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        if row.get("skipped"):
            lines.append(f"{row['label']:<20} {row['arms']:>6} {'skipped: ' + row['skipped']}")
            continue
        speedup = row.get("speedup_over_loop")
        lines.append(
            f"{row['label']:<20} {row['arms']:>6} {row['select_ms']:>10.1f} "
            f"{row['select_min_ms']:>8.1f} {row['update_ms']:>10.1f} "
            f"{row['peak_above_baseline_mb']:>8.0f} "
            f"{(f'{speedup:.0f}x' if speedup else ''):>10}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return {}

    import torch

    load_before = os.getloadavg()
    from policysim_infra.progress import progress_bar

    rows: list[dict[str, Any]] = []
    bar = progress_bar(
        total=len(CONFIGURATIONS) * len(args.arms), unit="measurement", quiet=args.quiet
    )
    for label, policy, method in CONFIGURATIONS:
        for n_arms in args.arms:
            bar.set_description(f"{label} K={n_arms}")
            bar.update()
            row: dict[str, Any] = {
                "label": label,
                "policy": policy,
                "method": method,
                "arms": n_arms,
            }
            if method == "loop" and n_arms > args.loop_max_arms:
                row["skipped"] = f"per-arm loop above --loop-max-arms={args.loop_max_arms}"
                rows.append(row)
                continue
            spec = {
                "policy": policy,
                "method": method,
                "dim": args.dim,
                "arms": n_arms,
                "budget": args.budget,
                "threads": args.threads,
                "repeats": args.loop_repeats if method == "loop" else args.repeats,
            }
            row.update(measure(spec))
            rows.append(row)
            if not args.quiet:
                bar.write(
                    f"  measured {label} K={n_arms}: select {row['select_ms']:.1f} ms",
                    file=sys.stderr,
                )

    fast = {r["arms"]: r for r in rows if r["label"] == "eenet" and not r.get("skipped")}
    for row in rows:
        if row.get("skipped") or row["label"] != "eenet-per-arm-loop":
            continue
        row["speedup_over_loop"] = None
        fast[row["arms"]]["speedup_over_loop"] = row["select_ms"] / fast[row["arms"]]["select_ms"]

    targets: dict[str, Any] = {}
    if 1000 in fast:
        targets["eenet_select_ms_at_K1000"] = {
            "measured": fast[1000]["select_ms"],
            "target": TARGET_SELECT_MS_AT_1000,
            "met": fast[1000]["select_ms"] <= TARGET_SELECT_MS_AT_1000,
        }
    speedups = {k: r["speedup_over_loop"] for k, r in fast.items() if r.get("speedup_over_loop")}
    if speedups:
        targets["eenet_speedup_over_per_arm_loop"] = {
            "measured": speedups,
            "target": TARGET_SPEEDUP,
            "met": min(speedups.values()) >= TARGET_SPEEDUP,
        }
    result = {
        "benchmark": "bandit_latency",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k != "worker"
        },
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "rows": rows,
        "targets": targets,
        "notes": [
            "select: K arms -> slate of `budget`; update: that slate's contexts and rewards "
            "(EE-Net/NeuralUCB update includes gradient features plus train_steps Adam steps "
            "per network).",
            "peak MB: ru_maxrss of the worker minus its resident memory before the first "
            "select (includes the warm-up call).",
            "The machine may be shared; load averages before/after are recorded.",
        ],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(
        f"D={args.dim}, budget={args.budget}, median of {args.repeats} calls "
        f"({args.loop_repeats} for the per-arm loop), torch threads="
        f"{rows[0].get('torch_threads', '?')}, load average {load_before[0]:.1f}"
    )
    print(format_table(rows))
    for name, target in targets.items():
        print(
            f"target {name}: measured {target['measured']}, target {target['target']}, "
            f"{'met' if target['met'] else 'MISSED'}"
        )
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
