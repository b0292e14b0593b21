"""HiSim opinion-dynamics models as the users' stance dynamics.

The three classic agent-based models (ABMs) that HiSim compares LLM agents against, with
attitudes a ∈ [−1, 1] (equations and defaults in ``shared/PAPER.md``):

- **Bounded confidence** (Deffuant–Weisbuch): if |a_j − a_i| < ε then a_i += μ·(a_j − a_i).
- **Lorenz**: Δa_i = α·pol·sim·[τ·(a_j − a_i) + (1 − τ)·a_j], with
  sim = λᵏ / (λᵏ + |a_j − a_i|ᵏ) and pol = (M² − a_i²) / M².
- **Relative agreement** (Deffuant et al. 2002): every user also has an uncertainty u_i;
  the overlap of [a_i ± u_i] and [a_j ± u_j] is h; if h / u_j > 1 then, with
  s = h / u_j − 1, a_i += μ·s·(a_j − a_i) and u_i += μ·s·(u_j − u_i).

:class:`OpinionDynamicsBrain` plugs one of them into a PolicySim population: behaviour
(who reacts to what, posting, following, toxicity, misinformation) stays the surrogate's,
but the opinion update is replaced by the ABM rule applied over the users each user
interacted with this round (the authors of the posts it reacted to, or — with
``interaction="feed"`` — the authors of every post in its feed). Everything is vectorized
over the round's (user, partner) pairs; there is no per-agent Python loop.

    from baselines import OpinionDynamicsBrain
    env = gym.make("PolicySim-Rec-v0", users=OpinionDynamicsBrain("lorenz"))

HiSim's macro metrics, :func:`bias` (mean attitude) and :func:`diversity` (variance), are
defined in :mod:`socialenv.core.metrics` and re-exported here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np

from agent_models.base import Brain
from agent_models.surrogate import SurrogateBrain, SurrogateConfig
from agent_models.types import PostColumns, RoundInput, RoundOutput, UserColumns
from policysim_infra.validation import check_keys, did_you_mean
from socialenv.core.metrics import bias, diversity  # noqa: F401 - HiSim's metrics, re-exported


def _positive(
    name: str, value: float, *, maximum: float | None = None, strict: bool = False
) -> None:
    ok = np.isfinite(value) and (value > 0 if strict else value >= 0)
    if maximum is not None:
        ok = ok and value <= maximum
    if not ok:
        bound = ("> 0" if strict else ">= 0") + (
            f" and <= {maximum}" if maximum is not None else ""
        )
        raise ValueError(f"{name}={value!r} is not allowed: a number {bound}")


@dataclass(frozen=True)
class OpinionModel(ABC):
    """Base of the ABM rules: one vectorized update for E (user, partner) pairs."""

    name: ClassVar[str] = ""
    #: Whether the model carries a per-user uncertainty (relative agreement).
    uses_uncertainty: ClassVar[bool] = False

    @abstractmethod
    def delta(
        self, a_i: np.ndarray, a_j: np.ndarray, u_i: np.ndarray, u_j: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(E,) attitude changes of i and (E,) uncertainty changes of i, for attitudes
        a_i, a_j and uncertainties u_i, u_j, all (E,) float64."""


@dataclass(frozen=True)
class BoundedConfidence(OpinionModel):
    """a_i += μ·(a_j − a_i) when |a_j − a_i| < ε (HiSim defaults μ = 0.3, ε = 0.1)."""

    mu: float = 0.3
    epsilon: float = 0.1
    name: ClassVar[str] = "bounded_confidence"

    def __post_init__(self) -> None:
        _positive("bounded_confidence.mu", self.mu, maximum=1.0)
        _positive("bounded_confidence.epsilon", self.epsilon, maximum=2.0, strict=True)

    def delta(self, a_i, a_j, u_i, u_j):
        gap = a_j - a_i
        return np.where(np.abs(gap) < self.epsilon, self.mu * gap, 0.0), np.zeros_like(a_i)


