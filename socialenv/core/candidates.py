"""Candidate generation for PolicySim-Rec-v0: the first stage of a two-stage recommender.

For each user of the round's sampled set U, a small candidate set of recent posts is drawn
from four sources, the way a production recommender's retrieval stage mixes them:

- ``interest``: posts nearest the user's interests (profile ⊕ memory embedding), scored on a
  sample from the user's IVF cluster (as the built-in personalized channel does);
- ``opposite``: posts whose stance is opposite to the user's discrete stance (either side
  for a neutral user), the most interesting of a sample;
- ``popular``: the most interesting of a sample from the most engaged recent posts;
- ``fresh``: posts of the last round that were never recommended before (random).

The policy (the second, ranking stage) then picks which candidates fill the user's
recommended slots. Everything is vectorized over the users; every draw comes from ``rng``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from socialenv.core import kernels
from socialenv.core.clustering import ClusterIndex
from socialenv.core.config import CANDIDATE_SOURCES
from socialenv.core.platform import FeedContext

#: Users up to which :func:`generate_candidates` runs as three compiled kernels around one
#: uniform draw and one scoring product (numba kernels): unfused, a round's candidates take
#: about a hundred NumPy calls, most of the time at a 1,000-user world's ~50 users. Above it
#: the unfused path's blocks run on :func:`kernels.map_blocks`' threads. Both give the same
#: candidates and leave ``rng`` in the same state.
FUSED_CANDIDATE_USERS = 2048


@dataclass(frozen=True)
class CandidateSet:
    """Candidates of one round.

    Attributes:
        post: (U, C) post ids, -1 where a source had nothing to offer.
        source: (U, C) int8 index into :data:`CANDIDATE_SOURCES`.
    """

    post: np.ndarray
    source: np.ndarray


def _best_of(
    interest: np.ndarray, latent: np.ndarray, draws: np.ndarray, keep: int, block: int = 2048
) -> np.ndarray:
    """(U, keep) entries of ``draws`` (U, M) post ids (-1 = none) with the highest interest
    similarity ``interest`` (U, d)·latent[post]; ``block`` users at a time (their gathered
    rows stay in cache), on :func:`kernels.map_blocks`' threads (rows scored on their own)."""
    best = np.empty((len(draws), min(keep, draws.shape[1])), np.int64)

    def run(lo: int, hi: int) -> None:
        rows = draws[lo:hi]
        score = np.einsum(
            "ud,umd->um", interest[lo:hi], latent.take(np.where(rows >= 0, rows, 0), axis=0)
        )
        best[lo:hi] = kernels.top_k_rows(rows, score, keep, drop_nonfinite=True)

    kernels.map_blocks(run, len(draws), block)
    return best


