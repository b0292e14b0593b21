"""Thread scaling of a Rec step inside one process: the same env stepped at each thread count
in turn, so the counts share the process, the world and the machine's minutes.

    python benchmarks/threads_in_process.py --users 1000000 --threads 1 2 --rounds 6
    python benchmarks/threads_in_process.py --users 1000000 --threads 1 2 4 8 16 --rounds 4

Across fresh processes a 1M step's CPU time varies by 15-20% on the shared development VM,
as much as the effect of a second thread; ``env_throughput.py --threads 1 2`` pays that noise
in every ratio. Here one process resets ``RecEnv(num_users=N)`` and steps it with random
slates, switching the thread count between steps (``socialenv.core.kernels.set_threads``,
torch's threads and the BLAS libraries through threadpoolctl). A benchmark round runs one step
at every count, in order on even rounds and in reverse on odd ones, so the world's growth and
slow minutes fall on every count alike. Trajectories are bit-identical at any thread count
(``benchmarks/trajectory_digest.py`` checks it), so every count does the same kind of work.

Reported per count: the median wall and CPU seconds per step; per count above the first, the
wall speed-up of each round (the first count's step over this count's) with its median and a
95% bootstrap interval over the rounds (``scipy.stats.bootstrap``). One warm-up round first
(numba's compiled kernels load, the thread pools start). The process starts numba with as
many threads as the largest count (``NUMBA_NUM_THREADS``).

``--compare TREE`` (a source folder or a git revision, as in ``env_throughput.py``) measures
whether a change moved the scaling: ``--processes`` fresh processes of each package in pairs,
the other tree's first in even pairs and this one's in odd ones (so both meet the same minutes
of a shared machine, and each runs first as often as second; give an even ``--processes``), each
running the measurement above. Per package it pools the rounds' speed-ups (median and 95%
bootstrap interval), and it gives the difference of the two medians with its own interval
(rounds resampled within each package): how far apart the two codes scale, beside how much
one process differs from the next.

``--compare-env VAR=VALUE ...`` compares in the same way this tree run with those environment
variables set from the process's start (the "other" side) against this tree run without them:
e.g. ``OMP_WAIT_POLICY=PASSIVE`` or ``NUMBA_THREADING_LAYER=workqueue``, which the runtimes read
once, when they load. (Without either OpenMP wait variable the package itself sets
``OMP_WAIT_POLICY=PASSIVE`` when threads are opted into: compare against ``GOMP_SPINCOUNT=300000``,
libgomp's own default spin. Each run records the variables it inherited, ``environment``, and
those the runtime ran with, ``openmp_wait``.)

Results go to ``--out`` (default ``runs/threads_in_process/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from env_throughput import OPENMP_WAIT, ROOT, _source_tree, balanced_order, write_result


def use_threads(count: int) -> None:
    """Run the package's kernels and row blocks, torch and the BLAS libraries on ``count``
    threads (numba must have been started with at least that many)."""
    from socialenv.core import kernels

    # first: with more than one thread, before torch loads the OpenMP runtime numba shares
    # (kernels.set_threads lets its idle threads sleep, as POLICYSIM_THREADS does at import)
    kernels.set_threads(count)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(count)
    threadpool_limits(count)


def inherited_settings() -> dict[str, str]:
    """The environment variables a run inherits that change how it runs (glibc's MALLOC_*,
    the package's, numba's, OpenMP's and OpenBLAS's)."""
    return {
        var: value
        for var, value in sorted(os.environ.items())
        if var.startswith(("MALLOC_", "POLICYSIM_", "NUMBA_", "OMP_", "GOMP_", "OPENBLAS_"))
    }


def measure(users: int, threads: list[int], rounds: int, seed: int, quiet: bool) -> dict[str, Any]:
    """Reset, one warm-up round, ``rounds`` timed rounds of one step per thread count."""
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(threads)))
    import numpy as np

    from policysim_infra.progress import progress_bar
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=users, rounds=(rounds + 1) * len(threads) + 1)
    use_threads(max(threads))  # the most first: see use_threads
    use_threads(threads[0])
    wall, cpu = time.perf_counter(), time.process_time()
    env.reset(seed=seed)
    reset = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
    rng = np.random.default_rng(seed)
    steps: list[dict[str, Any]] = []
    for r in progress_bar(range(rounds + 1), unit="round", quiet=quiet):
        for count in balanced_order(threads, r):
            use_threads(count)
            action = rng.integers(0, env.num_arms + 1, env.slate_size)
            wall, cpu = time.perf_counter(), time.process_time()
            env.step(action)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if r > 0:  # round 0 warms up every count
                steps.append({"round": r, "threads": count, "wall_s": wall, "cpu_s": cpu})
    return {"reset": reset, "steps": steps}


def summarize(steps: list[dict[str, Any]], threads: list[int]) -> dict[str, Any]:
    """Per count the median step; per count above the first the paired speed-up's median and
    95% bootstrap interval over rounds."""
    import numpy as np
    from scipy.stats import bootstrap

    wall = {c: {s["round"]: s["wall_s"] for s in steps if s["threads"] == c} for c in threads}
    out: dict[str, Any] = {}
    for count in threads:
        mine = [s for s in steps if s["threads"] == count]
        entry: dict[str, Any] = {
            "steps": len(mine),
            "wall_s_median": float(np.median([s["wall_s"] for s in mine])),
            "cpu_s_median": float(np.median([s["cpu_s"] for s in mine])),
        }
        if count != threads[0]:
            speedups = np.array([wall[threads[0]][r] / wall[count][r] for r in sorted(wall[count])])
            entry["speedup_wall_per_round"] = speedups.tolist()
            entry["speedup_wall_median"] = float(np.median(speedups))
            if len(speedups) >= 3:
                ci = bootstrap(
                    (speedups,), np.median, confidence_level=0.95, random_state=0
                ).confidence_interval
                entry["speedup_wall_ci95"] = [float(ci.low), float(ci.high)]
        out[str(count)] = entry
    return out


#: Set by :func:`compare` for its processes: the source tree whose package they measure (put
#: first on ``sys.path`` before anything of the package is imported; ``env_throughput`` puts
#: this script's own tree there when it is imported)
PACKAGE_TREE_VAR = "BENCHMARK_PACKAGE_TREE"


def main() -> None:
    tree = os.environ.get(PACKAGE_TREE_VAR)
    if tree:
        sys.path.insert(0, tree)
    from policysim_infra.progress import add_quiet_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds (one step per count)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--compare",
        default=None,
        help="also measure the package of this source tree or git revision, in fresh "
        "processes alternating with this one's; the summary gives both codes' pooled "
        "speed-ups and their difference",
    )
    parser.add_argument(
        "--compare-env",
        nargs="+",
        default=None,
        metavar="VAR=VALUE",
        help="instead of --compare: this tree with these environment variables set, in fresh "
        "processes alternating with this tree without them",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=2,
        help="with --compare or --compare-env: processes per side",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    if min(args.threads) < 1 or len(set(args.threads)) != len(args.threads):
        raise ValueError(f"--threads={args.threads} is not allowed: distinct integers >= 1")
    if args.rounds < 1 or args.users < 1:
        raise ValueError(f"--rounds={args.rounds}, --users={args.users}: both must be >= 1")
    if args.processes < 1:
        raise ValueError(f"--processes={args.processes} is not allowed: an integer >= 1")
    if args.compare is not None and args.compare_env is not None:
        raise ValueError("--compare and --compare-env are not allowed together: give one")
    if args.compare is not None or args.compare_env is not None:
        compare(args)
        return
    load_before = os.getloadavg()
    inherited = inherited_settings()  # before the package sets any of its own
    result = measure(args.users, args.threads, args.rounds, args.seed, args.quiet)
    summary = summarize(result["steps"], args.threads)
    for count, entry in summary.items():
        speedup = (
            f"; speed-up over {args.threads[0]} thread(s) ×{entry['speedup_wall_median']:.2f}"
            + (
                " (95% CI {:.2f}-{:.2f})".format(*entry["speedup_wall_ci95"])
                if "speedup_wall_ci95" in entry
                else ""
            )
            if "speedup_wall_median" in entry
            else ""
        )
        print(
            f"{args.users:,} users, {count} threads: {entry['wall_s_median']:.3f} s wall, "
            f"{entry['cpu_s_median']:.3f} s CPU per step (median of {entry['steps']}){speedup}",
            flush=True,
        )
    from trajectory_digest import library_versions

    write_result(
        "threads_in_process",
        args.out,
        {
            "command": "python benchmarks/threads_in_process.py "
            f"--users {args.users} --threads {' '.join(map(str, args.threads))} "
            f"--rounds {args.rounds} --seed {args.seed}",
            "machine": {"load_before": load_before},
            "environment": inherited,
            "package_file": sys.modules["socialenv"].__file__,
            # what the OpenMP runtime ran with: the package sets OMP_WAIT_POLICY=PASSIVE when
            # threads are opted into and neither variable is set (kernels.set_threads)
            "openmp_wait": {var: os.environ[var] for var in OPENMP_WAIT if var in os.environ},
            "versions": library_versions(),
            "reset": result["reset"],
            "summary": summary,
            "steps": result["steps"],
        },
    )


def _median_difference(a: Any, b: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.median(a, axis=axis) - np.median(b, axis=axis)


def compare_summary(runs: dict[str, list[dict[str, Any]]], threads: list[int]) -> dict[str, Any]:
    """``runs``: per code ("this", "other") the result files of its processes. Per code and
    thread count above the first: the pooled per-round speed-ups' median and 95% bootstrap
    interval, each process's median; and this code's median minus the other's, with a 95%
    bootstrap interval resampling the rounds of each code on their own."""
    import numpy as np
    from scipy.stats import bootstrap

    out: dict[str, Any] = {}
    for count in map(str, threads[1:]):
        pooled = {
            code: np.concatenate(
                [run["summary"][count]["speedup_wall_per_round"] for run in results]
            )
            for code, results in runs.items()
        }
        entry: dict[str, Any] = {}
        for code, speedups in pooled.items():
            ci = bootstrap(
                (speedups,), np.median, confidence_level=0.95, random_state=0
            ).confidence_interval
            entry[code] = {
                "rounds": len(speedups),
                "speedup_wall_median": float(np.median(speedups)),
                "speedup_wall_ci95": [float(ci.low), float(ci.high)],
                "per_process_median": [
                    run["summary"][count]["speedup_wall_median"] for run in runs[code]
                ],
            }
        ci = bootstrap(
            (pooled["this"], pooled["other"]),
            _median_difference,
            confidence_level=0.95,
            random_state=0,
        ).confidence_interval
        entry["difference"] = {
            "this_minus_other": float(_median_difference(pooled["this"], pooled["other"])),
            "ci95": [float(ci.low), float(ci.high)],
        }
        out[count] = entry
    return out


def _variables(pairs: list[str]) -> dict[str, str]:
    """``VAR=VALUE`` pairs as a dict (a clear error for anything else)."""
    out: dict[str, str] = {}
    for pair in pairs:
        var, sep, value = pair.partition("=")
        if not sep or not var or not var.replace("_", "").isalnum():
            raise ValueError(
                f"--compare-env {pair!r} is not allowed: VAR=VALUE, VAR made of letters, "
                "digits and _"
            )
        out[var] = value
    return out


def compare(args: argparse.Namespace) -> None:
    """``--compare`` / ``--compare-env``: the measurement in fresh processes of both sides,
    alternating."""
    from policysim_infra.progress import progress_bar

    variables = _variables(args.compare_env or [])
    cleared = {var: value for var, value in os.environ.items() if var not in variables}
    if args.compare_env is not None:
        trees = {"other": str(ROOT), "this": str(ROOT)}
        settings = {"other": {**cleared, **variables}, "this": cleared}
    else:
        try:
            trees = {"other": _source_tree(args.compare), "this": str(ROOT)}
        except ValueError as err:
            raise ValueError(
                f"--compare={args.compare!r} is not allowed: a source folder or a git revision "
                f"of {ROOT}"
            ) from err
        settings = {"other": dict(os.environ), "this": dict(os.environ)}
    runs: dict[str, list[dict[str, Any]]] = {"other": [], "this": []}
    order = [
        code for pair in range(args.processes) for code in balanced_order(["other", "this"], pair)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for index, code in enumerate(progress_bar(order, unit="process", quiet=args.quiet)):
            out = Path(scratch) / f"{index}.json"
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--users",
                str(args.users),
                "--threads",
                *map(str, args.threads),
                "--rounds",
                str(args.rounds),
                "--seed",
                str(args.seed),
                "--quiet",
                "--out",
                str(out),
            ]
            env = {**settings[code], PACKAGE_TREE_VAR: trees[code]}
            subprocess.run(command, env=env, cwd=trees[code], check=True)
            run = json.loads(out.read_text())
            run.pop("commit", None)  # the script's tree, not the package's
            if not Path(run["package_file"]).resolve().is_relative_to(Path(trees[code]).resolve()):
                raise RuntimeError(
                    f"the {code} side imported {run['package_file']}, not the package of "
                    f"{trees[code]}"
                )
            runs[code].append({**run, "package_tree": trees[code]})
    summary = compare_summary(runs, args.threads)
    labels = (
        trees
        if args.compare_env is None
        else {
            "other": " ".join(args.compare_env),
            "this": "without " + ", ".join(variables),
        }
    )
    for count, entry in summary.items():
        for code in ("other", "this"):
            mine = entry[code]
            print(
                f"{code} ({labels[code]}), {count} threads over {args.threads[0]}: "
                f"×{mine['speedup_wall_median']:.2f} (95% CI "
                "{:.2f}-{:.2f}".format(*mine["speedup_wall_ci95"])
                + f"; {mine['rounds']} rounds, per process "
                + ", ".join(f"×{m:.2f}" for m in mine["per_process_median"])
                + ")"
            )
        diff = entry["difference"]
        print(
            f"this - other: {diff['this_minus_other']:+.2f} (95% CI {{:+.2f}} to {{:+.2f}})".format(
                *diff["ci95"]
            )
        )
    from trajectory_digest import library_versions

    write_result(
        "threads_in_process",
        args.out,
        {
            "command": "python benchmarks/threads_in_process.py "
            f"--users {args.users} --threads {' '.join(map(str, args.threads))} "
            f"--rounds {args.rounds} --seed {args.seed} "
            + (
                f"--compare {args.compare} "
                if args.compare_env is None
                else f"--compare-env {' '.join(args.compare_env)} "
            )
            + f"--processes {args.processes}",
            "trees": trees,
            "other_variables": variables,
            "versions": library_versions(),
            "summary": summary,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
