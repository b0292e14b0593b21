"""Hot-path kernels of a round, each with a compiled (numba) and a pure-NumPy version.

Both versions of every kernel return bit-identical results (``tests/socialenv/test_kernels.py``
compares them, and a whole 10-round episode of both envs, bit for bit); the compiled one
only avoids the temporaries and sorts of the NumPy one. The backend is chosen once, at
import, from the environment variable ``POLICYSIM_KERNELS``:

- ``auto`` (default): numba when it imports, else NumPy;
- ``numba``: numba (an ``ImportError`` if it is missing);
- ``numpy``: the pure-NumPy versions.

:data:`BACKEND` says which one is in use; :func:`use_backend` switches at run time (tests).
Kernels whose result would differ in the last bit between the two (anything calling
``exp`` or a BLAS/einsum reduction) are deliberately left to NumPy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

_ENV_VAR = "POLICYSIM_KERNELS"
#: NumPy sums up to this many terms without splitting (longer segments use NumPy here).
_PAIRWISE_BLOCK = 128
_CHOICES = ("auto", "numba", "numpy")


# ----------------------------------------------------------------------------- NumPy versions
def dedupe_rows_numpy(feed: np.ndarray) -> np.ndarray:
    """(B, F) copy of ``feed`` with repeated ids (>= 0) within a row set to -1, keeping the first."""
    order = np.argsort(feed, axis=1, kind="stable")
    ordered = np.take_along_axis(feed, order, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    rows, cols = np.nonzero(repeated)
    feed = feed.copy()
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


def top_k_rows_numpy(candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool) -> np.ndarray:
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


# ----------------------------------------------------------------------------- numba versions
def _build_numba() -> dict[str, Callable[..., Any]]:
    from socialenv._numba_kernels import KERNELS

    return dict(KERNELS)


def insert_sorted_numpy(values: np.ndarray, pos: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``np.insert(values, pos, new)`` for non-decreasing ``pos`` (1-D arrays)."""
    return np.insert(values, pos, new)


def delete_sorted_numpy(values: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """``np.delete(values, drop)`` for strictly increasing indices ``drop`` (1-D arrays)."""
    return np.delete(values, drop)


_NUMPY = {
    "delete_sorted": delete_sorted_numpy,
    "insert_sorted": insert_sorted_numpy,
    "dedupe_rows": dedupe_rows_numpy, "compact_rows": compact_rows_numpy,
    "top_k_rows": top_k_rows_numpy, "segment_sum_rows": segment_sum_rows_numpy,
    "same_sign_share": same_sign_share_numpy,
}
_compiled: dict[str, Callable[..., Any]] | None = None
_active: dict[str, Callable[..., Any]] = _NUMPY
BACKEND = "numpy"


def use_backend(name: str) -> str:
    """Select ``"auto"``, ``"numba"`` or ``"numpy"`` kernels; returns the backend in use."""
    global _compiled, _active, BACKEND
    if name not in _CHOICES:
        raise ValueError(f"{_ENV_VAR}={name!r} is not allowed: one of {_CHOICES}")
    if name == "numpy":
        _active, BACKEND = _NUMPY, "numpy"
        return BACKEND
    if _compiled is None:
        try:
            _compiled = _build_numba()
        except ImportError:
            if name == "numba":
                raise
            _active, BACKEND = _NUMPY, "numpy"
            return BACKEND
    _active, BACKEND = _compiled, "numba"
    return BACKEND


use_backend(os.environ.get(_ENV_VAR, "auto").strip().lower() or "auto")


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


def isin(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``np.isin(values, members)`` for integer arrays, by sort and binary search."""
    members = np.sort(members)
    if len(members) == 0:
        return np.zeros(np.shape(values), bool)
    pos = np.minimum(np.searchsorted(members, values), len(members) - 1)
    return members[pos] == values


# ----------------------------------------------------------------------------- dispatch
def dedupe_rows(feed: np.ndarray) -> np.ndarray:
    """See :func:`dedupe_rows_numpy`; ``feed`` is returned as is when F < 2."""
    if feed.shape[1] < 2:
        return feed
    if feed.dtype != np.int64:
        return dedupe_rows_numpy(feed)
    return _active["dedupe_rows"](np.ascontiguousarray(feed))


def compact_rows(feed: np.ndarray, width: int) -> np.ndarray:
    """See :func:`compact_rows_numpy`."""
    if feed.shape[1] == 0:
        return np.full((feed.shape[0], width), -1, np.int64)
    if feed.dtype != np.int64:
        return compact_rows_numpy(feed, width)
    return _active["compact_rows"](np.ascontiguousarray(feed), width)


def top_k_rows(candidate: np.ndarray, score: np.ndarray, k: int, drop_nonfinite: bool = False) -> np.ndarray:
    """See :func:`top_k_rows_numpy` (``score`` is overwritten)."""
    if (candidate.dtype != np.int64 or score.dtype not in (np.float32, np.float64)
            or not score.flags.c_contiguous):
        return top_k_rows_numpy(candidate, score, k, drop_nonfinite)
    return _active["top_k_rows"](np.ascontiguousarray(candidate), score, k, drop_nonfinite)


def segment_sum_rows(values: np.ndarray, rows: np.ndarray, first: np.ndarray) -> np.ndarray:
    """See :func:`segment_sum_rows_numpy`; ``first`` must be increasing, starting at 0."""
    if (len(first) == 0 or values.dtype not in (np.float32, np.float64) or not values.flags.c_contiguous
            or np.diff(first, append=len(rows)).max() > _PAIRWISE_BLOCK + 1):
        return segment_sum_rows_numpy(values, rows, first)
    return _active["segment_sum_rows"](values, rows.astype(np.int64, copy=False),
                                       first.astype(np.int64, copy=False))


def insert_sorted(values: np.ndarray, pos: np.ndarray, new: np.ndarray) -> np.ndarray:
    """See :func:`insert_sorted_numpy` (``new`` is cast to ``values``' dtype)."""
    if len(new) == 0:
        return values.copy()
    return _active["insert_sorted"](values, pos.astype(np.int64, copy=False),
                                    new.astype(values.dtype, copy=False))


def delete_sorted(values: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """See :func:`delete_sorted_numpy`."""
    if len(drop) == 0:
        return values.copy()
    return _active["delete_sorted"](values, drop.astype(np.int64, copy=False))


def same_sign_share(sign: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """See :func:`same_sign_share_numpy`."""
    return _active["same_sign_share"](sign, indptr.astype(np.int64, copy=False),
                                      indices.astype(np.int64, copy=False))
