"""Platform metrics, each defined once here (reported per round in ``info["metrics"]``).

- ``stance_mean``, ``stance_std``: mean and std of the smoothed stance S_i^t (Eq. 2) over
  all users.
- ``toxicity``: mean toxicity of the texts written this round (original posts and replies;
  retweets add no text of their own). Paper: Perspective API; here the brain's toxicity.
- ``cross_interaction_ratio``: share of this round's reactions (like, dislike, retweet,
  reply) whose user and post author hold opposite discrete stances (s_u·s_a = −1).
- ``misinformation_ratio``: share of users misinformed (m_i^{t+1}).
- ``engagement``: reactions per active user this round.
- ``echo_chamber_index``: mean, over users who follow anyone, of the share of their followees
  whose stance has the same sign as theirs (sign of S, 0 counts as its own sign).
- ``exposure_removed``: share of feed impressions removed by exposure control this round.
- ``policy_share``: share of this round's impressions in slots the policy filled
  (``FeedChannel.INJECTED``).
- ``active_users``, ``posts``, ``reactions``, ``follow_edges``, ``events_fired``: counts.

:func:`round_metrics` computes them all for the simulation's measure phase.

HiSim's macro metrics of a population's attitudes, :func:`bias` (mean) and
:func:`diversity` (variance), are reported by the sweep and the ABM comparisons
(:func:`socialenv.envs.episodes.opinion_metrics`).
"""

from __future__ import annotations

import numpy as np

from agent_models.types import FeedChannel
from socialenv.core import kernels

METRIC_NAMES: tuple[str, ...] = (
    "stance_mean",
    "stance_std",
    "toxicity",
    "cross_interaction_ratio",
    "misinformation_ratio",
    "engagement",
    "echo_chamber_index",
    "exposure_removed",
    "policy_share",
    "active_users",
    "posts",
    "reactions",
    "follow_edges",
    "events_fired",
)


def round_metrics(
    *,
    stance: np.ndarray,
    text_toxicity: np.ndarray,
    reaction_cross: np.ndarray,
    misinformed: np.ndarray,
    reactions: int,
    active: int,
    followees: tuple[np.ndarray, np.ndarray],
    removed: int,
    impressions: int,
    channel: np.ndarray,
    posts: int,
    follow_edges: int,
    events_fired: int,
) -> dict[str, float]:
    """The platform metrics of one round (:data:`METRIC_NAMES`, in order).

    Args:
        stance: (N,) smoothed stances after the round.
        text_toxicity: toxicity of the texts written this round.
        reaction_cross: (R,) bool, whether each reaction's user and its post's author held
            opposite discrete stances at the start of the round (their share is
            :func:`cross_interaction_ratio` of the two ends' stances).
        misinformed: (N,) after the round.
        reactions, active: the round's reactions and active users.
        followees: the follow graph as CSR (indptr, indices; row u lists whom u follows).
        removed, impressions: impressions exposure control removed, of all candidates.
        channel: (I,) the channel of each candidate impression.
        posts, follow_edges, events_fired: counts.
    """
    mean, std, text_mean, misinformed_share, cross_share, policy_share = round_means(
        stance, text_toxicity, misinformed, reaction_cross, channel
    )
    return {
        "stance_mean": mean,
        "stance_std": std,
        "toxicity": text_mean,
        "cross_interaction_ratio": cross_share,
        "misinformation_ratio": misinformed_share,
        "engagement": engagement(reactions, active),
        "echo_chamber_index": echo_chamber_index(stance, *followees),
        "exposure_removed": removed / max(impressions, 1),
        "policy_share": policy_share,
        "active_users": float(active),
        "posts": float(posts),
        "reactions": float(reactions),
        "follow_edges": float(follow_edges),
        "events_fired": float(events_fired),
    }


def round_means(
    stance: np.ndarray,
    text_toxicity: np.ndarray,
    misinformed: np.ndarray,
    reaction_cross: np.ndarray,
    channel: np.ndarray,
) -> tuple[float, float, float, float, float, float]:
    """``stance_mean``, ``stance_std``, ``toxicity``, ``misinformation_ratio``, the share of
    cross-stance reactions and the share of impressions in ``FeedChannel.INJECTED`` slots (0
    without reactions or impressions): in one compiled pass with the compiled kernels
    (:func:`kernels.compiled_round_means`, the same values), else by the functions below."""
    injected = int(FeedChannel.INJECTED)
    compiled = kernels.compiled_round_means(
        stance, text_toxicity, misinformed, reaction_cross, channel, injected
    )
    if compiled is not None:
        return compiled
    return (
        stance_mean(stance),
        stance_std(stance),
        toxicity(text_toxicity),
        misinformation_ratio(misinformed),
        float(reaction_cross.mean()) if len(reaction_cross) else 0.0,
        float((channel == injected).mean()) if len(channel) else 0.0,
    )


def stance_mean(stance: np.ndarray) -> float:
    return float(stance.mean())


def stance_std(stance: np.ndarray) -> float:
    return float(stance.std())


def toxicity(text_toxicity: np.ndarray) -> float:
    """Mean over the texts written this round; 0 when nobody wrote."""
    return float(text_toxicity.mean()) if len(text_toxicity) else 0.0


def cross_interaction_ratio(user_stance: np.ndarray, author_stance: np.ndarray) -> float:
    """``user_stance``, ``author_stance``: (M,) discrete stances of each reaction's two ends."""
    if len(user_stance) == 0:
        return 0.0
    return float(np.mean(user_stance.astype(np.int16) * author_stance == -1))


def misinformation_ratio(misinformed: np.ndarray) -> float:
    return float(misinformed.mean())


def engagement(num_reactions: int, num_active: int) -> float:
    return num_reactions / num_active if num_active else 0.0


def echo_chamber_index(
    stance: np.ndarray, followees_indptr: np.ndarray, followees: np.ndarray
) -> float:
    """From the follow graph as CSR (row u lists whom u follows)."""
    if len(followees) == 0:
        return 0.0
    # one byte per user: the followees' signs, read at random, stay in cache
    sign = np.sign(stance).astype(np.int8)
    share = kernels.same_sign_share(sign, followees_indptr, followees)
    return float(share.mean(dtype=np.float64))


def bias(attitude: np.ndarray) -> float:
    """HiSim's bias: the mean attitude of (N,) attitudes."""
    return float(np.mean(attitude)) if len(attitude) else 0.0


def diversity(attitude: np.ndarray) -> float:
    """HiSim's diversity: the variance of (N,) attitudes."""
    return float(np.var(attitude)) if len(attitude) else 0.0
