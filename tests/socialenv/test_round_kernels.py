"""Issue 24's million-user round: the personalized channel's kernels equal their NumPy twins
and the code they replaced, and every threaded kernel and block-threaded phase gives one
thread's results bit for bit (socialenv.core.kernels, policysim_infra.blocks)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agent_models.types import Behaviour, FeedChannel
from socialenv.core import kernels, metrics
from tests.support import bits as _bits

numba = pytest.importorskip("numba")
# the Rec envs here keep the default lever: thousands of arms, as at scale
pytestmark = pytest.mark.filterwarnings("ignore::socialenv.envs.sizing.LargeActionSpaceWarning")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_sum_rows_bit_identical_to_numpy(compiled, dtype):
    rng = np.random.default_rng(20)
    first = rng.standard_normal((3000, 32)).astype(dtype)
    second = rng.standard_normal((3000, 32)).astype(dtype)
    rows = rng.integers(0, 3000, 5000)  # repeats, any order
    expected = first.take(rows, axis=0) + second.take(rows, axis=0)
    assert _bits(kernels.gather_sum_rows_numpy(first, second, rows)) == _bits(expected)
    for kernel in (compiled["gather_sum_rows"], kernels._compiled_parallel["gather_sum_rows"]):
        assert _bits(kernel(first, second, rows)) == _bits(expected)
    assert _bits(kernels.gather_sum_rows(first, second, rows[:0])) == _bits(expected[:0])


def _personalized_inputs(rng: np.random.Generator, b: int = 3000, c: int = 20):
    candidate = rng.integers(0, 400, (b, c))
    candidate[rng.random((b, c)) < 0.05] = -1  # the twin must agree on these too
    score = rng.integers(-3, 4, (b, c)).astype(np.float32) / np.float32(3)  # many ties
    score[rng.random((b, c)) < 0.01] = np.nan
    stance = rng.uniform(-1, 1, b).astype(np.float32)
    post_stance = rng.uniform(-1, 1, 400).astype(np.float32)
    post_stance[:20] = 0.0
    return candidate, score, stance, post_stance


@pytest.mark.parametrize("weight", [1.0, 0.37, 0.0])
def test_stance_top_k_equals_the_scores_it_replaced(compiled, weight):
    rng = np.random.default_rng(21)
    candidate, score, stance, post_stance = _personalized_inputs(rng)
    # the personalized channel before: the stance term added by NumPy, then top_k_rows
    before = score.copy()
    before += weight * stance[:, None] * post_stance[candidate]
    expected = kernels.top_k_rows_numpy(candidate, before, 5, False)
    weighted = weight * stance
    for top_k in (compiled["stance_top_k"], kernels.stance_top_k_rows_numpy):
        got_score = score.copy()
        got = top_k(candidate, got_score, weighted, post_stance, 5)
        assert _bits(got) == _bits(expected)
        assert _bits(got_score) == _bits(before)


def test_threaded_row_kernels_equal_one_thread(compiled):
    """Every kernel with a threaded version, on enough rows for several blocks per thread."""
    parallel = kernels._compiled_parallel
    rng = np.random.default_rng(22)
    candidate, score, _, _ = _personalized_inputs(rng, b=5000)
    for drop in (False, True):
        one_score, two_score = score.copy(), score.copy()
        one = compiled["top_k_rows"](candidate, one_score, 5, drop)
        assert _bits(parallel["top_k_rows"](candidate, two_score, 5, drop)) == _bits(one)
        assert _bits(two_score) == _bits(one_score)
        assert _bits(one) == _bits(kernels.top_k_rows_numpy(candidate, score.copy(), 5, drop))

    latent = rng.standard_normal((9000, 32)).astype(np.float32)
    memory = rng.standard_normal((6000, 32)).astype(np.float32)
    lengths = rng.integers(1, 20, 4000)
    who = np.sort(rng.choice(6000, len(lengths), replace=False))
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = rng.integers(0, len(latent), lengths.sum())
    keep = np.array([0.8, 0.2], np.float32)
    expected, one, two = memory.copy(), memory.copy(), memory.copy()
    kernels.memory_update_numpy(expected, latent, rows, first, who, 0.8)
    assert compiled["memory_update"](one, latent, rows, first, who, keep)
    assert parallel["memory_update"](two, latent, rows, first, who, keep)
    assert _bits(one) == _bits(expected) and _bits(two) == _bits(expected)

    cluster = rng.integers(0, 16, 5000)
    by_cluster = np.argsort(cluster, kind="stable")
    cluster_start = np.searchsorted(cluster[by_cluster], np.arange(17))
    user_cluster, draw = rng.integers(0, 16, 4000), rng.random((4000, 20))
    args = (draw, user_cluster, cluster_start, by_cluster, 100, 5100)
    assert _bits(parallel["cluster_draws"](*args)) == _bits(kernels.cluster_draws_numpy(*args))

    feed = rng.integers(-1, 5000, (4000, 15))
    owner = rng.integers(0, 300, 4000)
    author = rng.integers(0, 300, 5000)
    assert _bits(parallel["drop_own_and_repeated"](feed, owner, author)) == _bits(
        kernels.drop_own_and_repeated_numpy(feed, owner, author)
    )
    exposure, filter_draw = rng.random(300), rng.random(feed.shape)
    got, removed = parallel["exposure_filter"](feed, author, exposure, filter_draw)
    want, want_removed = kernels.exposure_filter_numpy(feed, author, exposure, filter_draw)
    assert _bits(got) == _bits(want) and removed == want_removed > 0
    for feed_rows in (feed, feed[:0], np.full((3000, 4), -1)):
        filtered = feed_rows.copy()
        filtered[::3] = -1
        owner = rng.integers(0, 300, len(feed_rows))
        want = kernels.feed_impressions_numpy(feed_rows, filtered, owner, author)
        for kernel in (compiled["feed_impressions"], parallel["feed_impressions"]):
            have = kernel(feed_rows, filtered, owner, author)
            for got_part, want_part in zip(have, want, strict=True):
                assert _bits(got_part) == _bits(want_part)


@pytest.mark.parametrize("n", [1000, 300_000])
def test_merge_edits_in_pieces_equals_numpy(compiled, n):
    """300,000 values: 4 pieces, with insertions and drops on the pieces' boundaries, at the
    start and at the end."""
    rng = np.random.default_rng(23)
    values = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    new = np.setdiff1d(rng.integers(-5, 10 * n + 5, n // 20), values)
    at = np.searchsorted(values, new)
    pieces = max(1, min(64, n // 65536))
    bounds = [n * p // pieces for p in range(pieces + 1)]
    on_bounds = np.array([b for b in bounds if b < n] + [0, n - 1])
    drop = np.unique(np.concatenate([rng.choice(n, n // 30, replace=False), on_bounds]))
    # insert right at the boundaries too (values between the neighbours, or equal ones)
    extra_at = np.array(bounds, np.int64)
    extra_new = np.array([values[min(b, n - 1)] - (b < n) for b in bounds], np.int64)
    order = np.argsort(np.concatenate([at, extra_at]), kind="stable")
    at = np.concatenate([at, extra_at])[order]
    new = np.concatenate([new, extra_new])[order]
    size = n + len(new) - len(drop)
    expected = kernels.merge_edits_numpy(values, drop, at, new, np.empty(size, np.int64))
    for merge in (compiled["merge_edits"], kernels._compiled_parallel["merge_edits"]):
        assert _bits(merge(values, drop, at, new, np.empty(size, np.int64))) == _bits(expected)


def test_find_edges_is_searchsorted_in_the_sorted_keys(compiled):
    """Edges and non-edges (empty rows, the first and last users, keys past a row's last
    followee), sorted and shuffled: every kernel gives np.searchsorted's position among the
    graph's sorted keys and whether the key is there."""
    from socialenv.core.world import FollowGraph

    rng = np.random.default_rng(24)
    n = 500
    src, dst = rng.integers(0, n, 6000), rng.integers(0, n, 6000)
    src[src % 7 == 3] = 8  # users 3, 10, 17, ... follow nobody
    graph = FollowGraph(n, src, dst)
    keys = graph.keys
    queries = np.concatenate(
        [
            keys[rng.choice(len(keys), 400, replace=False)],
            rng.integers(0, n * n, 3000),
            np.array([0, n - 1, n * n - 1, (n - 1) * n, 3 * n + 5, keys[-1], keys[0]]),
        ]
    )
    want_pos = np.searchsorted(keys, queries)
    want_found = np.isin(queries, keys)
    indptr, indices = graph.followees_csr()
    for order in (np.arange(len(queries)), rng.permutation(len(queries))):
        q = queries[order]
        pos, found = kernels.find_edges(indptr, indices, q, n)
        np.testing.assert_array_equal(pos, want_pos[order])
        np.testing.assert_array_equal(found, want_found[order])
        for kernel in (
            compiled["find_edges"],
            kernels._compiled_parallel["find_edges"],
            kernels.find_edges_numpy,
        ):
            pos, found = np.empty(len(q), np.int64), np.empty(len(q), bool)
            kernel(indptr, indices, q, n, pos, found)
            np.testing.assert_array_equal(pos, want_pos[order])
            np.testing.assert_array_equal(found, want_found[order])
    with pytest.raises(ValueError, match=r"edge keys must lie in \[0, 250000\)"):
        kernels.find_edges(indptr, indices, np.array([n * n]), n)


