"""Compiled kernels of this tree against the same kernels of another revision, on the same
recorded inputs, in one process.

    python benchmarks/kernel_pairs.py --compare f12743f
    python benchmarks/kernel_pairs.py --compare f12743f --users 200000 --kernels relational_draws
    python benchmarks/kernel_pairs.py --compare f12743f --threads 2 --out DIR/kernels_2t.json

A 1M step's CPU time moves by 15-20% between processes on the shared development VM, more than
most single kernel changes. Here one process resets ``RecEnv(num_users=N)`` (``--seed``), plays
one warm-up step, then records the arguments of the calls of the named compiled kernels
(``socialenv.core.kernels``; default: every kernel the recorded phases call) during a second
reset (``--phase reset``), or a step with random slates (``--phase step``), or both (default).
At most ``--calls`` calls per kernel and phase are kept: copies (one per distinct array, up to
``--max-gib`` in all; calls beyond are left out and counted per kernel), and every timed call
gets fresh copies of them, so in-place kernels meet the same inputs each time.

The other revision's ``socialenv/core/_numba_kernels.py`` (from the tree ``git archive``
extracts, as ``env_throughput.py --compare`` does, or from a source tree given as a folder; the
module imports NumPy, numba and this tree's ``socialenv``) is loaded beside this tree's under
another name. For every recorded kernel both versions run on copies of the same inputs,
``--repeats`` times, the two alternating (this one first on even repeats), each timed with
``time.process_time`` and ``time.perf_counter`` around its calls only; one untimed call of each
first (compilation, caches). The result per kernel: the CPU and wall seconds over its recorded
calls per repeat, their medians, the ratios other / this (printed: CPU on one thread, wall on
more, where CPU time also counts the threads that wait), and whether the two gave bit-identical
outputs (the returned arrays and the arguments after the call; a kernel whose output has entries
it leaves unwritten, which then differ from run to run, says so instead). A kernel missing from
the other revision, or whose arguments it does not take, is listed as such.

``--threads N``: each version's threaded twin where it has one (``PARALLEL_KERNELS``), on N of
numba's threads; the serial versions otherwise.

``--env-pairs P``: also whole resets and steps of one ``RecEnv`` of ``--users`` users in this
process, P of each per version, the two versions' kernel tables swapped in turn before each (the
other's kernels where it has them, this tree's for the rest; this one first in even pairs).
Every kernel gives the same bits in both versions, so the episode's course does not depend on
which ran: the pairs meet the same world. Per phase: the CPU and wall seconds, their medians,
and the median of the per-pair ratios other / this with a 95% bootstrap interval. ``--env-only``
skips the kernel recording.

Results go to ``--out`` (default ``runs/kernel_pairs/<UTC time>.json``, not tracked); publish a
run by passing ``--out benchmarks/results/...`` deliberately.
"""

from __future__ import annotations

import argparse
import copy
import gc
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from env_throughput import (
    ROOT,
    THREAD_VARS,
    _commit,
    _source_tree,
    warmed_rec_env,
    write_result,
)

KERNEL_MODULE = "socialenv/core/_numba_kernels.py"


def load_kernels(revision: str, folder: Path) -> tuple[Any, str]:
    """The compiled-kernel module of another revision (or of the source tree at that path),
    loaded as a module of its own (its numba cache beside it, in ``folder``), and the
    revision's short commit."""
    try:
        tree = Path(_source_tree(revision))
    except ValueError as err:
        raise ValueError(
            f"--compare={revision!r} is not allowed: a source folder or a git revision of {ROOT}"
        ) from err
    module_file = tree / KERNEL_MODULE
    if not module_file.is_file():
        raise ValueError(f"--compare={revision!r} is not allowed: it has no {KERNEL_MODULE}")
    commit = str(_commit(tree))
    return _load(module_file.read_text(), re.sub(r"\W", "_", commit), folder), commit


#: Modules a revision's kernel file imports that have moved since: its imports are pointed at
#: their place in this tree.
MOVED_MODULES = {"socialenv.core._prefetch": "policysim_infra._prefetch"}


def _load(source: str, tag: str, folder: Path) -> Any:
    name = f"policysim_kernels_{tag}"
    path = folder / f"{name}.py"
    for before, now in MOVED_MODULES.items():
        source = source.replace(f"from {before} import", f"from {now} import")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache locates a function's module by name
    spec.loader.exec_module(module)
    return module


def _is_kernel_argument(value: Any) -> bool:
    import numpy as np

    return not isinstance(value, np.random.Generator)


