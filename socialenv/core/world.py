"""The world state as columns: users, a growable post table and the follow graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent_models.types import PostColumns, PostKind, Profiles, UserColumns
from policysim_infra.buffers import ReusedArrays, held_only_by
from socialenv.core import kernels
from socialenv.core.kernels import distinct_sorted_edges, sorted_unique

_POST_ARRAYS = (
    "author",
    "round",
    "kind",
    "parent",
    "latent",
    "stance",
    "toxicity",
    "misinfo",
    "likes",
    "dislikes",
    "retweets",
    "replies",
    "recommended",
    "cluster",
    "flagged",
)


class PostTable:
    """Append-only post columns with amortised O(1) growth. Row index = post id."""

    def __init__(self, latent_dim: int, capacity: int = 1024, with_text: bool = False) -> None:
        self.size = 0
        self.latent_dim = latent_dim
        cap = max(capacity, 16)
        self.author = np.zeros(cap, np.int64)
        self.round = np.zeros(cap, np.int32)
        self.kind = np.zeros(cap, np.int8)
        self.parent = np.zeros(cap, np.int64)  # every append writes it: rows past size are unread
        self.latent = np.zeros((cap, latent_dim), np.float32)
        self.stance = np.zeros(cap, np.float32)
        self.toxicity = np.zeros(cap, np.float32)
        self.misinfo = np.zeros(cap, bool)
        self.likes = np.zeros(cap, np.int32)
        self.dislikes = np.zeros(cap, np.int32)
        self.retweets = np.zeros(cap, np.int32)
        self.replies = np.zeros(cap, np.int32)
        self.recommended = np.zeros(cap, bool)
        self.flagged = np.zeros(cap, bool)
        self.cluster = np.zeros(cap, np.int16)
        self.text: list[str | None] | None = [] if with_text else None

    @classmethod
    def reusing(
        cls, old: PostTable | None, latent_dim: int, capacity: int, with_text: bool = False
    ) -> PostTable:
        """An empty ``PostTable(latent_dim, capacity, with_text)``, in the columns of ``old`` when
        they hold at least half that capacity (the table grows on demand) and nothing but
        ``old`` refers to them (``old`` is emptied and must not be used again); else a new one.
        The rows ``old`` filled are zeroed, so the table equals a new one of its capacity, and
        the next episode writes memory already faulted in instead of fresh pages."""
        if (
            old is None
            or old.latent_dim != latent_dim
            or len(old.author) < max(capacity // 2, 16)
            or not all(held_only_by(old, name) for name in _POST_ARRAYS)
        ):
            return cls(latent_dim, capacity, with_text)
        table = cls(latent_dim, 16, with_text)
        for name in _POST_ARRAYS:
            column = getattr(old, name)
            column[: old.size] = 0  # rows past the size are zero already
            setattr(table, name, column)
            setattr(old, name, column[:0].copy())
        old.size = 0
        return table

    def __len__(self) -> int:
        return self.size

    def _grow(self, needed: int) -> None:
        cap = len(self.author)
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap)
        for name in _POST_ARRAYS:
            old = getattr(self, name)
            new = np.zeros((new_cap, *old.shape[1:]), old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def reserve(self, extra: int) -> None:
        """Room for ``extra`` more posts, so that the columns stay the same arrays until then:
        a caller may write the next rows of :attr:`latent` before :meth:`append` (which then
        copies nothing for them)."""
        self._grow(self.size + extra)

    def append(
        self,
        *,
        author: np.ndarray,
        round_: int,
        kind: np.ndarray | int,
        parent: np.ndarray | int,
        latent: np.ndarray,
        stance: np.ndarray,
        toxicity: np.ndarray,
        misinfo: np.ndarray,
        cluster: np.ndarray,
        text: list[str | None] | None = None,
    ) -> np.ndarray:
        """Add P posts; returns their ids (P,)."""
        p = len(author)
        start = self.size
        self._grow(start + p)
        sl = slice(start, start + p)
        self.author[sl] = author
        self.round[sl] = round_
        self.kind[sl] = kind
        self.parent[sl] = parent
        self.latent[sl] = latent
        self.stance[sl] = stance
        self.toxicity[sl] = toxicity
        self.misinfo[sl] = misinfo
        self.cluster[sl] = cluster
        if self.text is not None:
            self.text.extend(text if text is not None else [None] * p)
        self.size = start + p
        return np.arange(start, start + p, dtype=np.int64)

    def drop_before(self, cut: int) -> None:
        """Drop posts ``0..cut-1`` (the oldest: ids grow with time); post ``i >= cut`` becomes
        ``i - cut`` and a ``parent`` among the dropped becomes -1. The capacity shrinks to
        twice the kept size when it is more than four times larger, so memory follows what is
        kept."""
        if not 0 <= cut <= self.size:
            raise ValueError(f"cut={cut} is not allowed: in [0, {self.size}]")
        if cut == 0:
            return
        kept = self.size - cut
        capacity = len(self.author)
        new_cap = max(2 * kept, 1024) if capacity > 4 * max(kept, 256) else capacity
        for name in _POST_ARRAYS:
            old = getattr(self, name)
            if new_cap != capacity:
                new = np.zeros((new_cap, *old.shape[1:]), old.dtype)
                new[:kept] = old[cut : self.size]
                setattr(self, name, new)
            else:
                old[:kept] = old[
                    cut : self.size
                ]  # NumPy copies through a buffer only if they overlap
                old[kept : self.size] = 0
        parent = self.parent
        parent[:kept] = np.where(parent[:kept] >= cut, parent[:kept] - cut, -1)
        if self.text is not None:
            del self.text[:cut]
        self.size = kept

    def view(self) -> PostColumns:
        """Read-only views of the filled rows (valid until the next append)."""

        def ro(a: np.ndarray) -> np.ndarray:
            v = a[: self.size]
            v.flags.writeable = False
            return v

        return PostColumns(
            author=ro(self.author),
            round=ro(self.round),
            kind=ro(self.kind),
            parent=ro(self.parent),
            latent=ro(self.latent),
            stance=ro(self.stance),
            toxicity=ro(self.toxicity),
            misinfo=ro(self.misinfo),
            likes=ro(self.likes),
            dislikes=ro(self.dislikes),
            retweets=ro(self.retweets),
            replies=ro(self.replies),
            text=self.text,
        )

    def state_dict(self) -> dict[str, Any]:
        state = {name: getattr(self, name)[: self.size].copy() for name in _POST_ARRAYS}
        state["text"] = None if self.text is None else list(self.text)
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PostTable:
        size = len(state["author"])
        table = cls(
            state["latent"].shape[1],
            capacity=max(2 * size, 1024),
            with_text=state["text"] is not None,
        )
        for name in _POST_ARRAYS:
            getattr(table, name)[:size] = state[name]
        table.size = size
        table.text = None if state["text"] is None else list(state["text"])
        return table


class FollowGraph:
    """Directed follow edges (no duplicates, no self-loops) as the followee CSR alone: row
    ``src`` of ``indices`` lists, sorted, the users ``src`` follows. That is the edges in the
    order of their keys ``src * n + dst``, without storing the keys: a lookup is a binary
    search within the source's row (:func:`kernels.find_edges`). Adds and removes merge into
    ``indices`` (O(E) memory moves, no sort) and shift ``indptr``; the follower CSR and the
    sources are cached until the next edit.

    An edit never changes an array handed out before: :meth:`edit` writes the new CSR indices
    into the memory of the array from the edit before last only when nothing outside the graph
    references that memory any more (else into new memory). At a million users this spares
    the page faults of a fresh 120 MB array per round.
    """

    def __init__(self, num_users: int, src: np.ndarray, dst: np.ndarray) -> None:
        self.n = num_users
        self._indices_memory = ReusedArrays(keep=2)
        if distinct_sorted_edges(src, dst):  # a scenario's edges: no keys, no copies
            self._set_csr(src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False))
            return
        # self-loops, repeats or another order: the distinct sorted keys of the other edges
        keep = src != dst
        keys = sorted_unique(src[keep].astype(np.int64) * num_users + dst[keep], in_place=True)
        self._set_csr(*np.divmod(keys, num_users))

    def _set_csr(self, src: np.ndarray, dst: np.ndarray) -> None:
        """The CSR of edges sorted by (src, dst), without duplicates."""
        indptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=self.n), out=indptr[1:])
        self._replace(indptr, dst)

    def _replace(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        """The new followee CSR; the caches derived from the old one are dropped."""
        self._csr = (indptr, indices)
        self._reverse: tuple[np.ndarray, np.ndarray] | None = None
        self._src: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._csr[1])

    @property
    def keys(self) -> np.ndarray:
        """(E,) the sorted edge keys ``src * n + dst`` (built on each call: for checkpoints)."""
        keys = self.src * self.n
        keys += self._csr[1]
        return keys

    @keys.setter
    def keys(self, keys: np.ndarray) -> None:
        """Replace every edge by sorted, distinct ``keys`` (a checkpoint's)."""
        keys = np.asarray(keys, np.int64)
        if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():
            raise ValueError("FollowGraph.keys: must be sorted and distinct")
        self._set_csr(*np.divmod(keys, self.n))

    @property
    def src(self) -> np.ndarray:
        """(E,) follower of each edge, sorted (cached until the next edit)."""
        if self._src is None:
            indptr, _ = self._csr
            self._src = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(indptr))
        return self._src

    @property
    def dst(self) -> np.ndarray:
        """(E,) followee of each edge."""
        return self._csr[1]

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position, found) of the keys ``src * n + dst`` among the sorted edges."""
        indptr, indices = self._csr
        return kernels.find_edges(indptr, indices, keys, self.n)

    def contains(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        return self._find(src.astype(np.int64) * self.n + dst)[1]

    def follow(self, src: np.ndarray, dst: np.ndarray) -> int:
        """Add edges (self-follows and existing edges ignored); returns how many were new."""
        keep = src != dst
        keys = sorted_unique(src[keep].astype(np.int64) * self.n + dst[keep])
        pos, exists = self._find(keys)
        new = keys[~exists]
        if len(new):
            indptr, indices = self._csr
            self._replace(
                indptr + self._row_shift(new // self.n),
                kernels.insert_sorted(indices, pos[~exists], new % self.n),
            )
        return len(new)

    def _row_shift(self, rows: np.ndarray) -> np.ndarray:
        return kernels.row_shift(rows, self.n)

    def unfollow(self, src: np.ndarray, dst: np.ndarray) -> int:
        """Remove edges (missing ones ignored); returns how many were removed."""
        keys = sorted_unique(src.astype(np.int64) * self.n + dst)
        pos, found = self._find(keys)
        hit = pos[found]
        if len(hit):
            indptr, indices = self._csr
            self._replace(
                indptr - self._row_shift(keys[found] // self.n),
                kernels.delete_sorted(indices, hit),
            )
        return len(hit)

    def edit(
        self,
        follow_src: np.ndarray,
        follow_dst: np.ndarray,
        unfollow_src: np.ndarray,
        unfollow_dst: np.ndarray,
    ) -> tuple[int, int]:
        """:meth:`follow` then :meth:`unfollow` in one pass over the edges (the same graph and
        counts); returns (added, removed)."""
        indptr, indices = self._csr
        added, removed, change = kernels.edit_plan(
            indptr, indices, self.n, follow_src, follow_dst, unfollow_src, unfollow_dst
        )
        if change is None:
            return added, removed
        after, drop, at, new = change
        size = len(indices) + len(new) - len(drop)
        # the memory of the indices the edit before last replaced, when nobody holds them
        memory = self._indices_memory.empty((size,), indices.dtype, room=size // 64 + 1024)
        self._replace(after, kernels.merge_edits(indices, drop, at, new, memory))
        return added, removed

    def followees_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr (N+1,), indices (E,)): row u lists, sorted, the users u follows."""
        return self._csr

    def followers_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr (N+1,), indices (E,)): row u lists the users who follow u."""
        if self._reverse is None:
            src, dst = self.src, self.dst
            order = np.argsort(dst, kind="stable")
            indptr = np.zeros(self.n + 1, np.int64)
            np.cumsum(np.bincount(dst, minlength=self.n), out=indptr[1:])
            self._reverse = (indptr, src[order])
        return self._reverse


@dataclass
class UserState:
    """Mutable per-user columns (N users); see :class:`agent_models.types.UserColumns`."""

    profiles: Profiles
    latent: np.ndarray
    memory_latent: np.ndarray
    stance: np.ndarray
    discrete_stance: np.ndarray
    opinion: np.ndarray
    activity: np.ndarray
    toxicity_propensity: np.ndarray
    susceptibility: np.ndarray
    misinformed: np.ndarray
    exposure: np.ndarray
    _context: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    _ARRAYS = (
        "latent",
        "memory_latent",
        "stance",
        "discrete_stance",
        "opinion",
        "activity",
        "toxicity_propensity",
        "susceptibility",
        "misinformed",
        "exposure",
    )

    def view(self) -> UserColumns:
        def ro(a: np.ndarray) -> np.ndarray:
            v = a.view()
            v.flags.writeable = False
            return v

        return UserColumns(
            profiles=self.profiles,
            latent=ro(self.latent),
            memory_latent=ro(self.memory_latent),
            stance=ro(self.stance),
            opinion=ro(self.opinion),
            activity=ro(self.activity),
            toxicity_propensity=ro(self.toxicity_propensity),
            susceptibility=ro(self.susceptibility),
            misinformed=ro(self.misinformed),
            exposure=ro(self.exposure),
        )

    def context_table(self) -> np.ndarray:
        """(N, 2d) float32 [latent | memory_latent] of every user, written into a buffer kept
        between calls (overwritten by the next call). One user's context is one contiguous
        row, so a propagation hop fetches one row per neighbour instead of one per block."""
        n = len(self.latent)
        width = self.latent.shape[1] + self.memory_latent.shape[1]
        if self._context is None or self._context.shape != (n, width):
            self._context = np.empty((n, width), np.float32)
        table, latent, memory = self._context, self.latent, self.memory_latent

        def copy(lo: int, hi: int) -> None:
            np.concatenate([latent[lo:hi], memory[lo:hi]], axis=1, out=table[lo:hi])

        kernels.map_blocks(copy, n, 65_536)  # a copy: the same table on any number of threads
        return table

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name).copy() for name in self._ARRAYS}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`; each array must have this population's shape and
        finite values (ValueError naming the array)."""
        for name in self._ARRAYS:
            target, value = getattr(self, name), np.asarray(state[name])
            if value.shape != target.shape:
                raise ValueError(
                    f"users.{name}: shape {value.shape} is not allowed: {target.shape}"
                )
            if value.dtype.kind not in "biuf" or (
                value.dtype.kind == "f" and not np.isfinite(value).all()
            ):
                raise ValueError(
                    f"users.{name} is not allowed: finite numbers only (dtype {value.dtype})"
                )
            target[...] = value


def discretize_stance(value: np.ndarray, threshold: float = 1 / 3) -> np.ndarray:
    """s in {-1, 0, +1}: the sign of ``value`` where |value| > threshold, else 0 (Eq. 1)."""
    return np.where(value > threshold, 1, np.where(value < -threshold, -1, 0)).astype(np.int8)


#: The words for the discrete stances of :func:`discretize_stance`.
STANCE_LABELS = {-1: "against", 0: "undecided", 1: "in favour"}


def stance_label(value: float) -> str:
    """ "against", "undecided" or "in favour": the word for a stance in [-1, 1], cut where
    :func:`discretize_stance` (and so the cross-stance metrics) cut it. ``play``, interviews
    and surveys label every stance with it."""
    return STANCE_LABELS[int(discretize_stance(np.asarray(value)))]


__all__ = [
    "STANCE_LABELS",
    "FollowGraph",
    "PostKind",
    "PostTable",
    "UserState",
    "discretize_stance",
    "stance_label",
]