def test_personalized_channel_equals_the_one_pass_version_on_any_thread_count(backend, threads):
    """The blocked channel against the code it replaced (one chunk: interests by two gathers,
    scores by one einsum over the chunk, the stance term by NumPy), on 1 and 2 threads."""
    from socialenv.core.clustering import ClusterIndex
    from socialenv.core.platform import Recommender
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=3000, rounds=4)
    env.reset(seed=3)
    env.step(np.full(env.slate_size, env.no_op))
    sim = env.unwrapped.sim
    ctx, active = sim.feed_context(), sim.active
    recommender = Recommender(sim.config.recommender)
    cfg = recommender.config

    def before(rng: np.random.Generator) -> np.ndarray:
        lo, hi = ctx.posts_of_rounds(ctx.round - cfg.window, ctx.round - 1)
        index = ClusterIndex.build(ctx.posts.cluster, len(ctx.centroids), lo, hi)
        interest = ctx.users.latent.take(active, axis=0) + ctx.users.memory_latent.take(
            active, axis=0
        )
        n_candidates = cfg.personalized * cfg.candidates_per_slot
        candidate = index.draw(interest, ctx.centroids, n_candidates, rng)
        score = np.einsum("bd,bcd->bc", interest, ctx.posts.latent.take(candidate, axis=0))
        score += (
            cfg.personalized_stance_weight
            * ctx.users.stance[active][:, None]
            * ctx.posts.stance[candidate]
        )
        return kernels.top_k_rows(candidate, score, cfg.personalized)

    expected = before(np.random.default_rng(5))
    assert len(active) > 600
    for n_threads in (1, 2):
        threads(n_threads)
        got = recommender.personalized(ctx, active, np.random.default_rng(5), block=128)
        assert _bits(got) == _bits(expected), n_threads
        # the draws of several chunks are the draws of one
        chunked = recommender.personalized(ctx, active, np.random.default_rng(5), chunk=250)
        assert _bits(chunked) == _bits(expected), n_threads
    env.close()


