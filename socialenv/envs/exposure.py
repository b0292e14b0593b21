"""PolicySim-Exposure-v0: learn whose posts to let through so misinformation is held back."""

from __future__ import annotations

from typing import Any

import numpy as np

from socialenv.envs.base import PolicySimEnv
from socialenv.simulation import RoundResult

#: The scalar features appended to each Exposure arm's context, in order (see ``ExposureEnv``).
EXPOSURE_ARM_FEATURES: tuple[str, ...] = (
    "level", "flagged_share", "level_x_flagged_share", "log_followers", "level_x_log_followers",
    "stance", "recent_toxicity", "log_recent_posts", "level_x_log_recent_posts", "current_level",
    "governed",
)


class ExposureEnv(PolicySimEnv):
    """The platform's exposure controller for a sampled set of recent authors, with the
    misinformation objective (paper §2.2, objective 2, Eq. 10).

    ## Description

    Each round the env samples ``exposure_users`` authors of recent posts (padded with other
    users if there are fewer); every (user, level) pair over ``exposure_levels`` (default 0,
    .25, .5, .75, 1) is an arm. A chosen arm sets that user's exposure probability p_i (the
    chance each of their posts passes the filter) from this round on, and the level stays in
    force until the policy changes it; the user is then *governed* for the rest of the
    episode. The platform sees misinformation only through its classifier (``classifier``:
    recall 0.7, false-positive rate 0.05 by default), never the hidden labels.

    ## Action Space

    K = exposure_users × L arms over the L = len(exposure_levels) levels; arm k = (user
    k // L, level k % L). The form is chosen by ``action_format``:

    - ``"slate"`` (default): ``MultiDiscrete([K + 1] * exposure_users)``. **No-op**: the value
      K (``env.unwrapped.no_op``) keeps a slot's user at their current level, so a slate of
      only K changes nothing. One level per user: a second arm on the same user is not
      applied (``info["over_user_cap"]``).
    - ``"scores"``: ``Box(-1, 1, (K,), float32)``; each user gets their best-scored allowed
      level (``env.unwrapped.slate_from_scores(scores)`` is the slate).

    ## Observation Space

    ``Dict``:

    - ``"arms"``: (K, D) float32, D = 2d + len(:data:`EXPOSURE_ARM_FEATURES`): the user's
      propagated context (2d columns), then the features below (column 2d + idx). Padding
      arms are all zeros.
    - ``"action_mask"``: (K,) int8 (all ones unless the population is smaller).
    - optional ``"user_context"``, ``"stance"``, ``"graph"`` and ``"response_*"`` as in
      ``PolicySim-Rec-v0``.

    The min and max are the ``Box`` bounds of each feature column (N = the number of users;
    "recent" = the last ``recommender.window`` rounds):

    | idx | feature | meaning | min | max |
    |---|---|---|---|---|
    | 0 | level | the exposure level p the arm sets | 0 | 1 |
    | 1 | flagged_share | share m̂ of the user's recent posts the classifier flagged | 0 | 1 |
    | 2 | level_x_flagged_share | level · m̂ | 0 | 1 |
    | 3 | log_followers | log(1 + followers) | 0 | log1p(N) |
    | 4 | level_x_log_followers | level · log(1 + followers) | 0 | log1p(N) |
    | 5 | stance | the user's smoothed stance S_i | -1 | 1 |
    | 6 | recent_toxicity | toxicity of the user's recent posts | 0 | 1 |
    | 7 | log_recent_posts | log(1 + the user's recent posts) | 0 | log1p(2³¹ − 1) ≈ 21.488 |
    | 8 | level_x_log_recent_posts | level · log(1 + recent posts) | 0 | log1p(2³¹ − 1) ≈ 21.488 |
    | 9 | current_level | the user's exposure level p_i in force | 0 | 1 |
    | 10 | governed | the policy already governs the user | 0 | 1 |

    ## Rewards

    ``reward.misinformation_mode``, per governed user i over the impressions of i's posts
    this round:

    - "effect" (default): r_i = clip(0.5 + 0.5·(removed_at_risk − delivered_at_risk −
      w_v·removed_clean − harmed) / n_i, 0, 1): misinformation impressions the filter
      removed from / let through to receivers not yet misinformed, clean impressions removed
      (lost visibility, weight w_v), and delivered misinformation impressions whose receiver
      is newly misinformed at t+1 (Eq. 10's outcome); 0.5 without impressions.
    - "paper": r_i = (1 − w_v)·(1 − share of i's receivers misinformed at t+1) + w_v·p_i.

    A chosen arm's reward (``info["arm_rewards"]``, what a bandit learns from) is r_i of its
    user this round. The step's reward credits every level for each round it is in force:
    the mean of r_i over every author whose posts had impressions this round, governed or
    not (so Origin scores below 0.5 by the harm it lets through, and an RL agent is paid for
    the whole platform, not only for the arms of this round). ``info["metrics"]`` adds
    ``exposure_removed`` (share of impressions filtered), ``mean_exposure``,
    ``governed_users``, ``classifier_precision``/``classifier_recall`` of the round's posts,
    and ``policy_share`` (share of impressions whose author the policy governs).

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
    | budget | 1 | must be 1: one level per sampled author (size the lever with ``exposure_users``) |
    | exposure_users | 300 | recent authors per round whose level the policy sets |
    | exposure_levels | (0.0, 0.25, 0.5, 0.75, 1.0) | the exposure probabilities an arm can set (1.0 = no filtering) |
    | candidate_users | 320 | PolicySim-Rec-v0's lever: accepted, unused here |
    | candidates | {"interest": 3, "opposite": 4, "popular": 2, "fresh": 1} | PolicySim-Rec-v0's candidate mix: accepted, unused here |
    | moderation | None | PolicySim-Moderation-v0's settings: accepted, unused here |

    ## Version History

    * v0: initial version (the paper's exposure-control setting, §2.2 objective 2).
    """

    num_arm_features = len(EXPOSURE_ARM_FEATURES)

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "misinformation", "budget": 1}

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # followers < N; post counts fit the int32 post ids
        log_followers = float(np.log1p(self._num_users()))
        log_posts = float(np.log1p(float(np.iinfo(np.int32).max)))
        bounds = {name: (0.0, 1.0) for name in EXPOSURE_ARM_FEATURES}
        bounds["stance"] = (-1.0, 1.0)
        bounds["log_followers"] = bounds["level_x_log_followers"] = (0.0, log_followers)
        bounds["log_recent_posts"] = bounds["level_x_log_recent_posts"] = (0.0, log_posts)
        low, high = zip(*(bounds[name] for name in EXPOSURE_ARM_FEATURES), strict=True)
        return np.asarray(low, np.float64), np.asarray(high, np.float64)

    def _arm_responded(self, applied: np.ndarray, result: RoundResult, rewards: np.ndarray) -> np.ndarray:
        """Whether each applied arm's user had at least one impression this round (the level
        had something to act on)."""
        author = self.sim.posts.author[result.impression_post]
        return np.isin(self._arms["user"][applied], author)

    def _num_arms(self) -> int:
        return self.config.exposure_users * len(self.config.exposure_levels)

    def _arms_per_user(self) -> int:
        return len(self.config.exposure_levels)

    def _per_user(self) -> int:
        if self.config.budget != 1:
            raise ValueError(
                f"budget={self.config.budget!r} is not allowed for PolicySim-Exposure-v0: "
                "one level per sampled author, budget=1 (size the lever with exposure_users)"
            )
        return 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._governed = np.zeros(self._num_users(), bool)
        return super().reset(seed=seed, options=options)

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

    def _arm_contexts(self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray) -> np.ndarray:
        sim = self.sim
        user = np.maximum(arms["user"], 0)
        level = arms["level"]
        indptr, _ = sim.graph.followers_csr()
        followers = np.log1p(np.diff(indptr)[user]).astype(np.float32)
        lo, hi = sim.recent_post_range(self.config.recommender.window)
        recent_posts = np.log1p(np.bincount(sim.posts.author[lo:hi], minlength=len(sim.users.stance))[user])
        flagged = sim.recent_misinfo[user]
        features = np.column_stack([
            level, flagged, level * flagged, followers, level * followers,
            sim.users.stance[user], sim.recent_toxicity[user], recent_posts, level * recent_posts,
            sim.users.exposure[user], self._governed[user].astype(np.float32),
        ])
        context = np.concatenate([user_rows.take(arm_row, axis=0), features], axis=1).astype(np.float32)
        context[~arms["mask"]] = 0.0
        return context

    def _apply_action(self, chosen: np.ndarray) -> tuple[np.ndarray, tuple[None, None]]:
        user = self._arms["user"][chosen]
        self.sim.users.exposure[user] = self._arms["level"][chosen]
        self._governed[user] = True
        return chosen, (None, None)

    def _user_rewards(self, user: np.ndarray, result: RoundResult) -> np.ndarray:
        """(len(user),) r_i of the distinct users ``user`` at their current level."""
        sim, cfg = self.sim, self.config.reward
        w_v = cfg.visibility_weight
        author = sim.posts.author[result.impression_post]
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
            return np.bincount(arm_of[mine], weights=values[mine].astype(np.float64),
                               minlength=len(user))

        impressions = per_user(np.ones(len(author)))
        if cfg.misinformation_mode == "effect":
            removed_at_risk = per_user(removed & is_mis & at_risk)
            delivered_at_risk = per_user(~removed & is_mis & at_risk)
            removed_clean = per_user(removed & ~is_mis)
            harmed = per_user(~removed & is_mis & newly[receiver])
            reward = 0.5 + 0.5 * (removed_at_risk - delivered_at_risk - w_v * removed_clean
                                  - harmed) / np.maximum(impressions, 1)
        else:
            misinformed_after = per_user(sim.users.misinformed[receiver])
            share = np.where(impressions > 0, misinformed_after / np.maximum(impressions, 1), 0.0)
            reward = (1 - w_v) * (1 - share) + w_v * sim.users.exposure[user]
        return np.clip(reward, 0.0, 1.0)

    def _arm_rewards(self, applied: np.ndarray, result: RoundResult) -> tuple[np.ndarray, dict[str, float]]:
        sim = self.sim
        governed = np.flatnonzero(self._governed)
        impression_author = sim.posts.author[result.impression_post]
        authors = np.unique(impression_author)
        applied_users = self._arms["user"][applied]
        # one pass over the impressions for the applied arms' users and every author
        scored = np.union1d(authors, applied_users)
        user_reward = self._user_rewards(scored, result)
        rewards = user_reward[np.searchsorted(scored, applied_users)].astype(np.float32)
        self._platform_reward = (float(user_reward[np.searchsorted(scored, authors)].mean())
                                 if len(authors) else 0.5)
        new_posts = slice(sim.round_start[-2], sim.round_start[-1])
        mis, flag = sim.posts.misinfo[new_posts], sim.posts.flagged[new_posts]
        extra = {
            "mean_exposure": float(sim.users.exposure.mean()),
            "governed_users": float(len(governed)),
            "policy_share": float(self._governed[impression_author].mean()) if len(impression_author) else 0.0,
            "classifier_precision": float((mis & flag).sum() / max(flag.sum(), 1)),
            "classifier_recall": float((mis & flag).sum() / max(mis.sum(), 1)),
        }
        return rewards, extra

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        return self._platform_reward

    def _env_state(self) -> dict[str, Any]:
        return {**super()._env_state(), "governed": self._governed.copy()}

    def _load_env_state(self, state: dict[str, Any]) -> None:
        super()._load_env_state(state)
        self._governed = state["governed"].copy()
