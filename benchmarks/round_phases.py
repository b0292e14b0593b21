"""Where a Rec step goes, phase by phase, at each thread count: wall, CPU and system seconds
and page faults per step.

    python benchmarks/round_phases.py --users 1000000 --threads 1 2 --steps 3
    python benchmarks/round_phases.py --users 1000 --threads 1 --steps 200 --out DIR/phases.json

Each thread count runs in a fresh process (``POLICYSIM_THREADS``, NumPy's BLAS, OpenMP and
numba on that many threads, as in ``env_throughput.py``), resets ``RecEnv(num_users=N)`` and
steps it with random slates after one warm-up step. Every phase method is timed where it is
called, so a phase's time includes the phases it calls (``within`` names its parent):

- ``step``: the whole ``env.step``;
- ``run_round`` (within ``step``): the simulation's round, made of ``_build_feeds``,
  ``_filter_feeds``, ``_ask_brain`` (the surrogate users), ``_apply``, ``_advance`` and
  ``_measure``;
- ``_observe`` (within ``step``): the next observation, of which ``user_context`` (the context
  propagation), ``_sample_arms`` and ``_arm_contexts``;
- ``_arm_rewards`` and ``_observe_round`` (within ``step``): the rewards and the history.

Beside the times, each phase records its system seconds and minor page faults per step
(``resource.getrusage``): the first touch of new memory, which the kernel serves on the
calling thread.

``speedup_wall`` is a phase's wall time at the fewest threads over its wall time here: the
phases near 1 are the serial part of a round, which bounds what more threads can give
(Amdahl). ``serial_share`` sums the wall time of the leaf phases whose speed-up is under 1.2
(and of the step's time outside any phase) over the step's wall time, at the fewest threads.

``--in-process`` runs every thread count in one process instead, on the same env, switching
the count between steps (``kernels.set_threads``, torch's threads and the BLAS libraries through
threadpoolctl) in the order of ``threads_in_process.py`` (in order on even rounds, reversed on
odd ones, after one warm-up round): the counts then share the world and the machine's minutes,
so a phase's speed-up is not this VM's 15-20% noise between processes. ``--steps`` is then the
number of such rounds.

Results go to ``--out`` (default ``runs/round_phases/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from env_throughput import _run, _set_threads, write_result

#: (class, method, the phase it is called within); a phase is named by its method
PHASES = (
    ("env", "step", None),
    ("sim", "run_round", "step"),
    ("sim", "_build_feeds", "run_round"),
    ("sim", "_filter_feeds", "run_round"),
    ("sim", "_ask_brain", "run_round"),
    ("sim", "_apply", "run_round"),
    ("sim", "_advance", "run_round"),
    ("sim", "_measure", "run_round"),
    ("env", "_observe", "step"),
    ("sim", "user_context", "_observe"),
    ("env", "_sample_arms", "_observe"),
    ("env", "_arm_contexts", "_observe"),
    ("env", "_arm_rewards", "step"),
    ("env", "_observe_round", "step"),
)
SERIAL_SPEEDUP = 1.2


def _new_totals() -> dict[str, list[float]]:
    """Per phase: wall, CPU and system seconds and minor page faults, summed."""
    return {name: [0.0, 0.0, 0.0, 0.0] for _, name, _ in PHASES}


def _time_phases(totals_now: Callable[[], dict[str, list[float]]]) -> None:
    """Wrap every phase method of :data:`PHASES` so that each call adds its wall, CPU and
    system seconds and minor faults to ``totals_now()`` (the totals in use at that call)."""
    from socialenv.core.simulation import Simulation
    from socialenv.envs.rec import RecEnv

    owners = {"env": RecEnv, "sim": Simulation}

    def timed(method: Any, label: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                after = resource.getrusage(resource.RUSAGE_SELF)
                total = totals_now()[label]
                total[0] += time.perf_counter() - wall
                total[1] += time.process_time() - cpu
                total[2] += after.ru_stime - usage.ru_stime
                total[3] += after.ru_minflt - usage.ru_minflt

        return call

    for owner, name, _ in PHASES:
        cls = owners[owner]
        setattr(cls, name, timed(getattr(cls, name), name))


def _row(
    num_users: int,
    threads: int,
    steps: int,
    reset: tuple[float, float],
    totals: dict[str, list[float]],
) -> dict[str, Any]:
    """One thread count's result: the run's settings and each phase's mean per step."""
    from socialenv.core import kernels

    return {
        "num_users": num_users,
        "threads": threads,
        "kernels": kernels.BACKEND,
        "package": str(Path(kernels.__file__).parents[2]),  # which tree's package ran
        "steps": steps,
        "reset_wall_s": reset[0],
        "reset_cpu_s": reset[1],
        "phases": {
            label: {
                "wall_s": wall_s / steps,
                "cpu_s": cpu_s / steps,
                "system_s": system_s / steps,
                "minor_faults": faults / steps,
            }
            for label, (wall_s, cpu_s, system_s, faults) in totals.items()
        },
        "load_after": os.getloadavg(),
    }