def test_candidates_and_reactions_are_the_same_on_two_threads(backend, threads):
    """The Rec candidates' blocked scoring and the surrogate's blocked reaction probabilities
    and hits on 1 and 2 threads (small blocks, so each call has many)."""
    from socialenv.core import candidates
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=2000, rounds=4)
    env.reset(seed=4)
    env.step(np.full(env.slate_size, env.no_op))
    sim = env.unwrapped.sim
    rng = np.random.default_rng(6)
    interest = rng.standard_normal((900, sim.posts.latent.shape[1])).astype(np.float32)
    draws = rng.integers(-1, len(sim.posts), (900, 12))
    owner = sim.active[rng.integers(0, len(sim.active), 3000)]
    feed = rng.integers(-1, len(sim.posts), (3000, 9))
    feed[rng.random(feed.shape) < 0.1] = -1
    channel = rng.integers(0, 4, feed.shape).astype(np.int8)
    reaction_draws = rng.random((4, 3000, 9), dtype=np.float32)
    users, posts = sim.users.view(), sim.posts.view()
    attitudes = sim.brain.attitude(users)
    results = []
    for n_threads in (1, 2):
        threads(n_threads)
        best = candidates._best_of(interest, sim.posts.latent, draws, 4, block=64)
        hits = sim.brain._blocked_hits(
            users, posts, owner, feed, channel, attitudes, reaction_draws, chunk=1024, block=256
        )
        results.append((best, hits))
    (best_one, hits_one), (best_two, hits_two) = results
    assert _bits(best_two) == _bits(best_one)
    one_call = kernels.top_k_rows(
        draws,
        np.einsum(
            "ud,umd->um", interest, sim.posts.latent.take(np.where(draws >= 0, draws, 0), axis=0)
        ),
        4,
        drop_nonfinite=True,
    )
    assert _bits(best_one) == _bits(one_call)
    # the reference: one unblocked call per chunk of 1,024 rows, chunk after chunk
    cfg = sim.brain.config
    injected = channel == FeedChannel.INJECTED
    attention = (
        injected * cfg.promoted_attention
        + (injected | (channel == FeedChannel.PERSONALIZED)) * cfg.recommended_attention
    )
    chunks = []
    for lo in range(0, 3000, 1024):
        rows = slice(lo, lo + 1024)
        prob = sim.brain._probabilities(
            users, posts, owner[rows, None], np.maximum(feed[rows], 0), attention[rows], attitudes
        )
        # each slot's behaviours whose draw is below its probability, behaviour-major
        p = np.stack([prob[name] for name in ("like", "dislike", "retweet", "reply")])
        i, r, c = np.nonzero((feed[rows] >= 0) & (reaction_draws[:, rows] < p))
        kinds = np.array(
            [Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY], np.int8
        )
        chunks.append((r + lo, feed[rows][r, c], kinds[i], prob["gap"][r, c]))
    expected = [np.concatenate([chunk[column] for chunk in chunks]) for column in range(4)]
    assert len(expected[0]) > 1000  # hits of every behaviour in every block
    assert len(np.unique(expected[2])) == 4
    for got_one, got_two, want in zip(hits_one, hits_two, expected, strict=True):
        assert _bits(got_two) == _bits(got_one) == _bits(want)
    with pytest.raises(ValueError, match="chunk=1000 is not allowed"):
        sim.brain._blocked_hits(
            users, posts, owner, feed, channel, attitudes, reaction_draws, chunk=1000, block=256
        )
    env.close()