@dataclass(frozen=True)
class Lorenz(OpinionModel):
    """Δa_i = α·pol·sim·[τ(a_j − a_i) + (1 − τ)a_j], sim = λᵏ/(λᵏ + |a_j − a_i|ᵏ),
    pol = (M² − a_i²)/M² (HiSim defaults α 0.5, λ 1, k 1, M 1, τ 0.5)."""

    alpha: float = 0.5
    lam: float = 1.0
    k: float = 1.0
    M: float = 1.0
    tau: float = 0.5
    name: ClassVar[str] = "lorenz"

    def __post_init__(self) -> None:
        _positive("lorenz.alpha", self.alpha, maximum=1.0)
        _positive("lorenz.lam", self.lam, strict=True)
        _positive("lorenz.k", self.k, strict=True)
        _positive("lorenz.M", self.M, strict=True)
        _positive("lorenz.tau", self.tau, maximum=1.0)

    def delta(self, a_i, a_j, u_i, u_j):
        lam_k = self.lam**self.k
        sim = lam_k / (lam_k + np.abs(a_j - a_i) ** self.k)
        pol = (self.M**2 - a_i**2) / self.M**2
        change = self.alpha * pol * sim * (self.tau * (a_j - a_i) + (1 - self.tau) * a_j)
        return change, np.zeros_like(a_i)


@dataclass(frozen=True)
class RelativeAgreement(OpinionModel):
    """Overlap h of [a_i ± u_i] and [a_j ± u_j]; if h/u_j > 1, s = h/u_j − 1 and
    a_i += μ·s·(a_j − a_i), u_i += μ·s·(u_j − u_i) (HiSim defaults μ 0.5, u₀ 0.4)."""

    mu: float = 0.5
    u0: float = 0.4
    name: ClassVar[str] = "relative_agreement"
    uses_uncertainty: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive("relative_agreement.mu", self.mu, maximum=1.0)
        _positive("relative_agreement.u0", self.u0, strict=True)

    def delta(self, a_i, a_j, u_i, u_j):
        h = np.minimum(a_i + u_i, a_j + u_j) - np.maximum(a_i - u_i, a_j - u_j)
        ratio = h / np.maximum(u_j, 1e-12)
        s = np.where(ratio > 1.0, ratio - 1.0, 0.0)
        return self.mu * s * (a_j - a_i), self.mu * s * (u_j - u_i)


#: Registry: model name -> class.
OPINION_MODELS: dict[str, type[OpinionModel]] = {
    cls.name: cls for cls in (BoundedConfidence, Lorenz, RelativeAgreement)
}
AGGREGATIONS = ("sample", "mean")
INTERACTIONS = ("reactions", "feed")


def make_opinion_model(name: str, **params: Any) -> OpinionModel:
    """Build the ABM rule ``name`` (one of :data:`OPINION_MODELS`) with its parameters."""
    if name not in OPINION_MODELS:
        raise ValueError(
            f"opinion model {name!r} is not allowed: use one of {sorted(OPINION_MODELS)}"
            f"{did_you_mean(name, OPINION_MODELS)}"
        )
    cls = OPINION_MODELS[name]
    check_keys(
        params,
        sorted(f.name for f in fields(cls)),
        "params",
        f"parameter(s) of opinion model {name!r}",
    )
    return cls(**params)


