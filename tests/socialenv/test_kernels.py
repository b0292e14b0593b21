"""The compiled kernels give exactly the NumPy kernels' results, and whole episodes are bit
for bit the same on both paths (socialenv.core.kernels)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import weakref
from typing import Any

import numpy as np
import pytest

from agent_models.types import FeedChannel
from socialenv.core import kernels, metrics
from socialenv.core.world import FollowGraph
from tests.support import bits as _bits

numba = pytest.importorskip("numba")


def _rows_with_repeats(rng: np.random.Generator, b: int, f: int, high: int) -> np.ndarray:
    feed = rng.integers(0, high, (b, f))
    feed[rng.random((b, f)) < 0.2] = -1
    return feed


@pytest.mark.parametrize("width", [1, 2, 7, 40])
def test_dedupe_and_compact_match_numpy(compiled, width):
    rng = np.random.default_rng(width)
    feed = _rows_with_repeats(rng, 500, width, 12)
    parallel = kernels._compiled_parallel
    if width >= 2:
        expected = kernels.dedupe_rows_numpy(feed)
        for dedupe in (compiled["dedupe_rows"], parallel["dedupe_rows"]):
            np.testing.assert_array_equal(dedupe(feed.copy()), expected)
    for keep in (1, width, width + 3):
        expected = kernels.compact_rows_numpy(feed, keep)
        for compact in (compiled["compact_rows"], parallel["compact_rows"]):
            np.testing.assert_array_equal(compact(feed, keep), expected)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_dedupe_rows_in_place_writes_the_callers_array_and_no_other(backend):
    """``in_place=True`` blanks the repeats in the array given (returned as is); the default
    leaves it unchanged; a non-contiguous array is never written; on both backends."""
    rng = np.random.default_rng(3)
    feed = _rows_with_repeats(rng, 300, 9, 10)
    expected = kernels.dedupe_rows_numpy(feed)
    previous = kernels.BACKEND
    kernels.use_backend(backend)
    try:
        original = feed.copy()
        copied = kernels.dedupe_rows(feed)
        np.testing.assert_array_equal(copied, expected)
        np.testing.assert_array_equal(feed, original)
        temporary = feed.copy()
        assert kernels.dedupe_rows(temporary, in_place=True) is temporary
        np.testing.assert_array_equal(temporary, expected)
        wide = np.concatenate([feed, feed], axis=1)
        strided = wide[:, ::2]
        np.testing.assert_array_equal(
            kernels.dedupe_rows(strided, in_place=True), kernels.dedupe_rows_numpy(strided)
        )
        np.testing.assert_array_equal(wide, np.concatenate([feed, feed], axis=1))
        narrow = feed.astype(np.int32)  # other dtypes: the NumPy version, in place the same way
        assert kernels.dedupe_rows(narrow, in_place=True) is narrow
        np.testing.assert_array_equal(narrow, expected)
    finally:
        kernels.use_backend(previous)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_on_two_threads_is_numpys(threads, side):
    """Blocks of the searched values on map_blocks' threads: NumPy's positions, with and
    without a sorter, and a plain call below two blocks."""
    rng = np.random.default_rng(11)
    a = rng.integers(0, 5000, 20_000)
    order = np.argsort(a, kind="stable")
    ordered = a[order]
    v = rng.integers(-10, 5010, 1000)
    for n_threads in (1, 2):
        threads(n_threads)
        for block in (64, 10_000):
            got = kernels.searchsorted(ordered, v, side=side, block=block)
            assert got.tobytes() == np.searchsorted(ordered, v, side=side).tobytes()
            got = kernels.searchsorted(a, v, side=side, sorter=order, block=block)
            assert got.tobytes() == np.searchsorted(a, v, side=side, sorter=order).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("drop_nonfinite", [False, True])
@pytest.mark.parametrize("width", [12, 32, 33])
@pytest.mark.parametrize("nan_share", [0.0, 0.05])
def test_top_k_matches_stable_argsort(compiled, dtype, drop_nonfinite, width, nan_share):
    """Rows of up to 32 candidates without NaN, several of them picked, are ranked, the
    others sorted by insertion: both give the stable argsort's picks (ties, signed zeros,
    infinities, repeats)."""
    rng = np.random.default_rng(1)
    candidate = _rows_with_repeats(rng, 400, width, 15 + width)
    score = rng.integers(-3, 4, (400, width)).astype(dtype)  # many ties
    score[score == 1] = -0.0  # ties between 0.0 and -0.0
    score[rng.random(score.shape) < nan_share] = np.nan
    score[rng.random(score.shape) < 0.05] = np.inf
    score[rng.random(score.shape) < 0.05] = -np.inf
    for k in (1, 3, 12, 15, width, width + 2):
        expected_score = score.copy()
        expected = kernels.top_k_rows_numpy(candidate, expected_score, k, drop_nonfinite)
        got_score = score.copy()
        got = compiled["top_k_rows"](candidate, got_score, k, drop_nonfinite)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got_score, expected_score)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segment_sum_is_bit_identical_to_reduceat(compiled, dtype):
    rng = np.random.default_rng(2)
    values = rng.standard_normal((3000, 32)).astype(dtype)
    # segment lengths around NumPy's pairwise-summation thresholds (8, 128) and beyond
    lengths = np.array([1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 128, 129, 130, 257, 1000, 1, 4])
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = rng.integers(0, len(values), lengths.sum())
    expected = kernels.segment_sum_rows_numpy(values, rows, first)
    got = kernels.segment_sum_rows(values, rows, first)  # segments > 129 rows go to NumPy
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()
    short = lengths <= 129
    first_short = np.concatenate([[0], np.cumsum(lengths[short])[:-1]])
    rows_short = rng.integers(0, len(values), lengths[short].sum())
    got = compiled["segment_sum_rows"](values, rows_short, first_short)
    assert (
        got.tobytes() == kernels.segment_sum_rows_numpy(values, rows_short, first_short).tobytes()
    )


def test_same_sign_share_and_insert(compiled):
    rng = np.random.default_rng(3)
    sign = np.sign(rng.standard_normal(500)).astype(np.float32)
    sign[::7] = 0
    degree = rng.integers(0, 20, 500)
    indptr = np.concatenate([[0], np.cumsum(degree)])
    indices = rng.integers(0, 500, indptr[-1])
    expected = kernels.same_sign_share_numpy(sign, indptr, indices)
    assert (degree == 0).any()  # rows without followees have no entry
    for share in (compiled["same_sign_share"], kernels._compiled_parallel["same_sign_share"]):
        assert share(sign, indptr, indices).tobytes() == expected.tobytes()
        # the echo-chamber index passes the signs as int8: the same shares
        assert share(sign.astype(np.int8), indptr, indices).tobytes() == expected.tobytes()
    assert (
        kernels.same_sign_share_numpy(sign.astype(np.int8), indptr, indices).tobytes()
        == expected.tobytes()
    )
    values = np.sort(rng.integers(0, 1000, 300))
    new = np.sort(rng.integers(-5, 1005, 40))
    pos = np.searchsorted(values, new)
    np.testing.assert_array_equal(
        compiled["insert_sorted"](values, pos, new), np.insert(values, pos, new)
    )
    for drop in (np.array([0, 5, 6, 299]), np.arange(300), np.array([17])):
        np.testing.assert_array_equal(
            compiled["delete_sorted"](values, drop), np.delete(values, drop)
        )


def test_numpy_backend_is_selectable():
    previous = kernels.BACKEND
    try:
        assert kernels.use_backend("numpy") == "numpy"
        assert kernels.BACKEND == "numpy"
        with pytest.raises(ValueError, match="POLICYSIM_KERNELS"):
            kernels.use_backend("fortran")
    finally:
        kernels.use_backend(previous)


def test_isin_matches_np_isin_on_both_backends(backend):
    """The hash-table path (compiled kernels, int64) and the sort path: repeats among the
    members, negatives, a 2-D ``values``, empty arrays, other integer types."""
    rng = np.random.default_rng(5)
    for n, m in ((0, 5), (5, 0), (456, 30), (3000, 3000)):
        values = rng.integers(-5, 200, n).astype(np.int64)
        members = rng.integers(-5, 200, m).astype(np.int64)
        np.testing.assert_array_equal(kernels.isin(values, members), np.isin(values, members))
    grid = rng.integers(0, 50, (4, 7))
    for dtype in (np.int64, np.int32):
        got = kernels.isin(grid.astype(dtype), members.astype(dtype))
        assert got.shape == grid.shape
        np.testing.assert_array_equal(got, np.isin(grid, members))


def test_sort_and_mask_helpers_match_unique():
    rng = np.random.default_rng(4)
    values = rng.integers(0, 50, 400)
    ids, counts = kernels.unique_counts(values)
    expected_ids, expected_counts = np.unique(values, return_counts=True)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(counts, expected_counts)
    distinct, inverse = kernels.unique_inverse(values)
    expected_distinct, expected_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(distinct, expected_distinct)
    np.testing.assert_array_equal(inverse, expected_inverse)
    np.testing.assert_array_equal(
        kernels.first_occurrence(values), np.unique(values, return_index=True)[1]
    )
    members = rng.integers(0, 80, 30)
    np.testing.assert_array_equal(kernels.isin(values, members), np.isin(values, members))
    assert not kernels.isin(values, members[:0]).any()


def test_follow_graph_csr_merged_with_edits_equals_rebuild(backend):
    rng = np.random.default_rng(5)
    n = 300
    graph = FollowGraph(n, rng.integers(0, n, 2000), rng.integers(0, n, 2000))
    for _ in range(6):
        graph.followees_csr()  # cached, so the edits below are merged into it
        graph.follow(rng.integers(0, n, 150), rng.integers(0, n, 150))
        graph.unfollow(rng.integers(0, n, 150), rng.integers(0, n, 150))
        src, dst = graph.keys // n, graph.keys % n
        rebuilt = FollowGraph(n, src, dst)
        for got, expected in zip(graph.followees_csr(), rebuilt.followees_csr(), strict=True):
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [8, 12, 32, 100, 128])
def test_unit_rows_bit_identical_to_numpy_norm(compiled, dtype, d):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((2000, d)).astype(dtype) * rng.random((2000, 1)).astype(dtype)
    x[0] = 0.0  # norm below 1e-8
    x[1, 3] = np.nan
    assert _bits(compiled["unit_rows"](x, np.array([1e-8], dtype))) == _bits(
        kernels.unit_rows_numpy(x)
    )
    base = rng.standard_normal((300, d)).astype(np.float32)
    rows = rng.integers(0, 300, 2000)
    noise = rng.standard_normal((2000, d))
    for r in (rows, None):
        expected = kernels.unit_noisy_rows_numpy(
            base if r is not None else base[rows], r, 0.3, noise
        )
        got = compiled["unit_noisy_rows"](
            base if r is not None else base[rows],
            np.zeros(0, np.int64) if r is None else r,
            0.3,
            noise,
            np.array([1e-8]),
        )
        assert _bits(got) == _bits(expected)
    for width in (3, 7, 200):  # outside the compiled range: the dispatcher uses NumPy
        y = rng.standard_normal((50, width))
        assert _bits(kernels.unit_rows(y)) == _bits(kernels.unit_rows_numpy(y))


def test_noise_drawn_in_blocks_gives_the_one_draw_results(backend):
    for d, m, block in ((32, 2001, 300), (5, 40, 7), (16, 0, 4), (8, 9, 9)):
        base = np.random.default_rng(d).standard_normal((50, d)).astype(np.float32)
        for rows in (np.random.default_rng(m).integers(0, 50, m), None):
            full = base if rows is not None else np.resize(base, (m, d))
            one, blocks = np.random.default_rng(3), np.random.default_rng(3)
            expected = kernels.unit_noisy_rows(full, rows, 0.3, one.standard_normal((m, d)))
            got = kernels.unit_noisy_rows_drawn(full, rows, 0.3, blocks, block=block)
            assert got.dtype == expected.dtype and _bits(got) == _bits(expected)
            assert one.random() == blocks.random()  # the generator is left in the same state
            into = np.full((m, d), np.nan, np.float32)
            same = kernels.unit_noisy_rows_drawn(
                full, rows, 0.3, np.random.default_rng(3), block=block, out=into
            )
            assert same is into and _bits(into) == _bits(expected)
        # in place: the base rows overwritten by their noisy unit rows, row by row
        in_place = np.resize(base, (m, d))
        expected = kernels.unit_noisy_rows(
            in_place, None, 0.3, np.random.default_rng(4).standard_normal((m, d))
        )
        kernels.unit_noisy_rows_drawn(
            in_place, None, 0.3, np.random.default_rng(4), block=block, out=in_place
        )
        assert _bits(in_place) == _bits(expected)


def test_noise_drawn_into_an_array_that_does_not_fit_is_rejected(backend):
    base = np.ones((6, 8), np.float32)
    for out in (np.empty((5, 8), np.float32), np.empty((6, 8)), np.empty((8, 6), np.float32).T):
        with pytest.raises(ValueError, match=r"a C-contiguous \(6, 8\) float32 array"):
            kernels.unit_noisy_rows_drawn(base, None, 0.3, np.random.default_rng(0), out=out)


@pytest.mark.parametrize("keep", [0.9, 0.5, 0.123])
@pytest.mark.parametrize("d", [8, 32, 100])
def test_memory_update_bit_identical_to_numpy(compiled, keep, d):
    rng = np.random.default_rng(7)
    latent = rng.standard_normal((4000, d)).astype(np.float32)
    memory = rng.standard_normal((500, d)).astype(np.float32)
    lengths = np.array([1, 2, 7, 8, 9, 16, 17, 100, 128, 129, 3, 1])
    who = np.sort(rng.choice(500, len(lengths), replace=False))
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = rng.integers(0, len(latent), lengths.sum())
    expected, got = memory.copy(), memory.copy()
    kernels.memory_update_numpy(expected, latent, rows, first, who, keep)
    assert compiled["memory_update"](
        got, latent, rows, first, who, np.array([keep, 1 - keep], np.float32)
    )
    assert _bits(got) == _bits(expected)
    # a segment of 130 rows: the kernel declines (memory untouched), the dispatcher uses NumPy
    long_first = np.array([0, 130])
    long_rows = rng.integers(0, len(latent), 131)
    untouched = memory.copy()
    assert not compiled["memory_update"](
        untouched, latent, long_rows, long_first, who[:2], np.array([keep, 1 - keep], np.float32)
    )
    assert _bits(untouched) == _bits(memory)
    expected, got = memory.copy(), memory.copy()
    kernels.memory_update_numpy(expected, latent, long_rows, long_first, who[:2], keep)
    kernels.memory_update(got, latent, long_rows, long_first, who[:2], keep)
    assert _bits(got) == _bits(expected)


def _random_csr(rng: np.random.Generator, n: int, max_degree: int) -> tuple[np.ndarray, np.ndarray]:
    degree = rng.integers(0, max_degree, n)
    degree[rng.random(n) < 0.1] = 0  # users who follow nobody
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return indptr, rng.integers(0, n, indptr[-1])


@pytest.mark.parametrize("alpha", [0.5, 0.3, 0.123456789, 0.0, 1.0])
def test_propagation_hop_bit_identical_to_scipys_csr_product(compiled, alpha):
    rng = np.random.default_rng(8)
    indptr, indices = _random_csr(rng, 700, 40)
    context = rng.standard_normal((700, 64)).astype(np.float32)
    for hops in (1, 2, 3):
        expected = kernels.propagate_csr_numpy(context, indptr, indices, alpha, hops)
        got = kernels.propagate_csr(context, indptr, indices, alpha, hops)
        assert _bits(got) == _bits(expected)
        # the hops computed near the rows only: distinct sorted rows, then repeats in any order
        for rows in (np.sort(rng.choice(700, 90, replace=False)), rng.integers(0, 700, 40)):
            near = kernels.propagate_csr(context, indptr, indices, alpha, hops, rows)
            assert _bits(near) == _bits(expected[rows])


@pytest.mark.parametrize("alpha", [0.5, 0.123456789, 0.0, 1.0])
def test_local_propagation_bit_identical_to_scipy_on_the_neighbourhood(compiled, threads, alpha):
    from socialenv.core.propagation import propagate_rows as propagate_rows_numpy

    rng = np.random.default_rng(12)
    indptr, indices = _random_csr(rng, 600, 12)
    profile = rng.standard_normal((600, 24)).astype(np.float32)
    memory = rng.standard_normal((600, 8))  # float64: cast as the NumPy version casts
    rows = rng.integers(0, 600, 70)  # repeats, any order
    for hops in (0, 1, 2, 3):
        for context in ((profile, memory), (profile,), profile):
            expected = propagate_rows_numpy(context, indptr, indices, rows, alpha, hops)
            for n_threads in (1, 2):
                threads(n_threads)
                got = kernels.propagate_rows(context, indptr, indices, rows, alpha, hops)
                assert _bits(got) == _bits(expected), (hops, n_threads)


@pytest.mark.parametrize("alpha", [0.5, 0.123456789, 0.0])
def test_local_propagation_equals_propagating_every_user(compiled, alpha):
    """Simulation.user_context propagates on the arms' neighbourhood above
    LOCAL_PROPAGATION_USERS and the whole table below: the rows must be the same."""
    rng = np.random.default_rng(21)
    indptr, indices = _random_csr(rng, 800, 15)
    profile = rng.standard_normal((800, 16)).astype(np.float32)
    memory = rng.standard_normal((800, 16)).astype(np.float32)
    table = np.concatenate([profile, memory], axis=1)
    rows = np.unique(rng.integers(0, 800, 60))
    for hops in (0, 1, 2, 3):
        whole = kernels.propagate_csr(table, indptr, indices, alpha, hops, rows)
        for context in ((profile, memory), table):
            local = kernels.propagate_rows(context, indptr, indices, rows, alpha, hops)
            assert _bits(local) == _bits(whole), hops


def test_threaded_kernels_equal_one_thread_on_a_large_graph(compiled, threads):
    """Enough rows that every thread of the pool gets work (the twin test above is small)."""
    rng = np.random.default_rng(13)
    indptr, indices = _random_csr(rng, 60_000, 30)
    context = (rng.standard_normal((60_000, 32)).astype(np.float32),) * 2
    rows = rng.integers(0, 60_000, 5_000)
    threads(1)
    one = kernels.propagate_rows(context, indptr, indices, rows, 0.5, 2)
    threads(2)
    assert kernels.THREADS == 2
    assert _bits(kernels.propagate_rows(context, indptr, indices, rows, 0.5, 2)) == _bits(one)


def _fresh_interpreter(script: str, **variables: str) -> Any:
    """The JSON that ``script`` prints, run in a fresh interpreter on numba's kernels with two
    of its threads, without the OpenMP wait variables (and without ``POLICYSIM_THREADS``)
    unless ``variables`` set them."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "POLICYSIM_THREADS")
    }
    environment.update({"NUMBA_NUM_THREADS": "2", "POLICYSIM_KERNELS": "numba"}, **variables)
    shown = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True
    )
    return json.loads(shown.stdout)


