"""How the OpenMP runtime's idle threads wait, and what that costs numba's kernels and torch.

    python benchmarks/openmp_wait.py
    python benchmarks/openmp_wait.py --settings default GOMP_SPINCOUNT=10000 --repeats 3

numba's threaded kernels and torch share one GNU OpenMP runtime (``libgomp.so.1``; whichever
loads first, the other uses it), which reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once,
when it loads. Each setting (``default``: neither variable; ``VAR=VALUE``: that one) runs in a
fresh process, ``--repeats`` times, the settings alternating, and measures with ``--threads``
threads:

- ``idle_cpu_ms_per_kernel``: the CPU time the process burns while its caller sleeps 10 ms
  after a threaded numba kernel (20 times): what idle threads take from the cores the next
  piece of work needs (PolicySim's row blocks run on Python threads between such kernels);
- ``torch_update_ms_alone`` and ``torch_update_ms``: one Adam update of a small MLP (128
  inputs, two tanh layers, 8 outputs) per hidden width and batch (``--mlp``), medians over
  many updates, before any numba kernel ran and after them: a small network's many short
  parallel regions, which idle threads that already sleep must be woken for.

Results (one JSON) go to ``--out`` (default ``runs/openmp_wait/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from env_throughput import OPENMP_WAIT, write_result

#: The sleeps after a kernel and their length
SLEEPS, SLEEP_S = 20, 0.01


def _parse_setting(setting: str) -> dict[str, str]:
    """``default`` (no variable) or ``VAR=VALUE`` with VAR one of :data:`OPENMP_WAIT`."""
    if setting == "default":
        return {}
    var, sep, value = setting.partition("=")
    if not sep or var not in OPENMP_WAIT or not value:
        raise ValueError(
            f"--settings {setting!r} is not allowed: 'default' or VAR=VALUE with VAR one of "
            f"{OPENMP_WAIT}"
        )
    return {var: value}


def _torch_updates(threads: int, mlp: list[tuple[int, int]], updates: int) -> dict[str, float]:
    """Median ms of one Adam update of each MLP (hidden width, batch), on ``threads``."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    updates_ms = {}
    for hidden, batch in mlp:
        net = torch.nn.Sequential(
            torch.nn.Linear(128, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 8),
        )
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        inputs, targets = torch.randn(batch, 128), torch.randn(batch, 8)
        times = []
        for i in range(updates + 10):  # 10 warm-up updates
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = ((net(inputs) - targets) ** 2).mean()
            loss.backward()
            optimizer.step()
            if i >= 10:
                times.append(time.perf_counter() - start)
        updates_ms[f"{hidden}x{batch}"] = float(np.median(times) * 1e3)
    return updates_ms


def measure(threads: int, mlp: list[tuple[int, int]], updates: int) -> dict[str, Any]:
    """In this process (its OpenMP variables set from its start): torch's update times before
    any numba kernel ran, the idle CPU per numba kernel, then torch's update times again."""
    import numba
    import numpy as np

    @numba.njit(parallel=True)
    def doubled_sum(x: np.ndarray) -> float:
        total = 0.0
        for i in numba.prange(len(x)):
            total += 2.0 * x[i]
        return total

    alone = _torch_updates(threads, mlp, updates)
    numba.set_num_threads(threads)
    x = np.ones(2_000_000)
    doubled_sum(x)
    idle = 0.0
    for _ in range(SLEEPS):
        doubled_sum(x)
        cpu = time.process_time()
        time.sleep(SLEEP_S)
        idle += time.process_time() - cpu
    return {
        "threading_layer": numba.threading_layer(),
        "idle_cpu_ms_per_kernel": idle / SLEEPS * 1e3,
        "torch_update_ms_alone": alone,
        "torch_update_ms": _torch_updates(threads, mlp, updates),
        "openmp_wait": {var: os.environ[var] for var in OPENMP_WAIT if var in os.environ},
    }


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--settings",
        nargs="+",
        default=["default", "OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=10000"],
        help="'default' (neither variable) or VAR=VALUE, each measured in fresh processes",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--mlp",
        nargs="+",
        default=["64x64", "256x256"],
        help="hidden width x batch of each MLP timed",
    )
    parser.add_argument("--updates", type=int, default=200, help="timed updates per MLP")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_quiet_option(parser)
    args = parser.parse_args()
    if args.threads < 1 or args.repeats < 1 or args.updates < 1:
        raise ValueError(
            f"--threads={args.threads}, --repeats={args.repeats}, --updates={args.updates}: "
            "each must be >= 1"
        )
    try:
        mlp = [tuple(int(v) for v in shape.split("x")) for shape in args.mlp]
    except ValueError:
        raise ValueError(f"--mlp {args.mlp} is not allowed: HIDDENxBATCH, e.g. 64x64") from None
    if args.child:
        print(json.dumps(measure(args.threads, mlp, args.updates)))  # type: ignore[arg-type]
        return
    settings = {setting: _parse_setting(setting) for setting in args.settings}
    runs: dict[str, list[dict[str, Any]]] = {setting: [] for setting in settings}
    order = [
        setting
        for r in range(args.repeats)
        for setting in (args.settings if r % 2 == 0 else args.settings[::-1])
    ]
    base = {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT}
    for setting in progress_bar(order, unit="process", quiet=args.quiet):
        shown = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "--threads",
                str(args.threads),
                "--updates",
                str(args.updates),
                "--mlp",
                *args.mlp,
            ],
            env={**base, "NUMBA_NUM_THREADS": str(args.threads), **settings[setting]},
            capture_output=True,
            text=True,
            check=True,
        )
        runs[setting].append(json.loads(shown.stdout.strip().splitlines()[-1]))
    summary = {}
    for setting, results in runs.items():
        idle = sorted(r["idle_cpu_ms_per_kernel"] for r in results)
        summary[setting] = {"idle_cpu_ms_per_kernel": idle}
        for key in ("torch_update_ms_alone", "torch_update_ms"):
            summary[setting][key] = {
                shape: sorted(r[key][shape] for r in results) for shape in results[0][key]
            }
        print(
            f"{setting:24s} idle CPU per kernel {', '.join(f'{v:.2f}' for v in idle)} ms; torch "
            "update alone / after numba's kernels: "
            + "; ".join(
                f"{shape} {', '.join(f'{v:.2f}' for v in alone)} / "
                f"{', '.join(f'{v:.2f}' for v in summary[setting]['torch_update_ms'][shape])} ms"
                for shape, alone in summary[setting]["torch_update_ms_alone"].items()
            ),
            flush=True,
        )
    write_result(
        "openmp_wait",
        args.out,
        {
            "command": "python benchmarks/openmp_wait.py --settings "
            f"{' '.join(args.settings)} --threads {args.threads} --repeats {args.repeats} "
            f"--mlp {' '.join(args.mlp)} --updates {args.updates}",
            "summary": summary,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
