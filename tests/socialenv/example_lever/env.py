"""PolicySimTest-FeedCap-v0: cap the feeds of a sampled share of the active users."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core.simulation import RoundResult
from socialenv.envs.base import PolicySimEnv
from tests.socialenv.example_lever.lever import FeedCapLever


class FeedCapEnv(PolicySimEnv):
    """Arm k = (sampled user k // L, cap k % L) over the L caps; the one feature is the
    cap as a share of the feed's length. An arm's reward is the share of its user's feed
    kept (of the feed before the cap); ``info["metrics"]["objective"]`` is the reactions
    per active user."""

    lever_class = FeedCapLever
    arm_kind = "feed_cap"
    num_arm_features = 1

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(1), np.ones(1)

    def _num_arms(self) -> int:
        self._capacity = self.lever_capacity(None)
        return self._capacity * self._arms_per_user()

    def _arms_per_user(self) -> int:
        return len(self.lever_config.caps)

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        active = self.sim.active
        take = self.lever_take(len(active), len(active), None)
        users = np.full(self._capacity, -1, np.int64)
        users[:take] = np.sort(rng.choice(active, size=take, replace=False))
        caps = np.asarray(self.lever_config.caps, np.int64)
        arm_user = np.repeat(users, len(caps))
        return {"user": arm_user, "cap": np.tile(caps, self._capacity), "mask": arm_user >= 0}

    def _arm_contexts(
        self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray
    ) -> np.ndarray:
        feed_length = self.config.recommender.relational + self.config.recommender.personalized
        feed_length += self.config.recommender.headline
        share = np.minimum(arms["cap"] / max(feed_length, 1), 1.0)
        context = np.concatenate([user_rows.take(arm_row, axis=0), share[:, None]], axis=1)
        context = context.astype(np.float32)
        context[~arms["mask"]] = 0.0
        return context

    def _arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        chosen = result.policy.choice
        shown = np.bincount(result.impression_user, minlength=len(self.sim.users.stance))
        seen = shown[chosen["user"]]
        kept = seen / np.maximum(seen + chosen["removed"], 1)
        active = max(len(result.active), 1)
        return kept.astype(np.float32), {
            "objective": len(result.output.react_user) / active,
            "capped_reactions": float((result.policy.reaction_choice >= 0).sum()),
        }

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "abortion"}
