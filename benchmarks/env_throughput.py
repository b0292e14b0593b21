"""Env throughput of PolicySim-Rec-v0 with surrogate users: CPU time, wall time, load.

    python benchmarks/env_throughput.py                          # 1e3 .. 1e6 users + long run
    python benchmarks/env_throughput.py --users 1000 10000 --long-rounds 0
    python benchmarks/env_throughput.py --out benchmarks/results/env_throughput.json  # publish
    git archive 15398d2 | tar -x -C /tmp/old   # then, alternating with a run of this tree:
    python benchmarks/env_throughput.py --users 1000 --long-rounds 0 --code /tmp/old
    git worktree add /tmp/base a8ddfff   # paired in one run, alternating, medians of 3:
    python benchmarks/env_throughput.py --users 1000000 --steps 4 --long-rounds 0 \
        --repeats 3 --compare /tmp/base
    python benchmarks/env_throughput.py --users 1000000 --long-rounds 0 --threads 1 2 --repeats 3

Each population size runs in a fresh process (so its peak memory is its own) with NumPy's
BLAS, OpenMP and torch on ``--threads`` threads (default 1: the target is one core). The
process resets the default env (``RecEnv(num_users=N)``; v0: 320 sampled users × 10
candidates, budget 5; since issue 20: ``lever_share`` of the active users × 8 candidates, 0.25 then 0.15 since issue 26) and steps it, alternating two policies round by round so both see the same
platform: ``noop`` (every slot = ``env.no_op``, i.e. Origin) and ``random`` (uniform arm
indices over K + 1, the no-op included). Per step it records the process CPU time
(``time.process_time``: what this process used, whatever else runs on the machine) and the
wall time; the load average is read before and after. Rates are 1 / median CPU time per step
("CPU steps/s") and 1 / median wall time ("wall steps/s").

The long run (``--long-rounds``, default 300, 1,000 users, no-op policy) reports the median
CPU time per round of rounds 290–300 over that of rounds 1–10 (and the same ratio of the
fastest round of each range, less sensitive to other jobs): the world grows (posts and edges
accumulate), so this ratio is how much a round slows down with age. The two ranges are timed
in the same minutes: rounds 290–300 alternate, round by round, with rounds 1–10 of a fresh
episode of the same seed (a load change on a shared machine would otherwise pass for a
slowdown); ``ratio_sequential`` is the ratio over the one episode's own rounds 1–10.

The scaling exponent above 100k is log(cpu(1e6) / cpu(1e5)) / log(10) on the median CPU time
per step over both policies (1.0 = linear).

``--repeats R`` runs the whole sweep (each size, then the long run) R times, one after another,
and the summary reports per size the median over the repeats, the exponent from those medians
(and per repeat) and the median long-run ratio: on a shared machine one slow phase (the 100k
and 1M rows run a minute apart) then moves one repeat, not the figure.

From 100,000 users the run also measures the memory floor of a round (:func:`memory_floor`:
the embedding rows it must fetch at random and the graph bytes it must stream, timed on this
machine) and reports CPU per round / floor: how far the round is from its memory traffic.
The floor of issue 24 (``floor_s``) leaves out the observation's context propagation (above
50,000 users the arm users' 2-hop neighbourhood, millions of 256-byte user rows at 1M);
``floor_with_propagation_s`` adds those rows, timed on the user context table.
``floor_prefaulted_s`` is ``floor_s`` with the random rows fetched into a buffer whose pages
are already mapped: the floor's own ``take`` allocates a fresh result, whose page faults
(their cost varies from process to process on a VM) then count as memory traffic.
Every row also gives users × steps per second (``user_steps_per_cpu_s``), the unit of
env suites that count agent-steps.

``--compare TREE`` measures another source tree's package (e.g. ``git worktree add /tmp/base
REV``) run by run alternating with this one (which of the two runs first alternates between
repeats, :func:`balanced_order`: give an even ``--repeats``), and ``--threads 1 2`` each thread
count in turn
(``POLICYSIM_THREADS``: socialenv's parallel kernels, bit-identical to one thread); the
summary's ``settings`` give per (code, threads, size) the medians over the repeats, the floor
beside them, the load average of each run and the ratios to this code at the fewest threads.

Results (one JSON) go to ``--out`` (default ``runs/env_throughput/<UTC time>.json``, not
tracked); publish a run by passing ``--out benchmarks/results/...`` deliberately.
``POLICYSIM_KERNELS=numpy`` measures the pure-NumPy kernels (socialenv.core.kernels).
``--heap default keep`` runs each size also with glibc's malloc keeping freed memory (the
``MALLOC_*`` variables of README's *Large populations*, set for the child process from its
start), interleaved like ``--threads``; the rows record the variables they ran with.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: How the OpenMP runtime's idle threads (numba's, above one thread) wait: read when it loads
OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# glibc keeps freed memory for reuse (README, "Large populations"): --heap keep
KEEP_FREED_MEMORY = {
    "MALLOC_MMAP_THRESHOLD_": "17179869184",
    "MALLOC_TRIM_THRESHOLD_": "17179869184",
    "MALLOC_TOP_PAD_": "1073741824",
}
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "POLICYSIM_THREADS",
)
DEFAULT_STEPS = {1_000: 200, 10_000: 40, 100_000: 10, 1_000_000: 6}
POLICIES = ("noop", "random")
#: Sizes from which the memory floor of a round is measured (:func:`memory_floor`).
FLOOR_MIN_USERS = 100_000


def _set_threads(threads: int, code: str | None = None) -> None:
    """Must run before NumPy is imported in the child process; ``code``: import the package
    from this source tree instead (``--code``)."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    if code is not None:
        sys.path.insert(0, code)


