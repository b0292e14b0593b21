"""Reference policies for ``PolicySim-Moderation-v0``.

- :class:`SuppressFlagged` — act on the classifier's flags: apply one action (default
  delete) to every flagged candidate post, most engaged first, up to the budget; leave the
  other slots empty. With an imperfect classifier it removes clean posts too (wrongful
  removals), which the env's reward charges.
- no moderation is the empty slate (``policysim run --policy origin``); the learned bandits
  (LinUCB, ...) come from :mod:`bandits` through :func:`socialenv.envs.policy_registry.make_run_policy`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.envs.moderation import MODERATION_FEATURES


class SuppressFlagged:
    """Actor (``act(obs) -> slate``) that applies ``action`` to the flagged candidate posts.

    Args:
        env: the moderation env (wrapped or not): gives the budget, the no-op value and the
            feature layout.
        action: one of the env's ``moderation.actions``.
    """

    def __init__(self, env: Any, action: str = "delete") -> None:
        base = getattr(env, "unwrapped", env)
        if action not in base.moderation_config.actions:
            raise ValueError(
                f"action={action!r} is not allowed: one of {base.moderation_config.actions}"
            )
        self.budget, self.no_op = base.slate_size, base.no_op
        offset = base.context_dim - len(MODERATION_FEATURES)
        self._action_col = offset + MODERATION_FEATURES.index(f"action_{action}")
        self._flag_col = offset + MODERATION_FEATURES.index("flagged")
        self._engagement_col = offset + MODERATION_FEATURES.index("log_engagement")
        self.action = action

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        arms = obs["arms"]
        ok = (
            obs["action_mask"].astype(bool)
            & (arms[:, self._action_col] > 0)
            & (arms[:, self._flag_col] > 0)
        )
        candidates = np.flatnonzero(ok)
        order = candidates[np.argsort(-arms[candidates, self._engagement_col], kind="stable")][
            : self.budget
        ]
        slate = np.full(self.budget, self.no_op, np.int64)
        slate[: len(order)] = order
        return slate
