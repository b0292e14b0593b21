"""Compiled round passes against their NumPy twins on the inputs of one recorded round.

A twin is the NumPy arithmetic the compiled pass replaced, and both give the same bits, so
timing the two on the same inputs, alternating in one process, measures what the pass saves
without the process-to-process noise of whole rounds. Recorded at ``--users`` users (a Rec
env, no-op policy, the round after the first), each pass is then timed ``--repeats`` times per
side in CPU seconds on one thread; ``count_reactions`` is also timed threaded (wall seconds,
its serial kernel against its threaded one on ``--threads`` threads).

    python benchmarks/twin_pairs.py --users 1000000 --repeats 8 --out /tmp/twin_pairs.json
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.env_throughput import median_interval, write_result  # noqa: E402


def _record(users: int, seed: int) -> dict[str, tuple[Any, ...]]:
    """The arguments of each pass's call in the env's second round (arrays copied)."""
    from agent_models import surrogate, surrogate_kernels
    from socialenv.core import kernels
    from socialenv.envs.rec import RecEnv
    from socialenv.envs.rec import env as rec_env

    calls: dict[str, tuple[Any, ...]] = {}
    targets = [
        (surrogate, "noisy_unit_rows", surrogate_kernels.noisy_unit_rows),
        (surrogate, "pushed_opinions", surrogate_kernels.pushed_opinions),
        (rec_env.kernels, "observe_reactions", kernels.observe_reactions),
        (kernels, "count_reactions", kernels.count_reactions),
    ]

    def recorder(name: str, function: Any) -> Any:
        def record(*args: Any) -> Any:
            calls[name] = copy.deepcopy(args)
            return function(*args)

        return record

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the action-space size warning at 1M users
        env = RecEnv(num_users=users, rounds=4)
    env.reset(seed=seed)
    action = np.full(env.slate_size, env.no_op, np.int64)
    env.step(action)
    for module, name, function in targets:
        setattr(module, name, recorder(name, function))
    try:
        env.step(action)
    finally:
        for module, name, function in targets:
            setattr(module, name, function)
    env.close()
    return calls


def _timed(run: Any, clock: Any) -> float:
    start = clock()
    run()
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()

    from agent_models import surrogate_kernels
    from policysim_infra.progress import progress_bar
    from socialenv.core import kernels

    kernels.set_threads(1)
    calls = _record(args.users, args.seed)

    def on(backend: str, run: Any) -> Any:
        def switched() -> Any:
            surrogate_kernels.use_backend(backend)
            try:
                return run()
            finally:
                surrogate_kernels.use_backend("numba")

        return switched

    def noisy(backend: str) -> Any:
        base, rows, scale, rng = calls["noisy_unit_rows"]
        return on(
            backend,
            lambda: surrogate_kernels.noisy_unit_rows(base, rows, scale, copy.deepcopy(rng)),
        )

    def pushed(backend: str) -> Any:
        opinion, who, moved, step = calls["pushed_opinions"]
        return on(backend, lambda: surrogate_kernels.pushed_opinions(opinion, who, moved, step))

    def observed(backend: str) -> Any:
        # the history arrays updated in place, round after round: the same work each time
        recorded = calls["observe_reactions"]
        if backend == "numpy":
            return lambda: kernels.observe_reactions_numpy(*recorded)
        return lambda: kernels.observe_reactions(*recorded)

    passes = {"noisy_unit_rows": noisy, "pushed_opinions": pushed, "observe_reactions": observed}
    rows: list[dict[str, Any]] = []
    for name, make in progress_bar(
        list(passes.items()), desc="passes", unit="pass", quiet=args.quiet
    ):
        runs = {"compiled": make("numba"), "numpy": make("numpy")}
        first = {side: run() for side, run in runs.items()}  # untimed: compilation, touches
        if name == "observe_reactions":  # in place: run both on copies of the recorded state
            recorded = calls[name]
            states = {side: {k: a.copy() for k, a in recorded[7].items()} for side in runs}
            kernels.observe_reactions(*recorded[:7], states["compiled"])
            kernels.observe_reactions_numpy(*recorded[:7], states["numpy"])
            first = {
                side: np.concatenate([states[side][k].view(np.uint8) for k in sorted(recorded[7])])
                for side in runs
            }
        identical = bool(
            np.array_equal(first["compiled"].view(np.uint8), first["numpy"].view(np.uint8))
        )
        seconds: dict[str, list[float]] = {side: [] for side in runs}
        for i in range(args.repeats):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for side in order:
                seconds[side].append(_timed(runs[side], time.process_time))
        rows.append(
            {
                "pass": name,
                "clock": "cpu, 1 thread",
                "identical": identical,
                "seconds": seconds,
                "median_s": {side: statistics.median(v) for side, v in seconds.items()},
                "numpy_over_compiled": median_interval(
                    [n / c for n, c in zip(seconds["numpy"], seconds["compiled"], strict=True)]
                ),
            }
        )
    post, kind, kinds, counters = calls["count_reactions"]
    counting = {  # the counters incremented in place, call after call: the same work
        "serial": lambda: kernels._compiled["count_reactions"](post, kind, kinds, counters, 1),
        f"{args.threads} threads": lambda: kernels._compiled_parallel["count_reactions"](
            post, kind, kinds, counters, args.threads
        ),
    }
    kernels.set_threads(args.threads)
    seconds = {side: [] for side in counting}
    for run in counting.values():
        run()
    for i in range(args.repeats):
        for side in list(counting) if i % 2 == 0 else list(reversed(counting)):
            seconds[side].append(_timed(counting[side], time.perf_counter))
    kernels.set_threads(1)
    rows.append(
        {
            "pass": "count_reactions",
            "clock": "wall",
            "seconds": seconds,
            "median_s": {side: statistics.median(v) for side, v in seconds.items()},
        }
    )
    for row in rows:
        medians = ", ".join(f"{side} {1e3 * s:.1f} ms" for side, s in row["median_s"].items())
        same = {True: ", identical", False: ", DIFFERENT", None: ""}[row.get("identical")]
        print(f"{row['pass']:>18} ({row['clock']}): {medians}{same}")
    sizes = {
        "posters": len(calls["noisy_unit_rows"][1]),
        "reactions": len(calls["pushed_opinions"][1]),
        "replies": len(calls["observe_reactions"][3]),
    }
    write_result("twin_pairs.py", args.out, {"users": args.users, "sizes": sizes, "rows": rows})


if __name__ == "__main__":
    main()