def test_share_latents_equal_the_one_pass_version(backend, threads):
    """kernels.share_latents (the NumPy version in small blocks too), on 1 and 2 threads,
    against the code it replaced: a retweet's latent is its post's, a reply's the unit sum
    with its writer's; written into the rows given, as the post table's next rows are."""
    from socialenv.envs.rec import RecEnv

    env = RecEnv(num_users=1000, rounds=3)
    env.reset(seed=9)
    env.step(np.full(env.slate_size, env.no_op))
    sim = env.unwrapped.sim
    source, writer = sim.posts.latent, sim.users.latent
    rng = np.random.default_rng(9)
    post = rng.integers(0, len(sim.posts), 5000)
    user = rng.integers(0, len(sim.users.stance), 5000)
    is_reply = rng.random(5000) < 0.4
    is_reply[:3] = True  # a reply whose sum is zero: the norm's floor
    user[:3] = post[:3] % len(writer)
    writer = writer.copy()
    writer[user[:3]] = -source[post[:3]]
    expected = source.take(post, axis=0)
    mix = expected[is_reply] + writer.take(user[is_reply], axis=0)
    expected[is_reply] = mix / np.maximum(np.linalg.norm(mix, axis=1, keepdims=True), 1e-8)
    for n_threads in (1, 2):
        threads(n_threads)
        got = np.full((len(post) + 4, source.shape[1]), np.nan, np.float32)
        kernels.share_latents(source, writer, post, user, is_reply, got[2:-2])
        assert _bits(got[2:-2]) == _bits(expected), n_threads
        assert np.isnan(got[:2]).all() and np.isnan(got[-2:]).all()
        for block in (7, 64, 65_536):
            got = np.empty_like(expected)
            kernels.share_latents_numpy(source, writer, post, user, is_reply, got, block=block)
            assert _bits(got) == _bits(expected), (n_threads, block)
    no_reply = np.zeros(len(post), bool)
    got = np.empty_like(expected)
    kernels.share_latents(source, writer, post, user, no_reply, got)
    assert _bits(got) == _bits(source.take(post, axis=0))
    kernels.share_latents(source, writer, post[:0], user[:0], is_reply[:0], got[:0])
    with pytest.raises(ValueError):  # a writer table of other columns: NumPy's error
        kernels.share_latents(source, writer[:, :8], post, user, is_reply, got)
    env.close()


