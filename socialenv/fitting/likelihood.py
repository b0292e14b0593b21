"""Maximum-likelihood fit of the surrogate's parameters to a behaviour trace (`policysim fit`).

The likelihood mirrors :class:`agent_models.surrogate.SurrogateBrain` block by block; the
blocks share no parameter, so each is fitted on its own (scipy optimizers, gradients and
Hessians from torch autograd) and its standard errors come from the inverse observed Fisher
information (the Hessian of the negative log-likelihood at the optimum):

- **reactions**: per shown impression, four independent Bernoulli draws (like, dislike,
  retweet, reply) with the surrogate's log-odds in interest similarity, stance agreement, gap,
  channel attention and the user's reply-frequency offset: a logistic model with shared
  coefficients (10 parameters), under a weak N(start, 10²) prior that keeps them finite when
  the data separate (a kind never chosen: status ``boundary``);
- **posting**: per active user-round, posting with probability clip(post_rate·2r/(1+r));
- **stance noise**: the stance of a post or a non-retweet reaction is clip(a_u + σ·N(0, 1)), a
  censored normal (Tobit) likelihood in σ = ``stance_noise``;
- **reply toxicity** and **post toxicity**: clip(μ·U(0.5, 1.5)) has a support that moves with
  the parameters (no regular likelihood), so these are fitted by least squares on the exact
  conditional mean E[clip(μ·U)] (a quasi-likelihood), with sandwich standard errors;
- **follow / unfollow**: one Bernoulli per positive / hostile reaction;
- **misinformation**: adoption σ-curve in the misinformation posts seen, recovery, and the
  share of a believer's posts that carry it;
- **opinion update**: the surrogate's update is deterministic given the reactions, so its
  rates are fitted by least squares on the opinion trajectories; the thresholds
  (``confidence_bound``, ``backfire_gap``) are identified only up to the interval between
  neighbouring observed stance gaps, and are reported as that interval.

Parameters the trace cannot inform (e.g. ``promoted_attention`` without policy-filled
slots, ``post_noise`` — the trace keeps no embeddings) keep their starting value and are
reported as not identified.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.surrogate import SurrogateConfig
from agent_models.types import Behaviour, FeedChannel
from socialenv.fitting.estimate import Estimate, Lookup, hostile_mask, inverse, population_column
from socialenv.fitting.trace import Trace

FIT_FORMAT = "policysim-surrogate-fit"
FIT_VERSION = 1

REACTION_PARAMS = (
    "like_bias",
    "dislike_bias",
    "retweet_bias",
    "reply_bias",
    "interest_weight",
    "agreement_weight",
    "retweet_agreement_weight",
    "reply_gap_weight",
    "recommended_attention",
    "promoted_attention",
)
#: Parameters no block of the likelihood reaches (the trace holds no embeddings / no hidden shock).
NOT_IN_TRACE = {
    "post_noise": "the trace keeps no post embeddings",
    "news_sensitivity": "news shocks are hidden state; the trace records the attitude they produce, not the shock",
    "news_decay": "news shocks are hidden state",
    "toxic_threshold": "a structural threshold (defines hostile replies); held at its starting value",
}


@dataclass
class FitResult:
    estimates: dict[str, Estimate]
    blocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float = 0.0

    def config(self) -> SurrogateConfig:
        """The fitted surrogate (every estimate clipped into SurrogateConfig's allowed range)."""
        return config_from_values({k: e.value for k, e in self.estimates.items()})

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FIT_FORMAT,
            "version": FIT_VERSION,
            "parameters": {k: e.to_json() for k, e in self.estimates.items()},
            "blocks": self.blocks,
            "findings": self.findings,
            "provenance": self.provenance,
            "cpu_seconds": self.cpu_seconds,
        }

    def write(self, path: str | Path) -> Path:
        from policysim_infra.redaction import to_json

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_json(self.to_json(), indent=2))
        return path


def config_from_values(values: dict[str, float]) -> SurrogateConfig:
    from agent_models.surrogate_file import clip_to_limits

    return SurrogateConfig(**clip_to_limits(values))


# ---------------------------------------------------------------------- shared machinery
def _torch():
    import torch

    return torch