def record_calls(
    num_users: int,
    seed: int,
    phases: list[str],
    names: list[str] | None,
    calls: int,
    max_bytes: float,
    left_out: dict[tuple[str, str], int],
) -> dict[str, list[tuple[str, tuple[Any, ...]]]]:
    """``{kernel: [(phase, arguments), ...]}``: the compiled kernels' calls during a second reset
    and one step after a warm-up step, at most ``calls`` per kernel and phase, their arrays
    copied up to ``max_bytes`` in all (a call that would go beyond is counted in ``left_out``
    instead). Kernels that draw from a generator are left out (a recorded generator would
    replay other draws)."""
    import numpy as np

    from socialenv.core import kernels

    if kernels.BACKEND != "numba":
        raise RuntimeError("kernel_pairs.py needs numba (POLICYSIM_KERNELS is not numba)")
    env, rng = warmed_rec_env(num_users, seed)
    recorded: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
    phase = ["reset"]
    tables = (kernels._active, kernels._compiled_parallel)
    originals = [dict(table) for table in tables]
    wanted = set(names) if names else set(originals[0])
    if wanted - set(originals[0]):
        raise ValueError(
            f"--kernels {sorted(wanted - set(originals[0]))} is not allowed: one of "
            f"{sorted(originals[0])}"
        )

    copies: dict[tuple[Any, ...], Any] = {}  # one copy of each distinct array recorded
    used = [0]

    def key_of(value: np.ndarray) -> tuple[Any, ...]:
        digest = hashlib.blake2b(np.ascontiguousarray(value).data).digest()
        return (value.shape, value.dtype.str, digest)

    def arrays(value: Any) -> list[np.ndarray]:
        if isinstance(value, np.ndarray):
            return [value]
        if isinstance(value, tuple):
            return [array for part in value for array in arrays(part)]
        return []

    def kept_copy(value: Any, keys: dict[int, tuple[Any, ...]]) -> Any:
        if isinstance(value, tuple):
            return tuple(kept_copy(part, keys) for part in value)
        if not isinstance(value, np.ndarray):
            return copy.deepcopy(value)
        key = keys[id(value)]
        if key not in copies:
            copies[key] = value.copy()
            used[0] += value.nbytes
        return copies[key]

    def recording(name: str, kernel: Any) -> Any:
        def call(*args: Any) -> Any:
            kept = [entry for entry in recorded.get(name, []) if entry[0] == phase[0]]
            wanted_calls = len(kept) + left_out.get((name, phase[0]), 0)
            if phase[0] in phases and all(map(_is_kernel_argument, args)) and wanted_calls < calls:
                keys = {id(a): key_of(a) for a in arrays(args)}  # each array hashed once
                new = {key: a.nbytes for a in arrays(args) if (key := keys[id(a)]) not in copies}
                if used[0] + sum(new.values()) <= max_bytes:
                    kept_args = tuple(kept_copy(a, keys) for a in args)
                    recorded.setdefault(name, []).append((phase[0], kept_args))
                else:
                    left_out[(name, phase[0])] = left_out.get((name, phase[0]), 0) + 1
            return kernel(*args)

        return call

    for table, original in zip(tables, originals, strict=True):
        for name, kernel in original.items():
            if name in wanted:
                table[name] = recording(name, kernel)
    try:
        if "reset" in phases:
            env.reset(seed=seed)
            phase[0] = "warm-up"  # the step after a reset: not recorded
            env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
        phase[0] = "step"
        env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
    finally:
        for table, original in zip(tables, originals, strict=True):
            table.update(original)
    return recorded


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return bool(a == b) or (a != a and b != b)


def _identical(this: Any, other: Any, calls: list[tuple[Any, ...]]) -> bool | str:
    """Whether both versions give the same bits on every call (what they return and the
    arguments after the call), call by call on fresh copies (untimed: this also compiles
    them). This version runs twice: an output with entries the kernel leaves unwritten
    (``np.empty``) differs from itself, and is reported so."""
    same: bool | str = True
    for args in calls:
        here, again, there = (
            (kernel(*(fresh := copy.deepcopy(args))), fresh) for kernel in (this, this, other)
        )
        if not _same(here, again):
            return "unwritten entries: this version's output differs from itself"
        same = same and _same(again, there)
        del here, again, there
    return same


def _timed(kernel: Any, calls: list[tuple[Any, ...]]) -> tuple[float, float]:
    """CPU and wall seconds of ``kernel`` over ``calls``, each on a fresh copy of its arguments
    (the copy not timed)."""
    cpu = wall = 0.0
    for args in calls:
        fresh = copy.deepcopy(args)
        start, start_wall = time.process_time(), time.perf_counter()
        kernel(*fresh)
        cpu += time.process_time() - start
        wall += time.perf_counter() - start_wall
        del fresh
    return cpu, wall


