"""What running sections beside each other gains: the same round stepped with
``policysim_infra.blocks.beside`` on and off, on the same threads.

Rounds differ from one another by more than what two sections overlapping saves, so each
round is stepped twice from the same state: the env is deep-copied, the copy steps once (its
kept buffers are not copied, so this first step pays their fresh pages) and is copied again,
and that copy steps the measured round, with ``beside`` on and then off, or off and then on
(alternating from round to round). The copies give the same results either way; the wall
times of each pair give one ratio.

    python benchmarks/beside_pairs.py --users 1000000 --threads 2 --rounds 6 --out /tmp/b.json
"""

from __future__ import annotations

import argparse
import copy
import gc
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


def _stepped_copy(env: Any, action: np.ndarray) -> tuple[Any, float, Any]:
    """A copy of ``env`` whose kept buffers are warm: (copy, its timed step's wall, obs)."""
    warm = copy.deepcopy(env)
    warm.step(action)
    measured = copy.deepcopy(env)
    del warm
    gc.collect()
    start = time.perf_counter()
    obs, *_ = measured.step(action)
    return measured, time.perf_counter() - start, obs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()

    from policysim_infra import blocks
    from policysim_infra.progress import progress_bar
    from socialenv.core import kernels
    from socialenv.envs.rec import RecEnv

    kernels.set_threads(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the action-space size warning at 1M users
        env = RecEnv(num_users=args.users, rounds=args.rounds + 4)
    env.reset(seed=args.seed)
    action = np.full(env.slate_size, env.no_op, np.int64)
    env.step(action)
    seconds: dict[str, list[float]] = {"beside": [], "at_once": []}
    identical = True
    for r in progress_bar(range(args.rounds), desc="rounds", unit="round", quiet=args.quiet):
        env.step(action)
        observations = {}
        for side in ("beside", "at_once") if r % 2 == 0 else ("at_once", "beside"):
            previous = blocks.set_beside(side == "beside")
            try:
                stepped, wall, obs = _stepped_copy(env, action)
            finally:
                blocks.set_beside(previous)
            seconds[side].append(wall)
            observations[side] = obs["arms"]
            del stepped
            gc.collect()
        identical &= bool(np.array_equal(observations["beside"], observations["at_once"]))
    ratio = median_interval(
        [a / b for a, b in zip(seconds["at_once"], seconds["beside"], strict=True)]
    )
    print(
        f"{args.users:,} users, {args.threads} threads: step {np.median(seconds['beside']):.3f} s "
        f"beside, {np.median(seconds['at_once']):.3f} s at once; at once / beside per round "
        f"x{ratio['median']:.3f} (95% CI {ratio.get('ci95')}); same observations: {identical}"
    )
    write_result(
        "beside_pairs.py",
        args.out,
        {
            "users": args.users,
            "threads": args.threads,
            "seconds": seconds,
            "at_once_over_beside": ratio,
            "identical_observations": identical,
        },
    )


if __name__ == "__main__":
    main()