def _ml(
    nll: Any, x0: np.ndarray, bounds: list[tuple[float | None, float | None]]
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Minimize ``nll`` (a torch function of a float64 vector) with L-BFGS-B; returns the
    optimum, the inverse Hessian (of the observed Fisher information), the minimum and the
    Hessian."""
    from scipy.optimize import minimize

    torch = _torch()

    def value_grad(x: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        v = nll(t)
        (g,) = torch.autograd.grad(v, t)
        return float(v.detach()), g.numpy().copy()

    res = minimize(
        value_grad,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 500, "ftol": 1e-14, "gtol": 1e-9},
    )
    x = res.x
    hess = torch.autograd.functional.hessian(nll, torch.tensor(x, dtype=torch.float64)).numpy()
    return x, inverse(hess), float(res.fun), hess


def _weak_directions(hessian: np.ndarray, tolerance: float = 1e-9) -> list[int]:
    """Indices of the parameters that load on a (near-)null direction of ``hessian``."""
    if not np.all(np.isfinite(hessian)):
        return list(range(len(hessian)))
    values, vectors = np.linalg.eigh((hessian + hessian.T) / 2)
    null = values <= tolerance * max(values.max(initial=0.0), 1e-300)
    if not null.any():
        return []
    return sorted({int(i) for i in np.flatnonzero((np.abs(vectors[:, null]) > 0.1).any(axis=1))})


def _se(cov: np.ndarray, i: int) -> float | None:
    v = cov[i, i]
    return float(np.sqrt(v)) if np.isfinite(v) and v > 0 else None


# ---------------------------------------------------------------------- data of each block
@dataclass
class ReactionData:
    """Design of the reaction block: per impression the features and the four outcomes."""

    similarity: np.ndarray
    agree: np.ndarray
    gap: np.ndarray
    recommended: np.ndarray
    injected: np.ndarray
    reply_offset: np.ndarray
    outcome: np.ndarray  # (M, 4) bool: like, dislike, retweet, reply

    def __len__(self) -> int:
        return len(self.similarity)


KIND_ORDER = (Behaviour.LIKE, Behaviour.DISLIKE, Behaviour.RETWEET, Behaviour.REPLY)


def reaction_data(trace: Trace, lookup: Lookup) -> ReactionData:
    imp = trace["impressions"]
    attitude = lookup.column("attitude", imp["episode"], imp["round"], imp["user"]).astype(
        np.float64
    )
    stance = imp["post_stance"].astype(np.float64)
    channel = imp["channel"]
    reply_frequency = population_column(trace, "reply_frequency", imp["episode"], imp["user"])
    outcome = np.zeros((len(stance), 4), bool)
    react = trace["reactions"]
    linked = react["impression"] >= 0
    for j, kind in enumerate(KIND_ORDER):
        rows = react["impression"][linked & (react["kind"] == int(kind))]
        outcome[rows, j] = True
    return ReactionData(
        similarity=imp["similarity"].astype(np.float64),
        agree=attitude * stance,
        gap=np.abs(attitude - stance) / 2,
        recommended=np.isin(
            channel, (int(FeedChannel.PERSONALIZED), int(FeedChannel.INJECTED))
        ).astype(np.float64),
        injected=(channel == int(FeedChannel.INJECTED)).astype(np.float64),
        reply_offset=np.log(np.maximum(reply_frequency, 1e-3) / 0.25),
        outcome=outcome,
    )


def reaction_logits(theta: Any, data: ReactionData, lib: Any = np) -> Any:
    """(M, 4) log-odds of like, dislike, retweet, reply under the 10 REACTION_PARAMS ``theta``
    (numpy or torch, by ``lib``)."""
    (like_b, dislike_b, retweet_b, reply_b, iw, aw, rw, gw, ra, pa) = (theta[i] for i in range(10))
    as_t = (lambda a: lib.as_tensor(a)) if lib is not np else (lambda a: a)
    sim, agree, gap = as_t(data.similarity), as_t(data.agree), as_t(data.gap)
    base = iw * sim + ra * as_t(data.recommended) + pa * as_t(data.injected)
    return lib.stack(
        [
            like_b + base + aw * agree,
            dislike_b + base - aw * agree,
            retweet_b + base + rw * agree,
            reply_b + base + gw * gap + as_t(data.reply_offset),
        ],
        1,
    )


def reaction_loglik(theta: np.ndarray, data: ReactionData) -> np.ndarray:
    """(M,) log-likelihood of each impression's four outcomes."""
    z = reaction_logits(np.asarray(theta, np.float64), data)
    y = data.outcome
    return (np.where(y, -np.logaddexp(0, -z), -np.logaddexp(0, z))).sum(axis=1)


#: sd of the weak normal prior, centred on the starting values, on the reaction block's
#: log-odds parameters: it keeps them finite when the data separate (a reaction kind never or
#: always chosen, as on small LLM traces) and moves a well-identified estimate by about
#: SE²/sd² of its distance from the start (under 1e-4 at the sizes of benchmarks/fit.py)
REACTION_PRIOR_SD = 10.0


def _fit_reactions(
    data: ReactionData, start: dict[str, float]
) -> tuple[dict[str, Estimate], dict[str, Any]]:
    torch = _torch()
    columns = {
        "recommended_attention": data.recommended,
        "promoted_attention": data.injected,
        "reply_gap_weight": data.gap,
        "agreement_weight": data.agree,
        "retweet_agreement_weight": data.agree,
        "interest_weight": data.similarity,
    }
    free = [
        name
        for name in REACTION_PARAMS
        if name not in columns or (len(data) and np.ptp(columns[name]) > 0)
    ]
    confounded = "promoted_attention" in free and np.array_equal(data.recommended, data.injected)
    if confounded:  # every recommended slot was policy-filled: only their sum is identified
        free.remove("promoted_attention")
    fixed = {name: start[name] for name in REACTION_PARAMS if name not in free}
    y = torch.as_tensor(data.outcome.astype(np.float64))

    def full(t: Any) -> list[Any]:
        it = iter(range(len(free)))
        return [
            t[next(it)] if name in free else torch.tensor(fixed[name], dtype=torch.float64)
            for name in REACTION_PARAMS
        ]

    x0 = np.array([start[name] for name in free])
    centre = torch.as_tensor(x0)

    def nll(t: Any) -> Any:
        z = reaction_logits(full(t), data, torch)
        prior = 0.5 * (((t - centre) / REACTION_PRIOR_SD) ** 2).sum()
        return (torch.nn.functional.softplus(z) - y * z).sum() + prior

    x, cov, value, hessian = _ml(
        nll, x0, [(None, None) if name != "interest_weight" else (0.0, None) for name in free]
    )
    # the prior makes every direction curved: look for flat ones in the data's information
    weak = _weak_directions(hessian - np.eye(len(free)) / REACTION_PRIOR_SD**2)
    estimates = {
        name: Estimate(float(x[i]), _se(cov, i), "fitted", "reactions")
        for i, name in enumerate(free)
    }
    for j, name in enumerate(REACTION_PARAMS[:4]):
        seen = int(data.outcome[:, j].sum())
        if name in estimates and seen in (0, len(data)):
            kind = KIND_ORDER[j].name.lower()
            bound = 1 - 0.05 ** (1 / max(len(data), 1))
            estimates[name] = Estimate(
                float(x[free.index(name)]),
                None,
                "boundary",
                "reactions",
                f"{seen} {kind}s among {len(data)} impressions: the likelihood has no finite "
                f"maximum; the value is the posterior mode under the N(start, {REACTION_PRIOR_SD:g}²) "
                f"prior, and the exact one-sided 95% bound of the {kind} rate is "
                + (f"{bound:.2g}" if seen == 0 else f"{1 - bound:.2g} (lower)"),
            )
    for i in weak:
        if estimates[free[i]].status == "boundary":
            continue
        estimates[free[i]].status = "not identified"
        estimates[
            free[i]
        ].note = "the information matrix is singular along it (confounded with another parameter)"
    for name in fixed:
        estimates[name] = Estimate(
            fixed[name],
            None,
            "not identified",
            "reactions",
            "its feature never varies in this trace (e.g. no policy-filled slots)",
        )
    if confounded:
        estimates["promoted_attention"].note = (
            "every recommended slot was filled by the policy: only recommended_attention + promoted_attention "
            "is identified (held at its starting value; recommended_attention carries the sum)"
        )
    return estimates, {"impressions": len(data), "nll": value, "reactions": int(data.outcome.sum())}


def _tobit_nll(sigma: Any, value: Any, mean: Any) -> Any:
    torch = _torch()
    normal = torch.distributions.Normal(
        torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
    )
    upper, lower = value >= 1.0, value <= -1.0
    inside = ~(upper | lower)
    z = (value - mean) / sigma
    ll = torch.where(inside, normal.log_prob(z) - torch.log(sigma), torch.zeros_like(z))
    ll = ll + torch.where(
        upper,
        torch.log(torch.clamp(1 - normal.cdf((1 - mean) / sigma), min=1e-300)),
        torch.zeros_like(z),
    )
    ll = ll + torch.where(
        lower,
        torch.log(torch.clamp(normal.cdf((-1 - mean) / sigma), min=1e-300)),
        torch.zeros_like(z),
    )
    return -ll.sum()


def _clipped_uniform_mean(mu: Any, lib: Any = np) -> Any:
    """E[clip(μ·U(0.5, 1.5), 0, 1)] for μ ≥ 0."""
    safe = lib.clip(mu, 1e-12, None) if lib is np else lib.clamp(mu, min=1e-12)
    k = 1.0 / safe
    partial = safe * (k * k - 0.25) / 2 + (1.5 - k)
    return lib.where(
        1.5 * mu <= 1,
        mu,
        lib.where(0.5 * mu >= 1, lib.ones_like(mu) if lib is not np else 1.0 + 0 * mu, partial),
    )


def _least_squares(
    residual: Any, x0: np.ndarray, bounds: tuple[list[float], list[float]]
) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares with sandwich (HC0) covariance; ``residual`` is a torch function."""
    from scipy.optimize import least_squares

    torch = _torch()

    def r(x: np.ndarray) -> np.ndarray:
        return residual(torch.tensor(x, dtype=torch.float64)).numpy()

    def jac(x: np.ndarray) -> np.ndarray:
        return torch.autograd.functional.jacobian(
            residual, torch.tensor(x, dtype=torch.float64), vectorize=True, strategy="forward-mode"
        ).numpy()

    res = least_squares(r, x0, jac=jac, bounds=bounds, xtol=1e-12, ftol=1e-12, gtol=1e-12)
    j = jac(res.x)
    e = r(res.x)
    bread = inverse(j.T @ j)
    meat = (j * (e**2)[:, None]).T @ j
    return res.x, bread @ meat @ bread, float((e**2).sum())


# ---------------------------------------------------------------------- the fit
def fit_trace(
    trace: Trace,
    start: SurrogateConfig | None = None,
    seed: int = 0,
    blocks: tuple[str, ...] | None = None,
) -> FitResult:
    """Fit every SurrogateConfig parameter the trace informs; ``start``: the starting values
    (and the values of what the trace cannot inform). ``seed`` seeds nothing random in the
    fit itself (it is deterministic) but is recorded; held-out splits take it."""
    import torch

    began = time.process_time()
    torch.set_num_threads(1)
    start = start or SurrogateConfig()
    s = asdict(start)
    lookup = Lookup(trace)
    estimates: dict[str, Estimate] = {}
    info: dict[str, dict[str, Any]] = {}
    findings: list[str] = []
    wanted = set(
        blocks
        or ("reactions", "posting", "stance", "toxicity", "follow", "misinformation", "opinion")
    )
    react = trace["reactions"]
    unlinked = int((react["impression"] < 0).sum())
    if unlinked:
        findings.append(
            f"{unlinked} of {len(react['impression'])} reactions answer no impression of the "
            "reacting user's feed: the surrogate reacts only to its feed, so these are left out"
        )

    if "reactions" in wanted:
        data = reaction_data(trace, lookup)
        est, info["reactions"] = _fit_reactions(data, s)
        estimates.update(est)

    reply_rows = (react["kind"] == int(Behaviour.REPLY)) & (react["impression"] >= 0)
    if "posting" in wanted:
        est, info["posting"] = _fit_posting(trace, lookup, s)
        estimates.update(est)
        if "finding" in info["posting"]:
            findings.append(info["posting"]["finding"])
    if "stance" in wanted:
        est, info["stance"] = _fit_stance_noise(trace, lookup, s)
        estimates.update(est)
    if "toxicity" in wanted:
        est, info["toxicity"] = _fit_toxicity(trace, lookup, s, reply_rows)
        estimates.update(est)
    if "follow" in wanted:
        est, info["follow"], notes = _fit_follow(trace, s)
        estimates.update(est)
        findings += notes
    if "misinformation" in wanted:
        est, info["misinformation"], notes = _fit_misinformation(trace, lookup, s)
        estimates.update(est)
        findings += notes
    if "opinion" in wanted:
        from socialenv.fitting.opinion import fit_opinion

        est, info["opinion"], notes = fit_opinion(trace, lookup, s)
        estimates.update(est)
        findings += notes
    for name, why in NOT_IN_TRACE.items():
        estimates.setdefault(name, Estimate(s[name], None, "not identified", "none", why))
    for f in fields(SurrogateConfig):
        estimates.setdefault(
            f.name,
            Estimate(
                s[f.name],
                None,
                "not identified",
                "none",
                "no block of the likelihood reaches it in this fit",
            ),
        )
    provenance = {
        "trace": str(trace.path) if trace.path else None,
        "trace_meta": trace.meta,
        "seed": seed,
        "start": s,
        "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return FitResult(estimates, info, findings, provenance, cpu_seconds=time.process_time() - began)


def _fit_posting(
    trace: Trace, lookup: Lookup, s: dict[str, float]
) -> tuple[dict[str, Estimate], dict[str, Any]]:
    torch = _torch()
    users = trace["users"]
    act = users["active"]
    ep, rd, who = users["episode"][act], users["round"][act], users["user"][act]
    posts = trace["posts"]
    posted_key = set(lookup.key(posts["episode"], posts["round"], posts["user"]).tolist())
    y = np.isin(lookup.key(ep, rd, who), np.fromiter(posted_key, np.int64, len(posted_key)))
    ratio = population_column(trace, "post_retweet_ratio", ep, who)
    q = 2 * ratio / (1 + ratio)
    yt, qt = torch.as_tensor(y.astype(np.float64)), torch.as_tensor(q)

    def nll(t: Any) -> Any:
        p = torch.clamp(t[0] * qt, 1e-12, 1 - 1e-12)
        return -(yt * torch.log(p) + (1 - yt) * torch.log(1 - p)).sum()

    if not len(y):
        return {
            "post_rate": Estimate(
                s["post_rate"], None, "not identified", "posting", "no active user"
            )
        }, {}
    x, cov, value, _ = _ml(nll, np.array([min(max(s["post_rate"], 1e-3), 0.999)]), [(1e-6, 1.0)])
    counts = np.bincount(
        np.unique(lookup.key(posts["episode"], posts["round"], posts["user"]), return_counts=True)[
            1
        ]
    )
    info = {"active_user_rounds": int(len(y)), "posted": int(y.sum()), "nll": value}
    est = {"post_rate": Estimate(float(x[0]), _se(cov, 0), "fitted", "posting")}
    if len(counts) > 2:
        info["finding"] = (
            f"{int(counts[2:].sum())} user-rounds with more than one post: the surrogate "
            "writes at most one post per round (each counts as one posting decision)"
        )
        est["post_rate"].note = info["finding"]
    return est, info


def _fit_stance_noise(
    trace: Trace, lookup: Lookup, s: dict[str, float]
) -> tuple[dict[str, Estimate], dict[str, Any]]:
    torch = _torch()
    react, posts = trace["reactions"], trace["posts"]
    keep = react["kind"] != int(Behaviour.RETWEET)
    value = np.concatenate([react["stance"][keep], posts["stance"]]).astype(np.float64)
    mean = np.concatenate(
        [
            lookup.column(
                "attitude", react["episode"][keep], react["round"][keep], react["user"][keep]
            ),
            lookup.column("attitude", posts["episode"], posts["round"], posts["user"]),
        ]
    ).astype(np.float64)
    if not len(value):
        return {
            "stance_noise": Estimate(
                s["stance_noise"], None, "not identified", "stance", "no stance observed"
            )
        }, {}
    vt, mt = torch.as_tensor(value), torch.as_tensor(mean)
    x, cov, nll, _ = _ml(
        lambda t: _tobit_nll(t[0], vt, mt), np.array([max(s["stance_noise"], 0.05)]), [(1e-4, None)]
    )
    return (
        {"stance_noise": Estimate(float(x[0]), _se(cov, 0), "fitted", "stance")},
        {"observations": int(len(value)), "nll": nll},
    )


def _fit_toxicity(
    trace: Trace, lookup: Lookup, s: dict[str, float], reply_rows: np.ndarray
) -> tuple[dict[str, Estimate], dict[str, Any]]:
    torch = _torch()
    react, imp = trace["reactions"], trace["impressions"]
    ep, rd, who = (
        react["episode"][reply_rows],
        react["round"][reply_rows],
        react["user"][reply_rows],
    )
    attitude = lookup.column("attitude", ep, rd, who).astype(np.float64)
    gap = (
        np.abs(attitude - imp["post_stance"][react["impression"][reply_rows]].astype(np.float64))
        / 2
    )
    prop = population_column(trace, "toxicity_propensity", ep, who)
    tox = react["toxicity"][reply_rows].astype(np.float64)
    est: dict[str, Estimate] = {}
    info: dict[str, Any] = {"replies": int(len(tox))}
    names = ("reply_toxicity_base", "reply_toxicity_gap", "civility_threshold")
    if len(tox) > 10:
        pt, gt, yt = torch.as_tensor(prop), torch.as_tensor(gap), torch.as_tensor(tox)

        def residual(t: Any) -> Any:
            mu = torch.clamp(pt * t[0] + t[1] * gt * torch.clamp(pt - t[2], min=0.0), 0.0, 1.0)
            return yt - _clipped_uniform_mean(mu, torch)

        x0 = np.array(
            [
                s["reply_toxicity_base"],
                s["reply_toxicity_gap"],
                min(max(s["civility_threshold"], 0.01), 0.99),
            ]
        )
        x, cov, sse = _least_squares(residual, x0, ([0.0, 0.0, 0.0], [np.inf, np.inf, 1.0]))
        hostile_share = float(np.mean(prop > x[2]))
        for i, name in enumerate(names):
            est[name] = Estimate(
                float(x[i]),
                _se(cov, i),
                "fitted",
                "toxicity",
                "least squares on E[toxicity] (quasi-likelihood), sandwich SE",
            )
        if hostile_share == 0:
            for name in names[1:]:
                est[name].status = "not identified"
                est[name].note = "no replier's propensity exceeds the civility threshold"
        info.update({"sse": sse, "hostile_share": hostile_share})
    else:
        for name in names:
            est[name] = Estimate(
                s[name], None, "not identified", "toxicity", "fewer than 10 replies"
            )
    posts = trace["posts"]
    ptox = posts["toxicity"].astype(np.float64)
    pprop = population_column(trace, "toxicity_propensity", posts["episode"], posts["user"])
    if len(ptox) > 10 and np.ptp(pprop) > 0:
        at, bt = torch.as_tensor(pprop), torch.as_tensor(ptox)
        x, cov, sse = _least_squares(
            lambda t: bt - _clipped_uniform_mean(at * t[0], torch),
            np.array([max(s["post_toxicity_scale"], 0.01)]),
            ([0.0], [np.inf]),
        )
        est["post_toxicity_scale"] = Estimate(
            float(x[0]),
            _se(cov, 0),
            "fitted",
            "toxicity",
            "least squares on E[toxicity] (quasi-likelihood), sandwich SE",
        )
        info["posts"] = int(len(ptox))
    else:
        est["post_toxicity_scale"] = Estimate(
            s["post_toxicity_scale"], None, "not identified", "toxicity", "fewer than 10 posts"
        )
    return est, info


def _binomial(k: int, n: int, name: str, block: str, fallback: float, what: str) -> Estimate:
    if n == 0:
        return Estimate(fallback, None, "not identified", block, f"no {what} in the trace")
    p = k / n
    if k in (0, n):  # the Wald interval degenerates: the exact one-sided 95% interval instead
        bound = 1 - 0.05 ** (1 / n)
        return Estimate(
            p,
            None,
            "boundary",
            block,
            f"{k} of {n}: no standard error; the exact one-sided 95% interval is given",
            interval=(0.0, bound) if k == 0 else (1.0 - bound, 1.0),
        )
    return Estimate(p, float(np.sqrt(p * (1 - p) / n)), "fitted", block)


def _fit_follow(
    trace: Trace, s: dict[str, float]
) -> tuple[dict[str, Estimate], dict[str, Any], list[str]]:
    """Follow / unfollow probabilities: the share of positive (hostile) reactions followed by a
    follow (unfollow) of the post's author in the same round. A follow with no such reaction
    is one the surrogate cannot make: it is reported and left out of the rate (it would
    otherwise push the rate past 1 when a population follows without reacting)."""
    positive, hostile = hostile_mask(trace, s["toxic_threshold"])
    edges = trace["edges"]
    react = trace["reactions"]
    imp = trace["impressions"]
    linked = react["impression"] >= 0
    author = np.full(len(react["user"]), -1, np.int64)
    author[linked] = imp["author"][react["impression"][linked]]
    counts: dict[str, int] = {}
    notes = []
    for flag, mask, word in ((True, positive, "follows"), (False, hostile, "unfollows")):
        chosen = edges["follow"] == flag
        counts[word] = int(chosen.sum())
        counts[f"{word}_after_reaction"] = 0
        if not chosen.any():
            continue
        lookup = _edge_keys(
            react["episode"][mask], react["round"][mask], react["user"][mask], author[mask]
        )
        keys = _edge_keys(
            edges["episode"][chosen],
            edges["round"][chosen],
            edges["src"][chosen],
            edges["dst"][chosen],
        )
        after = np.isin(keys, lookup)
        counts[f"{word}_after_reaction"] = int(after.sum())
        orphan = float(np.mean(~after))
        if orphan > 0:
            notes.append(
                f"{orphan:.1%} of {word} ({int((~after).sum())} of {len(keys)}) have no "
                f"{'positive' if flag else 'hostile'} reaction to the target's post that round: "
                "the surrogate cannot express them (left out of the rate)"
            )
    n_positive, n_hostile = int(positive.sum()), int(hostile.sum())
    est = {
        "follow_prob": _binomial(
            min(counts["follows_after_reaction"], n_positive),
            n_positive,
            "follow_prob",
            "follow",
            s["follow_prob"],
            "positive reaction",
        ),
        "unfollow_prob": _binomial(
            min(counts["unfollows_after_reaction"], n_hostile),
            n_hostile,
            "unfollow_prob",
            "follow",
            s["unfollow_prob"],
            "hostile reaction",
        ),
    }
    return est, {**counts, "positive": n_positive, "hostile": n_hostile}, notes


def _edge_keys(ep: np.ndarray, rd: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return (
        (ep.astype(np.int64) * 1000 + rd.astype(np.int64) + 1) * 2**21 + src.astype(np.int64)
    ) * 2**21 + dst.astype(np.int64)


def _fit_misinformation(
    trace: Trace, lookup: Lookup, s: dict[str, float]
) -> tuple[dict[str, Estimate], dict[str, Any], list[str]]:
    torch = _torch()
    users, imp = trace["users"], trace["impressions"]
    act = users["active"]
    ep, rd, who = users["episode"][act], users["round"][act], users["user"][act]
    seen_key = lookup.key(imp["episode"], imp["round"], imp["user"])[imp["post_misinfo"]]
    keys, counts = np.unique(seen_key, return_counts=True)
    user_key = lookup.key(ep, rd, who)
    pos = np.searchsorted(keys, user_key)
    hit = (
        (pos < len(keys)) & (keys[np.minimum(pos, max(len(keys) - 1, 0))] == user_key)
        if len(keys)
        else np.zeros(len(user_key), bool)
    )
    seen = np.where(
        hit, counts[np.minimum(pos, max(len(keys) - 1, 0))] if len(keys) else 0, 0
    ).astype(np.float64)
    before = users["misinformed_before"][act]
    after = users["misinformed_after"][act]
    susceptibility = population_column(trace, "susceptibility", ep, who)
    est: dict[str, Estimate] = {}
    notes: list[str] = []
    believers = before
    est["misinfo_recovery"] = _binomial(
        int((believers & ~after).sum()),
        int(believers.sum()),
        "misinfo_recovery",
        "misinformation",
        s["misinfo_recovery"],
        "believer",
    )
    exposed = ~before & (seen > 0)
    unexposed_adopt = int((~before & (seen == 0) & after).sum())
    if unexposed_adopt:
        notes.append(
            f"{unexposed_adopt} users adopted misinformation without seeing any: the surrogate cannot express it"
        )
    names = ("misinfo_adoption", "misinfo_steepness", "misinfo_threshold")
    info: dict[str, Any] = {
        "exposed": int(exposed.sum()),
        "adopted": int((exposed & after).sum()),
        "distinct_counts_seen": int(len(np.unique(seen[exposed]))),
    }
    if exposed.sum() > 10 and (exposed & after).any() and len(np.unique(seen[exposed])) >= 3:
        yt = torch.as_tensor(after[exposed].astype(np.float64))
        kt = torch.as_tensor(seen[exposed])
        st = torch.as_tensor(susceptibility[exposed])

        def nll(t: Any) -> Any:
            p = torch.clamp(st * t[0] * torch.sigmoid(t[1] * (kt - t[2])), 1e-12, 1 - 1e-12)
            return -(yt * torch.log(p) + (1 - yt) * torch.log(1 - p)).sum()

        x0 = np.array(
            [
                min(max(s["misinfo_adoption"], 0.05), 0.95),
                max(s["misinfo_steepness"], 0.1),
                s["misinfo_threshold"],
            ]
        )
        bounds = [(1e-4, 1.0), (1e-3, 50.0), (-10.0, 20.0)]
        x, cov, value, hessian = _ml(nll, x0, bounds)
        at_bound = np.array(
            [
                min(abs(x[i] - lo), abs(x[i] - hi)) < 1e-6 * max(1.0, abs(x[i]))
                for i, (lo, hi) in enumerate(bounds)
            ]
        )
        # a standard error beyond the parameter's own scale: the curve is flat along it (e.g. a
        # step between two exposure counts fits as well as any steeper curve)
        for i in (1, 2):
            se_i = _se(cov, i)
            if se_i is None or se_i > max(abs(x[i]), 1.0):
                at_bound[i] = True
        if (
            at_bound[1] or at_bound[2]
        ):  # only adoption·σ(steepness·(k − threshold)) per count k is pinned
            at_bound[:] = True
        free = np.flatnonzero(~at_bound)
        cov = np.full((3, 3), np.nan)
        if len(free):
            cov[np.ix_(free, free)] = inverse(hessian[np.ix_(free, free)])
        weak = (
            set(free[_weak_directions(hessian[np.ix_(free, free)])].tolist())
            if len(free)
            else set()
        )
        for i, name in enumerate(names):
            est[name] = Estimate(float(x[i]), _se(cov, i), "fitted", "misinformation")
            if at_bound[i] or i in weak:
                est[name].status = "not identified"
                est[name].se = None
                est[name].note = (
                    "the adoption curve is not pinned by the trace: only adoption·σ(steepness·(k − "
                    "threshold)) at the few exposure counts k seen is identified"
                )
        info["nll"] = value
        if info["distinct_counts_seen"] <= 3:
            for name in names:
                est[name].note = (
                    f"only {info['distinct_counts_seen']} distinct numbers of misinformation posts "
                    "seen: the σ-curve's three parameters are weakly identified"
                )
    else:
        for name in names:
            est[name] = Estimate(
                s[name],
                None,
                "not identified",
                "misinformation",
                "too few exposed users or distinct exposure counts",
            )
    posts = trace["posts"]
    author_believer = lookup.column(
        "misinformed_before", posts["episode"], posts["round"], posts["user"]
    )
    est["misinfo_post_share"] = _binomial(
        int((author_believer & posts["misinfo"]).sum()),
        int(author_believer.sum()),
        "misinfo_post_share",
        "misinformation",
        s["misinfo_post_share"],
        "believer's post",
    )
    stray = int((~author_believer & posts["misinfo"]).sum())
    if stray:
        notes.append(
            f"{stray} misinformation posts by users not misinformed: the surrogate cannot express them"
        )
    return est, info, notes
