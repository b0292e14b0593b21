"""Arm contexts written into a dropped matrix against a fresh one, paired in one process.

    python benchmarks/context_reuse.py --users 1000000 --pairs 8 --threads 1
    python benchmarks/context_reuse.py --users 1000000 --pairs 8 --threads 2

A Rec env's observation is a (K, D) float32 matrix of arm contexts: 190 MB at 1M users. Above
32 MB glibc maps every array anew and unmaps it when freed, and the kernel (on a VM with
free-page reporting, the host too) faults its pages in again. The env writes the matrix into
one of the last steps' that the caller has dropped (``policysim_infra.buffers.ReusedArrays``);
the code before allocated a new one every step. Here one process resets
``RecEnv(num_users=N)`` and steps it with random slates, keeping each observation until the
next step returns as an RL loop does, and switches between the two ways step by step in the
order ABBA (reuse, fresh, fresh, reuse, …), so both meet the same world size and minutes.
Trajectories do not depend on it (only where the matrix lives changes).

Reported per way: the median wall, user and system seconds per step; and the paired ratio
fresh / reuse of each pair's wall time, with its median and a 95% bootstrap interval
(``scipy.stats.bootstrap``). One warm-up step of each way first.

Results go to ``--out`` (default ``runs/context_reuse/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from env_throughput import write_result

WAYS = ("reuse", "fresh")


def measure(users: int, pairs: int, threads: int, seed: int, quiet: bool) -> dict[str, Any]:
    """Reset, one warm-up step per way, then ``pairs`` steps per way in ABBA order; the steps
    and how many matrices each way allocated and reused."""
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    import numpy as np
    from threads_in_process import use_threads

    from policysim_infra.buffers import ReusedArrays
    from policysim_infra.progress import progress_bar
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=users, rounds=2 * pairs + 3)
    use_threads(threads)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    kept = {"reuse": env._context_arrays, "fresh": ReusedArrays(keep=0)}
    order = [WAYS[((i + 1) // 2) % 2] for i in range(2 * pairs)]
    steps: list[dict[str, Any]] = []
    for i, way in enumerate(progress_bar(list(WAYS) + order, unit="step", quiet=quiet)):
        env._context_arrays = kept[way]
        action = rng.integers(0, env.num_arms + 1, env.slate_size)
        before, wall = os.times(), time.perf_counter()
        obs, *_ = env.step(action)  # the previous observation is held until here
        wall, after = time.perf_counter() - wall, os.times()
        if i >= len(WAYS):  # the first step of each way warms it up
            steps.append(
                {
                    "pair": (i - len(WAYS)) // 2,
                    "way": way,
                    "wall_s": wall,
                    "user_s": after.user - before.user,
                    "system_s": after.system - before.system,
                }
            )
    del obs
    counts = {way: {"allocated": a.allocated, "reused": a.reused} for way, a in kept.items()}
    return {"steps": steps, "matrices": counts}


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per way the medians; the paired wall ratio fresh / reuse with a 95% bootstrap interval."""
    import numpy as np
    from scipy.stats import bootstrap

    out: dict[str, Any] = {}
    for way in WAYS:
        mine = [s for s in steps if s["way"] == way]
        out[way] = {
            "steps": len(mine),
            **{
                f"{k}_median": float(np.median([s[k] for s in mine]))
                for k in ("wall_s", "user_s", "system_s")
            },
        }
    wall = {(s["pair"], s["way"]): s["wall_s"] for s in steps}
    ratios = np.array(
        [wall[p, "fresh"] / wall[p, "reuse"] for p in sorted({s["pair"] for s in steps})]
    )
    out["fresh_over_reuse_wall"] = {"per_pair": ratios.tolist(), "median": float(np.median(ratios))}
    if len(ratios) >= 3:
        ci = bootstrap((ratios,), np.median, confidence_level=0.95, random_state=0)
        out["fresh_over_reuse_wall"]["ci95"] = [
            float(ci.confidence_interval.low),
            float(ci.confidence_interval.high),
        ]
    return out


def main() -> None:
    from policysim_infra.progress import add_quiet_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=6, help="timed steps per way")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    for name in ("users", "pairs", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is not allowed: an integer >= 1")
    load_before = os.getloadavg()
    result = measure(args.users, args.pairs, args.threads, args.seed, args.quiet)
    summary = summarize(result["steps"])
    for way in WAYS:
        e = summary[way]
        print(
            f"{args.users:,} users, {args.threads} thread(s), {way}: {e['wall_s_median']:.3f} s "
            f"wall, {e['user_s_median']:.3f} s user, {e['system_s_median']:.3f} s system per "
            f"step (median of {e['steps']})"
        )
    ratio = summary["fresh_over_reuse_wall"]
    interval = " (95% CI {:.2f}-{:.2f})".format(*ratio["ci95"]) if "ci95" in ratio else ""
    print(f"fresh / reuse wall per pair: ×{ratio['median']:.2f}{interval}")
    from threads_in_process import inherited_settings
    from trajectory_digest import library_versions

    write_result(
        "context_reuse",
        args.out,
        {
            "command": f"python benchmarks/context_reuse.py --users {args.users} "
            f"--pairs {args.pairs} --threads {args.threads} --seed {args.seed}",
            "machine": {"load_before": load_before},
            "environment": inherited_settings(),
            "versions": library_versions(),
            "summary": summary,
            "matrices": result["matrices"],
            "steps": result["steps"],
        },
    )


if __name__ == "__main__":
    main()
