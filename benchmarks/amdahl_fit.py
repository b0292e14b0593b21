"""The serial share of a 1M round, from the thread sweeps already measured: Amdahl's law
S(n) = 1 / (s + (1 - s) / n) fitted by least squares to the speed-ups over one thread.

    python benchmarks/amdahl_fit.py \\
        benchmarks/results/env_throughput_issue24/device_h200_16cpu_0ecd0e8/threads_in_process_1m.json \\
        benchmarks/results/env_throughput_issue24/device_h200_16cpu_0ecd0e8/threads_1m.json

Each file is a result of ``threads_in_process.py`` (the median speed-up of each thread count)
or of ``env_throughput.py --threads ...`` (each count's wall time per step over the one-thread
run's). The fit pools every file's speed-ups. It prints, per thread count, the speed-ups
measured and the fitted law's, then the serial share s and the ceiling 1/s at any number of
cores. A thread count whose speed-up the law cannot reach with any s in [0, 1] still counts
toward the fit. Nothing is measured here and nothing is written but ``--out``, when given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def speedups(result: dict[str, Any], name: str) -> dict[int, float]:
    """{thread count: speed-up over one thread} of one result file."""
    summary = result.get("summary", {})
    if "settings" in summary:  # env_throughput.py
        mine = [s for s in summary["settings"] if s.get("code", "this") == "this"]
        one = [s["wall_s"] for s in mine if s["threads"] == 1]
        if not one:
            raise ValueError(f"{name}: the sweep has no one-thread run to compare with")
        return {int(s["threads"]): one[0] / float(s["wall_s"]) for s in mine if s["threads"] > 1}
    # threads_in_process.py: one row per count, or per count {"this", "other", ...} (--compare)
    rows = {n: row.get("this", row) for n, row in summary.items() if isinstance(row, dict)}
    found = {
        int(n): float(r["speedup_wall_median"])
        for n, r in rows.items()
        if "speedup_wall_median" in r
    }
    if not found:
        raise ValueError(f"{name}: neither a threads_in_process.py nor an env_throughput.py result")
    # the speed-ups are over the sweep's first count (its --threads, in the command)
    command = str(result.get("command", "")).split()
    first = command[command.index("--threads") + 1] if "--threads" in command else None
    if first != "1":
        raise ValueError(f"{name}: the sweep's first thread count is {first}, not 1")
    return found


def amdahl(serial_share: float, threads: int) -> float:
    return 1.0 / (serial_share + (1.0 - serial_share) / threads)


def fit(points: list[tuple[int, float]]) -> float:
    """The serial share s in [0, 1] whose law is closest (least squares) to the points."""
    from scipy.optimize import minimize_scalar

    if not points:
        raise ValueError("no speed-ups to fit: give results with more than one thread count")
    result = minimize_scalar(
        lambda s: sum((amdahl(s, n) - measured) ** 2 for n, measured in points),
        bounds=(0.0, 1.0),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(result.x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="thread-sweep result files")
    parser.add_argument("--out", type=Path, help="also write the fit here (JSON)")
    parser.add_argument(
        "--quiet", action="store_true", help="print only the serial share and the ceiling"
    )
    args = parser.parse_args()
    points: list[tuple[int, float]] = []
    measured: dict[int, list[float]] = {}
    for path in args.results:
        for n, value in speedups(json.loads(path.read_text()), str(path)).items():
            points.append((n, value))
            measured.setdefault(n, []).append(value)
    share = fit(points)
    if not args.quiet:
        print(f"{'threads':>7}  {'measured':<24} fitted")
        for n in sorted(measured):
            values = ", ".join(f"×{v:.2f}" for v in measured[n])
            print(f"{n:>7}  {values:<24} ×{amdahl(share, n):.2f}")
    ceiling = float("inf") if share == 0 else 1 / share
    print(f"serial share {share:.3f}; ceiling at any number of cores ×{ceiling:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "files": [str(p) for p in args.results],
                    "measured": {str(n): v for n, v in sorted(measured.items())},
                    "serial_share": share,
                    "ceiling": ceiling,
                    "fitted": {str(n): amdahl(share, n) for n in sorted(measured)},
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
