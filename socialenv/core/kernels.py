"""Hot-path kernels of a round, each with a compiled (numba) and a pure-NumPy version.

Both versions of every kernel return bit-identical results (``tests/socialenv/test_kernels.py``
compares them, and a whole 10-round episode of both envs, bit for bit); the compiled one
only avoids the temporaries and sorts of the NumPy one. The backend is chosen once, at
import, from the environment variable ``POLICYSIM_KERNELS``:

- ``auto`` (default): numba when it imports, else NumPy;
- ``numba``: numba (an ``ImportError`` if it is missing);
- ``numpy``: the pure-NumPy versions.

:data:`BACKEND` says which one is in use; :func:`use_backend` switches at run time (tests).

Threads are opt-in: ``POLICYSIM_THREADS=N`` (read at import) or :func:`set_threads` runs the
kernels that have a threaded version (the local context propagation's hops, the Rec arm
columns, the relational and cluster draws, top-k, the memory update, the graph's edge merge,
the feed clean-up, exposure filter and impressions, the row gathers) on N threads of numba's
pool, and the blocks of :func:`map_blocks` (``policysim_infra.blocks``: the personalized
channel's and the Rec candidates' scoring, the surrogate's reaction probabilities, NumPy calls
that release the GIL) on a pool of N Python threads. Each splits per-row work only, every row
computed by one thread in the one-thread order of operations (blocks and pieces are the same
on any thread count), so results are bit-identical to one thread
(``tests/socialenv/test_kernels.py``, ``tests/socialenv/test_round_kernels.py``; the
trajectory digest with ``POLICYSIM_THREADS=2``).
Kernels whose result would differ in the last bit between the two (anything calling
``exp`` or a BLAS/einsum reduction) are deliberately left to NumPy. The float kernels that
are compiled reproduce NumPy's own summation order (pairwise sums of up to 128 terms: norms,
segment sums); the context propagation's reference is SciPy's float32 CSR product, which the
compiled hop reproduces row by row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from agent_models import surrogate_kernels
from policysim_infra.blocks import block_threads, inside_block, set_block_threads
from policysim_infra.blocks import map_blocks as map_blocks  # re-exported for the phases
from policysim_infra.blocks import random_in_blocks as random_in_blocks  # re-exported
from policysim_infra.buffers import ReusedArrays
from socialenv.core.pages import huge_pages

_ENV_VAR = "POLICYSIM_KERNELS"
#: NumPy sums up to this many terms without splitting (longer segments use NumPy here).
_PAIRWISE_BLOCK = 128
_CHOICES = ("auto", "numba", "numpy")


# ----------------------------------------------------------------------------- NumPy versions
def dedupe_rows_numpy(feed: np.ndarray) -> np.ndarray:
    """(B, F) copy of ``feed`` with repeated ids (>= 0) within a row set to -1, keeping the first."""
    return _dedupe_rows_in_place_numpy(feed.copy())


def _dedupe_rows_in_place_numpy(feed: np.ndarray) -> np.ndarray:
    """:func:`dedupe_rows_numpy` written into ``feed`` itself, which is returned."""
    order = np.argsort(feed, axis=1, kind="stable")
    ordered = np.take_along_axis(feed, order, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    rows, cols = np.nonzero(repeated)
    feed[rows, order[rows, cols + 1]] = -1
    return feed


def compact_rows_numpy(feed: np.ndarray, width: int) -> np.ndarray:
    """(B, width): the valid (>= 0) entries of each row first, in order, padded with -1."""
    order = np.argsort(feed < 0, axis=1, kind="stable")
    packed = np.take_along_axis(feed, order, axis=1)[:, :width]
    if packed.shape[1] < width:
        pad = np.full((feed.shape[0], width - packed.shape[1]), -1, np.int64)
        packed = np.concatenate([packed, pad], axis=1)
    return packed


def top_k_rows_numpy(
    candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool
) -> np.ndarray:
    """(B, k) the ``k`` best-scored candidates of each row, best first (ties: leftmost).

    Repeated candidates within a row and negative ids score -inf first; a chosen candidate
    whose score is -inf (``drop_nonfinite``: not finite) is returned as -1. ``score`` (B, C)
    is modified in place.
    """
    candidate = dedupe_rows_numpy(candidate)
    score[candidate < 0] = -np.inf
    best = np.argsort(-score, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(candidate, best, axis=1)
    best_score = np.take_along_axis(score, best, axis=1)
    chosen[~np.isfinite(best_score) if drop_nonfinite else best_score == -np.inf] = -1
    return chosen


def segment_sum_rows_numpy(values: np.ndarray, rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    """(S, d): sums of ``values[rows[first[i]:first[i + 1]]]`` (the last segment runs to the
    end), accumulated in order in ``values``' dtype (as ``np.add.reduceat``)."""
    return np.add.reduceat(values[rows], first, axis=0)


def same_sign_share_numpy(sign: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """(R,) float64, for each CSR row with entries: the share of its entries j with
    sign[j] == sign[row]."""
    degree = np.diff(indptr)
    has = degree > 0
    same = (np.repeat(sign, degree) == sign[indices]).astype(np.float32)
    return np.add.reduceat(same, indptr[:-1][has]) / degree[has]


def unit_rows_numpy(x: np.ndarray) -> np.ndarray:
    """(n, d) float32: each row of ``x`` divided by its Euclidean norm (at least 1e-8)."""
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-8)).astype(np.float32)


def unit_noisy_rows_numpy(
    base: np.ndarray, rows: np.ndarray | None, scale: float, noise: np.ndarray
) -> np.ndarray:
    """:func:`unit_rows_numpy` of ``base[rows] + scale * noise`` (all of ``base`` when ``rows``
    is None)."""
    return unit_rows_numpy((base if rows is None else base[rows]) + scale * noise)