def test_cluster_draws_with_blocked_products_equal_the_whole_product(threads):
    """ClusterIndex.draw takes each user's nearest centre from its block's product (8,192
    rows): the clusters, and so the draws, of the one product over all rows it replaced, on 1
    and 2 threads."""
    from socialenv.core.clustering import ClusterIndex

    rng = np.random.default_rng(6)
    interest = rng.standard_normal((20_000, 32)).astype(np.float32)
    centroids = rng.standard_normal((24, 32)).astype(np.float32)
    cluster = rng.integers(0, 24, 5_000).astype(np.int16)
    index = ClusterIndex.build(cluster, 24, 1_000, 5_000)
    with kernels.one_blas_thread():
        nearest = np.argmax(interest @ centroids.T, axis=1)
    draw = np.random.default_rng(7).random((len(interest), 6))
    expected = kernels.cluster_draws(
        draw, nearest, index.cluster_start, index.by_cluster, index.lo, index.hi
    )
    for n_threads in (1, 2):
        threads(n_threads)
        got = index.draw(interest, centroids, 6, np.random.default_rng(7))
        assert _bits(got) == _bits(expected), n_threads


def test_assign_clusters_on_threads_equal_the_chunk_loop(threads):
    """The chunks' products on 1 and 2 threads give the clusters of the former loop over the
    same chunks (a chunk's product is the same whoever runs it)."""
    from socialenv.core.clustering import assign_clusters

    rng = np.random.default_rng(4)
    latent = rng.standard_normal((5000, 32)).astype(np.float32)
    centroids = rng.standard_normal((16, 32)).astype(np.float32)
    for chunk in (700, 4096, 262_144):
        expected = np.empty(len(latent), np.int16)
        with kernels.one_blas_thread():
            for lo in range(0, len(latent), chunk):
                expected[lo : lo + chunk] = np.argmax(latent[lo : lo + chunk] @ centroids.T, axis=1)
        for n_threads in (1, 2):
            threads(n_threads)
            got = assign_clusters(latent, centroids, chunk=chunk)
            assert got.dtype == np.int16
            np.testing.assert_array_equal(got, expected)
    assert assign_clusters(latent[:0], centroids).shape == (0,)


@pytest.mark.parametrize("local", [False, True])
def test_context_at_the_start_propagates_the_profile_half_once(backend, monkeypatch, local):
    """At round 0 the memory embedding is the profile embedding: user_context propagates the
    profile half once and repeats it, the rows of propagating both halves; once reactions have
    moved the memory it propagates both (whole table and local neighbourhoods alike)."""
    from socialenv.core import simulation
    from socialenv.envs.rec import RecEnv

    if local:
        monkeypatch.setattr(simulation, "LOCAL_PROPAGATION_USERS", 100)
    env = RecEnv(num_users=800, rounds=3)
    env.reset(seed=10)
    sim = env.unwrapped.sim
    rows = np.unique(np.random.default_rng(10).integers(0, 800, 90))
    assert sim.round == 0 and _bits(sim.users.latent) == _bits(sim.users.memory_latent)
    for wanted in (rows, None):
        got = sim.user_context(wanted)
        d = sim.users.latent.shape[1]
        assert _bits(got[:, :d]) == _bits(got[:, d:])  # the halves repeat
        assert _bits(got) == _bits(sim._propagated(None, wanted))
    env.step(np.full(env.slate_size, env.no_op))
    assert _bits(sim.users.latent) != _bits(sim.users.memory_latent)
    assert _bits(sim.user_context(rows)) == _bits(sim._propagated(None, rows))
    env.close()


