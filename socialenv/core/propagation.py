"""Context propagation over the follow graph (Eq. 8), as label propagation with a SciPy CSR
matrix: C^{(k+1)} = α·C^{(k)} + (1 − α)·D⁻¹A·C^{(k)}, K hops.

Row u of A lists the users u follows: a user's context mixes in what the accounts it reads
are about. Users who follow nobody keep their own context (D⁻¹A row of zeros is replaced
by the identity for them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse


def normalized_adjacency(
    indptr: np.ndarray, indices: np.ndarray, num_users: int
) -> scipy.sparse.csr_matrix:
    """D⁻¹A as a (N, N) float32 SciPy CSR matrix; rows of isolated users are the identity so
    propagation leaves them unchanged."""
    import scipy.sparse as sp

    degree = np.diff(indptr)
    isolated = np.flatnonzero(degree == 0)
    if len(isolated):
        counts = np.where(degree == 0, 1, degree)
        new_indptr = np.zeros(num_users + 1, np.int64)
        np.cumsum(counts, out=new_indptr[1:])
        new_indices = np.empty(new_indptr[-1], np.int64)
        has = degree > 0
        rows_with = np.repeat(np.arange(num_users)[has], degree[has])
        pos = new_indptr[rows_with] + (np.arange(len(indices)) - indptr[rows_with])
        new_indices[pos] = indices
        new_indices[new_indptr[isolated]] = isolated
        indptr, indices, degree = new_indptr, new_indices, counts
    values = np.repeat(1.0 / degree, degree).astype(np.float32)
    return sp.csr_matrix(
        (values, indices.astype(np.int64), indptr.astype(np.int64)), shape=(num_users, num_users)
    )


def propagate(
    context: np.ndarray, adjacency: scipy.sparse.csr_matrix, alpha: float, hops: int
) -> np.ndarray:
    """(N, D) float32 context after ``hops`` steps of Eq. 8.

    SciPy's CSR product sums each row's terms in order, one rounding per product and per sum,
    on every x86-64 CPU (its kernels are built for the baseline instruction set): the same
    values as the compiled hop of :mod:`socialenv.core.kernels` and as
    :func:`propagate_rows`. torch's CSR product fuses them into FMAs on some AVX-512 CPUs, so
    it rounds differently there."""
    c = np.ascontiguousarray(context, dtype=np.float32)
    for _ in range(hops):
        c = alpha * c + (1.0 - alpha) * (adjacency @ c)
    return c


def _neighbours(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Concatenated followee lists of ``nodes`` (with repeats)."""
    start, stop = indptr[nodes], indptr[nodes + 1]
    lengths = stop - start
    if lengths.sum() == 0:
        return np.zeros(0, np.int64)
    offsets = np.repeat(start - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return indices[np.arange(lengths.sum()) + offsets]


def propagate_rows(
    context: np.ndarray | tuple[np.ndarray, ...],
    indptr: np.ndarray,
    indices: np.ndarray,
    rows: np.ndarray,
    alpha: float,
    hops: int,
) -> np.ndarray:
    """Rows ``rows`` (R,) of :func:`propagate`'s result, computed on the ``hops``-hop
    neighbourhood of ``rows`` only: (R, D) float32. ``context`` is (N, D), or a tuple of
    (N, D_i) blocks read as their concatenation (so callers need not build it).

    Hop h computes the propagated context of the nodes within ``hops − h`` hops of ``rows``
    from the previous hop's context of the nodes within ``hops − h + 1`` hops, each hop a
    CSR product restricted to those rows: the cost scales with the neighbourhood, not with
    N, so arm contexts stay cheap at a million users. These products are small, so they run
    in SciPy's single-threaded CSR kernel (a thread pool costs more than it saves here).
    """
    import scipy.sparse as sp

    rows = np.asarray(rows, np.int64)
    frontiers = [np.unique(rows)]
    for _ in range(hops):
        frontiers.append(np.union1d(frontiers[-1], _neighbours(indptr, indices, frontiers[-1])))
    current_nodes = frontiers[-1]
    blocks = context if isinstance(context, tuple) else (context,)
    current = np.concatenate([b[current_nodes] for b in blocks], axis=1).astype(np.float32)
    for targets in reversed(frontiers[:-1]):
        degree = indptr[targets + 1] - indptr[targets]
        isolated = degree == 0
        counts = np.where(isolated, 1, degree)
        crow = np.concatenate([[0], np.cumsum(counts)])
        columns = np.empty(crow[-1], np.int64)
        has = ~isolated
        columns[np.repeat(crow[:-1][has], degree[has]) + _ranks(degree[has])] = _neighbours(
            indptr, indices, targets[has]
        )
        columns[crow[:-1][isolated]] = targets[isolated]
        values = np.repeat(1.0 / counts, counts).astype(np.float32)
        block = sp.csr_matrix(
            (values, np.searchsorted(current_nodes, columns), crow),
            shape=(len(targets), len(current_nodes)),
        )
        own = current[np.searchsorted(current_nodes, targets)]
        current = alpha * own + (1.0 - alpha) * (block @ current)
        current_nodes = targets
    return current[np.searchsorted(current_nodes, rows)].astype(np.float32)


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """0..len-1 for each run of ``lengths``, concatenated."""
    total = int(lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.arange(total) - np.repeat(starts, lengths)
