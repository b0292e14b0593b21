"""The round's dense products on one BLAS thread or on the machine's: paired, process by process.

    python benchmarks/blas_threads.py --users 1000 --steps 300 --threads 1 --repeats 3
    python benchmarks/blas_threads.py --users 1000000 --steps 4 --threads 2 --out DIR/blas.json
    python benchmarks/blas_threads.py --users 1000000 --personalized --steps 6 --repeats 1

Since b84db14 the round's small dense products (users or posts against the cluster centres in
``socialenv.core.clustering``) run inside ``kernels.one_blas_thread()``. This script measures
what that changes. Each run is a fresh process that resets ``RecEnv(num_users=N)`` with
``POLICYSIM_THREADS=--threads`` and leaves the BLAS library on the machine's default thread
count (no thread variable is set for it), then steps it with random slates: either the code as
it is (``one_blas_thread``) or the code before (``one_blas_thread`` replaced by a null context,
so the products run on the BLAS library's own threads). The two settings alternate process by
process, ``--repeats`` times each (OpenBLAS's idle threads spin for a while after a product, so
the two settings cannot share a process). It reports per setting the median wall and CPU
seconds per step over the repeats, their ratios, and each process's CPU ticks per thread.

``--personalized`` times the personalized channel alone (``Recommender.personalized`` on the
round's active users after two steps) instead of whole steps: in each process it is called
``--steps`` times on 1 and on ``--threads`` threads in turn (``kernels.set_threads``), and the
figure is that phase's speed-up on the threads, per setting.

Results go to ``--out`` (default ``runs/blas_threads/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from env_throughput import _run, write_result

SETTINGS = ("one_blas_thread", "machine_blas_threads")


def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) of each thread of this process (Linux /proc)."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def measure(
    setting: str, users: int, steps: int, threads: int, seed: int, personalized: bool, queue: Any
) -> None:
    """One process, one setting: reset, a warm-up step, ``steps`` timed steps (or calls of the
    personalized channel on 1 and ``threads`` threads in turn)."""
    os.environ["POLICYSIM_THREADS"] = "1" if personalized else str(threads)
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    import numpy as np
    from threadpoolctl import threadpool_info

    from socialenv.core import kernels
    from socialenv.envs.rec import RecEnv

    if setting == "machine_blas_threads":
        kernels.one_blas_thread = contextlib.nullcontext  # type: ignore[assignment]
    env = RecEnv(num_users=users, rounds=steps + 2)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    env.step(rng.integers(0, env.num_arms + 1, env.slate_size))  # warm-up
    if personalized:
        queue.put(_time_personalized(env, setting, steps, threads))
        return
    actions = [rng.integers(0, env.num_arms + 1, env.slate_size) for _ in range(steps)]
    before = _thread_ticks() if os.path.isdir("/proc/self/task") else {}
    wall, cpu = time.perf_counter(), time.process_time()
    for action in actions:
        env.step(action)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = _thread_ticks() if before else {}
    busy = sorted((t - before.get(tid, 0) for tid, t in after.items()), reverse=True)
    queue.put(
        {
            "setting": setting,
            "wall_s_per_step": wall / steps,
            "cpu_s_per_step": cpu / steps,
            "thread_ticks": [t for t in busy if t > 0],
            "blas_threads": [
                i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"
            ],
            "load_after": os.getloadavg(),
        }
    )


def _time_personalized(env: Any, setting: str, calls: int, threads: int) -> dict[str, Any]:
    import numpy as np

    from socialenv.core import kernels
    from socialenv.core.simulation import Stream

    env.step(np.full(env.slate_size, env.no_op, np.int64))
    sim = env.sim
    context, active = sim.feed_context(), sim.active
    wall: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(calls):
        for count in (1, threads):
            kernels.set_threads(count)
            start = time.perf_counter()
            sim.recommender.personalized(context, active, sim.rng(sim.round, Stream.FEED))
            wall[count].append(time.perf_counter() - start)
    kernels.set_threads(1)
    one, many = float(np.median(wall[1])), float(np.median(wall[threads]))
    return {
        "setting": setting,
        "active_users": len(active),
        "wall_s_one_thread": wall[1],
        f"wall_s_{threads}_threads": wall[threads],
        "speedup": one / many,
        "load_after": os.getloadavg(),
    }


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per process")
    parser.add_argument("--repeats", type=int, default=3, help="processes per setting")
    parser.add_argument("--threads", type=int, default=2, help="POLICYSIM_THREADS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--personalized",
        action="store_true",
        help="time the personalized channel on 1 and --threads threads, not whole steps",
    )
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    if args.users < 2 or min(args.steps, args.threads, args.repeats) < 1:
        raise ValueError(
            f"--users={args.users}, --steps={args.steps}, --threads={args.threads}, "
            f"--repeats={args.repeats}: users >= 2 and the others >= 1 are allowed"
        )
    if args.personalized and args.threads < 2:
        raise ValueError(f"--threads={args.threads} with --personalized: an integer >= 2")
    import numpy as np

    rows = []
    runs = progress_bar(
        [setting for _ in range(args.repeats) for setting in SETTINGS],
        unit="process",
        quiet=args.quiet,
    )
    for setting in runs:
        row = _run(
            measure, setting, args.users, args.steps, args.threads, args.seed, args.personalized
        )
        rows.append(row)
        if args.personalized:
            shown = (
                f"personalized channel of {row['active_users']:,} users, {args.threads} threads "
                f"×{row['speedup']:.2f} over one (medians of {args.steps} calls)"
            )
        else:
            shown = (
                f"{row['wall_s_per_step'] * 1e3:9.1f} ms wall, "
                f"{row['cpu_s_per_step'] * 1e3:9.1f} ms CPU per step; busy threads (ticks) "
                f"{row['thread_ticks']}"
            )
        print(f"{setting:>21}: {shown}", flush=True)
    if args.personalized:
        write_result("blas_threads", args.out, {"command": _command(args), "rows": rows})
        return
    medians = {
        s: {
            key: float(np.median([r[f"{key}_s_per_step"] for r in rows if r["setting"] == s]))
            for key in ("wall", "cpu")
        }
        for s in SETTINGS
    }
    before, now = medians["machine_blas_threads"], medians["one_blas_thread"]
    result = {
        "command": _command(args),
        "rows": rows,
        "medians": medians,
        "wall_speedup": before["wall"] / now["wall"],
        "cpu_ratio": before["cpu"] / now["cpu"],
    }
    print(
        f"{args.users:,} users, POLICYSIM_THREADS={args.threads}, BLAS threads "
        f"{rows[0]['blas_threads']}, medians of {args.repeats}: one BLAS thread "
        f"{now['wall'] * 1e3:.1f} ms wall / {now['cpu'] * 1e3:.1f} ms CPU per step, the "
        f"machine's BLAS threads {before['wall'] * 1e3:.1f} / {before['cpu'] * 1e3:.1f} ms: "
        f"wall ×{result['wall_speedup']:.2f}, CPU ×{result['cpu_ratio']:.2f}"
    )
    write_result("blas_threads", args.out, result)


def _command(args: argparse.Namespace) -> str:
    return (
        f"python benchmarks/blas_threads.py --users {args.users} --steps {args.steps} "
        f"--threads {args.threads} --repeats {args.repeats} --seed {args.seed}"
        + (" --personalized" if args.personalized else "")
    )


if __name__ == "__main__":
    main()