@pytest.mark.parametrize(
    ("inherited", "expected"),
    [
        ({}, {"OMP_WAIT_POLICY": "PASSIVE"}),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
        ({"GOMP_SPINCOUNT": "1000"}, {"GOMP_SPINCOUNT": "1000"}),
    ],
    ids=["unset", "user-policy", "user-spincount"],
)
def test_threads_let_idle_openmp_workers_sleep_unless_the_user_says_otherwise(inherited, expected):
    """Opting into threads (``POLICYSIM_THREADS=2``, read at import) sets
    ``OMP_WAIT_POLICY=PASSIVE`` before numba's OpenMP pool starts, so its idle threads do not
    spin on the cores the row blocks need; a wait setting of the user's is left as it is."""
    pytest.importorskip("numba")
    threads, layer, wait = _fresh_interpreter(
        "import json, os\n"
        "from socialenv.core import kernels\n"
        "import numba\n"
        "print(json.dumps([kernels.THREADS, numba.threading_layer(), "
        "{k: os.environ[k] for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT') if k in os.environ}]))",
        POLICYSIM_THREADS="2",
        **inherited,
    )
    assert threads == 2 and layer in ("omp", "tbb", "workqueue")
    assert wait == expected


def test_threads_set_after_torch_loaded_openmp_warn_how_to_let_its_threads_sleep():
    """torch loads the OpenMP runtime numba then shares, reading the wait policy once: threads
    set after ``import torch`` cannot change it, and a RuntimeWarning says what to set."""
    pytest.importorskip("numba")
    pytest.importorskip("torch")
    messages, wait = _fresh_interpreter(
        "import json, os, warnings\n"
        "import torch\n"
        "from socialenv.core import kernels\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    kernels.set_threads(2); kernels.set_threads(1); kernels.set_threads(2)\n"
        "print(json.dumps([[str(w.message) for w in caught], "
        "[os.environ.get(v) for v in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')]]))"
    )
    assert wait == [None, None]
    assert len(messages) == 1 and "OMP_WAIT_POLICY=PASSIVE" in messages[0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_set_threads_rejects_what_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="threads"):
        kernels.set_threads(bad)
    assert kernels.THREADS == 1


