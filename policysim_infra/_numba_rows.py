"""Compiled row normalisation shared by the simulator's kernels and the surrogate users'
(imported only when numba is installed; top-level functions, so numba's on-disk cache finds
them again). Each gives NumPy's values bit for bit: ``x / np.maximum(np.linalg.norm(x, axis=-1,
keepdims=True), eps)`` row by row, with the norm's squares summed pairwise as NumPy sums them.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from policysim_infra._prefetch import prefetch_row

jit = numba.njit(cache=True, nogil=True)


@jit
def pairwise_row(x: np.ndarray, n: int, zero: np.ndarray):
    # NumPy's pairwise sum of the n <= 128 contiguous values x[:n] (as np.add.reduce along
    # a contiguous axis runs it: from 0, all n terms; the dispatcher keeps n >= 8)
    r0, r1, r2, r3 = x[0], x[1], x[2], x[3]
    r4, r5, r6, r7 = x[4], x[5], x[6], x[7]
    i = 8
    while i < n - (n % 8):
        r0 += x[i]
        r1 += x[i + 1]
        r2 += x[i + 2]
        r3 += x[i + 3]
        r4 += x[i + 4]
        r5 += x[i + 5]
        r6 += x[i + 6]
        r7 += x[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[i]
        i += 1
    return zero[0] + res


@jit
def clipped(x: Any, lo: Any, hi: Any) -> Any:
    """``np.clip``'s value for one number: NaN stays NaN, -0.0 stays -0.0."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


@jit
def floored_norm(row: np.ndarray, square: np.ndarray, zero: np.ndarray, eps: Any):
    # np.maximum(np.linalg.norm(row), eps) as NumPy computes it: the squares' pairwise sum,
    # its square root, the floor (a NaN norm stays NaN); ``square``: scratch of len(row)
    d = len(row)
    for k in range(d):
        square[k] = row[k] * row[k]
    norm = np.sqrt(pairwise_row(square, d, zero))
    if not (norm > eps or norm != norm):
        norm = eps
    return norm


@jit
def unit_row_into(
    row: np.ndarray, out: np.ndarray, square: np.ndarray, zero: np.ndarray, eps: np.ndarray
) -> None:
    norm = floored_norm(row, square, zero, eps[0])
    for k in range(len(row)):
        out[k] = np.float32(row[k] / norm)


@jit
def float64_row_scratch(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # (row, square, zero) for :func:`unit_row_into` on float64 rows of width d
    return np.empty(d, np.float64), np.empty(d, np.float64), np.zeros(1, np.float64)


@jit
def unit_noisy_rows(
    base: np.ndarray, rows: np.ndarray, scale: float, noise: np.ndarray, eps: np.ndarray
) -> np.ndarray:
    """(n, d) float32 unit rows of ``base[rows] + scale * noise`` (all of ``base``'s rows when
    ``rows`` is empty; float32 ``base`` read as float64, as NumPy does), ``noise`` (n, d)."""
    n, d = noise.shape
    out = np.empty((n, d), np.float32)
    row, square, zero = float64_row_scratch(d)
    for r in range(n):
        src = rows[r] if len(rows) else r
        for k in range(d):
            row[k] = np.float64(base[src, k]) + scale * noise[r, k]
        unit_row_into(row, out[r], square, zero, eps)
    return out


@jit
def unit_noisy_rows_drawn(
    base: np.ndarray,
    rows: np.ndarray,
    scale: float,
    rng: np.random.Generator,
    eps: np.ndarray,
    out: np.ndarray,
) -> None:
    """Unit rows of ``base[rows] + scale * rng.standard_normal((n, d))`` (all of ``base``'s
    rows when ``rows`` is empty; float32 ``base`` read as float64, as NumPy does), written into
    the (n, d) float32 ``out``. The noise is drawn here, row after row: numba's
    ``Generator.standard_normal`` is NumPy's ziggurat on the same bit generator, so these are
    the values, in the order, of ``rng.standard_normal((n, d))``, and ``rng`` ends in the same
    state."""
    n, d = out.shape
    row, square, zero = float64_row_scratch(d)
    for r in range(n):
        if len(rows) and r + 4 < n:  # the base row 4 rows ahead (a random row of ``base``)
            prefetch_row(base, rows[r + 4])
        src = rows[r] if len(rows) else r
        for k in range(d):
            row[k] = np.float64(base[src, k]) + scale * rng.standard_normal()
        unit_row_into(row, out[r], square, zero, eps)
