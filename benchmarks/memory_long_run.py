"""Memory over a long episode: resident memory (RSS) and post-table size by round.

    python benchmarks/memory_long_run.py                         # 1,000 users, 1,000 rounds
    python benchmarks/memory_long_run.py --no-compaction         # every post kept (before)
    python benchmarks/memory_long_run.py --users 1000 --rounds 1000 --out runs/bench/mem.json

Steps PolicySim-Rec-v0 with surrogate users and random slates for ``--rounds`` rounds in a
fresh process and records, at checkpoints, the process RSS (``/proc/self/statm``), the posts
held by the post table and the posts dropped by the compaction (``Simulation.compact_posts``:
posts older than the feeds' horizon). Prints a table and the ratio RSS(last) / RSS(round 100).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from policysim_infra.progress import add_quiet_option, progress_bar


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(
    users: int,
    rounds: int,
    compaction: bool,
    seed: int,
    checkpoints: list[int],
    quiet: bool = False,
) -> dict:
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the env ids

    env = gym.make("PolicySim-Rec-v0", num_users=users, rounds=rounds)
    sim = env.unwrapped.sim
    sim.compact_posts_enabled = compaction
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    points = []
    start = time.perf_counter()
    for t in progress_bar(range(1, rounds + 1), desc=f"{users} users", unit="round", quiet=quiet):
        env.step(rng.integers(0, env.unwrapped.num_arms, env.unwrapped.slate_size))
        if t in checkpoints:
            points.append(
                {
                    "round": t,
                    "rss_mib": rss_mib(),
                    "posts_held": len(sim.posts),
                    "post_capacity": int(sim.posts.author.shape[0]),
                    "posts_dropped": int(getattr(sim, "posts_dropped", 0)),
                    "seconds": time.perf_counter() - start,
                }
            )
    return {
        "users": users,
        "rounds": rounds,
        "compaction": compaction,
        "seed": seed,
        "points": points,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-compaction", action="store_true", help="keep every post (the behaviour before)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/memory_long_run.json"))
    add_quiet_option(parser)
    args = parser.parse_args()
    checkpoints = sorted(
        {t for t in (1, 10, 100, 250, 500, 750, 1000, args.rounds) if t <= args.rounds}
    )
    result = run(
        args.users, args.rounds, not args.no_compaction, args.seed, checkpoints, quiet=args.quiet
    )
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    base = next((p for p in result["points"] if p["round"] == 100), None)
    last = result["points"][-1]
    result["rss_ratio_last_vs_round_100"] = last["rss_mib"] / base["rss_mib"] if base else None
    print(
        f"{'round':>6} {'RSS MiB':>9} {'posts held':>11} {'capacity':>9} {'dropped':>9} {'seconds':>8}"
    )
    for p in result["points"]:
        print(
            f"{p['round']:>6} {p['rss_mib']:>9.1f} {p['posts_held']:>11} {p['post_capacity']:>9} "
            f"{p['posts_dropped']:>9} {p['seconds']:>8.1f}"
        )
    if base:
        print(
            f"RSS(round {last['round']}) / RSS(round 100) = {result['rss_ratio_last_vs_round_100']:.3f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
