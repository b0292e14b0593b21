"""A reset in the last episode's arrays against one in fresh arrays, paired in one process.

    python benchmarks/reset_reuse.py --users 1000000 --pairs 8 --steps 1
    python benchmarks/reset_reuse.py --users 1000000 --pairs 8 --steps 1 --threads 2

A reset writes the new episode into the last episode's largest arrays where nothing else holds
them: the post table's columns (``PostTable.reusing``), the memory embeddings, the context
table of the local propagation, and the scenario's latent rows, history rows and follow edges
(``Simulation._scenario_memory``). Their pages are faulted in already; new arrays of a 1M world
would fault in hundreds of MB again (the context table in the first step). Here one process
resets ``RecEnv(num_users=N)`` for episode after episode (seeds ``seed + 1, seed + 2, …``) and
steps each ``--steps`` times with random slates, in two ways switched episode by episode in the
order ABBA (reuse, fresh, fresh, reuse, …):

- ``reuse``: as the env does;
- ``fresh``: the last episode's arrays (and its scenario) are held by the benchmark through the
  reset and the steps, as a caller keeping them would, so the env allocates new ones, as the
  code before did.

Episodes do not depend on the way (``tests/socialenv/test_world_reuse.py``). Reported per
way: the medians of the reset's and the steps' wall, user and system seconds and minor page
faults; the paired ratio fresh / reuse of each pair's wall time of reset and steps, and of the
reset's CPU time (``time.process_time``) alone, with its median and a 95% bootstrap interval
(``scipy.stats.bootstrap``). One warm-up episode of each way first.

Results go to ``--out`` (default ``runs/reset_reuse/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path
from typing import Any

from context_reuse import paired_ratio
from env_throughput import write_result

WAYS = ("reuse", "fresh")


def _usage() -> tuple[float, float, float, float, int]:
    """(wall, CPU, user, system seconds, minor page faults) so far (CPU: ``process_time``, finer
    than the 10 ms ticks of user and system)."""
    times = os.times()
    return (
        time.perf_counter(),
        time.process_time(),
        times.user,
        times.system,
        resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
    )


def _since(start: tuple[float, float, float, int]) -> dict[str, float]:
    now = _usage()
    return {
        key: now[i] - start[i]
        for i, key in enumerate(("wall_s", "cpu_s", "user_s", "system_s", "minor_faults"))
    }


def measure(
    users: int, pairs: int, steps: int, threads: int, seed: int, quiet: bool
) -> list[dict[str, Any]]:
    """One warm-up episode per way, then ``pairs`` episodes per way in ABBA order: each one's
    reset and steps, and whether the reset wrote into the last episode's arrays."""
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    import numpy as np
    from threads_in_process import use_threads

    from policysim_infra.progress import progress_bar
    from socialenv.core.world import _POST_ARRAYS
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=users, rounds=steps + 1)
    use_threads(threads)
    sim = env.unwrapped.sim
    rng = np.random.default_rng(seed)
    order = [WAYS[((i + 1) // 2) % 2] for i in range(2 * pairs)]
    episodes: list[dict[str, Any]] = []
    env.reset(seed=seed)
    for i, way in enumerate(progress_bar(list(WAYS) + order, unit="episode", quiet=quiet)):
        held: list[Any] = []
        if way == "fresh":  # what a caller keeping the last episode's arrays would hold
            held = [getattr(sim.posts, name) for name in _POST_ARRAYS]
            held += [sim.users.memory_latent, sim.users._context, sim.scenario]
        posts, memory = id(sim.posts.latent), id(sim.users.memory_latent)
        scenario_reused = sim._scenario_memory.reused
        start = _usage()
        env.reset(seed=seed + 1 + i)
        reset = _since(start)
        reused = {
            "posts": id(sim.posts.latent) == posts,
            "memory_latent": id(sim.users.memory_latent) == memory,
            "scenario_arrays": sim._scenario_memory.reused - scenario_reused,
        }
        start = _usage()
        for _ in range(steps):
            obs, *_ = env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
        stepped = _since(start)
        del held, obs
        if i >= len(WAYS):  # the first episode of each way warms it up
            episodes.append(
                {
                    "pair": (i - len(WAYS)) // 2,
                    "way": way,
                    "reset": reset,
                    "steps": stepped,
                    "reused": reused,
                }
            )
    return episodes


def summarize(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Per way the medians of the reset's and the steps' usage; the paired ratio fresh / reuse
    of reset + steps wall time with a 95% bootstrap interval."""
    import numpy as np

    out: dict[str, Any] = {}
    for way in WAYS:
        mine = [e for e in episodes if e["way"] == way]
        out[way] = {
            "episodes": len(mine),
            **{
                f"{part}_{key}_median": float(np.median([e[part][key] for e in mine]))
                for part in ("reset", "steps")
                for key in ("wall_s", "cpu_s", "user_s", "system_s", "minor_faults")
            },
        }
    wall = {(e["pair"], e["way"]): e["reset"]["wall_s"] + e["steps"]["wall_s"] for e in episodes}
    out["fresh_over_reuse_wall"] = paired_ratio(wall)
    reset_cpu = {(e["pair"], e["way"]): e["reset"]["cpu_s"] for e in episodes}
    out["fresh_over_reuse_reset_cpu"] = paired_ratio(reset_cpu)
    return out


def main() -> None:
    from policysim_infra.progress import add_quiet_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=6, help="timed episodes per way")
    parser.add_argument("--steps", type=int, default=1, help="steps after each reset")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    for name in ("users", "pairs", "steps", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is not allowed: an integer >= 1")
    load_before = os.getloadavg()
    episodes = measure(args.users, args.pairs, args.steps, args.threads, args.seed, args.quiet)
    summary = summarize(episodes)
    for way in WAYS:
        e = summary[way]
        print(
            f"{args.users:,} users, {args.threads} thread(s), {way}: reset "
            f"{e['reset_wall_s_median']:.3f} s wall, {e['reset_user_s_median']:.3f} s user, "
            f"{e['reset_system_s_median']:.3f} s system, {e['reset_minor_faults_median']:,.0f} "
            f"page faults; {args.steps} step(s) {e['steps_wall_s_median']:.3f} s wall, "
            f"{e['steps_system_s_median']:.3f} s system, {e['steps_minor_faults_median']:,.0f} "
            f"page faults (medians of {e['episodes']})"
        )
    ratio = summary["fresh_over_reuse_wall"]
    interval = " (95% CI {:.2f}-{:.2f})".format(*ratio["ci95"]) if "ci95" in ratio else ""
    print(f"fresh / reuse wall of reset and steps per pair: ×{ratio['median']:.2f}{interval}")
    ratio = summary["fresh_over_reuse_reset_cpu"]
    interval = " (95% CI {:.2f}-{:.2f})".format(*ratio["ci95"]) if "ci95" in ratio else ""
    print(f"fresh / reuse CPU time of the reset per pair: ×{ratio['median']:.2f}{interval}")
    from threads_in_process import inherited_settings
    from trajectory_digest import library_versions

    write_result(
        "reset_reuse",
        args.out,
        {
            "command": f"python benchmarks/reset_reuse.py --users {args.users} --pairs "
            f"{args.pairs} --steps {args.steps} --threads {args.threads} --seed {args.seed}",
            "machine": {"load_before": load_before},
            "environment": inherited_settings(),
            "versions": library_versions(),
            "summary": summary,
            "episodes": episodes,
        },
    )


if __name__ == "__main__":
    main()