def abm_step(
    model: OpinionModel,
    attitude: np.ndarray,
    uncertainty: np.ndarray,
    user: np.ndarray,
    partner: np.ndarray,
    rng: np.random.Generator,
    aggregate: str = "sample",
) -> tuple[np.ndarray, np.ndarray]:
    """One synchronous ABM update of all users from their interaction pairs.

    Args:
        model: the rule.
        attitude: (N,) attitudes a in [−1, 1] at the start of the round.
        uncertainty: (N,) uncertainties u (used by relative agreement only).
        user, partner: (E,) int64 pairs: ``user[e]`` interacted with ``partner[e]``.
        rng: draws the partner of each user when ``aggregate="sample"``.
        aggregate: ``"sample"`` — each user is influenced by one partner drawn uniformly
            from its pairs (the classic pairwise ABM step); ``"mean"`` — by the mean of the
            changes over all its pairs.

    Returns:
        (N,) new attitudes clipped to [−1, 1] and (N,) new uncertainties (> 0).
    """
    if aggregate not in AGGREGATIONS:
        raise ValueError(f"aggregate={aggregate!r} is not allowed: use one of {AGGREGATIONS}")
    n = len(attitude)
    a = attitude.astype(np.float64)
    u = uncertainty.astype(np.float64)
    keep = user != partner
    user, partner = user[keep], partner[keep]
    if len(user) == 0:
        return np.clip(a, -1, 1), u
    if aggregate == "sample":
        order = rng.permutation(len(user))
        _, first = np.unique(user[order], return_index=True)
        pick = order[first]
        user, partner = user[pick], partner[pick]
    da, du = model.delta(a[user], a[partner], u[user], u[partner])
    count = np.bincount(user, minlength=n).astype(np.float64)
    touched = count > 0
    new_a, new_u = a.copy(), u.copy()
    new_a[touched] += np.bincount(user, weights=da, minlength=n)[touched] / count[touched]
    new_u[touched] += np.bincount(user, weights=du, minlength=n)[touched] / count[touched]
    return np.clip(new_a, -1.0, 1.0), np.maximum(new_u, 1e-6)


class OpinionDynamicsBrain(SurrogateBrain):
    """Surrogate behaviour with a HiSim ABM as the stance dynamics.

    Args:
        model: an :class:`OpinionModel` or a name in :data:`OPINION_MODELS`
            ("bounded_confidence", "lorenz", "relative_agreement").
        aggregate: see :func:`abm_step` ("sample" default, or "mean").
        interaction: ``"reactions"`` (default): partners are the authors of the posts a user
            reacted to (liked, disliked, retweeted, replied); ``"feed"``: the authors of every
            post in its feed (exposure counts as interaction).
        news_sensitivity: news shocks move every attitude by
            ``news_sensitivity·shift·(0.5 + susceptibility)`` as in the surrogate; 0 (default)
            keeps the pure ABM.
        surrogate: the behaviour model's parameters.
        **params: parameters of the model when ``model`` is a name (e.g. ``epsilon=0.3``).

    Each round the attitudes of all N users are reported as the latent ``opinion`` and their
    discretization (±1 beyond ±1/3, else 0) as the discrete stance; the env smooths it with
    the paper's EMA (Eq. 2), so ``stance_mean`` / ``stance_std`` stay comparable with the
    other populations.
    """

    def __init__(
        self,
        model: OpinionModel | str = "bounded_confidence",
        *,
        aggregate: str = "sample",
        interaction: str = "reactions",
        news_sensitivity: float = 0.0,
        surrogate: SurrogateConfig | dict[str, Any] | None = None,
        **params: Any,
    ) -> None:
        config = (
            surrogate
            if isinstance(surrogate, SurrogateConfig) or surrogate is None
            else SurrogateConfig(**surrogate)
        )
        super().__init__(config)
        if isinstance(model, str):
            model = make_opinion_model(model, **params)
        elif params:
            raise ValueError(
                "model parameters go to the OpinionModel instance, not to OpinionDynamicsBrain"
            )
        if not isinstance(model, OpinionModel):
            raise ValueError(
                f"model={model!r} is not allowed: an OpinionModel or one of {sorted(OPINION_MODELS)}"
            )
        if aggregate not in AGGREGATIONS:
            raise ValueError(f"aggregate={aggregate!r} is not allowed: use one of {AGGREGATIONS}")
        if interaction not in INTERACTIONS:
            raise ValueError(
                f"interaction={interaction!r} is not allowed: use one of {INTERACTIONS}"
            )
        _positive("news_sensitivity", news_sensitivity)
        self.model = model
        self.aggregate = aggregate
        self.interaction = interaction
        self.news_sensitivity = float(news_sensitivity)
        self.uncertainty: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"OpinionDynamicsBrain({self.model!r}, aggregate={self.aggregate!r}, interaction={self.interaction!r})"

    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> None:
        super().reset(users, posts, seed)
        u0 = getattr(self.model, "u0", 0.4)
        self.uncertainty = np.full(len(users), u0, np.float64)
        return None

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["abm"] = {
            "model": self.model.name,
            "params": asdict(self.model),
            "uncertainty": None if self.uncertainty is None else self.uncertainty.copy(),
        }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        abm = state["abm"]
        self.model = make_opinion_model(abm["model"], **abm["params"])
        self.uncertainty = None if abm["uncertainty"] is None else abm["uncertainty"].copy()

    def interaction_pairs(
        self, round_input: RoundInput, out: RoundOutput
    ) -> tuple[np.ndarray, np.ndarray]:
        """(E,) users and (E,) partners of this round's interactions."""
        posts = round_input.posts
        if self.interaction == "reactions":
            return out.react_user, posts.author[out.react_post]
        valid = round_input.feed >= 0
        rows, cols = np.nonzero(valid)
        return round_input.active[rows], posts.author[round_input.feed[rows, cols]]

    def act(self, round_input: RoundInput) -> RoundOutput:
        out = super().act(round_input)
        if self.uncertainty is None:
            raise RuntimeError("OpinionDynamicsBrain.act called before reset")
        users = round_input.users
        user, partner = self.interaction_pairs(round_input, out)
        new_opinion, self.uncertainty = abm_step(
            self.model,
            users.opinion,
            self.uncertainty,
            user,
            partner,
            round_input.rng,
            self.aggregate,
        )
        if self.news_sensitivity > 0:
            for event in round_input.news:
                new_opinion = new_opinion + self.news_sensitivity * event.shift * (
                    0.5 + users.susceptibility
                )
            new_opinion = np.clip(new_opinion, -1.0, 1.0)
        new_opinion = new_opinion.astype(np.float32)
        changed = np.flatnonzero(new_opinion != users.opinion)
        n = len(users)
        out.opinion_user = changed.astype(np.int64)
        out.opinion_value = new_opinion[changed]
        out.stance_user = np.arange(n, dtype=np.int64)
        out.stance_discrete = np.where(
            new_opinion > 1 / 3, 1, np.where(new_opinion < -1 / 3, -1, 0)
        ).astype(np.int8)
        out.stats = {**out.stats, "abm_pairs": float(len(user))}
        return out


