"""Benchmark Gymnasium vector envs: one env vs ``make_vec`` sync vs async.

Measures environment steps per second (platform rounds per second, summed over the
sub-envs; the time of episode resets included, reset steps not counted; random slates) of

- ``single``: one ``gym.make("PolicySim-Rec-v0")`` stepped in a loop,
- ``sync``: ``gym.make_vec(..., num_envs=N, vectorization_mode="sync")`` (one process),
- ``async``: ``gym.make_vec(..., num_envs=N, vectorization_mode="async")`` (one process per env),
- ``native``: ``gym.make_vec(..., num_envs=N, vectorization_mode="vector_entry_point")``
  (:mod:`socialenv.envs.vector`, one process),
- ``native-wW`` (with ``--workers W``): the same with ``workers=W``, its sub-envs on W
  processes (:mod:`socialenv.envs.vector_workers`). Its CPU time is in the workers, so it is
  compared with ``native`` on wall time (``workers_over_native``): the figure of the issue's
  "native vector env on W cores vs one core", which needs W idle cores to mean anything.

Modes are measured in interleaved repetitions and the median is reported, so that a machine
shared with other jobs affects all modes alike; the speed-ups are ratios within this run.

    python benchmarks/vector_env.py                          # 1,000 users, N = 8
    python benchmarks/vector_env.py --users 200 --num-envs 2 8 --repeats 5
    python benchmarks/vector_env.py --repeats 5 --num-envs 2 8 --out benchmarks/results/vector_env.json
    python benchmarks/vector_env.py --num-envs 16 --modes single sync native --repeats 5
    python benchmarks/vector_env.py --num-envs 16 --modes native --workers 2 --repeats 5

BLAS / OpenMP run on one thread per process unless the environment sets them (the round is
single-threaded; a second BLAS thread only spins on a shared machine). The one-process modes
(``single``, ``sync``, ``native``) also report env steps per second of process CPU time
(``time.process_time``: what this process used, whatever else runs on the machine), and the
speed-ups on it; ``users·steps/s`` is env steps/s × users. With both ``sync`` and ``native``
the run also steps the two alternately, step by step with the same actions
(:func:`time_alternating`), and reports native / sync on CPU time per repeat: the paired form
of the comparison. Results go to ``--out`` (default
``runs/benchmarks/vector_env.json``, not tracked; publish to ``benchmarks/results/``
deliberately) and a table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a clone without installing
    sys.path.insert(0, str(ROOT))
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy loads its BLAS (workers inherit it)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import socialenv  # noqa: F401, E402  (registers the env ids)
from policysim_infra.progress import add_quiet_option, progress_bar  # noqa: E402


def time_single(
    env_kwargs: dict[str, Any], total_steps: int, warmup: int, seed: int
) -> tuple[float, float]:
    """Env steps per second (wall, CPU) of one env stepped ``total_steps`` times."""
    env = gym.make("PolicySim-Rec-v0", **env_kwargs)
    env.action_space.seed(seed)
    env.reset(seed=seed)

    def run(n: int) -> None:
        for _ in range(n):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()

    run(warmup)
    start, cpu = time.perf_counter(), time.process_time()
    run(total_steps)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    env.close()
    return total_steps / seconds, total_steps / cpu


def time_vector(
    mode: str,
    num_envs: int,
    env_kwargs: dict[str, Any],
    vector_steps: int,
    warmup: int,
    seed: int,
    workers: int = 1,
) -> tuple[float, float]:
    """Env steps per second (wall, this process's CPU; summed over sub-envs) of ``make_vec`` in
    ``mode`` ("sync", "async" or "vector_entry_point"). A sub-env
    whose episode ended spends its next step resetting (Gymnasium's next-step autoreset);
    those reset steps take time but are not counted as env steps, as in :func:`time_single`."""
    extra = {"workers": workers} if workers > 1 else {}
    envs = gym.make_vec(
        "PolicySim-Rec-v0", num_envs=num_envs, vectorization_mode=mode, **env_kwargs, **extra
    )
    try:
        envs.action_space.seed(seed)
        envs.reset(seed=[seed + i for i in range(num_envs)])
        done = np.zeros(num_envs, bool)
        for _ in range(warmup):
            _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
            done = terminated | truncated
        transitions = 0
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(vector_steps):
            _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
            transitions += int((~done).sum())
            done = terminated | truncated
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        envs.close()
    return transitions / seconds, transitions / cpu


def time_alternating(
    modes: tuple[str, str],
    num_envs: int,
    env_kwargs: dict[str, Any],
    vector_steps: int,
    warmup: int,
    seed: int,
) -> dict[str, float]:
    """Env steps per CPU second of two vector envs stepped alternately, step by step, with
    the same actions (both built first, so both hold their worlds in memory throughout): a
    paired measurement that a changing load affects alike."""
    envs = {
        mode: gym.make_vec(
            "PolicySim-Rec-v0", num_envs=num_envs, vectorization_mode=MODES[mode], **env_kwargs
        )
        for mode in modes
    }
    try:
        first = envs[modes[0]]
        first.action_space.seed(seed)
        for env in envs.values():
            env.reset(seed=seed)
        cpu = dict.fromkeys(modes, 0.0)
        transitions = dict.fromkeys(modes, 0)
        done = {mode: np.zeros(num_envs, bool) for mode in modes}
        for step in range(warmup + vector_steps):
            action = first.action_space.sample()
            for mode in modes if step % 2 == 0 else modes[::-1]:
                start = time.process_time()
                _, _, terminated, truncated, _ = envs[mode].step(action)
                if step >= warmup:
                    cpu[mode] += time.process_time() - start
                    transitions[mode] += int((~done[mode]).sum())
                done[mode] = terminated | truncated
    finally:
        for env in envs.values():
            env.close()
    return {mode: transitions[mode] / cpu[mode] for mode in modes}


#: Benchmark mode -> ``make_vec``'s ``vectorization_mode`` (None: one env, no vector env).
MODES = {"single": None, "sync": "sync", "async": "async", "native": "vector_entry_point"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="PolicySim vector-env throughput")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--num-envs", nargs="+", type=int, default=[8])
    parser.add_argument("--vector-steps", type=int, default=30, help="vector steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="what to measure (single is always measured: the speed-ups are over it)",
    )
    parser.add_argument(
        "--workers",
        nargs="*",
        type=int,
        default=[],
        help="also time the native env with these worker-process counts (> 1)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "benchmarks" / "vector_env.json"
    )
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    add_quiet_option(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.users, args.num_envs, args.vector_steps, args.warmup, args.repeats = 150, [2], 3, 1, 1

    if any(w < 2 for w in args.workers):
        parser.error(f"--workers {args.workers} is not allowed: counts > 1")
    env_kwargs = {"num_users": args.users}
    modes = ["single"] + [m for m in args.modes if m != "single"]
    modes += [f"native-w{w}" for w in args.workers]
    load_before = os.getloadavg()
    samples: dict[str, list[float]] = {}
    cpu_samples: dict[str, list[float]] = {}
    alternating: dict[str, list[float]] = {}
    bar = progress_bar(
        total=args.repeats * len(args.num_envs), unit="measurement", quiet=args.quiet
    )
    for _ in range(args.repeats):
        for n in args.num_envs:
            bar.update()
            for mode in modes:
                if mode == "single":
                    key = "single"
                    wall, cpu = time_single(
                        env_kwargs, args.vector_steps * n, args.warmup, args.seed
                    )
                else:
                    key = f"{mode}-{n}"
                    base, _, workers = mode.partition("-w")
                    wall, cpu = time_vector(
                        MODES[base],
                        n,
                        env_kwargs,
                        args.vector_steps,
                        args.warmup,
                        args.seed,
                        workers=int(workers or 1),
                    )
                samples.setdefault(key, []).append(wall)
                if mode in ("single", "sync", "native"):  # the workers' CPU is not this process's
                    cpu_samples.setdefault(key, []).append(cpu)
            if "native" in modes and "sync" in modes:
                rates = time_alternating(
                    ("sync", "native"), n, env_kwargs, args.vector_steps, args.warmup, args.seed
                )
                alternating.setdefault(f"N={n}", []).append(rates["native"] / rates["sync"])
    load_after = os.getloadavg()
    median = {k: float(np.median(v)) for k, v in samples.items()}
    cpu_median = {k: float(np.median(v)) for k, v in cpu_samples.items()}
    results = {
        "users": args.users,
        "num_envs": args.num_envs,
        "modes": modes,
        "vector_steps": args.vector_steps,
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "threads": os.environ["OMP_NUM_THREADS"],
        "command": " ".join(["python", "benchmarks/vector_env.py", *(argv or sys.argv[1:])]),
        "steps_per_second": median,
        "samples": samples,
        "cpu_steps_per_second": cpu_median,
        "cpu_samples": cpu_samples,
        "single_cpu_steps_per_second": cpu_median["single"],
        "users_steps_per_second": {k: v * args.users for k, v in median.items()},
        "speedup_vs_single": {k: v / median["single"] for k, v in median.items()},
        "cpu_speedup_vs_single": {k: v / cpu_median["single"] for k, v in cpu_median.items()},
        "native_over_sync": {
            f"N={n}": {
                "wall": median[f"native-{n}"] / median[f"sync-{n}"],
                "cpu": cpu_median[f"native-{n}"] / cpu_median[f"sync-{n}"],
            }
            for n in args.num_envs
            if f"native-{n}" in median and f"sync-{n}" in median
        },
        "workers_over_native": {
            f"N={n}, W={w}": median[f"native-w{w}-{n}"] / median[f"native-{n}"]
            for n in args.num_envs
            for w in args.workers
            if f"native-{n}" in median
        },
        "native_over_sync_alternating": {
            key: {"median": float(np.median(v)), "samples": v} for key, v in alternating.items()
        },
    }
    print(
        f"PolicySim-Rec-v0, {args.users} users, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}; median of {args.repeats} interleaved repeats"
    )
    print(
        f"{'mode':>10} {'env steps/s':>12} {'vs single':>10} {'CPU steps/s':>12} "
        f"{'vs single':>10} {'users*steps/s':>14}"
    )
    for key, value in median.items():
        cpu = cpu_median.get(key)
        cpu_text = (
            f"{cpu:>12.1f} {results['cpu_speedup_vs_single'][key]:>9.2f}x"
            if cpu is not None
            else f"{'-':>12} {'-':>10}"
        )
        print(
            f"{key:>10} {value:>12.1f} {results['speedup_vs_single'][key]:>9.2f}x {cpu_text} "
            f"{results['users_steps_per_second'][key]:>14,.0f}"
        )
    for n, ratio in results["native_over_sync"].items():
        print(f"native / sync, {n}: {ratio['wall']:.2f}x wall, {ratio['cpu']:.2f}x CPU")
    for key, ratio in results["workers_over_native"].items():
        print(f"native with workers / native in one process, {key}: {ratio:.2f}x wall")
    for n, ratio in results["native_over_sync_alternating"].items():
        print(
            f"native / sync, {n}, stepped alternately: {ratio['median']:.2f}x CPU (per repeat: "
            + ", ".join(f"{r:.2f}" for r in ratio["samples"])
            + ")"
        )
    if not args.smoke or args.out != parser.get_default("out"):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
