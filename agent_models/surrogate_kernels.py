"""The surrogate's reaction draws in two compiled passes, with a NumPy twin of the same bits.

:func:`reaction_hits` turns one block of feed rows into the reactions the surrogate's users
make: for each slot and behaviour (like, dislike, retweet, reply) the reaction's log-odds
(:meth:`agent_models.surrogate.SurrogateBrain.reaction_probabilities`), its probability, and
whether the slot's uniform draw falls below it. The NumPy twin, :func:`reaction_hits_numpy`, is
that method's arithmetic followed by a ``nonzero``: about 60 NumPy calls on arrays of a few
thousand entries, whose dispatch outweighs the arithmetic at 1,000 users. The compiled version
makes two passes: one writes every slot's negated log-odds, NumPy's ``exp`` runs on them in one
call (a compiled ``exp`` would round differently), the other turns them into probabilities and
collects the hits. Each operation keeps NumPy's types (the float32 products of NumPy's weak
Python scalars, the float64 sums), so both give the same bits (``tests/agent_models/
test_surrogate_kernels.py``; the trajectory digest).

Two more passes of a round have twins of their own: :func:`noisy_unit_rows` (a new post's
latent, its noise drawn inside the pass) and :func:`pushed_opinions` (the reactions' pushes on
opinions); ``benchmarks/twin_pairs.py`` times each against its twin.

The backend follows ``POLICYSIM_KERNELS`` (``auto``, ``numba``, ``numpy``) at import, as
:mod:`socialenv.core.kernels` does, and :func:`use_backend` switches it (that module's
``use_backend`` switches both).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from agent_models.types import Behaviour, FeedChannel
from policysim_infra.blocks import map_blocks

_ENV_VAR = "POLICYSIM_KERNELS"
_CHOICES = ("auto", "numba", "numpy")
#: The behaviours drawn per slot, in the order of the draws' first axis and of the hits.
REACTIONS = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)
REACTION_KINDS = np.array([int(b) for b in REACTIONS], np.int8)
#: The order of the weights in ``params``.
PARAMS = (
    "interest_weight",
    "promoted_attention",
    "recommended_attention",
    "like_bias",
    "dislike_bias",
    "retweet_bias",
    "reply_bias",
    "agreement_weight",
    "retweet_agreement_weight",
    "reply_gap_weight",
)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, 1 / (1 + exp(−x)), in NumPy's arithmetic (the surrogate's
    reaction probabilities and the contagion's adoption curve)."""
    return 1.0 / (1.0 + np.exp(-x))


