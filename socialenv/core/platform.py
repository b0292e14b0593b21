"""The platform's levers: the recommender (§2.2.1) and exposure control (§2.2.2).

Both are small classes behind small interfaces so a researcher can swap in their own:
subclass :class:`Recommender` and override a channel (or ``build_feeds``), or subclass
:class:`ExposureControl`. All work on whole batches of users at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from agent_models.types import FeedChannel
from policysim_infra.buffers import ReusedArrays
from socialenv.core import kernels
from socialenv.core.clustering import ClusterIndex
from socialenv.core.config import RecommenderConfig
from socialenv.core.world import FollowGraph, PostTable, UserState


@dataclass
class FeedContext:
    """What a recommender may look at in round ``round``.

    Attributes:
        round: t.
        users, posts, graph: the world.
        round_start: (t + 2,) first post id of each round; round r's posts are
            ``round_start[r + 1] : round_start[r + 2]`` (index 0 holds the history, round -1).
        centroids: (C, d) IVF cluster centres of the personalized channel.
    """

    round: int
    users: UserState
    posts: PostTable
    graph: FollowGraph
    round_start: np.ndarray
    centroids: np.ndarray

    def posts_of_rounds(self, first: int, last: int) -> tuple[int, int]:
        """Post id range [lo, hi) of rounds first..last (inclusive; -1 = history)."""
        first = max(first, -1)
        return int(self.round_start[first + 1]), int(self.round_start[last + 2])


class Recommender:
    """Relational + personalized + headline channels (sizes in ``RecommenderConfig``).

    ``build_feeds`` returns the candidate feed of every active user before exposure control
    and the policy's recommendations (``place_recommendations`` puts those in the
    personalized slots); override a channel method to change one channel.
    """

    def __init__(self, config: RecommenderConfig) -> None:
        self.config = config
        # the relational channel's two draw arrays (tens of MB at 1M users), kept from round to
        # round so that their pages are not mapped and faulted in anew
        self._draw_memory = ReusedArrays(keep=2)

    def relational(
        self, ctx: FeedContext, active: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """(B, relational): random posts of the previous round written by each user's followees."""
        k = self.config.relational
        b = len(active)
        if k == 0 or b == 0:
            return np.full((b, k), -1, np.int64)
        lo, hi = ctx.posts_of_rounds(ctx.round - 1, ctx.round - 1)
        if hi == lo:
            return np.full((b, k), -1, np.int64)
        # the CSR of the recent posts by author: their stable order by author, where each
        # author's run begins (a counting sort with the compiled kernels)
        by_author, author_start = kernels.cluster_order(
            ctx.posts.author[lo:hi], ctx.users.stance.shape[0]
        )
        indptr, indices = ctx.graph.followees_csr()
        shape = (b, 3 * k)
        offset_draw, pick_draw = (
            kernels.random_in_blocks(
                rng, shape, out=self._draw_memory.empty_if_large(shape, np.float64, b * k // 2)
            )
            for _ in range(2)
        )
        post = kernels.relational_draws(
            indptr, indices, active, offset_draw, pick_draw, author_start, by_author, lo
        )
        return kernels.compact_rows(kernels.dedupe_rows(post, in_place=True), k)

    def personalized(
        self,
        ctx: FeedContext,
        active: np.ndarray,
        rng: np.random.Generator,
        chunk: int = 32_768,
        block: int = 2048,
    ) -> np.ndarray:
        """(B, personalized): posts of the last ``window`` rounds closest to each user's
        interests (profile ⊕ memory), scored on candidates from the user's IVF cluster.

        ``chunk`` users at a time, in order (their draws); within a chunk the scoring (the
        candidates' embedding rows, their dot products, the top k) runs ``block`` users at a
        time on :func:`kernels.map_blocks`' threads (every row is scored on its own: the same
        result on any number of threads)."""
        cfg = self.config
        k = cfg.personalized
        b = len(active)
        if k == 0 or b == 0:
            return np.full((b, k), -1, np.int64)
        lo, hi = ctx.posts_of_rounds(ctx.round - cfg.window, ctx.round - 1)
        if hi == lo:
            return np.full((b, k), -1, np.int64)
        index = ClusterIndex.build(ctx.posts.cluster, len(ctx.centroids), lo, hi)
        n_candidates = k * cfg.candidates_per_slot
        latent, post_stance = ctx.posts.latent, ctx.posts.stance
        out = np.empty((b, k), np.int64)
        for start in range(0, b, chunk):
            users = active[start : start + chunk]
            interest = kernels.gather_sum_rows(ctx.users.latent, ctx.users.memory_latent, users)
            candidate = index.draw(interest, ctx.centroids, n_candidates, rng)
            weighted_stance = cfg.personalized_stance_weight * ctx.users.stance[users]
            picks = out[start : start + chunk]

            def score_block(
                first: int,
                last: int,
                interest: np.ndarray = interest,
                candidate: np.ndarray = candidate,
                weighted_stance: np.ndarray = weighted_stance,
                picks: np.ndarray = picks,
            ) -> None:
                score = np.einsum(
                    "bd,bcd->bc", interest[first:last], latent.take(candidate[first:last], axis=0)
                )
                picks[first:last] = kernels.stance_top_k_rows(
                    candidate[first:last], score, weighted_stance[first:last], post_stance, k
                )

            kernels.map_blocks(score_block, len(users), block)
        return out

    def headline(
        self, ctx: FeedContext, active: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """(B, headline): posts sampled from the ``headline_pool`` most engaged recent posts."""
        cfg = self.config
        k = cfg.headline
        b = len(active)
        if k == 0 or b == 0:
            return np.full((b, k), -1, np.int64)
        lo, hi = ctx.posts_of_rounds(ctx.round - cfg.window, ctx.round - 1)
        if hi == lo:
            return np.full((b, k), -1, np.int64)
        p = ctx.posts
        engagement = (p.likes[lo:hi] + 2 * p.retweets[lo:hi] + p.replies[lo:hi]).astype(np.float64)
        pool_size = min(cfg.headline_pool, hi - lo)
        pool = lo + np.argpartition(-engagement, pool_size - 1)[:pool_size]
        pool = pool[np.argsort(-engagement[pool - lo], kind="stable")]
        pick = pool[(rng.random((b, k)) * pool_size).astype(np.int64)]
        return kernels.dedupe_rows(pick, in_place=True)

    def place_recommendations(
        self, feed: np.ndarray, channel: np.ndarray, row: np.ndarray, post: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fill recommended slots with the policy's picks: feed row ``row[i]`` is shown
        ``post[i]`` (R,) in its personalized slots, in the order given, and the built-in
        personalized picks fill that row's remaining slots best first. Picks beyond a row's
        ``personalized`` slots are dropped. Returns the new (B, F) feed and channels (the
        policy's slots get ``FeedChannel.INJECTED``)."""
        start, width = self.config.relational, self.config.personalized
        if len(row) == 0 or width == 0:
            return feed, channel
        return kernels.place_picks(
            feed, channel, row, post, start, width, int(FeedChannel.INJECTED)
        )

    def build_feeds(
        self, ctx: FeedContext, active: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(B, F) post ids (-1 = empty) and (B, F) int8 channels, F = sum of channel sizes."""
        parts = [
            (self.relational(ctx, active, rng), FeedChannel.RELATIONAL),
            (self.personalized(ctx, active, rng), FeedChannel.PERSONALIZED),
            (self.headline(ctx, active, rng), FeedChannel.HEADLINE),
        ]
        feed = np.concatenate([p for p, _ in parts], axis=1)
        row = _channel_row(tuple((p.shape[1], int(c)) for p, c in parts))
        return feed, np.repeat(row[None, :], len(feed), axis=0)


@functools.lru_cache(maxsize=16)
def _channel_row(widths: tuple[tuple[int, int], ...]) -> np.ndarray:
    """(F,) int8: each feed column's channel, for channels of (width, channel code)."""
    row = np.concatenate([np.full(width, code, np.int8) for width, code in widths])
    row.flags.writeable = False
    return row


class ExposureControl:
    """Each post passes the platform's filter with its author's probability p_i^t (§2.2.2)."""

    def filter(
        self,
        feed: np.ndarray,
        post_author: np.ndarray,
        exposure: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, int]:
        """Returns the filtered feed (removed slots set to -1) and how many posts were removed."""
        draws = kernels.random_in_blocks(rng, feed.shape)
        return kernels.exposure_filter(feed, post_author, exposure, draws)
