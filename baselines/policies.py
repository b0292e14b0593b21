"""Non-learned reference policies over the arm contexts of the PolicySim envs.

All follow the bandit interface (``select(contexts, mask, budget)``, ``update``), so the
runner, the sweep and your own loops treat them like any bandit:

- **origin** — no intervention: every slot of the slate is left empty (the paper's
  "Origin" row; :class:`socialenv.envs.policy_registry.OriginPolicy`).
- **popularity** (Rec) — recommend the most engaged candidate posts: the arms with the
  highest ``log(1 + engagement)`` feature, i.e. the trending post pushed to as many
  candidate users as the budget allows (a headline-only recommender as a policy).
- **mmr** (Rec) — Maximal Marginal Relevance re-ranking (Carbonell & Goldstein 1998): picks
  arms greedily by ``λ·relevance − (1 − λ)·max cos(post, already picked posts)``;
  relevance mixes interest similarity, popularity and the author–receiver stance gap.
- **suppress_flagged** (Exposure) — a moderation heuristic: sets the users whose recent
  posts carried misinformation to the lowest exposure level, the others to full exposure.
- **opposite** / **agreeing** (Rec) — one-line rules: every slot gets an opposite-stance
  post / the post the receiver agrees with most.
- **fixed_level** (Exposure) — every sampled author at one level (``level=0``: mute all,
  ``level=1``: let all through).

:func:`headline_only_kwargs` gives the env arguments of a headline-only *feed* (the
platform's own recommender reduced to its trending channel), an environment-side baseline
that can be combined with any PolicySim-Exposure-v0 policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bandits._checks import check_choice, check_float
from bandits.base import Policy, ScoredPolicy, class_averaged, top_ranked
from policysim_infra.validation import check_keys
from socialenv.envs.exposure import EXPOSURE_ARM_FEATURES
from socialenv.envs.rec import REC_ARM_FEATURES

#: Scalar features at the end of a PolicySim-Rec-v0 / PolicySim-Exposure-v0 arm context.
REC_FEATURES: tuple[str, ...] = REC_ARM_FEATURES
EXPOSURE_FEATURES: tuple[str, ...] = EXPOSURE_ARM_FEATURES
ENV_KINDS = ("rec", "exposure")


@dataclass(frozen=True)
class ArmLayout:
    """Where things sit in an arm context of length D.

    Rec: ``[user context (2d) | post embedding (d) | REC_FEATURES]``, D = 3d + 18.
    Exposure: ``[user context (2d) | EXPOSURE_FEATURES]``, D = 2d + 11.
    """

    kind: str
    context_dim: int

    def __post_init__(self) -> None:
        if self.kind not in ENV_KINDS:
            raise ValueError(f"kind={self.kind!r} is not allowed: use one of {ENV_KINDS}")
        blocks = 3 if self.kind == "rec" else 2
        rest = self.context_dim - len(self.names)
        if rest <= 0 or rest % blocks:
            raise ValueError(
                f"context_dim={self.context_dim} does not fit a {self.kind} arm context "
                f"({blocks}·d + {len(self.names)})"
            )

    @property
    def names(self) -> tuple[str, ...]:
        return REC_FEATURES if self.kind == "rec" else EXPOSURE_FEATURES

    @property
    def latent_dim(self) -> int:
        return (self.context_dim - len(self.names)) // (3 if self.kind == "rec" else 2)

    def feature(self, name: str) -> int:
        """Column of the scalar feature ``name``."""
        if name not in self.names:
            raise ValueError(
                f"feature {name!r} is not allowed for {self.kind} arms: use one of {self.names}"
            )
        return self.context_dim - len(self.names) + self.names.index(name)

    @property
    def post_embedding(self) -> slice:
        """Columns of the post embedding (Rec only)."""
        if self.kind != "rec":
            raise ValueError("exposure arms have no post embedding")
        d = self.latent_dim
        return slice(2 * d, 3 * d)


def env_kind(env: Any) -> str:
    """The arm layout a PolicySim env (wrapped or not) declares, ``arm_kind``: "rec" or
    "exposure" (the kinds these policies read)."""
    base = getattr(env, "unwrapped", env)
    kind = getattr(base, "arm_kind", None)
    if kind not in ENV_KINDS:
        raise ValueError(
            f"{type(base).__name__} has arm_kind={kind!r}: these policies read the arms of "
            f"{ENV_KINDS} envs"
        )
    return kind


@dataclass(eq=False)
class _LayoutPolicy(Policy):
    """A policy that reads named features of the arm contexts."""

    kind: str = "rec"
    env_kinds: ClassVar[tuple[str, ...]] = ENV_KINDS

    def _check_hyperparameters(self) -> None:
        check_choice(self, "kind", self.env_kinds)
        self.layout = ArmLayout(self.kind, self.context_dim)

    def _update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards  # non-learned

    def _reset(self) -> None:
        pass

    def _state(self) -> dict[str, Any]:
        return {}

    def _load_state(self, learned: dict[str, Any]) -> None:
        del learned


@dataclass(eq=False)
class PopularityPolicy(_LayoutPolicy, ScoredPolicy):
    """Recommend the most engaged posts (score = ``log(1 + engagement)``, ties at random)."""

    name: ClassVar[str] = "popularity"
    env_kinds: ClassVar[tuple[str, ...]] = ("rec",)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return contexts[:, self.layout.feature("log_engagement")].astype(np.float64)


@dataclass(eq=False)
class MMRPolicy(_LayoutPolicy):
    """Maximal Marginal Relevance over (user, post) arms.

    relevance(a) = interest_weight·cos(user, post) + popularity_weight·log(1 + engagement)
    + stance_gap_weight·|S_u − S_v|/2, min–max scaled to [0, 1] over the candidates; then,
    greedily, pick argmax λ·relevance(a) − (1 − λ)·max_{b picked} cos(post_a, post_b).
    λ = ``trade_off`` (1 = pure relevance, 0 = pure diversity).
    """

    trade_off: float = 0.5
    interest_weight: float = 1.0
    popularity_weight: float = 0.0
    stance_gap_weight: float = 0.0

    name: ClassVar[str] = "mmr"
    env_kinds: ClassVar[tuple[str, ...]] = ("rec",)

    def _check_hyperparameters(self) -> None:
        super()._check_hyperparameters()
        check_float(self, "trade_off", minimum=0.0, maximum=1.0)
        for name in ("interest_weight", "popularity_weight", "stance_gap_weight"):
            check_float(self, name, minimum=0.0)

    def relevance(self, contexts: np.ndarray) -> np.ndarray:
        """(K,) relevance in [0, 1] of (K, D) contexts."""
        rel = self._raw_relevance(contexts)
        span = rel.max() - rel.min() if len(rel) else 0.0
        return (rel - rel.min()) / span if span > 0 else np.zeros_like(rel)

    def _raw_relevance(self, contexts: np.ndarray) -> np.ndarray:
        f = self.layout.feature
        return (
            self.interest_weight * contexts[:, f("interest_similarity")]
            + self.popularity_weight * contexts[:, f("log_engagement")]
            + self.stance_gap_weight * contexts[:, f("stance_divergence")]
        ).astype(np.float64)

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        jitter = self._rng.random(len(contexts)) * self._JITTER
        return self._greedy(contexts, budget, jitter)[0]

    def _exchangeable(self, contexts: np.ndarray) -> np.ndarray:
        """Arms with the same raw relevance and post embedding (e.g. two posts of one text
        offered to one user): the greedy reads nothing else."""
        key = np.column_stack(
            [
                self._raw_relevance(contexts),
                contexts[:, self.layout.post_embedding].astype(np.float64),
            ]
        )
        return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1)

    def _deterministic_select(self, contexts: np.ndarray, budget: int) -> np.ndarray | None:
        """The greedy picks, unless two arms that are not exchangeable come within the
        tie-breaking jitter of each other at some greedy step (then the jitter decides: None)."""
        picks, near_tie = self._greedy(
            contexts, budget, np.zeros(len(contexts)), self._exchangeable(contexts)
        )
        return None if near_tie else picks

    def _deterministic(self, contexts: np.ndarray) -> bool:
        return not self._greedy(contexts, len(contexts), np.zeros(len(contexts)))[1]

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        """Exact unless two arms that are not exchangeable come within the tie-breaking jitter
        of each other at some greedy step (then a Monte-Carlo estimate over the jitter):
        the greedy picks, each share of exchangeable arms spread evenly over them."""
        picks = self._deterministic_select(contexts, budget)
        if picks is None:
            return super()._inclusion(contexts, budget)
        probs = np.zeros(len(contexts))
        probs[picks] = 1.0
        probs = class_averaged(probs, self._exchangeable(contexts))
        return probs, "deterministic" if np.all((probs == 0) | (probs == 1)) else "exact"

    _JITTER: ClassVar[float] = 1e-9

    def _greedy(
        self,
        contexts: np.ndarray,
        budget: int,
        jitter: np.ndarray,
        labels: np.ndarray | None = None,
    ) -> tuple[np.ndarray, bool]:
        """The greedy picks with tie-breaking ``jitter`` (K,), and whether at any step the best
        score and the best of the arms with another label (K,; default: every arm its own)
        were, without jitter, within the jitter's range (plus a margin over float rounding:
        outside it no jitter can reorder them)."""
        rel = self.relevance(contexts)
        posts = contexts[:, self.layout.post_embedding].astype(np.float64)
        posts /= np.maximum(np.linalg.norm(posts, axis=1, keepdims=True), 1e-12)
        lam = self.trade_off
        max_sim = np.zeros(len(contexts))
        chosen = np.zeros(len(contexts), bool)
        picks = []
        near_tie = False
        for _ in range(budget):
            base = lam * rel - (1 - lam) * max_sim
            base[chosen] = -np.inf
            score = base + jitter
            score[chosen] = -np.inf
            pick = int(np.argmax(score))
            if not near_tie and np.count_nonzero(~chosen) > 1:
                if labels is None:
                    best_two = np.partition(base, -2)[-2:]
                    gap = best_two[1] - best_two[0]
                else:
                    best = int(np.argmax(base))
                    gap = base[best] - np.max(np.where(labels == labels[best], -np.inf, base))
                near_tie = bool(gap <= self._JITTER + 1e-12)
            picks.append(pick)
            chosen[pick] = True
            max_sim = np.maximum(max_sim, posts @ posts[pick])
        return np.asarray(picks, np.int64), near_tie


@dataclass(eq=False)
class SuppressFlaggedPolicy(_LayoutPolicy, ScoredPolicy):
    """Exposure heuristic: lowest level for users whose recent misinformation share m̂
    exceeds ``threshold`` (highest m̂ first), full exposure for everyone else.

    score(user, level) = m̂ − threshold at the lowest level, 0 at the highest, −1 otherwise.
    """

    threshold: float = 0.05

    name: ClassVar[str] = "suppress_flagged"
    env_kinds: ClassVar[tuple[str, ...]] = ("exposure",)
    # each user's arms come best score first (its best arm, then the rest by score)
    score_order_within_groups: ClassVar[bool] = True

    def _check_hyperparameters(self) -> None:
        super()._check_hyperparameters()
        check_float(self, "threshold", minimum=0.0, maximum=1.0)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        level = contexts[:, self.layout.feature("level")].astype(np.float64)
        flagged = contexts[:, self.layout.feature("flagged_share")].astype(np.float64)
        lowest, highest = np.isclose(level, level.min()), np.isclose(level, level.max())
        return np.where(lowest, flagged - self.threshold, np.where(highest, 0.0, -1.0))

    def _inclusion(self, contexts: np.ndarray, budget: int) -> tuple[np.ndarray, str]:
        # the per-user step below is not a plain top-k; unflagged users tie at score 0
        return Policy._inclusion(self, contexts, budget)

    def _select(self, contexts: np.ndarray, budget: int) -> np.ndarray:
        """Best arm per user first (arms of one user share the user-context columns; a second
        arm on the same user would not take effect), then the remaining arms by score."""
        order = top_ranked(self._scores(contexts), len(contexts), self._rng)
        _, user = np.unique(contexts[:, : 2 * self.layout.latent_dim], axis=0, return_inverse=True)
        _, first = np.unique(user.reshape(-1)[order], return_index=True)
        best_per_user = order[np.sort(first)]
        rest = order[~np.isin(order, best_per_user)]
        return np.concatenate([best_per_user, rest])[:budget]


@dataclass(eq=False)
class _FeatureRule(_LayoutPolicy, ScoredPolicy):
    """A one-line Rec rule: score each arm by one feature column of its context."""

    feature: ClassVar[str]
    env_kinds: ClassVar[tuple[str, ...]] = ("rec",)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return contexts[:, self.layout.feature(self.feature)].astype(np.float64)


@dataclass(eq=False)
class OppositeStancePolicy(_FeatureRule):
    """Rec rule: fill every slot with a post whose author holds the opposite discrete stance
    (score = ``cross_stance``, ties at random)."""

    name: ClassVar[str] = "opposite"
    feature: ClassVar[str] = "cross_stance"


@dataclass(eq=False)
class AgreeingPolicy(_FeatureRule):
    """Rec rule: fill every slot with the post the receiver agrees with most (score =
    ``agreement`` = S_v · s_p)."""

    name: ClassVar[str] = "agreeing"
    feature: ClassVar[str] = "agreement"


@dataclass(eq=False)
class FixedLevelPolicy(_LayoutPolicy, ScoredPolicy):
    """Exposure rule: set every sampled author to the level nearest ``level`` (0 = mute
    all, 1 = let all through)."""

    level: float = 0.0

    name: ClassVar[str] = "fixed_level"
    env_kinds: ClassVar[tuple[str, ...]] = ("exposure",)

    def _check_hyperparameters(self) -> None:
        super()._check_hyperparameters()
        check_float(self, "level", minimum=0.0, maximum=1.0)

    def _scores(self, contexts: np.ndarray) -> np.ndarray:
        return -np.abs(contexts[:, self.layout.feature("level")].astype(np.float64) - self.level)


#: Registry of the baseline policies (the bandits and "origin" come from the runner).
BASELINE_POLICIES: dict[str, type[_LayoutPolicy]] = {
    cls.name: cls
    for cls in (
        PopularityPolicy,
        MMRPolicy,
        SuppressFlaggedPolicy,
        OppositeStancePolicy,
        AgreeingPolicy,
        FixedLevelPolicy,
    )
}


def policy_names() -> tuple[str, ...]:
    """Every policy name :func:`make_policy` accepts: origin, the bandits, the baselines
    (the same names as ``policysim run``: the baselines register themselves there)."""
    from socialenv.envs.policy_registry import policy_names as runner_names

    return tuple(dict.fromkeys(runner_names() + tuple(BASELINE_POLICIES)))


def make_policy(name: str, env: Any, seed: int = 0, **hyperparameters: Any) -> Any:
    """A policy for the PolicySim ``env`` (wrapped or not): "origin", any bandit name
    (``bandits.POLICIES``) or a baseline (:data:`BASELINE_POLICIES`)."""
    base = getattr(env, "unwrapped", env)
    if name in BASELINE_POLICIES:
        cls = BASELINE_POLICIES[name]
        kind = env_kind(base)
        if kind not in cls.env_kinds:
            raise ValueError(f"policy {name!r} works on {cls.env_kinds} envs, not on a {kind} env")
        valid = [name for name in cls.hyperparameter_names() if name != "kind"]
        check_keys(
            hyperparameters, valid, "hyperparameters", f"hyper-parameter(s) of policy {name!r}"
        )
        return cls(context_dim=base.context_dim, seed=seed, kind=kind, **hyperparameters)
    from socialenv.envs.policy_registry import make_run_policy

    # origin, the bandits and the plugins' policies; a misspelt name gets did_you_mean there
    return make_run_policy(name, base, seed, **hyperparameters)


def headline_only_kwargs(slots: int = 12, pool: int = 20) -> dict[str, Any]:
    """Env keyword arguments for a headline-only feed: every feed slot comes from the
    trending channel (``slots`` posts sampled from the ``pool`` most engaged recent posts),
    no relational or personalized channel. A feed without recommended slots leaves a
    PolicySim-Rec-v0 policy nothing to fill (the env rejects any ``budget`` above
    ``recommender.personalized``), so this baseline combines with PolicySim-Exposure-v0
    policies."""
    return {
        "recommender": {
            "relational": 0,
            "personalized": 0,
            "headline": slots,
            "headline_pool": pool,
        }
    }


def _register_policies() -> None:
    """``policysim run --policy mmr`` and friends (see :mod:`policysim_infra.plugins`)."""
    from functools import partial

    from socialenv.envs.policy_registry import first_sentence, register_policy

    for name, cls in BASELINE_POLICIES.items():
        register_policy(name, partial(make_policy, name), first_sentence(cls.__doc__))


_register_policies()


__all__ = [
    "BASELINE_POLICIES",
    "ENV_KINDS",
    "EXPOSURE_FEATURES",
    "REC_FEATURES",
    "ArmLayout",
    "AgreeingPolicy",
    "FixedLevelPolicy",
    "MMRPolicy",
    "OppositeStancePolicy",
    "PopularityPolicy",
    "SuppressFlaggedPolicy",
    "env_kind",
    "headline_only_kwargs",
    "make_policy",
    "policy_names",
]
