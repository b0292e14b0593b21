"""The numba versions of :mod:`socialenv.core.kernels` (imported only when numba is installed).

Top-level functions, so numba's on-disk cache (``cache=True``) finds them again in the next
process: compiled once per machine, loaded in well under a second afterwards.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from policysim_infra._numba_rows import clipped as _clipped
from policysim_infra._numba_rows import floored_norm as _floored_norm
from policysim_infra._numba_rows import pairwise_row as _pairwise_row
from policysim_infra._numba_rows import unit_noisy_rows as _unit_noisy_rows
from policysim_infra._numba_rows import unit_noisy_rows_drawn
from policysim_infra._numba_rows import unit_row_into as _unit_row_into
from policysim_infra._prefetch import prefetch_item as _prefetch_item
from policysim_infra._prefetch import prefetch_row as _prefetch_row

jit = numba.njit(cache=True, nogil=True)
#: ``numba.prange`` loops on numba's thread pool (:func:`socialenv.core.kernels.set_threads`).
parallel_jit = numba.njit(cache=True, nogil=True, parallel=True)
#: a helper compiled into each caller (numba passes every array argument of a call as its
#: fields, which costs more per row than a short helper's work)
inline_jit = numba.njit(cache=True, nogil=True, inline="always")


def _serial_and_parallel(func: Callable[..., Any]) -> tuple[Any, Any]:
    """``func`` compiled twice: its ``prange`` loops run in order on the calling thread, and on
    numba's thread pool (a renamed copy, so each has its own on-disk cache entry). Only for
    loops whose iterations write disjoint rows: both give bit-identical results."""
    clone = types.FunctionType(
        func.__code__, func.__globals__, func.__name__ + "_parallel", func.__defaults__
    )
    clone.__qualname__ = func.__qualname__ + "_parallel"
    return jit(func), parallel_jit(clone)


@jit
def _blank_repeats(out: np.ndarray, r: int) -> None:
    # in place: row r's slots that repeat an earlier slot's post set to -1 (the first
    # occurrence of a post is never blanked, so comparing against ``out`` is comparing
    # against the original row)
    for j in range(1, out.shape[1]):
        v = out[r, j]
        if v < 0:
            continue
        for i in range(j):
            if out[r, i] == v:
                out[r, j] = -1
                break


def _dedupe(feed: np.ndarray) -> np.ndarray:
    # in place
    for r in numba.prange(feed.shape[0]):
        _blank_repeats(feed, r)
    return feed


def _compact(feed: np.ndarray, width: int) -> np.ndarray:
    b, f = feed.shape
    out = np.full((b, width), -1, np.int64)
    for r in numba.prange(b):
        c = 0
        for j in range(f):
            if feed[r, j] >= 0:
                if c < width:
                    out[r, c] = feed[r, j]
                c += 1
        if c < width:
            # the NumPy version keeps the invalid entries after the valid ones
            for j in range(f):
                if feed[r, j] < 0:
                    if c < width:
                        out[r, c] = feed[r, j]
                    c += 1
    return out


#: Rows per block of the threaded row kernels: a block's scratch is allocated once and the
#: blocks are what numba's pool shares out (each row is still computed on its own).
_ROW_BLOCK = 1024


@jit
def _ranks_before(s: float, t: float) -> bool:
    # descending, NaN last: whether score s comes strictly before score t
    return (np.isnan(t) and not np.isnan(s)) or s > t


#: Rows of up to ``_RANK_WIDTH`` candidates of which two or more are picked, and at least
#: ``_RANK_MIN_WORK`` candidates × picks, take :func:`_top_k_row_ranked`: one vector pass per
#: candidate over the row padded to ``_RANK_WIDTH`` entries, no data-dependent branch. On the
#: development VM it costs 8-9 ns per candidate, insertion 10-17 ns times the picks' share
#: (20 candidates, 5 picked: 177 against 344 ns per row; 8 candidates, 2 picked: 83 against 80).
_RANK_WIDTH = 32
_RANK_MIN_WORK = 24


@inline_jit
def _insert_top(row_score: np.ndarray, c: int, take: int, best: np.ndarray) -> None:
    # best[:take] = the first ``take`` of the stable descending order of row_score[:c] (NaN
    # last), kept sorted by insertion: a later entry passes an earlier one only when it ranks
    # strictly before it
    count = 0
    for j in range(c):
        s = row_score[j]
        if count == take and not _ranks_before(s, row_score[best[take - 1]]):
            continue
        pos = count if count < take else take - 1
        while pos > 0 and _ranks_before(s, row_score[best[pos - 1]]):
            best[pos] = best[pos - 1]
            pos -= 1
        best[pos] = j
        if count < take:
            count += 1


@inline_jit
def _rank_top(row_score: np.ndarray, c: int, take: int, best: np.ndarray, rank: np.ndarray) -> None:
    # _insert_top for a row without NaN: the rank of entry j is the number of entries before
    # it, those scoring higher and the equal ones to its left; the ranks are distinct, so
    # entry j goes to slot rank[j], and those ranked ``take`` or lower to the spare slot
    # best[take]. ``row_score`` and ``rank`` hold _RANK_WIDTH entries (those from c on are
    # ignored).
    for j in range(_RANK_WIDTH):
        rank[j] = 0
    for i in range(c):
        s = row_score[i]
        for j in range(_RANK_WIDTH):
            rank[j] += np.int32((s > row_score[j]) | ((s == row_score[j]) & (i < j)))
    for j in range(c):
        best[min(rank[j], take)] = j


@inline_jit
def _write_top(
    candidate: np.ndarray,
    r: int,
    out: np.ndarray,
    best: np.ndarray,
    row_score: np.ndarray,
    drop_nonfinite: bool,
) -> None:
    # out[r] = the picked candidates, -1 for a pick scoring -inf (not finite)
    for slot in range(out.shape[1]):
        j = best[slot]
        s = row_score[j]
        bad = (not np.isfinite(s)) if drop_nonfinite else (s == -np.inf)
        if not bad and candidate[r, j] >= 0:
            out[r, slot] = candidate[r, j]


@inline_jit
def _mask_repeats(candidate: np.ndarray, score: np.ndarray, r: int, row_score: np.ndarray) -> bool:
    # row r's scores into row_score and back into score, -inf for negative ids and for the
    # repeats of an id earlier in the row; whether any score is NaN
    # (the repeats counted without a branch: long rows run faster so, short ones the same)
    has_nan = False
    for j in range(candidate.shape[1]):
        v = candidate[r, j]
        repeated = v < 0
        for i in range(j):
            repeated |= candidate[r, i] == v
        s = -np.inf if repeated else score[r, j]
        has_nan |= np.isnan(s)
        row_score[j] = s
        score[r, j] = s
    return has_nan


@inline_jit
def _top_k_row(
    candidate: np.ndarray,
    score: np.ndarray,
    r: int,
    out: np.ndarray,
    best: np.ndarray,
    row_score: np.ndarray,
    drop_nonfinite: bool,
) -> None:
    # the first ``take`` entries of a stable descending order of the masked row (NaN last,
    # ties to the left, as a stable argsort of -score), kept sorted by insertion
    c, take = candidate.shape[1], out.shape[1]
    _mask_repeats(candidate, score, r, row_score)
    if take == 0:
        return
    _insert_top(row_score, c, take, best)
    _write_top(candidate, r, out, best, row_score, drop_nonfinite)


@inline_jit
def _top_k_row_ranked(
    candidate: np.ndarray,
    score: np.ndarray,
    r: int,
    out: np.ndarray,
    best: np.ndarray,
    row_score: np.ndarray,
    rank: np.ndarray,
    drop_nonfinite: bool,
) -> None:
    # _top_k_row, the picks ranked (_rank_top) unless the row holds a NaN score. Kept apart
    # from _top_k_row: one function choosing by a ``rank`` argument made the insertion rows'
    # top_k_rows 20% slower (kernel_pairs.py on a 1M step's inputs, 3.5 against 2.8 ms)
    c, take = candidate.shape[1], out.shape[1]
    if _mask_repeats(candidate, score, r, row_score):
        _insert_top(row_score, c, take, best)
    else:
        _rank_top(row_score, c, take, best, rank)
    _write_top(candidate, r, out, best, row_score, drop_nonfinite)


def _top_k_blocks(
    candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool
) -> np.ndarray:
    b, c = candidate.shape
    take = min(k, c)
    out = np.full((b, take), -1, np.int64)
    blocks = (b + _ROW_BLOCK - 1) // _ROW_BLOCK
    if c <= _RANK_WIDTH and take > 1 and c * take >= _RANK_MIN_WORK:
        for block in numba.prange(blocks):
            best = np.zeros(take + 1, np.int64)  # and the spare slot of _rank_top
            row_score = np.zeros(_RANK_WIDTH, score.dtype)
            rank = np.empty(_RANK_WIDTH, np.int32)
            for r in range(block * _ROW_BLOCK, min(b, (block + 1) * _ROW_BLOCK)):
                _top_k_row_ranked(candidate, score, r, out, best, row_score, rank, drop_nonfinite)
    else:
        for block in numba.prange(blocks):
            best = np.zeros(max(take, 1), np.int64)
            row_score = np.empty(c, score.dtype)
            for r in range(block * _ROW_BLOCK, min(b, (block + 1) * _ROW_BLOCK)):
                _top_k_row(candidate, score, r, out, best, row_score, drop_nonfinite)
    return out


_top_k, _top_k_parallel = _serial_and_parallel(_top_k_blocks)


@jit
def _stance_top_k(
    candidate: np.ndarray,
    score: np.ndarray,
    weighted_stance: np.ndarray,
    post_stance: np.ndarray,
    k: int,
) -> np.ndarray:
    # score += weighted_stance[:, None] * post_stance[candidate] in float32, then the top k
    b, c = candidate.shape
    for r in range(b):
        w = weighted_stance[r]
        for j in range(c):
            score[r, j] = score[r, j] + w * post_stance[candidate[r, j]]
    return _top_k(candidate, score, k, False)


def _gather_sum_rows(first: np.ndarray, second: np.ndarray, rows: np.ndarray) -> np.ndarray:
    # first[rows] + second[rows], elementwise in the arrays' dtype
    d = first.shape[1]
    out = np.empty((len(rows), d), first.dtype)
    for i in numba.prange(len(rows)):
        u = rows[i]
        for k in range(d):
            out[i, k] = first[u, k] + second[u, k]
    return out


_gather_sum_rows_serial, _gather_sum_rows_parallel = _serial_and_parallel(_gather_sum_rows)


@jit
def _segment_row_sum(
    values: np.ndarray, rows: np.ndarray, lo: int, hi: int, out: np.ndarray, parts: np.ndarray
) -> None:
    # out[k] = values[rows[lo], k] + the sum of values[rows[lo + 1:hi], k] for every column k,
    # the sum being NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src) of
    # n = hi - lo - 1 <= 128 terms, which np.add.reduceat runs down each column of a segment
    # after its first row: a running sum from 0 below 8 terms, else eight running sums
    # combined pairwise, then the remainder. Row after row, so each row is read once and its
    # d columns add as one vector; the same additions per column, in the same order.
    # ``parts``: (8, d) scratch of ``values``' dtype. (n > 128 splits recursively in NumPy:
    # the dispatchers send such segments to NumPy.)
    d = out.shape[0]
    n = hi - lo - 1
    head = rows[lo]
    if n == 0:
        for k in range(d):
            out[k] = values[head, k]
        return
    if n < 8:
        for k in range(d):
            out[k] = 0.0
        for j in range(lo + 1, hi):
            r = rows[j]
            for k in range(d):
                out[k] += values[r, k]
    else:
        for t in range(8):
            r = rows[lo + 1 + t]
            for k in range(d):
                parts[t, k] = values[r, k]
        i = 8
        while i < n - (n % 8):
            for t in range(8):
                r = rows[lo + 1 + i + t]
                for k in range(d):
                    parts[t, k] += values[r, k]
            i += 8
        for k in range(d):
            out[k] = ((parts[0, k] + parts[1, k]) + (parts[2, k] + parts[3, k])) + (
                (parts[4, k] + parts[5, k]) + (parts[6, k] + parts[7, k])
            )
        while i < n:
            r = rows[lo + 1 + i]
            for k in range(d):
                out[k] += values[r, k]
            i += 1
    for k in range(d):
        out[k] = values[head, k] + out[k]


@jit
def _segment_sum(values: np.ndarray, rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    s, d = len(first), values.shape[1]
    out = np.empty((s, d), values.dtype)
    parts = np.empty((8, d), values.dtype)
    for i in range(s):
        hi = first[i + 1] if i + 1 < s else len(rows)
        _segment_row_sum(values, rows, first[i], hi, out[i], parts)
    return out


def _same_sign(sign: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    n = len(indptr) - 1
    slot = np.empty(n, np.int64)  # each row's place among the rows with followees
    count = 0
    for u in range(n):
        slot[u] = count
        if indptr[u + 1] > indptr[u]:
            count += 1
    out = np.empty(count, np.float64)
    for u in numba.prange(n):
        lo, hi = indptr[u], indptr[u + 1]
        if hi > lo:
            own = sign[u]
            same = 0
            for e in range(lo, hi):
                same += sign[indices[e]] == own
            # NumPy sums the float32 ones: exact while a row has < 2**24 entries
            out[slot[u]] = np.float64(np.float32(same)) / np.float64(hi - lo)
    return out


@jit
def _insert_sorted(values: np.ndarray, pos: np.ndarray, new: np.ndarray) -> np.ndarray:
    out = np.empty(len(values) + len(new), values.dtype)
    src = 0
    dst = 0
    for i in range(len(new)):
        stop = pos[i]
        width = stop - src
        out[dst : dst + width] = values[src:stop]
        dst += width
        src = stop
        out[dst] = new[i]
        dst += 1
    width = len(values) - src
    out[dst : dst + width] = values[src:]
    return out


@jit
def _delete_sorted(values: np.ndarray, drop: np.ndarray) -> np.ndarray:
    out = np.empty(len(values) - len(drop), values.dtype)
    src = 0
    dst = 0
    for i in range(len(drop)):
        stop = drop[i]
        width = stop - src
        out[dst : dst + width] = values[src:stop]
        dst += width
        src = stop + 1
    width = len(values) - src
    out[dst : dst + width] = values[src:]
    return out


@jit
def _unit_rows(x: np.ndarray, eps: np.ndarray) -> np.ndarray:
    n, d = x.shape
    out = np.empty((n, d), np.float32)
    square = np.empty(d, x.dtype)
    zero = np.zeros(1, x.dtype)
    for r in range(n):
        _unit_row_into(x[r], out[r], square, zero, eps)
    return out


@jit
def _merge_edits_range(
    values: np.ndarray,
    v_lo: int,
    v_hi: int,
    drop: np.ndarray,
    i_lo: int,
    i_hi: int,
    at: np.ndarray,
    j_lo: int,
    j_hi: int,
    new: np.ndarray,
    out: np.ndarray,
    dst: int,
) -> None:
    # the merge of values[v_lo:v_hi] with the edits drop[i_lo:i_hi] and at[j_lo:j_hi] (whose
    # positions lie in that range), written from out[dst]
    src = v_lo
    i = i_lo
    j = j_lo
    while i < i_hi or j < j_hi:
        if j < j_hi and (i == i_hi or at[j] <= drop[i]):
            stop = at[j]
        else:
            stop = drop[i]
        width = stop - src
        out[dst : dst + width] = values[src:stop]
        dst += width
        src = stop
        if j < j_hi and at[j] == stop:
            out[dst] = new[j]
            dst += 1
            j += 1
        elif i < i_hi and drop[i] == stop:
            src = stop + 1
            i += 1
    width = v_hi - src
    out[dst : dst + width] = values[src:v_hi]


def _merge_edits(
    values: np.ndarray, drop: np.ndarray, at: np.ndarray, new: np.ndarray, out: np.ndarray
) -> np.ndarray:
    # np.insert(values, at, new) and the entries at the (old) indices drop removed, in one
    # pass, cut into pieces of the source range: piece p copies values[v_lo:v_hi] with the
    # insertions at positions v_lo..v_hi-1 (the last piece also those at the end) and the
    # drops in it, from out[v_lo + insertions before v_lo - drops before v_lo]
    n = len(values)
    pieces = max(1, min(64, n // 65536))
    for piece in numba.prange(pieces):
        v_lo = n * piece // pieces
        v_hi = n * (piece + 1) // pieces
        j_lo = np.searchsorted(at, v_lo)
        j_hi = len(at) if piece == pieces - 1 else np.searchsorted(at, v_hi)
        i_lo = np.searchsorted(drop, v_lo)
        i_hi = np.searchsorted(drop, v_hi)
        dst = v_lo + j_lo - i_lo
        _merge_edits_range(values, v_lo, v_hi, drop, i_lo, i_hi, at, j_lo, j_hi, new, out, dst)
    return out


_merge_edits_serial, _merge_edits_parallel = _serial_and_parallel(_merge_edits)


@jit
def _lower_bound(a: np.ndarray, x: Any, lo: int, hi: int) -> int:
    """The first i in [lo, hi) with ``a[i] >= x`` (hi if none), ``a[lo:hi]`` sorted."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _find_edges(
    indptr: np.ndarray,
    indices: np.ndarray,
    keys: np.ndarray,
    n: int,
    pos: np.ndarray,
    found: np.ndarray,
) -> None:
    # each key src * n + dst: the first position of its source's row whose followee is not
    # below dst (a binary search within the row), and whether that followee is dst
    for i in numba.prange(len(keys)):
        src = keys[i] // n
        dst = keys[i] - src * n
        end = indptr[src + 1]
        pos[i] = _lower_bound(indices, dst, indptr[src], end)
        found[i] = pos[i] < end and indices[pos[i]] == dst


