"""PolicySim-Exposure-v0: learn whose posts to let through so misinformation is held back."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.core.simulation import RoundResult
from socialenv.envs.base import PolicySimEnv
from socialenv.envs.exposure.lever import ExposureLever

#: The scalar features appended to each Exposure arm's context, in order (see ``ExposureEnv``).
EXPOSURE_ARM_FEATURES: tuple[str, ...] = (
    "level",
    "flagged_share",
    "level_x_flagged_share",
    "log_followers",
    "level_x_log_followers",
    "stance",
    "recent_toxicity",
    "log_recent_posts",
    "level_x_log_recent_posts",
    "current_level",
    "governed",
    "norm_pad",
)
#: log(1 + recent posts) is divided by this (a user with 100 recent posts scores 1).
_LOG_POSTS_SCALE = float(np.log1p(100.0))


class ExposureEnv(PolicySimEnv):
    """The platform's exposure controller for a sampled share of recent authors, with a
    declared objective: misinformation held back without silencing (paper §2.2,
    objective 2).

    ## Description

    Each round the env samples ``lever_share`` × the round's active users (default 0.15;
    ``exposure_users`` fixes a number instead) among the authors of recent posts (padded
    with other users if there are fewer); every (user, level) pair over
    ``exposure_levels`` (default 0, .25, .5, .75, 1) is an arm. A chosen arm sets that
    user's exposure probability p_i (the chance each of their posts passes the filter)
    from this round on, and the level stays in force until the policy changes it; the user
    is then *governed* for the rest of the episode. The platform sees misinformation only
    through its classifier (``classifier``: recall 0.7, false-positive rate 0.05 by
    default), never the hidden labels. The observation holds room for the lever's capacity,
    ``lever_share`` × (E + 3·√E) users (E the expected active users: 57 users, K = 285
    arms at 1,000 users), so its size is fixed; see ``PolicySim-Rec-v0`` for why.

    ## Action Space

    K = capacity × L arms over the L = len(exposure_levels) levels; arm k = (user k // L,
    level k % L). The form is chosen by ``action_format``:

    - ``"slate"`` (default): ``MultiDiscrete([K + 1] * capacity)``. **No-op**: the value
      K (``env.unwrapped.no_op``) keeps a slot's user at their current level, so a slate of
      only K changes nothing. One level per user: a second arm on the same user is not
      applied (``info["over_user_cap"]``).
    - ``"scores"``: ``Box(-1, 1, (K,), float32)``; each user gets their best-scored allowed
      level (``env.unwrapped.slate_from_scores(scores)`` is the slate).

    ## Observation Space

    ``Dict``:

    - ``"arms"``: (K, D) float32, D = 2d + len(:data:`EXPOSURE_ARM_FEATURES`): the user's
      propagated context (2d columns), then the features below (column 2d + idx). Padding
      arms are all zeros; every other arm has the same norm (``norm_pad``).
    - ``"action_mask"``: (K,) int8 (0 for padding).
    - optional ``"user_context"``, ``"stance"``, ``"graph"`` and ``"response_*"`` as in
      ``PolicySim-Rec-v0``.

    The min and max are the ``Box`` bounds of each feature column (N = the number of users;
    "recent" = the last ``recommender.window`` rounds):

    | idx | feature | meaning | min | max |
    |---|---|---|---|---|
    | 0 | level | the exposure level p the arm sets | 0 | 1 |
    | 1 | flagged_share | share m̂ of the user's recent posts the classifier flagged | 0 | 1 |
    | 2 | level_x_flagged_share | level · m̂ | 0 | 1 |
    | 3 | log_followers | log(1 + followers) / log(1 + N) | 0 | 1 |
    | 4 | level_x_log_followers | level · log_followers | 0 | 1 |
    | 5 | stance | the user's smoothed stance S_i | -1 | 1 |
    | 6 | recent_toxicity | toxicity of the user's recent posts | 0 | 1 |
    | 7 | log_recent_posts | log(1 + the user's recent posts) / log(101) | 0 | log1p(2³¹ − 1) / log1p(100) ≈ 4.656 |
    | 8 | level_x_log_recent_posts | level · log_recent_posts | 0 | log1p(2³¹ − 1) / log1p(100) ≈ 4.656 |
    | 9 | current_level | the user's exposure level p_i in force | 0 | 1 |
    | 10 | governed | the policy already governs the user | 0 | 1 |
    | 11 | norm_pad | √(c² − the squared norm of the rest of the context), c the largest norm the bounds allow | 0 | ≈ 7.373 |

    ## Rewards

    **Objective** (``info["metrics"]["objective"]``, higher is better), per round:

        objective = (users who recovered − users newly misinformed
                     − c·clean impressions removed) / active users

    c = ``reward.clean_removal_cost`` (0.001: 1,000 clean impressions removed weigh as much
    as one user misled). Silencing costs, so "mute everyone" is not free; summed over an
    episode the misinformation part is the change of the misinformed share, so the
    objective orders policies as the final ``misinformation_ratio`` does, less the cost of
    the clean reach they removed. The weight trades one against the other (policy zoo,
    seeds 0–4 / 10–19, Spearman of the objective with −final misinformation): c = 0 gives
    0.99 / 0.99 and makes "mute all" the best rule; 0.001 gives 0.98 / 0.95 with
    suppress-flagged the best rule; 0.002 gave 0.94 / 0.77; 0.02 makes the hidden-state
    oracle no better than Origin. ``newly_misinformed``, ``clean_removed_per_user`` and
    ``misinformation_uptake`` are reported beside it.

    **Reward** (``reward.form="objective"``, the default). Each author i with impressions
    this round caused Δ_i = q̂·(misinformation impressions of i removed from receivers not
    yet misinformed) − c·(clean impressions of i removed), q̂ =
    ``misinformation_uptake``, this round's newly misinformed users per misinformation
    impression (removed or not) in the feed of a receiver not yet misinformed; Δ_i = 0 at
    level 1 (nothing removed). A chosen arm earns its user's Δ_i per impression of theirs,
    on the bandits' scale: ``info["arm_rewards"]`` = clip(0.5 + 0.5·(Δ_i / n_i) / (q̂ + c),
    0, 1) (0.5 = no effect). ΣΔ_i estimates the change of the objective's numerator that
    the levels in force caused, but only roughly: q̂ is an average, and complex contagion
    makes the effect of one impression depend on what else the receiver saw, so ΣΔ_i
    over-credits indiscriminate removal (measured in ``benchmarks/zoo.py``). The step
    reward is therefore the objective itself (per active user: scale-free across
    population and lever sizes): levels are in force for the rest of the episode, and an
    RL agent is paid for the whole platform, not for the arms of this round.

    **Paper form** (``reward={"form": "paper"}``, v0): per governed user i,
    ``reward.misinformation_mode`` "effect": r_i = clip(0.5 + 0.5·(removed_at_risk −
    delivered_at_risk − w_v·removed_clean − harmed) / n_i, 0, 1), or "paper": r_i = (1 −
    w_v)·(1 − share of i's receivers misinformed at t+1) + w_v·p_i; the step reward is the
    mean r_i over every author with impressions. Measured against the objective in
    ``benchmarks/zoo.py`` (BENCHMARKS.md "Policy zoo").

    ``info["metrics"]`` adds ``exposure_removed`` (share of impressions filtered),
    ``mean_exposure``, ``governed_users``, ``classifier_precision``/``classifier_recall``
    of the round's posts, and ``policy_share``: the share of impressions whose author is
    held at a level below 1 (the impressions whose fate the policy changed; "let everyone
    through" scores 0).

    ## Starting State

    As ``PolicySim-Rec-v0`` with the ``misinformation`` scenario by default (a share of the
    users start out misinformed): every user at exposure p = 1 (Origin: no filtering), nobody
    governed; the classifier has scored the history posts.

    ## Episode End

    Truncated after ``rounds`` rounds (default 10; ``spec.max_episode_steps`` says the same);
    never terminated. Stepping after the end raises ``RuntimeError``.

    ## Arguments

    ``gym.make("PolicySim-Exposure-v0", **kwargs)`` takes the arguments of every PolicySim
    env (the table of :class:`~socialenv.envs.base.PolicySimEnv`) and these:

    | argument | default | description |
    |---|---|---|
    | scenario | "misinformation" | a built-in scenario, a saved scenario (.npz) or a ``Scenario`` |
    | lever_share | 0.15 | the recent authors whose level the policy sets, as a share of the round's active users, in (0, 1] |
    | budget | 1 | must be 1: one level per sampled author (size the lever with ``lever_share``) |
    | exposure_users | None | a fixed number of recent authors per round instead of ``lever_share`` of the active users |
    | exposure_levels | (0.0, 0.25, 0.5, 0.75, 1.0) | the exposure probabilities an arm can set (1.0 = no filtering) |

    The last four are the fields of :class:`~socialenv.envs.exposure.ExposureLeverConfig`,
    which ``lever=`` takes at once; the other envs' lever arguments are refused.

    ## Version History

    * v0: initial version (the paper's exposure-control setting, §2.2 objective 2).
    * v0, issue 20 (the id is kept; the package is pre-release): the declared objective
      and the objective-form reward (the v0 reward is ``reward={"form": "paper"}``); the
      lever is ``lever_share`` = 0.15 of the active users (was 300 authors; 0.25 until issue
      26's memory budget); an honest
      ``policy_share`` (was: share of impressions of governed authors, level 1 included);
      scaled features 3, 4, 7, 8 and ``norm_pad``.
    * v0, issue 20 (second step): ``reward.clean_removal_cost`` 0.002 → 0.001 (at 0.002 the
      silencing cost reordered the broad-muting policies against the final misinformation
      ratio: Spearman 0.77 on seeds 10–19); the arm reward is 0.5 (no effect) when the
      round's uptake and the removal cost are both 0 (it was NaN).
    """

    num_arm_features = len(EXPOSURE_ARM_FEATURES)
    lever_class = ExposureLever
    arm_kind = "exposure"

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "misinformation"}

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # follower counts are scaled by log1p(N); post counts (int32 ids) by _LOG_POSTS_SCALE
        log_posts = float(np.log1p(float(np.iinfo(np.int32).max)) / _LOG_POSTS_SCALE)
        bounds = {name: (0.0, 1.0) for name in EXPOSURE_ARM_FEATURES}
        bounds["stance"] = (-1.0, 1.0)
        bounds["log_recent_posts"] = bounds["level_x_log_recent_posts"] = (0.0, log_posts)
        return self._pad_to_constant_norm(EXPOSURE_ARM_FEATURES, bounds, unit_blocks=2)

    def _arm_responded(
        self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray
    ) -> np.ndarray:
        """Whether each applied arm's user had at least one impression this round (the level
        had something to act on)."""
        return result.policy.choice["impressions"] > 0

    def _num_arms(self) -> int:
        self._capacity = self.lever_capacity(self.lever_config.exposure_users)
        return self._capacity * len(self.lever_config.exposure_levels)

    def _arms_per_user(self) -> int:
        return len(self.lever_config.exposure_levels)

    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, cfg = self.sim, self.config
        n = len(sim.users.stance)
        lo, hi = sim.recent_post_range(cfg.recommender.window)
        authors = np.unique(sim.posts.author[lo:hi])
        wanted = self.lever_take(n, len(sim.active), self.lever_config.exposure_users)
        take = min(wanted, len(authors))
        users = rng.choice(authors, size=take, replace=False) if take else np.zeros(0, np.int64)
        if take < wanted:
            others = np.setdiff1d(np.arange(n), users)
            extra = rng.choice(others, size=min(wanted - take, len(others)), replace=False)
            users = np.concatenate([users, extra])
        padded = np.full(self._capacity, -1, np.int64)
        padded[: len(users)] = np.sort(users)
        levels = np.asarray(self.lever_config.exposure_levels, np.float32)
        arm_user = np.repeat(padded, len(levels))
        arm_level = np.tile(levels, self._capacity)
        return {"user": arm_user, "level": arm_level, "mask": arm_user >= 0}

    def _arm_contexts(
        self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray
    ) -> np.ndarray:
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        level = arms["level"]
        indptr, _ = sim.graph.followers_csr()
        followers = (np.log1p(np.diff(indptr)[user]) / np.log1p(self._num_users())).astype(
            np.float32
        )
        lo, hi = sim.recent_post_range(self.config.recommender.window)
        recent_posts = (
            np.log1p(np.bincount(sim.posts.author[lo:hi], minlength=len(sim.users.stance))[user])
            / _LOG_POSTS_SCALE
        )
        flagged = sim.recent_misinfo[user]
        features = np.column_stack(
            [
                level,
                flagged,
                level * flagged,
                followers,
                level * followers,
                sim.users.stance[user],
                sim.recent_toxicity[user],
                recent_posts,
                level * recent_posts,
                sim.users.exposure[user],
                self.lever.governed[user].astype(np.float32),
                np.zeros(len(user)),
            ]
        )
        context = self._context_matrix(len(features), user_rows.shape[1] + features.shape[1])
        # cast into float32 as it is written: the values ``.astype(np.float32)`` would give
        np.concatenate(
            [user_rows.take(arm_row, axis=0), features], axis=1, out=context, casting="same_kind"
        )
        squared = np.einsum("kd,kd->k", context, context, dtype=np.float64)
        context[:, -1] = np.sqrt(np.maximum(self._context_norm**2 - squared, 0.0))
        context[~arms["mask"]] = 0.0
        return context

    def _user_rewards(self, user: np.ndarray, result: RoundResult) -> np.ndarray:
        """(len(user),) r_i of the distinct users ``user`` at their current level."""
        sim, cfg = self.sim, self.config.reward
        w_v = cfg.visibility_weight
        author = result.impression_author
        is_mis = sim.posts.misinfo[result.impression_post]
        removed = result.impression_removed
        receiver = result.impression_user
        newly = sim.users.misinformed & ~result.misinformed_before
        at_risk = ~result.misinformed_before[receiver]
        position = np.full(len(sim.users.stance), -1, np.int64)
        position[user] = np.arange(len(user))
        arm_of = position[author]
        mine = arm_of >= 0

        def per_user(values: np.ndarray) -> np.ndarray:
            return np.bincount(
                arm_of[mine], weights=values[mine].astype(np.float64), minlength=len(user)
            )

        impressions = per_user(np.ones(len(author)))
        if cfg.misinformation_mode == "effect":
            removed_at_risk = per_user(removed & is_mis & at_risk)
            delivered_at_risk = per_user(~removed & is_mis & at_risk)
            removed_clean = per_user(removed & ~is_mis)
            harmed = per_user(~removed & is_mis & newly[receiver])
            reward = 0.5 + 0.5 * (
                removed_at_risk - delivered_at_risk - w_v * removed_clean - harmed
            ) / np.maximum(impressions, 1)
        else:
            misinformed_after = per_user(sim.users.misinformed[receiver])
            share = np.where(impressions > 0, misinformed_after / np.maximum(impressions, 1), 0.0)
            reward = (1 - w_v) * (1 - share) + w_v * sim.users.exposure[user]
        return np.clip(reward, 0.0, 1.0)

    def _objective_changes(
        self, result: RoundResult
    ) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """Per author with impressions this round: the estimated change of the objective
        their level caused, q̂·(misinformation impressions removed from receivers not yet
        misinformed) − ``clean_removal_cost``·(clean impressions removed), with q̂ this
        round's users newly misinformed per misinformation impression (removed or not) in
        the feed of a receiver not yet misinformed (0 at level 1: nothing removed); and the
        authors."""
        sim, cost = self.sim, self.config.reward.clean_removal_cost
        author = result.impression_author
        is_mis = sim.posts.misinfo[result.impression_post]
        removed = result.impression_removed
        at_risk = ~result.misinformed_before[result.impression_user]
        newly = int((sim.users.misinformed & ~result.misinformed_before).sum())
        recovered = int((~sim.users.misinformed & result.misinformed_before).sum())
        shown_at_risk = int((is_mis & at_risk).sum())
        uptake = newly / shown_at_risk if shown_at_risk else 0.0
        authors, row = np.unique(author, return_inverse=True)
        row = row.reshape(-1)
        removed_at_risk = np.bincount(
            row, weights=removed & is_mis & at_risk, minlength=len(authors)
        )
        removed_clean = np.bincount(row, weights=removed & ~is_mis, minlength=len(authors))
        change = uptake * removed_at_risk - cost * removed_clean
        active = max(len(result.active), 1)
        metrics = {
            "objective": (recovered - newly - cost * float(removed_clean.sum())) / active,
            "newly_misinformed": float(newly),
            "clean_removed_per_user": float(removed_clean.sum()) / active,
            "misinformation_uptake": uptake,
        }
        return authors, change, metrics

    def _arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        sim = self.sim
        governed = np.flatnonzero(self.lever.governed)
        impression_author = result.impression_author
        chosen = result.policy.choice
        applied_users = chosen["user"]
        authors, change, objective = self._objective_changes(result)
        if self.config.reward.form == "paper":
            # one pass over the impressions for the applied arms' users and every author
            scored = np.union1d(authors, applied_users)
            user_reward = self._user_rewards(scored, result)
            rewards = user_reward[np.searchsorted(scored, applied_users)].astype(np.float32)
            self._platform_reward = (
                float(user_reward[np.searchsorted(scored, authors)].mean()) if len(authors) else 0.5
            )
        else:
            n = len(sim.users.stance)
            change_of = np.zeros(n)
            change_of[authors] = change
            per_impression = change_of[applied_users] / np.maximum(chosen["impressions"], 1)
            scale = objective["misinformation_uptake"] + self.config.reward.clean_removal_cost
            # scale 0 (no uptake this round, removal free): nothing removed changed anything
            ratio = per_impression / scale if scale > 0 else np.zeros_like(per_impression)
            rewards = np.clip(0.5 + 0.5 * ratio, 0.0, 1.0).astype(np.float32)
            self._platform_reward = objective["objective"]
        new_posts = slice(sim.round_start[-2], sim.round_start[-1])
        mis, flag = sim.posts.misinfo[new_posts], sim.posts.flagged[new_posts]
        extra = {
            **objective,
            "mean_exposure": float(sim.users.exposure.mean()),
            "governed_users": float(len(governed)),
            "policy_share": len(result.policy.impression["post"]) / len(impression_author)
            if len(impression_author)
            else 0.0,
            "classifier_precision": float((mis & flag).sum() / max(flag.sum(), 1)),
            "classifier_recall": float((mis & flag).sum() / max(mis.sum(), 1)),
        }
        return rewards, extra

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        return self._platform_reward

    def _load_env_state(self, state: dict[str, Any]) -> None:
        super()._load_env_state(state)
        if "governed" in state:  # saved before the lever held it (issue 25)
            self.lever.load_state_dict({"governed": state["governed"]})
