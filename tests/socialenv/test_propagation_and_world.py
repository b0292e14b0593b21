"""Label propagation (Eq. 8), the follow graph, feeds and metrics."""

from __future__ import annotations

import numpy as np
import pytest

from socialenv.core import metrics
from socialenv.core.kernels import compact_rows, dedupe_rows
from socialenv.core.propagation import normalized_adjacency, propagate, propagate_rows
from socialenv.core.world import FollowGraph, discretize_stance


def _graph(n: int, e: int, seed: int) -> FollowGraph:
    rng = np.random.default_rng(seed)
    return FollowGraph(n, rng.integers(0, n, e), rng.integers(0, n, e))


@pytest.mark.parametrize(("alpha", "hops"), [(0.5, 2), (0.0, 1), (1.0, 3), (0.3, 0)])
def test_propagation_matches_dense_reference(alpha: float, hops: int) -> None:
    n = 60
    graph = _graph(n, 200, 0)
    indptr, indices = graph.followees_csr()
    dense = np.zeros((n, n))
    dense[graph.src, graph.dst] = 1.0
    degree = dense.sum(axis=1, keepdims=True)
    walk = np.where(degree > 0, dense / np.maximum(degree, 1), np.eye(n))
    context = np.random.default_rng(1).standard_normal((n, 5)).astype(np.float32)
    expected = context.astype(np.float64)
    for _ in range(hops):
        expected = alpha * expected + (1 - alpha) * walk @ expected
    got = propagate(context, normalized_adjacency(indptr, indices, n), alpha, hops)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    rows = np.array([0, 5, 5, 59])
    np.testing.assert_allclose(
        propagate_rows(context, indptr, indices, rows, alpha, hops),
        expected[rows],
        rtol=1e-5,
        atol=1e-5,
    )
    adjacency = normalized_adjacency(indptr, indices, n)
    assert adjacency.format == "csr" and adjacency.dtype == np.float32


def test_follow_graph_edits() -> None:
    g = FollowGraph(5, np.array([0, 1, 2, 2, 3]), np.array([1, 2, 0, 0, 3]))
    assert len(g) == 3  # duplicate and self-loop dropped
    assert g.follow(np.array([0, 0, 4, 4]), np.array([1, 2, 4, 0])) == 2
    assert g.contains(np.array([0, 4, 4]), np.array([2, 0, 4])).tolist() == [True, True, False]
    assert g.unfollow(np.array([0, 3]), np.array([2, 1])) == 1
    indptr, indices = g.followees_csr()
    assert indices[indptr[0] : indptr[1]].tolist() == [1]
    f_indptr, f_indices = g.followers_csr()
    assert sorted(f_indices[f_indptr[0] : f_indptr[1]].tolist()) == [2, 4]


def test_feed_row_helpers() -> None:
    feed = np.array([[3, 3, -1, 5], [7, -1, 7, 7]])
    assert dedupe_rows(feed).tolist() == [[3, -1, -1, 5], [7, -1, -1, -1]]
    assert compact_rows(dedupe_rows(feed), 3).tolist() == [[3, 5, -1], [7, -1, -1]]


def test_metrics_definitions() -> None:
    assert metrics.cross_interaction_ratio(np.array([1, 1, -1, 0]), np.array([-1, 1, 1, -1])) == 0.5
    assert metrics.toxicity(np.array([])) == 0.0
    stance = np.array([0.5, 0.4, -0.6, 0.0])
    # user 0 follows 1 (same sign) and 2 (opposite): 0.5; user 2 follows 3 (0 vs -): 0
    graph = FollowGraph(4, np.array([0, 0, 2]), np.array([1, 2, 3]))
    assert metrics.echo_chamber_index(stance, *graph.followees_csr()) == pytest.approx(0.25)
    assert discretize_stance(np.array([-0.5, -0.2, 0.2, 0.34])).tolist() == [-1, 0, 0, 1]