def test_local_propagation_threshold_depends_on_the_kernels(backend, monkeypatch):
    """The compiled kernels propagate arm contexts locally from
    COMPILED_LOCAL_PROPAGATION_USERS, the NumPy ones only from the larger
    LOCAL_PROPAGATION_USERS (where SciPy's local products start to pay); a smaller
    LOCAL_PROPAGATION_USERS applies to both."""
    from socialenv.core import simulation

    expected = (
        simulation.COMPILED_LOCAL_PROPAGATION_USERS
        if backend == "numba"
        else simulation.LOCAL_PROPAGATION_USERS
    )
    assert simulation.local_propagation_users() == expected
    assert simulation.COMPILED_LOCAL_PROPAGATION_USERS < simulation.LOCAL_PROPAGATION_USERS
    monkeypatch.setattr(simulation, "LOCAL_PROPAGATION_USERS", 100)
    assert simulation.local_propagation_users() == 100


def test_episode_with_local_propagation_is_the_whole_table_episode(compiled, monkeypatch):
    """A Rec episode of 3,000 users observes the same arm contexts, rewards and metrics with
    its arm contexts propagated locally as with every user propagated each step."""
    from socialenv.core import simulation
    from socialenv.envs.rec import RecEnv

    def episode(threshold: int) -> list[Any]:
        monkeypatch.setattr(simulation, "COMPILED_LOCAL_PROPAGATION_USERS", threshold)
        env = RecEnv(num_users=3000, rounds=4)
        obs, _ = env.reset(seed=5)
        rng = np.random.default_rng(5)
        out: list[Any] = [_bits(obs["arms"])]
        for _ in range(4):
            obs, reward, _, _, info = env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
            out += [_bits(obs["arms"]), _bits(np.float64(reward)), repr(info["metrics"])]
        env.close()
        return out

    calls: list[bool] = []
    propagate_rows = kernels.propagate_rows

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(True)
        return propagate_rows(*args, **kwargs)

    monkeypatch.setattr(kernels, "propagate_rows", spy)
    local = episode(1000)
    assert len(calls) == 5  # the reset's observation and each step's
    assert episode(10**9) == local
    assert len(calls) == 5


