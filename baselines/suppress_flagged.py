"""Reference policies for ``PolicySim-Moderation-v0``.

- :class:`SuppressFlagged` — act on the classifier's flags: apply one action (default
  delete) to every flagged candidate post, most engaged first, up to the budget; leave the
  other slots empty. With an imperfect classifier it removes clean posts too (wrongful
  removals), which the env's reward charges. With ``toxic_action`` it also reads the posts'
  toxicity scores: a post at or above the platform's ``moderation.toxic_threshold`` gets
  ``toxic_action`` (flagged or not), the other flagged posts ``action``.
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
        toxic_action: None (flags only), or the action for the posts whose toxicity score
            (the arms' ``post_toxicity``) is at or above ``moderation.toxic_threshold``.
    """

    def __init__(self, env: Any, action: str = "delete", toxic_action: str | None = None) -> None:
        base = getattr(env, "unwrapped", env)
        actions = base.moderation_config.actions
        if action not in actions:
            raise ValueError(f"action={action!r} is not allowed: one of {actions}")
        if toxic_action is not None and toxic_action not in actions:
            raise ValueError(
                f"toxic_action={toxic_action!r} is not allowed: one of {actions} or None"
            )
        self.budget, self.no_op = base.slate_size, base.no_op
        offset = base.context_dim - len(MODERATION_FEATURES)
        self._action_col = offset + MODERATION_FEATURES.index(f"action_{action}")
        self._flag_col = offset + MODERATION_FEATURES.index("flagged")
        self._engagement_col = offset + MODERATION_FEATURES.index("log_engagement")
        self._toxicity_col = offset + MODERATION_FEATURES.index("post_toxicity")
        self._toxic_action_col = (
            None
            if toxic_action is None
            else offset + MODERATION_FEATURES.index(f"action_{toxic_action}")
        )
        self._toxic_threshold = float(base.moderation_config.toxic_threshold)
        self.action, self.toxic_action = action, toxic_action

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        arms = obs["arms"]
        wanted = (arms[:, self._action_col] > 0) & (arms[:, self._flag_col] > 0)
        if self._toxic_action_col is not None:
            toxic = arms[:, self._toxicity_col] >= self._toxic_threshold
            wanted = np.where(toxic, arms[:, self._toxic_action_col] > 0, wanted)
        ok = obs["action_mask"].astype(bool) & wanted
        candidates = np.flatnonzero(ok)
        order = candidates[np.argsort(-arms[candidates, self._engagement_col], kind="stable")][
            : self.budget
        ]
        slate = np.full(self.budget, self.no_op, np.int64)
        slate[: len(order)] = order
        return slate
