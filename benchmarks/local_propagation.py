"""The arm contexts propagated on the arms' neighbourhood against the (N, d) tables, paired step
by step in one process at each population size: where the threshold belongs on this machine.

    python benchmarks/local_propagation.py --users 1000 2000 3000 4000 16000 50000 --pairs 12
    POLICYSIM_KERNELS=numpy python benchmarks/local_propagation.py --users 16000 50000

Each observation of a Rec env propagates the context of its arms' users (Eq. 8,
``Simulation.user_context(rows)``), either on their K-hop neighbourhood gathered into
compact arrays (``local``) or on (N, d) tables, of which only their rows are kept
(``whole``; since issue 24's twenty-first step each hop computes only the rows the next hop
reads, those within the remaining hops of the arm users). The two give the same values,
bit for bit (checked here at every size, on a state after reactions have moved the memory
embeddings), so an episode does not depend on the way. Which is faster depends on the size:
the local way has a fixed cost, the tables grow with N. The package switches at
``simulation.local_propagation_users()`` users (``COMPILED_LOCAL_PROPAGATION_USERS`` with the
compiled kernels, ``LOCAL_PROPAGATION_USERS`` with the NumPy ones).

Per size: ``RecEnv(num_users=N)`` is reset and stepped once with random slates, then
``--pairs`` pairs of steps with random slates, the way switched step by step in the order
ABBA (local, whole, whole, local, …). Reported per size and way: the medians of the step's
CPU seconds and of the propagation's (``user_context`` timed inside the step); per size the
paired ratio whole / local of the step's CPU seconds, with its median and 95% bootstrap
interval (``scipy.stats.bootstrap``), and the way the package takes at that size.

Results go to ``--out`` (default ``runs/local_propagation/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path
from typing import Any

from env_throughput import median_interval, write_result

WAYS = ("local", "whole")
#: the module thresholds that make every size take the way
_THRESHOLD = {"local": 0, "whole": 1 << 62}


def _take(way: str) -> None:
    from socialenv.core import simulation

    simulation.LOCAL_PROPAGATION_USERS = _THRESHOLD[way]
    simulation.COMPILED_LOCAL_PROPAGATION_USERS = _THRESHOLD[way]


def measure_size(users: int, pairs: int, seed: int) -> dict[str, Any]:
    """One size's paired steps (see the module docstring); the package's thresholds are
    restored afterwards."""
    import numpy as np

    from socialenv.core import kernels, simulation
    from socialenv.envs.rec import RecEnv
    from socialenv.envs.sizing import LargeActionSpaceWarning

    defaults = simulation.LOCAL_PROPAGATION_USERS, simulation.COMPILED_LOCAL_PROPAGATION_USERS
    package_way = "local" if users > simulation.local_propagation_users() else "whole"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LargeActionSpaceWarning)  # the default lever, as at scale
        env = RecEnv(num_users=users, rounds=2 * pairs + 2)
    try:
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        env.step(rng.integers(0, env.num_arms + 1, env.slate_size))  # moves the memory
        sim = env.unwrapped.sim
        rows = np.unique(np.maximum(env.unwrapped._arms["user"], 0))
        contexts = []
        for way in WAYS:
            _take(way)
            contexts.append(sim.user_context(rows))
        identical = bool(
            contexts[0].dtype == contexts[1].dtype
            and np.array_equal(contexts[0].view(np.uint32), contexts[1].view(np.uint32))
        )
        propagation: list[float] = []
        context = sim.user_context

        def timed_context(wanted: Any = None) -> Any:
            start = time.process_time()
            try:
                return context(wanted)
            finally:
                propagation.append(time.process_time() - start)

        sim.user_context = timed_context  # an instance attribute: the env's calls come here
        order = [WAYS[((i + 1) // 2) % 2] for i in range(2 * pairs)]
        steps: list[dict[str, Any]] = []
        for i, way in enumerate(order):
            _take(way)
            action = rng.integers(0, env.num_arms + 1, env.slate_size)
            propagation.clear()
            start = time.process_time()
            env.step(action)
            step_cpu = time.process_time() - start
            steps.append(
                {
                    "pair": i // 2,
                    "way": way,
                    "step_cpu_s": step_cpu,
                    "context_cpu_s": sum(propagation),
                }
            )
    finally:
        simulation.LOCAL_PROPAGATION_USERS, simulation.COMPILED_LOCAL_PROPAGATION_USERS = defaults
        env.close()
    per_way = {
        way: {
            "steps": sum(s["way"] == way for s in steps),
            "step_cpu_s_median": float(
                np.median([s["step_cpu_s"] for s in steps if s["way"] == way])
            ),
            "context_cpu_s_median": float(
                np.median([s["context_cpu_s"] for s in steps if s["way"] == way])
            ),
        }
        for way in WAYS
    }
    cpu = {(s["pair"], s["way"]): s["step_cpu_s"] for s in steps}
    return {
        "num_users": users,
        "kernels": kernels.BACKEND,
        "arm_users": len(rows),
        "identical": identical,
        "package_way": package_way,
        **per_way,
        "whole_over_local_step_cpu": median_interval(
            [cpu[p, "whole"] / cpu[p, "local"] for p in range(pairs)]
        ),
        "steps": steps,
    }


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--users", type=int, nargs="+", default=[1000, 2000, 3000, 4000, 16_000, 50_000]
    )
    parser.add_argument("--pairs", type=int, default=12, help="paired steps per size")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    for name in ("pairs", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is not allowed: an integer >= 1")
    from socialenv.core.config import ENV_LIMITS

    limit = ENV_LIMITS["num_users"]
    for users in args.users:
        if not limit.ge <= users <= limit.le:
            raise ValueError(
                f"--users {users} is not allowed: integers in [{limit.ge}, {limit.le}] (the "
                "env's num_users)"
            )
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    from threads_in_process import inherited_settings, use_threads
    from trajectory_digest import library_versions

    use_threads(args.threads)
    load_before = os.getloadavg()
    sizes = []
    for users in progress_bar(args.users, unit="size", quiet=args.quiet):
        row = measure_size(users, args.pairs, args.seed)
        ratio = row["whole_over_local_step_cpu"]
        interval = " (95% CI {:.2f}-{:.2f})".format(*ratio["ci95"]) if "ci95" in ratio else ""
        print(
            f"{users:,} users ({row['arm_users']:,} arm users, {row['kernels']} kernels): step "
            f"{row['local']['step_cpu_s_median'] * 1e3:.2f} ms CPU local, "
            f"{row['whole']['step_cpu_s_median'] * 1e3:.2f} ms whole (propagation "
            f"{row['local']['context_cpu_s_median'] * 1e3:.2f} vs "
            f"{row['whole']['context_cpu_s_median'] * 1e3:.2f} ms); whole / local "
            f"×{ratio['median']:.2f}{interval}; identical: {row['identical']}; the package "
            f"takes: {row['package_way']}"
        )
        sizes.append(row)
    write_result(
        "local_propagation",
        args.out,
        {
            "command": "python benchmarks/local_propagation.py --users "
            + " ".join(str(u) for u in args.users)
            + f" --pairs {args.pairs} --threads {args.threads} --seed {args.seed}",
            "machine": {"load_before": load_before},
            "environment": inherited_settings(),
            "versions": library_versions(),
            "sizes": sizes,
        },
    )
    if not all(row["identical"] for row in sizes):
        raise SystemExit("the two ways gave different contexts (see 'identical' in the result)")


if __name__ == "__main__":
    main()
