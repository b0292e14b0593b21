"""Clusters of the latent space: spherical k-means centres, each post's nearest centre, and
the IVF index over a range of posts that the personalized channel and the Rec env's candidate
sources draw from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from socialenv.core import kernels


@dataclass(frozen=True)
class ClusterIndex:
    """The posts ``lo..hi-1`` grouped by IVF cluster: an approximate nearest-neighbour index
    (the personalized channel's and the Rec env's candidate retrieval).

    Attributes:
        lo, hi: the post id range indexed (hi > lo).
        by_cluster: (hi − lo,) offsets into the range, sorted by cluster (stable).
        cluster_start: (C + 1,) where each cluster's run starts in ``by_cluster``.
    """

    lo: int
    hi: int
    by_cluster: np.ndarray
    cluster_start: np.ndarray

    @classmethod
    def build(cls, post_cluster: np.ndarray, num_clusters: int, lo: int, hi: int) -> ClusterIndex:
        """The index of posts ``lo..hi-1`` given every post's (P,) cluster."""
        by_cluster, cluster_start = kernels.cluster_order(post_cluster[lo:hi], num_clusters)
        return cls(lo, hi, by_cluster, cluster_start)

    def draw(
        self, interest: np.ndarray, centroids: np.ndarray, m: int, rng: np.random.Generator
    ) -> np.ndarray:
        """(U, m) post ids drawn uniformly from the cluster nearest each row of ``interest``
        (U, d), or from the whole range where that cluster holds no post."""
        user_cluster = assign_clusters(interest, centroids, chunk=8192)
        draw = kernels.random_in_blocks(rng, (len(interest), m))
        return kernels.cluster_draws(
            draw, user_cluster, self.cluster_start, self.by_cluster, self.lo, self.hi
        )


def assign_clusters(latent: np.ndarray, centroids: np.ndarray, chunk: int = 65_536) -> np.ndarray:
    """(n,) int16 index of the most similar centroid for each row of ``latent`` (n, d).

    ``chunk`` rows at a time, each chunk's product on one BLAS thread, the chunks on
    :func:`kernels.map_blocks`' threads: every chunk is the same product on any number of
    threads, so the result is too."""
    out = np.empty(len(latent), np.int16)

    def nearest(lo: int, hi: int) -> None:
        kernels.argmax_rows(latent[lo:hi] @ centroids.T, out[lo:hi])

    with kernels.one_blas_thread():
        kernels.map_blocks(nearest, len(latent), chunk)
    return out


def fit_centroids(
    latent: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 8, sample: int = 8192
) -> np.ndarray:
    """(k, d) spherical k-means centres of (a sample of) the rows of ``latent``."""
    rows = latent[rng.choice(len(latent), size=min(sample, len(latent)), replace=False)]
    k = min(k, len(rows))
    centres = rows[rng.choice(len(rows), size=k, replace=False)].copy()
    for _ in range(iterations):
        with kernels.one_blas_thread():
            label = np.argmax(rows @ centres.T, axis=1)
        sums = np.zeros_like(centres)
        kernels.scatter_add_rows(sums, label, rows)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = norms[:, 0] < 1e-8
        centres = np.where(empty[:, None], centres, sums / np.maximum(norms, 1e-8))
    return centres.astype(np.float32)
