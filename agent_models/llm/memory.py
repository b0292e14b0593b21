"""Columnar agent memory (Eq. 3–4 of the paper) for all users at once.

Two tables:

- **texts**: one row per distinct memory text with its sentence embedding (R, d). A read
  post's memory text (its LLM summary, or the post verbatim when it is shorter than the
  length threshold) is computed once per post and shared by every reader (``post_row``).
- **entries**: one row per (user, memory): ``user`` (M,) int64, ``round`` (M,) int32,
  ``kind`` (M,) int8 (0 = short-term, 1 = long-term), ``row`` (M,) int64 into the text
  table, ``source`` (M,) int64 the post read (-1 for own actions and long-term memories).

Retrieval for B users with queries q (B, d): ``score = sim(q, m) · exp(−λ·(t − round))``
with ``sim = (1 + cos) / 2`` in [0, 1] (so that decay always lowers a score), λ =
``decay`` for short-term and ``long_term_decay`` for long-term entries; the top-k entries
of each user, best first. Consolidation samples short-term entries of users above the
capacity and replaces them with one long-term entry (the text is written by the LLM).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHORT, LONG = 0, 1


def group_rank(groups: np.ndarray) -> np.ndarray:
    """For a sorted ``groups`` array, the 0-based position of each element in its group."""
    if len(groups) == 0:
        return np.zeros(0, np.int64)
    return np.arange(len(groups)) - np.searchsorted(groups, groups, side="left")


class MemoryStore:
    """All users' memories as arrays (see module docstring)."""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self.texts: list[str] = []
        self._emb = np.zeros((64, self.dim), np.float32)
        self.post_row: dict[int, int] = {}
        self.user = np.zeros(0, np.int64)
        self.round = np.zeros(0, np.int32)
        self.kind = np.zeros(0, np.int8)
        self.row = np.zeros(0, np.int64)
        self.source = np.zeros(0, np.int64)

    # ------------------------------------------------------------------ tables
    @property
    def embeddings(self) -> np.ndarray:
        """(R, d) float32 embeddings of the text table."""
        return self._emb[: len(self.texts)]

    def __len__(self) -> int:
        return len(self.user)

    def add_texts(self, texts: list[str], embeddings: np.ndarray) -> np.ndarray:
        """Append texts with their (n, d) embeddings; returns their (n,) rows."""
        n = len(texts)
        if embeddings.shape != (n, self.dim):
            raise ValueError(
                f"MemoryStore.add_texts: embeddings shape {embeddings.shape}, "
                f"expected ({n}, {self.dim})"
            )
        start = len(self.texts)
        if start + n > len(self._emb):
            grown = np.zeros((max(2 * len(self._emb), start + n), self.dim), np.float32)
            grown[:start] = self._emb[:start]
            self._emb = grown
        self._emb[start : start + n] = embeddings
        self.texts.extend(texts)
        return np.arange(start, start + n, dtype=np.int64)

    def add_entries(
        self,
        user: np.ndarray,
        round_: int | np.ndarray,
        kind: int,
        row: np.ndarray,
        source: np.ndarray | None = None,
    ) -> None:
        """Append entries (all arrays of one length)."""
        n = len(user)
        if n == 0:
            return
        self.user = np.concatenate([self.user, np.asarray(user, np.int64)])
        self.round = np.concatenate(
            [self.round, np.broadcast_to(np.asarray(round_, np.int32), (n,))]
        )
        self.kind = np.concatenate([self.kind, np.full(n, kind, np.int8)])
        self.row = np.concatenate([self.row, np.asarray(row, np.int64)])
        src = np.full(n, -1, np.int64) if source is None else np.asarray(source, np.int64)
        self.source = np.concatenate([self.source, src])

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the entries where ``mask`` is True."""
        self.user, self.round, self.kind = self.user[mask], self.round[mask], self.kind[mask]
        self.row, self.source = self.row[mask], self.source[mask]

    def has_read(self, user: np.ndarray, post: np.ndarray) -> np.ndarray:
        """(n,) bool: whether each (user, post) pair already has a read-post entry."""
        if len(self.user) == 0 or len(user) == 0:
            return np.zeros(len(user), bool)
        have = self.source >= 0
        existing = self.user[have] * (1 << 32) + self.source[have]
        return np.isin(
            np.asarray(user, np.int64) * (1 << 32) + np.asarray(post, np.int64), existing
        )

    # ------------------------------------------------------------------ retrieval
    def retrieve(
        self,
        users: np.ndarray,
        queries: np.ndarray | None,
        now: int,
        top_k: int,
        decay: float,
        long_term_decay: float,
    ) -> list[list[str]]:
        """Top-``top_k`` memory lines of each of ``users`` (B,), best first.

        Args:
            users: (B,) distinct user ids.
            queries: (B, d) unit query embeddings, or None (recency only: sim = 1).
            now: the current round t.
        """
        out: list[list[str]] = [[] for _ in range(len(users))]
        if top_k == 0 or len(self.user) == 0 or len(users) == 0:
            return out
        users = np.asarray(users, np.int64)
        order = np.argsort(users, kind="stable")
        sorted_users = users[order]
        sel = np.flatnonzero(np.isin(self.user, users))
        if len(sel) == 0:
            return out
        pos = order[np.searchsorted(sorted_users, self.user[sel])]
        if queries is None:
            sim = np.ones(len(sel), np.float32)
        else:
            emb = self._emb[self.row[sel]]
            sim = (1.0 + np.einsum("ij,ij->i", emb, queries[pos])) / 2.0
        lam = np.where(self.kind[sel] == LONG, long_term_decay, decay)
        age = np.maximum(now - self.round[sel], 0)
        score = sim * np.exp(-lam * age)
        ranked = np.lexsort((-score, pos))
        pos_r = pos[ranked]
        keep = group_rank(pos_r) < top_k
        for p, entry in zip(pos_r[keep].tolist(), sel[ranked][keep].tolist(), strict=True):
            r = int(self.round[entry])
            label = (
                "long-term"
                if self.kind[entry] == LONG
                else "before the simulation"
                if r < 0
                else f"round {r}"
            )
            out[p].append(f"({label}) {self.texts[self.row[entry]]}")
        return out

    # ------------------------------------------------------------------ consolidation
    def sample_consolidation(
        self, capacity: int, size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Users whose short-term entries exceed ``capacity`` and, for each, ``size``
        entries sampled uniformly among its short-term ones (entry indices)."""
        short = np.flatnonzero(self.kind == SHORT)
        if len(short) == 0:
            return np.zeros(0, np.int64), []
        users, counts = np.unique(self.user[short], return_counts=True)
        over = users[counts > capacity]
        if len(over) == 0:
            return over, []
        cand = short[np.isin(self.user[short], over)]
        ranked = cand[np.lexsort((rng.random(len(cand)), self.user[cand]))]
        picked = ranked[group_rank(self.user[ranked]) < size]
        bounds = np.searchsorted(self.user[picked], over, side="left")
        groups = np.split(picked, bounds[1:])
        return over, groups

    def consolidate(
        self,
        users: np.ndarray,
        groups: list[np.ndarray],
        rows: np.ndarray,
        now: int,
        long_term_capacity: int,
    ) -> None:
        """Replace each group of entries by one long-term entry (text row ``rows[i]``), then
        keep at most ``long_term_capacity`` long-term entries per user (newest)."""
        if len(users):
            drop = np.zeros(len(self.user), bool)
            drop[np.concatenate(groups)] = True
            self.keep(~drop)
            self.add_entries(users, now, LONG, rows)
        long_ = np.flatnonzero(self.kind == LONG)
        if len(long_) == 0:
            return
        ranked = long_[np.lexsort((-self.round[long_], self.user[long_]))]
        excess = ranked[group_rank(self.user[ranked]) >= long_term_capacity]
        if len(excess):
            mask = np.ones(len(self.user), bool)
            mask[excess] = False
            self.keep(mask)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "texts": list(self.texts),
            "embeddings": self.embeddings.copy(),
            "post_row": np.array(sorted(self.post_row.items()), np.int64).reshape(-1, 2),
            "user": self.user.copy(),
            "round": self.round.copy(),
            "kind": self.kind.copy(),
            "row": self.row.copy(),
            "source": self.source.copy(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> MemoryStore:
        store = cls(int(state["dim"]))
        store.add_texts(list(state["texts"]), np.asarray(state["embeddings"], np.float32))
        store.post_row = {int(k): int(v) for k, v in np.asarray(state["post_row"]).reshape(-1, 2)}
        store.user = np.asarray(state["user"], np.int64).copy()
        store.round = np.asarray(state["round"], np.int32).copy()
        store.kind = np.asarray(state["kind"], np.int8).copy()
        store.row = np.asarray(state["row"], np.int64).copy()
        store.source = np.asarray(state["source"], np.int64).copy()
        return store