_find_edges_serial, _find_edges_parallel = _serial_and_parallel(_find_edges)


def _memory_update(
    memory: np.ndarray,
    latent: np.ndarray,
    rows: np.ndarray,
    first: np.ndarray,
    who: np.ndarray,
    keep: np.ndarray,
) -> bool:
    # memory[who[i]] = unit(keep·memory[who[i]] + (1 − keep)·unit(Σ latent[rows[segment i]]))
    # in float32, with NumPy's summation orders; False (nothing done) if a segment is longer
    # than 129 rows (NumPy splits those sums further). ``who`` is distinct: each segment
    # writes its own user's row.
    s, d = len(first), latent.shape[1]
    for i in range(s):
        if (first[i + 1] if i + 1 < s else len(rows)) - first[i] > 129:
            return False
    eps = np.float32(1e-8)
    m = keep[0]
    rest_weight = keep[1]
    for block in numba.prange((s + _ROW_BLOCK - 1) // _ROW_BLOCK):
        zero = np.zeros(1, np.float32)
        engaged = np.empty(d, np.float32)
        square = np.empty(d, np.float32)
        mixed = np.empty(d, np.float32)
        parts = np.empty((8, d), np.float32)
        for i in range(block * _ROW_BLOCK, min(s, (block + 1) * _ROW_BLOCK)):
            if i + 4 < s:  # the engaged rows and the memory row of the segment 4 ahead
                ahead_hi = first[i + 5] if i + 5 < s else len(rows)
                for j in range(first[i + 4], ahead_hi):
                    _prefetch_row(latent, rows[j])
                _prefetch_row(memory, who[i + 4])
            lo = first[i]
            hi = first[i + 1] if i + 1 < s else len(rows)
            _segment_row_sum(latent, rows, lo, hi, engaged, parts)
            norm = _floored_norm(engaged, square, zero, eps)
            u = who[i]
            for k in range(d):
                mixed[k] = m * memory[u, k] + rest_weight * engaged[k] / norm
            norm = _floored_norm(mixed, square, zero, eps)
            for k in range(d):
                memory[u, k] = mixed[k] / norm
    return True


_memory_update_serial, _memory_update_parallel = _serial_and_parallel(_memory_update)


def _relational_draws(
    indptr: np.ndarray,
    indices: np.ndarray,
    active: np.ndarray,
    offset_draw: np.ndarray,
    pick_draw: np.ndarray,
    author_start: np.ndarray,
    by_author: np.ndarray,
    lo: int,
) -> np.ndarray:
    # a random followee's random post of the previous round per draw, -1 where there is none.
    # One pass per lookup (followee, its posts, the post), each pass's random reads
    # independent of one another, so that they overlap
    b, k = offset_draw.shape
    out = np.full((b, k), -1, np.int64)
    e = len(indices)
    p = len(by_author)
    if e == 0:
        return out
    for r in numba.prange(b):
        # prefetched: the CSR row start of the row 16 ahead, the followees drawn 4 ahead
        if r + 16 < b:
            _prefetch_item(indptr, active[r + 16])
        if r + 4 < b:
            ahead = active[r + 4]
            ahead_degree = indptr[ahead + 1] - indptr[ahead]
            for j in range(k):
                offset = np.int64(offset_draw[r + 4, j] * np.float64(ahead_degree))
                _prefetch_item(indices, min(indptr[ahead] + offset, e - 1))
        u = active[r]
        start = indptr[u]
        degree = indptr[u + 1] - start
        if degree > 0:
            for j in range(k):
                offset = np.int64(offset_draw[r, j] * np.float64(degree))
                out[r, j] = indices[min(start + offset, e - 1)]
    # (on threads a row 4 ahead may belong to the next thread's share and hold the next
    # pass's value already: then a prefetch fetches a useless line, and nothing else changes)
    for r in numba.prange(b):
        if r + 4 < b:  # the post lists of the followees 4 rows ahead
            for j in range(k):
                if out[r + 4, j] >= 0:
                    _prefetch_item(author_start, out[r + 4, j])
        for j in range(k):
            followee = out[r, j]
            if followee >= 0:
                first = author_start[followee]
                count = author_start[followee + 1] - first
                pick = np.int64(pick_draw[r, j] * np.float64(count))
                out[r, j] = first + pick if count > 0 else -1
    for r in numba.prange(b):
        if r + 4 < b:  # the posts picked 4 rows ahead
            for j in range(k):
                if out[r + 4, j] >= 0:
                    _prefetch_item(by_author, min(out[r + 4, j], p - 1))
        for j in range(k):
            at = out[r, j]
            if at >= 0:
                out[r, j] = lo + by_author[min(at, p - 1)]
    return out


@inline_jit
def _propagate_row(
    indptr: np.ndarray,
    indices: np.ndarray,
    context: np.ndarray,
    a: Any,
    rest: Any,
    u: int,
    out: np.ndarray,
    acc: np.ndarray,
) -> None:
    # row u of alpha·C + (1 − alpha)·(D⁻¹A C) into ``out`` in float32, u's followees in order
    # (a user who follows nobody keeps its own context), as torch's CSR product and update
    # compute it
    d = context.shape[1]
    lo, hi = indptr[u], indptr[u + 1]
    for k in range(d):
        acc[k] = np.float32(0.0)
    if hi == lo:
        for k in range(d):
            acc[k] += np.float32(1.0) * context[u, k]
    else:
        weight = np.float32(1.0 / (hi - lo))
        for j in range(lo, hi):
            v = indices[j]
            for k in range(d):
                acc[k] += weight * context[v, k]
    for k in range(d):
        out[k] = a * context[u, k] + rest * acc[k]


@jit
def _propagate_hop(
    indptr: np.ndarray,
    indices: np.ndarray,
    context: np.ndarray,
    alpha: np.ndarray,
    rows: np.ndarray,
) -> np.ndarray:
    # rows ``rows`` of alpha·C + (1 − alpha)·(D⁻¹A C) in float32 (_propagate_row)
    d = context.shape[1]
    out = np.empty((len(rows), d), np.float32)
    acc = np.empty(d, np.float32)
    for r in range(len(rows)):
        _propagate_row(indptr, indices, context, alpha[0], alpha[1], rows[r], out[r], acc)
    return out


@jit
def _propagate_levels(
    indptr: np.ndarray,
    indices: np.ndarray,
    rows: np.ndarray,
    levels: int,
    order: np.ndarray,
    position: np.ndarray,
) -> np.ndarray:
    # the nodes within 0, 1, ..., levels - 1 hops of ``rows``, nested, written into the (n,)
    # int64 buffers ``order`` and ``position``: ``order[:sizes[h]]`` are those within h hops,
    # ``position[u]`` is u's index in ``order`` (-1: none); returns ``sizes``
    position[:] = -1
    sizes = np.zeros(max(levels, 1), np.int64)
    count = 0
    for r in rows:
        if position[r] < 0:
            position[r] = count
            order[count] = r
            count += 1
    sizes[0] = count
    start = 0
    for h in range(1, levels):
        end = count
        for i in range(start, end):  # the neighbours of the nodes new at the last level
            u = order[i]
            for j in range(indptr[u], indptr[u + 1]):
                v = indices[j]
                if position[v] < 0:
                    position[v] = count
                    order[count] = v
                    count += 1
        sizes[h] = count
        start = end
    return sizes


@jit
def _propagate_near(
    indptr: np.ndarray,
    indices: np.ndarray,
    context: np.ndarray,
    alpha: np.ndarray,
    rows: np.ndarray,
    hops: int,
) -> np.ndarray:
    # the rows ``rows`` after ``hops`` >= 1 hops, each hop computed only for the users its
    # successors read: hop h (from 0) for those within hops − 1 − h links of ``rows``
    # (_propagate_levels; row by row as _propagate_hop, so the same values), into (N, d)
    # tables whose other rows are never written nor read
    n, d = context.shape
    order = np.empty(n, np.int64)
    sizes = _propagate_levels(indptr, indices, rows, hops, order, np.empty(n, np.int64))
    acc = np.empty(d, np.float32)
    source = context
    for hop in range(hops - 1):
        table = np.empty((n, d), np.float32)
        for i in range(sizes[hops - 1 - hop]):
            u = order[i]
            _propagate_row(indptr, indices, source, alpha[0], alpha[1], u, table[u], acc)
        source = table
    out = np.empty((len(rows), d), np.float32)
    for r in range(len(rows)):
        _propagate_row(indptr, indices, source, alpha[0], alpha[1], rows[r], out[r], acc)
    return out


@jit
def _prefetch_lists_ahead(
    indptr: np.ndarray, indices: np.ndarray, targets: np.ndarray, t: int
) -> None:
    # the CSR row start of target t + 16 and the followee list of target t + 8
    m = len(targets)
    if t + 16 < m:
        _prefetch_item(indptr, targets[t + 16])
    if t + 8 < m:
        _prefetch_item(indices, indptr[targets[t + 8]])


def _hop_from_blocks(
    indptr: np.ndarray,
    indices: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    # alpha·C + (1 − alpha)·(D⁻¹A C) at ``targets``, C = [first | second] read by node id,
    # written into ``out`` (len(targets), d1 + d2) float32 and returned; the product sums
    # w·C[v] from 0 in CSR order in float32, as SciPy's csr_matvecs
    d1, d2 = first.shape[1], second.shape[1]
    a, rest = weights[0], weights[1]
    m = len(targets)
    for t in numba.prange(m):
        # prefetches in a pipeline: the CSR row start of the target 16 ahead, the followee
        # list of the one 8 ahead, the followees' context rows of the one 2 ahead
        _prefetch_lists_ahead(indptr, indices, targets, t)
        if t + 2 < m:
            ahead = targets[t + 2]
            for j in range(indptr[ahead], indptr[ahead + 1]):
                _prefetch_row(first, indices[j])
                _prefetch_row(second, indices[j])
        u = targets[t]
        lo, hi = indptr[u], indptr[u + 1]
        for k in range(d1 + d2):
            out[t, k] = np.float32(0.0)
        if hi == lo:
            for k in range(d1):
                out[t, k] += np.float32(1.0) * first[u, k]
            for k in range(d2):
                out[t, d1 + k] += np.float32(1.0) * second[u, k]
        else:
            w = np.float32(1.0 / (hi - lo))
            for j in range(lo, hi):
                v = indices[j]
                for k in range(d1):
                    out[t, k] += w * first[v, k]
                for k in range(d2):
                    out[t, d1 + k] += w * second[v, k]
        for k in range(d1):
            out[t, k] = a * first[u, k] + rest * out[t, k]
        for k in range(d2):
            out[t, d1 + k] = a * second[u, k] + rest * out[t, d1 + k]
    return out


def _hop_from_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    context: np.ndarray,
    position: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    # as _hop_from_blocks, with C[v] = context[position[v]]
    d = context.shape[1]
    a, rest = weights[0], weights[1]
    m = len(targets)
    for t in numba.prange(m):
        # prefetches in a pipeline, as in _hop_from_blocks, with the positions between
        _prefetch_lists_ahead(indptr, indices, targets, t)
        if t + 4 < m:
            ahead = targets[t + 4]
            for j in range(indptr[ahead], indptr[ahead + 1]):
                _prefetch_item(position, indices[j])
        if t + 2 < m:
            ahead = targets[t + 2]
            for j in range(indptr[ahead], indptr[ahead + 1]):
                _prefetch_row(context, position[indices[j]])
        u = targets[t]
        lo, hi = indptr[u], indptr[u + 1]
        own = position[u]
        for k in range(d):
            out[t, k] = np.float32(0.0)
        if hi == lo:
            for k in range(d):
                out[t, k] += np.float32(1.0) * context[own, k]
        else:
            w = np.float32(1.0 / (hi - lo))
            for j in range(lo, hi):
                v = position[indices[j]]
                for k in range(d):
                    out[t, k] += w * context[v, k]
        for k in range(d):
            out[t, k] = a * context[own, k] + rest * out[t, k]
    return out


def _count_reactions(
    post: np.ndarray, kind: np.ndarray, kinds: np.ndarray, counters: tuple, parts: int
) -> None:
    # counters[j][post[i]] += 1 for every reaction i with kind[i] == kinds[j]; the post ids
    # cut into ``parts`` ranges, each part counting the reactions to its range (integer
    # counts: any order of the increments gives the same counters)
    m = len(post)
    if m == 0:
        return
    lo, hi = post.min(), post.max() + 1
    for part in numba.prange(parts):
        first = lo + (hi - lo) * part // parts
        stop = lo + (hi - lo) * (part + 1) // parts
        for i in range(m):
            p = post[i]
            if first <= p < stop:
                for j in range(len(kinds)):
                    if kind[i] == kinds[j]:
                        counters[j][p] += 1
                        break


@jit
def _observe_reactions(
    user: np.ndarray,
    reply: np.ndarray,
    toxicity: np.ndarray,
    noise: np.ndarray,
    cross: np.ndarray,
    hostile: np.ndarray,
    decay: np.float32,
    rest: float,
    reply_toxicity: np.ndarray,
    cross_civil: np.ndarray,
    cross_total: np.ndarray,
) -> None:
    # the bincounts of observe_reactions_numpy in one pass over the reactions, then its
    # updates in one pass over the users: the observed toxicities summed in reaction order,
    # decay · float32 in float32 (NumPy's weak scalar), the rest in float64, then float32
    n = len(reply_toxicity)
    total = np.zeros(n, np.float64)
    replies = np.zeros(n, np.int64)
    crossed = np.zeros(n, np.int64)
    civil = np.zeros(n, np.int64)
    j = 0
    for i in range(len(user)):
        u = user[i]
        if reply[i]:
            seen = np.float64(toxicity[i]) + noise[j]
            j += 1
            if seen < 0.0:
                seen = 0.0
            elif seen > 1.0:
                seen = 1.0
            total[u] += seen
            replies[u] += 1
        if cross[i]:
            crossed[u] += 1
            if not hostile[i]:
                civil[u] += 1
    for u in range(n):
        if replies[u] > 0:
            kept = np.float64(decay * reply_toxicity[u])
            reply_toxicity[u] = np.float32(kept + rest * total[u] / np.float64(replies[u]))
        cross_total[u] += np.float64(crossed[u])
        cross_civil[u] += np.float64(civil[u])


def _drop_own_and_repeated(feed: np.ndarray, owner: np.ndarray, author: np.ndarray) -> np.ndarray:
    # feed with the posts written by the row's owner and repeats within a row set to -1
    b, f = feed.shape
    out = feed.copy()
    some = len(author) > 0  # no post: every slot is empty, nothing to read
    for r in numba.prange(b):  # the authors' random reads in a pass of their own, no branch
        for j in range(f):
            v = feed[r, j]
            out[r, j] = -1 if some and v >= 0 and author[max(v, 0)] == owner[r] else v
    for r in numba.prange(b):
        _blank_repeats(out, r)
    return out


@jit
def _keyed_max(sorted_key: np.ndarray, keys: np.ndarray, values: np.ndarray):
    # for each of keys: whether sorted_key holds it, and the max of each row of values over
    # the columns where it does (0 where it does not)
    m, a = values.shape[0], len(keys)
    found = np.zeros(a, np.bool_)
    best = np.zeros((m, a), values.dtype)
    for i in range(a):
        lo = np.searchsorted(sorted_key, keys[i])
        hi = lo
        while hi < len(sorted_key) and sorted_key[hi] == keys[i]:
            hi += 1
        if hi > lo:
            found[i] = True
            for r in range(m):
                v = values[r, lo]
                for j in range(lo + 1, hi):
                    w = values[r, j]
                    if w > v or w != w:  # np.maximum: NaN wins
                        v = w
                best[r, i] = v
    return found, best


@jit
def _place_picks(
    feed: np.ndarray,
    channel: np.ndarray,
    row: np.ndarray,
    post: np.ndarray,
    start: int,
    width: int,
    injected: int,
):
    # row r's picks (in the order given, at most width) fill columns start.. of r, its former
    # entries there move right behind them; the picks' channel becomes injected
    b = feed.shape[0]
    out_feed = feed.copy()
    out_channel = channel.copy()
    count = np.zeros(b, np.int64)
    picks = np.empty((b, max(width, 1)), np.int64)
    for i in range(len(row)):
        r = row[i]
        if count[r] < width:
            picks[r, count[r]] = post[i]
            count[r] += 1
    for r in range(b):
        c = count[r]
        if c == 0:
            continue
        for col in range(width):
            if col < c:
                out_feed[r, start + col] = picks[r, col]
                out_channel[r, start + col] = injected
            else:
                out_feed[r, start + col] = feed[r, start + col - c]
    return out_feed, out_channel


@jit
def _distinct_sorted_edges(src: np.ndarray, dst: np.ndarray) -> bool:
    # no self-loop, and (src, dst) strictly increasing pair after pair
    for i in range(len(src)):
        if src[i] == dst[i]:
            return False
        if i > 0 and (src[i] < src[i - 1] or (src[i] == src[i - 1] and dst[i] <= dst[i - 1])):
            return False
    return True


#: Posts above which :func:`_rec_arm_columns` prefetches (below, its reads stay in cache).
_PREFETCH_ARM_POSTS = 1 << 16


def _rec_arm_columns(
    context: np.ndarray,
    user_rows: np.ndarray,
    arm_row: np.ndarray,
    post_latent: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    user_columns: tuple,
    post_columns: tuple,
    round_: int,
    source: np.ndarray,
) -> None:
    stance, discrete, recent_toxicity, activity = user_columns
    author_of, likes, retweets, replies, dislikes, toxicity, post_round, flagged, post_stance = (
        post_columns
    )
    width, d = user_rows.shape[1], post_latent.shape[1]
    column = width + d
    sources = context.shape[1] - column - 14
    n = len(user)
    # at a million users the posts' columns are larger than the caches and an arm's post is
    # random: then prefetched (a hint: no value changes) are the post's author 16 arms ahead
    # and, 8 ahead, the arm's user row, the post's latent row and columns, its author's stance
    far = len(post_latent) > _PREFETCH_ARM_POSTS
    for k in numba.prange(n):
        if far and k + 16 < n:
            _prefetch_item(author_of, post[k + 16])
        if far and k + 8 < n:
            ahead = post[k + 8]
            _prefetch_row(user_rows, arm_row[k + 8])
            _prefetch_row(post_latent, ahead)
            _prefetch_item(likes, ahead)
            _prefetch_item(retweets, ahead)
            _prefetch_item(replies, ahead)
            _prefetch_item(dislikes, ahead)
            _prefetch_item(toxicity, ahead)
            _prefetch_item(post_round, ahead)
            _prefetch_item(flagged, ahead)
            _prefetch_item(post_stance, ahead)
            ahead_author = author_of[ahead]
            _prefetch_item(stance, ahead_author)
            _prefetch_item(discrete, ahead_author)
        row = context[k]
        u, p = user[k], post[k]
        a = author_of[p]
        r = arm_row[k]
        for j in range(width):
            row[j] = user_rows[r, j]
        for j in range(d):
            row[width + j] = post_latent[p, j]
        d_v, d_u = np.float32(discrete[u]), np.float32(discrete[a])
        row[column] = stance[u]
        row[column + 1] = stance[a]
        row[column + 2] = abs(d_u - d_v) / np.float32(2)
        row[column + 3] = 1.0 if d_u * d_v == -1 else 0.0
        row[column + 4] = toxicity[p]
        # the NumPy version sums and subtracts in int32 (wrapping); the same here
        row[column + 5] = np.int32(np.int64(likes[p]) + retweets[p] + replies[p] + dislikes[p])
        row[column + 6] = np.int32(round_ - np.int64(post_round[p]))
        row[column + 8] = recent_toxicity[u]
        row[column + 9] = 1.0 if flagged[p] else 0.0
        row[column + 10] = activity[u]
        row[column + 11] = post_stance[p]
        row[column + 12] = stance[u] * post_stance[p]
        for j in range(sources):
            row[column + 14 + j] = 1.0 if source[k] == j else 0.0


@jit
def _pairwise_sum(a: np.ndarray, zero: Any) -> Any:
    # NumPy's pairwise sum of the float ``a`` (``zero``: 0 in its type): up to 128 terms in
    # order below 8, else eight accumulators (_pairwise_row; it adds a 0, which changes only a
    # -0.0 leaf, and the reduction's own 0 + makes such a total +0.0 anyway); above 128 terms
    # the sum of its two halves, split on a multiple of 8, each summed so. The tree is walked
    # with a stack (not numba's recursion); a node's sum is left + right in any walk order.
    lo_of = np.empty(64, np.int64)
    n_of = np.empty(64, np.int64)
    state = np.empty(64, np.int8)
    values = np.empty(64, a.dtype)
    zeros = np.zeros(1, a.dtype)
    lo_of[0], n_of[0], state[0] = 0, len(a), 0
    top, count = 1, 0
    while top > 0:
        node = top - 1
        lo, n = lo_of[node], n_of[node]
        if n <= 128:
            if n < 8:
                leaf = zero
                for i in range(lo, lo + n):
                    leaf += a[i]
            else:
                leaf = _pairwise_row(a[lo : lo + n], n, zeros)
            values[count] = leaf
            count += 1
            top -= 1
            continue
        half = n // 2
        half -= half % 8
        if state[node] == 0:  # its left half next
            state[node] = 1
            lo_of[top], n_of[top], state[top] = lo, half, 0
            top += 1
        elif state[node] == 1:  # then its right half
            state[node] = 2
            lo_of[top], n_of[top], state[top] = lo + half, n - half, 0
            top += 1
        else:  # both summed: left + right
            values[count - 2] = values[count - 2] + values[count - 1]
            count -= 1
            top -= 1
    return values[0]


@jit
def _objective_arm_rewards(
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
    # kernels.objective_arm_rewards_numpy: bincount's float64 sums in reaction order, NumPy's
    # pairwise sums (float64 values, float32 excess toxicities), the weak Python divisors
    m = len(caused)
    contribution = np.zeros(arms, np.float64)
    arm_excess = np.zeros(arms, np.float64)
    reactions = np.zeros(arms, np.int64)
    excess = np.empty(m, np.float32)
    mean_toxicity = np.float32(text_toxicity)
    hits = 0
    cross_hits = 0
    for i in range(m):
        excess[i] = toxicity[i] - mean_toxicity if kind[i] == reply_code else np.float32(0.0)
        c = caused[i]
        if c >= 0:
            if c >= arms:
                raise ValueError("reaction_choice names an arm beyond the applied arms")
            contribution[c] += value[i]
            arm_excess[c] += np.float64(excess[i])
            reactions[c] += 1
            hits += 1
            cross_hits += cross[i]
    baseline = 0.0
    builtin_excess = 0.0
    if builtin_slots:
        chosen = np.flatnonzero(in_builtin_slot)
        baseline = (0.0 + _pairwise_sum(value[chosen], 0.0)) / np.float64(builtin_slots)
        excess_sum = np.float32(0.0) + _pairwise_sum(excess[chosen], np.float32(0.0))
        builtin_excess = np.float64(excess_sum / np.float32(builtin_slots))
    change = contribution - baseline
    slot_step = (0.0 + _pairwise_sum(change, 0.0)) / np.float64(max(governed_users, 1))
    reward = np.empty(arms, np.float32)
    arm_toxicity = np.empty(arms, np.float32)
    reacted = 0
    for a in range(arms):
        reward[a] = np.float32(_clipped(0.5 + 0.5 * change[a], 0.0, 1.0))
        arm_toxicity[a] = np.float32(arm_excess[a] - builtin_excess)
        reacted += reactions[a] > 0
    cross_ratio = np.float64(cross_hits) / np.float64(hits) if hits else 0.0
    reaction_rate = np.float64(reacted) / np.float64(arms) if arms else 0.0
    return reward, arm_toxicity, slot_step, baseline, cross_ratio, reaction_rate


@jit
def _mean32(a: np.ndarray) -> Any:
    # a.mean() of a float32 array: its float32 sum from 0, divided by the count in float64
    # (np.intp is a strong integer type), rounded to float32
    total = np.float32(0.0) + _pairwise_sum(a, np.float32(0.0))
    return np.float32(np.float64(total) / np.float64(len(a)))


@jit
def _round_means(
    stance: np.ndarray,
    text_toxicity: np.ndarray,
    misinformed: np.ndarray,
    reaction_cross: np.ndarray,
    channel: np.ndarray,
    injected: int,
) -> tuple[float, float, float, float, float, float]:
    n = len(stance)
    mean = _mean32(stance)
    squared = np.empty(n, np.float32)
    for i in range(n):
        x = stance[i] - mean
        squared[i] = x * x
    std = np.sqrt(_mean32(squared))
    toxicity = np.float64(_mean32(text_toxicity)) if len(text_toxicity) else 0.0
    misinformation = np.float64(misinformed.sum()) / np.float64(len(misinformed))
    cross = 0.0
    if len(reaction_cross):
        cross = np.float64(reaction_cross.sum()) / np.float64(len(reaction_cross))
    share = 0.0
    if len(channel):
        hits = 0
        for c in channel:
            hits += c == injected
        share = np.float64(hits) / np.float64(len(channel))
    return np.float64(mean), np.float64(std), toxicity, misinformation, cross, share


@jit
def _reaction_values(
    cross: np.ndarray,
    kind: np.ndarray,
    toxicity: np.ndarray,
    weights: np.ndarray,
    reply_code: int,
    dislike_code: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # the twin's weak scalars: the threshold and the reply weight meet float32 toxicity as
    # float32, the hostile weight multiplies a float64 0 or 1
    threshold, hostile_weight = np.float32(weights[0]), weights[1]
    reply_weight = np.float32(weights[2])
    m = len(cross)
    hostile = np.empty(m, np.bool_)
    civil_cross = np.empty(m, np.bool_)
    hostile_cross = np.empty(m, np.bool_)
    value = np.empty(m, np.float64)
    for i in range(m):
        reply = kind[i] == reply_code
        h = kind[i] == dislike_code or (reply and toxicity[i] >= threshold)
        c = cross[i]
        hostile[i] = h
        civil_cross[i] = c and not h
        hostile_cross[i] = c and h
        toxic = toxicity[i] if reply and c else np.float32(0.0)
        value[i] = (
            np.float64(1.0 if c and not h else 0.0)
            - hostile_weight * np.float64(1.0 if c and h else 0.0)
            - np.float64(reply_weight * toxic)
        )
    return hostile, civil_cross, hostile_cross, value


@jit
def _rec_arm_history_columns(
    rows: np.ndarray,
    at: np.ndarray,
    engagement_scale: float,
    rounds: int,
    reply_toxicity: np.ndarray,
    civility: np.ndarray,
    who: np.ndarray,
) -> None:
    # the NumPy twin's float32 divisions by the weak Python scale and round count, and its
    # float32 products
    engagement_at, age_at, cross_at, recent_at, tail = at[0], at[1], at[2], at[3], at[4]
    scale, span = np.float32(engagement_scale), np.float32(rounds)
    for k in range(rows.shape[0]):
        row, u = rows[k], who[k]
        row[engagement_at] = row[engagement_at] / scale
        row[age_at] = row[age_at] / span
        cross, toxicity, civil = row[cross_at], reply_toxicity[u], civility[u]
        row[tail] = toxicity
        row[tail + 1] = civil
        row[tail + 2] = cross * toxicity
        row[tail + 3] = cross * civil
        row[tail + 4] = cross * row[recent_at]
        row[tail + 5] = np.float32(0.0)


@jit
def _rec_arm_norm_pad(
    rows: np.ndarray, squared: np.ndarray, norm_squared: float, mask: np.ndarray
) -> None:
    # np.maximum(x, 0.0): NaN stays NaN (x is never -0.0: norm_squared > 0)
    last = rows.shape[1] - 1
    for k in range(rows.shape[0]):
        if mask[k]:
            pad = norm_squared - squared[k]
            if pad < 0.0:
                pad = 0.0
            rows[k, last] = np.float32(np.sqrt(pad))
        else:
            rows[k, :] = np.float32(0.0)


_relational_draws_serial, _relational_draws_parallel = _serial_and_parallel(_relational_draws)
_drop_own_and_repeated_serial, _drop_own_and_repeated_parallel = _serial_and_parallel(
    _drop_own_and_repeated
)
_rec_arm_columns_serial, _rec_arm_columns_parallel = _serial_and_parallel(_rec_arm_columns)
_same_sign_serial, _same_sign_parallel = _serial_and_parallel(_same_sign)
_dedupe_serial, _dedupe_parallel = _serial_and_parallel(_dedupe)
_compact_serial, _compact_parallel = _serial_and_parallel(_compact)
_hop_from_blocks_serial, _hop_from_blocks_parallel = _serial_and_parallel(_hop_from_blocks)
_hop_from_rows_serial, _hop_from_rows_parallel = _serial_and_parallel(_hop_from_rows)
_count_reactions_serial, _count_reactions_parallel = _serial_and_parallel(_count_reactions)

KERNELS = {
    "dedupe_rows": _dedupe_serial,
    "compact_rows": _compact_serial,
    "top_k_rows": _top_k,
    "segment_sum_rows": _segment_sum,
    "same_sign_share": _same_sign_serial,
    "insert_sorted": _insert_sorted,
    "delete_sorted": _delete_sorted,
    "distinct_sorted_edges": _distinct_sorted_edges,
    "merge_edits": _merge_edits_serial,
    "find_edges": _find_edges_serial,
    "unit_rows": _unit_rows,
    "unit_noisy_rows": _unit_noisy_rows,
    "memory_update": _memory_update_serial,
    "relational_draws": _relational_draws_serial,
    "propagate_hop": _propagate_hop,
    "propagate_near": _propagate_near,
    "count_reactions": _count_reactions_serial,
    "observe_reactions": _observe_reactions,
    "drop_own_and_repeated": _drop_own_and_repeated_serial,
    "stance_top_k": _stance_top_k,
    "gather_sum_rows": _gather_sum_rows_serial,
    "keyed_max": _keyed_max,
    "place_picks": _place_picks,
    "rec_arm_columns": _rec_arm_columns_serial,
    "propagate_levels": _propagate_levels,
    "hop_from_blocks": _hop_from_blocks_serial,
    "hop_from_rows": _hop_from_rows_serial,
}
#: The kernels of :data:`KERNELS` that have a threaded version (the same results).
PARALLEL_KERNELS = {
    "count_reactions": _count_reactions_parallel,
    "merge_edits": _merge_edits_parallel,
    "find_edges": _find_edges_parallel,
    "top_k_rows": _top_k_parallel,
    "memory_update": _memory_update_parallel,
    "drop_own_and_repeated": _drop_own_and_repeated_parallel,
    "gather_sum_rows": _gather_sum_rows_parallel,
    "relational_draws": _relational_draws_parallel,
    "rec_arm_columns": _rec_arm_columns_parallel,
    "same_sign_share": _same_sign_parallel,
    "dedupe_rows": _dedupe_parallel,
    "compact_rows": _compact_parallel,
    "hop_from_blocks": _hop_from_blocks_parallel,
    "hop_from_rows": _hop_from_rows_parallel,
}


# SeedSequence's hash constants (numpy.random.SeedSequence, pool size 4)
_INIT_A = np.uint64(0x43B0D7E5)
_MULT_A = np.uint64(0x931E8875)
_INIT_B = np.uint64(0x8B51F9DD)
_MULT_B = np.uint64(0x58F38DED)
_MIX_MULT_L = np.uint64(0xCA01F9DD)
_MIX_MULT_R = np.uint64(0x4973F715)
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT16 = np.uint64(16)
_SHIFT32 = np.uint64(32)


@jit
def _seed_sequence_state(words: np.ndarray) -> np.ndarray:
    """(4,) uint64: ``SeedSequence(words).generate_state(4, np.uint64)`` for (n,) uint64
    entropy ``words``, each below 2**32 (32-bit arithmetic done in 64 bits and masked)."""
    pool = np.zeros(4, np.uint64)
    hash_const = _INIT_A
    n = len(words)
    for i in range(4):
        value = words[i] if i < n else np.uint64(0)
        value ^= hash_const
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = (value * hash_const) & _MASK32
        pool[i] = value ^ (value >> _SHIFT16)
    for i_src in range(4 + max(n - 4, 0)):
        for i_dst in range(4):
            if i_src < 4 and i_src == i_dst:
                continue
            value = pool[i_src] if i_src < 4 else words[i_src]
            value ^= hash_const
            hash_const = (hash_const * _MULT_A) & _MASK32
            value = (value * hash_const) & _MASK32
            value ^= value >> _SHIFT16
            mixed = (_MIX_MULT_L * pool[i_dst] - _MIX_MULT_R * value) & _MASK32
            pool[i_dst] = mixed ^ (mixed >> _SHIFT16)
    out = np.zeros(4, np.uint64)
    hash_const = _INIT_B
    for i in range(8):
        value = pool[i % 4] ^ hash_const
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = (value * hash_const) & _MASK32
        value ^= value >> _SHIFT16
        if i % 2 == 0:
            out[i // 2] = value
        else:
            out[i // 2] |= value << _SHIFT32
    return out


KERNELS["seed_sequence_state"] = _seed_sequence_state


@jit
def _scatter_add_rows(out: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``np.add.at(out, index, rows)`` for 2-D ``out`` and ``rows`` of one dtype: row by row,
    in order, so the sums round as NumPy's."""
    for r in range(len(index)):
        target = index[r]
        for j in range(rows.shape[1]):
            out[target, j] += rows[r, j]


KERNELS["scatter_add_rows"] = _scatter_add_rows


# ----------------------------------------------------------------------------- step overhead
def _cluster_draws(
    draw: np.ndarray,
    user_cluster: np.ndarray,
    cluster_start: np.ndarray,
    by_cluster: np.ndarray,
    lo: int,
    hi: int,
) -> np.ndarray:
    # a post of the row's cluster per draw (the whole range if the cluster is empty), the
    # offsets truncated from float64 products as NumPy's astype(int64) does
    u, m = draw.shape
    out = np.empty((u, m), np.int64)
    last = len(by_cluster) - 1
    span = np.float64(hi - lo)
    for r in numba.prange(u):
        c = user_cluster[r]
        start = cluster_start[c]
        size = cluster_start[c + 1] - start
        scale = np.float64(size)
        for j in range(m):
            if size > 0:
                out[r, j] = lo + by_cluster[min(start + np.int64(draw[r, j] * scale), last)]
            else:
                out[r, j] = lo + np.int64(draw[r, j] * span)
    return out


_cluster_draws_serial, _cluster_draws_parallel = _serial_and_parallel(_cluster_draws)
KERNELS["cluster_draws"] = _cluster_draws_serial
PARALLEL_KERNELS["cluster_draws"] = _cluster_draws_parallel


def _exposure_filter(
    feed: np.ndarray, post_author: np.ndarray, exposure: np.ndarray, draw: np.ndarray
) -> tuple[np.ndarray, int]:
    # slot removed where its draw is at least its author's pass probability
    b, f = feed.shape
    out = feed.copy()
    removed_in_row = np.zeros(b, np.int64)
    for r in numba.prange(b):
        for j in range(f):
            post = feed[r, j]
            if post >= 0 and draw[r, j] >= exposure[post_author[post]]:
                out[r, j] = -1
                removed_in_row[r] += 1
    return out, removed_in_row.sum()


_exposure_filter_serial, _exposure_filter_parallel = _serial_and_parallel(_exposure_filter)
KERNELS["exposure_filter"] = _exposure_filter_serial
PARALLEL_KERNELS["exposure_filter"] = _exposure_filter_parallel


def _feed_impressions(
    feed: np.ndarray, filtered: np.ndarray, owner: np.ndarray, post_author: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # the valid slots row-major: mask, user, post, author, removed by the filter (each row
    # writes from its own start, the count of valid slots in the rows before it)
    b, f = feed.shape
    valid = np.empty((b, f), np.bool_)
    start = np.zeros(b + 1, np.int64)
    for r in numba.prange(b):
        count = 0
        for j in range(f):
            valid[r, j] = feed[r, j] >= 0
            if valid[r, j]:
                count += 1
        start[r + 1] = count
    for r in range(b):
        start[r + 1] += start[r]
    total = start[b]
    user = np.empty(total, owner.dtype)
    post = np.empty(total, feed.dtype)
    author = np.empty(total, post_author.dtype)
    removed = np.empty(total, np.bool_)
    for r in numba.prange(b):
        i = start[r]
        for j in range(f):
            if valid[r, j]:
                user[i] = owner[r]
                post[i] = feed[r, j]
                removed[i] = filtered[r, j] < 0
                i += 1
    for i in numba.prange(total):  # the random reads apart from the branches: they overlap
        author[i] = post_author[post[i]]
    return valid, user, post, author, removed


_feed_impressions_serial, _feed_impressions_parallel = _serial_and_parallel(_feed_impressions)
KERNELS["feed_impressions"] = _feed_impressions_serial
PARALLEL_KERNELS["feed_impressions"] = _feed_impressions_parallel


@jit
def _author_history(
    recent_toxicity: np.ndarray,
    recent_misinfo: np.ndarray,
    author: np.ndarray,
    toxicity: np.ndarray,
    misinfo: np.ndarray,
    keep: Any,
    rest: float,
) -> None:
    # per-author sums in text order (as np.bincount's weights), then the EMA of the authors
    n = len(recent_toxicity)
    count = np.zeros(n, np.int64)
    tox = np.zeros(n, np.float64)
    mis = np.zeros(n, np.float64)
    for i in range(len(author)):
        a = author[i]
        count[a] += 1
        tox[a] += toxicity[i]
        mis[a] += misinfo[i]
    for u in range(n):
        if count[u] > 0:
            c = np.float64(count[u])
            recent_toxicity[u] = keep * recent_toxicity[u] + rest * (tox[u] / c)
            recent_misinfo[u] = keep * recent_misinfo[u] + rest * (mis[u] / c)


KERNELS["author_history"] = _author_history


@jit
def _slate_slots(
    slate: np.ndarray, mask: np.ndarray, group: np.ndarray, per_user: int, no_op: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # slots in slate order: the first use of an allowed arm is a candidate until its group
    # has per_user of them
    s = len(slate)
    filled = np.zeros(s, np.bool_)
    first_use = np.zeros(s, np.bool_)
    candidate = np.zeros(s, np.bool_)
    over = np.zeros(s, np.bool_)
    seen = np.zeros(no_op + 1, np.bool_)
    groups = 0
    for k in range(len(group)):
        groups = max(groups, group[k] + 1)
    taken = np.zeros(groups, np.int64)
    for i in range(s):
        arm = slate[i]
        filled[i] = arm != no_op
        if not seen[arm]:
            seen[arm] = True
            first_use[i] = True
            if filled[i] and mask[arm]:
                g = group[arm]
                if taken[g] >= per_user:
                    over[i] = True
                else:
                    candidate[i] = True
                taken[g] += 1
    return filled, first_use, candidate, over


KERNELS["slate_slots"] = _slate_slots


@jit
def _share_columns(
    kind: np.ndarray,
    user: np.ndarray,
    post: np.ndarray,
    toxicity: np.ndarray,
    stance: np.ndarray,
    post_toxicity: np.ndarray,
    post_misinfo: np.ndarray,
    codes: np.ndarray,
) -> tuple:
    # the retweets and replies in reaction order and the columns of the posts they write
    m = len(kind)
    shares = np.zeros(m, np.bool_)
    count = 0
    for i in range(m):
        if kind[i] == codes[0] or kind[i] == codes[1]:
            shares[i] = True
            count += 1
    share_user = np.empty(count, user.dtype)
    share_post = np.empty(count, post.dtype)
    is_reply = np.empty(count, np.bool_)
    share_toxicity = np.empty(count, np.float32)
    share_misinfo = np.empty(count, np.bool_)
    share_stance = np.empty(count, stance.dtype)
    share_kind = np.empty(count, np.int64)
    j = 0
    for i in range(m):
        if shares[i]:
            p = post[i]
            reply = kind[i] == codes[1]
            share_user[j] = user[i]
            share_post[j] = p
            is_reply[j] = reply
            share_toxicity[j] = toxicity[i] if reply else post_toxicity[p]
            share_misinfo[j] = False if reply else post_misinfo[p]
            share_stance[j] = stance[i]
            share_kind[j] = codes[3] if reply else codes[2]
            j += 1
    return (
        shares,
        share_user,
        share_post,
        is_reply,
        share_toxicity,
        share_misinfo,
        share_stance,
        share_kind,
    )


KERNELS["share_columns"] = _share_columns


def _share_latents(
    source: np.ndarray,
    writer: np.ndarray,
    post: np.ndarray,
    user: np.ndarray,
    is_reply: np.ndarray,
    out: np.ndarray,
) -> None:
    # out[i] = source[post[i]], or for a reply the unit vector of source[post[i]] +
    # writer[user[i]] in float32, its norm summed in NumPy's pairwise order
    s, d = len(post), source.shape[1]
    eps = np.full(1, 1e-8, np.float32)
    for block in numba.prange((s + _ROW_BLOCK - 1) // _ROW_BLOCK):
        zero = np.zeros(1, np.float32)
        mix = np.empty(d, np.float32)
        square = np.empty(d, np.float32)
        for i in range(block * _ROW_BLOCK, min(s, (block + 1) * _ROW_BLOCK)):
            if i + 4 < s:  # the rows of the share 4 ahead
                _prefetch_row(source, post[i + 4])
                if is_reply[i + 4]:
                    _prefetch_row(writer, user[i + 4])
            p = post[i]
            if not is_reply[i]:
                for k in range(d):
                    out[i, k] = source[p, k]
                continue
            u = user[i]
            for k in range(d):
                mix[k] = source[p, k] + writer[u, k]
            _unit_row_into(mix, out[i], square, zero, eps)


_share_latents_serial, _share_latents_parallel = _serial_and_parallel(_share_latents)
KERNELS["share_latents"] = _share_latents_serial
PARALLEL_KERNELS["share_latents"] = _share_latents_parallel


@jit
def _key_table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    # an open-addressing hash table of the distinct keys (linear probing, a power of two at
    # least twice their number): (slot keys, slot values, mask); a slot's value is the index
    # of the last entry of ``keys`` with its key, -1 for an empty slot
    size = 16
    while size < 2 * len(keys):
        size *= 2
    table_key = np.empty(size, np.int64)
    table_value = np.full(size, -1, np.int64)
    mask = size - 1
    for i in range(len(keys)):
        key = keys[i]
        slot = _key_slot(key, mask)
        while table_value[slot] >= 0 and table_key[slot] != key:
            slot = (slot + 1) & mask
        table_key[slot] = key
        table_value[slot] = i
    return table_key, table_value, mask


@jit
def _key_slot(key: Any, mask: int) -> int:
    # Fibonacci hashing of the key's 64 bits
    mixed = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return int(mixed >> np.uint64(32)) & mask


def _reaction_choices(arm_key: np.ndarray, react_key: np.ndarray) -> np.ndarray:
    # each reaction key looked up in a hash table of the arms' keys (built in arm order, so
    # an arm overwrites an earlier one of its key: the last arm answers, as a fancy
    # assignment in arm order leaves it); no sort of the arms
    table_key, table_value, mask = _key_table(arm_key)
    out = np.full(len(react_key), -1, np.int64)
    if len(arm_key) == 0:
        return out
    for i in numba.prange(len(react_key)):
        key = react_key[i]
        slot = _key_slot(key, mask)
        while table_value[slot] >= 0:
            if table_key[slot] == key:
                out[i] = table_value[slot]
                break
            slot = (slot + 1) & mask
    return out


_reaction_choices_serial, _reaction_choices_parallel = _serial_and_parallel(_reaction_choices)
KERNELS["reaction_choices"] = _reaction_choices_serial
PARALLEL_KERNELS["reaction_choices"] = _reaction_choices_parallel


def _slot_reactions(
    feed: np.ndarray,
    channel: np.ndarray,
    slot_channel: int,
    owner: np.ndarray,
    open_row: np.ndarray,
    react_user: np.ndarray,
    react_post: np.ndarray,
) -> tuple[np.ndarray, int]:
    # each reaction's feed row looked up in a table of the rows by user (the owners are
    # distinct, ascending and non-negative), then its post looked for among that row's slots
    # of the channel
    b, f = feed.shape
    top = owner[b - 1] + 1 if b else 0
    row_of = np.full(top, -1, np.int64)
    for r in numba.prange(b):
        row_of[owner[r]] = r
    hit = np.zeros(len(react_user), np.bool_)
    for i in numba.prange(len(react_user)):
        user = react_user[i]
        row = row_of[user] if 0 <= user < top else -1
        post = react_post[i]
        if post >= 0 and row >= 0 and open_row[row]:
            for j in range(f):
                if feed[row, j] == post and channel[row, j] == slot_channel:
                    hit[i] = True
                    break
    slots_in_row = np.zeros(b, np.int64)
    for r in numba.prange(b):
        if open_row[r]:
            for j in range(f):
                if feed[r, j] >= 0 and channel[r, j] == slot_channel:
                    slots_in_row[r] += 1
    return hit, slots_in_row.sum()


_slot_reactions_serial, _slot_reactions_parallel = _serial_and_parallel(_slot_reactions)
KERNELS["slot_reactions"] = _slot_reactions_serial
PARALLEL_KERNELS["slot_reactions"] = _slot_reactions_parallel


KERNELS["unit_noisy_rows_drawn"] = unit_noisy_rows_drawn


@jit
def _guide_table(a: np.ndarray) -> tuple[np.ndarray, float]:
    # one bucket of width a[-1] / m per entry of the sorted (m,) ``a``: each bucket's first
    # index i with a[i] >= its lower edge
    m = len(a)
    width = a[m - 1] / m if m else 0.0
    guide = np.empty(m, np.int64)
    i = 0
    for b in range(m):
        edge = b * width
        while i < m and a[i] < edge:
            i += 1
        guide[b] = i
    return guide, width


def _search_guided(a: np.ndarray, v: np.ndarray, guide: np.ndarray, width: float) -> np.ndarray:
    # each search starts at the bucket below its value's (so below the answer, whatever the
    # rounding of v / width) and steps forward to the first a[i] >= v. Three passes: the
    # starts (independent loads), four steps without branches, then the rare longer walks; a
    # walk's unpredictable end in one loop with the loads would keep them from overlapping
    m = len(a)
    out = np.zeros(len(v), np.int64)
    if m == 0:
        return out
    usable = width > 0
    for j in numba.prange(len(v)):
        x = v[j]
        if usable and x > 0:
            out[j] = guide[min(max(np.int64(min(x / width, m)) - 1, 0), m - 1)]
    n = len(v)
    for j in numba.prange(n):
        if j + 8 < n:  # the start of the search 8 ahead
            _prefetch_item(a, min(out[j + 8], m - 1))
        x = v[j]
        i = out[j]
        for _ in range(4):
            i += i < m and a[i] < x
        out[j] = i
    for j in numba.prange(len(v)):
        x = v[j]
        i = out[j]
        while i < m and a[i] < x:
            i += 1
        out[j] = i
    return out


_search_guided_serial, _search_guided_parallel = _serial_and_parallel(_search_guided)
KERNELS["guide_table"] = _guide_table
KERNELS["search_guided"] = _search_guided_serial
PARALLEL_KERNELS["search_guided"] = _search_guided_parallel


def _link_targets(
    keys: np.ndarray,
    edge: np.ndarray,
    offset: int,
    position: np.ndarray,
    members: np.ndarray,
    scale: int,
) -> None:
    # in place: keys[offset + edge[j]] += its target members[min(position[j], m - 1)], or -1
    # where that target is the key's own segment (a self-loop); the edges are distinct
    last = len(members) - 1
    target = np.empty(len(edge), np.int64)
    for j in numba.prange(len(edge)):  # the random reads on their own, so that they overlap
        target[j] = members[min(position[j], last)]
    for j in numba.prange(len(edge)):
        at = offset + edge[j]
        source = keys[at]
        keys[at] = -1 if source == target[j] * scale else source + target[j]


_link_targets_serial, _link_targets_parallel = _serial_and_parallel(_link_targets)
KERNELS["link_targets"] = _link_targets_serial
PARALLEL_KERNELS["link_targets"] = _link_targets_parallel


def _segment_keys(starts: np.ndarray, scale: int, keys: np.ndarray) -> None:
    # keys[starts[s]:starts[s + 1]] = s * scale
    for s in numba.prange(len(starts) - 1):
        keys[starts[s] : starts[s + 1]] = s * scale


_segment_keys_serial, _segment_keys_parallel = _serial_and_parallel(_segment_keys)
KERNELS["segment_keys"] = _segment_keys_serial
PARALLEL_KERNELS["segment_keys"] = _segment_keys_parallel


def _sorted_segment_remainders(keys: np.ndarray, starts: np.ndarray, scale: int) -> np.ndarray:
    # in place: each segment sorted, its distinct non-negative keys minus segment * scale
    # moved to its front; returns how many each segment kept
    segments = len(starts) - 1
    kept = np.empty(segments, np.int64)
    for s in numba.prange(segments):
        part = keys[starts[s] : starts[s + 1]]
        if len(part) <= 48:  # insertion sort: faster than numba's quicksort on a few dozen
            for i in range(1, len(part)):
                key = part[i]
                j = i - 1
                while j >= 0 and part[j] > key:
                    part[j + 1] = part[j]
                    j -= 1
                part[j + 1] = key
        else:
            part.sort()
        count = 0
        previous = np.int64(-1)
        for j in range(len(part)):
            key = part[j]
            if key >= 0 and key != previous:
                part[count] = key - s * scale
                count += 1
                previous = key
        kept[s] = count
    return kept


_sorted_segment_remainders_serial, _sorted_segment_remainders_parallel = _serial_and_parallel(
    _sorted_segment_remainders
)


@jit
def _compact_segments(
    keys: np.ndarray, starts: np.ndarray, kept: np.ndarray, segment: np.ndarray
) -> np.ndarray:
    # each segment's kept front moved behind the previous one's (writes behind the reads, in
    # order), with the segment index of every entry written into ``segment`` (kept.sum(),)
    total = 0
    for s in range(len(kept)):
        first = starts[s]
        for j in range(kept[s]):
            keys[total + j] = keys[first + j]
            segment[total + j] = s
        total += kept[s]
    return keys[:total]


KERNELS["sorted_segment_remainders"] = _sorted_segment_remainders_serial
PARALLEL_KERNELS["sorted_segment_remainders"] = _sorted_segment_remainders_parallel
KERNELS["compact_segments"] = _compact_segments


@jit
def _sorted_distinct(keys: np.ndarray) -> np.ndarray:
    # in place: sorted, each value once (the first ``m`` entries)
    keys.sort()
    m = 0
    for i in range(len(keys)):
        if m == 0 or keys[i] != keys[m - 1]:
            keys[m] = keys[i]
            m += 1
    return keys[:m]


@jit
def _edit_plan(
    indptr: np.ndarray,
    indices: np.ndarray,
    n: int,
    follow_src: np.ndarray,
    follow_dst: np.ndarray,
    unfollow_src: np.ndarray,
    unfollow_dst: np.ndarray,
) -> tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # (status, added, removed, indptr after, drop, at, new): status -1 if an id lies outside
    # [0, n), 0 if the graph does not change, 1 if it does; the edit is then
    # merge_edits(indices, drop, at, new)
    empty = np.zeros(0, np.int64)
    for ids in (follow_src, follow_dst, unfollow_src, unfollow_dst):
        for v in ids:
            if v < 0 or v >= n:
                return -1, 0, 0, empty, empty, empty, empty
    follow = np.empty(len(follow_src), np.int64)
    m = 0
    for i in range(len(follow_src)):
        if follow_src[i] != follow_dst[i]:
            follow[m] = np.int64(follow_src[i]) * n + follow_dst[i]
            m += 1
    follow = _sorted_distinct(follow[:m])
    unfollow = np.empty(len(unfollow_src), np.int64)
    for i in range(len(unfollow_src)):
        unfollow[i] = np.int64(unfollow_src[i]) * n + unfollow_dst[i]
    unfollow = _sorted_distinct(unfollow)
    at = np.empty(len(follow), np.int64)
    exists = np.empty(len(follow), np.bool_)
    _find_edges_serial(indptr, indices, follow, n, at, exists)
    new = follow[~exists]
    at = at[~exists]
    added = len(new)
    pos = np.empty(len(unfollow), np.int64)
    found = np.empty(len(unfollow), np.bool_)
    _find_edges_serial(indptr, indices, unfollow, n, pos, found)
    drop = pos[found]
    drop_key = unfollow[found]
    hits = len(drop)
    # a new edge removed again in the same round is neither added nor kept
    kept = 0
    j = 0
    for i in range(added):
        while j < len(unfollow) and unfollow[j] < new[i]:
            j += 1
        if j < len(unfollow) and unfollow[j] == new[i]:
            continue
        new[kept] = new[i]
        at[kept] = at[i]
        kept += 1
    removed = hits + added - kept
    if hits == 0 and kept == 0:
        return 0, added, removed, empty, empty, empty, empty
    moved = np.zeros(n + 1, np.int64)  # row starts move by the edges added / removed above
    for i in range(kept):
        moved[new[i] // n + 1] += 1
        new[i] = new[i] % n
    for i in range(hits):
        moved[drop_key[i] // n + 1] -= 1
    after = np.empty(n + 1, np.int64)
    total = 0
    for r in range(n + 1):
        total += moved[r]
        after[r] = indptr[r] + total
    return 1, added, removed, after, drop, at[:kept].copy(), new[:kept].copy()


KERNELS["edit_plan"] = _edit_plan


@jit
def _argmax_rows(score: np.ndarray, out: np.ndarray) -> None:
    # np.argmax(score, axis=1) into out: each row's first maximum, or its first NaN
    for r in range(score.shape[0]):
        best = score[r, 0]
        at = 0
        if best == best:
            for j in range(1, score.shape[1]):
                value = score[r, j]
                if value != value:
                    at = j
                    break
                if value > best:
                    best = value
                    at = j
        out[r] = at


KERNELS["argmax_rows"] = _argmax_rows


@jit
def _cluster_order(
    cluster: np.ndarray, num_clusters: int, order: np.ndarray, start: np.ndarray
) -> bool:
    # a counting sort: order = np.argsort(cluster, kind="stable"), start[c] = the first
    # position of cluster c in it (start[num_clusters] = len); False, with order and start
    # undefined, when a cluster id lies outside [0, num_clusters)
    start[:] = 0
    for i in range(len(cluster)):
        c = cluster[i]
        if c < 0 or c >= num_clusters:
            return False
        start[c + 1] += 1
    for c in range(num_clusters):
        start[c + 1] += start[c]
    at = start[:num_clusters].copy()
    for i in range(len(cluster)):
        c = cluster[i]
        order[at[c]] = i
        at[c] += 1
    return True


KERNELS["cluster_order"] = _cluster_order


def _reaction_ends(
    react_user: np.ndarray,
    react_post: np.ndarray,
    post_author: np.ndarray,
    discrete: np.ndarray,
    author: np.ndarray,
    cross: np.ndarray,
) -> None:
    # each reaction's post author, and whether its two ends hold opposite discrete stances
    # (the author of the reaction 16 ahead prefetched: the posts' authors do not fit in cache)
    r = len(react_user)
    for i in numba.prange(r):
        if i + 16 < r:
            _prefetch_item(post_author, react_post[i + 16])
        a = post_author[react_post[i]]
        author[i] = a
        cross[i] = np.int64(discrete[react_user[i]]) * np.int64(discrete[a]) == -1


_reaction_ends_serial, _reaction_ends_parallel = _serial_and_parallel(_reaction_ends)
KERNELS["reaction_ends"] = _reaction_ends_serial
PARALLEL_KERNELS["reaction_ends"] = _reaction_ends_parallel


# ----------------------------------------------------------------------------- candidates
# The Rec env's candidate sources (socialenv.core.candidates), by their index in
# CANDIDATE_SOURCES. Their NumPy twin is the unfused path of ``generate_candidates``. The
# uniforms are drawn by NumPy between the two kernels below: a Generator passed to numba costs
# 7 µs per call, 20 µs on its first (its ctypes interface is built), and each round has a new one.
_INTEREST, _OPPOSITE, _POPULAR, _FRESH = 0, 1, 2, 3


@jit
def _most_first_into(values: np.ndarray, k: int, out: np.ndarray) -> int:
    # out[:n] = np.argsort(-values, kind="stable")[:k] for the integer ``values``, n returned:
    # a counting sort by value when the values lie in [0, 4 len + 65,536], else the argsort
    n = len(values)
    k = max(min(k, n), 0)
    if n == 0 or k == 0:
        return 0
    top = values.max()
    if values.min() < 0 or top > 4 * n + 65_536:
        out[:k] = np.argsort(-values, kind="mergesort")[:k]
        return k
    count = np.zeros(top + 2, np.int64)
    for i in range(n):
        count[top - values[i] + 1] += 1  # by descending value
    for v in range(1, top + 2):
        count[v] += count[v - 1]
    for i in range(n):
        at = count[top - values[i]]
        count[top - values[i]] = at + 1
        if at < k:
            out[at] = i
    return k


@jit
def _candidate_pools(
    kind: np.ndarray,
    width: np.ndarray,
    u_count: int,
    num_clusters: int,
    post_cluster: np.ndarray,
    post_stance: np.ndarray,
    post_engagement: tuple[np.ndarray, np.ndarray, np.ndarray],
    recommended: np.ndarray,
    bounds: np.ndarray,
    popular_pool: int,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # What the sources draw from, and how many uniforms they take, in the unfused path's
    # order: (uniforms, -1 when a window post's cluster lies outside [0, num_clusters); pool,
    # the ids of the opposite source's negative and positive pools, the popular and the fresh
    # pool one after the other, pool_start (5,) where each begins; order, start: the window's
    # posts by cluster, where each cluster begins, as kernels.cluster_order).
    # ``bounds``: lo, hi (the candidate window's posts), last_lo, last_hi (the last round's).
    lo, hi, last_lo, last_hi = bounds[0], bounds[1], bounds[2], bounds[3]
    n, last_n = hi - lo, last_hi - last_lo
    order = np.empty(n, np.int64)
    start = np.zeros(num_clusters + 1, np.int64)
    pool = np.empty(3 * n + last_n, np.int64)
    pool_start = np.zeros(5, np.int64)
    uniforms = 0
    for s in range(len(kind)):
        m = width[s]
        if kind[s] == _INTEREST and n > 0:
            if not _cluster_order(post_cluster[lo:hi], num_clusters, order, start):
                return -1, pool, pool_start, order, start
            uniforms += u_count * m
        elif kind[s] == _OPPOSITE:
            below, above = np.float32(-1.0 / 3.0), np.float32(1.0 / 3.0)
            at = 0
            for p in range(lo, hi):
                if post_stance[p] < below:
                    pool[at] = p
                    at += 1
            pool_start[1] = at
            for p in range(lo, hi):
                if post_stance[p] > above:
                    pool[at] = p
                    at += 1
            pool_start[2] = at
            uniforms += u_count * m * ((pool_start[1] > 0) + (at > pool_start[1])) + u_count
    pool_start[3] = pool_start[2]
    pool_start[4] = pool_start[2]
    for s in range(len(kind)):
        m = width[s]
        if kind[s] == _POPULAR:
            likes, retweets, replies = post_engagement
            engagement = np.empty(n, np.int64)
            for p in range(lo, hi):
                engagement[p - lo] = (
                    np.int64(likes[p]) + 2 * np.int64(retweets[p]) + np.int64(replies[p])
                )
            first = pool_start[2]
            taken = _most_first_into(engagement, popular_pool, pool[first:])
            for i in range(first, first + taken):
                pool[i] += lo
            pool_start[3] = first + taken
            pool_start[4] = first + taken
            uniforms += u_count * m * (taken > 0)
    for s in range(len(kind)):
        m = width[s]
        if kind[s] == _FRESH:
            first = pool_start[3]
            at = first
            for p in range(last_lo, last_hi):
                if not recommended[p]:
                    pool[at] = p
                    at += 1
            if at - first < m:  # too few never recommended: the whole last round
                at = first
                for p in range(last_lo, last_hi):
                    pool[at] = p
                    at += 1
            pool_start[4] = at
            uniforms += u_count * m * (at > first)
    return uniforms, pool, pool_start, order, start


@jit
def _pool_draws(
    pool: np.ndarray, uniform: np.ndarray, used: int, draws: np.ndarray, first: int, width: int
) -> int:
    # draws[:, first:first + width] = pool[(uniform[used:] * len(pool)).astype(int64)]
    # (candidates._sample), -1 and no uniform taken if the pool is empty; the uniforms used
    n = len(pool)
    if n == 0:
        draws[:, first : first + width] = -1
        return used
    size = np.float64(n)
    for r in range(draws.shape[0]):
        for j in range(width):
            draws[r, first + j] = pool[np.int64(uniform[used] * size)]
            used += 1
    return used


@jit
def _candidate_draws(
    kind: np.ndarray,
    width: np.ndarray,
    users: np.ndarray,
    user_cluster: np.ndarray,
    discrete_stance: np.ndarray,
    post_latent: np.ndarray,
    bounds: np.ndarray,
    pool: np.ndarray,
    pool_start: np.ndarray,
    order: np.ndarray,
    start: np.ndarray,
    uniform: np.ndarray,
    draws: np.ndarray,
    gathered: np.ndarray,
) -> None:
    # Every source's draws from the uniforms (the stream of _candidate_pools' count), into
    # ``draws`` (U, sum(width)) (source s in columns sum(width[:s]) ...); the scored sources'
    # post rows (-1: row 0) into ``gathered`` (U, their sum(width), d), source after source.
    u_count = len(users)
    lo, hi = bounds[0], bounds[1]
    used = 0
    first = 0
    column = 0
    d = post_latent.shape[1]
    for s in range(len(kind)):
        m = width[s]
        if kind[s] == _INTEREST:
            if hi == lo:
                draws[:, first : first + m] = -1
            else:  # the unfused path's cluster_draws on this source's uniforms
                drawn = uniform[used : used + u_count * m].reshape((u_count, m))
                picked = _cluster_draws_serial(drawn, user_cluster, start, order, lo, hi)
                draws[:, first : first + m] = picked
                used += u_count * m
        elif kind[s] == _OPPOSITE:
            from_positive = np.empty((u_count, m), np.int64)
            used = _pool_draws(pool[: pool_start[1]], uniform, used, draws, first, m)
            used = _pool_draws(
                pool[pool_start[1] : pool_start[2]], uniform, used, from_positive, 0, m
            )
            for r in range(u_count):
                sign = discrete_stance[users[r]]
                coin = uniform[used] < 0.5
                used += 1
                if not (sign > 0 or (sign == 0 and coin)):
                    draws[r, first : first + m] = from_positive[r]
        elif kind[s] == _POPULAR:
            used = _pool_draws(pool[pool_start[2] : pool_start[3]], uniform, used, draws, first, m)
        else:
            used = _pool_draws(pool[pool_start[3] : pool_start[4]], uniform, used, draws, first, m)
            part = draws[:, first : first + m]
            for r in range(u_count):
                _blank_repeats(part, r)
        if kind[s] != _FRESH:
            for r in range(u_count):
                for j in range(m):
                    post = max(draws[r, first + j], 0)
                    for k in range(d):
                        gathered[r, column + j, k] = post_latent[post, k]
            column += m
        first += m


@jit
def _candidate_picks(
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
    # Each scored source's ``keep[s]`` best draws by ``score`` (U, the scored widths' sum),
    # source after source (top_k_rows with drop_nonfinite), the fresh draws as they are, side
    # by side in ``post`` (U, sum(keep)), ``source`` (U, sum(keep)) int8 the source of each
    # column; then repeats blanked and the users' own posts dropped (-1), as the unfused path.
    u_count = len(users)
    post[:] = -1
    first = 0
    column = 0
    scored = 0
    for s in range(len(kind)):
        m, k = width[s], keep[s]
        source[:, column : column + k] = kind[s]
        if kind[s] == _FRESH:
            post[:, column : column + k] = draws[:, first : first + k]
        else:
            candidate = draws[:, first : first + m]
            rows = score[:, scored : scored + m]
            out = post[:, column : column + k]
            best = np.zeros(max(k, 1), np.int64)
            row_score = np.empty(m, score.dtype)
            for r in range(u_count):
                _top_k_row(candidate, rows, r, out, best, row_score, True)
            scored += m
        first += m
        column += k
    for r in range(u_count):
        _blank_repeats(post, r)
        for j in range(post.shape[1]):
            p = post[r, j]
            if p >= 0 and post_author[p] == users[r]:
                post[r, j] = -1


KERNELS["objective_arm_rewards"] = _objective_arm_rewards
KERNELS["round_means"] = _round_means
KERNELS["reaction_values"] = _reaction_values
KERNELS["rec_arm_history_columns"] = _rec_arm_history_columns
KERNELS["rec_arm_norm_pad"] = _rec_arm_norm_pad
KERNELS["candidate_pools"] = _candidate_pools
KERNELS["candidate_draws"] = _candidate_draws
KERNELS["candidate_picks"] = _candidate_picks