def compare(
    recorded: dict[str, list[tuple[str, tuple[Any, ...]]]],
    other: Any,
    threads: int,
    repeats: int,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    from policysim_infra.progress import progress_bar
    from socialenv.core import _numba_kernels as this

    rows = []
    pairs = [
        (name, phase, calls)
        for name, entries in sorted(recorded.items())
        for phase in ("reset", "step")
        if (calls := [args for entry_phase, args in entries if entry_phase == phase])
    ]
    for name, phase, calls in progress_bar(pairs, desc="kernels", unit="kernel", quiet=quiet):
        row: dict[str, Any] = {"kernel": name, "phase": phase, "calls": len(calls)}
        rows.append(row)
        versions = []
        for module in (this, other):
            tables = [module.KERNELS] + ([module.PARALLEL_KERNELS] if threads > 1 else [])
            versions.append(next((t[name] for t in reversed(tables) if name in t), None))
        if versions[1] is None:
            row["other"] = "not in the other revision"
            continue
        try:
            row["identical"] = _identical(versions[0], versions[1], calls)
        except Exception as err:  # noqa: BLE001 - a signature the other revision lacks
            row["other"] = f"does not take these arguments: {type(err).__name__}: {err}"
            continue
        seconds: dict[str, dict[str, list[float]]] = {"cpu": {}, "wall": {}}
        for repeat in range(repeats):
            order = [("this", versions[0]), ("other", versions[1])]
            for label, kernel in order if repeat % 2 == 0 else order[::-1]:
                for clock, value in zip(("cpu", "wall"), _timed(kernel, calls), strict=True):
                    seconds[clock].setdefault(label, []).append(value)
        for clock, values in seconds.items():
            median = {label: sorted(v)[len(v) // 2] for label, v in values.items()}
            row[f"{clock}_s"] = values
            row[f"median_{clock}_s"] = median
            row[f"other_over_this_{clock}"] = (
                median["other"] / median["this"] if median["this"] else None
            )
    return rows


def env_pairs(
    num_users: int, seed: int, pairs: int, other: Any, quiet: bool = False
) -> dict[str, Any]:
    """Resets, then steps with random slates, of one ``RecEnv``, ``pairs`` of each per version,
    alternating this tree's kernel tables and the other revision's (see the module docstring)."""
    import numpy as np
    from scipy.stats import bootstrap

    from policysim_infra.progress import progress_bar
    from socialenv.core import kernels
    from socialenv.envs.rec import RecEnv

    if kernels.BACKEND != "numba":
        raise RuntimeError("kernel_pairs.py needs numba (POLICYSIM_KERNELS is not numba)")
    serial, parallel = kernels._active, kernels._compiled_parallel
    tables = {
        "this": (dict(serial), dict(parallel)),
        "other": (
            {**serial, **{k: v for k, v in other.KERNELS.items() if k in serial}},
            {
                **parallel,
                **{
                    k: v for k, v in getattr(other, "PARALLEL_KERNELS", {}).items() if k in parallel
                },
            },
        ),
    }

    def use(label: str) -> None:
        serial.clear()
        serial.update(tables[label][0])
        parallel.clear()
        parallel.update(tables[label][1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the action-space size warning at 1M users
        env = RecEnv(num_users=num_users, rounds=2 * pairs + 3)
    rng = np.random.default_rng(seed)
    seconds: dict[str, dict[str, dict[str, list[float]]]] = {
        phase: {clock: {"this": [], "other": []} for clock in ("cpu", "wall")}
        for phase in ("reset", "step")
    }
    try:
        for label in ("this", "other"):  # untimed: compilation and first touches
            use(label)
            try:
                env.reset(seed=seed)
                env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
            except Exception as err:  # noqa: BLE001 - a kernel whose arguments changed since
                raise RuntimeError(
                    f"--env-pairs: the {label} version's kernels do not run with this tree's "
                    f"calls ({type(err).__name__}: {err}); compare against a revision whose "
                    "kernels take the same arguments"
                ) from err
        use("this")
        env.reset(seed=seed)
        jobs = [("reset", i) for i in range(pairs)] + [("step", i) for i in range(pairs)]
        for phase, i in progress_bar(jobs, desc="env pairs", unit="pair", quiet=quiet):
            if phase == "step" and i == 0:
                env.reset(seed=seed)
            for label in ("this", "other") if i % 2 == 0 else ("other", "this"):
                use(label)
                cpu, wall = time.process_time(), time.perf_counter()
                if phase == "reset":
                    env.reset(seed=seed)
                else:
                    env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
                seconds[phase]["cpu"][label].append(time.process_time() - cpu)
                seconds[phase]["wall"][label].append(time.perf_counter() - wall)
    finally:
        use("this")
    summary: dict[str, Any] = {"pairs": pairs, "seconds": seconds}
    for phase, clocks in seconds.items():
        for clock, values in clocks.items():
            this, theirs = np.array(values["this"]), np.array(values["other"])
            ratio = theirs / this
            entry = {
                "median_this_s": float(np.median(this)),
                "median_other_s": float(np.median(theirs)),
                "other_over_this_median_of_pairs": float(np.median(ratio)),
            }
            if pairs > 1:
                ci = bootstrap(
                    (ratio,), np.median, confidence_level=0.95, random_state=0
                ).confidence_interval
                entry["ci95"] = [float(ci.low), float(ci.high)]
            summary[f"{phase}_{clock}"] = entry
    return summary


def main() -> None:
    from policysim_infra.progress import add_quiet_option

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--compare", required=True, help="a git revision of this repository, or a source tree"
    )
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phase", nargs="+", choices=["reset", "step"], default=["reset", "step"])
    parser.add_argument("--kernels", nargs="+", default=None, help="kernel names (default: all)")
    parser.add_argument("--calls", type=int, default=16, help="calls kept per kernel and phase")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--max-gib",
        type=float,
        default=6.0,
        help="memory for the recorded arguments; calls beyond it are left out and counted",
    )
    parser.add_argument(
        "--env-pairs",
        type=int,
        default=0,
        help="also this many whole resets and steps per version, alternating the kernel tables",
    )
    parser.add_argument(
        "--env-only", action="store_true", help="no kernel recording: only --env-pairs"
    )
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    for field in ("users", "calls", "repeats", "threads"):
        if getattr(args, field) < 1:
            raise ValueError(f"--{field}={getattr(args, field)} is not allowed: an integer >= 1")
    if args.env_pairs < 0 or (args.env_only and args.env_pairs < 1):
        raise ValueError(
            f"--env-pairs={args.env_pairs} is not allowed: an integer >= 0 (>= 1 with --env-only)"
        )
    for var in THREAD_VARS:
        os.environ[var] = "1"  # BLAS and torch: one thread; numba: below
    os.environ["NUMBA_NUM_THREADS"] = str(max(args.threads, 1))
    sys.path.insert(0, str(ROOT))
    import numba

    from socialenv.core import kernels

    with tempfile.TemporaryDirectory(prefix="policysim-kernels-") as folder:
        other, commit = load_kernels(args.compare, Path(folder))
        left_out: dict[tuple[str, str], int] = {}
        recorded = (
            {}
            if args.env_only
            else record_calls(
                args.users,
                args.seed,
                args.phase,
                args.kernels,
                args.calls,
                args.max_gib * 2**30,
                left_out,
            )
        )
        kernels.set_threads(args.threads)
        numba.set_num_threads(args.threads)
        gc.collect()  # the recording's env
        rows = compare(recorded, other, args.threads, args.repeats, args.quiet)
        del recorded
        gc.collect()
        env = (
            env_pairs(args.users, args.seed, args.env_pairs, other, args.quiet)
            if args.env_pairs
            else None
        )
    for row in rows:
        row["calls_left_out_for_memory"] = left_out.pop((row["kernel"], row["phase"]), 0)
    for (name, phase), count in sorted(left_out.items()):  # no call of theirs was recorded
        rows.append(
            {
                "kernel": name,
                "phase": phase,
                "calls": 0,
                "calls_left_out_for_memory": count,
                "other": "every call left out (--max-gib)",
            }
        )
    for row in rows:
        if "median_cpu_s" in row:
            clock = "cpu" if args.threads == 1 else "wall"
            m = row[f"median_{clock}_s"]
            print(
                f"{row['phase']:5s} {row['kernel']:28s} {row['calls']:3d} calls: "
                f"{m['this'] * 1e3:8.1f} ms here, {m['other'] * 1e3:8.1f} ms at {commit} "
                f"({clock}, ×{row[f'other_over_this_{clock}']:.2f}); "
                f"identical: {row['identical']}"
                + (f"; {n} left out" if (n := row["calls_left_out_for_memory"]) else "")
            )
        else:
            print(f"{row['phase']:5s} {row['kernel']:28s} {row['other']}")
    if env is not None:
        clock = "cpu" if args.threads == 1 else "wall"
        for phase in ("reset", "step"):
            e = env[f"{phase}_{clock}"]
            ci = e.get("ci95")
            print(
                f"whole {phase:5s} ({env['pairs']} pairs): {e['median_this_s']:.3f} s here, "
                f"{e['median_other_s']:.3f} s at {commit} ({clock}, ×"
                f"{e['other_over_this_median_of_pairs']:.3f}"
                + (f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" if ci else "")
                + ")"
            )
    write_result(
        "kernel_pairs",
        args.out,
        {
            "command": " ".join(sys.argv),
            "users": args.users,
            "threads": args.threads,
            "other": commit,
            "rows": rows,
            "env_pairs": env,
        },
    )


if __name__ == "__main__":
    main()