def warmed_rec_env(num_users: int, seed: int, rounds: int = 4) -> tuple[Any, Any]:
    """``RecEnv(num_users=num_users, rounds=rounds)`` (its action-space size warning silenced),
    reset with ``seed`` and stepped once with random slates: (the env, the
    ``np.random.default_rng(seed)`` that drew them, for the next slates)."""
    import warnings

    import numpy as np

    from socialenv.envs.rec import RecEnv

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the action-space size warning at 1M users
        env = RecEnv(num_users=num_users, rounds=rounds)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
    return env, rng


def write_result(script: str, out: Path | None, fields: dict[str, Any]) -> Path:
    """Write one benchmark's result JSON: ``fields`` with the UTC time, this tree's commit and
    the machine (cores, Python, load average). ``out`` None: ``runs/<script>/<UTC time>.json``
    (not tracked). Returns the path, after printing it."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = out or ROOT / "runs" / script / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load": os.getloadavg(),
        **fields.pop("machine", {}),
    }
    out.write_text(
        json.dumps({**fields, "utc": stamp, "commit": _commit(ROOT), "machine": machine}, indent=1)
    )
    print(f"wrote {out}")
    return out


#: the folders :func:`_source_tree` extracted, with the commit each holds
_EXTRACTED: dict[str, str] = {}


def _commit(tree: Path) -> str | None:
    """The git commit of ``tree`` (with ``+dirty`` for uncommitted changes; the revision of a
    folder extracted by :func:`_source_tree`), None outside git."""
    import subprocess

    if str(tree) in _EXTRACTED:
        return _EXTRACTED[str(tree)]

    try:
        head = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def _median(values: list[float]) -> float:
    import numpy as np

    return float(np.median(values)) if values else float("nan")


def _madvise_hugepage() -> bool | None:
    """Whether NumPy asks for transparent huge pages (``NUMPY_MADVISE_HUGEPAGE``); where the
    kernel defragments on request, faulting them in can cost seconds of system time."""
    import numpy as np

    getter = getattr(getattr(np, "_core", np).multiarray, "_get_madvise_hugepage", None)
    return None if getter is None else bool(getter())


def measure_size(
    num_users: int, steps: int, seed: int, threads: int, code: str | None, heap: str, queue: Any
) -> None:
    """Reset + ``steps`` steps (policies alternating) of one env; puts a result row."""
    _set_threads(threads, code)
    import numpy as np

    from socialenv.envs.rec import RecEnv

    try:
        from socialenv.core import kernels

        backend = kernels.BACKEND
    except ImportError:  # code from before socialenv.core.kernels existed
        backend = "none"

    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    load_before = os.getloadavg()
    wall0, cpu0, times0 = time.perf_counter(), time.process_time(), os.times()
    env = RecEnv(num_users=num_users, rounds=steps + 1)
    env.reset(seed=seed)
    reset_wall, reset_cpu, times1 = (
        time.perf_counter() - wall0,
        time.process_time() - cpu0,
        os.times(),
    )
    rng = np.random.default_rng(seed)
    env.step(np.full(env.slate_size, env.no_op, np.int64))  # warm-up (and numba compilation)
    per_policy: dict[str, dict[str, list[float]]] = {p: {"cpu": [], "wall": []} for p in POLICIES}
    times2 = os.times()
    for i in range(steps):
        policy = POLICIES[i % len(POLICIES)]
        if policy == "noop":
            action = np.full(env.slate_size, env.no_op, np.int64)
        else:
            action = rng.integers(0, env.num_arms + 1, env.slate_size)
        wall, cpu = time.perf_counter(), time.process_time()
        env.step(action)
        per_policy[policy]["cpu"].append(time.process_time() - cpu)
        per_policy[policy]["wall"].append(time.perf_counter() - wall)
    times3 = os.times()
    row: dict[str, Any] = {
        "num_users": num_users,
        "steps": steps,
        "threads": threads,
        "heap": heap,
        "malloc_env": {var: os.environ[var] for var in KEEP_FREED_MEMORY if var in os.environ},
        "openmp_env": {var: os.environ[var] for var in OPENMP_WAIT if var in os.environ},
        "kernels": backend,
        "package": str(Path(sys.modules["socialenv"].__file__).parent),
        "reset_cpu_s": reset_cpu,
        "reset_wall_s": reset_wall,
        # os.times (10 ms ticks): user vs system (page faults of fresh memory) time
        "reset_user_s": times1.user - times0.user,
        "reset_system_s": times1.system - times0.system,
        "steps_user_s_per_step": (times3.user - times2.user) / steps,
        "steps_system_s_per_step": (times3.system - times2.system) / steps,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "numpy_madvise_hugepage": _madvise_hugepage(),
    }
    for policy, times in per_policy.items():
        cpu, wall = _median(times["cpu"]), _median(times["wall"])
        row[policy] = {
            "cpu_s_median": cpu,
            "wall_s_median": wall,
            "cpu_steps_per_s": 1 / cpu,
            "wall_steps_per_s": 1 / wall,
            "steps": len(times["cpu"]),
        }
    row["cpu_s_median"] = _median(per_policy["noop"]["cpu"] + per_policy["random"]["cpu"])
    row["wall_s_median"] = _median(per_policy["noop"]["wall"] + per_policy["random"]["wall"])
    # users x steps per second: comparable with env suites that count agent-steps
    row["user_steps_per_cpu_s"] = num_users / row["cpu_s_median"]
    row["user_steps_per_wall_s"] = num_users / row["wall_s_median"]
    if num_users >= FLOOR_MIN_USERS:
        row["floor"] = memory_floor(env.unwrapped)
        row["floor"]["cpu_over_floor"] = row["cpu_s_median"] / row["floor"]["floor_s"]
        row["floor"]["wall_over_floor"] = row["wall_s_median"] / row["floor"]["floor_s"]
        row["floor"]["cpu_over_floor_with_propagation"] = (
            row["cpu_s_median"] / row["floor"]["floor_with_propagation_s"]
        )
        row["floor"]["reset_cpu_over_floor"] = reset_cpu / row["floor"]["floor_s"]
        row["floor"]["cpu_over_floor_prefaulted"] = (
            row["cpu_s_median"] / row["floor"]["floor_prefaulted_s"]
        )
        row["floor"]["reset_cpu_over_floor_prefaulted"] = (
            reset_cpu / row["floor"]["floor_prefaulted_s"]
        )
    # a later reset of the same process: without the one-time costs of the first (numba
    # loading its compiled kernels from the on-disk cache, imports), as in a training loop
    cpu = time.process_time()
    env.reset(seed=seed)
    row["reset_again_cpu_s"] = time.process_time() - cpu
    if "floor" in row:
        row["floor"]["reset_again_cpu_over_floor"] = (
            row["reset_again_cpu_s"] / row["floor"]["floor_s"]
        )
    env.close()
    queue.put(row)


def memory_floor(env: Any, fetches: int = 1_000_000) -> dict[str, Any]:
    """The memory-traffic floor of the last round: the embedding rows a round must fetch at
    random times the measured random-row fetch time, plus the bytes it must stream times the
    measured copy bandwidth. Random rows: a post and a user embedding per feed slot (the
    reaction model), the personalized channel's scored candidates, one post per reaction
    (the memory update). Streamed: the follow graph's keys and CSR indices read and written
    once (the round's edge edits) and the CSR indices read once more (the echo-chamber
    count), 8 bytes per entry. Rates are measured here: random rows of the env's own post
    table fetched with ``ndarray.take`` (the fastest gather NumPy has; fancy indexing, timed
    too, is several times slower per row), and a 256 MiB copy."""
    import numpy as np

    sim = env.sim
    result = env._last_result
    b, f = result.feed.shape
    cfg = sim.config.recommender
    reactions = len(result.output.react_user)
    random_rows = 2 * b * f + b * cfg.personalized * cfg.candidates_per_slot + reactions
    edges = len(sim.graph)
    stream_bytes = edges * 8 * (2 * 2 + 1)
    d = sim.posts.latent_dim
    table = sim.posts.latent[: len(sim.posts)]
    index = np.random.default_rng(0).integers(0, len(table), fetches)
    best_row = best_fancy = best_copy = best_prefaulted = float("inf")
    big = np.ones(2**25, np.int64)  # 256 MiB
    out = np.empty_like(big)
    rows_out = np.empty((fetches, d), table.dtype)
    rows_out.fill(0)  # written once: its pages are mapped before the timed fetches
    for _ in range(3):
        cpu = time.process_time()
        table.take(index, axis=0)
        best_row = min(best_row, (time.process_time() - cpu) / fetches)
        # the same rows into a mapped buffer: the fetch without the page faults of a fresh
        # result (mode="clip": unbuffered; the indices are in range, so the same rows)
        cpu = time.process_time()
        table.take(index, axis=0, out=rows_out, mode="clip")
        best_prefaulted = min(best_prefaulted, (time.process_time() - cpu) / fetches)
        cpu = time.process_time()
        table[index]  # fancy indexing: several times slower per row than take
        best_fancy = min(best_fancy, (time.process_time() - cpu) / fetches)
        cpu = time.process_time()
        np.copyto(out, big)
        best_copy = min(best_copy, (time.process_time() - cpu) / (2 * big.nbytes))
    propagation_rows, context = _propagation_rows(env)
    best_context_row = float("inf")
    if propagation_rows:
        context_index = index % len(context)
        for _ in range(3):
            cpu = time.process_time()
            context.take(context_index, axis=0)
            best_context_row = min(best_context_row, (time.process_time() - cpu) / fetches)
    floor_s = random_rows * best_row + stream_bytes * best_copy
    return {
        "random_rows": int(random_rows),
        "row_bytes": 4 * d,
        "stream_bytes": int(stream_bytes),
        "random_row_s": best_row,
        "random_row_fancy_index_s": best_fancy,
        "stream_byte_s": best_copy,
        "floor_s": floor_s,
        "propagation_rows": int(propagation_rows),
        "propagation_row_bytes": int(context.shape[1] * 4) if propagation_rows else 0,
        "propagation_row_s": best_context_row if propagation_rows else 0.0,
        "random_row_prefaulted_s": best_prefaulted,
        "floor_prefaulted_s": random_rows * best_prefaulted + stream_bytes * best_copy,
        "floor_with_propagation_s": floor_s
        + (propagation_rows * best_context_row if propagation_rows else 0.0),
    }


def _propagation_rows(env: Any) -> tuple[int, Any]:
    """The user-context rows the last observation's local context propagation must fetch at
    random (above ``simulation.local_propagation_users()``, in older trees
    ``LOCAL_PROPAGATION_USERS``; 0 otherwise): each hop reads every
    followee's row (a user who follows nobody: its own) of the nodes it updates, the first
    hop those within ``hops - 1`` hops of the arm users, the last hop the arm users. Also
    the (N, 2d) float32 context table whose rows they are (for timing a fetch)."""
    import numpy as np

    from socialenv.core import simulation

    sim = env.sim
    threshold = getattr(simulation, "local_propagation_users", None)
    limit = (
        threshold()
        if threshold is not None
        else getattr(simulation, "LOCAL_PROPAGATION_USERS", None)
    )
    cfg = sim.config.context
    arms = getattr(env, "_arms", None)
    n = len(sim.users.stance)
    if limit is None or n <= limit or arms is None or cfg.hops == 0:
        return 0, None
    if env.config.observe_users or env.config.graph_observation:
        return 0, None
    indptr, indices = sim.graph.followees_csr()
    levels = [np.unique(np.maximum(arms["user"], 0))]
    for _ in range(cfg.hops - 1):
        nodes = levels[-1]
        degree = indptr[nodes + 1] - indptr[nodes]
        starts = np.repeat(indptr[nodes] - np.cumsum(degree) + degree, degree)
        neighbours = indices[np.arange(int(degree.sum())) + starts]
        levels.append(np.union1d(nodes, neighbours))
    degree = np.diff(indptr)
    rows = sum(int(np.maximum(degree[level], 1).sum()) + len(level) for level in levels)
    context = np.concatenate([sim.users.latent, sim.users.memory_latent], axis=1)
    return rows, context.astype(np.float32, copy=False)


def measure_long_run(
    num_users: int, rounds: int, seed: int, threads: int, code: str | None, queue: Any
) -> None:
    """CPU time of every round of one ``rounds``-round no-op episode; its last rounds are timed
    interleaved, round by round, with the first rounds of a second, fresh episode of the same
    seed, so that the ratio compares rounds that ran in the same minutes."""
    _set_threads(threads, code)
    import numpy as np

    from socialenv.envs.rec import RecEnv

    def timed_step(env: Any, cpu: list[float], wall: list[float]) -> None:
        w, c = time.perf_counter(), time.process_time()
        env.step(noop)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)

    load_before = os.getloadavg()
    late_from = 289 if rounds >= 300 else max(rounds - 11, 11)
    env = RecEnv(num_users=num_users, rounds=rounds)
    env.reset(seed=seed)
    noop = np.full(env.slate_size, env.no_op, np.int64)
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(late_from):
        timed_step(env, cpu, wall)
    young = RecEnv(num_users=num_users, rounds=rounds)
    young.reset(seed=seed)
    young_cpu: list[float] = []
    young_wall: list[float] = []
    timed_step(young, young_cpu, young_wall)  # round 0, as in the single episode not counted
    for i in range(late_from, rounds):
        timed_step(env, cpu, wall)
        if i - late_from < 10:
            timed_step(young, young_cpu, young_wall)
    posts, edges = len(env.sim.posts), len(env.sim.graph)
    env.close()
    young.close()
    late = cpu[late_from : late_from + 11]
    early = young_cpu[1:11]
    queue.put(
        {
            "num_users": num_users,
            "rounds": rounds,
            "threads": threads,
            "late_rounds": [late_from + 1, late_from + len(late)],
            "cpu_s_rounds_1_10": _median(early),
            "cpu_s_rounds_290_300": _median(late),
            "ratio": _median(late) / _median(early),
            # contention by other jobs only adds time, so the fastest rounds are the steadier ratio
            "ratio_min": min(late) / min(early),
            # the same episode's own rounds 1-10, timed minutes before its last rounds
            "ratio_sequential": _median(late) / _median(cpu[1:11]),
            "wall_s_rounds_1_10": _median(young_wall[1:11]),
            "wall_s_rounds_290_300": _median(wall[late_from:]),
            "posts_at_end": posts,
            "follow_edges_at_end": edges,
            "cpu_s_per_round": cpu,
            "cpu_s_per_round_fresh_episode": young_cpu,
            "load_before": load_before,
            "load_after": os.getloadavg(),
        }
    )


def _run(target: Any, *args: Any, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``target(*args, queue)`` in a fresh process, with ``env`` added to its environment
    from its start (glibc reads its malloc variables before Python runs)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    saved = {var: os.environ.get(var) for var in env or {}}
    os.environ.update(env or {})
    try:
        proc.start()
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
    row = queue.get()
    proc.join()
    return row


def _print_row(row: dict[str, Any]) -> None:
    print(
        f"[{row.get('code_label', 'this')}, {row['threads']} threads"
        f"{', heap kept' if row.get('heap') == 'keep' else ''}] "
        f"{row['num_users']:>9,} users: CPU {row['noop']['cpu_s_median'] * 1e3:8.1f} ms/step no-op "
        f"({row['noop']['cpu_steps_per_s']:6.1f}/s), {row['random']['cpu_s_median'] * 1e3:8.1f} "
        f"random ({row['random']['cpu_steps_per_s']:6.1f}/s); wall {row['noop']['wall_s_median'] * 1e3:8.1f}"
        f" / {row['random']['wall_s_median'] * 1e3:8.1f} ms; reset CPU {row['reset_cpu_s']:5.1f} s "
        f"wall {row['reset_wall_s']:5.1f} s, again {row.get('reset_again_cpu_s', float('nan')):5.1f} s CPU; peak {row['peak_rss_gib']:5.2f} GiB; load "
        f"{row['load_before'][0]:.1f}->{row['load_after'][0]:.1f}",
        flush=True,
    )
    if "floor" in row:
        fl = row["floor"]
        print(
            f"{row['num_users']:>9,} users: memory floor {fl['floor_s']:.2f} s per round "
            f"({fl['random_rows'] / 1e6:.1f}M random rows of {fl['row_bytes']} B at "
            f"{fl['random_row_s'] * 1e9:.0f} ns, {fl['stream_bytes'] / 2**30:.2f} GiB streamed); "
            f"CPU per round / floor = {fl['cpu_over_floor']:.1f}; prefaulted: "
            f"{fl['random_row_prefaulted_s'] * 1e9:.0f} ns per row, floor "
            f"{fl['floor_prefaulted_s']:.2f} s, CPU / it {fl['cpu_over_floor_prefaulted']:.1f}",
            flush=True,
        )


def _print_long_run(long_run: dict[str, Any]) -> None:
    first, last = long_run["late_rounds"]
    print(
        f"long run (1,000 users, {long_run['rounds']} rounds): CPU {long_run['cpu_s_rounds_1_10'] * 1e3:.1f} ms "
        f"(rounds 1-10) -> {long_run['cpu_s_rounds_290_300'] * 1e3:.1f} ms (rounds {first}-{last}), "
        f"ratio {long_run['ratio']:.2f} (fastest rounds: {long_run['ratio_min']:.2f}; "
        f"within one episode: {long_run['ratio_sequential']:.2f}); "
        f"{long_run['posts_at_end']:,} posts, "
        f"{long_run['follow_edges_at_end']:,} edges",
        flush=True,
    )


def _key(entry: dict[str, Any]) -> tuple[str, int, str, int]:
    """The :func:`_setting` of a summary entry of :func:`_settings`."""
    return (entry["code"], entry["threads"], entry["heap"], entry["num_users"])


def _setting(row: dict[str, Any]) -> tuple[str, int, str, int]:
    return (
        row.get("code_label", "this"),
        row["threads"],
        row.get("heap", "default"),
        row["num_users"],
    )


def _settings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over the repeats per (code, threads, heap, size), with the floor beside them, and
    per size the ratios to this code at the first thread count with the same heap setting
    (paired runs: same minutes)."""
    keys = sorted(
        {_setting(r) for r in rows},
        key=lambda k: (k[3], k[2] != "default", k[1], k[0] != "this"),
    )
    out = []
    for key in keys:
        label, threads, heap, n = key
        mine = [r for r in rows if _setting(r) == key]
        entry: dict[str, Any] = {
            "code": label,
            "commit": mine[0].get("code_commit"),
            "threads": threads,
            "heap": heap,
            "num_users": n,
            "repeats": len(mine),
            "cpu_s": _median([r["cpu_s_median"] for r in mine]),
            "wall_s": _median([r["wall_s_median"] for r in mine if "wall_s_median" in r]),
            "reset_cpu_s": _median([r["reset_cpu_s"] for r in mine]),
            "reset_again_cpu_s": _median(
                [r["reset_again_cpu_s"] for r in mine if "reset_again_cpu_s" in r]
            ),
            "reset_wall_s": _median([r["reset_wall_s"] for r in mine]),
            "peak_rss_gib": max(r["peak_rss_gib"] for r in mine),
            "load": [round(r["load_before"][0], 2) for r in mine],
        }
        entry["user_steps_per_cpu_s"] = n / entry["cpu_s"]
        entry["user_steps_per_wall_s"] = n / entry["wall_s"]
        floors = [r["floor"] for r in mine if "floor" in r]
        if floors:
            for key in (
                "floor_s",
                "floor_with_propagation_s",
                "random_row_s",
                "propagation_row_s",
                "cpu_over_floor",
                "wall_over_floor",
                "cpu_over_floor_with_propagation",
                "reset_cpu_over_floor",
                "floor_prefaulted_s",
                "random_row_prefaulted_s",
                "cpu_over_floor_prefaulted",
                "reset_cpu_over_floor_prefaulted",
                "reset_again_cpu_over_floor",
            ):
                entry[key] = _median([f[key] for f in floors if key in f])
        out.append(entry)
    for entry in out:
        base = next(
            (
                e
                for e in out
                if e["num_users"] == entry["num_users"]
                and e["code"] == "this"
                and e["heap"] == entry["heap"]
                and e["threads"] == min(x["threads"] for x in out)
            ),
            None,
        )
        if base is not None and base is not entry:
            entry["cpu_s_over_this_1"] = entry["cpu_s"] / base["cpu_s"]
            # each repeat's two runs: the paired form of the ratio, pair by pair
            base_cpu = {r["repeat"]: r["cpu_s_median"] for r in rows if _setting(r) == _key(base)}
            ratios = [
                r["cpu_s_median"] / base_cpu[r["repeat"]]
                for r in sorted(rows, key=lambda r: r["repeat"])
                if _setting(r) == _key(entry) and r["repeat"] in base_cpu
            ]
            if ratios:
                entry["cpu_s_over_this_1_paired"] = median_interval(ratios)
            entry["wall_speedup_of_this_1"] = base["wall_s"] / entry["wall_s"]
            entry["reset_cpu_s_over_this_1"] = entry["reset_cpu_s"] / base["reset_cpu_s"]
    return out


