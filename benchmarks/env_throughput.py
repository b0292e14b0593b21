"""Env throughput: steps/s and user-steps/s of PolicySim-Rec-v0 with surrogate users.

    python benchmarks/env_throughput.py                      # 1e3, 1e4, 1e5, 1e6 users
    python benchmarks/env_throughput.py --users 1000 10000   # a subset

For each population size it builds the env in a fresh process (so peak memory is that
size's own), resets it, steps it with random slates and reports the median step time,
env steps/s, user-steps/s (users × steps / s), reset time and peak resident memory. It
prints a table, the ratio time(1e6)/time(1e5) and writes
``benchmarks/results/env_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "env_throughput.json"


def measure(num_users: int, steps: int, seed: int, queue: mp.Queue) -> None:
    from socialenv.envs.rec import RecEnv

    start = time.perf_counter()
    env = RecEnv(num_users=num_users, rounds=steps + 2)
    env.reset(seed=seed)
    reset_s = time.perf_counter() - start
    rng = np.random.default_rng(seed)
    env.step(rng.integers(0, env.num_arms, env.slate_size))  # warm-up
    times = []
    for _ in range(steps):
        action = rng.integers(0, env.num_arms, env.slate_size)
        t = time.perf_counter()
        env.step(action)
        times.append(time.perf_counter() - t)
    median = float(np.median(times))
    queue.put({
        "num_users": num_users,
        "steps": steps,
        "reset_s": reset_s,
        "step_s_median": median,
        "step_s_min": float(np.min(times)),
        "env_steps_per_s": 1.0 / median,
        "user_steps_per_s": num_users / median,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="steps per size (default: 200, 50, 10, 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    default_steps = {1_000: 200, 10_000: 50, 100_000: 10, 1_000_000: 4}
    steps = args.steps or [default_steps.get(n, 5) for n in args.users]
    ctx = mp.get_context("spawn")
    rows = []
    for n, s in zip(args.users, steps, strict=True):
        queue = ctx.Queue()
        proc = ctx.Process(target=measure, args=(n, s, args.seed, queue))
        proc.start()
        row = queue.get()
        proc.join()
        rows.append(row)
        print(f"{n:>9,} users: {row['step_s_median'] * 1000:9.1f} ms/step  "
              f"{row['env_steps_per_s']:8.1f} steps/s  {row['user_steps_per_s']:12,.0f} user-steps/s  "
              f"reset {row['reset_s']:6.1f} s  peak {row['peak_rss_gib']:5.2f} GiB", flush=True)
    by_size = {r["num_users"]: r for r in rows}
    ratios = {}
    if 100_000 in by_size and 1_000_000 in by_size:
        ratios["time_1e6_over_1e5"] = by_size[1_000_000]["step_s_median"] / by_size[100_000]["step_s_median"]
        print(f"time(1e6)/time(1e5) = {ratios['time_1e6_over_1e5']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": {"cpus": mp.cpu_count(), "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine()},
        "rows": rows, "ratios": ratios,
    }, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
