"""Summaries of a run's rows: per seed (the mean over the rounds for flow metrics, the last
round for state metrics), then mean ± 95% t-interval over seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Metrics summarized as the mean over the rounds of the (last) episode: they measure what
#: happens during a round. Every other metric is a state, summarized by its last-round value.
FLOW_METRICS = frozenset(
    {
        "reward",
        "toxicity",
        "cross_interaction_ratio",
        "cross_interaction_ratio_recommended",
        "engagement",
        "exposure_removed",
        "recommended_reaction_rate",
        "objective",
        "civil_cross_reactions_per_user",
        "hostile_reactions_per_user",
        "hostile_cross_reactions_per_user",
        "slot_reward",
        "clean_removed_per_user",
        "newly_misinformed",
    }
)
ROUND_MEAN = "mean over the rounds of the last episode"
LAST_ROUND = "value at the last round"


def _ci95(values: Sequence[float]) -> float | None:
    """Half-width of the 95% t-interval of the mean; None for fewer than 2 values (n/a)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return None
    from scipy import stats

    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def format_mean_ci(stat: dict[str, Any], digits: int = 4) -> str:
    """``"mean ± ci"`` of a summary entry, or ``"mean ± n/a"`` when there is no CI (1 seed)."""
    ci = stat.get("ci95")
    return f"{stat['mean']:.{digits}f} ± " + ("n/a" if ci is None else f"{ci:.{digits}f}")


class RunningSummary:
    """The per-seed values :func:`summarize` reports, kept up to date row by row (O(metrics)
    per row, so a summary can be rewritten after every round of a long run)."""

    def __init__(self) -> None:
        self._seeds: dict[Any, dict[str, Any]] = {}

    def add(self, row: dict[str, Any]) -> None:
        seed, episode = row["seed"], row["episode"]
        state = self._seeds.get(seed)
        if state is None or episode > state["episode"]:
            state = {"episode": episode, "sums": {}, "counts": {}, "last": row}
            self._seeds[seed] = state
        elif episode < state["episode"]:
            return
        for key, value in row.items():
            if key in FLOW_METRICS:
                state["sums"][key] = state["sums"].get(key, 0.0) + float(value)
                state["counts"][key] = state["counts"].get(key, 0) + 1
        state["last"] = row

    def per_seed(self, keys: Sequence[str]) -> dict[Any, dict[str, float]]:
        out = {}
        for seed in sorted(self._seeds):
            state = self._seeds[seed]
            last = state["last"]
            out[seed] = {
                k: state["sums"][k] / state["counts"][k] if k in FLOW_METRICS else float(last[k])
                for k in keys
                if k in last and (k not in FLOW_METRICS or k in state["counts"])
            }
        return out

    def summary(self, keys: Sequence[str]) -> dict[str, Any]:
        per_seed = self.per_seed(keys)
        out: dict[str, Any] = {"seeds": len(per_seed), "per_seed": per_seed}
        for k in keys:
            values = [s[k] for s in per_seed.values() if k in s]
            if values:
                out[k] = {
                    "mean": float(np.mean(values)),
                    "ci95": _ci95(values),
                    "aggregation": ROUND_MEAN if k in FLOW_METRICS else LAST_ROUND,
                }
        out["ci95"] = (
            "95% t-interval over seeds" if len(per_seed) > 1 else "n/a: one seed gives no interval"
        )
        return out


def summarize(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Per-seed value of each key (its seed's last episode: the mean over the rounds for
    flow metrics (:data:`FLOW_METRICS`), the last round's value for state metrics), then
    mean ± 95% CI over seeds (``ci95`` None with one seed). Each metric's entry says which
    (``aggregation``)."""
    running = RunningSummary()
    for row in rows:
        running.add(row)
    return running.summary(keys)
