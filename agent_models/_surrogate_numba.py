"""The numba passes of :mod:`agent_models.surrogate_kernels` (imported only when numba is
installed; top-level functions, so numba's on-disk cache finds them again)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from policysim_infra._numba_rows import clipped as _clipped

jit = numba.njit(cache=True, nogil=True)


@jit
def negated_log_odds(
    feed: np.ndarray,
    channel: np.ndarray,
    attitude: np.ndarray,
    stance: np.ndarray,
    sim: np.ndarray,
    reply_propensity: np.ndarray,
    params: np.ndarray,
    injected_code: int,
    personalized_code: int,
    out: np.ndarray,
    gap_out: np.ndarray,
) -> None:
    # NumPy's weak Python scalars meet float32 arrays as float32: those products are
    # float32 here too; every sum that meets a float64 array is float64
    interest_weight = np.float32(params[0])
    promoted, recommended = params[1], params[2]
    like_bias, dislike_bias, retweet_bias, reply_bias = (
        params[3],
        params[4],
        params[5],
        params[6],
    )
    agreement_weight = np.float32(params[7])
    retweet_agreement_weight = np.float32(params[8])
    reply_gap_weight = np.float32(params[9])
    two = np.float32(2.0)
    rows, width = feed.shape
    for r in range(rows):
        owner = attitude[r]
        propensity = np.float64(reply_propensity[r])
        for c in range(width):
            post = feed[r, c]
            post_stance = stance[post if post >= 0 else 0]
            agree = np.float32(owner * post_stance)
            gap = np.float32(np.float32(abs(np.float32(owner - post_stance))) / two)
            gap_out[r, c] = gap
            injected = channel[r, c] == injected_code
            recommended_slot = injected or channel[r, c] == personalized_code
            attention = np.float64(injected) * promoted + (
                np.float64(recommended_slot) * recommended
            )
            interest = np.float64(np.float32(interest_weight * sim[r, c])) + attention
            agreeing = np.float64(np.float32(agreement_weight * agree))
            out[0, r, c] = -((like_bias + interest) + agreeing)
            out[1, r, c] = -((dislike_bias + interest) - agreeing)
            out[2, r, c] = -(
                (retweet_bias + interest) + np.float64(np.float32(retweet_agreement_weight * agree))
            )
            out[3, r, c] = -(
                ((reply_bias + interest) + np.float64(np.float32(reply_gap_weight * gap)))
                + propensity
            )


@jit
def hits_below(
    exponents: np.ndarray,
    draws: np.ndarray,
    feed: np.ndarray,
    gap: np.ndarray,
    kinds: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    behaviours, rows, width = exponents.shape
    most = behaviours * rows * width
    row = np.empty(most, np.int64)
    post = np.empty(most, np.int64)
    kind = np.empty(most, np.int8)
    hit_gap = np.empty(most, np.float32)
    starts = np.empty(behaviours + 1, np.int64)
    n = 0
    for k in range(behaviours):
        starts[k] = n
        for r in range(rows):
            for c in range(width):
                if feed[r, c] >= 0 and draws[k, r, c] < 1.0 / (1.0 + exponents[k, r, c]):
                    row[n] = r
                    post[n] = feed[r, c]
                    kind[n] = kinds[k]
                    hit_gap[n] = gap[r, c]
                    n += 1
    starts[behaviours] = n
    return row[:n].copy(), post[:n].copy(), kind[:n].copy(), hit_gap[:n].copy(), starts


@jit
def reaction_columns(
    kind: np.ndarray,
    propensity: np.ndarray,
    gap: np.ndarray,
    attitude: np.ndarray,
    post_stance: np.ndarray,
    uniform: np.ndarray,
    normal: np.ndarray,
    params: np.ndarray,
    like: int,
    dislike: int,
    retweet: int,
    reply: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # float32 where NumPy's weak scalars meet float32 arrays (the threshold comparison too)
    civility = np.float32(params[0])
    base = np.float32(params[1])
    gap_weight = np.float32(params[2])
    stance_noise = params[3]
    toxic = np.float32(params[4])
    zero32, one32 = np.float32(0.0), np.float32(1.0)
    m = len(kind)
    toxicity = np.empty(m, np.float32)
    stance = np.empty(m, np.float32)
    positive = np.empty(m, np.bool_)
    hostile = np.empty(m, np.bool_)
    for i in range(m):
        p = propensity[i]
        hostility = np.float32(p - civility)
        if hostility < zero32:
            hostility = zero32
        raw = np.float32(
            np.float32(p * base) + np.float32(np.float32(gap_weight * gap[i]) * hostility)
        )
        noisy = np.float64(_clipped(raw, zero32, one32)) * uniform[i]
        is_reply = kind[i] == reply
        is_retweet = kind[i] == retweet
        toxicity[i] = np.float32(_clipped(noisy, 0.0, 1.0)) if is_reply else zero32
        if is_retweet:
            stance[i] = post_stance[i]
        else:
            stance[i] = np.float32(
                _clipped(np.float64(attitude[i]) + stance_noise * normal[i], -1.0, 1.0)
            )
        positive[i] = kind[i] == like or is_retweet
        hostile[i] = kind[i] == dislike or (is_reply and toxicity[i] > toxic)
    return toxicity, stance, positive, hostile


@jit
def pushed_opinions(
    opinion: np.ndarray, who: np.ndarray, moved: np.ndarray, step: np.ndarray, out: np.ndarray
) -> None:
    # out[u] = opinion[u] + (the steps of u's moved reactions, summed in reaction order) /
    # sqrt(their count), in float64 (opinion[u] alone without one), as the bincounts do
    n = len(opinion)
    push = np.zeros(n, np.float64)
    count = np.zeros(n, np.int64)
    for i in range(len(who)):
        if moved[i]:
            push[who[i]] += np.float64(step[i])
            count[who[i]] += 1
    for u in range(n):
        value = np.float64(opinion[u])
        if count[u] > 0:
            value += push[u] / np.sqrt(np.float64(count[u]))
        out[u] = value


@jit
def flagged_per_row(feed: np.ndarray, flag: np.ndarray, out: np.ndarray) -> None:
    # out[r] = the slots of feed row r (-1: empty) whose post is flagged
    for r in range(feed.shape[0]):
        count = 0
        for j in range(feed.shape[1]):
            post = feed[r, j]
            if post >= 0 and flag[post]:
                count += 1
        out[r] = count


@jit
def _sign32(x: Any) -> Any:
    # np.sign of a float32: -1, 0 or 1, NaN for NaN
    if x > 0:
        return np.float32(1)
    if x < 0:
        return np.float32(-1)
    return x if x != x else np.float32(0)


@jit
def built_in_reaction_moves(
    opinion: np.ndarray,
    stance: np.ndarray,
    kind: np.ndarray,
    positive: np.ndarray,
    hostile: np.ndarray,
    reply_code: int,
    params: np.ndarray,
    moved: np.ndarray,
    step: np.ndarray,
) -> None:
    # surrogate_mechanisms.reaction_moves of [Assimilation, Backfire, Reinforcement] on
    # float32 opinion and stance, as NumPy evaluates them: the weak Python thresholds and the
    # reinforcement's rate meet the float32 columns as float32, the np.float64 rates give
    # float64 steps; the steps are summed in the mechanisms' order.
    # params: assimilation rate, 2 × its bound, backfire rate, 2 × its gap, reinforcement
    # rate, 2 × its bound
    assimilation_rate, assimilation_limit = np.float64(params[0]), np.float32(params[1])
    backfire_rate, backfire_limit = np.float64(-params[2]), np.float32(params[3])
    reinforcement_rate, reinforcement_limit = np.float32(params[4]), np.float32(params[5])
    third = np.float32(1.0 / 3.0)
    for i in range(len(opinion)):
        o, s = opinion[i], stance[i]
        delta = s - o
        distance = abs(delta)
        civil = positive[i] or (kind[i] == reply_code and not hostile[i])
        assimilated = civil and distance <= assimilation_limit
        backfired = hostile[i] and distance >= backfire_limit
        reinforced = (
            civil
            and distance <= reinforcement_limit
            and _sign32(s) == _sign32(o)
            and abs(s) > third
        )
        total = assimilation_rate * np.float64(delta) if assimilated else 0.0
        total = total + (backfire_rate * np.float64(delta) if backfired else 0.0)
        push = reinforcement_rate * _sign32(s) * (np.float32(1) - abs(o))
        total = total + np.float64(push if reinforced else np.float32(0))
        moved[i] = assimilated or backfired or reinforced
        step[i] = total


@jit
def post_choices(
    ratio: np.ndarray, active: np.ndarray, doubled_rate: float, uniform: np.ndarray
) -> np.ndarray:
    # active users whose uniform falls below clip(2·post_rate·ratio / (1 + ratio), 0, 1),
    # in float32 as NumPy evaluates it (the weak Python rate meets the float32 ratios)
    rate, one = np.float32(doubled_rate), np.float32(1)
    out = np.empty(len(active), active.dtype)
    n = 0
    for i in range(len(active)):
        r = ratio[active[i]]
        if uniform[i] < _clipped(rate * r / (one + r), np.float32(0), one):
            out[n] = active[i]
            n += 1
    return out[:n].copy()


@jit
def post_columns(
    attitude: np.ndarray,
    propensity: np.ndarray,
    misinformed: np.ndarray,
    poster: np.ndarray,
    params: np.ndarray,
    normal: np.ndarray,
    uniform: np.ndarray,
    draw: np.ndarray,
    stance: np.ndarray,
    toxicity: np.ndarray,
    misinfo: np.ndarray,
) -> None:
    # each new post's stance (float64, clipped, then float32), toxicity (the float32
    # propensity times the weak float32 scale, then times the float64 uniform) and whether it
    # carries misinformation; params: stance noise, toxicity scale, misinformation share
    noise, scale, share = params[0], np.float32(params[1]), params[2]
    for i in range(len(poster)):
        u = poster[i]
        stance[i] = np.float32(_clipped(np.float64(attitude[u]) + noise * normal[i], -1.0, 1.0))
        raw = np.float64(propensity[u] * scale) * uniform[i]
        toxicity[i] = np.float32(_clipped(raw, 0.0, 1.0))
        misinfo[i] = misinformed[u] and draw[i] < share