def test_relational_draws_and_merged_edits_match_numpy(compiled):
    rng = np.random.default_rng(9)
    n = 800
    indptr, indices = _random_csr(rng, n, 30)
    active = np.sort(rng.choice(n, 300, replace=False))
    author = rng.integers(0, n, 500)
    by_author = np.argsort(author, kind="stable")
    author_start = np.concatenate([[0], np.cumsum(np.bincount(author, minlength=n))])
    offset_draw, pick_draw = rng.random((300, 15)), rng.random((300, 15))
    for idx in (indices, indices[:0]):
        ptr = indptr if len(idx) else np.zeros(n + 1, np.int64)
        expected = kernels.relational_draws_numpy(
            ptr, idx, active, offset_draw, pick_draw, author_start, by_author, 40
        )
        for draws in (compiled["relational_draws"], kernels._compiled_parallel["relational_draws"]):
            got = draws(ptr, idx, active, offset_draw, pick_draw, author_start, by_author, 40)
            assert _bits(got) == _bits(expected)
    values = np.sort(rng.choice(10_000, 600, replace=False))
    new = np.setdiff1d(rng.integers(-5, 10_005, 80), values)
    at = np.searchsorted(values, new)
    for drop in (
        np.sort(rng.choice(600, 50, replace=False)),
        np.zeros(0, np.int64),
        np.array([0, 599]),
        at[(at < 600)][:5],
    ):
        drop = np.unique(drop)
        for a, v in ((at, new), (at[:0], new[:0])):
            size = len(values) + len(v) - len(drop)
            assert _bits(
                compiled["merge_edits"](values, drop, a, v, np.empty(size, values.dtype))
            ) == _bits(kernels.merge_edits_numpy(values, drop, a, v, np.empty(size, values.dtype)))


@pytest.mark.parametrize("toxicity_dtype", [np.float32, np.float64])
def test_observed_reactions_match_numpy(compiled, toxicity_dtype):
    rng = np.random.default_rng(5)
    n, m = 60, 900
    user = rng.integers(0, n, m)
    toxicity = rng.uniform(-0.2, 1.2, m).astype(toxicity_dtype)  # some clipped either way
    cross, hostile = rng.random(m) < 0.5, rng.random(m) < 0.3
    names = ("reply_toxicity", "cross_civil", "cross_total")
    prior = (
        rng.uniform(0, 1, n).astype(np.float32),
        np.full(n, 1.6),  # not an integer: adding the counts one by one would round
        np.full(n, 2.0),
    )
    for reply in (rng.random(m) < 0.4, np.zeros(m, bool)):
        noise = rng.normal(0.0, 0.1, int(reply.sum()))
        expected = {name: a.copy() for name, a in zip(names, prior, strict=True)}
        got = tuple(a.copy() for a in prior)
        args = (user, reply, toxicity, noise, cross, hostile, 0.7)
        kernels.observe_reactions_numpy(*args, expected)
        compiled["observe_reactions"](*args[:6], np.float32(0.7), 1 - 0.7, *got)
        for g, name in zip(got, names, strict=True):
            assert g.dtype == expected[name].dtype and _bits(g) == _bits(expected[name])
        assert (expected["reply_toxicity"] != prior[0]).any() == reply.any()
        assert (expected["cross_civil"] > prior[1]).any()


def test_reaction_counts_and_feed_cleanup_match_numpy(compiled):
    rng = np.random.default_rng(11)
    kinds = np.array([1, 2, 3, 4], np.int8)
    post = rng.integers(0, 50, 3000)
    kind = rng.integers(0, 6, 3000).astype(np.int8)  # 0 and 5: kinds that are not counted
    start = [rng.integers(0, 9, 50).astype(np.int32) for _ in kinds]
    counting = [(compiled["count_reactions"], 1)]
    counting += [(kernels._compiled_parallel["count_reactions"], parts) for parts in (1, 2, 7)]
    for sample in (slice(None), slice(0, 0), slice(0, 1)):  # all, no reactions, one post
        expected = tuple(c.copy() for c in start)
        kernels.count_reactions_numpy(post[sample], kind[sample], kinds, expected)
        for count, parts in counting:
            got = tuple(c.copy() for c in start)
            count(post[sample], kind[sample], kinds, got, parts)
            for g, e in zip(got, expected, strict=True):
                assert _bits(g) == _bits(e)
    feed = _rows_with_repeats(rng, 400, 12, 30)
    owner = rng.integers(0, 10, 400)
    author = rng.integers(0, 10, 30)
    expected_feed = kernels.drop_own_and_repeated_numpy(feed, owner, author)
    empty = np.full((5, 12), -1, np.int64)  # no post in the world yet: nothing read
    for kernel in (
        compiled["drop_own_and_repeated"],
        kernels._compiled_parallel["drop_own_and_repeated"],
    ):
        assert _bits(kernel(feed, owner, author)) == _bits(expected_feed)
        assert _bits(kernel(empty, owner[:5], author[:0])) == _bits(empty)


