"""The numba versions of :mod:`socialenv.kernels` (imported only when numba is installed).

Top-level functions, so numba's on-disk cache (``cache=True``) finds them again in the next
process: compiled once per machine, loaded in well under a second afterwards.
"""

from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True)


@jit
def _dedupe(feed: np.ndarray) -> np.ndarray:
    out = feed.copy()
    b, f = feed.shape
    for r in range(b):
        for j in range(1, f):
            v = feed[r, j]
            if v < 0:
                continue
            for i in range(j):
                if feed[r, i] == v:
                    out[r, j] = -1
                    break
    return out

@jit
def _compact(feed: np.ndarray, width: int) -> np.ndarray:
    b, f = feed.shape
    out = np.full((b, width), -1, np.int64)
    for r in range(b):
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

@jit
def _top_k(candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool) -> np.ndarray:
    b, c = candidate.shape
    take = min(k, c)
    out = np.full((b, take), -1, np.int64)
    used = np.zeros(c, np.bool_)
    row_score = np.empty(c, score.dtype)
    for r in range(b):
        for j in range(c):
            used[j] = False
            v = candidate[r, j]
            s = score[r, j]
            if v < 0:
                s = -np.inf
            else:
                for i in range(j):
                    if candidate[r, i] == v:
                        s = -np.inf
                        break
            row_score[j] = s
            score[r, j] = s
        for slot in range(take):
            best = -1
            for j in range(c):
                if used[j]:
                    continue
                if best < 0:
                    best = j
                    continue
                s, t = row_score[j], row_score[best]
                # descending, NaN last, ties to the left (a stable argsort of -score)
                if (np.isnan(t) and not np.isnan(s)) or s > t:
                    best = j
            used[best] = True
            s = row_score[best]
            bad = (not np.isfinite(s)) if drop_nonfinite else (s == -np.inf)
            if not bad and candidate[r, best] >= 0:
                out[r, slot] = candidate[r, best]
    return out

@jit
def _pairwise(values: np.ndarray, rows: np.ndarray, lo: int, n: int, k: int, zero: np.ndarray):
    # NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src) of n <= 128
    # terms, which np.add.reduceat runs down each column of a segment after its first row
    if n < 8:
        res = zero[0]
        for i in range(n):
            res += values[rows[lo + i], k]
        return res
    if n <= 128:
        r0 = values[rows[lo], k]
        r1 = values[rows[lo + 1], k]
        r2 = values[rows[lo + 2], k]
        r3 = values[rows[lo + 3], k]
        r4 = values[rows[lo + 4], k]
        r5 = values[rows[lo + 5], k]
        r6 = values[rows[lo + 6], k]
        r7 = values[rows[lo + 7], k]
        i = 8
        while i < n - (n % 8):
            r0 += values[rows[lo + i], k]
            r1 += values[rows[lo + i + 1], k]
            r2 += values[rows[lo + i + 2], k]
            r3 += values[rows[lo + i + 3], k]
            r4 += values[rows[lo + i + 4], k]
            r5 += values[rows[lo + i + 5], k]
            r6 += values[rows[lo + i + 6], k]
            r7 += values[rows[lo + i + 7], k]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += values[rows[lo + i], k]
            i += 1
        return res
    # n > 128 splits recursively in NumPy; the dispatcher sends such segments to NumPy
    # (a recursive jitted function cannot be cached, and feeds are far shorter)
    return zero[0]

@jit
def _segment_sum(values: np.ndarray, rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    s, d = len(first), values.shape[1]
    out = np.empty((s, d), values.dtype)
    zero = np.zeros(1, values.dtype)
    rest = np.empty(d, values.dtype)
    for i in range(s):
        lo = first[i]
        hi = first[i + 1] if i + 1 < s else len(rows)
        head = values[rows[lo]]
        if hi - lo == 1:
            out[i] = head
        elif hi - lo - 1 < 8:  # the pairwise sum is a plain running sum: go row by row
            rest[:] = zero[0]
            for j in range(lo + 1, hi):
                row = values[rows[j]]
                for k in range(d):
                    rest[k] += row[k]
            for k in range(d):
                out[i, k] = head[k] + rest[k]
        else:
            for k in range(d):
                out[i, k] = head[k] + _pairwise(values, rows, lo + 1, hi - lo - 1, k, zero)
    return out

@jit
def _same_sign(sign: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    n = len(indptr) - 1
    count = 0
    for u in range(n):
        if indptr[u + 1] > indptr[u]:
            count += 1
    out = np.empty(count, np.float64)
    r = 0
    for u in range(n):
        lo, hi = indptr[u], indptr[u + 1]
        if hi > lo:
            same = np.float32(0.0)
            for e in range(lo, hi):
                if sign[indices[e]] == sign[u]:
                    same += np.float32(1.0)
            out[r] = np.float64(same) / np.float64(hi - lo)
            r += 1
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


KERNELS = {
    "delete_sorted": _delete_sorted,
    "insert_sorted": _insert_sorted, "dedupe_rows": _dedupe, "compact_rows": _compact,
    "top_k_rows": _top_k, "segment_sum_rows": _segment_sum, "same_sign_share": _same_sign,
}
