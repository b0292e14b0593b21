"""What the blocks of :mod:`socialenv.fitting.likelihood` share: an estimate, the trace lookups, the
surrogate's positive / hostile reactions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_models.types import Behaviour
from socialenv.fitting.trace import Trace, TraceError

OPINION_RATES = (
    "assimilation_rate",
    "backfire_rate",
    "reinforcement_rate",
    "exposure_assimilation",
    "anchor_rate",
)


@dataclass
class Estimate:
    """One fitted parameter."""

    value: float
    se: float | None
    status: str  # "fitted", "deterministic", "interval", "not identified"
    block: str
    note: str = ""
    interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": float(self.value),
            "se": None if self.se is None else float(self.se),
            "status": self.status,
            "block": self.block,
        }
        if self.note:
            out["note"] = self.note
        if self.interval is not None:
            out["interval"] = [float(self.interval[0]), float(self.interval[1])]
        return out


def inverse(h: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(h)
    except np.linalg.LinAlgError:
        return np.full_like(h, np.nan)


class Lookup:
    """Per (episode, round, user) values of the trace's ``users`` table."""

    def __init__(self, trace: Trace) -> None:
        users = trace["users"]
        self.n = int(trace.meta["num_users"])
        self.rounds = int(max(int(users["round"].max()) + 2, 1)) if len(users["round"]) else 1
        key = self.key(users["episode"], users["round"], users["user"])
        self.order = np.argsort(key, kind="stable")
        self.sorted_key = key[self.order]
        self.users = users

    def key(self, episode: np.ndarray, round_: np.ndarray, user: np.ndarray) -> np.ndarray:
        return (
            episode.astype(np.int64) * self.rounds + round_.astype(np.int64) + 1
        ) * self.n + user.astype(np.int64)

    def rows(self, episode: np.ndarray, round_: np.ndarray, user: np.ndarray) -> np.ndarray:
        k = self.key(episode, round_, user)
        pos = np.searchsorted(self.sorted_key, k)
        ok = (pos < len(k) + len(self.sorted_key)) & (pos < len(self.sorted_key))
        ok &= self.sorted_key[np.minimum(pos, len(self.sorted_key) - 1)] == k
        if not ok.all():
            raise TraceError(
                "the users table lacks a (episode, round, user) row that another table names"
            )
        return self.order[pos]

    def column(
        self, name: str, episode: np.ndarray, round_: np.ndarray, user: np.ndarray
    ) -> np.ndarray:
        return self.users[name][self.rows(episode, round_, user)]


def population_column(
    trace: Trace, column: str, episode: np.ndarray, user: np.ndarray
) -> np.ndarray:
    pop = trace["population"]
    n = int(trace.meta["num_users"])
    values = np.zeros((int(pop["episode"].max(initial=0)) + 1, n), np.float64)
    values[pop["episode"].astype(np.int64), pop["user"].astype(np.int64)] = pop[column]
    return values[episode.astype(np.int64), user.astype(np.int64)]


def hostile_mask(trace: Trace, toxic_threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(R,) positive and hostile reactions, as the surrogate defines them."""
    kind, tox = trace["reactions"]["kind"], trace["reactions"]["toxicity"]
    positive = (kind == int(Behaviour.LIKE)) | (kind == int(Behaviour.RETWEET))
    hostile = (kind == int(Behaviour.DISLIKE)) | (
        (kind == int(Behaviour.REPLY)) & (tox > toxic_threshold)
    )
    return positive, hostile