def _sample(pool: np.ndarray, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """(U, M) uniform draws from ``pool`` (ids), -1 everywhere if the pool is empty."""
    if len(pool) == 0:
        return np.full(size, -1, np.int64)
    return pool[(kernels.random_in_blocks(rng, size) * len(pool)).astype(np.int64)]


def generate_candidates(
    ctx: FeedContext,
    users: np.ndarray,
    mix: dict[str, int],
    window: int,
    popular_pool: int,
    rng: np.random.Generator,
    oversample: int = 4,
) -> CandidateSet:
    """Candidates for the users ``users`` (U,) from the posts of the last ``window`` rounds.

    Args:
        ctx: the world as the recommender sees it.
        users: (U,) user ids.
        mix: posts per source (keys of :data:`CANDIDATE_SOURCES`); C = sum of the values.
        window: rounds of posts that are candidates.
        popular_pool: the ``popular`` source samples from this many most engaged posts.
        rng: the round's arm stream.
        oversample: draws per kept candidate of the interest / opposite / popular sources.
    """
    if kernels.BACKEND == "numba" and 0 < len(users) <= FUSED_CANDIDATE_USERS:
        fused = _fused_candidates(ctx, users, mix, window, popular_pool, rng, oversample)
        if fused is not None:
            return fused
    u = len(users)
    lo, hi = ctx.posts_of_rounds(ctx.round - window, ctx.round - 1)
    posts, people = ctx.posts, ctx.users
    interest = kernels.gather_sum_rows(people.latent, people.memory_latent, users)
    parts: list[np.ndarray] = []
    sources: list[np.ndarray] = []
    recent = np.arange(lo, hi, dtype=np.int64)
    for index, name in enumerate(CANDIDATE_SOURCES):
        k = int(mix.get(name, 0))
        if k == 0:
            continue
        m = oversample * k
        if name == "interest":
            draws = _interest_draws(ctx, interest, lo, hi, m, rng)
        elif name == "opposite":
            stance = posts.stance[lo:hi]
            negative, positive = recent[stance < -1 / 3], recent[stance > 1 / 3]
            user_sign = people.discrete_stance[users]
            from_negative = _sample(negative, (u, m), rng)
            from_positive = _sample(positive, (u, m), rng)
            coin = rng.random((u, 1)) < 0.5
            take_negative = (user_sign[:, None] > 0) | ((user_sign[:, None] == 0) & coin)
            draws = np.where(take_negative, from_negative, from_positive)
        elif name == "popular":
            engagement = posts.likes[lo:hi] + 2 * posts.retweets[lo:hi] + posts.replies[lo:hi]
            pool = recent[kernels.most_first(engagement, popular_pool)]
            draws = _sample(pool, (u, m), rng)
        else:
            last_lo, last_hi = ctx.posts_of_rounds(ctx.round - 1, ctx.round - 1)
            last = np.arange(last_lo, last_hi, dtype=np.int64)
            unseen = last[~posts.recommended[last_lo:last_hi]]
            pool = unseen if len(unseen) >= k else last
            draws = _sample(pool, (u, k), rng)
            parts.append(kernels.dedupe_rows(draws, in_place=True))
            sources.append(np.full((u, k), index, np.int8))
            continue
        parts.append(_best_of(interest, posts.latent, draws, k))
        sources.append(np.full((u, k), index, np.int8))
    if not parts:
        return CandidateSet(np.zeros((u, 0), np.int64), np.zeros((u, 0), np.int8))
    post = kernels.dedupe_rows(np.concatenate(parts, axis=1), in_place=True)
    own = (post >= 0) & (posts.author[np.maximum(post, 0)] == users[:, None])
    post[own] = -1
    return CandidateSet(post=post, source=np.concatenate(sources, axis=1))


def _fused_candidates(
    ctx: FeedContext,
    users: np.ndarray,
    mix: dict[str, int],
    window: int,
    popular_pool: int,
    rng: np.random.Generator,
    oversample: int,
) -> CandidateSet | None:
    """:func:`generate_candidates` by three compiled kernels (:func:`kernels.candidate_pools`,
    :func:`kernels.candidate_draws`, :func:`kernels.candidate_picks`), the uniforms drawn by
    ``rng`` in one call between the first two and the scores by NumPy's ``einsum`` as in
    :func:`_best_of` between the last two; None (nothing drawn) where the unfused path must
    run: no source, or a post cluster the kernels do not index."""
    kind, keep, width = _source_columns(
        tuple(int(mix.get(name, 0)) for name in CANDIDATE_SOURCES), oversample
    )
    if len(kind) == 0:
        return None
    users = np.asarray(users, np.int64)
    u, posts, people = len(users), ctx.posts, ctx.users
    lo, hi = ctx.posts_of_rounds(ctx.round - window, ctx.round - 1)
    last_lo, last_hi = ctx.posts_of_rounds(ctx.round - 1, ctx.round - 1)
    interest = kernels.gather_sum_rows(people.latent, people.memory_latent, users)
    if hi > lo and _INTEREST in kind:
        user_cluster = np.empty(u, np.int16)
        with kernels.one_blas_thread():
            kernels.argmax_rows(interest @ ctx.centroids.T, user_cluster)
    else:
        user_cluster = np.zeros(u, np.int16)
    bounds = np.array([lo, hi, last_lo, last_hi], np.int64)
    uniforms, pool, pool_start, order, start = kernels.candidate_pools(
        kind, width, u, len(ctx.centroids), posts, bounds, popular_pool
    )
    if uniforms < 0:
        return None
    scored = int(width[kind != _FRESH].sum())
    draws = np.empty((u, int(width.sum())), np.int64)
    gathered = np.empty((u, scored, posts.latent.shape[1]), posts.latent.dtype)
    kernels.candidate_draws(
        kind,
        width,
        users,
        user_cluster,
        people.discrete_stance,
        posts.latent,
        bounds,
        (pool, pool_start, order, start),
        rng.random(uniforms),
        draws,
        gathered,
    )
    # one product for every scored draw: each score is the same d-term dot product, on the
    # same SIMD loop, as in _best_of's product per source
    score = np.einsum("ud,umd->um", interest, gathered)
    post = np.empty((u, int(keep.sum())), np.int64)
    source = np.empty(post.shape, np.int8)
    kernels.candidate_picks(kind, width, keep, draws, score, users, posts.author, post, source)
    return CandidateSet(post=post, source=source)


_INTEREST = CANDIDATE_SOURCES.index("interest")
_FRESH = CANDIDATE_SOURCES.index("fresh")


@functools.lru_cache(maxsize=64)
def _source_columns(
    per_source: tuple[int, ...], oversample: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, keep, width) (S,) int64 of the sources with candidates: their index in
    :data:`CANDIDATE_SOURCES`, their candidates per user (``per_source``, one per source) and
    their draws per user (``oversample`` × keep, keep for ``fresh``). Read-only arrays."""
    kind = np.array([index for index, k in enumerate(per_source) if k != 0], np.int64)
    keep = np.array([k for k in per_source if k != 0], np.int64)
    width = np.where(kind == _FRESH, keep, oversample * keep)
    for array in (kind, keep, width):
        array.flags.writeable = False
    return kind, keep, width


def _interest_draws(
    ctx: FeedContext, interest: np.ndarray, lo: int, hi: int, m: int, rng: np.random.Generator
) -> np.ndarray:
    """(U, m) draws from each user's IVF cluster of recent posts (anywhere if it is empty)."""
    if hi == lo:
        return np.full((len(interest), m), -1, np.int64)
    return ClusterIndex.build(ctx.posts.cluster, len(ctx.centroids), lo, hi).draw(
        interest, ctx.centroids, m, rng
    )