#: Population names accepted by :func:`make_population` (besides a Brain instance).
POPULATIONS: tuple[str, ...] = ("surrogate", "llm", *OPINION_MODELS)


def make_population(spec: str | Brain, **params: Any) -> str | Brain:
    """Resolve a population name for the env's ``users=`` argument.

    ``"surrogate"`` and ``"llm"`` are returned unchanged (the env builds them from its
    ``surrogate=`` / ``llm=`` arguments); an ABM name returns a new
    :class:`OpinionDynamicsBrain` built with ``params``; a Brain instance is returned as is.
    A fresh brain per env matters: a brain keeps per-episode state, so envs must not share one.
    """
    if isinstance(spec, Brain):
        return spec
    if spec in ("surrogate", "llm"):
        if params:
            raise ValueError(f"users={spec!r} takes its parameters from the env's {spec}= argument")
        return spec
    if spec in OPINION_MODELS:
        return OpinionDynamicsBrain(spec, **params)
    raise ValueError(f"users={spec!r} is not allowed: use one of {POPULATIONS} or a Brain instance")


def _register_populations() -> None:
    """``gym.make(..., users="lorenz")``: each ABM name builds a fresh brain that uses the
    env's ``surrogate=`` parameters for behaviour (see :mod:`policysim_infra.plugins`)."""
    from functools import partial

    from agent_models.factory import register_population

    def build(name: str, *, llm: Any = None, surrogate: Any = None) -> OpinionDynamicsBrain:
        del llm
        return OpinionDynamicsBrain(name, surrogate=surrogate)

    for name in OPINION_MODELS:
        register_population(name, partial(build, name))


_register_populations()
