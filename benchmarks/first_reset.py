"""What a process's first reset pays that its later resets do not.

    python benchmarks/first_reset.py --users 1000000
    python benchmarks/first_reset.py --users 1000 --out DIR/first_reset_1k.json

One fresh process imports the package, then resets ``RecEnv(num_users=N)`` twice with the same
seed. For each reset it records CPU (``time.process_time``), system seconds and minor page
faults (``resource.getrusage``), and the CPU spent in numba's dispatch of a kernel not yet
loaded in this process (``Dispatcher._compile_for_args``: with the on-disk cache, loading the
compiled kernel). Of that, ``numba_registries_cpu_s`` is ``BaseContext.refresh``: numba importing
its own typing and lowering modules on the first dispatch in a process (``numba.np.linalg``
imports ``scipy.linalg`` there). Both are timed by wrapping those two methods for the run;
the outermost call of each counts, so nothing is counted twice. ``system_s_per_fault`` is the
reset's system seconds over its minor faults: what the first touch of a page costs here.

The second reset is the same work with the kernels loaded and (where nothing else holds them)
the last episode's arrays written again, so first minus second is what the process's first
reset pays once. Results go to ``--out`` (default ``runs/first_reset/<UTC time>.json``, not
tracked).
"""

from __future__ import annotations

import argparse
import functools
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from env_throughput import write_result


class _OutermostTimer:
    """CPU seconds spent in the outermost calls of the wrapped methods."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.calls = 0
        self._depth = 0

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            start = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.cpu_s += time.process_time() - start
                    self.calls += 1

        return timed


def _usage() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time(), usage.ru_stime, usage.ru_minflt


def measure(users: int, seed: int, quiet: bool = False) -> dict[str, Any]:
    """The import's CPU seconds and both resets' usage (see the module docstring)."""
    start = time.process_time()
    from numba.core.base import BaseContext
    from numba.core.dispatcher import Dispatcher

    from policysim_infra.progress import progress_bar
    from socialenv.envs.rec import RecEnv

    import_cpu = time.process_time() - start
    dispatch, registries = _OutermostTimer(), _OutermostTimer()
    Dispatcher._compile_for_args = dispatch.wrap(Dispatcher._compile_for_args)
    BaseContext.refresh = registries.wrap(BaseContext.refresh)
    env = RecEnv(num_users=users, rounds=2)
    resets = []
    for _ in progress_bar(range(2), unit="reset", quiet=quiet):
        before = (_usage(), dispatch.cpu_s, registries.cpu_s, dispatch.calls)
        env.reset(seed=seed)
        (cpu, system, faults), after = _usage(), (dispatch.cpu_s, registries.cpu_s)
        system_s, minor_faults = system - before[0][1], faults - before[0][2]
        resets.append(
            {
                "cpu_s": cpu - before[0][0],
                "system_s": system_s,
                "minor_faults": minor_faults,
                "system_s_per_fault": system_s / minor_faults if minor_faults else None,
                "numba_dispatch_cpu_s": after[0] - before[1],
                "numba_registries_cpu_s": after[1] - before[2],
                "kernels_loaded": dispatch.calls - before[3],
            }
        )
    env.close()
    first, again = resets
    return {
        "num_users": users,
        "import_cpu_s": import_cpu,
        "first": first,
        "again": again,
        "first_minus_again_cpu_s": first["cpu_s"] - again["cpu_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (there is none when the output is not a terminal either)",
    )
    args = parser.parse_args()
    row = measure(args.users, args.seed, args.quiet)
    for name in ("first", "again"):
        r = row[name]
        print(
            f"{args.users:,} users, {name} reset: {r['cpu_s']:.2f} s CPU, system {r['system_s']:.2f}"
            f" s ({r['minor_faults']:,} faults), numba loading {r['kernels_loaded']} kernels "
            f"{r['numba_dispatch_cpu_s']:.2f} s, of which its registries "
            f"{r['numba_registries_cpu_s']:.2f} s"
        )
    print(
        f"import {row['import_cpu_s']:.2f} s CPU; first - again {row['first_minus_again_cpu_s']:.2f} s"
    )
    write_result(
        "first_reset",
        args.out,
        {
            "command": f"python benchmarks/first_reset.py --users {args.users} --seed {args.seed}",
            "rows": [row],
        },
    )


if __name__ == "__main__":
    main()
