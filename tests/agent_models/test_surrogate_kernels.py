"""The surrogate's compiled reaction passes give the NumPy twins' results bit for bit, and the
twins are the reaction model's own arithmetic (agent_models.surrogate_kernels)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from agent_models import surrogate_kernels
from agent_models.surrogate import SurrogateBrain, SurrogateConfig
from agent_models.surrogate_kernels import built_in_reaction_moves
from agent_models.surrogate_mechanisms import (
    MECHANISMS,
    Reacted,
    ReactionMechanism,
    _built_in_params,
    reaction_moves,
)
from agent_models.types import Behaviour, FeedChannel
from tests.support import bits

pytest.importorskip("numba")

#: weights that float32 cannot hold exactly, so a product done in the wrong type shows
ODD_PARAMS = (1.3, -0.7, 0.9, -2.61, -4.03, -3.97, -4.31, 1.21, 2.97, 1.49)


@pytest.fixture
def compiled() -> Iterator[None]:
    previous = surrogate_kernels.BACKEND
    surrogate_kernels.use_backend("numba")
    yield
    surrogate_kernels.use_backend(previous)


def _block(rng: np.random.Generator, rows: int, width: int, posts: int) -> tuple:
    feed = rng.integers(0, posts, (rows, width))
    feed[rng.random((rows, width)) < 0.15] = -1
    channel = rng.integers(0, len(FeedChannel), (rows, width)).astype(np.int8)
    attitude = rng.uniform(-1, 1, rows).astype(np.float32)
    stance = rng.uniform(-1, 1, posts).astype(np.float32)
    sim = rng.uniform(-1, 1, (rows, width)).astype(np.float32)
    propensity = np.log(np.maximum(rng.random(rows).astype(np.float32), 1e-3) / 0.25)
    draws = rng.random((4, rows, width), dtype=np.float32)
    return feed, channel, attitude, stance, sim, propensity, draws


@pytest.mark.parametrize("params", [ODD_PARAMS, None])
@pytest.mark.parametrize("shape", [(1, 1), (37, 12), (400, 30)])
def test_reaction_hits_bit_identical_to_numpy(compiled, params, shape):
    rng = np.random.default_rng(shape[0])
    if params is None:
        config = SurrogateConfig()
        params = tuple(float(getattr(config, name)) for name in surrogate_kernels.PARAMS)
    feed, channel, attitude, stance, sim, propensity, draws = _block(rng, *shape, 500)
    expected = surrogate_kernels.reaction_hits_numpy(
        feed, channel, attitude, stance, sim, propensity, draws, params
    )
    wide = np.concatenate([draws, draws], axis=1)  # a block of a larger draw: not contiguous
    for block_draws in (draws, wide[:, : shape[0]]):
        got = surrogate_kernels.reaction_hits(
            feed, channel, attitude, stance, sim, propensity, block_draws, params
        )
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and bits(g) == bits(e)
    assert expected[4][-1] == len(expected[0]) > 0 or shape == (1, 1)


@pytest.mark.parametrize(
    "params", [ODD_PARAMS, (1.5, 0.0, 1.0, -2.6, -4.0, -4.0, -4.3, 1.2, 3.0, 1.5)]
)
def test_compiled_log_odds_are_numpys_bit_for_bit(compiled, params):
    """Every slot's log-odds, not only the hits (a product rounded in the wrong type moves a
    log-odds by an ulp, which a draw rarely shows)."""
    rng = np.random.default_rng(7)
    feed, channel, attitude, stance, sim, propensity, _ = _block(rng, 300, 20, 400)
    log_odds, gap = surrogate_kernels.reaction_log_odds_numpy(
        feed, channel, attitude, stance, sim, propensity, params
    )
    negated, compiled_gap = surrogate_kernels.negated_log_odds(
        feed, channel, attitude, stance, sim, propensity, params
    )
    assert bits(negated) == bits(-log_odds)
    assert bits(compiled_gap) == bits(gap)


def test_reaction_hits_are_the_reaction_probabilities_below_the_draws():
    """The twin computes the probabilities :meth:`SurrogateBrain.reaction_probabilities`
    gives, so a slot hits exactly where its draw is below that probability."""
    rng = np.random.default_rng(5)
    config = SurrogateConfig()
    params = tuple(float(getattr(config, name)) for name in surrogate_kernels.PARAMS)
    feed, channel, attitude, stance, sim, propensity, draws = _block(rng, 50, 8, 200)
    row, post, kind, _, starts = surrogate_kernels.reaction_hits_numpy(
        feed, channel, attitude, stance, sim, propensity, draws, params
    )
    interest = config.interest_weight * sim + (
        (channel == FeedChannel.INJECTED) * config.promoted_attention
        + np.isin(channel, [FeedChannel.INJECTED, FeedChannel.PERSONALIZED])
        * config.recommended_attention
    )
    agree = attitude[:, None] * stance[np.where(feed >= 0, feed, 0)]
    like = 1 / (1 + np.exp(-(config.like_bias + interest + config.agreement_weight * agree)))
    likes = slice(starts[0], starts[1])
    expected = np.argwhere((feed >= 0) & (draws[0] < like))  # row-major, as the hits
    np.testing.assert_array_equal(row[likes], expected[:, 0])
    np.testing.assert_array_equal(post[likes], feed[expected[:, 0], expected[:, 1]])
    assert (kind[likes] == Behaviour.LIKE).all()
    assert (np.diff(starts) >= 0).all() and starts[-1] == len(row)


@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.123456789])
def test_reaction_columns_bit_identical_to_numpy(compiled, threshold):
    rng = np.random.default_rng(int(threshold * 1000))
    m = 5000
    kind = rng.integers(0, 5, m).astype(np.int8)
    propensity = rng.random(m).astype(np.float32)
    propensity[:50] = 0.15  # exactly at the civility threshold
    gap = rng.random(m).astype(np.float32)
    attitude = rng.uniform(-1, 1, m).astype(np.float32)
    post_stance = rng.uniform(-1, 1, m).astype(np.float32)
    uniform = rng.uniform(0.5, 1.5, m)
    # replies whose toxicity is exactly float32(threshold): NumPy compares in float32
    kind[50:100], gap[50:100] = Behaviour.REPLY, 0
    raw = (propensity[50:100] * np.float32(0.2)).astype(np.float64)
    uniform[50:100] = np.float64(np.float32(threshold)) / raw
    normal = rng.standard_normal(m) * 4  # often clipped
    params = (0.15, 0.2, 3.0, 0.15, threshold)
    expected = surrogate_kernels.reaction_columns_numpy(
        kind, propensity, gap, attitude, post_stance, uniform, normal, params
    )
    got = surrogate_kernels.reaction_columns(
        kind, propensity, gap, attitude, post_stance, uniform, normal, params
    )
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and bits(g) == bits(e)
    toxicity, stance, positive, hostile = expected
    assert (toxicity[50:100] == np.float32(threshold)).mean() > 0.5
    assert (toxicity[kind != Behaviour.REPLY] == 0).all() and (toxicity <= 1).all()
    retweet = kind == Behaviour.RETWEET
    np.testing.assert_array_equal(stance[retweet], post_stance[retweet])
    assert (
        hostile[kind == Behaviour.DISLIKE].all() and not positive[kind == Behaviour.DISLIKE].any()
    )


def test_a_surrogate_round_is_the_same_on_both_backends():
    from socialenv.envs.rec import RecEnv

    digests = []
    for backend in ("numba", "numpy"):
        previous = surrogate_kernels.BACKEND
        surrogate_kernels.use_backend(backend)
        try:
            env = RecEnv(num_users=300, rounds=4)
            env.reset(seed=3)
            brain = env.sim.brain
            assert isinstance(brain, SurrogateBrain)
            states = []
            for _ in range(3):
                env.step(np.full(env.slate_size, env.no_op, np.int64))
                states.append(bits(env.sim.users.opinion) + bits(env.sim.posts.stance))
            digests.append(states)
        finally:
            surrogate_kernels.use_backend(previous)
    assert digests[0] == digests[1]


def _on_numpy(function, *args):
    previous = surrogate_kernels.BACKEND
    surrogate_kernels.use_backend("numpy")
    try:
        return function(*args)
    finally:
        surrogate_kernels.use_backend(previous)


@pytest.mark.parametrize("noise_in_numpy_rows", [0, surrogate_kernels.NOISE_IN_NUMPY_ROWS])
@pytest.mark.parametrize("width", [8, 32, 33, 128, 129, 4])
def test_noisy_unit_rows_bit_identical_to_numpy_and_leave_the_generator_alike(
    compiled, width, noise_in_numpy_rows, monkeypatch
):
    """Both compiled ways, the noise drawn inside the kernel (0: every size) and drawn by
    NumPy first (the default for a round's rows), against the NumPy twin."""
    monkeypatch.setattr(surrogate_kernels, "NOISE_IN_NUMPY_ROWS", noise_in_numpy_rows)
    base = np.random.default_rng(width).standard_normal((50, width)).astype(np.float32)
    base[3] = 0.0  # a zero row: the norm's floor
    for rows in (np.array([4, 4, 0, 49, 3]), np.zeros(0, np.int64), np.arange(50)):
        numpy_rng, compiled_rng = np.random.default_rng(7), np.random.default_rng(7)
        expected = _on_numpy(surrogate_kernels.noisy_unit_rows, base, rows, 0.3, numpy_rng)
        got = surrogate_kernels.noisy_unit_rows(base, rows, 0.3, compiled_rng)
        assert got.dtype == expected.dtype == np.float32 and got.shape == (len(rows), width)
        assert bits(got) == bits(expected)
        assert compiled_rng.random() == numpy_rng.random()  # the same draws were taken
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_pushed_opinions_bit_identical_to_numpy(compiled):
    rng = np.random.default_rng(3)
    opinion = rng.uniform(-1, 1, 40).astype(np.float32)
    for m in (0, 1, 500):
        who = rng.integers(0, 40, m)
        moved = rng.random(m) < 0.6
        step = rng.normal(0, 0.1, m)
        expected = _on_numpy(surrogate_kernels.pushed_opinions, opinion, who, moved, step)
        got = surrogate_kernels.pushed_opinions(opinion, who, moved, step)
        assert got.dtype == expected.dtype == np.float64 and bits(got) == bits(expected)
    untouched = np.setdiff1d(np.arange(40), who[moved])
    assert (got[untouched] == opinion[untouched]).all() and (got != opinion).any()


@pytest.mark.parametrize("threads", [1, 2])
def test_flagged_per_row_counts_what_the_numpy_twin_counts(compiled, threads):
    """The misinformation seen per feed row (Contagion.spread), in blocks on 1 and 2 threads:
    empty slots and unflagged posts do not count."""
    from policysim_infra import blocks

    rng = np.random.default_rng(8)
    previous = blocks.block_threads()
    blocks.set_block_threads(threads)
    try:
        for rows, width, posts in [(0, 5, 10), (1, 1, 1), (300, 12, 50), (5000, 7, 900)]:
            feed = rng.integers(0, posts, (rows, width))
            feed[rng.random(feed.shape) < 0.2] = -1
            flag = rng.random(posts) < 0.3
            expected = _on_numpy(surrogate_kernels.flagged_per_row, feed, flag)
            got = surrogate_kernels.flagged_per_row(feed, flag, block=64)
            assert got.dtype == expected.dtype == np.int64 and bits(got) == bits(expected)
            loop = [sum(p >= 0 and flag[p] for p in row) for row in feed]
            assert got.tolist() == loop
        # a strided feed, and a world with no post yet (every slot empty)
        assert bits(surrogate_kernels.flagged_per_row(feed[:, ::2], flag)) == bits(
            _on_numpy(surrogate_kernels.flagged_per_row, feed[:, ::2], flag)
        )
        empty = surrogate_kernels.flagged_per_row(np.full((4, 3), -1), np.zeros(0, bool))
        assert empty.tolist() == [0, 0, 0, 0]
    finally:
        blocks.set_block_threads(previous)


def _reacted_columns(rng: np.random.Generator, m: int) -> Reacted:
    """Reactions whose stances and opinions sit on the mechanisms' cuts (±1/3, the bounds'
    distances), at zero and signed zero, and NaN, beside uniform ones."""
    cuts = np.array([1 / 3, -1 / 3, 0.0, -0.0, 0.6, -0.6, 0.7, -0.7, np.nan, 1.0, -1.0], np.float32)
    opinion = rng.uniform(-1, 1, m).astype(np.float32)
    stance = rng.uniform(-1, 1, m).astype(np.float32)
    on_cut = rng.random(m) < 0.3
    stance[on_cut] = rng.choice(cuts, on_cut.sum())
    on_cut = rng.random(m) < 0.3
    opinion[on_cut] = rng.choice(cuts, on_cut.sum())
    stance[rng.random(m) < 0.05] = opinion[rng.random(m) < 0.05][:1] if m else 0
    kind = rng.integers(0, len(Behaviour), m).astype(np.int8)
    if m >= 40:  # distances of exactly float32(0.6) and float32(0.7), one sign, every kind
        opinion[:40] = np.repeat(np.float32([0.2, 0.1]), 20)
        stance[:40] = np.float32(0.8)
        kind[:40] = np.arange(40) % len(Behaviour)
    positive = (kind == Behaviour.LIKE) | (kind == Behaviour.RETWEET)
    hostile = (kind == Behaviour.DISLIKE) | ((kind == Behaviour.REPLY) & (rng.random(m) < 0.3))
    return Reacted(opinion, stance, kind, positive, hostile)


@pytest.mark.parametrize(
    "fields",
    [
        {},  # the defaults
        # bounds whose float32 lies above (0.6) and below (0.7) their float64 value
        {"assimilation_rate": 0.31, "confidence_bound": 0.3, "backfire_gap": 0.35},
        {"reinforcement_rate": 1, "backfire_rate": 0, "confidence_bound": 1},  # ints
        {"assimilation_rate": 0.0, "backfire_rate": 0.0, "reinforcement_rate": 0.0},  # off
    ],
)
def test_built_in_reaction_moves_bit_identical_to_the_mechanisms(compiled, fields):
    mechanisms = [
        kind.from_config(SurrogateConfig(**fields))
        for kind in MECHANISMS
        if issubclass(kind, ReactionMechanism)
    ]
    rng = np.random.default_rng(len(fields))
    params = _built_in_params(mechanisms)
    assert params is not None  # the compiled pass runs
    for m in (0, 1, 5000):
        reacted = _reacted_columns(rng, m)
        columns = (reacted.opinion, reacted.stance, reacted.kind, reacted.positive)
        assert built_in_reaction_moves(*columns, reacted.hostile, params) is not None
        fused = reaction_moves(mechanisms, reacted)
        surrogate_kernels.use_backend("numpy")
        try:
            expected = reaction_moves(mechanisms, reacted)
        finally:
            surrogate_kernels.use_backend("numba")
        assert fused[0].dtype == expected[0].dtype == np.bool_
        assert fused[1].dtype == expected[1].dtype == np.float64
        assert bits(fused[0]) == bits(expected[0]) and bits(fused[1]) == bits(expected[1])
    assert expected[0].any() or not any(fields.get(k, 1) for k in fields if k.endswith("rate"))


def test_built_in_reaction_moves_leave_other_mechanisms_and_columns_to_numpy(compiled):
    mechanisms = [
        kind.from_config(SurrogateConfig())
        for kind in MECHANISMS
        if issubclass(kind, ReactionMechanism)
    ]
    reacted = _reacted_columns(np.random.default_rng(1), 100)
    assert (
        built_in_reaction_moves(
            reacted.opinion.astype(np.float64),
            reacted.stance,
            reacted.kind,
            reacted.positive,
            reacted.hostile,
            (0.1,) * 6,
        )
        is None
    )
    reordered = [mechanisms[1], mechanisms[0], mechanisms[2]]
    moved, step = reaction_moves(reordered, reacted)  # the mechanisms' own path, in that order
    assert moved.shape == step.shape == (100,)
    as_numpy_floats = [dataclasses.replace(mechanisms[0], rate=np.float64(0.15))] + mechanisms[1:]
    surrogate_kernels.use_backend("numpy")
    try:
        expected = reaction_moves(as_numpy_floats, reacted)
    finally:
        surrogate_kernels.use_backend("numba")
    got = reaction_moves(as_numpy_floats, reacted)
    assert bits(got[1]) == bits(expected[1])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_post_choices_and_columns_bit_identical_to_numpy(compiled):
    """A round's new posts: who posts (probabilities at the clip's ends, ties with the draw)
    and each post's stance, toxicity and misinformation (stances and propensities at the
    clip's ends, NaN and signed zeros)."""
    rng = np.random.default_rng(17)
    n = 4000
    ratio = rng.choice(np.float32([0.0, 1.0, 3.0, 0.25, np.inf, np.nan]), n)
    ratio[:2000] = rng.random(2000).astype(np.float32) * 4
    active = np.sort(rng.choice(n, 3000, replace=False)).astype(np.int64)
    uniform = rng.random(3000)
    uniform[:50] = 0.0
    ratio[active[50:300]] = rng.random(250).astype(np.float32) * 4
    attitude = rng.uniform(-1.2, 1.2, n).astype(np.float32)
    attitude[:10] = [np.nan, -0.0, 0.0, 1.0, -1.0, 0.7, -0.7, 2.0, -2.0, 0.5]
    propensity = (rng.random(n) * 3).astype(np.float32)
    propensity[:4] = [np.nan, 0.0, -0.0, 1.0]
    misinformed = rng.random(n) < 0.4
    for post_rate in (0.3, 1, 0.05):
        # draws equal to the float32 probabilities: a probability in float64 would differ
        user_ratio = ratio[active[50:300]]
        uniform[50:300] = post_rate * 2 * user_ratio / (1 + user_ratio)
        expected = surrogate_kernels.post_choices_numpy(ratio, active, post_rate, uniform)
        got = surrogate_kernels.post_choices(ratio, active, post_rate, uniform)
        assert got.dtype == expected.dtype and bits(got) == bits(expected)
    assert 0 < len(expected) < len(active)
    poster = np.concatenate([np.arange(10), expected])
    p = len(poster)
    normal, scaled, draw = rng.standard_normal(p), rng.uniform(0.5, 1.5, p), rng.random(p)
    normal[:3] = [0.0, -0.0, np.nan]
    for params in ((0.3, 0.7, 0.5), (0.1, 1, 0.0)):
        args = (attitude, propensity, misinformed, poster, params, normal, scaled, draw)
        expected_columns = surrogate_kernels.post_columns_numpy(*args)
        got_columns = surrogate_kernels.post_columns(*args)
        for a, b in zip(got_columns, expected_columns, strict=True):
            assert a.dtype == b.dtype and bits(a) == bits(b)
    assert (np.abs(expected_columns[0][3:]) <= 1).all()
