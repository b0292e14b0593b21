"""PolicySim-Moderation-v0: learn which governance actions to take on which posts."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import PostKind
from socialenv.core.simulation import RoundResult, Stream
from socialenv.envs.base import PolicySimEnv
from socialenv.envs.moderation.lever import ModerationLever
from socialenv.mechanisms.governance import MODERATION_ACTIONS, ModerationConfig

#: Scalar features at the end of each arm's context, in order.
MODERATION_FEATURES: tuple[str, ...] = (
    *(f"action_{a}" for a in MODERATION_ACTIONS),
    "flagged",
    *(f"flagged_x_{a}" for a in MODERATION_ACTIONS),
    "log_engagement",
    "post_age",
    "author_flagged_share",
    "log_author_followers",
    "post_stance",
    "is_retweet",
    "flagged_x_log_engagement",
    "post_toxicity",
    *(f"post_toxicity_x_{a}" for a in MODERATION_ACTIONS),
)


class ModerationEnv(PolicySimEnv):
    """Content moderation: delete, suspend, label or downrank, against a noisy classifier.

    ## Description

    A POSIM-style governance setting on the PolicySim platform. Posts are harmful when they
    carry misinformation or are toxic (toxicity >= ``moderation.toxic_threshold``); the
    platform never sees that truth, only the flags of a harm classifier with the configured
    ``precision`` and ``recall``. Each round ``moderation.targets`` (T) candidate posts are
    drawn from the last ``recommender.window`` rounds (a ``flagged_share`` of them from the
    classifier's flagged posts, the rest at random; both weighted by engagement); arm k =
    (post k // A, action k % A) over the A actions of ``moderation.actions`` (default delete,
    suspend, label, downrank), so K = T·A. What each does, from this round on:

    | action | effect | lasts |
    |---|---|---|
    | delete | the post (and its retweets) is no longer shown | for good |
    | suspend | the author cannot act and none of their posts is shown | ``suspend_rounds`` (k) |
    | label | a warning label: ``label_reach`` of its impressions kept, belief uptake lowered | for good |
    | downrank | ``downrank_reach`` of its impressions kept | ``downrank_rounds`` |

    ``env.unwrapped._arms`` holds "user" (the author), "post", "action" (index into
    ``moderation.actions``) and "mask" per arm.

    ## Action Space

    The form is chosen by ``action_format``:

    - ``"slate"`` (default): ``MultiDiscrete([K + 1] * budget)``, a slate of ``budget`` arm
      indices. **No-op**: the value K (``env.unwrapped.no_op``) leaves a slot empty, so a
      slate of only K is no moderation. A repeated index is applied once; a second action on
      the same post in a slate is discarded (``info["over_user_cap"]``), as is a masked arm
      (``info["invalid_arms"]``).
    - ``"scores"``: ``Box(-1, 1, (K,), float32)``, one score per arm; each post's best-scored
      allowed action is its candidate, and the ``budget`` best-scored candidates fill the
      slate (``env.unwrapped.slate_from_scores``; ties go to the lower arm index).

    ## Observation Space

    ``Dict``: ``"arms"`` (K, D) float32 and ``"action_mask"`` (K,) int8 (0 for padding, a
    deleted or already-labelled post, a currently downranked post, a currently suspended
    author). Each arm's context is the author's propagated context (2d: profile ⊕ memory
    embedding, Eq. 7–8) followed by the features of :data:`MODERATION_FEATURES` (column
    2d + idx); padding arms are all zeros. The min and max are the features' ranges and the
    ``Box``'s bounds (engagement counters are int32):

    | idx | feature | meaning | min | max |
    |---|---|---|---|---|
    | 0 | action_delete | action one-hot: delete | 0 | 1 |
    | 1 | action_suspend | action one-hot: suspend | 0 | 1 |
    | 2 | action_label | action one-hot: label | 0 | 1 |
    | 3 | action_downrank | action one-hot: downrank | 0 | 1 |
    | 4 | flagged | the classifier flagged the post as harmful | 0 | 1 |
    | 5 | flagged_x_delete | flag × action one-hot: delete | 0 | 1 |
    | 6 | flagged_x_suspend | flag × action one-hot: suspend | 0 | 1 |
    | 7 | flagged_x_label | flag × action one-hot: label | 0 | 1 |
    | 8 | flagged_x_downrank | flag × action one-hot: downrank | 0 | 1 |
    | 9 | log_engagement | log(1 + likes + 2·retweets + replies) | 0 | log1p(4·(2³¹ − 1)) ≈ 22.874 |
    | 10 | post_age | rounds since the post was written | 0 | rounds + 1 |
    | 11 | author_flagged_share | share of the author's recent posts flagged | 0 | 1 |
    | 12 | log_author_followers | log(1 + the author's followers) | 0 | log1p(N) |
    | 13 | post_stance | stance of the post | -1 | 1 |
    | 14 | is_retweet | the post is a retweet | 0 | 1 |
    | 15 | flagged_x_log_engagement | flag × log engagement | 0 | log1p(4·(2³¹ − 1)) ≈ 22.874 |
    | 16 | post_toxicity | the post's toxicity score (as in the Rec arms) | 0 | 1 |
    | 17 | post_toxicity_x_delete | toxicity × action one-hot: delete | 0 | 1 |
    | 18 | post_toxicity_x_suspend | toxicity × action one-hot: suspend | 0 | 1 |
    | 19 | post_toxicity_x_label | toxicity × action one-hot: label | 0 | 1 |
    | 20 | post_toxicity_x_downrank | toxicity × action one-hot: downrank | 0 | 1 |

    The flag is the only signal of misinformation; a post's toxicity is scored on every post,
    as a platform runs a toxicity model on what it hosts (the Rec env's arms carry the same
    score), so the toxic part of harm is visible and the misinformation part is not.

    ## Rewards

    Harms are counted in impression-equivalents over the I impressions of the round.
    **Objective** (``info["metrics"]["objective"]``, higher is better; the step reward):
    harm removed minus wrongful removals and action costs,

        objective = (A − w_v·C − w_w·W − Σ cost) / I

    A: the harm the decisions in force averted (w_m per misinformation impression and w_t
    per toxic impression removed, a labelled misinformation impression counting
    ``label_uptake_reduction``); 0 without moderation, so no policy can raise it by
    removing reach that carried no harm. With ``reward={"form": "paper"}`` the step reward
    is v0's ``moderation_reward``:

        r = 1 − (w_m·M + w_t·T + w_v·C + w_w·W + Σ cost) / I

    M: misinformation impressions delivered (a labelled one counts 1 − ``label_uptake_reduction``),
    T: toxic impressions delivered, C: clean impressions the decisions in force removed,
    W: wrongful removals this round (a delete or suspend of a post that was not harmful), and
    the costs of the actions taken. Over-moderation therefore costs reward twice: lost clean
    reach and wrongful removals. ``info["arm_rewards"]`` credits each applied arm, in [0, 1]
    (0.5 = no effect), with its own share of that sum: clip(0.5 + 0.5·Δ / ``credit_scale``,
    0, 1), Δ = harm it averted on the impressions it governed this round − w_v·clean
    impressions it removed − w_w·[wrongful] − its cost, so an arm scores above 0.5 exactly
    when it raised the step reward. ``info["metrics"]`` adds
    ``moderation_reward``, ``misinformation_impression_share``, ``toxic_impression_share``,
    ``clean_removed_share``, ``wrongful_removals`` (and the episode total
    ``wrongful_removals_total``), ``actions_<name>``, ``moderation_cost``,
    ``suspended_users``, ``classifier_flagged_share``, ``label_reverted_beliefs``.

    ## Starting State

    As ``PolicySim-Rec-v0`` with the ``misinformation`` scenario by default (20% of users
    start out spreading it); no decision in force; the classifier has scored the history
    posts.

    ## Episode End

    Truncated after ``rounds`` rounds (default 10; ``spec.max_episode_steps`` says the same);
    never terminated. Stepping after the end raises ``RuntimeError``.

    ## Arguments

    ``gym.make("PolicySim-Moderation-v0", **kwargs)`` takes the arguments of every PolicySim
    env (the table of :class:`~socialenv.envs.base.PolicySimEnv`) and these:

    | argument | default | description |
    |---|---|---|
    | scenario | "misinformation" | a built-in scenario, a saved scenario (.npz) or a ``Scenario`` |
    | budget | 10 | governance actions per round (the slate length) |
    | moderation | None | a dict of :class:`socialenv.mechanisms.governance.ModerationConfig` fields (None: the defaults), listed below |

    The last two are the fields of
    :class:`~socialenv.envs.moderation.ModerationLeverConfig`, which ``lever=`` takes at
    once; the other envs' lever arguments are refused.

    ``moderation={...}`` fields: ``targets``, ``actions``, ``flagged_share``,
    ``suspend_rounds``, ``downrank_rounds``, ``label_reach``, ``label_uptake_reduction``,
    ``downrank_reach``, ``cost`` (per action), ``precision``, ``recall``,
    ``toxic_threshold``, ``misinformation_weight``, ``toxicity_weight``,
    ``visibility_weight``, ``wrongful_penalty``, ``credit_scale``.

    ## Version History

    * v0: initial version.
    * v0, issue 20: the declared objective is the step reward (v0's ``moderation_reward``,
      which differs from it by the round's harm on offer, with ``reward={"form": "paper"}``).
    * v0, issue 20 (later): the arms carry the post's toxicity score and its products with
      the action one-hot (columns 16–20; the context width grows by 5). The trajectories of a
      policy that ignores them are unchanged.
    """

    num_arm_features = len(MODERATION_FEATURES)
    lever_class = ModerationLever
    arm_kind = "moderation"

    def _feature_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        # engagement counters are int32 (likes + 2 retweets + replies); a post is at most
        # rounds + 1 old (history posts count as round -1); followers are other users
        log_engagement = float(np.log1p(4.0 * np.iinfo(np.int32).max))
        bounds = {name: (0.0, 1.0) for name in MODERATION_FEATURES}
        bounds["log_engagement"] = bounds["flagged_x_log_engagement"] = (0.0, log_engagement)
        bounds["post_age"] = (0.0, float(self.config.rounds + 1))
        bounds["log_author_followers"] = (0.0, float(np.log1p(self._num_users())))
        bounds["post_stance"] = (-1.0, 1.0)
        low, high = zip(*(bounds[name] for name in MODERATION_FEATURES), strict=True)
        return np.asarray(low, np.float64), np.asarray(high, np.float64)

    @classmethod
    def default_kwargs(cls) -> dict[str, Any]:
        return {"scenario": "misinformation"}

    @property
    def moderation_config(self) -> ModerationConfig:
        """The governance settings (``moderation=``)."""
        return self.lever_config.moderation

    @property
    def _action_index(self) -> np.ndarray:
        return self.lever._action_index

    def _num_arms(self) -> int:
        cfg = self.moderation_config
        return cfg.targets * len(cfg.actions)

    # ------------------------------------------------------------------ arms
    def _sample_arms(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sim, mod, cfg = self.sim, self.lever.state, self.moderation_config
        mod.score(sim.posts, sim.rng(sim.round, Stream.MODERATION_CLASSIFIER))
        lo, hi = sim.recent_post_range(self.config.recommender.window)
        ids = np.arange(lo, hi)
        ids = ids[~mod.deleted[ids]]
        p = sim.posts
        weight = 1.0 + p.likes[ids] + 2.0 * p.retweets[ids] + p.replies[ids]
        flagged = mod.flag[ids]
        n_flagged = min(int(round(cfg.flagged_share * cfg.targets)), int(flagged.sum()))

        def draw(pool: np.ndarray, w: np.ndarray, size: int) -> np.ndarray:
            size = min(size, len(pool))
            return (
                rng.choice(pool, size=size, replace=False, p=w / w.sum())
                if size
                else np.zeros(0, np.int64)
            )

        first = draw(ids[flagged], weight[flagged], n_flagged)
        rest = np.setdiff1d(ids, first)
        rest_w = 1.0 + p.likes[rest] + 2.0 * p.retweets[rest] + p.replies[rest]
        chosen = np.sort(np.concatenate([first, draw(rest, rest_w, cfg.targets - len(first))]))
        post = np.full(cfg.targets, -1, np.int64)
        post[: len(chosen)] = chosen
        a = len(cfg.actions)
        arm_post = np.repeat(post, a)
        arm_action = np.tile(np.arange(a), cfg.targets)
        exists = arm_post >= 0
        safe = np.maximum(arm_post, 0)
        author = np.where(exists, p.author[safe], -1)
        name = self._action_index[arm_action]
        t = sim.round
        allowed = np.select(
            [name == 0, name == 1, name == 2, name == 3],
            [
                ~mod.deleted[safe],
                ~mod.suspended(t)[np.maximum(author, 0)],
                ~mod.labelled[safe],
                mod.downranked_until[safe] <= t,
            ],
        )
        return {"user": author, "post": arm_post, "action": arm_action, "mask": exists & allowed}

    def _arms_per_user(self) -> int:
        """Arms of one candidate post (one per governance action): the group of
        :meth:`arm_groups` is the post, and at most one action per post takes effect."""
        return len(self.moderation_config.actions)

    def _slate_size(self) -> int:
        return self.lever_config.budget

    def _arm_contexts(
        self, arms: dict[str, np.ndarray], user_rows: np.ndarray, arm_row: np.ndarray
    ) -> np.ndarray:
        sim, mod = self.sim, self.lever.state
        p = sim.posts
        post = np.maximum(arms["post"], 0)
        author = np.maximum(arms["user"], 0)
        onehot = np.zeros((len(post), len(MODERATION_ACTIONS)), np.float32)
        onehot[np.arange(len(post)), self._action_index[arms["action"]]] = 1.0
        flag = mod.flag[post].astype(np.float32)
        engagement = np.log1p(p.likes[post] + 2.0 * p.retweets[post] + p.replies[post]).astype(
            np.float32
        )
        lo, hi = sim.recent_post_range(self.config.recommender.window)
        n = len(sim.users.stance)
        written = np.bincount(p.author[lo:hi], minlength=n)
        flagged = np.bincount(
            p.author[lo:hi], weights=mod.flag[lo:hi].astype(np.float64), minlength=n
        )
        author_share = (flagged / np.maximum(written, 1))[author]
        followers_indptr, _ = sim.graph.followers_csr()
        toxicity = p.toxicity[post]
        features = np.concatenate(
            [
                onehot,
                flag[:, None],
                flag[:, None] * onehot,
                np.stack(
                    [
                        engagement,
                        (sim.round - p.round[post]).astype(np.float32),
                        author_share,
                        np.log1p(np.diff(followers_indptr)[author]),
                        p.stance[post],
                        (p.kind[post] == int(PostKind.RETWEET)).astype(np.float32),
                        flag * engagement,
                        toxicity,
                    ],
                    axis=1,
                ),
                toxicity[:, None] * onehot,
            ],
            axis=1,
        )
        context = self._context_matrix(len(features), user_rows.shape[1] + features.shape[1])
        # cast into float32 as it is written: the values ``.astype(np.float32)`` would give
        np.concatenate(
            [user_rows.take(arm_row, axis=0), features], axis=1, out=context, casting="same_kind"
        )
        context[~arms["mask"]] = 0.0
        return context

    # ------------------------------------------------------------------ rewards
    def _arm_rewards(
        self, applied: np.ndarray, result: RoundResult
    ) -> tuple[np.ndarray, dict[str, float]]:
        mod, cfg = self.lever.state, self.moderation_config
        effects = result.policy
        acts, impressions = effects.choice, effects.impression
        imp_post, removed, labelled = (
            impressions["post"],
            impressions["removed"],
            impressions["labelled"],
        )
        p = self.sim.posts
        is_mis = p.misinfo[imp_post]
        is_tox = p.toxicity[imp_post] >= cfg.toxic_threshold
        clean = ~(is_mis | is_tox)
        total = max(len(imp_post), 1)
        delivered = ~removed
        # harm of each impression if delivered, and what the decisions in force took off it
        mis_harm = cfg.misinformation_weight * is_mis
        harm_if_delivered = mis_harm + cfg.toxicity_weight * is_tox
        delivered_harm = np.where(
            delivered, harm_if_delivered - cfg.label_uptake_reduction * mis_harm * labelled, 0.0
        )
        averted = harm_if_delivered - delivered_harm
        clean_lost = (removed & clean).astype(np.float64)
        wrongful = acts["wrongful"]
        cost = acts["cost"]
        penalty = cfg.wrongful_penalty * float(wrongful.sum()) + float(cost.sum())
        step_reward = (
            1.0
            - (
                float(delivered_harm.sum())
                + cfg.visibility_weight * float(clean_lost.sum())
                + penalty
            )
            / total
        )

        k = len(applied)
        rewards = np.zeros(k, np.float32)
        if k:
            gain = np.zeros(k)
            for arm_of in (impressions["post_choice"], impressions["author_choice"]):
                mine = arm_of >= 0
                gain += np.bincount(
                    arm_of[mine],
                    weights=(averted - cfg.visibility_weight * clean_lost)[mine],
                    minlength=k,
                )
            gain -= cfg.wrongful_penalty * wrongful + cost
            rewards = np.clip(0.5 + 0.5 * gain / cfg.credit_scale, 0.0, 1.0).astype(np.float32)
        mis_share = float((delivered & is_mis).sum()) / total
        tox_share = float((delivered & is_tox).sum()) / total
        clean_removed = float(clean_lost.sum()) / total
        wrongful = int(wrongful.sum())
        cost = float(cost.sum())
        n_actions = {a: 0.0 for a in MODERATION_ACTIONS}
        for i, count in zip(*np.unique(acts["name"], return_counts=True), strict=True):
            n_actions[MODERATION_ACTIONS[int(i)]] = float(count)
        scored = mod.scored
        objective = (
            float(averted.sum()) - cfg.visibility_weight * float(clean_lost.sum()) - penalty
        ) / total
        extra = {
            "objective": objective,
            "moderation_reward": float(step_reward),
            "misinformation_impression_share": mis_share,
            "toxic_impression_share": tox_share,
            "clean_removed_share": clean_removed,
            "wrongful_removals": float(wrongful),
            "wrongful_removals_total": float(mod.wrongful_total),
            "moderation_cost": cost,
            "suspended_users": float(mod.suspended(result.round).sum()),
            "classifier_flagged_share": float(mod.flag[:scored].mean()) if scored else 0.0,
            "label_reverted_beliefs": float(mod.last_reverted),
            **{f"actions_{a}": v for a, v in n_actions.items()},
        }
        self._step = extra[
            "moderation_reward" if self.config.reward.form == "paper" else "objective"
        ]
        return rewards, extra

    def _step_reward(self, slot_rewards: np.ndarray, applied: np.ndarray) -> float:
        """The declared objective (paper form: v0's ``moderation_reward``)."""
        return self._step
