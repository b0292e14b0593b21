"""Context propagation over the follow graph (Eq. 8), as label propagation with a torch CSR
matrix: C^{(k+1)} = α·C^{(k)} + (1 − α)·D⁻¹A·C^{(k)}, K hops.

Row u of A lists the users u follows: a user's context mixes in what the accounts it reads
are about. Users who follow nobody keep their own context (D⁻¹A row of zeros is replaced
by the identity for them).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch


def normalized_adjacency(indptr: np.ndarray, indices: np.ndarray, num_users: int) -> torch.Tensor:
    """D⁻¹A as a (N, N) float32 torch sparse CSR tensor; rows of isolated users are the
    identity so propagation leaves them unchanged."""
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
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        warnings.filterwarnings("ignore", message="Sparse invariant checks")
        return torch.sparse_csr_tensor(
            torch.from_numpy(indptr.astype(np.int64)),
            torch.from_numpy(indices.astype(np.int64)),
            torch.from_numpy(values),
            size=(num_users, num_users),
            check_invariants=False,
        )


#: Below this many non-zeros a sparse product runs on one thread: thread start-up and
#: spinning cost more than the product (measured ~100x slower on 2 busy cores at 15k nnz).
SINGLE_THREAD_NNZ = 200_000


def propagate(context: np.ndarray, adjacency: torch.Tensor, alpha: float, hops: int) -> np.ndarray:
    """(N, D) float32 context after ``hops`` steps of Eq. 8."""
    c = torch.from_numpy(np.ascontiguousarray(context, dtype=np.float32))
    threads = torch.get_num_threads()
    small = adjacency.values().numel() < SINGLE_THREAD_NNZ
    if small:
        torch.set_num_threads(1)
    try:
        for _ in range(hops):
            c = alpha * c + (1.0 - alpha) * (adjacency @ c)
    finally:
        if small:
            torch.set_num_threads(threads)
    return c.numpy()
