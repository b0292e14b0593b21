"""A step's large arrays written into kept memory against fresh memory, paired in one process.

    python benchmarks/context_reuse.py --users 1000000 --pairs 8 --threads 1
    python benchmarks/context_reuse.py --users 1000000 --pairs 8 --threads 2
    python benchmarks/context_reuse.py --users 1000000 --pairs 10 --threads 2 \
        --buffers propagation dedupe share_latents

Above 32 MB glibc maps every array anew and unmaps it when freed, and the kernel (on a VM
with free-page reporting, the host too) faults its pages in again. ``--buffers`` chooses what
the two ways differ in (default: ``arm_contexts``):

- ``arm_contexts``: a Rec env's observation, a (K, D) float32 matrix of arm contexts (190 MB at
  1M users), written into one of the last steps' that the caller has dropped
  (``policysim_infra.buffers.ReusedArrays``); fresh: a new one every step.
- ``propagation``: the local context propagation's neighbourhood order and positions and each
  hop's rows (about 80 MB at 1M users), kept in ``kernels.PropagationBuffers``; fresh: new
  arrays in small pages every step, as the compiled hops allocated them before.
- ``dedupe``: the feeds' repeats blanked in the caller's temporary (``in_place=True``); fresh: in
  a copy.
- ``share_latents``: the shares' latents written by the compiled kernel straight into the post
  table's next rows; fresh: by the NumPy blocks into a new array, then copied into the table.

One process resets ``RecEnv(num_users=N)`` and steps it with random slates, keeping each
observation until the next step returns as an RL loop does, and switches between the two ways
step by step in the order ABBA (reuse, fresh, fresh, reuse, …), so both meet the same world
size and minutes. Trajectories do not depend on the way (only where arrays live changes).

Reported per way: the median wall, user and system seconds and minor page faults per step;
and the paired ratio fresh / reuse of each pair's wall time, with its median and a 95%
bootstrap interval (``scipy.stats.bootstrap``). One warm-up step of each way first.

Results go to ``--out`` (default ``runs/context_reuse/<UTC time>.json``, not tracked).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from env_throughput import median_interval, write_result

WAYS = ("reuse", "fresh")
BUFFERS = ("arm_contexts", "propagation", "dedupe", "share_latents")


def _fresh_ways(env: Any, buffers: list[str]) -> tuple[Callable[[str], None], dict[str, Any]]:
    """``switch(way)``, which sets ``buffers`` of ``env`` to that way, and the ReusedArrays of
    each way whose counts the result reports."""
    import numpy as np

    from policysim_infra.buffers import ReusedArrays
    from socialenv.core import kernels
    from socialenv.core.pages import small_pages

    sim = env.unwrapped.sim
    fresh_propagation = kernels.PropagationBuffers(
        ReusedArrays(keep=0), ReusedArrays(keep=0), huge_pages=False
    )
    fresh_propagation.empty = small_pages(fresh_propagation.empty)  # type: ignore[method-assign]
    kept = {
        "reuse": {"arm_contexts": env._context_arrays, "propagation": sim._propagation_buffers},
        "fresh": {"arm_contexts": ReusedArrays(keep=0), "propagation": fresh_propagation},
    }
    dedupe_rows, share_latents = kernels.dedupe_rows, kernels.share_latents

    def dedupe_in_a_copy(feed: np.ndarray, in_place: bool = False) -> np.ndarray:
        return dedupe_rows(feed)

    def share_latents_copied(
        source: np.ndarray,
        writer: np.ndarray,
        post: np.ndarray,
        user: np.ndarray,
        is_reply: np.ndarray,
        out: np.ndarray,
    ) -> None:
        latent = np.empty(out.shape, out.dtype)
        kernels.share_latents_numpy(source, writer, post, user, is_reply, latent)
        out[:] = latent

    def switch(way: str) -> None:
        if "arm_contexts" in buffers:
            env._context_arrays = kept[way]["arm_contexts"]
        if "propagation" in buffers:
            sim._propagation_buffers = kept[way]["propagation"]
        if "dedupe" in buffers:
            kernels.dedupe_rows = dedupe_rows if way == "reuse" else dedupe_in_a_copy
        if "share_latents" in buffers:
            kernels.share_latents = share_latents if way == "reuse" else share_latents_copied

    counted = {
        way: {"matrices": kept[way]["arm_contexts"], "hop_rows": kept[way]["propagation"].floats}
        for way in WAYS
    }
    return switch, counted


def measure(
    users: int, pairs: int, threads: int, seed: int, quiet: bool, buffers: list[str]
) -> dict[str, Any]:
    """Reset, one warm-up step per way, then ``pairs`` steps per way in ABBA order; the steps
    and how many arrays each way allocated and reused."""
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    import numpy as np
    from threads_in_process import use_threads

    from policysim_infra.progress import progress_bar
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=users, rounds=2 * pairs + 3)
    use_threads(threads)
    obs, _ = env.reset(seed=seed)
    switch, counted = _fresh_ways(env, buffers)
    rng = np.random.default_rng(seed)
    order = [WAYS[((i + 1) // 2) % 2] for i in range(2 * pairs)]
    steps: list[dict[str, Any]] = []
    try:
        for i, way in enumerate(progress_bar(list(WAYS) + order, unit="step", quiet=quiet)):
            switch(way)
            action = rng.integers(0, env.num_arms + 1, env.slate_size)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            before, wall = os.times(), time.perf_counter()
            obs, *_ = env.step(action)  # the previous observation is held until here
            wall, after = time.perf_counter() - wall, os.times()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            if i >= len(WAYS):  # the first step of each way warms it up
                steps.append(
                    {
                        "pair": (i - len(WAYS)) // 2,
                        "way": way,
                        "wall_s": wall,
                        "user_s": after.user - before.user,
                        "system_s": after.system - before.system,
                        "minor_faults": faults,
                    }
                )
    finally:
        switch("reuse")
    del obs
    counts = {
        way: {
            kind: {"allocated": arrays.allocated, "reused": arrays.reused}
            for kind, arrays in kinds.items()
        }
        for way, kinds in counted.items()
    }
    return {"steps": steps, "arrays": counts}


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per way the medians; the paired wall ratio fresh / reuse with a 95% bootstrap interval."""
    import numpy as np

    out: dict[str, Any] = {}
    for way in WAYS:
        mine = [s for s in steps if s["way"] == way]
        out[way] = {
            "steps": len(mine),
            **{
                f"{k}_median": float(np.median([s[k] for s in mine]))
                for k in ("wall_s", "user_s", "system_s", "minor_faults")
            },
        }
    wall = {(s["pair"], s["way"]): s["wall_s"] for s in steps}
    out["fresh_over_reuse_wall"] = paired_ratio(wall)
    return out