def test_keyed_max_matches_numpy(compiled):
    rng = np.random.default_rng(12)
    sorted_key = np.sort(rng.integers(0, 400, 1500))
    keys = rng.choice(500, 200, replace=False)  # some present, some not
    values = rng.random((4, 1500))
    values[1, rng.random(1500) < 0.01] = np.nan
    for v in (values, values.astype(np.float32)):
        got, expected = (
            compiled["keyed_max"](sorted_key, keys, v),
            kernels.keyed_max_numpy(sorted_key, keys, v),
        )
        assert _bits(got[0]) == _bits(expected[0])
        assert _bits(got[1]) == _bits(expected[1])
    assert not compiled["keyed_max"](sorted_key[:0], keys, values[:, :0])[0].any()


def test_rec_arm_columns_match_numpy(compiled):
    rng = np.random.default_rng(14)
    n, posts, arms, w, d = 300, 900, 2000, 8, 6
    user_rows = rng.standard_normal((120, w)).astype(np.float32)
    arm_row = rng.integers(0, 120, arms)
    post_latent = rng.standard_normal((posts, d)).astype(np.float32)
    user, post = rng.integers(0, n, arms), rng.integers(0, posts, arms)
    user_columns = (
        rng.uniform(-1, 1, n).astype(np.float32),
        rng.integers(-1, 2, n).astype(np.int8),
        rng.random(n).astype(np.float32),
        rng.random(n).astype(np.float32),
    )
    counts = [rng.integers(0, 50, posts).astype(np.int32) for _ in range(4)]
    counts[0][:3] = np.iinfo(np.int32).max  # the int32 sum wraps on both paths
    post_columns = (
        rng.integers(0, n, posts),
        *counts,
        rng.random(posts).astype(np.float32),
        rng.integers(-1, 30, posts).astype(np.int32),
        rng.random(posts) < 0.3,
        rng.uniform(-1, 1, posts).astype(np.float32),
    )
    source = rng.integers(0, 4, arms).astype(np.int8)
    shape = (arms, w + d + 14 + 4)
    got, expected = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    with np.errstate(over="ignore"):
        compiled["rec_arm_columns"](
            got, user_rows, arm_row, post_latent, user, post, user_columns, post_columns, 31, source
        )
        kernels.rec_arm_columns_numpy(
            expected,
            user_rows,
            arm_row,
            post_latent,
            user,
            post,
            user_columns,
            post_columns,
            31,
            source,
        )
    assert _bits(got) == _bits(expected)
    assert np.isnan(got[:, w + d + 7]).all() and np.isnan(got[:, w + d + 13]).all()  # left to NumPy
    threaded = np.full(shape, np.nan, np.float32)
    with np.errstate(over="ignore"):
        kernels._compiled_parallel["rec_arm_columns"](
            threaded,
            user_rows,
            arm_row,
            post_latent,
            user,
            post,
            user_columns,
            post_columns,
            31,
            source,
        )
    assert _bits(threaded) == _bits(expected)
    # the dispatcher also fills the first columns of a wider matrix (a view of its rows),
    # leaving the rest as they were
    wide = np.full((arms, shape[1] + 6), np.nan, np.float32)
    wide[:, shape[1] :] = 7.0
    with np.errstate(over="ignore"):
        kernels.rec_arm_columns(
            wide[:, : shape[1]],
            user_rows,
            arm_row,
            post_latent,
            user,
            post,
            user_columns,
            post_columns,
            31,
            source,
        )
    assert _bits(wide[:, : shape[1]]) == _bits(expected) and (wide[:, shape[1] :] == 7).all()


