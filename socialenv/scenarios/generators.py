"""Synthetic user profiles and texts, shared by hand-made and generated scenarios.

The profile vocabularies, :func:`default_profiles` (the paper's four profile attributes,
with interaction statistics that follow a follow graph's degrees) and
:func:`synthetic_text` (template posts expressing a stance, for brains that read text).
:mod:`socialenv.scenarios.scenario` builds a scenario's defaults from them; :mod:`socialenv.scenarios.builtin`
generates whole populations.
"""

from __future__ import annotations

import numpy as np

from agent_models.profile import ROLES, TOPICS
from agent_models.types import Categorical, Profiles

IDENTITIES: tuple[str, ...] = (
    "journalist",
    "student",
    "activist",
    "teacher",
    "lawyer",
    "healthcare worker",
    "parent",
    "retiree",
    "small-business owner",
    "religious leader",
    "tech worker",
    "local politician",
)
POSTING_STYLES: tuple[str, ...] = (
    "formal and informative",
    "sarcastic, short posts",
    "emotional, many exclamation marks",
    "humorous, memes and emoji",
    "combative, calls people out",
    "supportive and warm",
    "terse, mostly links",
    "storytelling, personal anecdotes",
)
#: Posting styles whose users are more toxic than their baseline (index into POSTING_STYLES).
COMBATIVE_STYLES = (1, 4)

_STANCE_PHRASES = {
    -1: ("this is wrong and must be stopped", "we cannot accept this", "shameful decision"),
    0: ("hard to know what to think", "there are two sides here", "waiting for more facts"),
    1: ("finally, the right call", "this is what we fought for", "proud of this outcome"),
}


def _roles(
    post_retweet_ratio: np.ndarray,
    reply_frequency: np.ndarray,
    follower_following_ratio: np.ndarray,
    activity: np.ndarray,
) -> np.ndarray:
    """Interaction role from the interaction statistics (rules in ROLES order)."""
    role = np.full(len(activity), ROLES.index("regular"), dtype=np.int32)
    role[activity < 0.12] = ROLES.index("lurker")
    role[reply_frequency > 0.35] = ROLES.index("conversationalist")
    role[post_retweet_ratio < 0.5] = ROLES.index("amplifier")
    role[(follower_following_ratio > 2.0) & (post_retweet_ratio >= 1.0)] = ROLES.index(
        "broadcaster"
    )
    return role


def default_profiles(
    n: int,
    follow_src: np.ndarray,
    follow_dst: np.ndarray,
    rng: np.random.Generator,
    activity: np.ndarray | None = None,
) -> Profiles:
    """Synthetic profiles; the interaction statistics follow the graph's degrees."""
    followers = np.bincount(follow_dst, minlength=n).astype(np.float32)
    following = np.bincount(follow_src, minlength=n).astype(np.float32)
    ff_ratio = (followers + 1) / (following + 1)
    post_retweet_ratio = rng.lognormal(0.0, 0.7, n).astype(np.float32)
    reply_frequency = rng.beta(2.0, 6.0, n).astype(np.float32)
    activity = rng.beta(1.2, 2.5, n) if activity is None else activity
    interests = np.zeros((n, len(TOPICS)), dtype=bool)
    k = rng.integers(1, 4, n)
    for j in range(3):
        chosen = rng.integers(0, len(TOPICS), n)
        interests[np.flatnonzero(k > j), chosen[k > j]] = True
    return Profiles(
        identity=Categorical(rng.integers(0, len(IDENTITIES), n).astype(np.int32), IDENTITIES),
        interests=interests,
        topics=TOPICS,
        posting_style=Categorical(
            rng.integers(0, len(POSTING_STYLES), n).astype(np.int32), POSTING_STYLES
        ),
        interaction_role=Categorical(
            _roles(post_retweet_ratio, reply_frequency, ff_ratio, activity), ROLES
        ),
        post_retweet_ratio=post_retweet_ratio,
        reply_frequency=reply_frequency,
        follower_following_ratio=ff_ratio.astype(np.float32),
    )


def synthetic_text(
    topic: str,
    stance: np.ndarray,
    misinfo: np.ndarray,
    rng: np.random.Generator,
    misinformation_message: str | None = None,
) -> list[str]:
    """Short template posts expressing ``stance`` (P,) on ``topic``; misinfo posts carry the
    message. Used when the brain reads text (LLM agents)."""
    discrete = np.where(stance > 1 / 3, 1, np.where(stance < -1 / 3, -1, 0))
    choice = rng.integers(0, 3, len(stance))
    texts = []
    for s, c, m in zip(discrete.tolist(), choice.tolist(), misinfo.tolist(), strict=True):
        text = f"On {topic}: {_STANCE_PHRASES[s][c]}."
        if m and misinformation_message:
            text = f"{misinformation_message} {text}"
        texts.append(text)
    return texts
