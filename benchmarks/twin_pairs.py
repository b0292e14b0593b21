"""Compiled round passes against their NumPy twins on the inputs of one recorded round.

A twin is the NumPy arithmetic the compiled pass replaced, and both give the same bits, so
timing the two on the same inputs, alternating in one process, measures what the pass saves
without the process-to-process noise of whole rounds. Recorded at ``--users`` users (a Rec
env stepped with seeded random slates, so that the policy's arms meet reactions; the round
after the first; each pass's first call of that round), each pass is then timed
``--repeats`` times per side in CPU seconds on one thread; ``count_reactions`` is also timed
threaded (wall seconds, its serial kernel against its threaded one on ``--threads`` threads).

The passes: a new post's noisy latent, the reactions' pushes on opinions, the observed
history, the shares' nearest cluster centres (the same products, the argmax compiled), the
IVF index's order of the posts by cluster (a counting sort against NumPy's stable sort), the
misinformation each feed row shows, the reactions' two ends (the author, whether the two
hold opposite stances) and the policy's choice each reaction answers (a hash table of the
arms; the NumPy twin sorts them). Since issue 24's twenty-first step also: the Rec arms'
candidates (three kernels around one draw and one product, against the unfused path), the
reaction mechanisms' moves, who posts and the new posts' columns, the objective's reaction
values, the round's metric means, the objective's arm rewards and the arms' follows
(``isin``, a hash table against a sort).

    python benchmarks/twin_pairs.py --users 1000000 --repeats 8 --out /tmp/twin_pairs.json
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.env_throughput import (  # noqa: E402
    median_interval,
    warmed_rec_env,
    write_result,
)


def _record(users: int, seed: int) -> dict[str, tuple[Any, ...]]:
    """The arguments of each pass's call in the env's second round (arrays copied)."""
    from agent_models import surrogate, surrogate_kernels, surrogate_mechanisms
    from socialenv.core import candidates, kernels, metrics, simulation
    from socialenv.envs.rec import env as rec_env

    calls: dict[str, tuple[Any, ...]] = {}
    targets = [
        (surrogate, "noisy_unit_rows", surrogate_kernels.noisy_unit_rows),
        (surrogate, "pushed_opinions", surrogate_kernels.pushed_opinions),
        (rec_env.kernels, "observe_reactions", kernels.observe_reactions),
        (kernels, "count_reactions", kernels.count_reactions),
        (simulation, "assign_clusters", simulation.assign_clusters),
        (kernels, "cluster_order", kernels.cluster_order),
        (surrogate_mechanisms, "flagged_per_row", surrogate_kernels.flagged_per_row),
        (kernels, "reaction_ends", kernels.reaction_ends),
        (kernels, "reaction_choices", kernels.reaction_choices),
        (rec_env, "generate_candidates", candidates.generate_candidates),
        (surrogate, "reaction_moves", surrogate_mechanisms.reaction_moves),
        (surrogate, "post_choices", surrogate_kernels.post_choices),
        (surrogate, "post_columns", surrogate_kernels.post_columns),
        (kernels, "reaction_values", kernels.reaction_values),
        (metrics, "round_means", metrics.round_means),
        (kernels, "objective_arm_rewards", kernels.objective_arm_rewards),
        (kernels, "isin", kernels.isin),
    ]

    def recorder(name: str, function: Any) -> Any:
        def record(*args: Any) -> Any:
            if name == "generate_candidates":  # the world as it is (not copied), the rest copied
                calls.setdefault(name, (args[0], *copy.deepcopy(args[1:])))
            else:
                calls.setdefault(name, copy.deepcopy(args))  # a round's first call
            return function(*args)

        return record

    env, rng = warmed_rec_env(users, seed)
    action = rng.integers(0, env.num_arms + 1, env.slate_size)
    for module, name, function in targets:
        setattr(module, name, recorder(name, function))
    try:
        env.step(action)
    finally:
        for module, name, function in targets:
            setattr(module, name, function)
    env.close()
    return calls


def _arrays(result: Any) -> list[np.ndarray]:
    """A pass's output as a list of arrays (some passes return a tuple of them, or of floats)."""
    parts = result if isinstance(result, tuple) else (result,)
    return [np.atleast_1d(np.asarray(a)) for a in parts]


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

    from agent_models import surrogate_kernels, surrogate_mechanisms
    from policysim_infra.progress import progress_bar
    from socialenv.core import candidates, kernels, metrics

    kernels.set_threads(1)
    calls = _record(args.users, args.seed)

    def on(backend: str, run: Any) -> Any:
        # socialenv's use_backend switches the surrogate's kernels too
        def switched() -> Any:
            kernels.use_backend(backend)
            try:
                return run()
            finally:
                kernels.use_backend("numba")

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

    def recorded(name: str, function: Any) -> Any:
        return lambda backend: on(backend, lambda: function(*calls[name]))

    def drawing(name: str, function: Any, at: int) -> Any:
        # a pass that draws from the generator argument ``at``: each run from a copy of it
        def run(backend: str) -> Any:
            args = calls[name]

            def call() -> Any:
                fresh = list(args)
                fresh[at] = copy.deepcopy(args[at])
                return function(*fresh)

            return on(backend, call)

        return run

    def moves(backend: str) -> Any:
        # a new Reacted each run: its derived columns are cached on first use
        mechanisms, reacted = calls["reaction_moves"]
        columns = (reacted.opinion, reacted.stance, reacted.kind, reacted.positive)
        return on(
            backend,
            lambda: surrogate_mechanisms.reaction_moves(
                mechanisms, surrogate_mechanisms.Reacted(*columns, reacted.hostile)
            ),
        )

    def candidate_set(backend: str) -> Any:
        run = drawing("generate_candidates", candidates.generate_candidates, 5)(backend)
        return lambda: (lambda got: (got.post, got.source))(run())

    from socialenv.core.clustering import assign_clusters

    passes = {
        "noisy_unit_rows": noisy,
        "pushed_opinions": pushed,
        "observe_reactions": observed,
        # the shares' nearest centres (the products the same, the argmax compiled)
        "assign_clusters": recorded("assign_clusters", assign_clusters),
        "cluster_order": recorded("cluster_order", kernels.cluster_order),
        "flagged_per_row": recorded("flagged_per_row", surrogate_kernels.flagged_per_row),
        "reaction_ends": recorded("reaction_ends", kernels.reaction_ends),
        "reaction_choices": recorded("reaction_choices", kernels.reaction_choices),
        # the NumPy backend runs the unfused path (the twin of the three kernels)
        "generate_candidates": candidate_set,
        "reaction_moves": moves,
        "post_choices": recorded("post_choices", surrogate_kernels.post_choices),
        "post_columns": recorded("post_columns", surrogate_kernels.post_columns),
        "reaction_values": recorded("reaction_values", kernels.reaction_values),
        # the twin: the metric functions (socialenv.core.metrics)
        "round_means": recorded("round_means", metrics.round_means),
        "objective_arm_rewards": recorded("objective_arm_rewards", kernels.objective_arm_rewards),
        "isin": recorded("isin", kernels.isin),
    }
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
        identical = all(
            np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
            for a, b in zip(_arrays(first["compiled"]), _arrays(first["numpy"]), strict=True)
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
        medians = ", ".join(f"{side} {1e6 * s:,.1f} µs" for side, s in row["median_s"].items())
        same = {True: ", identical", False: ", DIFFERENT", None: ""}[row.get("identical")]
        print(f"{row['pass']:>18} ({row['clock']}): {medians}{same}")
    sizes = {
        "posters": len(calls["noisy_unit_rows"][1]),
        "reactions": len(calls["pushed_opinions"][1]),
        "replies": len(calls["observe_reactions"][3]),
        "shares": len(calls["assign_clusters"][0]),
        "indexed_posts": len(calls["cluster_order"][0]),
        "feed_rows": len(calls["flagged_per_row"][0]),
        "arms": len(calls["reaction_choices"][0]),
        "candidate_users": len(calls["generate_candidates"][1]),
    }
    write_result("twin_pairs.py", args.out, {"users": args.users, "sizes": sizes, "rows": rows})


if __name__ == "__main__":
    main()
