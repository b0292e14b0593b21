"""A controlled user's action: the behaviours it picks on the slots of its feed.

``MultiBinary(F·6 + 1)``: for slot s, entries ``6s .. 6s+5`` are :data:`USER_BEHAVIOURS`
and the last entry writes an original post. :func:`encode_user_action` builds one;
:func:`decode_user_actions` turns the agents' actions of a step into the
:class:`ExternalActions` the mixed-population brain applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from socialenv.pettingzoo_env.agents import user_agent

#: Behaviours of a controlled user on one feed slot (the layout of its action).
USER_BEHAVIOURS: tuple[str, ...] = ("like", "dislike", "retweet", "reply", "follow", "unfollow")


def encode_user_action(behaviours: np.ndarray, post: bool = False) -> np.ndarray:
    """The ``MultiBinary(F·6 + 1)`` action from ``behaviours`` (F, 6) bool (columns in
    :data:`USER_BEHAVIOURS` order) and the ``post`` flag."""
    behaviours = np.asarray(behaviours)
    if behaviours.ndim != 2 or behaviours.shape[1] != len(USER_BEHAVIOURS):
        raise ValueError(
            f"behaviours must have shape (F, {len(USER_BEHAVIOURS)}); got {behaviours.shape}"
        )
    return np.concatenate([behaviours.astype(np.int8).reshape(-1), [np.int8(bool(post))]])


@dataclass
class ExternalActions:
    """Behaviours of C controlled users on the feeds they observed.

    Attributes:
        user: (C,) int64 user ids.
        feed: (C, F) int64 post ids the user observed (-1 = empty slot).
        behaviours: (C, F, 6) bool, :data:`USER_BEHAVIOURS` per slot.
        post: (C,) bool, write an original post.
    """

    user: np.ndarray
    feed: np.ndarray
    behaviours: np.ndarray
    post: np.ndarray


def decode_user_actions(
    actions: dict[str, Any], controlled: np.ndarray, observed_feed: np.ndarray, feed_slots: int
) -> ExternalActions:
    """The behaviours in ``actions`` (agent -> ``MultiBinary(F·6 + 1)`` action, absent or None
    = do nothing) of the ``controlled`` users, on the (C, F) feeds they observed."""
    f, b = feed_slots, len(USER_BEHAVIOURS)
    size = f * b + 1
    rows, decoded = [], []
    for i, u in enumerate(controlled):
        agent = user_agent(u)
        if agent not in actions or actions[agent] is None:
            continue
        a = np.asarray(actions[agent])
        if a.shape != (size,) or not np.isin(a, (0, 1)).all():
            raise ValueError(
                f"action of {agent} must be a 0/1 array of shape ({size},) = feed_slots·{b} + 1 "
                f"(behaviours {USER_BEHAVIOURS} per slot, then post); got shape {a.shape}"
            )
        rows.append(i)
        decoded.append(a.astype(bool))
    if not rows:
        return ExternalActions(
            np.zeros(0, np.int64),
            np.zeros((0, f), np.int64),
            np.zeros((0, f, b), bool),
            np.zeros(0, bool),
        )
    arr = np.stack(decoded)
    idx = np.asarray(rows)
    return ExternalActions(
        user=controlled[idx],
        feed=observed_feed[idx],
        behaviours=arr[:, :-1].reshape(len(idx), f, b),
        post=arr[:, -1],
    )


def user_action_space(feed_slots: int) -> spaces.MultiBinary:
    """A controlled user's action space (a new object per call: one per agent)."""
    return spaces.MultiBinary(feed_slots * len(USER_BEHAVIOURS) + 1)