def paired_ratio(wall: dict[tuple[int, str], float]) -> dict[str, Any]:
    """The ratios fresh / reuse of each pair's ``wall[pair, way]``: per pair, their median and
    (three pairs or more) its 95% bootstrap interval."""
    pairs = sorted({pair for pair, _ in wall})
    return median_interval([wall[p, "fresh"] / wall[p, "reuse"] for p in pairs])


def main() -> None:
    from policysim_infra.progress import add_quiet_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=6, help="timed steps per way")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--buffers",
        nargs="+",
        choices=BUFFERS,
        default=["arm_contexts"],
        help="what the fresh way allocates anew (the module docstring says each)",
    )
    parser.add_argument("--out", type=Path, default=None)
    add_quiet_option(parser)
    args = parser.parse_args()
    for name in ("users", "pairs", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name}={getattr(args, name)} is not allowed: an integer >= 1")
    load_before = os.getloadavg()
    buffers = sorted(set(args.buffers), key=BUFFERS.index)
    result = measure(args.users, args.pairs, args.threads, args.seed, args.quiet, buffers)
    summary = summarize(result["steps"])
    for way in WAYS:
        e = summary[way]
        print(
            f"{args.users:,} users, {args.threads} thread(s), {way}: {e['wall_s_median']:.3f} s "
            f"wall, {e['user_s_median']:.3f} s user, {e['system_s_median']:.3f} s system, "
            f"{e['minor_faults_median']:,.0f} page faults per step (median of {e['steps']})"
        )
    ratio = summary["fresh_over_reuse_wall"]
    interval = " (95% CI {:.2f}-{:.2f})".format(*ratio["ci95"]) if "ci95" in ratio else ""
    print(f"fresh / reuse wall per pair: ×{ratio['median']:.2f}{interval}")
    from threads_in_process import inherited_settings
    from trajectory_digest import library_versions

    write_result(
        "context_reuse",
        args.out,
        {
            "command": f"python benchmarks/context_reuse.py --users {args.users} "
            f"--pairs {args.pairs} --threads {args.threads} --seed {args.seed} "
            f"--buffers {' '.join(buffers)}",
            "buffers": buffers,
            "machine": {"load_before": load_before},
            "environment": inherited_settings(),
            "versions": library_versions(),
            "summary": summary,
            "arrays": result["arrays"],
            "steps": result["steps"],
        },
    )


if __name__ == "__main__":
    main()