def _reset(env: Any, seed: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    env.reset(seed=seed)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure_phases(num_users: int, steps: int, seed: int, threads: int, queue: Any) -> None:
    """One process: reset, a warm-up step, ``steps`` timed steps; puts per-phase totals."""
    _set_threads(threads)
    import numpy as np
    import torch

    from socialenv.envs.rec import RecEnv

    torch.set_num_threads(threads)
    env = RecEnv(num_users=num_users, rounds=steps + 2)
    reset = _reset(env, seed)
    rng = np.random.default_rng(seed)
    env.step(rng.integers(0, env.num_arms + 1, env.slate_size))  # warm-up
    totals = _new_totals()
    _time_phases(lambda: totals)
    for _ in range(steps):
        env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
    queue.put(_row(num_users, threads, steps, reset, totals))


def measure_phases_in_process(
    num_users: int, rounds: int, seed: int, threads: list[int], queue: Any
) -> None:
    """One process, every count: reset, a warm-up round, ``rounds`` timed rounds of one step
    per count (``threads_in_process.py``'s order); puts one row per count, as
    :func:`measure_phases` does (each with the one reset, on the first count)."""
    os.environ["NUMBA_NUM_THREADS"] = str(max(threads))
    import numpy as np
    from env_throughput import balanced_order
    from threads_in_process import use_threads

    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=num_users, rounds=(rounds + 1) * len(threads) + 1)
    use_threads(max(threads))  # the most first (threads_in_process.use_threads)
    use_threads(threads[0])
    reset = _reset(env, seed)
    rng = np.random.default_rng(seed)
    for count in threads:  # the warm-up round
        use_threads(count)
        env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
    totals = {count: _new_totals() for count in threads}
    current = [threads[0]]
    _time_phases(lambda: totals[current[0]])
    for r in range(rounds):
        for count in balanced_order(threads, r):
            use_threads(count)
            current[0] = count
            env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
    queue.put(
        [
            {**_row(num_users, count, rounds, reset, totals[count]), "in_process": True}
            for count in threads
        ]
    )


def _leaves() -> list[str]:
    parents = {within for *_, within in PHASES if within is not None}
    return [name for _, name, _ in PHASES if name not in parents]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-phase speed-ups over the fewest threads and the serial share of a step."""
    base = min(rows, key=lambda r: r["threads"])
    children: dict[str, list[str]] = {}
    for _, name, within in PHASES:
        if within is not None:
            children.setdefault(within, []).append(name)
    for row in rows:
        for name, phase in row["phases"].items():
            phase["speedup_wall"] = base["phases"][name]["wall_s"] / max(phase["wall_s"], 1e-12)
    step_wall = base["phases"]["step"]["wall_s"]
    # time inside a phase but outside the phases it calls (bookkeeping between them)
    between = sum(
        base["phases"][parent]["wall_s"] - sum(base["phases"][c]["wall_s"] for c in called)
        for parent, called in children.items()
    )
    summary: dict[str, Any] = {"fewest_threads": base["threads"], "per_threads": {}}
    for row in rows:
        if row is base:
            continue
        serial = [
            label for label in _leaves() if row["phases"][label]["speedup_wall"] < SERIAL_SPEEDUP
        ]
        share = (sum(base["phases"][name]["wall_s"] for name in serial) + between) / step_wall
        summary["per_threads"][str(row["threads"])] = {
            "step_speedup_wall": row["phases"]["step"]["speedup_wall"],
            "serial_leaves": serial,
            "serial_share": share,
        }
    return summary


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="every thread count in one process, switching between steps (--steps: rounds)",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    from trajectory_digest import library_versions  # imports NumPy: not before the children

    if min(args.threads) < 1:
        raise ValueError(f"--threads={args.threads} is not allowed: integers >= 1")
    if args.steps < 1 or args.users < 1:
        raise ValueError(f"--steps={args.steps}, --users={args.users}: both must be >= 1")
    if len(set(args.threads)) != len(args.threads):
        raise ValueError(f"--threads={args.threads} is not allowed: distinct integers >= 1")
    if args.in_process:
        rows = _run(measure_phases_in_process, args.users, args.steps, args.seed, args.threads)
    else:
        rows = [
            _run(measure_phases, args.users, args.steps, args.seed, threads)
            for threads in progress_bar(args.threads, unit="process", quiet=args.quiet)
        ]
    for row in rows:
        print(
            f"{args.users:,} users, {row['threads']} threads: step "
            f"{row['phases']['step']['wall_s']:.3f} s wall, "
            f"{row['phases']['step']['cpu_s']:.3f} s CPU",
            flush=True,
        )
    summary = summarize(rows)
    print(f"{'phase':>15} " + " ".join(f"{r['threads']:>3} thr wall (×)" for r in rows))
    for _, name, _ in PHASES:
        print(
            f"{name:>15} "
            + " ".join(
                f"{r['phases'][name]['wall_s']:7.3f} ({r['phases'][name]['speedup_wall']:4.2f}; "
                f"sys {r['phases'][name]['system_s']:.3f} s, "
                f"{r['phases'][name]['minor_faults']:,.0f} faults)"
                for r in rows
            )
        )
    for threads, entry in summary["per_threads"].items():
        print(
            f"{threads} threads: step ×{entry['step_speedup_wall']:.2f}, serial share "
            f"{entry['serial_share']:.2f} ({', '.join(entry['serial_leaves']) or 'none'})"
        )
    write_result(
        "round_phases",
        args.out,
        {
            "command": "python benchmarks/round_phases.py "
            f"--users {args.users} --threads {' '.join(map(str, args.threads))} "
            f"--steps {args.steps} --seed {args.seed}" + (" --in-process" * args.in_process),
            "versions": library_versions(),
            "rows": rows,
            "summary": summary,
        },
    )


if __name__ == "__main__":
    main()