def merge_edits_numpy(
    values: np.ndarray, drop: np.ndarray, at: np.ndarray, new: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """``np.insert(values, at, new)`` without the entries at the (old) indices ``drop``
    (strictly increasing; ``at`` non-decreasing), 1-D arrays, written into ``out``
    (len(values) + len(new) − len(drop),), which is returned."""
    out[:] = np.delete(np.insert(values, at, new), drop + np.searchsorted(at, drop, side="right"))
    return out


def find_edges_numpy(
    indptr: np.ndarray,
    indices: np.ndarray,
    keys: np.ndarray,
    n: int,
    pos: np.ndarray,
    found: np.ndarray,
) -> None:
    """For the edge keys ``src * n + dst`` (K,) of a followee CSR (``indptr`` (n + 1,),
    ``indices`` (E,) sorted within each row), in place: ``pos`` (K,) int64, the position
    ``np.searchsorted`` gives each key in the graph's sorted keys (``src`` row's start plus
    the followees below ``dst``), and ``found`` (K,) bool, whether the edge exists."""
    src = keys // n
    row = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    pos[:] = np.searchsorted(row * n + indices, keys)
    inside = pos < indptr[src + 1]
    found[:] = inside
    found[inside] = indices[pos[inside]] == keys[inside] - src[inside] * n


def sorted_unique(values: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """Sorted distinct values of a 1-D array (sort + mask: NumPy's hash-based ``np.unique``
    is an order of magnitude slower on tens of millions of int64 keys). ``in_place`` sorts
    ``values`` itself instead of a copy."""
    if in_place:
        values.sort()
    else:
        values = np.sort(values)
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def distinct_sorted_edges_numpy(src: np.ndarray, dst: np.ndarray) -> bool:
    """Whether the edges ``src[i] -> dst[i]`` (1-D integer arrays of one length) hold no
    self-loop and increase strictly in (src, dst) order: sorted, without duplicates."""
    if not (src != dst).all():
        return False
    later_source = src[1:] > src[:-1]
    same_source = src[1:] == src[:-1]
    return bool((later_source | (same_source & (dst[1:] > dst[:-1]))).all())


def distinct_sorted_edges(src: np.ndarray, dst: np.ndarray) -> bool:
    """See :func:`distinct_sorted_edges_numpy`; the compiled check stops at the first edge
    that fails and makes no (E,) temporaries (a million-user graph has 15M edges)."""
    if _active is _NUMPY or src.dtype.kind not in "iu" or dst.dtype.kind not in "iu":
        return distinct_sorted_edges_numpy(src, dst)
    return bool(_active["distinct_sorted_edges"](src, dst))


def row_shift(rows: np.ndarray, n: int) -> np.ndarray:
    """(n + 1,) how far each start of a CSR of ``n`` rows moves when one entry is added in
    each of ``rows``."""
    shift = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=shift[1:])
    return shift


def edit_plan_numpy(
    indptr: np.ndarray,
    indices: np.ndarray,
    n: int,
    follow_src: np.ndarray,
    follow_dst: np.ndarray,
    unfollow_src: np.ndarray,
    unfollow_dst: np.ndarray,
) -> tuple[int, int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None]:
    """The follows and unfollows (M,) of one round against a followee CSR of ``n`` users
    (``indptr`` (n + 1,), ``indices`` (E,) sorted within each row), in one pass: (added,
    removed, change). Self-follows and existing edges are not added, missing edges not
    removed, and an edge added and removed in the same round is counted in both and kept out.
    ``change`` is None when the graph stays as it is, else (indptr after (n + 1,), drop,
    at, new): the new indices are ``merge_edits(indices, drop, at, new)``."""
    keep = follow_src != follow_dst
    added_keys = sorted_unique(follow_src[keep].astype(np.int64) * n + follow_dst[keep])
    removed_keys = sorted_unique(unfollow_src.astype(np.int64) * n + unfollow_dst)
    pos, exists = find_edges(indptr, indices, added_keys, n)
    new, at = added_keys[~exists], pos[~exists]
    pos, found = find_edges(indptr, indices, removed_keys, n)
    drop = pos[found]
    undone = isin(new, removed_keys)  # added, then removed again
    added, removed = len(new), len(drop) + int(undone.sum())
    if not len(drop) and not len(new[~undone]):
        return added, removed, None
    new, at = new[~undone], at[~undone]
    after = row_shift(new // n, n)
    after -= row_shift(removed_keys[found] // n, n)
    after += indptr
    return added, removed, (after, drop, at, new % n)


def memory_update_numpy(
    memory: np.ndarray,
    latent: np.ndarray,
    rows: np.ndarray,
    first: np.ndarray,
    who: np.ndarray,
    keep: float,
) -> None:
    """In place: ``memory[who[i]]`` becomes the unit vector of ``keep · memory[who[i]] +
    (1 − keep) · unit(engaged_i)``, engaged_i the sum of ``latent[rows[first[i]:first[i + 1]]]``
    (the last segment runs to the end); float32 ``memory`` and ``latent``."""
    engaged = segment_sum_rows_numpy(latent, rows, first)
    mixed = keep * memory[who] + (1 - keep) * engaged / np.maximum(
        np.linalg.norm(engaged, axis=1, keepdims=True), 1e-8
    )
    memory[who] = mixed / np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-8)


def relational_draws_numpy(
    indptr: np.ndarray,
    indices: np.ndarray,
    active: np.ndarray,
    offset_draw: np.ndarray,
    pick_draw: np.ndarray,
    author_start: np.ndarray,
    by_author: np.ndarray,
    lo: int,
) -> np.ndarray:
    """(B, K) one post per draw: the followee ``offset_draw`` picks among active user r's
    followees (CSR row), then that followee's post ``pick_draw`` picks among the posts
    ``lo + by_author[author_start[f]:author_start[f + 1]]``; -1 where either list is empty."""
    b, k = offset_draw.shape
    degree = indptr[active + 1] - indptr[active]
    offset = (offset_draw * degree[:, None]).astype(np.int64)
    has_followees = degree > 0
    followee = (
        np.where(
            has_followees[:, None],
            indices[np.minimum(indptr[active][:, None] + offset, len(indices) - 1)],
            0,
        )
        if len(indices)
        else np.zeros((b, k), np.int64)
    )
    count = author_start[followee + 1] - author_start[followee]
    pick = (pick_draw * count).astype(np.int64)
    return np.where(
        has_followees[:, None] & (count > 0),
        lo + by_author[np.minimum(author_start[followee] + pick, len(by_author) - 1)],
        -1,
    )


def propagate_csr_numpy(
    context: np.ndarray, indptr: np.ndarray, indices: np.ndarray, alpha: float, hops: int
) -> np.ndarray:
    """(N, D) float32: ``hops`` steps of C ← α·C + (1 − α)·D⁻¹A·C over the CSR graph (row u
    lists whom u follows; a user who follows nobody keeps its context), with SciPy's CSR
    product (:mod:`socialenv.core.propagation`)."""
    from socialenv.core.propagation import normalized_adjacency, propagate

    return propagate(context, normalized_adjacency(indptr, indices, len(indptr) - 1), alpha, hops)


def observe_reactions_numpy(
    user: np.ndarray,
    reply: np.ndarray,
    toxicity: np.ndarray,
    noise: np.ndarray,
    cross: np.ndarray,
    hostile: np.ndarray,
    decay: float,
    history: dict[str, np.ndarray],
) -> None:
    """In place, in ``history``, for a round's reactions (M,) by ``user``: each replying
    user's (N,) float32 ``"reply_toxicity"`` ← ``decay`` · itself + (1 − ``decay``) · the mean
    of its replies' observed toxicity (``toxicity`` + ``noise``, one noise draw per reply in
    order, clipped to [0, 1]); (N,) float64 ``"cross_total"`` += each user's ``cross``
    reactions, ``"cross_civil"`` += those not ``hostile``."""
    reply_toxicity = history["reply_toxicity"]
    n = len(reply_toxicity)
    if reply.any():
        seen = np.clip(toxicity[reply] + noise, 0.0, 1.0)
        who = user[reply]
        total = np.bincount(who, weights=seen, minlength=n)
        count = np.bincount(who, minlength=n)
        wrote = count > 0
        reply_toxicity[wrote] = (
            decay * reply_toxicity[wrote] + (1 - decay) * total[wrote] / count[wrote]
        )
    history["cross_total"] += np.bincount(user[cross], minlength=n)
    history["cross_civil"] += np.bincount(user[cross & ~hostile], minlength=n)


def count_reactions_numpy(
    post: np.ndarray, kind: np.ndarray, kinds: np.ndarray, counters: tuple[np.ndarray, ...]
) -> None:
    """In place: ``counters[j][p] +=`` the number of reactions to post p of kind ``kinds[j]``."""
    for j, counter in enumerate(counters):
        ids, counts = unique_counts(post[kind == kinds[j]])
        counter[ids] += counts.astype(counter.dtype)


def drop_own_and_repeated_numpy(
    feed: np.ndarray, owner: np.ndarray, author: np.ndarray
) -> np.ndarray:
    """(B, F) copy of ``feed`` without the posts row r's ``owner[r]`` wrote (``author[post]``)
    and without repeats within a row (the first kept), both as -1."""
    valid = feed >= 0
    own_post = valid & (author[np.where(valid, feed, 0)] == owner[:, None])
    return dedupe_rows(np.where(own_post, -1, feed), in_place=True)


def keyed_max_numpy(
    sorted_key: np.ndarray, keys: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each entry of ``keys`` (distinct): whether the sorted ``sorted_key`` (R,) holds it,
    and (M, len(keys)) the max of each row of ``values`` (M, R) over the columns holding it
    (0 where none does)."""
    start = np.searchsorted(sorted_key, keys, side="left")
    stop = np.searchsorted(sorted_key, keys, side="right")
    found = stop > start
    best = np.zeros((len(values), len(keys)), values.dtype)
    if found.any():
        order = np.argsort(start[found])
        bounds = np.stack([start[found][order], stop[found][order]], axis=1).ravel()
        padded = np.concatenate([values, np.zeros((len(values), 1), values.dtype)], axis=1)
        segment = np.maximum.reduceat(padded, bounds, axis=1)[:, ::2]
        best[:, np.flatnonzero(found)[order]] = segment
    return found, best


def rec_arm_columns_numpy(
    context: np.ndarray,
    user_rows: np.ndarray,
    arm_row: np.ndarray,
    post_latent: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    user_columns: tuple[np.ndarray, ...],
    post_columns: tuple[np.ndarray, ...],
    round_: int,
    source: np.ndarray,
) -> None:
    """Fill the Rec arm contexts ``context`` (K, w + d + 14 + S) in place, but for the columns
    computed with NumPy's ``log``/``log1p``/``einsum`` (see ``RecEnv._arm_contexts``): arm k's
    user context ``user_rows[arm_row[k]]`` (w columns), its post's embedding ``post_latent[post[k]]``
    (d), then the features receiver stance, author stance, stance divergence, cross stance,
    post toxicity, engagement (raw count, float32), post age, interest similarity (left
    unset), receiver recent toxicity, flagged, activity, post stance, agreement, reply
    propensity (unset), and the one-hot ``source[k]`` (S columns).

    ``user_columns`` = (stance f32, discrete stance int8, recent toxicity f32, activity f32) (N,);
    ``post_columns`` = (author int64, likes, retweets, replies, dislikes int32, toxicity f32,
    round int32, flagged bool, stance f32) (P,).
    """
    stance, discrete, recent_toxicity, activity = user_columns
    author_of, likes, retweets, replies, dislikes, toxicity, post_round, flagged, post_stance = (
        post_columns
    )
    width, d = user_rows.shape[1], post_latent.shape[1]
    author = author_of[post]
    s_v, s_u = stance[user], stance[author]
    d_v, d_u = discrete[user].astype(np.float32), discrete[author].astype(np.float32)
    engagement = likes[post] + retweets[post] + replies[post] + dislikes[post]
    context[:, :width] = user_rows.take(arm_row, axis=0)
    context[:, width : width + d] = post_latent.take(post, axis=0)
    features = {
        0: s_v,
        1: s_u,
        2: np.abs(d_u - d_v) / 2,
        3: d_u * d_v == -1,
        4: toxicity[post],
        5: engagement,
        6: round_ - post_round[post],
        8: recent_toxicity[user],
        9: flagged[post],
        10: activity[user],
        11: post_stance[post],
        12: s_v * post_stance[post],
    }
    column = width + d
    for index, feature in features.items():
        context[:, column + index] = feature
    context[:, column + 14 :] = np.eye(context.shape[1] - column - 14, dtype=np.float32).take(
        source, axis=0
    )


def place_picks_numpy(
    feed: np.ndarray,
    channel: np.ndarray,
    row: np.ndarray,
    post: np.ndarray,
    start: int,
    width: int,
    injected: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Copies of ``feed`` and ``channel`` (B, F) where row r's picks (``post[i]`` for
    ``row[i] == r``, in the order given, at most ``width``) fill columns ``start..`` and r's
    former entries of those ``width`` columns move right behind them (the last fall off); the
    picks' channel becomes ``injected``."""
    order = np.argsort(row, kind="stable")
    row, post = row[order], post[order]
    slot = np.arange(len(row)) - np.searchsorted(row, row)
    keep = slot < width
    row, post, slot = row[keep], post[keep], slot[keep]
    picks = np.full((feed.shape[0], width), -1, np.int64)
    picks[row, slot] = post
    count = np.bincount(row, minlength=feed.shape[0])[:, None]
    column = np.arange(width)[None, :]
    builtin = feed[:, start : start + width]
    shifted = np.take_along_axis(builtin, np.maximum(column - count, 0), axis=1)
    feed = feed.copy()
    channel = channel.copy()
    feed[:, start : start + width] = np.where(column < count, picks, shifted)
    channel[:, start : start + width] = np.where(
        column < count, np.int8(injected), channel[:, start : start + width]
    )
    return feed, channel


# ----------------------------------------------------------------------------- numba versions
def _build_numba() -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    from socialenv.core._numba_kernels import KERNELS, PARALLEL_KERNELS

    return dict(KERNELS), dict(PARALLEL_KERNELS)


def insert_sorted_numpy(values: np.ndarray, pos: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``np.insert(values, pos, new)`` for non-decreasing ``pos`` (1-D arrays)."""
    return np.insert(values, pos, new)


def delete_sorted_numpy(values: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """``np.delete(values, drop)`` for strictly increasing indices ``drop`` (1-D arrays)."""
    return np.delete(values, drop)


_NUMPY = {
    "delete_sorted": delete_sorted_numpy,
    "insert_sorted": insert_sorted_numpy,
    "dedupe_rows": _dedupe_rows_in_place_numpy,
    "compact_rows": compact_rows_numpy,
    "top_k_rows": top_k_rows_numpy,
    "segment_sum_rows": segment_sum_rows_numpy,
    "same_sign_share": same_sign_share_numpy,
    "unit_rows": unit_rows_numpy,
    "unit_noisy_rows": unit_noisy_rows_numpy,
    "merge_edits": merge_edits_numpy,
    "find_edges": find_edges_numpy,
    "memory_update": memory_update_numpy,
    "relational_draws": relational_draws_numpy,
    "propagate_csr": propagate_csr_numpy,
    "count_reactions": count_reactions_numpy,
    "observe_reactions": observe_reactions_numpy,
    "drop_own_and_repeated": drop_own_and_repeated_numpy,
    "keyed_max": keyed_max_numpy,
    "place_picks": place_picks_numpy,
    "rec_arm_columns": rec_arm_columns_numpy,
}
_compiled: dict[str, Callable[..., Any]] | None = None
_compiled_parallel: dict[str, Callable[..., Any]] = {}
_active: dict[str, Callable[..., Any]] = _NUMPY
BACKEND = "numpy"
_THREADS_VAR = "POLICYSIM_THREADS"
#: Threads of the parallel kernels (:func:`set_threads`); 1 = everything on the calling thread.
THREADS = 1


def use_backend(name: str) -> str:
    """Select ``"auto"``, ``"numba"`` or ``"numpy"`` kernels (the surrogate's too,
    :mod:`agent_models.surrogate_kernels`); returns the backend in use."""
    global _compiled, _compiled_parallel, _active, BACKEND
    if name not in _CHOICES:
        raise ValueError(f"{_ENV_VAR}={name!r} is not allowed: one of {_CHOICES}")
    surrogate_kernels.use_backend(name)
    if name == "numpy":
        _active, BACKEND = _NUMPY, "numpy"
        return BACKEND
    if _compiled is None:
        try:
            _compiled, _compiled_parallel = _build_numba()
        except ImportError:
            if name == "numba":
                raise
            _active, BACKEND = _NUMPY, "numpy"
            return BACKEND
    _active, BACKEND = _compiled, "numba"
    return BACKEND


use_backend(os.environ.get(_ENV_VAR, "auto").strip().lower() or "auto")


def set_threads(threads: int) -> int:
    """Run the parallel kernels on ``threads`` threads of numba's pool (1: on the calling
    thread, the default; the environment variable ``POLICYSIM_THREADS`` sets it at import).

    Parallel kernels split per-row work only (each row computed by one thread, in the same
    order of operations), so every result is bit-identical to one thread's. With the NumPy
    backend the setting is kept but has no effect. More than one thread also lets the idle
    OpenMP threads sleep (:func:`_passive_openmp_workers`). Returns the setting."""
    global THREADS
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer) or threads < 1:
        raise ValueError(f"threads={threads!r} is not allowed: an integer >= 1")
    threads = int(threads)
    if threads > 1 and _compiled is not None:
        import numba

        if threads > numba.config.NUMBA_NUM_THREADS:
            raise ValueError(
                f"threads={threads} is not allowed: at most NUMBA_NUM_THREADS="
                f"{numba.config.NUMBA_NUM_THREADS} (set that variable before numba is imported)"
            )
        _passive_openmp_workers()
        numba.set_num_threads(threads)
    THREADS = threads
    set_block_threads(threads)
    return THREADS


#: What the OpenMP runtime reads, when it loads, for how its idle threads wait
_OPENMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_openmp_warned = False


def _openmp_loaded() -> bool:
    """Whether a GNU OpenMP runtime is already loaded in this process (torch's, which numba
    then shares, or numba's own): on Linux from the process's memory map, elsewhere whether
    numba's thread pool has started."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        from numba.np.ufunc import parallel

        return bool(getattr(parallel, "_is_initialized", True))


def _passive_openmp_workers() -> None:
    """Before the OpenMP runtime loads, ``OMP_WAIT_POLICY=PASSIVE`` unless either OpenMP wait
    variable is set: libgomp's idle threads then sleep at once instead of spinning for about
    9 ms after each threaded kernel, on the cores that the round's Python row blocks
    (:func:`map_blocks`) need next. A 1M round on 2 threads scaled ×1.62 with it, ×1.53 with
    the default spin (BENCHMARKS.md, issue 24's nineteenth step). torch shares the runtime:
    its small networks' updates wake the sleeping threads, 1-3 ms more per update than with a
    spin; ``GOMP_SPINCOUNT=10000`` keeps those fast and frees the cores almost as well. The
    runtime reads the variables once, when it loads; if it has loaded already (``import
    torch`` loads it), a warning says how to set them."""
    global _openmp_warned
    if any(var in os.environ for var in _OPENMP_WAIT_VARS):
        return
    if not _openmp_loaded():
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        return
    if not _openmp_warned:
        _openmp_warned = True
        import warnings

        warnings.warn(
            "PolicySim threads: the OpenMP runtime was loaded (by torch or numba) before "
            "threads were set, so its idle threads spin for about 9 ms after each threaded "
            "kernel, on the cores the round's row blocks need (a 1M round on 2 threads: ×1.53 "
            "instead of ×1.62). Import PolicySim with POLICYSIM_THREADS set before torch, or "
            "export OMP_WAIT_POLICY=PASSIVE (or GOMP_SPINCOUNT=10000, which keeps small torch "
            "updates faster); setting either silences this.",
            RuntimeWarning,
            stacklevel=3,
        )


def _threads_from_env() -> int:
    value = os.environ.get(_THREADS_VAR, "").strip()
    if not value:
        return 1
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{_THREADS_VAR}={value!r} is not allowed: an integer >= 1") from None


set_threads(_threads_from_env())


_blas_libraries: list[Any] | None = None


class _OneBlasThread:
    """The context manager :func:`one_blas_thread` returns (a class: a 1,000-user step enters
    it about 8 times, and the generator-based one took 2.6 µs each, this one 1.7 µs)."""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        global _blas_libraries
        if _blas_libraries is None:
            from threadpoolctl import ThreadpoolController

            _blas_libraries = ThreadpoolController().select(user_api="blas").lib_controllers
        self._previous = previous = [library.get_num_threads() for library in _blas_libraries]
        for library, threads in zip(_blas_libraries, previous, strict=True):
            if threads != 1:
                library.set_num_threads(1)

    def __exit__(self, *exc_info: object) -> None:
        for library, threads in zip(_blas_libraries or (), self._previous, strict=True):
            if threads != 1:
                library.set_num_threads(threads)


def one_blas_thread() -> contextlib.AbstractContextManager[None]:
    """Run the block with the process's BLAS libraries (NumPy's OpenBLAS) on one thread, and
    restore their thread counts after it.

    The round's dense products are small (a chunk of users or posts against the cluster
    centres). On more threads they gain nothing, and OpenBLAS's idle threads spin for a while
    after each product, on the cores that :func:`map_blocks`' threads and numba's need: a
    1M-user personalized channel on 2 threads was no faster than on one, and 1.55× faster
    with its products on one BLAS thread. A threaded product can also round differently
    (above ~100k rows), so one thread also keeps a seed's world the same on any machine.

    The setting is process-wide: two threads using this at once may restore each other's
    count early, and a product then runs on the library's threads again. The env uses it on
    the thread that steps it, never inside :func:`map_blocks`' blocks.
    """
    return _OneBlasThread()


def _parallel_or_serial(name: str) -> Callable[..., Any]:
    """The threaded version of kernel ``name`` when :data:`THREADS` > 1 and it has one (not
    inside a block of :func:`map_blocks`, which already runs on a thread of its own)."""
    if THREADS > 1 and _active is _compiled and name in _compiled_parallel and not inside_block():
        return _compiled_parallel[name]
    return _active[name]


def sorted_starts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of the sorted 1-D ``values`` and the index of each one's first
    occurrence (``np.unique(values, return_index=True)`` for sorted input, without its sort)."""
    if len(values) == 0:
        return values.copy(), np.zeros(0, np.int64)
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    first = np.flatnonzero(keep)
    return values[first], first


def unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` for 1-D integer ``values`` by sort and mask
    (NumPy 2's hash-based ``unique`` is several times slower on a few thousand ints)."""
    distinct, first = sorted_starts(np.sort(values))
    return distinct, np.diff(np.append(first, len(values)))


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for 1-D ``values`` by sort and mask."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    keep = np.empty(len(values), bool)
    keep[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    inverse = np.empty(len(values), np.int64)
    inverse[order] = np.cumsum(keep) - 1
    return ordered[keep], inverse


def first_occurrence(values: np.ndarray) -> np.ndarray:
    """Index of the first occurrence of each distinct value of 1-D ``values``, in value order
    (``np.unique(values, return_index=True)[1]``)."""
    order = np.argsort(values, kind="stable")
    return order[sorted_starts(values[order])[1]]


def searchsorted(
    a: np.ndarray,
    v: np.ndarray,
    side: Literal["left", "right"] = "left",
    sorter: np.ndarray | None = None,
    block: int = 65_536,
) -> np.ndarray:
    """``np.searchsorted(a, v, side, sorter)`` for 1-D ``v``, ``block`` values at a time on
    :func:`map_blocks`' threads when there are several blocks (NumPy releases the GIL while
    it searches; each position is found on its own, so the result is the same)."""
    if block_threads() == 1 or np.ndim(v) != 1 or len(v) < 2 * block:
        return np.searchsorted(a, v, side=side, sorter=sorter)
    out = np.empty(len(v), np.intp)

    def run(lo: int, hi: int) -> None:
        out[lo:hi] = np.searchsorted(a, v[lo:hi], side=side, sorter=sorter)

    map_blocks(run, len(v), block)
    return out


def most_first(values: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(-values, kind="stable")[:k]``: the indices of the k largest of the 1-D
    integer ``values``, largest first, ties in index order. Above 16,384 values only the
    entries that reach the k-th largest value are sorted (one partition finds it)."""
    negated = -values
    if k >= len(values) or len(values) <= 16_384:
        return np.argsort(negated, kind="stable")[: max(k, 0)]
    if k <= 0:
        return np.zeros(0, np.int64)
    kth = np.partition(negated, k - 1)[k - 1]
    reaching = np.flatnonzero(negated <= kth)  # in index order: the stable sort keeps it
    return reaching[np.argsort(negated[reaching], kind="stable")[:k]]


def index_of(values: np.ndarray, items: np.ndarray) -> np.ndarray:
    """(len(items),) int64: the index in ``values`` (1-D distinct integers) of each of the 1-D
    integer ``items``, -1 where it does not occur. Through a table over the values' range
    where that range is at most 8 times their count (plus 4,096): a scatter and a gather
    instead of a sort and a binary search per item; else by sort and binary search."""
    items = np.asarray(items)
    if len(values) == 0 or len(items) == 0:
        return np.full(len(items), -1, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 8 * len(values) + 4096 and -(2**62) < lo and hi < 2**62:
        table = np.full(hi - lo + 3, -1, np.int64)  # its first and last entries: outside
        table[values - (lo - 1)] = np.arange(len(values))
        return table[np.clip(items, lo - 1, hi + 1) - (lo - 1)]
    order = np.argsort(values, kind="stable")
    at = order[np.minimum(searchsorted(values, items, sorter=order), len(values) - 1)]
    return np.where(values[at] == items, at, -1)


def isin(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``np.isin(values, members)`` for integer arrays, by sort and binary search (with the
    compiled kernels and int64 arrays, by a hash table of ``members``:
    :func:`reaction_choices`)."""
    values, members = np.asarray(values), np.asarray(members)
    if _active is not _NUMPY and values.dtype == members.dtype == np.int64 and members.ndim == 1:
        found = reaction_choices(members, values.reshape(-1)) >= 0
        return found.reshape(values.shape)
    members = np.sort(members)
    if len(members) == 0:
        return np.zeros(np.shape(values), bool)
    pos = np.minimum(searchsorted(members, values), len(members) - 1)
    return members[pos] == values


# ----------------------------------------------------------------------------- dispatch
def dedupe_rows(feed: np.ndarray, in_place: bool = False) -> np.ndarray:
    """See :func:`dedupe_rows_numpy`; ``feed`` is returned as is when F < 2. ``in_place``: the
    repeats are blanked in ``feed`` itself (a temporary of the caller's), which is returned,
    unless it is not C-contiguous (then in a copy, as without it)."""
    if feed.shape[1] < 2:
        return feed
    if not in_place or not feed.flags.c_contiguous:
        feed = np.array(feed, order="C")
    if feed.dtype != np.int64:
        return _dedupe_rows_in_place_numpy(feed)
    return _parallel_or_serial("dedupe_rows")(feed)


def compact_rows(feed: np.ndarray, width: int) -> np.ndarray:
    """See :func:`compact_rows_numpy`."""
    if feed.shape[1] == 0:
        return np.full((feed.shape[0], width), -1, np.int64)
    if feed.dtype != np.int64:
        return compact_rows_numpy(feed, width)
    return _parallel_or_serial("compact_rows")(np.ascontiguousarray(feed), width)


def top_k_rows(
    candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool = False
) -> np.ndarray:
    """See :func:`top_k_rows_numpy` (``score`` is overwritten)."""
    if (
        candidate.dtype != np.int64
        or score.dtype not in (np.float32, np.float64)
        or not score.flags.c_contiguous
    ):
        return top_k_rows_numpy(candidate, score, k, drop_nonfinite)
    return _parallel_or_serial("top_k_rows")(
        np.ascontiguousarray(candidate), score, k, drop_nonfinite
    )


def segment_sum_rows(values: np.ndarray, rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    """See :func:`segment_sum_rows_numpy`; ``first`` must be increasing, starting at 0."""
    if (
        len(first) == 0
        or values.dtype not in (np.float32, np.float64)
        or not values.flags.c_contiguous
        or np.diff(first, append=len(rows)).max() > _PAIRWISE_BLOCK + 1
    ):
        return segment_sum_rows_numpy(values, rows, first)
    return _active["segment_sum_rows"](
        values, rows.astype(np.int64, copy=False), first.astype(np.int64, copy=False)
    )


def insert_sorted(values: np.ndarray, pos: np.ndarray, new: np.ndarray) -> np.ndarray:
    """See :func:`insert_sorted_numpy` (``new`` is cast to ``values``' dtype)."""
    if len(new) == 0:
        return values.copy()
    return _active["insert_sorted"](
        values, pos.astype(np.int64, copy=False), new.astype(values.dtype, copy=False)
    )


def delete_sorted(values: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """See :func:`delete_sorted_numpy`."""
    if len(drop) == 0:
        return values.copy()
    return _active["delete_sorted"](values, drop.astype(np.int64, copy=False))


def same_sign_share(sign: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """See :func:`same_sign_share_numpy`."""
    if len(indices) >= 2**24 and np.diff(indptr).max() >= 2**24:  # float32 counts stop being exact
        return same_sign_share_numpy(sign, indptr, indices)
    return _parallel_or_serial("same_sign_share")(
        sign, indptr.astype(np.int64, copy=False), indices.astype(np.int64, copy=False)
    )


def unit_rows(x: np.ndarray) -> np.ndarray:
    """See :func:`unit_rows_numpy` (compiled for float rows of 8..128 values, where NumPy's
    norm is one pairwise sum per row)."""
    if (
        x.ndim != 2
        or x.dtype not in (np.float32, np.float64)
        or not 8 <= x.shape[1] <= _PAIRWISE_BLOCK
        or not x.flags.c_contiguous
        or _active is _NUMPY
    ):
        return unit_rows_numpy(x)
    return _active["unit_rows"](x, np.array([1e-8], x.dtype))


def unit_noisy_rows(
    base: np.ndarray, rows: np.ndarray | None, scale: float, noise: np.ndarray
) -> np.ndarray:
    """See :func:`unit_noisy_rows_numpy`."""
    d = noise.shape[1] if noise.ndim == 2 else 0
    if (
        noise.dtype != np.float64
        or base.dtype not in (np.float32, np.float64)
        or not 8 <= d <= _PAIRWISE_BLOCK
        or not noise.flags.c_contiguous
        or base.ndim != 2
        or base.shape[1] != d
        or _active is _NUMPY
    ):
        return unit_noisy_rows_numpy(base, rows, scale, noise)
    rows = np.zeros(0, np.int64) if rows is None else rows.astype(np.int64, copy=False)
    return _active["unit_noisy_rows"](base, rows, float(scale), noise, np.array([1e-8]))


def unit_noisy_rows_drawn(
    base: np.ndarray,
    rows: np.ndarray | None,
    scale: float,
    rng: np.random.Generator,
    block: int = 1 << 16,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``unit_noisy_rows(base, rows, scale, rng.standard_normal((m, d)))``, m the number of
    rows, d ``base``'s width, with the noise drawn ``block`` rows at a time into one buffer
    (same draws, same results; no (m, d) float64 temporary). Written into ``out`` when given:
    a C-contiguous (m, d) float32 array, which may be ``base`` itself when ``rows`` is None
    (each row is read before it is written)."""
    m = len(base) if rows is None else len(rows)
    d = base.shape[1]
    if out is None:
        out = np.empty((m, d), np.float32)
    elif out.shape != (m, d) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(
            f"out of shape {out.shape} and dtype {out.dtype} is not allowed: a C-contiguous "
            f"({m}, {d}) float32 array"
        )
    if (
        _active is not _NUMPY
        and base.ndim == 2
        and base.dtype in (np.float32, np.float64)
        and 8 <= d <= _PAIRWISE_BLOCK
    ):
        # numba draws the noise inside the kernel: no noise buffer, no per-block copies
        _active["unit_noisy_rows_drawn"](
            base,
            np.zeros(0, np.int64) if rows is None else rows.astype(np.int64, copy=False),
            float(scale),
            rng,
            np.array([1e-8]),
            out,
        )
        return out
    noise = np.empty((min(m, block), d))
    for start in range(0, m, block):
        stop = min(start + block, m)
        part = rng.standard_normal(out=noise[: stop - start])
        out[start:stop] = unit_noisy_rows(
            base[start:stop] if rows is None else base,
            None if rows is None else rows[start:stop],
            scale,
            part,
        )
    return out


def merge_edits(
    values: np.ndarray,
    drop: np.ndarray,
    at: np.ndarray,
    new: np.ndarray,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """See :func:`merge_edits_numpy` (``new`` is cast to ``values``' dtype; a new ``out``
    when none is given; ``out`` must not share memory with ``values``)."""
    size = len(values) + len(new) - len(drop)
    if out is None:
        out = np.empty(size, values.dtype)
    if out.shape != (size,) or out.dtype != values.dtype or np.may_share_memory(out, values):
        raise ValueError(
            f"out must be a fresh ({size},) {values.dtype} array, got {out.shape} {out.dtype}"
        )
    return _parallel_or_serial("merge_edits")(
        values,
        drop.astype(np.int64, copy=False),
        at.astype(np.int64, copy=False),
        new.astype(values.dtype, copy=False),
        out,
    )


def find_edges(
    indptr: np.ndarray, indices: np.ndarray, keys: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(position (K,) int64, found (K,) bool) of the edge keys ``src * n + dst`` (K,) in a
    followee CSR of ``n`` users: each key's ``np.searchsorted`` position among the graph's
    sorted keys (``src``'s row start plus its followees below ``dst``) and whether the edge
    exists. A binary search within each key's row; the graph's keys are never built."""
    keys = keys.astype(np.int64, copy=False)
    if len(keys) and (keys.min() < 0 or keys.max() >= n * n):
        raise ValueError(f"edge keys must lie in [0, {n * n}), got {keys.min()}..{keys.max()}")
    pos, found = np.empty(len(keys), np.int64), np.empty(len(keys), bool)
    _parallel_or_serial("find_edges")(
        indptr.astype(np.int64, copy=False),
        indices.astype(np.int64, copy=False),
        keys,
        n,
        pos,
        found,
    )
    return pos, found


#: Above this many follows and unfollows a round's edit plan sorts its keys with NumPy's
#: sort (the compiled one sorts in one thread, without SIMD).
_EDIT_PLAN_MAX_KEYS = 1 << 16


def edit_plan(
    indptr: np.ndarray,
    indices: np.ndarray,
    n: int,
    follow_src: np.ndarray,
    follow_dst: np.ndarray,
    unfollow_src: np.ndarray,
    unfollow_dst: np.ndarray,
) -> tuple[int, int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None]:
    """See :func:`edit_plan_numpy` (the compiled version also rejects user ids outside
    [0, n) with a ``ValueError``)."""
    if _active is _NUMPY or len(follow_src) + len(unfollow_src) > _EDIT_PLAN_MAX_KEYS:
        return edit_plan_numpy(
            indptr, indices, n, follow_src, follow_dst, unfollow_src, unfollow_dst
        )
    status, added, removed, after, drop, at, new = _active["edit_plan"](
        indptr, indices, n, follow_src, follow_dst, unfollow_src, unfollow_dst
    )
    if status < 0:
        raise ValueError(
            f"follow_src, follow_dst, unfollow_src and unfollow_dst must be user ids in [0, {n})"
        )
    return added, removed, (after, drop, at, new) if status else None


def memory_update(
    memory: np.ndarray,
    latent: np.ndarray,
    rows: np.ndarray,
    first: np.ndarray,
    who: np.ndarray,
    keep: float,
) -> None:
    """See :func:`memory_update_numpy`; ``first`` is increasing, starting at 0."""
    d = latent.shape[1]
    if (
        _active is _NUMPY
        or memory.dtype != np.float32
        or latent.dtype != np.float32
        or not 8 <= d <= _PAIRWISE_BLOCK
        or not (memory.flags.c_contiguous and latent.flags.c_contiguous)
        or not _parallel_or_serial("memory_update")(
            memory,
            latent,
            rows.astype(np.int64, copy=False),
            first.astype(np.int64, copy=False),
            who.astype(np.int64, copy=False),
            np.array([keep, 1 - keep], np.float32),
        )
    ):
        memory_update_numpy(memory, latent, rows, first, who, keep)


def relational_draws(
    indptr: np.ndarray,
    indices: np.ndarray,
    active: np.ndarray,
    offset_draw: np.ndarray,
    pick_draw: np.ndarray,
    author_start: np.ndarray,
    by_author: np.ndarray,
    lo: int,
) -> np.ndarray:
    """See :func:`relational_draws_numpy`."""
    return _parallel_or_serial("relational_draws")(
        indptr.astype(np.int64, copy=False),
        indices.astype(np.int64, copy=False),
        active.astype(np.int64, copy=False),
        offset_draw,
        pick_draw,
        author_start.astype(np.int64, copy=False),
        by_author.astype(np.int64, copy=False),
        int(lo),
    )


def propagate_csr(
    context: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    alpha: float,
    hops: int,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """See :func:`propagate_csr_numpy`; only the rows ``rows`` (R,) of the result, (R, D), if
    given: then each hop is computed for the users the next one reads alone (those within
    the remaining hops of ``rows``; every row is computed on its own, so the values are the
    whole table's)."""
    if _active is _NUMPY or hops == 0:
        out = propagate_csr_numpy(context, indptr, indices, alpha, hops)
        return out if rows is None else out[rows]
    c = np.ascontiguousarray(context, dtype=np.float32)
    weights = np.array([alpha, 1.0 - alpha], np.float32)
    indptr, indices = indptr.astype(np.int64, copy=False), indices.astype(np.int64, copy=False)
    if rows is not None:  # each hop for the users the next one reads, the same rows' values
        return _active["propagate_near"](
            indptr, indices, c, weights, np.asarray(rows, np.int64), int(hops)
        )
    every = np.arange(len(indptr) - 1, dtype=np.int64)
    for hop in range(hops):
        last = hop == hops - 1 and rows is not None
        c = _active["propagate_hop"](
            indptr, indices, c, weights, np.asarray(rows, np.int64) if last else every
        )
    return c


@dataclasses.dataclass
class PropagationBuffers:
    """The memory :func:`propagate_rows` writes into, kept between calls: the (n,) int64
    neighbourhood order and positions, and the float32 rows of each hop, each handed out again
    once nothing outside refers to it (:class:`policysim_infra.buffers.ReusedArrays`). A 1M-user
    step's neighbourhood is about 80 MB of rows; kept, its pages are faulted in once instead of
    every step. ``huge_pages``: the arrays in huge pages (:func:`socialenv.core.pages.huge_pages`),
    else in NumPy's current setting."""

    ints: ReusedArrays = dataclasses.field(default_factory=lambda: ReusedArrays(keep=2))
    floats: ReusedArrays = dataclasses.field(default_factory=lambda: ReusedArrays(keep=3))
    huge_pages: bool = True

    def empty(self, shape: tuple[int, ...], dtype: type) -> np.ndarray:
        """An uninitialised array, from :attr:`ints` (integer dtypes) or :attr:`floats`."""
        integer = np.dtype(dtype).kind == "i"
        pool = self.ints if integer else self.floats
        # a step's neighbourhood grows a little as the graph does: room for it
        room = 0 if integer else shape[0] * shape[1] // 8
        if self.huge_pages:
            return huge_pages(pool.empty)(shape, dtype, room=room)
        return pool.empty(shape, dtype, room=room)


def propagate_rows(
    context: np.ndarray | tuple[np.ndarray, ...],
    indptr: np.ndarray,
    indices: np.ndarray,
    rows: np.ndarray,
    alpha: float,
    hops: int,
    buffers: PropagationBuffers | None = None,
) -> np.ndarray:
    """Rows ``rows`` (R,) of the ``hops``-hop propagated context, (R, D) float32, computed on
    the neighbourhood of ``rows`` only; ``context`` is (N, D) or a tuple of (N, D_i) blocks
    read as their concatenation. The NumPy version is
    :func:`socialenv.core.propagation.propagate_rows` (SciPy CSR products on the gathered
    neighbourhood); the compiled one marks the neighbourhood in one pass and reads the
    context rows in place (no gather, sort or search), summing in SciPy's order. ``buffers``:
    the compiled one's arrays, the result's included, come from there (None: new ones)."""
    from socialenv.core.propagation import propagate_rows as propagate_rows_numpy

    blocks = context if isinstance(context, tuple) else (context,)
    if _active is _NUMPY or hops == 0 or len(blocks) > 2:
        return propagate_rows_numpy(context, indptr, indices, rows, alpha, hops)
    first = np.ascontiguousarray(blocks[0], dtype=np.float32)
    second = np.ascontiguousarray(blocks[1], dtype=np.float32) if len(blocks) == 2 else first[:, :0]
    indptr, indices = indptr.astype(np.int64, copy=False), indices.astype(np.int64, copy=False)
    rows = np.asarray(rows, np.int64)
    weights = np.array([alpha, 1.0 - alpha], np.float32)
    width = first.shape[1] + second.shape[1]
    empty = np.empty if buffers is None else buffers.empty
    hop_from_blocks = _parallel_or_serial("hop_from_blocks")
    hop_from_rows = _parallel_or_serial("hop_from_rows")
    if hops == 1:
        out = empty((len(rows), width), np.float32)
        return hop_from_blocks(indptr, indices, first, second, rows, weights, out)
    # order[:sizes[h]]: the nodes within h hops of rows; hop 1 computes the outermost level
    # needed (hops - 1) from the context itself, each later hop the next level inwards
    n = len(indptr) - 1
    order, position = empty((n,), np.int64), empty((n,), np.int64)
    sizes = _active["propagate_levels"](indptr, indices, rows, hops, order, position)
    targets = order[: sizes[hops - 1]]
    current = empty((len(targets), width), np.float32)
    hop_from_blocks(indptr, indices, first, second, targets, weights, current)
    for level in range(hops - 2, 0, -1):
        targets = order[: sizes[level]]
        inner = empty((len(targets), width), np.float32)
        current = hop_from_rows(indptr, indices, current, position, targets, weights, inner)
    out = empty((len(rows), width), np.float32)
    return hop_from_rows(indptr, indices, current, position, rows, weights, out)


def count_reactions(
    post: np.ndarray, kind: np.ndarray, kinds: np.ndarray, counters: tuple[np.ndarray, ...]
) -> None:
    """See :func:`count_reactions_numpy`."""
    if _active is _NUMPY or len({c.dtype for c in counters}) != 1 or kind.dtype != kinds.dtype:
        count_reactions_numpy(post, kind, kinds, counters)
        return
    count = _parallel_or_serial("count_reactions")
    # one range of post ids per thread (each thread reads every reaction)
    parts = THREADS if count is _compiled_parallel.get("count_reactions") else 1
    count(post.astype(np.int64, copy=False), kind, kinds, tuple(counters), parts)


def observe_reactions(
    user: np.ndarray,
    reply: np.ndarray,
    toxicity: np.ndarray,
    noise: np.ndarray,
    cross: np.ndarray,
    hostile: np.ndarray,
    decay: float,
    history: dict[str, np.ndarray],
) -> None:
    """See :func:`observe_reactions_numpy` (the compiled one: one pass over the reactions,
    one over the users, no (N,) temporaries but its counts)."""
    columns = (history["reply_toxicity"], history["cross_civil"], history["cross_total"])
    if _active is _NUMPY or [c.dtype for c in columns] != [np.float32, np.float64, np.float64]:
        observe_reactions_numpy(user, reply, toxicity, noise, cross, hostile, decay, history)
        return
    _active["observe_reactions"](
        user.astype(np.int64, copy=False),
        reply,
        toxicity,
        noise.astype(np.float64, copy=False),
        cross,
        hostile,
        np.float32(decay),
        1 - decay,
        *columns,
    )


def drop_own_and_repeated(feed: np.ndarray, owner: np.ndarray, author: np.ndarray) -> np.ndarray:
    """See :func:`drop_own_and_repeated_numpy`."""
    if _active is _NUMPY or feed.dtype != np.int64:
        return drop_own_and_repeated_numpy(feed, owner, author)
    return _parallel_or_serial("drop_own_and_repeated")(
        np.ascontiguousarray(feed),
        owner.astype(np.int64, copy=False),
        author.astype(np.int64, copy=False),
    )


def keyed_max(
    sorted_key: np.ndarray, keys: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """See :func:`keyed_max_numpy`."""
    return _active["keyed_max"](
        sorted_key.astype(np.int64, copy=False),
        keys.astype(np.int64, copy=False),
        np.ascontiguousarray(values),
    )


def place_picks(
    feed: np.ndarray,
    channel: np.ndarray,
    row: np.ndarray,
    post: np.ndarray,
    start: int,
    width: int,
    injected: int,
) -> tuple[np.ndarray, np.ndarray]:
    """See :func:`place_picks_numpy`."""
    if _active is _NUMPY or feed.dtype != np.int64 or channel.dtype != np.int8:
        return place_picks_numpy(feed, channel, row, post, start, width, injected)
    return _active["place_picks"](
        np.ascontiguousarray(feed),
        np.ascontiguousarray(channel),
        row.astype(np.int64, copy=False),
        post.astype(np.int64, copy=False),
        int(start),
        int(width),
        int(injected),
    )


def objective_arm_rewards_numpy(
    caused: np.ndarray,
    value: np.ndarray,
    cross: np.ndarray,
    kind: np.ndarray,
    toxicity: np.ndarray,
    text_toxicity: float,
    in_builtin_slot: np.ndarray,
    builtin_slots: int,
    governed_users: int,
    arms: int,
    reply_code: int,
) -> tuple[np.ndarray, np.ndarray, float, float, float, float]:
    """The Rec env's objective-form arm rewards (``RecEnv._objective_arm_rewards``) from a
    round's M reactions: ``caused`` (M,) the applied arm (of ``arms``) each answers, -1 for
    none; ``value`` (M,) float64 its value to the objective, ``cross`` (M,) bool; ``kind``,
    ``toxicity`` (M,) its behaviour and float32 toxicity; ``text_toxicity`` the round's mean
    toxicity metric; ``in_builtin_slot`` (M,) bool, the reactions in the built-in
    personalized slots of the users no arm governs, ``builtin_slots`` how many such slots,
    ``governed_users`` how many users the arms govern.

    Returns (reward (arms,) float32: 0.5 + 0.5 × (the arm's value minus a built-in slot's),
    clipped to [0, 1]; the arm's toxicity (arms,) float32: its replies' toxicity above the
    mean, minus a built-in slot's; the slot reward; the built-in slot's value; the share of
    cross-stance reactions among the arms'; the share of arms with a reaction)."""
    hit = caused >= 0
    contribution = np.bincount(caused[hit], weights=value[hit], minlength=arms)
    baseline = float(value[in_builtin_slot].sum() / builtin_slots) if builtin_slots else 0.0
    change = contribution - baseline
    # what each arm added to the round's toxicity metric (the mean toxicity of the texts
    # written), against the slot it displaced: its replies' toxicity above the mean
    excess = np.where(kind == reply_code, toxicity - text_toxicity, 0.0)
    arm_excess = np.bincount(caused[hit], weights=excess[hit], minlength=arms)
    builtin_excess = float(excess[in_builtin_slot].sum() / builtin_slots) if builtin_slots else 0.0
    arm_toxicity = (arm_excess - builtin_excess).astype(np.float32)
    slot_step = float(change.sum() / max(governed_users, 1))
    reward = np.clip(0.5 + 0.5 * change, 0.0, 1.0).astype(np.float32)
    reacted = np.bincount(caused[hit], minlength=arms) > 0
    cross_ratio = float(cross[hit].mean()) if hit.any() else 0.0
    reaction_rate = float(reacted.mean()) if arms else 0.0
    return reward, arm_toxicity, slot_step, baseline, cross_ratio, reaction_rate


_NUMPY["objective_arm_rewards"] = objective_arm_rewards_numpy


def objective_arm_rewards(
    caused: np.ndarray,
    value: np.ndarray,
    cross: np.ndarray,
    kind: np.ndarray,
    toxicity: np.ndarray,
    text_toxicity: float,
    in_builtin_slot: np.ndarray,
    builtin_slots: int,
    governed_users: int,
    arms: int,
    reply_code: int,
) -> tuple[np.ndarray, np.ndarray, float, float, float, float]:
    """See :func:`objective_arm_rewards_numpy` (one compiled pass, for int64 arms, float64
    values, float32 toxicities and a Python float mean toxicity)."""
    args = (
        caused,
        value,
        cross,
        kind,
        toxicity,
        text_toxicity,
        in_builtin_slot,
        int(builtin_slots),
        int(governed_users),
        int(arms),
        int(reply_code),
    )
    if (
        _active is _NUMPY
        or caused.dtype != np.int64
        or value.dtype != np.float64
        or toxicity.dtype != np.float32
        or cross.dtype != np.bool_
        or in_builtin_slot.dtype != np.bool_
        or type(text_toxicity) is not float
        or not len(caused) == len(value) == len(cross) == len(kind) == len(toxicity)
    ):
        return objective_arm_rewards_numpy(*args)
    reward, arm_toxicity, slot_step, baseline, cross_ratio, reaction_rate = _active[
        "objective_arm_rewards"
    ](*args)
    return (
        reward,
        arm_toxicity,
        float(slot_step),
        float(baseline),
        float(cross_ratio),
        float(reaction_rate),
    )


#: Values up to which :func:`compiled_round_means` runs, which reproduces NumPy's float32
#: sums as ``np.add.reduce`` runs them on one contiguous array (pairwise; compared with NumPy
#: up to 2**20 values, a million-user world's stances included).
_ROUND_MEANS_MAX = 1 << 20


def compiled_round_means(
    stance: np.ndarray,
    text_toxicity: np.ndarray,
    misinformed: np.ndarray,
    reaction_cross: np.ndarray,
    channel: np.ndarray,
    injected: int,
) -> tuple[float, float, float, float, float, float] | None:
    """The means of :func:`socialenv.core.metrics.round_means` in one compiled pass, with its
    values bit for bit (its metric functions are the NumPy twin); None where they must run:
    NumPy kernels, stances or toxicities not contiguous float32, more than 2**20 values."""
    if (
        _active is _NUMPY
        or stance.dtype != np.float32
        or text_toxicity.dtype != np.float32
        or not (stance.flags.c_contiguous and text_toxicity.flags.c_contiguous)
        or misinformed.dtype != np.bool_
        or reaction_cross.dtype != np.bool_
        or len(stance) == 0
        or max(len(stance), len(text_toxicity)) > _ROUND_MEANS_MAX
    ):
        return None
    return _active["round_means"](
        stance, text_toxicity, misinformed, reaction_cross, channel, int(injected)
    )


def reaction_values_numpy(
    cross: np.ndarray,
    kind: np.ndarray,
    toxicity: np.ndarray,
    weights: tuple[float, float, float],
    codes: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per reaction (M,): (hostile, civil_cross, hostile_cross) bool and the value float64 of
    the Rec objective (``socialenv.envs.rec.env.reaction_values``). ``cross`` (M,) bool,
    ``kind`` (M,) int, ``toxicity`` (M,) float32; ``weights``: the hostile toxicity, the
    hostile weight and the reply toxicity weight (Python numbers, NumPy's weak scalars);
    ``codes``: the behaviours reply and dislike."""
    hostile_toxicity, hostile_weight, reply_toxicity_weight = weights
    reply_code, dislike_code = codes
    reply = kind == reply_code
    hostile = (kind == dislike_code) | (reply & (toxicity >= hostile_toxicity))
    civil_cross = cross & ~hostile
    hostile_cross = cross & hostile
    value = (
        civil_cross.astype(np.float64)
        - hostile_weight * hostile_cross
        - reply_toxicity_weight * np.where(reply & cross, toxicity, 0.0)
    )
    return hostile, civil_cross, hostile_cross, value


_NUMPY["reaction_values"] = reaction_values_numpy


def reaction_values(
    cross: np.ndarray,
    kind: np.ndarray,
    toxicity: np.ndarray,
    weights: tuple[float, float, float],
    codes: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """See :func:`reaction_values_numpy` (one compiled pass, for float32 toxicity and weights
    that are Python numbers)."""
    if (
        _active is _NUMPY
        or toxicity.dtype != np.float32
        or cross.dtype != np.bool_
        or kind.dtype.kind not in "iu"
        or not all(type(w) in (int, float) for w in weights)
        or not len(cross) == len(kind) == len(toxicity)
    ):
        return reaction_values_numpy(cross, kind, toxicity, weights, codes)
    return _active["reaction_values"](
        cross, kind, toxicity, np.array(weights, np.float64), int(codes[0]), int(codes[1])
    )


def rec_arm_history_columns_numpy(
    rows: np.ndarray,
    at: np.ndarray,
    engagement_scale: float,
    rounds: int,
    reply_toxicity: np.ndarray,
    civility: np.ndarray,
    who: np.ndarray,
) -> None:
    """The Rec arm contexts' columns after :func:`rec_arm_columns`' and the receiver's
    propensity, in place in ``rows`` (K, D) float32: the log engagement (already ``log1p``)
    divided by ``engagement_scale`` and the post age by ``rounds`` (in float32, as NumPy
    divides a float32 column by a Python number), then from column ``tail`` the receiver's
    ``reply_toxicity`` and ``civility`` (N,) float32 (``who`` (K,) the receivers), their
    products with cross stance and that of cross stance with the recent toxicity, and the
    norm pad set to 0. ``at`` (5,) int64: the columns of log engagement, post age, cross
    stance, recent toxicity, and ``tail``."""
    engagement_at, age_at, cross_at, recent_at, tail = (int(v) for v in at)
    engagement = rows[:, engagement_at]
    engagement /= engagement_scale
    rows[:, age_at] /= rounds
    cross, receiver_toxicity = rows[:, cross_at], reply_toxicity[who]
    receiver_civility = civility[who]
    rows[:, tail] = receiver_toxicity
    rows[:, tail + 1] = receiver_civility
    np.multiply(cross, receiver_toxicity, out=rows[:, tail + 2])
    np.multiply(cross, receiver_civility, out=rows[:, tail + 3])
    np.multiply(cross, rows[:, recent_at], out=rows[:, tail + 4])
    rows[:, tail + 5] = 0.0


_NUMPY["rec_arm_history_columns"] = rec_arm_history_columns_numpy


def rec_arm_history_columns(
    rows: np.ndarray,
    at: np.ndarray,
    engagement_scale: float,
    rounds: int,
    reply_toxicity: np.ndarray,
    civility: np.ndarray,
    who: np.ndarray,
) -> None:
    """See :func:`rec_arm_history_columns_numpy` (one pass over the rows, compiled)."""
    if (
        _active is _NUMPY
        or rows.dtype != np.float32
        or reply_toxicity.dtype != np.float32
        or civility.dtype != np.float32
        or rows.ndim != 2
        or rows.strides[1] != rows.itemsize
    ):
        rec_arm_history_columns_numpy(
            rows, at, engagement_scale, rounds, reply_toxicity, civility, who
        )
        return
    _active["rec_arm_history_columns"](
        rows,
        at,
        float(engagement_scale),
        int(rounds),
        reply_toxicity,
        civility,
        who.astype(np.int64, copy=False),
    )


def rec_arm_norm_pad_numpy(
    rows: np.ndarray, squared: np.ndarray, norm_squared: float, mask: np.ndarray
) -> None:
    """The Rec arm contexts' last column, in place: sqrt(max(``norm_squared`` −
    ``squared``, 0)) (float64, (K,) ``squared`` each row's squared norm with that column at
    0), so every valid row has norm sqrt(``norm_squared``); then the rows outside ``mask``
    (K,) bool set to 0."""
    rows[:, -1] = np.sqrt(np.maximum(norm_squared - squared, 0.0))
    rows[~mask] = 0.0


_NUMPY["rec_arm_norm_pad"] = rec_arm_norm_pad_numpy


def rec_arm_norm_pad(
    rows: np.ndarray, squared: np.ndarray, norm_squared: float, mask: np.ndarray
) -> None:
    """See :func:`rec_arm_norm_pad_numpy` (one compiled pass)."""
    if _active is _NUMPY or rows.dtype != np.float32 or squared.dtype != np.float64:
        rec_arm_norm_pad_numpy(rows, squared, norm_squared, mask)
        return
    _active["rec_arm_norm_pad"](rows, squared, float(norm_squared), mask)


def rec_arm_columns(
    context: np.ndarray,
    user_rows: np.ndarray,
    arm_row: np.ndarray,
    post_latent: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    user_columns: tuple[np.ndarray, ...],
    post_columns: tuple[np.ndarray, ...],
    round_: int,
    source: np.ndarray,
) -> None:
    """See :func:`rec_arm_columns_numpy`."""
    arrays = (user_rows, post_latent, *user_columns, *post_columns)
    if (
        _active is _NUMPY
        or not all(a.flags.c_contiguous for a in arrays)
        or context.ndim != 2
        or context.strides[1] != context.itemsize  # rows contiguous: a column slice is fine
    ):
        rec_arm_columns_numpy(
            context,
            user_rows,
            arm_row,
            post_latent,
            user,
            post,
            user_columns,
            post_columns,
            round_,
            source,
        )
        return
    _parallel_or_serial("rec_arm_columns")(
        context,
        user_rows,
        arm_row.astype(np.int64, copy=False),
        post_latent,
        user.astype(np.int64, copy=False),
        post.astype(np.int64, copy=False),
        tuple(user_columns),
        tuple(post_columns),
        int(round_),
        source,
    )


# ----------------------------------------------------------------------------- seeded generators
def seed_sequence_state_numpy(words: np.ndarray) -> np.ndarray:
    """(4,) uint64: ``SeedSequence(words).generate_state(4, np.uint64)`` (PCG64's seed)."""
    return np.random.SeedSequence([int(w) for w in words]).generate_state(4, np.uint64)


_NUMPY["seed_sequence_state"] = seed_sequence_state_numpy


class _SeedState:
    """A seed sequence whose PCG64 state is already computed (``generate_state`` returns it)."""

    __slots__ = ("state",)

    def __init__(self, state: np.ndarray) -> None:
        self.state = state

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> np.ndarray:
        if n_words != len(self.state) or np.dtype(dtype) != self.state.dtype:
            raise ValueError(
                f"n_words={n_words}, dtype={dtype} is not allowed: this seed state holds "
                f"{len(self.state)} {self.state.dtype} words (PCG64's seed)"
            )
        return self.state


np.random.bit_generator.ISeedSequence.register(_SeedState)


def seeded_generator(entropy: tuple[int, ...]) -> np.random.Generator:
    """``np.random.default_rng(list(entropy))`` bit for bit, its SeedSequence hash computed
    by a compiled kernel (a tenth of the time; entropy: integers in [0, 2**32)). The
    generator cannot ``spawn``."""
    if _active is _NUMPY or not all(0 <= value < 2**32 for value in entropy):
        return np.random.default_rng(list(entropy))
    state = _active["seed_sequence_state"](np.array(entropy, np.uint64))
    return np.random.Generator(np.random.PCG64(_SeedState(state)))


def scatter_add_rows_numpy(out: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``np.add.at(out, index, rows)``: adds row r of ``rows`` to row ``index[r]`` of ``out``."""
    np.add.at(out, index, rows)


_NUMPY["scatter_add_rows"] = scatter_add_rows_numpy


def scatter_add_rows(out: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``np.add.at(out, index, rows)`` in place (2-D ``out``, ``rows`` of its dtype, ``index``
    in [0, len(out))), bit for bit; the compiled kernel avoids ``ufunc.at``'s overhead."""
    if (
        _active is _NUMPY
        or out.dtype != rows.dtype
        or out.ndim != 2
        or rows.ndim != 2
        or not (out.flags.c_contiguous and out.flags.writeable)
    ):
        np.add.at(out, index, rows)
        return
    _active["scatter_add_rows"](out, index.astype(np.int64, copy=False), rows)


# ----------------------------------------------------------------------------- step overhead
# Kernels of issue 24's per-step overhead: each fuses a run of small NumPy calls of one round
# (integer and comparison work only, so both versions agree bit for bit).
def cluster_draws_numpy(
    draw: np.ndarray,
    user_cluster: np.ndarray,
    cluster_start: np.ndarray,
    by_cluster: np.ndarray,
    lo: int,
    hi: int,
) -> np.ndarray:
    """(U, m) post ids: draw ``draw[r, j]`` (uniform in [0, 1)) picks a post of cluster
    ``user_cluster[r]`` (``by_cluster[cluster_start[c]:cluster_start[c + 1]]`` are its
    offsets from ``lo``), or of the whole range ``lo..hi-1`` where that cluster is empty."""
    start = cluster_start[user_cluster]
    size = cluster_start[user_cluster + 1] - start
    in_cluster = start[:, None] + (draw * size[:, None]).astype(np.int64)
    anywhere = (draw * (hi - lo)).astype(np.int64)
    return lo + np.where(
        size[:, None] > 0, by_cluster[np.minimum(in_cluster, len(by_cluster) - 1)], anywhere
    )


_NUMPY["cluster_draws"] = cluster_draws_numpy


def cluster_draws(
    draw: np.ndarray,
    user_cluster: np.ndarray,
    cluster_start: np.ndarray,
    by_cluster: np.ndarray,
    lo: int,
    hi: int,
) -> np.ndarray:
    """See :func:`cluster_draws_numpy` (``by_cluster`` not empty)."""
    return _parallel_or_serial("cluster_draws")(
        np.ascontiguousarray(draw, np.float64),
        user_cluster.astype(np.int64, copy=False),
        cluster_start.astype(np.int64, copy=False),
        by_cluster.astype(np.int64, copy=False),
        int(lo),
        int(hi),
    )


def exposure_filter_numpy(
    feed: np.ndarray, post_author: np.ndarray, exposure: np.ndarray, draw: np.ndarray
) -> tuple[np.ndarray, int]:
    """The feed with slot (r, j) removed (-1) where ``draw[r, j] >= exposure[author]`` of its
    post, and the number removed."""
    valid = feed >= 0
    p = np.where(valid, exposure[post_author[np.where(valid, feed, 0)]], 1.0)
    removed = valid & (draw >= p)
    return np.where(removed, -1, feed), int(removed.sum())


_NUMPY["exposure_filter"] = exposure_filter_numpy


def exposure_filter(
    feed: np.ndarray, post_author: np.ndarray, exposure: np.ndarray, draw: np.ndarray
) -> tuple[np.ndarray, int]:
    """See :func:`exposure_filter_numpy` (2-D ``feed`` and ``draw`` of one shape)."""
    if feed.ndim != 2 or draw.shape != feed.shape:
        return exposure_filter_numpy(feed, post_author, exposure, draw)
    filtered, removed = _parallel_or_serial("exposure_filter")(
        np.ascontiguousarray(feed, np.int64), post_author, exposure, draw
    )
    return filtered, int(removed)


def feed_impressions_numpy(
    feed: np.ndarray, filtered: np.ndarray, owner: np.ndarray, post_author: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidate impressions of (B, F) ``feed`` (row-major over its valid slots): the
    (B, F) valid mask, each impression's user (``owner[r]``), post, the post's author and
    whether ``filtered`` removed it."""
    valid = feed >= 0
    post = feed[valid]
    return (
        valid,
        np.broadcast_to(owner[:, None], feed.shape)[valid],
        post,
        post_author[post],
        filtered[valid] < 0,
    )


_NUMPY["feed_impressions"] = feed_impressions_numpy


def feed_impressions(
    feed: np.ndarray, filtered: np.ndarray, owner: np.ndarray, post_author: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """See :func:`feed_impressions_numpy` (``owner``: (B,) the user of each row)."""
    if feed.ndim != 2 or filtered.shape != feed.shape or owner.shape != feed.shape[:1]:
        return feed_impressions_numpy(feed, filtered, owner, post_author)
    return _parallel_or_serial("feed_impressions")(
        np.ascontiguousarray(feed, np.int64),
        np.ascontiguousarray(filtered, np.int64),
        owner.astype(np.int64, copy=False),
        post_author,
    )


def author_history_numpy(
    recent_toxicity: np.ndarray,
    recent_misinfo: np.ndarray,
    author: np.ndarray,
    toxicity: np.ndarray,
    misinfo: np.ndarray,
    decay: float,
) -> None:
    """In place: each author's ``recent_*`` ← decay · recent + (1 − decay) · the mean over
    the texts they wrote (``toxicity``, ``misinfo`` per text of ``author``)."""
    n = len(recent_toxicity)
    count = np.bincount(author, minlength=n)
    wrote = count > 0
    mean_tox = np.bincount(author, weights=toxicity, minlength=n)[wrote] / count[wrote]
    mean_mis = (
        np.bincount(author, weights=misinfo.astype(np.float64), minlength=n)[wrote] / count[wrote]
    )
    recent_toxicity[wrote] = decay * recent_toxicity[wrote] + (1 - decay) * mean_tox
    recent_misinfo[wrote] = decay * recent_misinfo[wrote] + (1 - decay) * mean_mis


_NUMPY["author_history"] = author_history_numpy


def author_history(
    recent_toxicity: np.ndarray,
    recent_misinfo: np.ndarray,
    author: np.ndarray,
    toxicity: np.ndarray,
    misinfo: np.ndarray,
    decay: float,
) -> None:
    """See :func:`author_history_numpy` (float ``recent_*`` of one dtype, ``author`` in
    [0, N))."""
    if (
        _active is _NUMPY
        or recent_toxicity.dtype != recent_misinfo.dtype
        or recent_toxicity.dtype not in (np.float32, np.float64)
        or len(recent_toxicity) != len(recent_misinfo)
    ):
        author_history_numpy(recent_toxicity, recent_misinfo, author, toxicity, misinfo, decay)
        return
    # decay · recent rounds in the history's dtype (a Python float is weak for NumPy), the
    # (1 − decay) · mean term in float64, as in the NumPy version
    _active["author_history"](
        recent_toxicity,
        recent_misinfo,
        author.astype(np.int64, copy=False),
        toxicity.astype(np.float64),
        misinfo.astype(np.float64),
        recent_toxicity.dtype.type(decay),
        float(1 - decay),
    )


def slate_slots_numpy(
    slate: np.ndarray, mask: np.ndarray, group: np.ndarray, per_user: int, no_op: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The slots of a (S,) slate of arm indices (``no_op`` = empty): (filled, first use of
    its arm, candidate: filled, first use, allowed by ``mask`` and within its group's
    ``per_user`` arms in slate order, over the cap: a slot that would be a candidate but for
    its group's cap), each (S,) bool; ``group``: (K,) each arm's group."""
    filled = slate != no_op
    first_use = np.zeros(len(slate), bool)
    first_use[first_occurrence(slate)] = True
    candidate = filled & first_use
    candidate[candidate] = mask[slate[candidate]]
    over = np.zeros(len(slate), bool)
    slots = np.flatnonzero(candidate)
    if len(slots):
        slot_group = group[slate[slots]]
        order = np.argsort(slot_group, kind="stable")
        sorted_group = slot_group[order]
        rank = np.empty(len(slots), np.int64)
        rank[order] = np.arange(len(slots)) - np.searchsorted(sorted_group, sorted_group)
        over[slots[rank >= per_user]] = True
    candidate &= ~over
    return filled, first_use, candidate, over


_NUMPY["slate_slots"] = slate_slots_numpy


def slate_slots(
    slate: np.ndarray, mask: np.ndarray, group: np.ndarray, per_user: int, no_op: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """See :func:`slate_slots_numpy` (``slate`` in [0, K], K = ``no_op`` = len(mask))."""
    if (
        _active is _NUMPY
        or len(mask) != no_op
        or len(group) != len(mask)
        or (len(slate) and (slate.min() < 0 or slate.max() > no_op))
        or (len(group) and group.min() < 0)
    ):
        return slate_slots_numpy(slate, mask, group, per_user, no_op)
    return _active["slate_slots"](
        slate.astype(np.int64, copy=False),
        mask.astype(bool, copy=False),
        group.astype(np.int64, copy=False),
        int(per_user),
        int(no_op),
    )


def share_columns_numpy(
    kind: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    toxicity: np.ndarray,
    stance: np.ndarray,
    post_toxicity: np.ndarray,
    post_misinfo: np.ndarray,
    codes: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """The reactions that write a post (kind ``codes[0]``, a retweet, or ``codes[1]``, a
    reply) and the columns of those posts: (shares (M,) bool, then per share: user, post
    shared, is a reply, toxicity (the reply's own, else the shared post's), misinformation
    (a retweet's of the shared post; a reply carries none), stance, post kind (``codes[3]``
    for a reply, ``codes[2]`` for a retweet))."""
    shares = (kind == codes[0]) | (kind == codes[1])
    share_post = post[shares]
    is_reply = kind[shares] == codes[1]
    return (
        shares,
        user[shares],
        share_post,
        is_reply,
        np.where(is_reply, toxicity[shares], post_toxicity[share_post]),
        np.where(is_reply, False, post_misinfo[share_post]),
        stance[shares],
        np.where(is_reply, int(codes[3]), int(codes[2])),
    )


_NUMPY["share_columns"] = share_columns_numpy


def share_latents_numpy(
    source: np.ndarray,
    writer: np.ndarray,
    post: np.ndarray,
    user: np.ndarray,
    is_reply: np.ndarray,
    out: np.ndarray,
    block: int = 65_536,
) -> None:
    """In place: ``out`` (S, d) gets the latents of the shares of posts ``post`` (S,) by users
    ``user`` (S,): a retweet's is its post's (``source`` row), a reply's the unit vector of its
    post's plus its writer's (``writer`` row). ``block`` shares at a time on
    :func:`map_blocks`' threads (every row on its own: the same rows on any number of
    threads)."""

    def fill(lo: int, hi: int) -> None:
        rows = out[lo:hi]
        source.take(post[lo:hi], axis=0, out=rows)
        reply = is_reply[lo:hi]
        if reply.any():
            mix = rows[reply] + writer.take(user[lo:hi][reply], axis=0)
            rows[reply] = mix / np.maximum(np.linalg.norm(mix, axis=1, keepdims=True), 1e-8)

    map_blocks(fill, len(post), block)


_NUMPY["share_latents"] = share_latents_numpy


def share_latents(
    source: np.ndarray,
    writer: np.ndarray,
    post: np.ndarray,
    user: np.ndarray,
    is_reply: np.ndarray,
    out: np.ndarray,
) -> None:
    """See :func:`share_latents_numpy` (the compiled kernel for float32 rows of up to 128
    columns, C-contiguous ``out``; other inputs, mismatched shapes included, go to the NumPy
    version, which raises on the latter)."""
    if (
        _active is _NUMPY
        or writer.ndim != 2
        or writer.shape[1] != source.shape[1]
        or out.shape != (len(post), source.shape[1])
        or len(user) != len(post)
        or len(is_reply) != len(post)
        or source.dtype != np.float32
        or writer.dtype != np.float32
        or out.dtype != np.float32
        or not out.flags.c_contiguous
        or not 8 <= source.shape[1] <= _PAIRWISE_BLOCK
        or post.dtype != np.int64
        or user.dtype != np.int64
    ):
        share_latents_numpy(source, writer, post, user, is_reply, out)
        return
    _parallel_or_serial("share_latents")(
        source, writer, post, user, is_reply.astype(bool, copy=False), out
    )


def share_columns(
    kind: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    toxicity: np.ndarray,
    stance: np.ndarray,
    post_toxicity: np.ndarray,
    post_misinfo: np.ndarray,
    codes: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """See :func:`share_columns_numpy` (``codes``: (4,) int64)."""
    if (
        _active is _NUMPY
        or toxicity.dtype != np.float32
        or post_toxicity.dtype != np.float32
        or post_misinfo.dtype != bool
        or user.dtype != np.int64
        or post.dtype != np.int64
    ):
        return share_columns_numpy(
            kind, user, post, toxicity, stance, post_toxicity, post_misinfo, codes
        )
    return _active["share_columns"](
        kind, user, post, toxicity, stance, post_toxicity, post_misinfo, codes
    )


def reaction_choices_numpy(arm_key: np.ndarray, react_key: np.ndarray) -> np.ndarray:
    """(M,) for each reaction key the index of the arm with that key (the last one if several
    have it), -1 where none has; int64 keys."""
    distinct, pair = unique_inverse(arm_key)
    choice_of_pair = np.empty(len(distinct), np.int64)
    choice_of_pair[pair.reshape(-1)] = np.arange(len(arm_key))
    position = np.searchsorted(distinct, react_key)
    hit = (
        (position < len(distinct))
        & (distinct[np.minimum(position, max(len(distinct) - 1, 0))] == react_key)
        if len(distinct)
        else np.zeros(len(react_key), bool)
    )
    choice = np.full(len(react_key), -1, np.int64)
    choice[hit] = choice_of_pair[position[hit]]
    return choice


_NUMPY["reaction_choices"] = reaction_choices_numpy


def reaction_choices(arm_key: np.ndarray, react_key: np.ndarray) -> np.ndarray:
    """See :func:`reaction_choices_numpy`."""
    return _parallel_or_serial("reaction_choices")(
        arm_key.astype(np.int64, copy=False), react_key.astype(np.int64, copy=False)
    )


def slot_reactions_numpy(
    feed: np.ndarray,
    channel: np.ndarray,
    slot_channel: int,
    owner: np.ndarray,
    open_row: np.ndarray,
    react_user: np.ndarray,
    react_post: np.ndarray,
) -> tuple[np.ndarray, int]:
    """Which reactions answered a post shown in a slot of channel ``slot_channel`` of their
    user's feed row, over the open rows only, and how many such slots the open rows hold.

    Args:
        feed, channel: (B, F) post ids (-1 = empty) and their channels.
        owner: (B,) each row's user, sorted ascending (distinct).
        open_row: (B,) bool, the rows that count.
        react_user, react_post: (R,) each reaction's user and post.

    Returns:
        (R,) bool, and the number of filled ``slot_channel`` slots in the open rows.
    """
    in_slot = open_row[:, None] & (feed >= 0) & (channel == slot_channel)
    width = int(max(feed.max(initial=-1), react_post.max(initial=-1))) + 1
    slot_key = np.broadcast_to(owner[:, None], feed.shape)[in_slot] * width + feed[in_slot]
    hit = isin(react_user * width + react_post, slot_key) & (react_post >= 0)
    return hit, int(in_slot.sum())


_NUMPY["slot_reactions"] = slot_reactions_numpy


def slot_reactions(
    feed: np.ndarray,
    channel: np.ndarray,
    slot_channel: int,
    owner: np.ndarray,
    open_row: np.ndarray,
    react_user: np.ndarray,
    react_post: np.ndarray,
) -> tuple[np.ndarray, int]:
    """See :func:`slot_reactions_numpy` (the compiled kernel finds rows in a table indexed by
    user, up to the last owner: owners that are not distinct, ascending and non-negative take
    the NumPy path)."""
    if (
        feed.ndim != 2
        or channel.shape != feed.shape
        or owner.shape != feed.shape[:1]
        or np.any(owner[1:] <= owner[:-1])
        or (len(owner) and owner[0] < 0)
    ):
        return slot_reactions_numpy(
            feed, channel, slot_channel, owner, open_row, react_user, react_post
        )
    hit, slots = _parallel_or_serial("slot_reactions")(
        np.ascontiguousarray(feed, np.int64),
        np.ascontiguousarray(channel),
        int(slot_channel),
        owner.astype(np.int64, copy=False),
        np.ascontiguousarray(open_row, bool),
        react_user.astype(np.int64, copy=False),
        react_post.astype(np.int64, copy=False),
    )
    return hit, int(slots)


def search_guided_numpy(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``np.searchsorted(a, v)`` (int64 positions, side "left") for sorted ``a``."""
    return np.searchsorted(a, v).astype(np.int64, copy=False)


_NUMPY["search_guided"] = search_guided_numpy


def guide_table(a: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The guide table of sorted 1-D float64 ``a`` for :func:`search_guided` (one bucket of
    width ``a[-1] / len(a)`` per entry: each bucket's first index whose entry reaches its
    lower edge), or None where the search does not use one."""
    if _active is _NUMPY or a.dtype != np.float64 or a.ndim != 1:
        return None
    return _active["guide_table"](a)


def search_guided(
    a: np.ndarray, v: np.ndarray, guide: tuple[np.ndarray, float] | None = None
) -> np.ndarray:
    """See :func:`search_guided_numpy`; the compiled kernel looks each value up in ``a``'s
    guide table (Chen and Asau's method; :func:`guide_table`, built here when not given) and
    steps forward from there: a few steps per value in any order, for 1-D float64 ``a`` and
    ``v`` without NaN."""
    if (
        _active is _NUMPY
        or a.dtype != np.float64
        or v.dtype != np.float64
        or a.ndim != 1
        or v.ndim != 1
    ):
        return search_guided_numpy(a, v)
    table, width = guide if guide is not None else _active["guide_table"](a)
    if len(table) != len(a):
        raise ValueError(
            f"guide is not allowed: it has {len(table)} buckets for {len(a)} entries; pass "
            "guide_table(a) of this a"
        )
    return _parallel_or_serial("search_guided")(a, v, table, width)


def link_targets_numpy(
    keys: np.ndarray,
    edge: np.ndarray,
    offset: int,
    position: np.ndarray,
    members: np.ndarray,
    scale: int,
) -> None:
    """In place: ``keys[offset + edge]`` (source keys ``s * scale``) plus their targets
    ``members[min(position, len(members) - 1)]``, or -1 where a target is its source (a
    self-loop). ``edge`` (E,) distinct offsets, ``position`` (E,) non-negative."""
    target = members[np.minimum(position, len(members) - 1)]
    at = edge + offset
    source = keys[at]
    source_loop = source == target * scale
    source += target
    source[source_loop] = -1
    keys[at] = source


_NUMPY["link_targets"] = link_targets_numpy


def link_targets(
    keys: np.ndarray,
    edge: np.ndarray,
    offset: int,
    position: np.ndarray,
    members: np.ndarray,
    scale: int,
) -> None:
    """See :func:`link_targets_numpy`; the compiled kernel adds each target where it is read,
    without the gathered copies."""
    if _active is _NUMPY or not all(
        array.dtype == np.int64 and array.ndim == 1 for array in (keys, edge, position, members)
    ):
        link_targets_numpy(keys, edge, offset, position, members, scale)
        return
    if len(edge) != len(position):
        raise ValueError(
            f"position has {len(position)} entries, which is not allowed: one per edge "
            f"({len(edge)})"
        )
    if len(edge) and len(members) == 0:
        raise ValueError("members is empty, which is not allowed: targets are drawn from it")
    if len(edge) and not (0 <= int(edge.min()) + offset and int(edge.max()) + offset < len(keys)):
        raise ValueError(
            f"edge offsets {int(edge.min())}..{int(edge.max())} + offset {offset} are not "
            f"allowed: keys holds {len(keys)}"
        )
    _parallel_or_serial("link_targets")(keys, edge, int(offset), position, members, int(scale))


def segment_keys_numpy(counts: np.ndarray, scale: int, out: np.ndarray | None = None) -> np.ndarray:
    """(sum(counts),) int64: ``s * scale`` repeated ``counts[s]`` times, segment after
    segment (written into ``out`` when given)."""
    keys = np.repeat(np.arange(len(counts), dtype=np.int64) * scale, counts)
    if out is None:
        return keys
    out[...] = keys
    return out


_NUMPY["segment_keys"] = segment_keys_numpy


def segment_keys(counts: np.ndarray, scale: int, out: np.ndarray | None = None) -> np.ndarray:
    """See :func:`segment_keys_numpy` (``counts`` (S,) non-negative integers; ``out`` a
    C-contiguous (sum(counts),) int64 array)."""
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    if out is not None and (
        out.shape != (starts[-1],) or out.dtype != np.int64 or not out.flags.c_contiguous
    ):
        raise ValueError(
            f"out of shape {out.shape} and dtype {out.dtype} is not allowed: a C-contiguous "
            f"({int(starts[-1])},) int64 array"
        )
    if _active is _NUMPY:
        return segment_keys_numpy(counts, scale, out)
    if out is None:
        out = np.empty(starts[-1], np.int64)
    _parallel_or_serial("segment_keys")(starts, int(scale), out)
    return out


def distinct_segment_pairs_numpy(
    keys: np.ndarray,
    counts: np.ndarray,
    scale: int,
    block: int = 1 << 20,
    empty: Callable[[int], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct non-negative ``keys`` in ascending order, as (segment, key − segment ·
    scale) pairs.

    ``keys`` (sum(counts),) int64 is made of S segments, segment s of ``counts[s]`` entries,
    each -1 (dropped) or in [s · scale, (s + 1) · scale). ``keys`` is sorted in place, and the
    second array returned is its front. ``block`` entries at a time are deduplicated and split
    (their temporaries stay small). ``empty(k)`` gives the (k,) int64 array the segments are
    written into (default: a new one)."""
    keys.sort()
    first = int(np.searchsorted(keys, 0))
    kept = 0
    previous = -1
    for start in range(first, len(keys), block):
        part = keys[start : min(start + block, len(keys))]
        distinct = np.empty(len(part), bool)
        distinct[0] = part[0] != previous
        np.not_equal(part[1:], part[:-1], out=distinct[1:])
        previous = int(part[-1])
        count = int(np.count_nonzero(distinct))
        keys[kept : kept + count] = part[distinct]
        kept += count
    remainder = keys[:kept]
    segment = _segment_array(kept, empty)
    for start in range(0, kept, block):
        rows = slice(start, min(start + block, kept))
        np.divmod(remainder[rows], scale, out=(segment[rows], remainder[rows]))
    return segment, remainder


_NUMPY["distinct_segment_pairs"] = distinct_segment_pairs_numpy


def _segment_array(size: int, empty: Callable[[int], np.ndarray] | None) -> np.ndarray:
    """A (size,) int64 array from ``empty`` (checked), or a new one."""
    if empty is None:
        return np.empty(size, np.int64)
    segment = empty(size)
    if segment.shape != (size,) or segment.dtype != np.int64 or not segment.flags.c_contiguous:
        raise ValueError(
            f"empty({size}) gave an array of shape {segment.shape} and dtype {segment.dtype}, "
            f"which is not allowed: a C-contiguous ({size},) int64 array"
        )
    return segment


def distinct_segment_pairs(
    keys: np.ndarray,
    counts: np.ndarray,
    scale: int,
    empty: Callable[[int], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """See :func:`distinct_segment_pairs_numpy`; the compiled kernel sorts each segment on its
    own (one per thread at a time), not the whole array."""
    if _active is _NUMPY or keys.dtype != np.int64 or not keys.flags.c_contiguous:
        return distinct_segment_pairs_numpy(keys, counts, scale, empty=empty)
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    if starts[-1] != len(keys):
        raise ValueError(
            f"counts={int(starts[-1])} keys in all is not allowed: keys holds {len(keys)}"
        )
    kept = _parallel_or_serial("sorted_segment_remainders")(keys, starts, int(scale))
    segment = _segment_array(int(kept.sum()), empty)
    return segment, _active["compact_segments"](keys, starts, kept, segment)


# ----------------------------------------------------------------------------- 1M round
# Kernels of issue 24's million-user round: the personalized channel's per-user passes.
def gather_sum_rows_numpy(first: np.ndarray, second: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(R, d) ``first[rows] + second[rows]`` (two (N, d) arrays of one dtype)."""
    return first.take(rows, axis=0) + second.take(rows, axis=0)


_NUMPY["gather_sum_rows"] = gather_sum_rows_numpy


def gather_sum_rows(first: np.ndarray, second: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """See :func:`gather_sum_rows_numpy`; the compiled kernel reads each row pair once and
    writes the sum (no two gathered copies); ``rows`` must lie in ``[0, N)``."""
    if (
        _active is _NUMPY
        or first.dtype != second.dtype
        or first.dtype not in (np.float32, np.float64)
        or first.shape[1:] != second.shape[1:]
        or first.ndim != 2
        or not (first.flags.c_contiguous and second.flags.c_contiguous)
    ):
        return gather_sum_rows_numpy(first, second, rows)
    return _parallel_or_serial("gather_sum_rows")(first, second, rows.astype(np.int64, copy=False))


def stance_top_k_rows_numpy(
    candidate: np.ndarray,
    score: np.ndarray,
    weighted_stance: np.ndarray,
    post_stance: np.ndarray,
    k: int,
) -> np.ndarray:
    """(B, k): :func:`top_k_rows` of ``score + weighted_stance[:, None] *
    post_stance[candidate]`` (float32 (B, C) ``score``, overwritten; (B,) ``weighted_stance``):
    the personalized channel's stance agreement added to the interest scores, then each row's
    best ``k`` candidates."""
    score += weighted_stance[:, None] * post_stance[candidate]
    return top_k_rows_numpy(candidate, score, k, False)


_NUMPY["stance_top_k_rows"] = stance_top_k_rows_numpy


def stance_top_k_rows(
    candidate: np.ndarray,
    score: np.ndarray,
    weighted_stance: np.ndarray,
    post_stance: np.ndarray,
    k: int,
) -> np.ndarray:
    """See :func:`stance_top_k_rows_numpy` (one thread: it is called per block of rows)."""
    if (
        _active is _NUMPY
        or candidate.dtype != np.int64
        or score.dtype != np.float32
        or weighted_stance.dtype != np.float32
        or post_stance.dtype != np.float32
        or not score.flags.c_contiguous
    ):
        return stance_top_k_rows_numpy(candidate, score, weighted_stance, post_stance, k)
    return _active["stance_top_k"](
        np.ascontiguousarray(candidate), score, weighted_stance, post_stance, k
    )


def argmax_rows_numpy(score: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = np.argmax(score, axis=1)`` for a (B, C) ``score``, C >= 1, into the integer
    array ``out`` (B,): each row's first maximum, or its first NaN."""
    out[:] = np.argmax(score, axis=1)


_NUMPY["argmax_rows"] = argmax_rows_numpy


def argmax_rows(score: np.ndarray, out: np.ndarray) -> None:
    """See :func:`argmax_rows_numpy`; the compiled kernel reads each row once (NumPy's
    ``argmax`` along a 16-wide last axis spends most of its time per row, not per entry).
    One thread: it is called per block of rows."""
    if score.ndim != 2 or score.shape[1] < 1 or out.shape != score.shape[:1]:
        raise ValueError(
            f"argmax_rows: score must be (B, C) with C >= 1 and out (B,), got {score.shape} "
            f"and {out.shape}"
        )
    if _active is _NUMPY or score.dtype not in (np.float32, np.float64) or out.dtype.kind != "i":
        argmax_rows_numpy(score, out)
        return
    _active["argmax_rows"](score, out)


def cluster_order_numpy(cluster: np.ndarray, num_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """(order (n,) int64, start (num_clusters + 1,) int64) of the (n,) integer cluster ids
    ``cluster``: ``np.argsort(cluster, kind="stable")`` and where each cluster id
    0..num_clusters begins in the sorted ids (``np.searchsorted``)."""
    order = np.argsort(cluster, kind="stable")
    return order, np.searchsorted(cluster[order], np.arange(num_clusters + 1))


_NUMPY["cluster_order"] = cluster_order_numpy


def cluster_order(cluster: np.ndarray, num_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """See :func:`cluster_order_numpy`; the compiled kernel is a counting sort, O(n +
    num_clusters) (the NumPy twin's sort of the ids, when one lies outside
    [0, num_clusters))."""
    if _active is not _NUMPY and cluster.dtype.kind == "i" and cluster.ndim == 1:
        order = np.empty(len(cluster), np.int64)
        start = np.empty(num_clusters + 1, np.int64)
        if _active["cluster_order"](cluster, int(num_clusters), order, start):
            return order, start
    return cluster_order_numpy(cluster, num_clusters)


def candidate_pools(
    kind: np.ndarray,
    width: np.ndarray,
    u_count: int,
    num_clusters: int,
    posts: Any,
    bounds: np.ndarray,
    popular_pool: int,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Compiled kernels only (their NumPy twin is the unfused path of
    :func:`socialenv.core.candidates.generate_candidates`): what the candidate sources ``kind``
    (S,) (indices into ``CANDIDATE_SOURCES``; ``width`` (S,) draws per user each) draw from
    for ``u_count`` users. ``bounds``: (lo, hi, last_lo, last_hi) int64, the candidate window's
    and the last round's post ranges. Returns (the number of uniforms the draws take, -1 when
    a window post's cluster lies outside ``[0, num_clusters)``; the pools' post ids; (5,) where
    the opposite source's negative and positive pools, the popular and the fresh pool begin
    and end; the window's posts by cluster and where each cluster begins, as
    :func:`cluster_order`)."""
    uniforms, pool, pool_start, order, start = _active["candidate_pools"](
        kind,
        width,
        int(u_count),
        int(num_clusters),
        posts.cluster,
        posts.stance,
        (posts.likes, posts.retweets, posts.replies),
        posts.recommended,
        bounds,
        int(popular_pool),
    )
    return int(uniforms), pool, pool_start, order, start


def candidate_draws(
    kind: np.ndarray,
    width: np.ndarray,
    users: np.ndarray,
    user_cluster: np.ndarray,
    discrete_stance: np.ndarray,
    post_latent: np.ndarray,
    bounds: np.ndarray,
    pools: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    uniform: np.ndarray,
    draws: np.ndarray,
    gathered: np.ndarray,
) -> None:
    """Compiled kernels only (see :func:`candidate_pools`, whose pools ``pools`` are): the
    sources' draws for the (U,) ``users`` from ``uniform`` (as many as it counted, drawn by the
    round's generator), into ``draws`` (U, sum(width)) int64, in the order and with the values
    of the unfused path; the scored sources' post rows (``post_latent``, row 0 for -1) into
    ``gathered`` (U, the scored sources' sum(width), d), source after source.
    ``user_cluster`` (U,): each user's nearest cluster (read by the interest source)."""
    pool, pool_start, order, start = pools
    _active["candidate_draws"](
        kind,
        width,
        users,
        user_cluster,
        discrete_stance,
        post_latent,
        bounds,
        pool,
        pool_start,
        order,
        start,
        uniform,
        draws,
        gathered,
    )


def candidate_picks(
    kind: np.ndarray,
    width: np.ndarray,
    keep: np.ndarray,
    draws: np.ndarray,
    score: np.ndarray,
    users: np.ndarray,
    post_author: np.ndarray,
    post: np.ndarray,
    source: np.ndarray,
) -> None:
    """Compiled kernels only (see :func:`candidate_pools`): each scored source's ``keep[s]``
    best draws by ``score`` (U, the scored sources' sum(width)), source after source
    (:func:`top_k_rows` with ``drop_nonfinite``), the fresh source's draws as they are, side
    by side into ``post`` (U, sum(keep)) int64, and each column's source into ``source``
    (U, sum(keep)) int8; then repeats within a row and the users' own posts set to -1."""
    _active["candidate_picks"](kind, width, keep, draws, score, users, post_author, post, source)


def reaction_ends_numpy(
    react_user: np.ndarray, react_post: np.ndarray, post_author: np.ndarray, discrete: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The two ends of R reactions of users ``react_user`` (R,) to posts ``react_post`` (R,):
    (author (R,), the post authors ``post_author[react_post]``; cross (R,) bool, whether the
    product of the ends' entries of the (N,) integer ``discrete`` stances is −1, i.e. they
    hold opposite stances)."""
    author = post_author[react_post]
    return author, discrete[react_user].astype(np.int16) * discrete[author] == -1


_NUMPY["reaction_ends"] = reaction_ends_numpy


def reaction_ends(
    react_user: np.ndarray, react_post: np.ndarray, post_author: np.ndarray, discrete: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """See :func:`reaction_ends_numpy`: one compiled pass (threaded) for int8 stances. The ids
    must lie in range: unlike the twin's gathers, the pass does not check them (a round's
    reactions are checked when the brain's output is, or written in range by a trusted
    brain)."""
    if _active is _NUMPY or discrete.dtype != np.int8 or post_author.dtype.kind != "i":
        return reaction_ends_numpy(react_user, react_post, post_author, discrete)
    author = np.empty(len(react_user), post_author.dtype)
    cross = np.empty(len(react_user), bool)
    _parallel_or_serial("reaction_ends")(
        react_user, react_post, post_author, discrete, author, cross
    )
    return author, cross
