"""PolicySim-Rec-v0: learn what to recommend so that opposing viewpoints meet without toxicity."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import Behaviour
from socialenv import kernels
from socialenv.candidates import generate_candidates
from socialenv.envs.base import PolicySimEnv
from socialenv.simulation import RoundResult

_ENGAGEMENT_KEYS = {
    int(Behaviour.REPLY): "reply", int(Behaviour.RETWEET): "retweet",
    int(Behaviour.LIKE): "like", int(Behaviour.DISLIKE): "dislike",
}


#: The scalar features appended to each Rec arm's context, in order (see ``RecEnv``).
REC_ARM_FEATURES: tuple[str, ...] = (
    "receiver_stance", "author_stance", "stance_divergence", "cross_stance", "post_toxicity",
    "log_engagement", "post_age", "interest_similarity", "receiver_recent_toxicity",
    "post_flagged", "receiver_activity", "post_stance", "agreement", "receiver_reply_propensity",
    "source_interest", "source_opposite", "source_popular", "source_fresh",
)


class RecEnv(PolicySimEnv):
    """The platform's recommender for a sampled user set, with the cross-viewpoint objective
    (paper §2.2, objective 1, Eq. 9).

    ## Description

    Each round the env samples ``candidate_users`` users U among those active this round and,
    for each, C candidate posts of the last ``recommender.window`` rounds from four sources
    (``candidates``, default 3 nearest the user's interests, 4 of the opposite stance, 2
    popular, 1 fresh; :mod:`socialenv.candidates`). Every (user, candidate) pair is an arm.
    The policy *is* the recommender for U: its arms fill up to ``budget`` of each user's
    ``recommender.personalized`` recommended slots; the built-in recommender ("Origin") fills
    the rest and serves every other user. ``info["metrics"]["policy_share"]`` is the share of
    the round's impressions the policy chose (≈ 0.5 at the defaults: 320 users × 5 slots).

    ## Action Space

    K = candidate_users × C arms; arm k = (user k // C, candidate k % C). The form is chosen
    by ``action_format``:

    - ``"slate"`` (default): ``MultiDiscrete([K + 1] * (candidate_users · budget))``, arm
      indices. **No-op**: the value K (``env.unwrapped.no_op``) leaves a slot to the built-in
      recommender, so a slate of only K is Origin. A repeated index is applied once; a masked
      arm, or a user's arms beyond ``budget``, are not applied and score 0 (counted in
      ``info["duplicate_arms"]``, ``info["invalid_arms"]``, ``info["over_user_cap"]``).
    - ``"scores"``: ``Box(-1, 1, (K,), float32)``, one score per arm; each user's ``budget``
      best-scored allowed arms are applied (masked arms are ignored, ties go to the lower
      index; ``env.unwrapped.slate_from_scores(scores)`` is the slate). This form fills every
      slot it can: leave slots to the platform with the slate form.

    ## Observation Space

    ``Dict``:

    - ``"arms"``: (K, D) float32, D = 2d + d + len(:data:`REC_ARM_FEATURES`): the user's
      propagated context [profile ⊕ memory] (Eq. 7–8, 2d columns), the post embedding (d
      columns), then the features below (column 3d + idx). Padding arms are all zeros.
    - ``"action_mask"``: (K,) int8, 0 for padding (fewer active users or candidates) and own
      posts.
    - ``"user_context"`` (N, 2d) and ``"stance"`` (N,) when ``observe_users=True``;
      ``"graph"`` (a ``spaces.Graph``: nodes = propagated contexts, edges = follows) when
      ``graph_observation=True``; ``"response_applied"``, ``"response_reward"``,
      ``"response_reacted"`` (slate,) when ``observe_response=True``.

    The min and max are the ``Box`` bounds of each feature column (s: discrete stances
    −1/0/+1; S: smoothed stances):

    | idx | feature | meaning | min | max |
    |---|---|---|---|---|
    | 0 | receiver_stance | smoothed stance S_v of the receiving user | -1 | 1 |
    | 1 | author_stance | smoothed stance S_u of the post's author | -1 | 1 |
    | 2 | stance_divergence | abs(s_u − s_v) / 2 | 0 | 1 |
    | 3 | cross_stance | [s_u · s_v = −1] | 0 | 1 |
    | 4 | post_toxicity | toxicity of the post | 0 | 1 |
    | 5 | log_engagement | log(1 + likes + retweets + replies + dislikes) | 0 | log1p(4·(2³¹ − 1)) ≈ 22.874 |
    | 6 | post_age | rounds since the post was written (history posts: round −1) | 0 | rounds + 1 |
    | 7 | interest_similarity | cos(receiver embedding, post embedding) | -1 | 1 |
    | 8 | receiver_recent_toxicity | toxicity of the receiver's recent posts | 0 | 1 |
    | 9 | post_flagged | the platform classifier flagged the post as misinformation | 0 | 1 |
    | 10 | receiver_activity | the receiver's activity probability | 0 | 1 |
    | 11 | post_stance | stance s_p of the post | -1 | 1 |
    | 12 | agreement | S_v · s_p | -1 | 1 |
    | 13 | receiver_reply_propensity | log(max(reply frequency, 0.001) / 0.25) | log(0.004) ≈ -5.521 | log(4) ≈ 1.386 |
    | 14 | source_interest | candidate source one-hot: nearest the receiver's interests | 0 | 1 |
    | 15 | source_opposite | candidate source one-hot: the opposite stance | 0 | 1 |
    | 16 | source_popular | candidate source one-hot: popular | 0 | 1 |
    | 17 | source_fresh | candidate source one-hot: fresh | 0 | 1 |

    ## Rewards

    The slate's arm rewards summed / slate length, each arm Eq. 9 aligned with the
    cross-stance metric (``RewardConfig``):

        r = clip(w_s·|s_u − s_v|/2·[civil] + w_e·e(reaction)·[civil] − w_t·tox, 0, 1)

    with discrete stances, from receiver v's reaction to the recommended post this round;
    hostile reactions earn nothing. ``info`` holds ``arm_indices``, ``arm_applied``,
    ``arm_rewards``, the platform ``metrics`` plus ``cross_interaction_ratio_recommended``
    (cross-stance share of the reactions to the policy's posts) and
    ``recommended_reaction_rate``.

    ## Starting State

    ``reset(seed)`` draws the episode seed from the env's generator (``info["seed"]``): a
    built-in ``scenario`` ("abortion" by default) is generated from it (population, follow
    graph, opinions, history posts of round −1); a saved scenario or a ``Scenario`` is used
    as is. Stances start at the discretized opinions, memory embeddings at the profile
    embeddings, every user's exposure at 1; the classifier has scored the history posts and
    no post has been recommended. The first observation holds round 0's arms.

    ## Episode End

    Truncated after ``rounds`` rounds (default 10; ``spec.max_episode_steps`` says the same);
    never terminated. Stepping after the end raises ``RuntimeError``.

    ## Arguments

    ``gym.make("PolicySim-Rec-v0", **kwargs)`` takes the arguments of every PolicySim env
    (the table of :class:`~socialenv.envs.base.PolicySimEnv`) and these; an unknown keyword
    is refused with the list of allowed ones.

    | argument | default | description |
    |---|---|---|
    | scenario | "abortion" | a built-in scenario, a saved scenario (.npz) or a ``Scenario`` |
    | budget | 5 | recommended slots the policy fills per sampled user (at most ``recommender.personalized``) |
    | candidate_users | 320 | users per round (among the active) the policy recommends to |
    | candidates | {"interest": 3, "opposite": 4, "popular": 2, "fresh": 1} | candidate posts per source for each sampled user |
    | exposure_users | 300 | PolicySim-Exposure-v0's lever: accepted, unused here |
    | exposure_levels | (0.0, 0.25, 0.5, 0.75, 1.0) | PolicySim-Exposure-v0's lever: accepted, unused here |
    | moderation | None | PolicySim-Moderation-v0's settings: accepted, unused here |

    ## Version History

    * v0: initial version (the paper's recommendation setting, §2.2 objective 1).
    """

    num_arm_features = len(REC_ARM_FEATURES)

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # engagement counters are int32 (4 of them); a post is at most rounds + 1 old
        # (history posts count as round -1); reply frequency lies in [0, 1]
        bounds = {name: (0.0, 1.0) for name in REC_ARM_FEATURES}
        bounds.update({name: (-1.0, 1.0) for name in (
            "receiver_stance", "author_stance", "interest_similarity", "post_stance", "agreement")})
        bounds["log_engagement"] = (0.0, float(np.log1p(4.0 * np.iinfo(np.int32).max)))
        bounds["post_age"] = (0.0, float(self.config.rounds + 1))
        bounds["receiver_reply_propensity"] = (float(np.log(1e-3 / 0.25)), float(np.log(4.0)))
        low, high = zip(*(bounds[name] for name in REC_ARM_FEATURES), strict=True)
        return np.asarray(low, np.float64), np.asarray(high, np.float64)

    def _arm_responded(self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray) -> np.ndarray:
        """Whether each applied arm's receiver reacted to the injected post this round."""
        out = result.output
        n_posts = len(self.sim.posts)
        arm_key = self._arms["user"][applied] * n_posts + self._arms["post"][applied]
        return np.isin(arm_key, out.react_user * n_posts + out.react_post)

    def _num_arms(self) -> int:
        return self.config.candidate_users * self._arms_per_user()

    def _arms_per_user(self) -> int:
        return sum(self.config.candidates.values())

    def _per_user(self) -> int:
        budget, slots = self.config.budget, self.config.recommender.personalized
        if budget > slots:
            raise ValueError(
                f"budget={budget} is not allowed for PolicySim-Rec-v0: recommended slots per "
                f"sampled user, at most recommender.personalized={slots}"
            )
        return budget

    def _extra_context_dim(self) -> int:
        return self._latent_dim

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, cfg = self.sim, self.config
        u_count, c_count = cfg.candidate_users, self._arms_per_user()
        active = sim.active
        users = np.full(u_count, -1, np.int64)
        take = min(u_count, len(active))
        if take:
            users[:take] = np.sort(rng.choice(active, size=take, replace=False))
        candidates = generate_candidates(
            sim.feed_context(), users[:take], cfg.candidates, cfg.recommender.window,
            cfg.recommender.popular_pool, rng, cfg.recommender.candidate_oversample,
        )
        post = np.full((u_count, c_count), -1, np.int64)
        source = np.zeros((u_count, c_count), np.int8)
        post[:take] = candidates.post
        source[:take] = candidates.source
        arm_user = np.repeat(users, c_count)
        arm_post = post.ravel()
        mask = (arm_user >= 0) & (arm_post >= 0)
        return {"user": arm_user, "post": arm_post, "source": source.ravel(), "mask": mask}

    def _arm_contexts(self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray) -> np.ndarray:
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        post = np.maximum(arms["post"], 0)
        p, people = sim.posts, sim.users
        width, d = user_rows.shape[1], p.latent.shape[1]
        column = width + d
        context = np.empty((len(user), column + len(REC_ARM_FEATURES)), np.float32)
        kernels.rec_arm_columns(
            context, user_rows, arm_row, p.latent, user, post,
            (people.stance, people.discrete_stance, sim.recent_toxicity, people.activity),
            (p.author, p.likes, p.retweets, p.replies, p.dislikes, p.toxicity, p.round, p.flagged, p.stance),
            sim.round, arms["source"],
        )
        # the columns whose NumPy functions (SIMD log, einsum) a compiled kernel would not
        # reproduce bit for bit
        engagement = context[:, column + REC_ARM_FEATURES.index("log_engagement")]
        np.log1p(engagement, out=engagement)
        np.einsum("kd,kd->k", people.latent.take(user, axis=0), context[:, width:column],
                  out=context[:, column + REC_ARM_FEATURES.index("interest_similarity")])
        context[:, column + REC_ARM_FEATURES.index("receiver_reply_propensity")] = np.log(
            np.maximum(people.profiles.reply_frequency[user], 1e-3) / 0.25)
        context[~arms["mask"]] = 0.0
        return context

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
        hostile = (out.react_kind == int(Behaviour.DISLIKE)) | (
            (out.react_kind == int(Behaviour.REPLY)) & (out.react_toxicity >= cfg.hostile_toxicity)
        )
        weight = np.zeros(len(out.react_kind), np.float64)
        for kind, name in _ENGAGEMENT_KEYS.items():
            weight[out.react_kind == kind] = cfg.engagement.get(name, 0.0)
        weight[hostile] = 0.0
        civil_reaction = (~hostile).astype(np.float64)
        hostile_reaction = hostile.astype(np.float64)
        order = np.argsort(react_key, kind="stable")
        # per applied arm, the max over its receiver's reactions to its post (0 if none)
        reacted, best = kernels.keyed_max(react_key[order], arm_key, np.stack(
            [weight, out.react_toxicity.astype(np.float64), civil_reaction, hostile_reaction])[:, order])
        engagement, toxicity, civil, hostile_any = best[0], best[1], best[2], best[3] > 0
        author = self.sim.posts.author[post]
        if len(out.follow_src) and "follow" in cfg.engagement:
            follow_key = out.follow_src * self.sim.graph.n + out.follow_dst
            followed = kernels.isin(receiver * self.sim.graph.n + author, follow_key)
            engagement = np.where(followed, np.maximum(engagement, cfg.engagement["follow"]), engagement)
            civil = np.where(followed, 1.0, civil)
        civil = civil * ~hostile_any
        d = result.discrete_before.astype(np.float64)
        divergence = np.abs(d[author] - d[receiver]) / 2
        if cfg.divergence_needs_reaction:
            divergence = divergence * civil
        reward = np.clip(
            cfg.stance_weight * divergence + cfg.engagement_weight * engagement * civil
            - cfg.toxicity_weight * toxicity, 0.0, 1.0,
        ).astype(np.float32)
        injected = kernels.isin(react_key, arm_key)
        cross = (
            result.discrete_before[out.react_user[injected]].astype(np.int16)
            * result.discrete_before[self.sim.posts.author[out.react_post[injected]]]
        ) == -1
        extra = {
            "cross_interaction_ratio_recommended": float(cross.mean()) if len(cross) else 0.0,
            "recommended_reaction_rate": float(reacted.mean()) if len(applied) else 0.0,
        }
        return reward, extra

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "abortion"}
