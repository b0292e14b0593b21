"""What running sections beside each other gains: the same round stepped with
``policysim_infra.blocks.beside`` on and off, on the same threads, and with the caller's
blocks and threaded kernels giving way while a section runs beside (``pool_busy``) or not.

Rounds differ from one another by more than what two sections overlapping saves, so each
round is stepped from the same state once per side: the env is deep-copied, the copy steps
once (its kept buffers are not copied, so this first step pays their fresh pages) and is
copied again, and that copy steps the measured round on the side: ``beside`` (on, giving way), ``at_once``
(off) and ``beside_no_give_way`` (on, the caller's kernels threaded as if nothing ran beside,
``blocks.set_give_way(False)``), in an order that rotates from round to round. The copies give
the same results on every side; the wall times of each round give one ratio per side against
``beside``.

    python benchmarks/beside_pairs.py --users 1000000 --threads 2 --rounds 6 --out /tmp/b.json

Give a multiple of 6 rounds: each side then runs first, second and third equally often.
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
    # (beside on, pool_busy may give way)
    sides = {"beside": (True, True), "at_once": (False, True), "beside_no_give_way": (True, False)}
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    identical = True
    for r in progress_bar(range(args.rounds), desc="rounds", unit="round", quiet=args.quiet):
        env.step(action)
        observations = {}
        order = list(sides)[r % 3 :] + list(sides)[: r % 3]  # each side first, second, third
        for side in order if r % 2 == 0 else reversed(order):
            on, give_way = sides[side]
            previous = blocks.set_beside(on), blocks.set_give_way(give_way)
            try:
                stepped, wall, obs = _stepped_copy(env, action)
            finally:
                blocks.set_beside(previous[0])
                blocks.set_give_way(previous[1])
            seconds[side].append(wall)
            observations[side] = obs["arms"]
            del stepped
            gc.collect()
        identical &= all(np.array_equal(observations["beside"], o) for o in observations.values())
    ratios = {
        f"{side}_over_beside": median_interval(
            [a / b for a, b in zip(seconds[side], seconds["beside"], strict=True)]
        )
        for side in ("at_once", "beside_no_give_way")
    }
    medians = ", ".join(f"{np.median(v):.3f} s {side}" for side, v in seconds.items())
    print(f"{args.users:,} users, {args.threads} threads: step {medians}")
    for name, ratio in ratios.items():
        print(f"{name} per round x{ratio['median']:.3f} (95% CI {ratio.get('ci95')})")
    print(f"same observations: {identical}")
    write_result(
        "beside_pairs.py",
        args.out,
        {
            "users": args.users,
            "threads": args.threads,
            "seconds": seconds,
            **ratios,
            "identical_observations": identical,
        },
    )


if __name__ == "__main__":
    main()
