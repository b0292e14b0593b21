"""PolicySim-Rec-v0: learn what to recommend so that opposing viewpoints meet without toxicity."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import Behaviour, FeedChannel
from socialenv.core import kernels
from socialenv.core.candidates import generate_candidates
from socialenv.core.config import RewardConfig
from socialenv.core.simulation import RoundResult, Stream
from socialenv.envs.base import PolicySimEnv
from socialenv.envs.rec.lever import RecLever

_ENGAGEMENT_KEYS = {
    int(Behaviour.REPLY): "reply",
    int(Behaviour.RETWEET): "retweet",
    int(Behaviour.LIKE): "like",
    int(Behaviour.DISLIKE): "dislike",
}


#: The scalar features appended to each Rec arm's context, in order (see ``RecEnv``).
REC_ARM_FEATURES: tuple[str, ...] = (
    "receiver_stance",
    "author_stance",
    "stance_divergence",
    "cross_stance",
    "post_toxicity",
    "log_engagement",
    "post_age",
    "interest_similarity",
    "receiver_recent_toxicity",
    "post_flagged",
    "receiver_activity",
    "post_stance",
    "agreement",
    "receiver_reply_propensity",
    "source_interest",
    "source_opposite",
    "source_popular",
    "source_fresh",
    "receiver_reply_toxicity",
    "receiver_cross_civility",
    "cross_x_reply_toxicity",
    "cross_x_cross_civility",
    "cross_x_recent_toxicity",
    "norm_pad",
)
#: Columns of the kernel's features (the rest are appended by ``RecEnv._arm_contexts``).
_KERNEL_FEATURES = REC_ARM_FEATURES.index("source_fresh") + 1
#: Columns after them: the two observed histories, their three products with cross stance,
#: and the norm-completing column.
_HISTORY_FEATURES = len(REC_ARM_FEATURES) - _KERNEL_FEATURES
#: Standard deviation of the platform's toxicity classifier on a reply (the observed
#: reply-toxicity history), and the smoothing of that history.
OBSERVED_TOXICITY_NOISE = 0.1
OBSERVED_HISTORY_DECAY = 0.7
#: Prior of the observed histories (pseudo-observations before a user's first reply).
_PRIOR_REPLY_TOXICITY = 0.1
_PRIOR_CROSS_REACTIONS = 2.0
_PRIOR_CROSS_CIVILITY = 0.8
#: Scales of the features that would otherwise exceed 1 in absolute value.
_LOG_ENGAGEMENT_SCALE = float(np.log1p(1000.0))
_REPLY_PROPENSITY_SCALE = float(np.log(250.0))


def reaction_values(
    reward: RewardConfig, cross: np.ndarray, kind: np.ndarray, toxicity: np.ndarray
) -> dict[str, np.ndarray]:
    """Per reaction: whether it is hostile (a dislike, a reply at or above
    ``reward.hostile_toxicity``), whether it is ``cross`` (across opposite discrete stances at
    the start of the round, ``RoundResult.reaction_cross``) and civil, whether it is hostile
    and cross, and its value to the objective. A cross-stance reaction is worth +1 if civil,
    −``hostile_weight`` if hostile, and −``reply_toxicity_weight`` × its toxicity if a reply;
    any other reaction is worth 0."""
    hostile, civil_cross, hostile_cross, value = kernels.reaction_values(
        cross,
        kind,
        toxicity,
        (reward.hostile_toxicity, reward.hostile_weight, reward.reply_toxicity_weight),
        (int(Behaviour.REPLY), int(Behaviour.DISLIKE)),
    )
    return {
        "hostile": hostile,
        "civil_cross": civil_cross,
        "hostile_cross": hostile_cross,
        "cross": cross,
        "value": value,
    }


class RecEnv(PolicySimEnv):
    """The platform's recommender for a sampled share of the active users, with a declared
    objective: dialogue across stances without toxicity (paper §2.2, objective 1).

    ## Description

    Each round the env samples the policy's users U among those active this round:
    ``lever_share`` of them (default 0.15; ``candidate_users`` fixes a number instead) and,
    for each, C candidate posts of the last ``recommender.window`` rounds from four sources
    (``candidates``, default 2 nearest the user's interests, 3 of the opposite stance, 2
    popular, 1 fresh; :mod:`socialenv.core.candidates`). Every (user, candidate) pair is an arm.
    The policy *is* the recommender for U: its arms fill up to ``budget`` of each user's
    ``recommender.personalized`` recommended slots; the built-in recommender ("Origin") fills
    the rest and serves every other user (85% of the active users at the
    default). ``info["metrics"]["policy_share"]`` is the share of the round's impressions
    in slots the policy filled (≈ 0.08 at the defaults).

    **Why a share of 0.15 and 8 candidates.** The lever means the same at 300, 1,000 and
    30,000 users, and the observation has a fixed size: it holds room for the lever's
    capacity, ``lever_share`` × (E + 3·√E) users, E the expected active users
    (:meth:`~socialenv.envs.base.PolicySimEnv.lever_capacity`; unused rows are padding).
    At the default 1,000 users E ≈ 324, the capacity is 57 users and K = 456 arms of
    D = 120 columns (v0: 3,200 × 114) with a 285-slot slate. The share is 0.15 (not 0.25)
    so that a flat deep-RL policy on the default id fits a 4 GiB laptop over a 2,048-step
    rollout on two envs (issue 26): estimated SB3 ``PPO("MultiInputPolicy")`` 2.0 GiB, a
    CleanRL-style PPO 2.9 GiB, MaskablePPO 3.4 GiB
    (:func:`socialenv.envs.sizing.flat_ppo_memory`, calibrated on measured peaks; at 0.25,
    K = 760: SB3 measured 4.6 GiB RSS, CleanRL / MaskablePPO estimated 6.2 / 7.3 GiB).
    PolicySim-Exposure-v0 (K·D = 285 × 76): 1.1 / 1.2 / 1.3 GiB.

    ## Action Space

    K = capacity × C arms; arm k = (user k // C, candidate k % C). The form is chosen by
    ``action_format``:

    - ``"slate"`` (default): ``MultiDiscrete([K + 1] * (capacity · budget))``, arm
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
      Every other arm has the same norm (``norm_pad`` tops it up), so a policy that scores
      arms by their context's length, as an untrained LinUCB does, scores them alike.
    - ``"action_mask"``: (K,) int8, 0 for padding (fewer active users or candidates) and own
      posts.
    - ``"user_context"`` (N, 2d) and ``"stance"`` (N,) when ``observe_users=True``;
      ``"graph"`` (a ``spaces.Graph``: nodes = propagated contexts, edges = follows) when
      ``graph_observation=True``; ``"response_applied"``, ``"response_reward"``,
      ``"response_reacted"`` (slate,) when ``observe_response=True``.

    The min and max are the ``Box`` bounds of each feature column (s: discrete stances
    −1/0/+1; S: smoothed stances). Features 18–22 are what the platform has *observed* of
    the receiver (and products with ``cross_stance``, so that a linear policy can use
    them on cross-stance pairs): what a real platform has to find civil pairs.

    | idx | feature | meaning | min | max |
    |---|---|---|---|---|
    | 0 | receiver_stance | smoothed stance S_v of the receiving user | -1 | 1 |
    | 1 | author_stance | smoothed stance S_u of the post's author | -1 | 1 |
    | 2 | stance_divergence | abs(s_u − s_v) / 2 | 0 | 1 |
    | 3 | cross_stance | [s_u · s_v = −1] | 0 | 1 |
    | 4 | post_toxicity | toxicity of the post | 0 | 1 |
    | 5 | log_engagement | log(1 + likes + retweets + replies + dislikes) / log(1001) | 0 | log1p(4·(2³¹ − 1)) / log1p(1000) ≈ 3.311 |
    | 6 | post_age | rounds since the post was written (history posts: round −1) / (rounds + 1) | 0 | 1 |
    | 7 | interest_similarity | cos(receiver embedding, post embedding) | -1 | 1 |
    | 8 | receiver_recent_toxicity | toxicity of the receiver's recent posts | 0 | 1 |
    | 9 | post_flagged | the platform classifier flagged the post as misinformation | 0 | 1 |
    | 10 | receiver_activity | the receiver's activity probability | 0 | 1 |
    | 11 | post_stance | stance s_p of the post | -1 | 1 |
    | 12 | agreement | S_v · s_p | -1 | 1 |
    | 13 | receiver_reply_propensity | log(max(reply frequency, 0.001) / 0.25) / log(250) | -1 | log(4) / log(250) ≈ 0.251 |
    | 14 | source_interest | candidate source one-hot: nearest the receiver's interests | 0 | 1 |
    | 15 | source_opposite | candidate source one-hot: the opposite stance | 0 | 1 |
    | 16 | source_popular | candidate source one-hot: popular | 0 | 1 |
    | 17 | source_fresh | candidate source one-hot: fresh | 0 | 1 |
    | 18 | receiver_reply_toxicity | the receiver's observed reply toxicity: smoothed (0.7 old) scores of their replies by a noisy classifier (sd 0.1), prior 0.1 | 0 | 1 |
    | 19 | receiver_cross_civility | civil share of the receiver's reactions to opposite-stance posts so far (prior: 0.8 over 2 reactions) | 0 | 1 |
    | 20 | cross_x_reply_toxicity | cross_stance · receiver_reply_toxicity | 0 | 1 |
    | 21 | cross_x_cross_civility | cross_stance · receiver_cross_civility | 0 | 1 |
    | 22 | cross_x_recent_toxicity | cross_stance · receiver_recent_toxicity | 0 | 1 |
    | 23 | norm_pad | √(c² − the squared norm of the rest of the context), c the largest norm the bounds allow | 0 | ≈ 5.997 |

    ## Rewards

    **Objective** (``info["metrics"]["objective"]``, higher is better): dialogue across
    stances without incivility, per round over every reaction on the platform between
    users of opposite discrete stances (at the start of the round):

        objective = (civil cross-stance reactions − w_h·hostile cross-stance reactions
                     − w_t·Σ cross-stance reply toxicity) / active users

    hostile = a dislike or a reply at or above ``reward.hostile_toxicity``; w_h =
    ``reward.hostile_weight``, w_t = ``reward.reply_toxicity_weight`` (1 and 1). It is a
    count per active user, not a ratio, so suppressing other reactions cannot raise it.
    Reactions within a stance, and a neutral user's reaction to a camp, count 0, here and in
    the rewards: the platform-wide toxicity stays the paper's ``toxicity`` metric beside it
    (and ``info["arm_toxicity"]`` per arm, below). ``civil_cross_reactions_per_user`` and
    ``hostile_cross_reactions_per_user`` are its parts (``hostile_reactions_per_user`` counts
    every hostile reaction); the paper's ``cross_interaction_ratio`` stays beside it.

    **Reward** (``reward.form="objective"``, the default). **Step reward**: the round's
    objective, per active user (``reward.step="objective"``, the default, as in the Exposure
    and Moderation envs), so an episode's return is the objective summed over its rounds, the effects of
    earlier rounds' choices included. **Per arm**: an applied arm's contribution Δ = the
    value of its receiver's reactions to its post (the objective's terms) − the value a
    built-in personalized slot earned this round (per impression, over the users the policy
    did not govern: ``info["metrics"]["builtin_slot_value"]``), i.e. the change the arm caused
    against the slot it displaced. ``info["arm_rewards"]`` = clip(0.5 + 0.5·Δ, 0, 1) (the
    bandits' [0, 1] scale; 0.5 = as good as the built-in slot). ``info["metrics"]["slot_reward"]``
    = ΣΔ per governed user (the users sampled this round), 0 for Origin, scale-free across
    population and lever sizes; ``reward.step="slots"`` makes it the step reward. ΣΔ is the
    change of the objective's numerator on the policy's slots; not in it: effects beyond the
    slot (later rounds, and reactions of others to the replies and retweets it caused),
    which the step reward's objective holds (BENCHMARKS.md "Policy zoo" measures both).

    **Paper form** (``reward={"form": "paper"}``, v0): Eq. 9 per arm,

        r = clip(w_s·|s_u − s_v|/2·[civil] + w_e·e(reaction)·[civil] − w_t·tox, 0, 1)

    step = Σ / slate length. Measured against the objective in ``benchmarks/zoo.py``
    (BENCHMARKS.md "Policy zoo"): it pays neutral↔camp pairs half, which the metric does
    not count, and divides by a slate length that includes padding.

    **Toxicity per arm** (objective form): ``info["arm_toxicity"]`` (slate order, 0 for slots
    not applied) = Σ over the replies the arm caused of (reply toxicity − the round's
    ``toxicity`` metric) − the same per built-in slot impression. It is what the arm added to
    the summed excess toxicity of the round's texts, against the slot it displaced: a policy
    whose arms sum to ≤ 0 does not raise the toxicity metric through its slots. A constrained
    learner can keep it ≤ 0 while it maximises the reward
    (:class:`bandits.constrained.ConstrainedEpsilonGreedy`).

    ``info`` also holds ``arm_indices``, ``arm_applied``, ``arm_rewards``, the platform
    ``metrics`` plus ``cross_interaction_ratio_recommended`` (cross-stance share of the
    reactions to the policy's posts), ``recommended_reaction_rate`` and
    ``governed_users``.

    ## Starting State

    ``reset(seed)`` draws the episode seed from the env's generator (``info["seed"]``): a
    built-in ``scenario`` ("abortion" by default) is generated from it (population, follow
    graph, opinions, history posts of round −1); a saved scenario or a ``Scenario`` is used
    as is. Stances start at the discretized opinions, memory embeddings at the profile
    embeddings, every user's exposure at 1, the observed histories at their priors; the
    classifier has scored the history posts and no post has been recommended. The first
    observation holds round 0's arms.

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
    | lever_share | 0.15 | the users the policy recommends to, as a share of the round's active users, in (0, 1] |
    | budget | 5 | recommended slots the policy fills per sampled user (at most ``recommender.personalized``) |
    | candidate_users | None | a fixed number of users per round instead of ``lever_share`` of the active |
    | candidates | {"interest": 2, "opposite": 3, "popular": 2, "fresh": 1} | candidate posts per source for each sampled user |

    The last four are the fields of :class:`~socialenv.envs.rec.RecLeverConfig`, which
    ``lever=`` takes at once (``lever={"budget": 2}`` is ``budget=2``); the other envs'
    lever arguments (``exposure_users``, ``moderation``, ...) are refused.

    ## Version History

    * v0: initial version (the paper's recommendation setting, §2.2 objective 1).
    * v0, issue 20 (the id is kept; the package is pre-release): the declared objective
      and the objective-form reward (the v0 reward is ``reward={"form": "paper"}``); the
      lever is ``lever_share`` = 0.15 of the active users (0.25 until issue 26's memory
      budget; was 320 users ≈ 99% of the
      active at 1,000 users); 8 candidates per user (was 10); scaled features 5, 6, 13 and
      the new features 18–23. Numbers published before this change used the v0 settings.
    * v0, issue 20 (later): ``info["arm_toxicity"]`` per applied arm and ``arm_cost_key()``
      (objective form; the trajectories are unchanged, ``info`` gained the key), and
      ``null_arm_reward()`` = 0.5 (objective form) on every PolicySim env.
    * v0, issue 20 (third step): the objective counts only reactions across opposite stances
      (its hostility and reply-toxicity charges were on every reaction), and the step reward
      is the round's objective (was ΣΔ per governed user, now ``info["metrics"]["slot_reward"]``
      and ``reward={"step": "slots"}``). The world's dynamics are unchanged; rewards,
      objective and what learners learn from them changed, and so did every published number
      that reads them (BENCHMARKS.md says which were re-run).
    """

    num_arm_features = len(REC_ARM_FEATURES)
    lever_class = RecLever
    arm_kind = "rec"
    slot_step = True

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # engagement counters are int32 (4 of them); post age and reply propensity are scaled
        # to at most 1 in absolute value; the norm pad tops every context up to one norm
        bounds = {name: (0.0, 1.0) for name in REC_ARM_FEATURES}
        bounds.update(
            {
                name: (-1.0, 1.0)
                for name in (
                    "receiver_stance",
                    "author_stance",
                    "interest_similarity",
                    "post_stance",
                    "agreement",
                )
            }
        )
        bounds["log_engagement"] = (
            0.0,
            float(np.log1p(4.0 * np.iinfo(np.int32).max) / _LOG_ENGAGEMENT_SCALE),
        )
        bounds["receiver_reply_propensity"] = (-1.0, float(np.log(4.0) / _REPLY_PROPENSITY_SCALE))
        bounds["norm_pad"] = (0.0, 1.0)
        # unit-norm embeddings and their graph averages: 2 user blocks + 1 post block
        return self._pad_to_constant_norm(REC_ARM_FEATURES, bounds, unit_blocks=3)

    def _arm_responded(
        self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray
    ) -> np.ndarray:
        """Whether each applied arm's receiver reacted to the injected post this round."""
        caused = result.policy.reaction_choice
        return np.bincount(caused[caused >= 0], minlength=len(applied)) > 0

    def _num_arms(self) -> int:
        self._capacity = self.lever_capacity(self.lever_config.candidate_users)
        return self._capacity * self._arms_per_user()

    def _arms_per_user(self) -> int:
        return sum(self.lever_config.candidates.values())

    def _per_user(self) -> int:
        budget, slots = self.lever_config.budget, self.config.recommender.personalized
        if budget > slots:
            raise ValueError(
                f"budget={budget} is not allowed for PolicySim-Rec-v0: recommended slots per "
                f"sampled user, at most recommender.personalized={slots}"
            )
        return budget

    def _extra_context_dim(self) -> int:
        return self._latent_dim

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, cfg, lever = self.sim, self.config, self.lever_config
        u_count, c_count = self._capacity, self._arms_per_user()
        active = sim.active
        users = np.full(u_count, -1, np.int64)
        take = self.lever_take(len(active), len(active), lever.candidate_users)
        if take:
            users[:take] = np.sort(rng.choice(active, size=take, replace=False))
        candidates = generate_candidates(
            sim.feed_context(),
            users[:take],
            lever.candidates,
            cfg.recommender.window,
            cfg.recommender.popular_pool,
            rng,
            cfg.recommender.candidate_oversample,
        )
        post = np.full((u_count, c_count), -1, np.int64)
        source = np.zeros((u_count, c_count), np.int8)
        post[:take] = candidates.post
        source[:take] = candidates.source
        arm_user = np.repeat(users, c_count)
        arm_post = post.ravel()
        mask = (arm_user >= 0) & (arm_post >= 0)
        return {"user": arm_user, "post": arm_post, "source": source.ravel(), "mask": mask}

    def _arm_contexts(
        self,
        arms: dict[str, np.ndarray],
        user_rows: np.ndarray,
        arm_row: np.ndarray,
        block: int = 16_384,
    ) -> np.ndarray:
        """(K, D) arm contexts, ``block`` arms at a time on :func:`kernels.map_blocks`' threads
        (every row is computed on its own: the same matrix on any number of threads)."""
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        post = np.maximum(arms["post"], 0)
        p, people = sim.posts, sim.users
        width, d = user_rows.shape[1], p.latent.shape[1]
        column = width + d
        tail = column + _KERNEL_FEATURES
        # the whole (K, D) matrix at once: the kernel fills its first ``tail`` columns, the
        # history columns below are written in place (no concatenated copy); every element is
        # written, so a matrix the caller has dropped is filled again in its own pages (huge
        # ones, also when the reset allocates it: it lives for the whole run)
        context = self._context_matrix(len(user), tail + _HISTORY_FEATURES)
        user_columns = (people.stance, people.discrete_stance, sim.recent_toxicity, people.activity)
        post_columns = (
            p.author,
            p.likes,
            p.retweets,
            p.replies,
            p.dislikes,
            p.toxicity,
            p.round,
            p.flagged,
            p.stance,
        )
        engagement_at = column + REC_ARM_FEATURES.index("log_engagement")
        age_at = column + REC_ARM_FEATURES.index("post_age")
        interest_at = column + REC_ARM_FEATURES.index("interest_similarity")
        propensity_at = column + REC_ARM_FEATURES.index("receiver_reply_propensity")
        cross_at = column + REC_ARM_FEATURES.index("cross_stance")
        recent_at = column + REC_ARM_FEATURES.index("receiver_recent_toxicity")
        history = self._observed_history()
        reply_toxicity, civility = history["reply_toxicity"], history["cross_civility"]
        rounds, norm_squared = self.config.rounds + 1, self._context_norm**2
        history_at = np.array([engagement_at, age_at, cross_at, recent_at, tail], np.int64)

        def fill(lo: int, hi: int) -> None:
            rows, who = context[lo:hi], user[lo:hi]
            kernels.rec_arm_columns(
                rows[:, :tail],
                user_rows,
                arm_row[lo:hi],
                p.latent,
                who,
                post[lo:hi],
                user_columns,
                post_columns,
                sim.round,
                arms["source"][lo:hi],
            )
            # the columns whose NumPy functions (SIMD log, einsum) a compiled kernel would not
            # reproduce bit for bit
            engagement = rows[:, engagement_at]
            np.log1p(engagement, out=engagement)
            np.einsum(
                "kd,kd->k",
                people.latent.take(who, axis=0),
                rows[:, width:column],
                out=rows[:, interest_at],
            )
            rows[:, propensity_at] = (
                np.log(np.maximum(people.profiles.reply_frequency[who], 1e-3) / 0.25)
                / _REPLY_PROPENSITY_SCALE
            )
            kernels.rec_arm_history_columns(
                rows, history_at, _LOG_ENGAGEMENT_SCALE, rounds, reply_toxicity, civility, who
            )
            squared = np.einsum("kd,kd->k", rows, rows, dtype=np.float64)
            kernels.rec_arm_norm_pad(rows, squared, norm_squared, arms["mask"][lo:hi])

        kernels.map_blocks(fill, len(user), block)
        return context

    # ------------------------------------------------------------------ observed history
    def _observed_history(self) -> dict[str, np.ndarray]:
        """What the platform has observed of each user's replies and reactions so far: the
        smoothed toxicity of their replies as its classifier scores them (noise
        ``OBSERVED_TOXICITY_NOISE``), and the civil share of their reactions to posts of
        the opposite discrete stance (both start at a prior)."""
        h = self._history_arrays()
        return {
            "reply_toxicity": h["reply_toxicity"],
            "cross_civility": (h["cross_civil"] / h["cross_total"]).astype(np.float32),
        }

    def _history_arrays(self) -> dict[str, np.ndarray]:
        """The observed history's state (created at its prior for a new episode): (N,)
        float32 ``reply_toxicity``, (N,) float64 ``cross_civil`` and ``cross_total``."""
        n = self._num_users()
        if getattr(self, "_history", None) is None or len(self._history["reply_toxicity"]) != n:
            self._history = {
                "reply_toxicity": np.full(n, _PRIOR_REPLY_TOXICITY, np.float32),
                "cross_civil": np.full(
                    n, _PRIOR_CROSS_REACTIONS * _PRIOR_CROSS_CIVILITY, np.float64
                ),
                "cross_total": np.full(n, _PRIOR_CROSS_REACTIONS, np.float64),
            }
        return self._history

    def _observe_round(self, result: RoundResult, values: dict[str, np.ndarray]) -> None:
        """Update the observed history with the round's reactions."""
        h, out = self._history_arrays(), result.output
        reply = out.react_kind == int(Behaviour.REPLY)
        replies = int(np.count_nonzero(reply))
        noise = np.zeros(0)
        if replies:
            rng = self.sim.rng(result.round, Stream.OBSERVED)
            noise = rng.normal(0.0, OBSERVED_TOXICITY_NOISE, replies)
        kernels.observe_reactions(
            out.react_user,
            reply,
            out.react_toxicity,
            noise,
            values["cross"],
            values["hostile"],
            OBSERVED_HISTORY_DECAY,
            h,
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._history = None
        return super().reset(seed=seed, options=options)

    def _env_state(self) -> dict[str, Any]:
        self._history_arrays()
        return {**super()._env_state(), "history": {k: v.copy() for k, v in self._history.items()}}

    def _load_env_state(self, state: dict[str, Any]) -> None:
        super()._load_env_state(state)
        self._history = {k: v.copy() for k, v in state["history"].items()}

    def _arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        cfg = self.config.reward
        out = result.output
        values = reaction_values(cfg, result.reaction_cross, out.react_kind, out.react_toxicity)
        self._observe_round(result, values)
        active = max(len(result.active), 1)
        metrics = {
            "objective": float(values["value"].sum() / active),
            "civil_cross_reactions_per_user": float(values["civil_cross"].sum() / active),
            "hostile_cross_reactions_per_user": float(values["hostile_cross"].sum() / active),
            "hostile_reactions_per_user": float(values["hostile"].sum() / active),
        }
        self._objective = metrics["objective"]
        if cfg.form == "paper":
            reward, extra = self._paper_arm_rewards(applied, result)
        else:
            reward, extra = self._objective_arm_rewards(applied, result, values)
        return reward, {**extra, **metrics}

    def _objective_arm_rewards(
        self, applied: np.ndarray, result: RoundResult, values: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, float]]:
        """Each applied arm's contribution to the objective (the value of its receiver's
        reactions to its post) minus what a built-in personalized slot earned this round
        (per impression, over the users the policy did not govern)."""
        arms, out = self._arms, result.output
        governed = np.zeros(self._num_users(), bool)
        governed[arms["user"][arms["mask"]]] = True
        governed_users = int(np.count_nonzero(governed))
        in_builtin_slot, builtin_slots = kernels.slot_reactions(
            result.feed,
            result.feed_channel,
            int(FeedChannel.PERSONALIZED),
            result.active,
            ~governed[result.active],
            out.react_user,
            out.react_post,
        )
        reward, self._arm_toxicity, self._slot_step, baseline, cross_ratio, reaction_rate = (
            kernels.objective_arm_rewards(
                result.policy.reaction_choice,
                values["value"],
                values["cross"],
                out.react_kind,
                out.react_toxicity,
                result.metrics.get("toxicity", 0.0),
                in_builtin_slot,
                builtin_slots,
                governed_users,
                len(applied),
                int(Behaviour.REPLY),
            )
        )
        extra = {
            "cross_interaction_ratio_recommended": cross_ratio,
            "recommended_reaction_rate": reaction_rate,
            "builtin_slot_value": baseline,
            "governed_users": float(governed_users),
            "slot_reward": self._slot_step,
        }
        return reward, extra

    def _arm_signals(self) -> dict[str, np.ndarray]:
        key = self.arm_cost_key()
        return {} if key is None else {key: self._arm_toxicity}

    def arm_cost_key(self) -> str | None:
        """``"arm_toxicity"`` in the objective form (None in the paper form)."""
        return None if self.config.reward.form == "paper" else "arm_toxicity"

    def _paper_arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        """``reward.form="paper"``: Eq. 9 per arm, in [0, 1]."""
        cfg = self.config.reward
        out = result.output
        chosen = result.policy.choice
        caused = result.policy.reaction_choice
        hostile = (out.react_kind == int(Behaviour.DISLIKE)) | (
            (out.react_kind == int(Behaviour.REPLY)) & (out.react_toxicity >= cfg.hostile_toxicity)
        )
        weight = np.zeros(len(out.react_kind), np.float64)
        for kind, name in _ENGAGEMENT_KEYS.items():
            weight[out.react_kind == kind] = cfg.engagement.get(name, 0.0)
        weight[hostile] = 0.0
        civil_reaction = (~hostile).astype(np.float64)
        hostile_reaction = hostile.astype(np.float64)
        order = np.argsort(caused, kind="stable")
        # per applied arm, the max over its receiver's reactions to its post (0 if none)
        reacted, best = kernels.keyed_max(
            caused[order],
            np.arange(len(applied), dtype=np.int64),
            np.stack(
                [weight, out.react_toxicity.astype(np.float64), civil_reaction, hostile_reaction]
            )[:, order],
        )
        engagement, toxicity, civil, hostile_any = best[0], best[1], best[2], best[3] > 0
        if len(out.follow_src) and "follow" in cfg.engagement:
            followed = chosen["followed"]
            engagement = np.where(
                followed, np.maximum(engagement, cfg.engagement["follow"]), engagement
            )
            civil = np.where(followed, 1.0, civil)
        civil = civil * ~hostile_any
        divergence = (
            np.abs(
                chosen["author_stance"].astype(np.float64)
                - chosen["user_stance"].astype(np.float64)
            )
            / 2
        )
        if cfg.divergence_needs_reaction:
            divergence = divergence * civil
        reward = np.clip(
            cfg.stance_weight * divergence
            + cfg.engagement_weight * engagement * civil
            - cfg.toxicity_weight * toxicity,
            0.0,
            1.0,
        ).astype(np.float32)
        cross = result.reaction_cross[caused >= 0]
        extra = {
            "cross_interaction_ratio_recommended": float(cross.mean()) if len(cross) else 0.0,
            "recommended_reaction_rate": float(reacted.mean()) if len(applied) else 0.0,
        }
        return reward, extra

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        """Objective form: the round's objective (``reward.step="objective"``) or the applied
        arms' changes summed per governed user (``"slots"``, ``info["metrics"]["slot_reward"]``).
        Paper form: the Eq. 9 rewards summed / ``slate_size`` (v0)."""
        if self.config.reward.form == "paper":
            return super()._step_reward(slot_rewards, applied)
        return self._slot_step if self.config.reward.step == "slots" else self._objective

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "abortion"}