def test_episode_on_two_threads_is_the_one_thread_episode(threads):
    """A whole Rec episode, block-threaded phases included (20,000 users: several blocks of the personalized channel)."""
    import hashlib

    from socialenv.envs.rec import RecEnv

    digests = []
    for n_threads in (1, 2):
        threads(n_threads)
        env = RecEnv(num_users=20_000, rounds=4)
        obs, _ = env.reset(seed=8)
        rng = np.random.default_rng(8)
        h = hashlib.sha256()
        for _ in range(3):
            obs, reward, _, _, info = env.step(rng.integers(0, env.num_arms + 1, env.slate_size))
            h.update(np.ascontiguousarray(obs["arms"]).tobytes())
            h.update(np.float64(reward).tobytes())
            h.update(repr(sorted(info["metrics"].items())).encode())
        env.close()
        digests.append(h.hexdigest())
    assert digests[0] == digests[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out_dtype", [np.int16, np.int64])
def test_argmax_rows_is_numpys_argmax(compiled, dtype, out_dtype):
    """Each row's first maximum, ties, infinities and NaN (the first NaN wins) as NumPy."""
    rng = np.random.default_rng(31)
    for rows, width in [(0, 3), (1, 1), (500, 16), (300, 7)]:
        score = rng.integers(-2, 3, (rows, width)).astype(dtype)  # many ties
        if rows > 10:
            score[3, 2 % width] = np.nan
            score[5, 0] = np.nan
            score[7, :] = np.nan
            score[9, width - 1] = np.inf
            score[10, :] = -np.inf
        expected = np.argmax(score, axis=1).astype(out_dtype)
        for argmax_rows in (kernels.argmax_rows, kernels.argmax_rows_numpy):
            out = np.full(rows, -5, out_dtype)
            argmax_rows(score, out)
            assert _bits(out) == _bits(expected)
    with pytest.raises(ValueError, match="score must be"):
        kernels.argmax_rows(np.zeros((4, 0)), np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="score must be"):
        kernels.argmax_rows(np.zeros((4, 2)), np.zeros(3, np.int64))


def test_assign_clusters_by_default_chunk_is_the_whole_product():
    """The default chunk of assign_clusters (smaller than before, so that a round's posts
    spread over the threads) gives each row the cluster of one product of every row."""
    from socialenv.core.clustering import assign_clusters

    rng = np.random.default_rng(5)
    latent = rng.standard_normal((140_000, 32)).astype(np.float32)
    centroids = rng.standard_normal((16, 32)).astype(np.float32)
    with kernels.one_blas_thread():
        expected = np.argmax(latent @ centroids.T, axis=1)
    np.testing.assert_array_equal(assign_clusters(latent, centroids), expected)


@pytest.mark.parametrize("num_clusters", [1, 16, 4096])
def test_cluster_order_is_the_stable_sort_of_the_ids(compiled, num_clusters):
    rng = np.random.default_rng(32)
    for n in (0, 1, 5000):
        cluster = rng.integers(0, num_clusters, n).astype(np.int16)
        order, start = kernels.cluster_order(cluster, num_clusters)
        expected = np.argsort(cluster, kind="stable")
        assert _bits(order) == _bits(expected)
        assert _bits(start) == _bits(
            np.searchsorted(cluster[expected], np.arange(num_clusters + 1))
        )
        twin = kernels.cluster_order_numpy(cluster, num_clusters)
        assert _bits(order) == _bits(twin[0]) and _bits(start) == _bits(twin[1])
    # an id outside [0, num_clusters): the twin's sort, whose starts count it where it sorts
    cluster = np.array([2, -1, 0, 5, 0], np.int16)
    order, start = kernels.cluster_order(cluster, 3)
    assert order.tolist() == [1, 2, 4, 0, 3] and start.tolist() == [1, 3, 3, 4]


@pytest.mark.parametrize("n_threads", [1, 2])
def test_reaction_ends_equal_the_numpy_twin(compiled, threads, n_threads):
    threads(n_threads)
    rng = np.random.default_rng(33)
    discrete = rng.integers(-1, 2, 500).astype(np.int8)
    post_author = rng.integers(0, 500, 2000)
    for r in (0, 1, 30_000):
        react_user = rng.integers(0, 500, r)
        react_post = rng.integers(0, 2000, r)
        got = kernels.reaction_ends(react_user, react_post, post_author, discrete)
        expected = kernels.reaction_ends_numpy(react_user, react_post, post_author, discrete)
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and _bits(a) == _bits(b)
    author, cross = got
    assert (author == post_author[react_post]).all()
    mine, theirs = discrete[react_user], discrete[author]
    assert (cross == ((mine == -theirs) & (mine != 0))).all()
    assert cross.mean() == metrics.cross_interaction_ratio(mine, theirs)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_reaction_choices_hash_table_answers_as_the_twin(compiled, threads, n_threads):
    """Many arms (their hash slots collide and probe), repeated keys (the last arm answers),
    keys far apart and negative ones, on 1 and 2 threads."""
    threads(n_threads)
    rng = np.random.default_rng(34)
    arm_key = np.concatenate(
        [
            rng.integers(-(2**62), 2**62, 20_000),
            rng.integers(0, 3_000, 20_000) << 32,  # keys equal in their low 32 bits
            np.array([5, 5, -7, 5], np.int64),
        ]
    )
    react_key = np.concatenate(
        [rng.choice(arm_key, 30_000), rng.integers(-(2**62), 2**62, 30_000), [5, -7, 6]]
    )
    got = kernels.reaction_choices(arm_key, react_key)
    assert _bits(got) == _bits(kernels.reaction_choices_numpy(arm_key, react_key))
    assert got[-3:].tolist() == [len(arm_key) - 1, len(arm_key) - 2, -1]


def test_every_row_is_exactly_the_ids_in_order():
    """The stance update takes the whole columns only for ids 0..n-1 in order."""
    from socialenv.core.simulation import _every_row

    assert _every_row(np.arange(5), 5) and _every_row(np.zeros(0, np.int64), 0)
    for rows, n in [
        (np.arange(5)[::-1], 5),
        (np.array([0, 1, 1, 3, 4]), 5),
        (np.array([0, 2, 2, 3, 4]), 5),
        (np.arange(4), 5),
        (np.arange(6), 5),
        (np.array([0, 3, 1, 2, 4]), 5),
    ]:
        assert not _every_row(rows, n), rows