def reaction_log_odds_numpy(
    feed: np.ndarray,
    channel: np.ndarray,
    attitude: np.ndarray,
    stance: np.ndarray,
    sim: np.ndarray,
    reply_propensity: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """(log_odds (4, R, F) float64, one per behaviour of :data:`REACTIONS`; gap (R, F)
    float32, |a − s| / 2) of R feed rows of F slots (the arguments of
    :func:`reaction_hits_numpy`; an empty slot reads post 0)."""
    (
        interest_weight,
        promoted,
        recommended,
        like_bias,
        dislike_bias,
        retweet_bias,
        reply_bias,
        agreement_weight,
        retweet_agreement_weight,
        reply_gap_weight,
    ) = params
    injected = channel == FeedChannel.INJECTED
    attention = (
        injected * promoted + (injected | (channel == FeedChannel.PERSONALIZED)) * recommended
    )
    owner = attitude[:, None]
    post_stance = stance[np.where(feed >= 0, feed, 0)]
    agree = owner * post_stance
    gap = np.abs(owner - post_stance) / 2
    interest = interest_weight * sim + attention
    log_odds = np.stack(
        [
            like_bias + interest + agreement_weight * agree,
            dislike_bias + interest - agreement_weight * agree,
            retweet_bias + interest + retweet_agreement_weight * agree,
            reply_bias + interest + reply_gap_weight * gap + reply_propensity[:, None],
        ]
    )
    return log_odds, gap


def reaction_hits_numpy(
    feed: np.ndarray,
    channel: np.ndarray,
    attitude: np.ndarray,
    stance: np.ndarray,
    sim: np.ndarray,
    reply_propensity: np.ndarray,
    draws: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reactions of R feed rows of F slots.

    Args:
        feed: (R, F) int64 post ids, −1 for an empty slot.
        channel: (R, F) the :class:`~agent_models.types.FeedChannel` of each slot.
        attitude: (R,) float32 attitude of each row's owner.
        stance: (P,) float32 stance of every post.
        sim: (R, F) float32 latent similarity of owner and post (that of post 0 where the slot
            is empty).
        reply_propensity: (R,) float32 log(max(reply frequency, 1e-3) / 0.25) of each owner.
        draws: (4, R, F) float32 uniform draws, one per behaviour of :data:`REACTIONS`.
        params: the floats of :data:`PARAMS`, in that order.

    Returns:
        (row, post, kind, gap, starts): row (H,) int64, post (H,) int64, kind (H,) int8 and
        gap (H,) float32 (|a − s| / 2) of every slot whose draw fell below its probability,
        behaviour after behaviour and row-major within one; starts (5,) int64, where each
        behaviour's run begins.
    """
    log_odds, gap = reaction_log_odds_numpy(
        feed, channel, attitude, stance, sim, reply_propensity, params
    )
    i, r, c = np.nonzero((feed >= 0) & (draws < sigmoid(log_odds)))
    starts = np.searchsorted(i, np.arange(len(REACTIONS) + 1))
    return r, feed[r, c], REACTION_KINDS[i], gap[r, c], starts


def negated_log_odds(
    feed: np.ndarray,
    channel: np.ndarray,
    attitude: np.ndarray,
    stance: np.ndarray,
    sim: np.ndarray,
    reply_propensity: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """The compiled first pass: (−log_odds, gap) of :func:`reaction_log_odds_numpy`, the
    empty slots reading post 0 as there."""
    rows, width = feed.shape
    exponents = np.empty((len(REACTIONS), rows, width))
    gap = np.empty((rows, width), np.float32)
    _compiled()["negated_log_odds"](
        feed,
        channel,
        attitude,
        stance,
        sim,
        reply_propensity,
        np.array(params, np.float64),
        int(FeedChannel.INJECTED),
        int(FeedChannel.PERSONALIZED),
        exponents,
        gap,
    )
    return exponents, gap


#: The order of the weights in :func:`reaction_columns`' ``params``.
COLUMN_PARAMS = (
    "civility_threshold",
    "reply_toxicity_base",
    "reply_toxicity_gap",
    "stance_noise",
    "toxic_threshold",
)


def reaction_columns_numpy(
    kind: np.ndarray,
    propensity: np.ndarray,
    gap: np.ndarray,
    attitude: np.ndarray,
    post_stance: np.ndarray,
    uniform: np.ndarray,
    normal: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The columns of M reactions beyond who reacted to what.

    Args:
        kind: (M,) int8 :class:`~agent_models.types.Behaviour` of each reaction.
        propensity: (M,) float32 toxicity propensity of the reacting user.
        gap: (M,) float32 |a − s| / 2 of user and post.
        attitude: (M,) float32 attitude of the reacting user.
        post_stance: (M,) float32 stance of the post reacted to.
        uniform: (M,) float64 draws from U(0.5, 1.5) (the reply toxicity's noise).
        normal: (M,) float64 standard normal draws (the reaction stance's noise).
        params: the floats of :data:`COLUMN_PARAMS`, in that order.

    Returns:
        (toxicity, stance, positive, hostile): toxicity (M,) float32 (0 but for replies),
        stance (M,) float32 (the post's for a retweet, else the user's attitude plus noise,
        clipped to [−1, 1]), positive (M,) bool (a like or retweet) and hostile (M,) bool (a
        dislike, or a reply more toxic than ``toxic_threshold``).
    """
    civility_threshold, toxicity_base, toxicity_gap, stance_noise, toxic_threshold = params
    is_reply = kind == Behaviour.REPLY
    is_retweet = kind == Behaviour.RETWEET
    hostility = np.maximum(propensity - civility_threshold, 0.0)
    toxicity = np.clip(propensity * toxicity_base + toxicity_gap * gap * hostility, 0, 1)
    toxicity = toxicity * uniform
    toxicity = np.where(is_reply, np.clip(toxicity, 0, 1), 0.0).astype(np.float32)
    stance = np.where(
        is_retweet, post_stance, np.clip(attitude + stance_noise * normal, -1, 1)
    ).astype(np.float32)
    positive = (kind == Behaviour.LIKE) | is_retweet
    hostile = (kind == Behaviour.DISLIKE) | (is_reply & (toxicity > toxic_threshold))
    return toxicity, stance, positive, hostile


_kernels: dict[str, Callable[..., Any]] | None = None
#: ``"numba"`` or ``"numpy"``: the versions :func:`reaction_hits` and :func:`reaction_columns` run.
BACKEND = "numpy"


def _build_numba() -> dict[str, Callable[..., Any]]:
    from agent_models._surrogate_numba import (
        built_in_reaction_moves,
        flagged_per_row,
        hits_below,
        negated_log_odds,
        post_choices,
        post_columns,
        pushed_opinions,
        reaction_columns,
    )
    from policysim_infra._numba_rows import unit_noisy_rows, unit_noisy_rows_drawn

    return {
        "pushed_opinions": pushed_opinions,
        "built_in_reaction_moves": built_in_reaction_moves,
        "post_choices": post_choices,
        "post_columns": post_columns,
        "flagged_per_row": flagged_per_row,
        "negated_log_odds": negated_log_odds,
        "hits_below": hits_below,
        "reaction_columns": reaction_columns,
        "unit_noisy_rows": unit_noisy_rows,
        "unit_noisy_rows_drawn": unit_noisy_rows_drawn,
    }


def _compiled() -> dict[str, Callable[..., Any]]:
    """The numba passes, imported (and loaded from numba's cache) on first use, so importing
    the surrogate does not import numba."""
    global _kernels
    if _kernels is None:
        _kernels = _build_numba()
    return _kernels


def use_backend(name: str) -> str:
    """Select ``"auto"``, ``"numba"`` or ``"numpy"`` kernels; returns the backend in use
    (``"auto"``: numba where it is installed)."""
    global BACKEND
    if name not in _CHOICES:
        raise ValueError(f"{_ENV_VAR}={name!r} is not allowed: one of {_CHOICES}")
    if name == "numpy" or (name == "auto" and importlib.util.find_spec("numba") is None):
        BACKEND = "numpy"
        return BACKEND
    if name == "numba":
        _compiled()  # an ImportError now, not at the first round, when numba is missing
    BACKEND = "numba"
    return BACKEND


use_backend(os.environ.get(_ENV_VAR, "auto").strip().lower() or "auto")


def reaction_hits(
    feed: np.ndarray,
    channel: np.ndarray,
    attitude: np.ndarray,
    stance: np.ndarray,
    sim: np.ndarray,
    reply_propensity: np.ndarray,
    draws: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`reaction_hits_numpy`; with numba, in two compiled passes around one NumPy
    ``exp``."""
    if BACKEND == "numpy":
        return reaction_hits_numpy(
            feed, channel, attitude, stance, sim, reply_propensity, draws, params
        )
    exponents, gap = negated_log_odds(
        feed, channel, attitude, stance, sim, reply_propensity, params
    )
    np.exp(exponents, out=exponents)
    return _compiled()["hits_below"](exponents, draws, feed, gap, REACTION_KINDS)


def reaction_columns(
    kind: np.ndarray,
    propensity: np.ndarray,
    gap: np.ndarray,
    attitude: np.ndarray,
    post_stance: np.ndarray,
    uniform: np.ndarray,
    normal: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`reaction_columns_numpy`; with numba, in one compiled pass."""
    if BACKEND == "numpy":
        return reaction_columns_numpy(
            kind, propensity, gap, attitude, post_stance, uniform, normal, params
        )
    return _compiled()["reaction_columns"](
        kind,
        propensity,
        gap,
        attitude,
        post_stance,
        uniform,
        normal,
        np.array(params, np.float64),
        int(Behaviour.LIKE),
        int(Behaviour.DISLIKE),
        int(Behaviour.RETWEET),
        int(Behaviour.REPLY),
    )


#: Rows up to which :func:`noisy_unit_rows` draws its noise with NumPy and hands it to the
#: compiled pass: a Generator passed to numba costs 7 µs per call, 20 µs on a new one's first
#: (its ctypes interface is built), more than drawing a round's few hundred rows apart.
NOISE_IN_NUMPY_ROWS = 16_384


def noisy_unit_rows(
    base: np.ndarray, rows: np.ndarray, scale: float, rng: np.random.Generator
) -> np.ndarray:
    """(len(rows), d) float32: the rows ``rows`` of the (N, d) ``base`` plus ``scale`` times
    ``rng.standard_normal((len(rows), d))``, each divided by its Euclidean norm (at least
    1e-8), in float64 before the cast, as NumPy computes them. With numba, for widths 8-128,
    one compiled pass computes them: above :data:`NOISE_IN_NUMPY_ROWS` rows it also draws the
    noise (the same draws, leaving ``rng`` in the same state, without the (rows, d) float64
    buffer); otherwise in NumPy."""
    d = base.shape[1]
    if (
        BACKEND == "numba"
        and base.ndim == 2
        and base.dtype in (np.float32, np.float64)
        and 8 <= d <= 128
        and len(rows)
    ):
        rows = rows.astype(np.int64, copy=False)
        eps = np.array([1e-8])
        if len(rows) <= NOISE_IN_NUMPY_ROWS:
            noise = rng.standard_normal((len(rows), d))
            return _compiled()["unit_noisy_rows"](base, rows, float(scale), noise, eps)
        out = np.empty((len(rows), d), np.float32)
        _compiled()["unit_noisy_rows_drawn"](base, rows, float(scale), rng, eps, out)
        return out
    noisy = base.take(rows, axis=0) + scale * rng.standard_normal((len(rows), d))
    noisy /= np.maximum(np.linalg.norm(noisy, axis=1, keepdims=True), 1e-8)
    return noisy.astype(np.float32)


def pushed_opinions(
    opinion: np.ndarray, who: np.ndarray, moved: np.ndarray, step: np.ndarray
) -> np.ndarray:
    """(N,) float64: the opinions (N,) after the moving reactions (M,): each user's ``step``
    of the reactions ``moved`` by ``who`` (``who``, ``moved``, ``step``: (M,)), summed in
    order and divided by the square root of their number, added to the user's opinion."""
    n = len(opinion)
    if BACKEND == "numba":
        out = np.empty(n, np.float64)
        _compiled()["pushed_opinions"](opinion, who, moved, step, out)
        return out
    movers = who[moved]
    push = np.bincount(movers, weights=step[moved], minlength=n)
    weight = np.bincount(movers, minlength=n).astype(np.float64)
    new_opinion = opinion.astype(np.float64)  # a copy
    touched = weight > 0
    new_opinion[touched] += push[touched] / np.sqrt(weight[touched])
    return new_opinion


def built_in_reaction_moves(
    opinion: np.ndarray,
    stance: np.ndarray,
    kind: np.ndarray,
    positive: np.ndarray,
    hostile: np.ndarray,
    params: tuple[float, ...],
) -> tuple[np.ndarray, np.ndarray] | None:
    """(moved (M,) bool, step (M,) float64) of the built-in reaction mechanisms, assimilation,
    backfire and reinforcement in that order (``params``: assimilation rate, 2 × its bound,
    backfire rate, 2 × its gap, reinforcement rate, 2 × its bound), in one compiled pass with
    the values of :func:`agent_models.surrogate_mechanisms.reaction_moves`; None (nothing
    computed) where that NumPy path must run: NumPy kernels, or columns other than float32
    opinion and stance, integer kinds and bool flags."""
    if (
        BACKEND != "numba"
        or opinion.dtype != np.float32
        or stance.dtype != np.float32
        or kind.dtype.kind not in "iu"
        or positive.dtype != np.bool_
        or hostile.dtype != np.bool_
        or not len(opinion) == len(stance) == len(kind) == len(positive) == len(hostile)
    ):
        return None
    moved = np.empty(len(opinion), np.bool_)
    step = np.empty(len(opinion), np.float64)
    _compiled()["built_in_reaction_moves"](
        opinion,
        stance,
        kind,
        positive,
        hostile,
        int(Behaviour.REPLY),
        np.array(params, np.float64),
        moved,
        step,
    )
    return moved, step


def post_choices_numpy(
    ratio: np.ndarray, active: np.ndarray, post_rate: float, uniform: np.ndarray
) -> np.ndarray:
    """The active users (``active`` (B,)) who post this round: those whose ``uniform`` (B,)
    float64 draw falls below clip(2 × ``post_rate`` × ratio / (1 + ratio), 0, 1), ratio their
    (N,) float32 ``ratio`` (post / retweet)."""
    user_ratio = ratio[active]
    post_prob = np.clip(post_rate * 2 * user_ratio / (1 + user_ratio), 0, 1)
    return active[uniform < post_prob]


def post_choices(
    ratio: np.ndarray, active: np.ndarray, post_rate: float, uniform: np.ndarray
) -> np.ndarray:
    """:func:`post_choices_numpy`; with numba, in one compiled pass (float32 ratios, int64
    users and a Python rate)."""
    if (
        BACKEND != "numba"
        or ratio.dtype != np.float32
        or active.dtype != np.int64
        or uniform.dtype != np.float64
        or type(post_rate) not in (int, float)
    ):
        return post_choices_numpy(ratio, active, post_rate, uniform)
    return _compiled()["post_choices"](ratio, active, float(post_rate * 2), uniform)


def post_columns_numpy(
    attitude: np.ndarray,
    propensity: np.ndarray,
    misinformed: np.ndarray,
    poster: np.ndarray,
    params: tuple[float, float, float],
    normal: np.ndarray,
    uniform: np.ndarray,
    draw: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stance, toxicity) (P,) float32 and misinformation (P,) bool of the posts of
    ``poster`` (P,): the poster's ``attitude`` plus stance noise × ``normal``, clipped to
    [−1, 1]; its toxicity ``propensity`` × the toxicity scale × ``uniform`` (U(0.5, 1.5)),
    clipped to [0, 1]; misinformation where the poster is ``misinformed`` and ``draw`` falls
    below the share. ``params``: stance noise, toxicity scale, misinformation share."""
    noise, scale, share = params
    stance = np.clip(attitude[poster] + noise * normal, -1, 1)
    toxicity = np.clip(propensity[poster] * scale * uniform, 0, 1)
    misinfo = misinformed[poster] & (draw < share)
    return stance.astype(np.float32), toxicity.astype(np.float32), misinfo


def post_columns(
    attitude: np.ndarray,
    propensity: np.ndarray,
    misinformed: np.ndarray,
    poster: np.ndarray,
    params: tuple[float, float, float],
    normal: np.ndarray,
    uniform: np.ndarray,
    draw: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`post_columns_numpy`; with numba, in one compiled pass (float32 attitudes and
    propensities, Python parameters)."""
    if (
        BACKEND != "numba"
        or attitude.dtype != np.float32
        or propensity.dtype != np.float32
        or misinformed.dtype != np.bool_
        or not all(type(value) in (int, float) for value in params)
    ):
        return post_columns_numpy(
            attitude, propensity, misinformed, poster, params, normal, uniform, draw
        )
    p = len(poster)
    stance, toxicity, misinfo = np.empty(p, np.float32), np.empty(p, np.float32), np.empty(p, bool)
    _compiled()["post_columns"](
        attitude,
        propensity,
        misinformed,
        poster.astype(np.int64, copy=False),
        np.array(params, np.float64),
        normal,
        uniform,
        draw,
        stance,
        toxicity,
        misinfo,
    )
    return stance, toxicity, misinfo


def flagged_per_row(feed: np.ndarray, flag: np.ndarray, block: int = 65_536) -> np.ndarray:
    """(B,) int64: how many slots of each row of the (B, F) ``feed`` (post ids, -1 = empty
    slot) hold a post whose (P,) bool ``flag`` is set. With numba, one compiled pass per
    ``block`` rows on :func:`~policysim_infra.blocks.map_blocks`' threads (counts: the same
    on any number of threads)."""
    if len(flag) == 0:  # no post yet: every slot is empty
        return np.zeros(len(feed), np.int64)
    if BACKEND == "numpy" or feed.ndim != 2 or flag.dtype != np.bool_:
        valid = feed >= 0
        return (valid & flag[np.where(valid, feed, 0)]).sum(axis=1)
    out = np.empty(len(feed), np.int64)
    count = _compiled()["flagged_per_row"]
    feed = np.ascontiguousarray(feed)

    def run(lo: int, hi: int) -> None:
        count(feed[lo:hi], flag, out[lo:hi])

    map_blocks(run, len(feed), block)
    return out
