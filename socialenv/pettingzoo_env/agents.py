"""Who the agents of the PettingZoo view are and what a user agent is rewarded for.

``"user_<id>"`` for each controlled user and, optionally, ``"platform"``. A user's reward
is the weighted reactions its posts received this round (:data:`DEFAULT_USER_REWARD_WEIGHTS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import Behaviour
from policysim_infra.validation import check, check_keys

PLATFORM = "platform"
DEFAULT_USER_REWARD_WEIGHTS: dict[str, float] = {
    "like": 1.0,
    "retweet": 1.0,
    "reply": 1.0,
    "dislike": -1.0,
}


def user_agent(user_id: int) -> str:
    return f"user_{int(user_id)}"


def controlled_user_ids(controlled_users: int | Any, num_users: int) -> np.ndarray:
    """The sorted, unique ids of the controlled users: the first ``controlled_users`` ids for
    an integer, else the given ids (each in ``[0, num_users)``)."""
    n = num_users
    if isinstance(controlled_users, int | np.integer) and not isinstance(controlled_users, bool):
        check(
            0 <= controlled_users <= n,
            "controlled_users",
            f"an integer in [0, {n}] or a list of user ids",
            controlled_users,
        )
        return np.arange(int(controlled_users), dtype=np.int64)
    controlled = np.unique(np.asarray(list(controlled_users), np.int64))
    check(
        not len(controlled) or (controlled.min() >= 0 and controlled.max() < n),
        "controlled_users",
        f"user ids in [0, {n})",
        controlled_users,
    )
    return controlled


def reaction_weights(user_reward_weights: dict[str, float] | None) -> np.ndarray:
    """The weight of each reaction kind (indexed by :class:`Behaviour`) in a user's reward;
    None = :data:`DEFAULT_USER_REWARD_WEIGHTS`."""
    weights = dict(
        DEFAULT_USER_REWARD_WEIGHTS if user_reward_weights is None else user_reward_weights
    )
    check_keys(
        weights, ("like", "dislike", "retweet", "reply"), "user_reward_weights", "reaction(s)"
    )
    kind_weight = np.zeros(max(int(b) for b in Behaviour) + 1)
    for name, value in weights.items():
        kind_weight[int(Behaviour[name.upper()])] = float(value)
    return kind_weight


def user_rewards(
    react_post_author: np.ndarray,
    react_kind: np.ndarray,
    position: np.ndarray,
    kind_weight: np.ndarray,
    num_controlled: int,
) -> np.ndarray:
    """(C,) each controlled user's reward: the weighted reactions to its posts this round.

    Args:
        react_post_author: (M,) the author of the post of each reaction of the round.
        react_kind: (M,) the kind of each reaction.
        position: (N,) each user's index among the C controlled users (-1 = not controlled).
        kind_weight: :func:`reaction_weights`.
        num_controlled: C.
    """
    slot = position[react_post_author]
    mine = slot >= 0
    return np.bincount(slot[mine], weights=kind_weight[react_kind[mine]], minlength=num_controlled)
