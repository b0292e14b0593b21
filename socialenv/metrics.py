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
- ``active_users``, ``posts``, ``reactions``, ``follow_edges``: counts.

HiSim's macro metrics of a population's attitudes, :func:`bias` (mean) and
:func:`diversity` (variance), are reported by the sweep and the ABM comparisons
(:func:`socialenv.episodes.opinion_metrics`).
"""

from __future__ import annotations

import numpy as np

from socialenv import kernels

METRIC_NAMES: tuple[str, ...] = (
    "stance_mean",
    "stance_std",
    "toxicity",
    "cross_interaction_ratio",
    "misinformation_ratio",
    "engagement",
    "echo_chamber_index",
    "exposure_removed",
    "active_users",
    "posts",
    "reactions",
    "follow_edges",
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
    share = kernels.same_sign_share(np.sign(stance), followees_indptr, followees)
    return float(share.mean(dtype=np.float64))


def bias(attitude: np.ndarray) -> float:
    """HiSim's bias: the mean attitude of (N,) attitudes."""
    return float(np.mean(attitude)) if len(attitude) else 0.0


def diversity(attitude: np.ndarray) -> float:
    """HiSim's diversity: the variance of (N,) attitudes."""
    return float(np.var(attitude)) if len(attitude) else 0.0
