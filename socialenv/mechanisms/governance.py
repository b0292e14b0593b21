"""Governance state of the platform: deleted, labelled and downranked posts, suspended users,
and the noisy harm classifier the platform sees. Held by ``PolicySim-Moderation-v0``'s
lever (:class:`socialenv.envs.moderation.ModerationLever`), whose simulation hooks call:

- ``suspended(t)``: (N,) mask of users who cannot act in round t (``Lever.barred``);
- ``filter_feeds(...)``: drops impressions of deleted posts and of suspended authors' posts,
  and keeps labelled / downranked posts with their reach multiplier (``Lever.filter_feeds``);
- ``adjust_output(...)`` (``Lever.adjust_output``): a warning label lowers belief uptake:
  a user newly misinformed in the round reverts with probability
  ``label_uptake_reduction`` × the share of the misinformation impressions it received
  that carried a label.

All state is plain NumPy arrays (checkpoint-friendly).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from agent_models.types import PostKind, RoundOutput

#: Governance actions, in the order of the arms of each target post.
MODERATION_ACTIONS: tuple[str, ...] = ("delete", "suspend", "label", "downrank")


def _check(condition: bool, name: str, allowed: str, value: Any) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class ModerationConfig:
    """Governance levers, their costs and the classifier (``gym.make(..., moderation={...})``).

    Attributes:
        targets: candidate posts per round; arms = targets × len(actions).
        actions: the governance actions offered (a subset of MODERATION_ACTIONS).
        flagged_share: share of the candidate posts drawn from the classifier's flagged recent
            posts (the rest: recent posts at random, weighted by engagement).
        suspend_rounds: k, rounds a suspension lasts (the author cannot act and their posts
            are hidden).
        downrank_rounds: rounds a downrank lasts.
        label_reach: reach multiplier of a labelled post (share of its impressions kept).
        label_uptake_reduction: how much a label lowers belief uptake (see module docstring).
        downrank_reach: reach multiplier of a downranked post.
        cost: cost of each action, in impression-equivalents (default delete 1, suspend 3,
            label 0.2, downrank 0.5).
        precision, recall: of the harm classifier; its false-positive rate is set each round
            so that, at that round's base rate of harmful posts, the flags have this precision.
        toxic_threshold: a post is toxic (hence harmful) at toxicity >= this; harmful = carries
            misinformation or is toxic. The truth is hidden from the platform.
        misinformation_weight, toxicity_weight: harm of one delivered misinformation / toxic
            impression (a labelled misinformation impression counts
            ``1 − label_uptake_reduction`` of it).
        visibility_weight: harm of one clean impression the decisions removed.
        wrongful_penalty: harm of one wrongful removal (delete or suspend of a post that was
            not harmful), in impression-equivalents.
        credit_scale: impression-equivalents that move an arm's credit from 0.5 to 1 (or 0).

    All harms are in impression-equivalents; the step reward divides their sum by the round's
    impressions (see ``PolicySim-Moderation-v0``).
    """

    targets: int = 30
    actions: tuple[str, ...] = MODERATION_ACTIONS
    flagged_share: float = 0.5
    suspend_rounds: int = 2
    downrank_rounds: int = 3
    label_reach: float = 0.8
    label_uptake_reduction: float = 0.5
    downrank_reach: float = 0.3
    cost: dict[str, float] | None = None
    precision: float = 0.8
    recall: float = 0.7
    toxic_threshold: float = 0.15
    misinformation_weight: float = 1.0
    toxicity_weight: float = 1.0
    visibility_weight: float = 0.5
    wrongful_penalty: float = 10.0
    credit_scale: float = 20.0

    def __post_init__(self) -> None:
        _check(
            isinstance(self.targets, int) and self.targets >= 1,
            "moderation.targets",
            "an integer >= 1",
            self.targets,
        )
        acts = tuple(self.actions)
        _check(
            len(acts) >= 1 and len(set(acts)) == len(acts) and set(acts) <= set(MODERATION_ACTIONS),
            "moderation.actions",
            f"distinct names among {MODERATION_ACTIONS}",
            self.actions,
        )
        object.__setattr__(self, "actions", acts)
        for name in ("suspend_rounds", "downrank_rounds"):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and value >= 1,
                f"moderation.{name}",
                "an integer >= 1",
                value,
            )
        for name in (
            "flagged_share",
            "label_reach",
            "label_uptake_reduction",
            "downrank_reach",
            "toxic_threshold",
            "misinformation_weight",
            "toxicity_weight",
            "visibility_weight",
        ):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and 0 <= value <= 1,
                f"moderation.{name}",
                "a number in [0, 1]",
                value,
            )
        for name in ("precision", "recall"):
            value = getattr(self, name)
            _check(
                isinstance(value, int | float) and 0 < value <= 1,
                f"moderation.{name}",
                "a number in (0, 1]",
                value,
            )
        _check(
            isinstance(self.wrongful_penalty, int | float) and 0 <= self.wrongful_penalty <= 1000,
            "moderation.wrongful_penalty",
            "a number in [0, 1000]",
            self.wrongful_penalty,
        )
        _check(
            isinstance(self.credit_scale, int | float) and 0 < self.credit_scale <= 1e6,
            "moderation.credit_scale",
            "a number > 0",
            self.credit_scale,
        )
        cost = {**DEFAULT_COSTS, **(self.cost or {})}
        unknown = set(cost) - set(MODERATION_ACTIONS)
        _check(not unknown, "moderation.cost", f"keys among {MODERATION_ACTIONS}", sorted(unknown))
        for key, value in cost.items():
            _check(
                isinstance(value, int | float) and 0 <= value <= 1000,
                f"moderation.cost[{key!r}]",
                "in [0, 1000]",
                value,
            )
        object.__setattr__(self, "cost", cost)

    @classmethod
    def from_spec(cls, spec: Any) -> ModerationConfig:
        if spec is None:
            return cls()
        if isinstance(spec, cls):
            return spec
        _check(isinstance(spec, dict), "moderation", "None, a dict or a ModerationConfig", spec)
        allowed = {f.name for f in fields(cls)}
        unknown = set(spec) - allowed
        _check(not unknown, "moderation", f"keys among {sorted(allowed)}", sorted(unknown))
        return cls(**spec)


#: Default cost of each action per use, in impression-equivalents.
DEFAULT_COSTS: dict[str, float] = {"delete": 1.0, "suspend": 3.0, "label": 0.2, "downrank": 0.5}


class ModerationState:
    """What the platform has decided so far, and the classifier's flags.

    Arrays (P posts, N users): ``deleted`` (P,) bool, ``labelled`` (P,) bool,
    ``downranked_until`` (P,) int32 (downranked while round < value), ``flag`` (P,) bool
    classifier output (valid for the first ``scored`` posts), ``suspended_until`` (N,) int32.
    """

    def __init__(self, config: ModerationConfig, num_users: int) -> None:
        self.config = config
        self.reset(num_users)

    def reset(self, num_users: int) -> None:
        """No decision in force, nothing scored."""
        self.suspended_until = np.zeros(num_users, np.int32)
        self.deleted = np.zeros(0, bool)
        self.labelled = np.zeros(0, bool)
        self.downranked_until = np.zeros(0, np.int32)
        self.flag = np.zeros(0, bool)
        self.scored = 0
        #: wrongful removals (delete/suspend of a post that was not harmful) this episode
        self.wrongful_total = 0
        #: the last round's pre-moderation impressions: user, post, removed by moderation,
        #: delivered with a label
        self.last_user = np.zeros(0, np.int64)
        self.last_post = np.zeros(0, np.int64)
        self.last_removed = np.zeros(0, bool)
        self.last_labelled = np.zeros(0, bool)
        self.last_reverted = 0

    def grow(self, num_posts: int) -> None:
        """Extend the per-post arrays to ``num_posts`` posts."""
        extra = num_posts - len(self.deleted)
        if extra > 0:
            self.deleted = np.concatenate([self.deleted, np.zeros(extra, bool)])
            self.labelled = np.concatenate([self.labelled, np.zeros(extra, bool)])
            self.downranked_until = np.concatenate(
                [self.downranked_until, np.zeros(extra, np.int32)]
            )
            self.flag = np.concatenate([self.flag, np.zeros(extra, bool)])

    def harmful(self, posts: Any, ids: np.ndarray) -> np.ndarray:
        """The hidden truth for posts ``ids``: misinformation or toxicity >= threshold."""
        return posts.misinfo[ids] | (posts.toxicity[ids] >= self.config.toxic_threshold)

    def score(self, posts: Any, rng: np.random.Generator) -> None:
        """Run the noisy classifier on the posts not yet scored."""
        p = len(posts)
        self.grow(p)
        lo = self.scored
        if p <= lo:
            return
        ids = np.arange(lo, p)
        truth = self.harmful(posts, ids)
        base = float(truth.mean())
        cfg = self.config
        if base >= 1.0 or base <= 0.0:
            fpr = 1.0 - cfg.precision if base <= 0.0 else 0.0
        else:
            fpr = min(1.0, cfg.recall * base * (1 - cfg.precision) / (cfg.precision * (1 - base)))
        u = rng.random(len(ids))
        self.flag[lo:p] = np.where(truth, u < cfg.recall, u < fpr)
        self.scored = p

    def suspended(self, round_: int) -> np.ndarray:
        """(N,) bool: users suspended in ``round_``."""
        return self.suspended_until > round_

    def reach(self, posts: Any, ids: np.ndarray, round_: int) -> np.ndarray:
        """Reach multiplier in [0, 1] of posts ``ids`` (any shape) in ``round_``; a retweet
        inherits its original's deletion and label."""
        self.grow(len(posts))
        cfg = self.config
        parent = posts.parent[ids]
        original = np.where((posts.kind[ids] == int(PostKind.RETWEET)) & (parent >= 0), parent, ids)
        gone = (
            self.deleted[ids] | self.deleted[original] | self.suspended(round_)[posts.author[ids]]
        )
        reach = np.where(gone, 0.0, 1.0)
        reach = np.where(
            self.labelled[ids] | self.labelled[original], reach * cfg.label_reach, reach
        )
        return np.where(self.downranked_until[ids] > round_, reach * cfg.downrank_reach, reach)

    def filter_feeds(
        self, feed: np.ndarray, owner: np.ndarray, posts: Any, round_: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Apply the decisions in force to ``feed`` (B, F) (owner (B, F) user ids): a slot is
        kept with its post's reach; records the round's impressions for the rewards."""
        valid = feed >= 0
        ids = feed[valid]
        reach = self.reach(posts, ids, round_)
        removed = rng.random(len(ids)) >= reach
        self.last_user, self.last_post, self.last_removed = owner[valid].copy(), ids.copy(), removed
        parent = posts.parent[ids]
        original = np.where((posts.kind[ids] == int(PostKind.RETWEET)) & (parent >= 0), parent, ids)
        self.last_labelled = ~removed & (self.labelled[ids] | self.labelled[original])
        out = feed.copy()
        out[valid] = np.where(removed, -1, ids)
        return out

    def adjust_output(
        self,
        output: RoundOutput,
        misinformed_before: np.ndarray,
        posts: Any,
        rng: np.random.Generator,
    ) -> None:
        """Lower belief uptake from labelled misinformation (module docstring), in place."""
        self.last_reverted = 0
        strength = self.config.label_uptake_reduction
        if strength == 0 or not self.last_labelled.any() or len(output.misinformed_user) == 0:
            return
        n = len(misinformed_before)
        delivered = ~self.last_removed & posts.misinfo[self.last_post]
        seen = np.bincount(self.last_user[delivered], minlength=n)
        labelled = np.bincount(self.last_user[delivered & self.last_labelled], minlength=n)
        user = output.misinformed_user
        newly = output.misinformed_value & ~misinformed_before[user]
        share = labelled[user] / np.maximum(seen[user], 1)
        revert = newly & (rng.random(len(user)) < strength * share)
        output.misinformed_value = np.where(revert, False, output.misinformed_value)
        self.last_reverted = int(revert.sum())

    def state_dict(self) -> dict[str, Any]:
        return {
            k: (v.copy() if isinstance(v, np.ndarray) else v)
            for k, v in vars(self).items()
            if k != "config"
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value.copy() if isinstance(value, np.ndarray) else value)
