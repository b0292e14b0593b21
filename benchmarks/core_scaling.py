"""What more threads can give on this machine: the speed-up of three plain kernels, the kinds of
work a round is made of, at each thread count.

    python benchmarks/core_scaling.py --threads 1 2
    python benchmarks/core_scaling.py --threads 1 2 4 8 16 --out DIR/core_scaling.json

A round's time goes to arithmetic, to rows fetched at random (embedding rows, graph
neighbours) and to arrays streamed through (reading one, writing another). On a machine whose
memory system does not scale with its cores, no change to the round's code can make it scale
further than these kernels, so this is the ceiling to read the round's thread scaling against
(``threads_in_process.py``). Each kernel is a numba ``prange`` loop over independent items:

- ``compute``: 2,000 multiply-adds and square roots per item, no memory traffic;
- ``random_rows``: 128-byte rows (32 float32, the size of a user embedding row) gathered at
  random from a 1 GiB table and summed;
- ``stream``: ``b = 1.5 * a + 1`` over 512 MiB arrays, already faulted in.

Each repeat runs every kernel at every thread count, the counts in turn (reversed on odd
repeats), after one warm-up run; reported per kernel and count: the median seconds and the
speed-up over the first count. Results go to ``--out`` (default
``runs/core_scaling/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any


def kernels() -> dict[str, Any]:
    import numba
    import numpy as np

    @numba.njit(parallel=True, nogil=True)
    def compute(out: np.ndarray) -> None:
        for i in numba.prange(len(out)):
            x = 0.0
            for j in range(2000):
                x = x * 0.999999 + np.sqrt(j + i % 7)
            out[i] = x

    @numba.njit(parallel=True, nogil=True)
    def random_rows(table: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        for i in numba.prange(len(rows)):
            r = rows[i]
            s = np.float32(0.0)
            for k in range(table.shape[1]):
                s += table[r, k]
            out[i] = s

    @numba.njit(parallel=True, nogil=True)
    def stream(a: np.ndarray, b: np.ndarray) -> None:
        for i in numba.prange(len(a)):
            b[i] = a[i] * 1.5 + 1.0

    return {"compute": compute, "random_rows": random_rows, "stream": stream}


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    if min(args.threads) < 1 or len(set(args.threads)) != len(args.threads):
        raise ValueError(f"--threads={args.threads} is not allowed: distinct integers >= 1")
    if args.repeats < 1:
        raise ValueError(f"--repeats={args.repeats} is not allowed: an integer >= 1")
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(args.threads)))
    import numba
    import numpy as np

    rng = np.random.default_rng(args.seed)
    table = rng.random((1 << 23, 32), dtype=np.float32)  # 1 GiB of 128-byte rows
    rows = rng.integers(0, len(table), 1 << 23)
    a = rng.random(1 << 26)  # 512 MiB
    b = np.ones_like(a)  # faulted in before any timing
    work = {
        "compute": (np.empty(1 << 15),),
        "random_rows": (table, rows, np.empty(len(rows), np.float32)),
        "stream": (a, b),
    }
    funcs = kernels()
    for name, func in funcs.items():  # compile and warm up at every count
        for count in args.threads:
            numba.set_num_threads(count)
            func(*work[name])
    seconds: dict[str, dict[int, list[float]]] = {
        name: {c: [] for c in args.threads} for name in funcs
    }
    for repeat in progress_bar(range(args.repeats), unit="repeat", quiet=args.quiet):
        for count in args.threads if repeat % 2 == 0 else args.threads[::-1]:
            numba.set_num_threads(count)
            for name, func in funcs.items():
                start = time.perf_counter()
                func(*work[name])
                seconds[name][count].append(time.perf_counter() - start)
    summary: dict[str, dict[str, Any]] = {}
    first = args.threads[0]
    for name, by_count in seconds.items():
        base = float(np.median(by_count[first]))
        summary[name] = {
            str(c): {
                "seconds_median": float(np.median(t)),
                "speedup": base / float(np.median(t)),
            }
            for c, t in by_count.items()
        }
        print(
            f"{name:>12}: "
            + ", ".join(
                f"{c} threads {e['seconds_median'] * 1e3:7.1f} ms (×{e['speedup']:.2f})"
                for c, e in summary[name].items()
            ),
            flush=True,
        )
    from env_throughput import write_result

    write_result(
        "core_scaling",
        args.out,
        {
            "command": "python benchmarks/core_scaling.py "
            f"--threads {' '.join(map(str, args.threads))} --repeats {args.repeats}",
            "versions": {"numpy": np.__version__, "numba": numba.__version__},
            "summary": summary,
            "seconds": {n: {str(c): t for c, t in s.items()} for n, s in seconds.items()},
        },
    )


if __name__ == "__main__":
    main()