def _summary(rows: list[dict[str, Any]], long_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repeats, per size; the exponent from those medians (and per repeat)."""
    summary: dict[str, Any] = {"by_size": {}, "settings": _settings(rows)}
    first_threads = min(r["threads"] for r in rows) if rows else 1
    first_heap = rows[0].get("heap", "default") if rows else "default"
    rows = [
        r
        for r in rows
        if r.get("code_label", "this") == "this"
        and r["threads"] == first_threads
        and r.get("heap", "default") == first_heap
    ]
    for n in sorted({r["num_users"] for r in rows}):
        mine = [r for r in rows if r["num_users"] == n]
        summary["by_size"][n] = {
            "noop_cpu_s": _median([r["noop"]["cpu_s_median"] for r in mine]),
            "random_cpu_s": _median([r["random"]["cpu_s_median"] for r in mine]),
            "cpu_s": _median([r["cpu_s_median"] for r in mine]),
            "reset_cpu_s": _median([r["reset_cpu_s"] for r in mine]),
            "peak_rss_gib": max(r["peak_rss_gib"] for r in mine),
            "repeats": len(mine),
        }
    by_size = summary["by_size"]
    if 100_000 in by_size and 1_000_000 in by_size:
        ratio = by_size[1_000_000]["cpu_s"] / by_size[100_000]["cpu_s"]
        summary["cpu_ratio_1e6_over_1e5"] = ratio
        summary["scaling_exponent_above_1e5"] = math.log10(ratio)
        pairs = {}
        for r in rows:
            pairs.setdefault(r["repeat"], {})[r["num_users"]] = r["cpu_s_median"]
        summary["scaling_exponent_per_repeat"] = [
            math.log10(p[1_000_000] / p[100_000])
            for p in pairs.values()
            if 100_000 in p and 1_000_000 in p
        ]
    if long_runs:
        summary["long_run"] = long_runs[0]
        summary["long_runs"] = long_runs
        summary["long_run_ratio"] = _median([lr["ratio"] for lr in long_runs])
    return summary


def _source_tree(code: str) -> str:
    """The folder of ``code``: a source tree as given, or a git revision of this repository
    extracted into a temporary folder (``git archive``)."""
    import subprocess
    import tempfile

    if Path(code).is_dir():
        return str(Path(code).resolve())
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{code}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise ValueError(
            f"--code={code!r} is not allowed: a source folder or a git revision of {ROOT}"
        ) from err
    folder = Path(tempfile.mkdtemp(prefix=f"policysim-{commit[:10]}-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    _EXTRACTED[str(folder)] = commit[:7]
    return str(folder)


def median_interval(ratios: list[float]) -> dict[str, Any]:
    """Per-pair ratios: the list, their median and (three pairs or more) its 95% bootstrap
    interval."""
    import numpy as np
    from scipy.stats import bootstrap

    values = np.asarray(ratios, float)
    out: dict[str, Any] = {"per_pair": values.tolist(), "median": float(np.median(values))}
    if len(values) >= 3:
        ci = bootstrap((values,), np.median, confidence_level=0.95, random_state=0)
        out["ci95"] = [float(ci.confidence_interval.low), float(ci.confidence_interval.high)]
    return out


def balanced_order(settings: list[Any], repeat: int) -> list[Any]:
    """The runs of one repeat: in order on even repeats, reversed on odd ones, so that over
    an even number of repeats each code (and thread count) runs first as often as second and
    an effect of the order cannot pass for one of the code. The same code measured against
    itself (``--code X --compare X``) in the fixed order gave ×0.92 and ×0.97 on a 2-vCPU VM,
    as large as the changes being measured (BENCHMARKS.md, *Issue 24, fifteenth step*)."""
    return settings if repeat % 2 == 0 else settings[::-1]


def main() -> None:
    from policysim_infra.progress import add_quiet_option, progress_bar

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=list(DEFAULT_STEPS))
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=None,
        help="steps per size (default: 200, 40, 10, 6), alternating the two policies",
    )
    parser.add_argument("--long-rounds", type=int, default=300, help="0 skips the long run")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="thread counts (NumPy's BLAS, torch, numba and POLICYSIM_THREADS); several: "
        "each size is run at each count in turn, interleaved within every repeat",
    )
    parser.add_argument(
        "--heap",
        nargs="+",
        choices=["default", "keep"],
        default=["default"],
        help="glibc's malloc as it is, or keeping freed memory (the MALLOC_* variables of "
        "README's 'Large populations'); "
        "both: each size is run with each in turn, interleaved within every repeat",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of the whole sweep (and long run), one after another; the summary "
        "takes the median over them, so one slow phase of a shared machine "
        "does not decide a figure",
    )
    parser.add_argument(
        "--code",
        default=None,
        help="measure the package of another source tree, or of a git revision of this "
        "repository (extracted with `git archive`), with this script's measurements",
    )
    parser.add_argument(
        "--compare",
        default=None,
        help="also measure the package of this source tree or git revision (e.g. a8ddfff), "
        "alternating with this one run by run (paired: same minutes, same machine; the first "
        "of each pair alternates between repeats: use an even --repeats); the summary gives "
        "the medians of both and their ratio",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    if args.repeats < 1:
        raise ValueError(f"--repeats={args.repeats} is not allowed: an integer >= 1")
    if args.long_rounds and args.long_rounds < 22:
        raise ValueError(
            f"--long-rounds={args.long_rounds} is not allowed: 0 (no long run) or >= 22"
        )
    if args.steps is not None and len(args.steps) != len(args.users):
        raise ValueError(
            f"--steps has {len(args.steps)} values; expected one per --users ({len(args.users)})"
        )
    steps = args.steps or [DEFAULT_STEPS.get(n, 6) for n in args.users]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "runs" / "env_throughput" / f"{stamp}.json"
    code = None if args.code is None else _source_tree(args.code)
    codes: list[tuple[str, str | None]] = [("this", code)]
    if args.compare is not None:
        codes.append(("compare", _source_tree(args.compare)))
    if min(args.threads) < 1:
        raise ValueError(f"--threads={args.threads} is not allowed: integers >= 1")
    rows: list[dict[str, Any]] = []
    long_runs: list[dict[str, Any]] = []
    bar = progress_bar(
        total=args.repeats
        * (
            len(args.users) * len(args.threads) * len(args.heap) * len(codes)
            + bool(args.long_rounds)
        ),
        unit="measurement",
        quiet=args.quiet,
    )
    for repeat in range(args.repeats):
        for n, s in zip(args.users, steps, strict=True):
            settings = list(itertools.product(args.threads, args.heap, codes))
            for threads, heap, (label, tree) in balanced_order(settings, repeat):
                bar.set_description(f"{n:,} users, {threads} threads, heap {heap}, {label}")
                bar.update()
                row = _run(
                    measure_size,
                    n,
                    s,
                    args.seed,
                    threads,
                    tree,
                    heap,
                    env=KEEP_FREED_MEMORY if heap == "keep" else None,
                )
                row["repeat"] = repeat
                row["code_label"] = label
                row["code_commit"] = _commit(Path(tree) if tree else ROOT)
                rows.append(row)
                _print_row(row)
        if args.long_rounds:
            bar.set_description("long run")
            bar.update()
            long_run = _run(
                measure_long_run, 1_000, args.long_rounds, args.seed, args.threads[0], code
            )
            long_run["repeat"] = repeat
            long_runs.append(long_run)
            _print_long_run(long_run)
    summary = _summary(rows, long_runs)
    if args.repeats > 1:
        for n, size in summary["by_size"].items():
            print(
                f"{n:>9,} users, median of {args.repeats}: CPU {size['noop_cpu_s'] * 1e3:8.1f} / "
                f"{size['random_cpu_s'] * 1e3:8.1f} ms/step no-op / random; reset {size['reset_cpu_s']:5.1f} s"
            )
        if long_runs:
            print(f"long-run ratio, median of {args.repeats}: {summary['long_run_ratio']:.2f}")
    if len(summary["settings"]) > 1 or args.compare is not None:
        for e in summary["settings"]:
            floor = (
                f"; floor {e['floor_s']:.2f} s, CPU/floor {e['cpu_over_floor']:.1f}, wall/floor "
                f"{e['wall_over_floor']:.1f}, CPU/(floor + propagation) "
                f"{e['cpu_over_floor_with_propagation']:.1f}, prefaulted floor "
                f"{e['floor_prefaulted_s']:.2f} s (CPU/it {e['cpu_over_floor_prefaulted']:.1f}, "
                f"reset/it {e['reset_cpu_over_floor_prefaulted']:.1f})"
                if "floor_s" in e
                else ""
            )
            paired = (
                f"; CPU x{e['cpu_s_over_this_1']:.2f}, wall speed-up x{e['wall_speedup_of_this_1']:.2f}"
                f" of this code at the fewest threads"
                if "cpu_s_over_this_1" in e
                else ""
            )
            if "cpu_s_over_this_1_paired" in e:
                pair = e["cpu_s_over_this_1_paired"]
                ci = pair.get("ci95")
                paired += (
                    f" (per repeat x{', x'.join(f'{r:.2f}' for r in pair['per_pair'])}: "
                    f"median x{pair['median']:.2f}"
                    + (f", 95% CI {ci[0]:.2f}-{ci[1]:.2f}" if ci else "")
                    + ")"
                )
            print(
                f"{e['num_users']:>9,} users, {e['code']} ({e['commit']}), {e['threads']} threads, "
                f"heap {e['heap']}, "
                f"median of {e['repeats']}: CPU {e['cpu_s']:.3f} s, wall {e['wall_s']:.3f} s per "
                f"step ({e['user_steps_per_cpu_s']:,.0f} user-steps/CPU-s), reset CPU "
                f"{e['reset_cpu_s']:.2f} s (again {e['reset_again_cpu_s']:.2f} s){floor}{paired}; "
                f"load {e['load']}"
            )
    if "scaling_exponent_above_1e5" in summary:
        print(
            f"CPU time(1e6)/time(1e5) = {summary['cpu_ratio_1e6_over_1e5']:.2f}; scaling exponent "
            f"{summary['scaling_exponent_above_1e5']:.3f}"
            + (
                f" (per repeat: {', '.join(f'{e:.3f}' for e in summary['scaling_exponent_per_repeat'])})"
                if args.repeats > 1
                else ""
            )
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "utc": stamp,
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine(),
                },
                "code": code or str(ROOT),
                "commit": _commit(Path(code) if code else ROOT),
                "rows": rows,
                "summary": summary,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
