"""PolicySim-Exposure-v0: learn whose posts to let through so misinformation is held back."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.envs.base import PolicySimEnv
from socialenv.simulation import RoundResult


class ExposureEnv(PolicySimEnv):
    """Exposure-control intervention with the misinformation objective (§2.2.2, Eq. 10).

    Each round the platform samples ``exposure_users`` candidate users among the authors of
    recent posts (padded with random users); every (user, level) pair over
    ``exposure_levels`` (default 0, .25, .5, .75, 1) is an arm. A chosen arm sets that user's
    exposure probability p_i (the chance each of their posts passes the filter) from this
    round on, until another arm changes it. If a slate names the same user twice, the first
    arm wins and the others count as invalid.

    Observation (``Dict``):
        "arms": (K, D) float32, K = exposure_users × levels, arm k = (user k // L, level
            k % L). D = 2d + 10: the user's propagated context (2d) and 10 features: level,
            the user's recent misinformation share m̂ (observable: share of their recent posts
            flagged as misinformation), level·m̂, log(1 + followers), level·log(1 + followers),
            stance S_i, recent toxicity, log(1 + recent posts), level·log(1 + recent posts),
            the user's current exposure p_i.
        "action_mask": (K,) int8 (all ones unless the population is smaller than the slate).
        optional "user_context", "stance", "graph" as in ``PolicySim-Rec-v0``.

    Action: ``MultiDiscrete([K] * budget)``; repeated indices applied once (see above).

    Reward: the mean over the slate's distinct arms of the arm's reward in [0, 1]
    (``reward.misinformation_mode``):
        "effect" (default): r = clip(0.5 + 0.5·(removed_mis − w_v·removed_clean − harmed) / n, 0, 1)
            over the n impressions of the user's posts this round: misinformation impressions
            the filter removed, clean impressions it removed (lost visibility, weight w_v), and
            delivered misinformation impressions whose receiver is misinformed at t+1 (Eq. 10's
            outcome). An arm on a user with no impressions scores 0.5 (no effect).
        "paper": Eq. 10 with a visibility term, r = (1 − w_v)·(1 − share of the user's
            receivers misinformed at t+1) + w_v·p. (It rewards acting on users whose audience is
            already clean, whatever the level: a bandit can score well without suppressing
            anyone, which is why "effect" is the default.)
    ``info["metrics"]`` adds ``exposure_removed`` (share of impressions filtered) next to the
    ``misinformation_ratio``.

    Episode end: truncated after ``rounds`` rounds (default 10); never terminated.
    """

    num_arm_features = 10

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "misinformation", "budget": 20}

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # followers < N; post counts fit the int32 post ids
        log_followers = np.log1p(self._num_users())
        log_posts = np.log1p(float(np.iinfo(np.int32).max))
        low = [0, 0, 0, 0, 0, -1, 0, 0, 0, 0]
        high = [1, 1, 1, log_followers, log_followers, 1, 1, log_posts, log_posts, 1]
        return np.asarray(low, np.float64), np.asarray(high, np.float64)

    def _arm_responded(self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray) -> np.ndarray:
        """Whether each applied arm's user had at least one impression this round (the level
        had something to act on)."""
        author = self.sim.posts.author[result.impression_post]
        return np.isin(self._arms["user"][applied], author)

    def _num_arms(self) -> int:
        return self.config.exposure_users * len(self.config.exposure_levels)

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, cfg = self.sim, self.config
        n = len(sim.users.stance)
        lo, hi = sim.recent_post_range(cfg.recommender.window)
        authors = np.unique(sim.posts.author[lo:hi])
        take = min(cfg.exposure_users, len(authors))
        users = rng.choice(authors, size=take, replace=False) if take else np.zeros(0, np.int64)
        if take < cfg.exposure_users:
            others = np.setdiff1d(np.arange(n), users)
            extra = rng.choice(others, size=min(cfg.exposure_users - take, len(others)), replace=False)
            users = np.concatenate([users, extra])
        padded = np.full(cfg.exposure_users, -1, np.int64)
        padded[: len(users)] = np.sort(users)
        levels = np.asarray(cfg.exposure_levels, np.float32)
        arm_user = np.repeat(padded, len(levels))
        arm_level = np.tile(levels, cfg.exposure_users)
        return {"user": arm_user, "level": arm_level, "mask": arm_user >= 0}

    def _arm_contexts(self, arms: dict[str, np.ndarray], arm_user_context: np.ndarray) -> np.ndarray:
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        level = arms["level"]
        indptr, _ = sim.graph.followers_csr()
        followers = np.log1p(np.diff(indptr)[user]).astype(np.float32)
        lo, hi = sim.recent_post_range(self.config.recommender.window)
        recent_posts = np.log1p(np.bincount(sim.posts.author[lo:hi], minlength=len(sim.users.stance))[user])
        misinfo = sim.recent_misinfo[user]
        features = np.stack([
            level, misinfo, level * misinfo, followers, level * followers,
            sim.users.stance[user], sim.recent_toxicity[user], recent_posts, level * recent_posts,
            sim.users.exposure[user],
        ], axis=1)
        context = np.concatenate([arm_user_context, features], axis=1).astype(np.float32)
        context[~arms["mask"]] = 0.0
        return context

    def _apply_action(self, chosen: np.ndarray) -> tuple[np.ndarray, tuple[None, None]]:
        user = self._arms["user"][chosen]
        _, first = np.unique(user, return_index=True)
        applied = chosen[np.sort(first)]
        self.sim.users.exposure[self._arms["user"][applied]] = self._arms["level"][applied]
        return applied, (None, None)

    def _arm_rewards(self, applied: np.ndarray, result: RoundResult) -> tuple[np.ndarray, dict[str, float]]:
        sim = self.sim
        w_v = self.config.reward.visibility_weight
        user = self._arms["user"][applied]
        level = self._arms["level"][applied]
        author = sim.posts.author[result.impression_post]
        is_mis = sim.posts.misinfo[result.impression_post]
        removed = result.impression_removed
        newly = sim.users.misinformed & ~result.misinformed_before
        n = len(sim.users.stance)
        position = np.full(n, -1, np.int64)
        position[user] = np.arange(len(user))
        arm_of = position[author]
        mine = arm_of >= 0
        k = len(user)

        def per_arm(values: np.ndarray) -> np.ndarray:
            return np.bincount(arm_of[mine], weights=values[mine].astype(np.float64), minlength=k)

        impressions = per_arm(np.ones(len(author)))
        if self.config.reward.misinformation_mode == "effect":
            removed_mis = per_arm(removed & is_mis)
            removed_clean = per_arm(removed & ~is_mis)
            harmed = per_arm(~removed & is_mis & newly[result.impression_user])
            reward = 0.5 + 0.5 * (removed_mis - w_v * removed_clean - harmed) / np.maximum(impressions, 1)
        else:
            misinformed_after = per_arm(sim.users.misinformed[result.impression_user])
            share = np.where(impressions > 0, misinformed_after / np.maximum(impressions, 1), 0.0)
            reward = (1 - w_v) * (1 - share) + w_v * level
        extra = {"mean_exposure": float(sim.users.exposure.mean())}
        return np.clip(reward, 0.0, 1.0).astype(np.float32), extra
