"""The opinion-update block of :mod:`socialenv.fitting.likelihood`: the surrogate's update of the persistent
opinion o_u, fitted to the trace's opinion trajectories.

Mirror of ``SurrogateBrain._update_opinions``: every reaction of u to post p with target
s_p and delta = s_p − o_u moves o_u (civil reactions within 2·confidence_bound by
assimilation_rate·delta, plus reinforcement_rate·sign(s_p)·(1 − |o_u|) when like-minded;
hostile ones at least 2·backfire_gap away by −backfire_rate·delta); the moves add up and are
divided by √(number of moves); active users then move toward the mean stance of their feed
by exposure_assimilation, every user back toward the anchor by anchor_rate, and the result is
clipped to [−1, 1].

Given the reactions this update is deterministic, so the rates are fitted by least squares
and a correct model leaves residuals at float32 rounding (status "deterministic"). A larger
residual means the population's opinion dynamics are not the surrogate's (an ABM, an LLM):
the estimates are then the best least-squares approximation, with sandwich standard errors,
and the fit report says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_models.types import Behaviour

#: residual RMS below which the update is taken as reproduced exactly (float32 opinions)
EXACT_RMS = 1e-5


def _prepare(trace: Any, lookup: Any, toxic_threshold: float) -> dict[str, np.ndarray] | None:
    from socialenv.fitting.estimate import hostile_mask, population_column

    react, imp, users = trace["reactions"], trace["impressions"], trace["users"]
    linked = react["impression"] >= 0
    positive, hostile = hostile_mask(trace, toxic_threshold)
    row = lookup.rows(react["episode"][linked], react["round"][linked], react["user"][linked])
    persistent = users["opinion_before"][row].astype(np.float64)
    target = imp["post_stance"][react["impression"][linked]].astype(np.float64)
    kind = react["kind"][linked]
    civil = positive[linked] | ((kind == int(Behaviour.REPLY)) & ~hostile[linked])
    # feed means of every active user-round (exposure assimilation)
    imp_row = lookup.rows(imp["episode"], imp["round"], imp["user"])
    n_rows = len(users["user"])
    seen = np.bincount(imp_row, weights=imp["post_stance"].astype(np.float64), minlength=n_rows)
    count = np.bincount(imp_row, minlength=n_rows)
    return {
        "row": row,
        "delta": target - persistent,
        "target": target,
        "persistent": persistent,
        "civil": civil,
        "hostile": hostile[linked],
        "before": users["opinion_before"].astype(np.float64),
        "after": users["opinion_after"].astype(np.float64),
        "anchor": population_column(trace, "opinion_initial", users["episode"], users["user"]),
        "active": users["active"].astype(bool),
        "mean_seen": seen / np.maximum(count, 1),
        "has_feed": count > 0,
    }


def _sums(d: dict[str, np.ndarray], cb: float, bg: float) -> tuple[np.ndarray, ...]:
    n = len(d["before"])
    delta = d["delta"]
    assimilate = d["civil"] & (np.abs(delta) <= 2 * cb)
    backfire = d["hostile"] & (np.abs(delta) >= 2 * bg)
    like_minded = (
        assimilate
        & (np.sign(d["target"]) == np.sign(d["persistent"]))
        & (np.abs(d["target"]) > 1 / 3)
    )
    a = np.bincount(d["row"], weights=np.where(assimilate, delta, 0.0), minlength=n)
    b = np.bincount(d["row"], weights=np.where(backfire, delta, 0.0), minlength=n)
    r = np.bincount(
        d["row"],
        weights=np.where(like_minded, np.sign(d["target"]) * (1 - np.abs(d["persistent"])), 0.0),
        minlength=n,
    )
    w = np.bincount(d["row"], weights=(assimilate | backfire).astype(np.float64), minlength=n)
    return a, b, r, w


def predict(d: dict[str, np.ndarray], sums: tuple[np.ndarray, ...], x: np.ndarray) -> np.ndarray:
    alpha, beta, rho, eps, gamma = x
    a, b, r, w = sums
    new = d["before"] + np.where(
        w > 0, (alpha * a - beta * b + rho * r) / np.sqrt(np.maximum(w, 1)), 0.0
    )
    exposed = d["active"] & d["has_feed"]
    new = np.where(exposed, new + eps * (d["mean_seen"] - new), new)
    new = new + gamma * (d["anchor"] - new)
    return np.clip(new, -1, 1)


def _fit_rates(
    d: dict[str, np.ndarray], sums: tuple[np.ndarray, ...], x0: np.ndarray
) -> tuple[np.ndarray, Any]:
    from scipy.optimize import least_squares

    res = least_squares(
        lambda x: predict(d, sums, x) - d["after"],
        x0,
        bounds=([0.0] * 5, [1.0] * 5),
        xtol=1e-14,
        ftol=1e-14,
        gtol=1e-14,
        method="trf",
    )
    return res.x, res


def _sse(d: dict[str, np.ndarray], cb: float, bg: float, x: np.ndarray) -> float:
    return float(((predict(d, _sums(d, cb, bg), x) - d["after"]) ** 2).sum())


def _best_threshold(
    d: dict[str, np.ndarray], which: str, cb: float, bg: float, x: np.ndarray, mask: np.ndarray
) -> tuple[float, tuple[float, float]]:
    """The threshold (``cb`` or ``bg``) minimizing the SSE over a grid and then over the
    breakpoints |delta|/2 near the grid's best; returns it and the interval of thresholds
    that fit as well (walking over neighbouring breakpoints while the SSE does not rise)."""

    def sse(v: float) -> float:
        return _sse(d, v, bg, x) if which == "cb" else _sse(d, cb, v, x)

    grid = np.linspace(0.0, 1.0, 101)
    values = np.array([sse(v) for v in grid])
    best = grid[int(np.argmin(values))]
    points = np.unique(np.abs(d["delta"][mask]) / 2)
    near = points[(points >= best - 0.02) & (points <= best + 0.02)]
    # a threshold at a breakpoint includes it (cb: p <= cb; bg: p >= bg); just past it excludes it
    step = -1e-9 if which == "cb" else 1e-9
    candidates = np.clip(np.concatenate([[best], near, near + step]), 0.0, 1.0)
    scores = np.array([sse(v) for v in candidates])
    chosen = float(candidates[int(np.argmin(scores))])
    floor = float(scores.min()) + 1e-9
    # the partition of the observed gaps the chosen threshold makes, and how far it can move
    inside = points <= chosen if which == "cb" else points >= chosen
    k_in = np.flatnonzero(inside)
    k_out = np.flatnonzero(~inside)
    below, above = (k_in, k_out) if which == "cb" else (k_out, k_in)
    lo_index = int(below.max()) if len(below) else -1
    hi_index = int(above.min()) if len(above) else len(points)
    # walk down while moving the threshold past the next breakpoint leaves the fit unchanged
    for _ in range(200):
        if lo_index < 0 or sse(float(points[lo_index]) + (step if which == "cb" else 0.0)) > floor:
            break
        lo_index -= 1
    for _ in range(200):
        if (
            hi_index >= len(points)
            or sse(float(points[hi_index]) + (0.0 if which == "cb" else step)) > floor
        ):
            break
        hi_index += 1
    lo = float(points[lo_index]) if lo_index >= 0 else 0.0
    hi = float(points[hi_index]) if hi_index < len(points) else 1.0
    return chosen, (lo, min(hi, 1.0))


def fit_opinion(
    trace: Any, lookup: Any, s: dict[str, float]
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    from socialenv.fitting.estimate import OPINION_RATES, Estimate

    d = _prepare(trace, lookup, s["toxic_threshold"])
    notes: list[str] = []
    if d is None or not len(d["after"]):
        return (
            {
                name: Estimate(s[name], None, "not identified", "opinion", "no opinion trajectory")
                for name in (*OPINION_RATES, "confidence_bound", "backfire_gap")
            },
            {},
            notes,
        )
    x = np.array([s[name] for name in OPINION_RATES], np.float64)
    cb, bg = s["confidence_bound"], s["backfire_gap"]
    x, _ = _fit_rates(d, _sums(d, cb, bg), x)
    intervals: dict[str, tuple[float, float]] = {}
    for _ in range(4):  # alternate until the thresholds' partition no longer changes
        previous = (cb, bg)
        cb, intervals["confidence_bound"] = _best_threshold(d, "cb", cb, bg, x, d["civil"])
        bg, intervals["backfire_gap"] = _best_threshold(d, "bg", cb, bg, x, d["hostile"])
        x, res = _fit_rates(d, _sums(d, cb, bg), x)
        if (cb, bg) == previous:
            break
    residual = res.fun
    rms = float(np.sqrt(np.mean(residual**2)))
    exact = rms < EXACT_RMS
    j = res.jac
    info: dict[str, Any] = {
        "user_rounds": int(len(residual)),
        "rms_residual": rms,
        "opinion_change_rms": float(np.sqrt(np.mean((d["after"] - d["before"]) ** 2))),
    }
    est: dict[str, Any] = {}
    cov = None
    if not exact:
        from socialenv.fitting.estimate import inverse

        bread = inverse(j.T @ j)
        cov = bread @ ((j * (residual**2)[:, None]).T @ j) @ bread
        notes.append(
            f"opinion trajectories: the surrogate's update leaves an RMS residual of {rms:.4f} (opinion changes "
            f"RMS {info['opinion_change_rms']:.4f}): the population's opinion dynamics are not the surrogate's; "
            "the opinion rates are its best least-squares approximation"
        )
    static = info["opinion_change_rms"] == 0.0
    if static:
        notes.append(
            "the population's persistent opinions never changed in this trace: the opinion-update "
            "parameters are not identified (the surrogate's opinions move with every engagement)"
        )
    for i, name in enumerate(OPINION_RATES):
        column_used = bool(len(j)) and np.abs(j[:, i]).max() > 1e-8 and not static
        if not column_used:
            est[name] = Estimate(
                s[name],
                None,
                "not identified",
                "opinion",
                "no observation depends on it in this trace",
            )
        elif exact:
            est[name] = Estimate(
                float(x[i]),
                None,
                "deterministic",
                "opinion",
                f"reproduces the trajectories to rounding (RMS residual {rms:.1e})",
            )
        else:
            se = (
                float(np.sqrt(cov[i, i]))
                if cov is not None and np.isfinite(cov[i, i]) and cov[i, i] > 0
                else None
            )
            est[name] = Estimate(
                float(x[i]), se, "fitted", "opinion", "least squares, misspecified model"
            )
    for name, value in (("confidence_bound", cb), ("backfire_gap", bg)):
        lo, hi = intervals[name]
        if static:
            est[name] = Estimate(
                s[name], None, "not identified", "opinion", "the opinions never changed"
            )
            continue
        est[name] = Estimate(
            float((lo + hi) / 2) if hi > lo else value,
            None,
            "interval",
            "opinion",
            "identified only up to the interval between neighbouring observed stance gaps",
            interval=(lo, hi),
        )
    return est, info, notes
