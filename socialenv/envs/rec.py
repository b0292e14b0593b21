"""PolicySim-Rec-v0: learn what to recommend so that opposing viewpoints meet without toxicity."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import Behaviour
from socialenv.envs.base import PolicySimEnv
from socialenv.simulation import RoundResult

_ENGAGEMENT_KEYS = {
    int(Behaviour.REPLY): "reply", int(Behaviour.RETWEET): "retweet",
    int(Behaviour.LIKE): "like", int(Behaviour.DISLIKE): "dislike",
}


def _segment_max(values: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Max of ``values[start[i]:stop[i]]`` for disjoint, non-empty segments."""
    order = np.argsort(start)
    bounds = np.stack([start[order], stop[order]], axis=1).ravel()
    padded = np.append(values, values.dtype.type(0))
    out = np.empty(len(start), values.dtype)
    out[order] = np.maximum.reduceat(padded, bounds)[::2]
    return out


class RecEnv(PolicySimEnv):
    """Recommendation intervention with the cross-viewpoint objective (paper §2.2.2, Eq. 9).

    Each round the platform samples ``candidate_users`` users among those active this round
    and ``candidate_posts`` recent posts (from the last ``recommender.window`` rounds,
    preferring posts never recommended); every (user, post) pair is an arm. The policy picks
    a slate of ``budget`` arms; each chosen post is injected into that user's feed next to the
    relational, personalized and headline channels, and the population acts.

    Observation (``Dict``):
        "arms": (K, D) float32, K = candidate_users × candidate_posts, arm k = (user k // P,
            post k % P). D = 2d + d + 13: the user's propagated context [profile ⊕ memory]
            (Eq. 7–8, 2d), the post embedding (d), and 13 features: receiver stance S_v,
            author stance S_u, |S_u − S_v|/2, post toxicity, log(1 + engagement), post age in
            rounds, cos(user, post), the receiver's recent toxicity, the post's misinformation
            flag, the receiver's activity, the post's stance s_p, agreement S_v·s_p, and the
            receiver's reply propensity log(reply frequency / 0.25).
        "action_mask": (K,) int8, 0 for padding (too few active users or posts) and for a
            user's own posts.
        "user_context" (N, 2d) and "stance" (N,) when ``observe_users=True``;
        "graph" (a ``spaces.Graph``: nodes = propagated contexts, edges = follows) when
        ``graph_observation=True``.

    Action: ``MultiDiscrete([K] * budget)``, the slate of arm indices. A repeated index is
        applied once and its reward counted once (the duplicate slot scores 0); a masked arm
        is not applied and scores 0 (``info["invalid_arms"]`` counts them).

    Reward: the mean over the slate's distinct arms of Eq. 9,
        r = clip(w_s·|S_u − S_v|/2·[v reacted] − w_t·tox(reaction) + w_e·e(reaction), 0, 1),
        from receiver v's reaction to the injected post this round (weights in
        ``RewardConfig``). ``info`` holds ``arm_indices``, ``arm_rewards`` and the platform
        ``metrics`` (plus ``cross_interaction_ratio_recommended``, the cross-stance share of the
        reactions to recommended posts).

    Episode end: truncated after ``rounds`` rounds (default 10); never terminated.
    """

    num_arm_features = 13

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # engagement counters are int32 (4 of them); a post is at most rounds + 1 old
        # (history posts count as round -1); reply frequency lies in [0, 1]
        max_log_engagement = np.log1p(4.0 * np.iinfo(np.int32).max)
        low = [-1, -1, 0, 0, 0, 0, -1, 0, 0, 0, -1, -1, np.log(1e-3 / 0.25)]
        high = [1, 1, 1, 1, max_log_engagement, self.config.rounds + 1, 1, 1, 1, 1, 1, 1, np.log(4.0)]
        return np.asarray(low, np.float64), np.asarray(high, np.float64)

    def _arm_responded(self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray) -> np.ndarray:
        """Whether each applied arm's receiver reacted to the injected post this round."""
        out = result.output
        n_posts = len(self.sim.posts)
        arm_key = self._arms["user"][applied] * n_posts + self._arms["post"][applied]
        return np.isin(arm_key, out.react_user * n_posts + out.react_post)

    def _num_arms(self) -> int:
        return self.config.candidate_users * self.config.candidate_posts

    def _extra_context_dim(self) -> int:
        return self._latent_dim

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, cfg = self.sim, self.config
        u_count, p_count = cfg.candidate_users, cfg.candidate_posts
        active = sim.active
        users = np.full(u_count, -1, np.int64)
        take = min(u_count, len(active))
        users[:take] = np.sort(rng.choice(active, size=take, replace=False)) if take else []
        lo, hi = sim.recent_post_range(cfg.recommender.window)
        recent = np.arange(lo, hi, dtype=np.int64)
        fresh = recent[~sim.posts.recommended[lo:hi]]
        stale = recent[sim.posts.recommended[lo:hi]]
        posts = np.full(p_count, -1, np.int64)
        first = rng.permutation(fresh)[:p_count]
        rest = rng.permutation(stale)[: p_count - len(first)]
        chosen = np.concatenate([first, rest])
        posts[: len(chosen)] = chosen
        arm_user = np.repeat(users, p_count)
        arm_post = np.tile(posts, u_count)
        valid = (arm_user >= 0) & (arm_post >= 0)
        own = valid & (sim.posts.author[np.maximum(arm_post, 0)] == arm_user)
        return {"user": arm_user, "post": arm_post, "mask": valid & ~own}

    def _arm_contexts(self, arms: dict[str, np.ndarray], arm_user_context: np.ndarray) -> np.ndarray:
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        post = np.maximum(arms["post"], 0)
        p = sim.posts
        author = p.author[post]
        s_v = sim.users.stance[user]
        s_u = sim.users.stance[author]
        engagement = (p.likes[post] + p.retweets[post] + p.replies[post] + p.dislikes[post]).astype(np.float32)
        features = np.stack([
            s_v, s_u, np.abs(s_u - s_v) / 2, p.toxicity[post], np.log1p(engagement),
            (sim.round - p.round[post]).astype(np.float32),
            np.einsum("kd,kd->k", sim.users.latent[user], p.latent[post]),
            sim.recent_toxicity[user], p.misinfo[post].astype(np.float32), sim.users.activity[user],
            p.stance[post], s_v * p.stance[post],
            np.log(np.maximum(sim.users.profiles.reply_frequency[user], 1e-3) / 0.25),
        ], axis=1)
        context = np.concatenate([arm_user_context, p.latent[post], features], axis=1)
        context[~arms["mask"]] = 0.0
        return context.astype(np.float32)

    def _apply_action(self, chosen: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        arms = self._arms
        user, post = arms["user"][chosen], arms["post"][chosen]
        self.sim.posts.recommended[post] = True
        return chosen, (user, post)

    def _arm_rewards(self, applied: np.ndarray, result: RoundResult) -> tuple[np.ndarray, dict[str, float]]:
        cfg = self.config.reward
        arms = self._arms
        out = result.output
        n_posts = len(self.sim.posts)
        receiver, post = arms["user"][applied], arms["post"][applied]
        arm_key = receiver * n_posts + post
        react_key = out.react_user * n_posts + out.react_post
        weight = np.zeros(len(out.react_kind), np.float64)
        for kind, name in _ENGAGEMENT_KEYS.items():
            weight[out.react_kind == kind] = cfg.engagement.get(name, 0.0)
        order = np.argsort(react_key, kind="stable")
        sorted_key = react_key[order]
        start = np.searchsorted(sorted_key, arm_key, side="left")
        stop = np.searchsorted(sorted_key, arm_key, side="right")
        reacted = stop > start
        engagement = np.zeros(len(applied))
        toxicity = np.zeros(len(applied))
        if reacted.any():
            engagement[reacted] = _segment_max(weight[order], start[reacted], stop[reacted])
            toxicity[reacted] = _segment_max(out.react_toxicity[order], start[reacted], stop[reacted])
        author = self.sim.posts.author[post]
        if len(out.follow_src) and "follow" in cfg.engagement:
            follow_key = out.follow_src * self.sim.graph.n + out.follow_dst
            followed = np.isin(receiver * self.sim.graph.n + author, follow_key)
            engagement = np.where(followed, np.maximum(engagement, cfg.engagement["follow"]), engagement)
        divergence = np.abs(result.stance_before[author] - result.stance_before[receiver]) / 2
        if cfg.divergence_needs_reaction:
            divergence = divergence * (engagement > 0)
        reward = np.clip(
            cfg.stance_weight * divergence - cfg.toxicity_weight * toxicity
            + cfg.engagement_weight * engagement, 0.0, 1.0,
        ).astype(np.float32)
        injected = np.isin(react_key, arm_key)
        cross = (
            result.discrete_before[out.react_user[injected]].astype(np.int16)
            * result.discrete_before[self.sim.posts.author[out.react_post[injected]]]
        ) == -1
        extra = {
            "cross_interaction_ratio_recommended": float(cross.mean()) if len(cross) else 0.0,
            "recommended_reaction_rate": float((engagement > 0).mean()) if len(applied) else 0.0,
        }
        return reward, extra

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "abortion"}