@pytest.mark.parametrize(("m", "arms"), [(0, 5), (40, 0), (3000, 450), (200_000, 9000)])
def test_objective_arm_rewards_match_numpy(compiled, m, arms):
    """The Rec objective's arm rewards: bincount's sums per arm, the built-in slots' pairwise
    means (float64 values, float32 excess toxicities), the clip, NaN toxicities, arms without
    reactions, no built-in slot."""
    rng = np.random.default_rng(m + arms)
    caused = rng.integers(-1, max(arms, 1), m) if arms else np.full(m, -1)
    value = rng.choice([1.0, 0.0, -1.0, -0.35, 0.0], m) * rng.random(m)
    cross = rng.random(m) < 0.4
    kind = rng.integers(0, 5, m).astype(np.int8)
    toxicity = rng.random(m).astype(np.float32)
    toxicity[: m // 50] = np.nan
    in_slot = rng.random(m) < 0.3
    for slots, text in ((int(in_slot.sum()) + 7, 0.21), (0, 0.0)):
        args = (caused, value, cross, kind, toxicity, text, in_slot, slots, 37, arms, 3)
        expected = kernels.objective_arm_rewards_numpy(*args)
        for got in (compiled["objective_arm_rewards"](*args), kernels.objective_arm_rewards(*args)):
            assert got[0].dtype == got[1].dtype == np.float32
            for a, b in zip(got, expected, strict=True):
                assert _bits(np.asarray(a)) == _bits(np.asarray(b))
    beyond = (np.array([arms]), np.zeros(1), np.zeros(1, bool), np.zeros(1, np.int8))
    with pytest.raises(ValueError, match="beyond the applied arms"):
        compiled["objective_arm_rewards"](
            *beyond, np.zeros(1, np.float32), 0.2, np.zeros(1, bool), 1, 1, arms, 3
        )


@pytest.mark.parametrize("n", [1, 7, 8, 9, 128, 129, 200, 1000, 4097, 65_536, 300_001])
def test_round_means_match_the_metric_functions(compiled, n):
    """The metrics' means in one pass: NumPy's pairwise float32 sums (its leaves of 8 to 128
    terms, its halves), the float64 division by the count, the std's squares; NaN, signed
    zeros, empty texts and reactions. The twin: the metric functions."""
    rng = np.random.default_rng(n)
    for trial in range(3):
        stance = rng.uniform(-1, 1, n).astype(np.float32)
        on_cut = rng.random(n) < 0.3
        stance[on_cut] = rng.choice(np.float32([0.0, -0.0, 1.0, -1.0, 1 / 3]), on_cut.sum())
        if trial == 2:
            stance[n // 2] = np.nan
        texts = rng.random(n // 3 if trial else 0).astype(np.float32)
        misinformed = rng.random(n) < 0.2
        cross = rng.random(2 * n if trial else 0) < 0.4
        channel = rng.integers(0, 4, 3 * n).astype(np.int8)
        expected = (
            metrics.stance_mean(stance),
            metrics.stance_std(stance),
            metrics.toxicity(texts),
            metrics.misinformation_ratio(misinformed),
            float(cross.mean()) if len(cross) else 0.0,
            float((channel == int(FeedChannel.INJECTED)).mean()),
        )
        args = (stance, texts, misinformed, cross, channel)
        for got in (
            compiled["round_means"](*args, int(FeedChannel.INJECTED)),
            kernels.compiled_round_means(*args, int(FeedChannel.INJECTED)),
            metrics.round_means(*args),
        ):
            assert _bits(np.array(got)) == _bits(np.array(expected))
    assert (
        kernels.compiled_round_means(*args[:2], misinformed.astype(np.int8), *args[3:], 3) is None
    )


@pytest.mark.parametrize("weights", [(0.5, 1.0, 1.0), (0.7, 1.3, 0.3), (1, 2, 0)])
def test_reaction_values_match_numpy(compiled, weights):
    """The Rec objective's per-reaction values: toxicities on a threshold whose float32 lies
    below its float64 value (0.7), NaN, Python ints as weights."""
    rng = np.random.default_rng(16)
    m = 3000
    kind = rng.integers(0, 5, m).astype(np.int8)
    toxicity = rng.random(m).astype(np.float32)
    toxicity[:300] = rng.choice(np.float32([0.7, 0.5, 1.0, 0.0, np.nan]), 300)
    cross = rng.random(m) < 0.5
    codes = (3, 1)
    expected = kernels.reaction_values_numpy(cross, kind, toxicity, weights, codes)
    for got in (
        compiled["reaction_values"](cross, kind, toxicity, np.array(weights, np.float64), *codes),
        kernels.reaction_values(cross, kind, toxicity, weights, codes),
    ):
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and _bits(a) == _bits(b)
    assert expected[0].any() and expected[1].any() and expected[2].any()


def test_rec_arm_history_columns_and_norm_pad_match_numpy(compiled):
    """The arm contexts' last columns: the divisions by a scale no float32 holds exactly and
    by the round count, the receiver columns and their products with cross stance (NaN and
    signed zeros included), the norm pad, and the masked rows."""
    rng = np.random.default_rng(15)
    arms, n, width = 700, 90, 30
    rows = rng.standard_normal((arms, width)).astype(np.float32)
    rows[rng.random((arms, width)) < 0.02] = np.nan
    rows[:, 3] = rng.choice(np.float32([0.0, -0.0, 1.0, 0.5]), arms)  # cross stance
    reply_toxicity = rng.random(n).astype(np.float32)
    civility = rng.random(n).astype(np.float32)
    reply_toxicity[:3] = [np.nan, -0.0, 0.0]
    who = rng.integers(0, n, arms)
    at = np.array([1, 2, 3, 4, width - 6], np.int64)
    mask = rng.random(arms) < 0.8
    mask[:5] = True
    scale = float(np.log1p(1000.0))
    expected = rows.copy()
    kernels.rec_arm_history_columns_numpy(expected, at, scale, 51, reply_toxicity, civility, who)
    squared = np.einsum("kd,kd->k", expected, expected, dtype=np.float64)
    squared[:5] = [np.nan, 7.0, 100.0, 0.0, 9.0]  # a NaN, beyond the norm, at it
    kernels.rec_arm_norm_pad_numpy(expected, squared, 9.0, mask)
    for view in (False, True):  # the matrix itself, and a row block of a larger one
        got = np.vstack([rows, rows[:50]]) if view else rows.copy()
        block = got[:arms]
        compiled["rec_arm_history_columns"](block, at, scale, 51, reply_toxicity, civility, who)
        compiled["rec_arm_norm_pad"](block, squared, 9.0, mask)
        assert _bits(block) == _bits(expected)
    dispatched = rows.copy()
    kernels.rec_arm_history_columns(dispatched, at, scale, 51, reply_toxicity, civility, who)
    kernels.rec_arm_norm_pad(dispatched, squared, 9.0, mask)
    assert _bits(dispatched) == _bits(expected)
    assert (expected[~mask] == 0).all() and np.isnan(expected[0, -1]) and expected[2, -1] == 0


def test_place_picks_matches_numpy(compiled):
    rng = np.random.default_rng(13)
    feed = _rows_with_repeats(rng, 300, 12, 1000)
    channel = rng.integers(0, 3, (300, 12)).astype(np.int8)
    row = rng.integers(0, 300, 700)  # many rows get more picks than the 5 slots
    post = rng.integers(0, 1000, 700)
    for start, width in ((5, 5), (0, 1), (0, 12)):
        got = compiled["place_picks"](feed, channel, row, post, start, width, 3)
        expected = kernels.place_picks_numpy(feed, channel, row, post, start, width, 3)
        for g, e in zip(got, expected, strict=True):
            assert _bits(g) == _bits(e)


def test_one_pass_graph_edit_equals_follow_then_unfollow(backend):
    rng = np.random.default_rng(10)
    n = 200
    src, dst = rng.integers(0, n, 1500), rng.integers(0, n, 1500)
    one, two = FollowGraph(n, src, dst), FollowGraph(n, src, dst)
    for step in range(8):
        if step % 2:
            one.followees_csr()  # a cached CSR is merged with the edits
            two.followees_csr()
        fs, fd = rng.integers(0, n, 120), rng.integers(0, n, 120)
        us, ud = rng.integers(0, n, 120), rng.integers(0, n, 120)
        us[:20], ud[:20] = fs[:20], fd[:20]  # edges added and removed in the same round
        us[20:40], ud[20:40] = one.keys[:20] // n, one.keys[:20] % n
        if step == 5:  # follows only
            us, ud = us[:0], ud[:0]
        if step == 6:  # unfollows only
            fs, fd = fs[:0], fd[:0]
        expected = (two.follow(fs, fd), two.unfollow(us, ud))
        assert one.edit(fs, fd, us, ud) == expected
        np.testing.assert_array_equal(one.keys, two.keys)
        for got, want in zip(one.followees_csr(), two.followees_csr(), strict=True):
            np.testing.assert_array_equal(got, want)


def test_graph_edits_reuse_memory_only_when_nobody_holds_it():
    rng = np.random.default_rng(15)
    n = 300
    graph = FollowGraph(n, rng.integers(0, n, 3000), rng.integers(0, n, 3000))

    def edit() -> None:
        graph.followees_csr()
        graph.edit(
            rng.integers(0, n, 50),
            rng.integers(0, n, 50),
            graph.keys[:30] // n,
            graph.keys[:30] % n,
        )

    edit()
    first = weakref.ref(graph.followees_csr()[1].base)  # holds no reference
    edit()
    edit()
    assert graph.followees_csr()[1].base is first()  # the edit before last's memory, taken back
    held_keys, (_, held_indices) = graph.keys, graph.followees_csr()
    expected_keys, expected_indices = held_keys.copy(), held_indices.copy()
    for _ in range(4):
        edit()
        assert not np.shares_memory(graph.followees_csr()[1], held_indices)
    np.testing.assert_array_equal(held_keys, expected_keys)  # what was handed out never changes
    np.testing.assert_array_equal(held_indices, expected_indices)
    rebuilt = FollowGraph(n, graph.keys // n, graph.keys % n)
    for got, want in zip(graph.followees_csr(), rebuilt.followees_csr(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_reaction_probabilities_of_a_broadcast_feed_owner_index_are_the_same():
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=300, rounds=3)
    env.reset(seed=2)
    env.step(np.full(env.slate_size, env.no_op))
    sim = env.unwrapped.sim
    rng = np.random.default_rng(16)
    owner = np.broadcast_to(sim.active[:, None], (len(sim.active), 7))  # one id per row, stride 0
    post = rng.integers(0, len(sim.posts), owner.shape)
    attention = rng.random(owner.shape)
    users, posts = sim.users.view(), sim.posts.view()
    got = sim.brain.reaction_probabilities(users, posts, owner, post, attention)
    expected = sim.brain.reaction_probabilities(
        users, posts, np.ascontiguousarray(owner), post, attention
    )
    assert got.keys() == expected.keys()
    for key in got:
        assert _bits(got[key]) == _bits(expected[key])


def _episode_digest(env_cls, policy: str, rounds: int = 10) -> str:
    users_field = env_cls.lever_class.config_class.users_field  # the lever's own keyword
    env = env_cls(num_users=300, rounds=rounds, **{users_field: 40})
    obs, _ = env.reset(seed=11)
    rng = np.random.default_rng(11)
    h = hashlib.sha256()

    def add(value) -> None:
        if isinstance(value, dict):
            for key in sorted(value):
                h.update(str(key).encode())
                add(value[key])
        elif isinstance(value, list | tuple):
            for item in value:
                add(item)
        else:
            h.update(np.ascontiguousarray(np.asarray(value)).tobytes())

    add(obs)
    for _ in range(rounds):
        action = (
            np.full(env.slate_size, env.no_op)
            if policy == "noop"
            else rng.integers(0, env.num_arms + 1, env.slate_size)
        )
        obs, reward, _, _, info = env.step(action)
        add([obs, reward, info])
    env.close()
    return h.hexdigest()


@pytest.mark.parametrize("env_name", ["rec", "exposure"])
@pytest.mark.parametrize("policy", ["noop", "random"])
def test_episode_is_bit_identical_on_both_paths(env_name, policy):
    from socialenv.envs.exposure import ExposureEnv
    from socialenv.envs.rec import RecEnv

    env_cls = RecEnv if env_name == "rec" else ExposureEnv
    previous = kernels.BACKEND
    try:
        kernels.use_backend("numba")
        compiled_digest = _episode_digest(env_cls, policy)
        kernels.use_backend("numpy")
        numpy_digest = _episode_digest(env_cls, policy)
    finally:
        kernels.use_backend(previous)
    assert compiled_digest == numpy_digest


def test_seed_sequence_state_matches_numpy_seed_sequence(compiled):
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 4, 5, 9):
        for _ in range(50):
            words = rng.integers(0, 2**32, n, dtype=np.uint64)
            words[rng.random(n) < 0.2] = 0
            np.testing.assert_array_equal(
                compiled["seed_sequence_state"](words), kernels.seed_sequence_state_numpy(words)
            )


def test_seeded_generator_is_default_rng_bit_for_bit(backend):
    for entropy in [(0, 1, 0), (2**31 - 2, 301, 11), (5, 2**32 - 1, 3), (2**32, 1, 0), (3,)]:
        generator = kernels.seeded_generator(entropy)
        reference = np.random.default_rng(list(entropy))
        assert generator.bit_generator.state == reference.bit_generator.state
        np.testing.assert_array_equal(generator.random(5), reference.random(5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_rows_is_bit_identical_to_add_at(compiled, dtype):
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((5000, 16)).astype(dtype)
    index = rng.integers(0, 24, 5000)
    expected = rng.standard_normal((24, 16)).astype(dtype)
    out = expected.copy()
    np.add.at(expected, index, rows)
    compiled["scatter_add_rows"](out, index, rows)
    np.testing.assert_array_equal(out, expected)
    twin = np.zeros((24, 16), dtype)
    kernels.scatter_add_rows_numpy(twin, index, rows)
    reference = np.zeros((24, 16), dtype)
    np.add.at(reference, index, rows)
    np.testing.assert_array_equal(twin, reference)


def test_cluster_draws_bit_identical_to_numpy(compiled):
    rng = np.random.default_rng(11)
    for clusters, posts, lo in [(16, 2000, 3000), (5, 7, 0), (9, 1, 12)]:
        cluster = rng.integers(0, clusters, posts)
        by_cluster = np.argsort(cluster, kind="stable")
        cluster_start = np.searchsorted(cluster[by_cluster], np.arange(clusters + 1))
        user_cluster = rng.integers(0, clusters, 300)
        draw = rng.random((300, 20))
        draw[0, :3] = [0.0, np.nextafter(1.0, 0.0), 0.5]
        expected = kernels.cluster_draws_numpy(
            draw, user_cluster, cluster_start, by_cluster, lo, lo + posts
        )
        got = compiled["cluster_draws"](
            draw, user_cluster, cluster_start, by_cluster, lo, lo + posts
        )
        assert _bits(got) == _bits(expected)
        empty = np.diff(cluster_start) == 0
        if empty.any():  # a user of an empty cluster draws from the whole range
            row = np.flatnonzero(empty[user_cluster])
            assert ((expected[row] >= lo) & (expected[row] < lo + posts)).all()


@pytest.mark.parametrize("exposure_dtype", [np.float32, np.float64])
def test_exposure_filter_and_impressions_bit_identical_to_numpy(compiled, exposure_dtype):
    rng = np.random.default_rng(12)
    post_author = rng.integers(0, 50, 400)
    exposure = rng.random(50).astype(exposure_dtype)
    exposure[:5] = [0.0, 1.0, 0.5, 0.25, 0.75]
    feed = rng.integers(-1, 400, (120, 12))
    feed[rng.random(feed.shape) < 0.2] = -1
    draw = rng.random(feed.shape)
    # a draw equal to its author's pass probability removes the post, one just below keeps it
    feed[0, :2] = np.flatnonzero(post_author == 2)[0]
    draw[0, :2] = [0.5, np.nextafter(0.5, 0.0)]
    expected, expected_removed = kernels.exposure_filter_numpy(feed, post_author, exposure, draw)
    got, removed = compiled["exposure_filter"](feed, post_author, exposure, draw)
    assert _bits(got) == _bits(expected) and removed == expected_removed > 0
    assert expected[0, 0] == -1 and expected[0, 1] == feed[0, 1]
    owner = rng.integers(0, 50, len(feed))
    want = kernels.feed_impressions_numpy(feed, expected, owner, post_author)
    have = compiled["feed_impressions"](feed, expected, owner, post_author)
    for a, b in zip(have, want, strict=True):
        assert _bits(a) == _bits(b)
    assert want[4].sum() == expected_removed


def test_feed_impressions_of_an_empty_feed(backend):
    feed = np.full((3, 4), -1, np.int64)
    valid, user, post, author, removed = kernels.feed_impressions(
        feed, feed, np.arange(3), np.zeros(0, np.int64)
    )
    assert not valid.any() and len(user) == len(post) == len(author) == len(removed) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("decay", [0.5, 0.3, 0.123456789])
def test_author_history_bit_identical_to_numpy(compiled, dtype, decay):
    rng = np.random.default_rng(13)
    author = rng.integers(0, 60, 500)  # most authors write several texts
    toxicity = rng.random(500).astype(np.float32)
    misinfo = rng.random(500) < 0.3
    start = (rng.random(80).astype(dtype), rng.random(80).astype(dtype))
    expected = tuple(a.copy() for a in start)
    kernels.author_history_numpy(*expected, author, toxicity, misinfo, decay)
    got = tuple(a.copy() for a in start)
    kernels.use_backend("numba")
    kernels.author_history(*got, author, toxicity, misinfo, decay)
    for a, b, before in zip(got, expected, start, strict=True):
        assert _bits(a) == _bits(b)
        assert (a[60:] == before[60:]).all() and (a[:60] != before[:60]).any()


@pytest.mark.parametrize("per_user", [1, 2, 5])
def test_slate_slots_bit_identical_to_numpy(compiled, per_user):
    rng = np.random.default_rng(14)
    arms = 96
    group = np.arange(arms, dtype=np.int64) // 8
    for _ in range(50):
        mask = rng.random(arms) < 0.8
        slate = rng.integers(0, arms + 1, 60)  # repeats, empty slots (arms), masked arms
        slate[:4] = [3, 3, arms, 5]
        expected = kernels.slate_slots_numpy(slate, mask, group, per_user, arms)
        got = compiled["slate_slots"](slate, mask, group, per_user, arms)
        for a, b in zip(got, expected, strict=True):
            assert _bits(a) == _bits(b)
        filled, first_use, candidate, over = expected
        assert not filled[2] and first_use[2] and not first_use[1]
        assert not (candidate & over).any()
        assert np.bincount(group[slate[candidate]], minlength=12).max() <= per_user


def test_share_columns_bit_identical_to_numpy(compiled):
    rng = np.random.default_rng(15)
    codes = np.array([2, 3, 1, 2], np.int64)  # retweet, reply reactions; retweet, reply posts
    post_toxicity = rng.random(300).astype(np.float32)
    post_misinfo = rng.random(300) < 0.4
    for m in (0, 1, 700):
        kind = rng.integers(0, 4, m).astype(np.int8)
        columns = (
            kind,
            rng.integers(0, 50, m),
            rng.integers(0, 300, m),
            rng.random(m).astype(np.float32),
            rng.uniform(-1, 1, m).astype(np.float32),
            post_toxicity,
            post_misinfo,
            codes,
        )
        expected = kernels.share_columns_numpy(*columns)
        got = compiled["share_columns"](*columns)
        for a, b in zip(got, expected, strict=True):
            assert _bits(a) == _bits(b)
        shares, _, post, is_reply, toxicity, misinfo, _, kind_of_post = expected
        assert shares.sum() == len(post) and not misinfo[is_reply].any()
        assert (toxicity[~is_reply] == post_toxicity[post[~is_reply]]).all()
        assert set(kind_of_post[is_reply]) <= {2} and set(kind_of_post[~is_reply]) <= {1}


def test_reaction_choices_bit_identical_to_numpy(compiled):
    rng = np.random.default_rng(16)
    for arms, reactions in [(0, 5), (5, 0), (300, 900)]:
        arm_key = rng.choice(10_000, arms, replace=False).astype(np.int64)
        react_key = (
            np.concatenate(
                [
                    rng.choice(arm_key, reactions // 2),
                    rng.integers(0, 10_000, reactions - reactions // 2),
                ]
            )
            if arms
            else rng.integers(0, 10_000, reactions)
        )
        expected = kernels.reaction_choices_numpy(arm_key, react_key)
        for choices in (
            compiled["reaction_choices"],
            kernels._compiled_parallel["reaction_choices"],
        ):
            assert _bits(choices(arm_key, react_key)) == _bits(expected)
        found = expected >= 0
        assert (arm_key[expected[found]] == react_key[found]).all()
        assert not np.isin(react_key[~found], arm_key).any()
    repeated = np.array([7, 3, 7, 9], np.int64)  # the last arm of a repeated key answers
    parallel = kernels._compiled_parallel["reaction_choices"]
    for choices in (kernels.reaction_choices_numpy, compiled["reaction_choices"], parallel):
        assert choices(repeated, np.array([7, 3, 8], np.int64)).tolist() == [2, 1, -1]


def test_slot_reactions_bit_identical_to_numpy_and_to_a_loop(compiled):
    rng = np.random.default_rng(21)
    for rows, reactions in [(0, 0), (40, 0), (0, 30), (200, 700)]:
        owner = np.sort(rng.choice(1_000, rows, replace=False)).astype(np.int64)
        feed = rng.integers(0, 300, (rows, 9))
        feed[rng.random(feed.shape) < 0.2] = -1
        channel = rng.integers(0, 3, feed.shape).astype(np.int8)
        open_row = rng.random(rows) < 0.7
        # half the reactions by a row's owner (to a post of the row or not), the rest by any
        # user (also users without a row)
        row = rng.integers(0, max(rows, 1), reactions)
        react_user = np.where(
            rng.random(reactions) < 0.5 if rows else np.zeros(reactions, bool),
            owner[row] if rows else 0,
            rng.integers(0, 1_000, reactions),
        )
        react_post = (
            np.maximum(feed[row, rng.integers(0, 9, reactions)], 5)
            if rows
            else rng.integers(0, 300, reactions)
        )
        args = (feed, channel, 1, owner, open_row, react_user, react_post)
        hit, slots = kernels.slot_reactions_numpy(*args)
        if rows > 1:  # owners out of order: the dispatcher takes the NumPy path
            order = rng.permutation(rows)
            shuffled = (feed[order], channel[order], 1, owner[order], open_row[order])
            unsorted = kernels.slot_reactions(*shuffled, react_user, react_post)
            assert _bits(unsorted[0]) == _bits(hit) and unsorted[1] == slots
            # a negative owner (no user id): the NumPy path too
            shifted = (feed, channel, 1, owner - owner[1], open_row)
            negative = kernels.slot_reactions(*shifted, react_user - owner[1], react_post)
            assert _bits(negative[0]) == _bits(hit) and negative[1] == slots
        for kernel in (compiled["slot_reactions"], kernels._compiled_parallel["slot_reactions"]):
            got, got_slots = kernel(*args)
            assert _bits(got) == _bits(hit) and got_slots == slots
        expected = [
            any(
                owner[r] == u and open_row[r] and feed[r, j] == p and channel[r, j] == 1
                for r in range(rows)
                for j in range(feed.shape[1])
            )
            for u, p in zip(react_user, react_post, strict=True)
        ]
        assert hit.tolist() == expected
        assert slots == int((open_row[:, None] & (feed >= 0) & (channel == 1)).sum())
        if rows and reactions:
            assert 0 < hit.sum() < reactions


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.Philox])
def test_noise_drawn_in_the_kernel_is_numpys_draws_bit_for_bit(dtype, bit_generator):
    """The compiled kernel draws its noise with numba's Generator (2M normals: the ziggurat's
    rare tail is reached) and gives the NumPy twin's rows and generator state."""
    base = np.random.default_rng(4).standard_normal((70_000, 32)).astype(dtype)
    rows = np.sort(np.random.default_rng(5).integers(0, len(base), 60_000))
    for subset in (None, rows):
        results = {}
        for name in ("numba", "numpy"):
            previous = kernels.BACKEND
            kernels.use_backend(name)
            try:
                rng = np.random.Generator(bit_generator(9))
                rows_out = kernels.unit_noisy_rows_drawn(base, subset, 0.35, rng)
                results[name] = (rows_out, rng.random(4))  # the state the draws left
            finally:
                kernels.use_backend(previous)
        (compiled_rows, compiled_state), (numpy_rows, numpy_state) = results.values()
        assert compiled_rows.dtype == numpy_rows.dtype == np.float32
        assert _bits(compiled_rows) == _bits(numpy_rows)
        np.testing.assert_array_equal(compiled_state, numpy_state)


def test_guided_search_is_searchsorted(compiled, threads):
    rng = np.random.default_rng(21)
    cumulative = np.cumsum(rng.pareto(1.5, 5000) + 1.0)
    heavy = np.cumsum(np.r_[np.zeros(5), rng.pareto(0.3, 3000), np.zeros(4)])  # wide buckets
    flat = np.repeat(np.arange(50.0), 7)  # ties: the leftmost of equal entries
    signed = np.sort(rng.standard_normal(300))
    for a in (cumulative, heavy, flat, signed, np.array([3.0]), np.zeros(3), np.zeros(0)):
        top = max(abs(a[-1]), 1.0) if len(a) else 1.0
        values = rng.random(20_000) * top * 1.01 - 0.005 * top  # below, inside and above
        exact = np.concatenate([a, a[::-1], np.nextafter(a, np.inf), np.nextafter(a, -np.inf)])
        for v in (values, np.sort(values), exact, np.zeros(0)):
            expected = np.searchsorted(a, v)
            for count in (1, 2):
                threads(count)
                got = kernels.search_guided(a, v)
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, expected)
                reused = kernels.search_guided(a, v, kernels.guide_table(a))
                np.testing.assert_array_equal(reused, expected)
            np.testing.assert_array_equal(kernels.search_guided_numpy(a, v), expected)


def test_most_first_is_the_head_of_a_stable_sort():
    rng = np.random.default_rng(25)
    for values in (
        rng.integers(0, 4, 30_000),  # many ties at the k-th value; partitioned
        rng.integers(-(10**9), 10**9, 20_000),
        rng.integers(0, 4, 3000),  # sorted whole
        np.zeros(50, np.int64),
        np.array([7]),
        np.zeros(0, np.int64),
    ):
        for k in (0, 1, 5, 100, len(values) - 1, len(values), len(values) + 3):
            expected = np.argsort(-values, kind="stable")[: max(k, 0)]
            got = kernels.most_first(values, k)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, expected)


def test_index_of_finds_each_item_or_minus_one():
    """By table (dense values) and by sort (sparse ones), with absent items below, inside and
    above the values' range, negative values, and empty inputs."""
    rng = np.random.default_rng(24)
    for values in (
        rng.permutation(np.arange(-50, 3000))[:2000],  # dense: the table
        rng.choice(10**12, 300, replace=False) - 10**11,  # sparse: the sort
        np.iinfo(np.int64).max - np.arange(40),  # dense but at the end of int64: the sort
        np.array([5]),
        np.zeros(0, np.int64),
    ):
        where = {int(v): i for i, v in enumerate(values)}
        for items in (
            rng.integers(-100, 3100, 5000),
            values[rng.integers(0, max(len(values), 1), 50)] if len(values) else values,
            np.array([np.iinfo(np.int64).min, -(2**62), 2**62, np.iinfo(np.int64).max]),
            np.zeros(0, np.int64),
        ):
            got = kernels.index_of(values, items)
            assert got.dtype == np.int64 and got.shape == items.shape
            assert got.tolist() == [where.get(int(item), -1) for item in items]


def test_link_targets_match_numpy_and_a_loop(compiled, threads):
    """Each drawn edge's key gets its target added (a position past the members takes the
    last one), or -1 where the target is the source; the other keys are left alone."""
    rng = np.random.default_rng(23)
    n, scale = 400, 400
    counts = rng.integers(0, 12, n)
    sources = np.repeat(np.arange(n), counts)
    members = np.arange(0, n, 2)
    loops = 0
    for offset in (0, 7):
        chosen = np.flatnonzero(rng.random(len(sources) - offset) < 0.4)
        position = rng.integers(0, len(members) + 3, len(chosen))  # some past the end
        position[:5] = len(members)
        even = np.flatnonzero(sources[chosen + offset] % 2 == 0)[5:15]
        position[even] = sources[chosen + offset][even] // 2  # self-loops
        base = sources * scale
        target = members[np.minimum(position, len(members) - 1)]
        at = chosen + offset
        expected = base.copy()
        for j, edge in enumerate(at):  # the loop the kernel replaces
            own = target[j] == sources[edge]
            expected[edge] = -1 if own else base[edge] + target[j]
        loops += int((expected == -1).sum())
        twin = base.copy()
        kernels.link_targets_numpy(twin, chosen, offset, position.copy(), members, scale)
        np.testing.assert_array_equal(twin, expected)
        for count in (1, 2):
            threads(count)
            got = base.copy()
            kernels.link_targets(got, chosen, offset, position, members, scale)
            np.testing.assert_array_equal(got, expected)
    assert loops > 0  # self-loops were met


def test_a_guide_or_segment_counts_that_do_not_fit_are_rejected(compiled):
    a = np.cumsum(np.ones(10))
    with pytest.raises(ValueError, match="it has 5 buckets for 10 entries"):
        kernels.search_guided(a, a, kernels.guide_table(a[:5]))
    with pytest.raises(ValueError, match="keys holds 10"):
        kernels.distinct_segment_pairs(np.zeros(10, np.int64), np.array([4, 4]), 3)
    keys, members = np.zeros(10, np.int64), np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match=r"edge offsets 2\.\.9 \+ offset 1 are not allowed"):
        kernels.link_targets(keys, np.array([2, 9]), 1, np.zeros(2, np.int64), members, 3)
    with pytest.raises(ValueError, match="one per edge"):
        kernels.link_targets(keys, np.array([2, 3]), 0, np.zeros(1, np.int64), members, 3)
    with pytest.raises(ValueError, match="members is empty"):
        kernels.link_targets(keys, np.array([2]), 0, np.zeros(1, np.int64), members[:0], 3)


def test_distinct_segment_pairs_match_numpy(compiled, threads):
    rng = np.random.default_rng(22)
    for segments, scale in [(0, 5), (1, 3), (300, 40), (2000, 1000)]:
        counts = rng.integers(0, 30, segments)
        counts[:3] = 0  # empty segments, also at the start
        counts[3:5] = 120  # segments sorted by numba's sort, not by insertion
        owner = np.repeat(np.arange(segments), counts)
        keys = owner * scale + rng.integers(0, scale, len(owner))
        keys[rng.random(len(keys)) < 0.1] = -1  # dropped
        np.testing.assert_array_equal(
            kernels.segment_keys(counts, scale), kernels.segment_keys_numpy(counts, scale)
        )
        np.testing.assert_array_equal(kernels.segment_keys(counts, scale), owner * scale)
        into = np.full(len(owner), -7, np.int64)
        assert kernels.segment_keys(counts, scale, out=into) is into
        np.testing.assert_array_equal(into, owner * scale)
        kept = np.unique(keys[keys >= 0])
        expected = kernels.distinct_segment_pairs_numpy(keys.copy(), counts, scale, block=64)
        np.testing.assert_array_equal(expected[0], kept // scale)
        np.testing.assert_array_equal(expected[1], kept % scale)
        for count in (1, 2):
            threads(count)
            got = kernels.distinct_segment_pairs(keys.copy(), counts, scale)
            for have, want in zip(got, expected, strict=True):
                assert _bits(have) == _bits(want)
            # the segments written into an array the caller gives
            spare = np.full(len(kept) + 5, -7, np.int64)
            segment, _ = kernels.distinct_segment_pairs(
                keys.copy(), counts, scale, lambda size, spare=spare: spare[:size]
            )
            assert _bits(segment) == _bits(expected[0]) == _bits(spare[: len(kept)])
            assert (spare[len(kept) :] == -7).all()
        spare = np.full(len(kept), -7, np.int64)
        segment, _ = kernels.distinct_segment_pairs_numpy(
            keys.copy(), counts, scale, block=64, empty=lambda size, spare=spare: spare[:size]
        )
        assert _bits(segment) == _bits(expected[0]) == _bits(spare)


def test_segment_arrays_that_do_not_fit_are_rejected(compiled):
    counts = np.array([2, 3])
    with pytest.raises(ValueError, match=r"a C-contiguous \(5,\) int64 array"):
        kernels.segment_keys(counts, 4, out=np.empty(5, np.int32))
    keys = kernels.segment_keys(counts, 4) + np.array([0, 1, 0, 1, 2])
    with pytest.raises(ValueError, match=r"gave an array of shape \(4,\) and dtype int64"):
        kernels.distinct_segment_pairs(keys, counts, 4, lambda size: np.empty(size - 1, np.int64))


def test_one_blas_thread_limits_the_products_and_restores_the_setting() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from socialenv.core.clustering import ClusterIndex

    def blas_threads() -> list[int]:
        return [
            i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"
        ]

    if not blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    rng = np.random.default_rng(0)
    interest = rng.standard_normal((3000, 16)).astype(np.float32)
    centroids = rng.standard_normal((12, 16)).astype(np.float32)
    index = ClusterIndex.build(rng.integers(0, 12, 500).astype(np.int16), 12, 0, 500)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        outside = blas_threads()
        with pytest.raises(RuntimeError, match="inside"):
            with kernels.one_blas_thread():
                assert blas_threads() == [1] * len(outside)
                raise RuntimeError("inside")
        assert blas_threads() == outside  # restored after an error too
        threaded = index.draw(interest, centroids, 4, np.random.default_rng(1))
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        single = index.draw(interest, centroids, 4, np.random.default_rng(1))
    np.testing.assert_array_equal(threaded, single)


def test_edit_plan_matches_numpy_and_rejects_ids_outside_the_graph(compiled):
    rng = np.random.default_rng(21)
    n = 150
    graph = FollowGraph(n, rng.integers(0, n, 1200), rng.integers(0, n, 1200))
    indptr, indices = graph.followees_csr()
    changed = 0
    for step in range(30):
        m = int(rng.integers(0, 200))
        fs, fd = rng.integers(0, n, m), rng.integers(0, n, m)
        us, ud = rng.integers(0, n, m // 2), rng.integers(0, n, m // 2)
        us[: m // 8], ud[: m // 8] = fs[: m // 8], fd[: m // 8]  # added and removed again
        if step % 3 == 0:  # existing edges removed
            keys = graph.keys[rng.integers(0, len(graph), m // 2)]
            us, ud = keys // n, keys % n
        if step == 7:  # only repeats of existing edges and self-follows: no change
            keys = graph.keys[:5]
            fs, fd, us, ud = np.r_[keys // n, 3], np.r_[keys % n, 3], us[:0], ud[:0]
        expected = kernels.edit_plan_numpy(indptr, indices, n, fs, fd, us, ud)
        got = kernels.edit_plan(indptr, indices, n, fs, fd, us, ud)
        assert got[:2] == expected[:2]
        assert (got[2] is None) == (expected[2] is None)
        if expected[2] is not None:
            changed += 1
            for g, e in zip(got[2], expected[2], strict=True):
                assert _bits(g.astype(np.int64)) == _bits(e.astype(np.int64))
    assert changed > 20
    for bad in ((np.array([n]), np.array([0])), (np.array([0]), np.array([-1]))):
        with pytest.raises(ValueError, match=r"user ids in \[0, 150\)"):
            kernels.edit_plan(indptr, indices, n, *bad, bad[0][:0], bad[0][:0])


def test_distinct_sorted_edges_matches_numpy_and_the_graph_takes_either_path(compiled):
    """The compiled check of a scenario's edge order agrees with the NumPy one on sorted,
    repeated, self-looping and unsorted edges (int64 and int32), and a graph built from sorted
    distinct edges equals one built from the same edges shuffled with repeats and
    self-loops."""
    rng = np.random.default_rng(4)
    n = 200
    keys = np.unique(rng.integers(0, n * n, 3000))
    src, dst = keys // n, keys % n
    keep = src != dst
    src, dst = src[keep], dst[keep]
    cases = {
        "sorted": (src, dst),
        "repeat": (np.r_[src[:5], src[4], src[5:]], np.r_[dst[:5], dst[4], dst[5:]]),
        "self_loop": (np.r_[src[:3], 7, src[3:]], np.r_[dst[:3], 7, dst[3:]]),
        "unsorted": (src[::-1].copy(), dst[::-1].copy()),
        "dst_down": (np.r_[src[:1], src[:1]], np.r_[dst[:1] + 1, dst[:1]]),
        "empty": (src[:0], dst[:0]),
        "one": (src[:1], dst[:1]),
    }
    compiled_check = compiled["distinct_sorted_edges"]
    for name, (s, d) in cases.items():
        for dtype in (np.int64, np.int32):
            a, b = s.astype(dtype), d.astype(dtype)
            expected = kernels.distinct_sorted_edges_numpy(a, b)
            assert compiled_check(a, b) == expected, name
            assert expected == (name in ("sorted", "empty", "one")), name
    order = rng.permutation(len(src))
    messy_src = np.r_[src[order], src[:40], 3, 9]
    messy_dst = np.r_[dst[order], dst[:40], 3, 9]
    sorted_graph, messy_graph = FollowGraph(n, src, dst), FollowGraph(n, messy_src, messy_dst)
    for left, right in zip(sorted_graph.followees_csr(), messy_graph.followees_csr(), strict=True):
        assert _bits(left) == _bits(right)
