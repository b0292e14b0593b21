"""PolicySim-Exposure-v0's lever: the exposure level of the authors the policy governs."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core.lever import Lever, PolicyEffects
from socialenv.envs.exposure.config import ExposureLeverConfig


class ExposureLever(Lever):
    """Sets authors' exposure probability p_i (the chance each of their posts passes the
    platform's filter, :class:`socialenv.core.platform.ExposureControl`); a level stays in force
    until the policy changes it, and the author is *governed* for the rest of the episode.

    :meth:`apply` takes ``choice["user"]`` and ``choice["level"]``. :meth:`effects`
    reports per choice its "user", "level" and "impressions" (the impressions of the
    user's posts this round), and the impressions of every author held below level 1
    ("user", "post", "author", "removed"): those whose fate the policy changed."""

    config_class = ExposureLeverConfig

    def __init__(self, config: ExposureLeverConfig) -> None:
        super().__init__(config)
        self.reset(0)

    def reset(self, num_users: int) -> None:
        #: (N,) the users whose level the policy has set this episode
        self.governed = np.zeros(num_users, bool)
        self._user = np.zeros(0, np.int64)
        self._level = np.zeros(0, np.float32)

    def apply(self, choice: dict[str, np.ndarray]) -> np.ndarray:
        self._user = np.asarray(choice["user"], np.int64)
        self._level = np.asarray(choice["level"])
        self.sim.users.exposure[self._user] = self._level
        self.governed[self._user] = True
        return np.arange(len(self._user), dtype=np.int64)

    def effects(self, round_: Any) -> PolicyEffects:
        author = round_.impression_author
        held = self.sim.users.exposure[author] < 1
        impressions = np.bincount(author, minlength=len(self.governed))
        effects = PolicyEffects(
            choice={
                "user": self._user,
                "level": self._level,
                "impressions": impressions[self._user],
            },
            impression={
                "user": round_.impression_user[held],
                "post": round_.impression_post[held],
                "author": author[held],
                "removed": round_.impression_removed[held],
            },
            reaction_choice=np.full(len(round_.output.react_user), -1, np.int64),
        )
        self._user = np.zeros(0, np.int64)
        self._level = np.zeros(0, np.float32)
        return effects

    def state_dict(self) -> dict[str, Any]:
        return {"governed": self.governed.copy()}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.governed = np.asarray(state["governed"], bool).copy()
