"""Behaviour traces: what every user saw and did, round by round, in one columnar format.

A trace is a folder (``NAME.trace``) holding ``meta.json`` and one columnar file per table,
Parquet (default; pyarrow, zstd) or ``.npz`` (``format="npz"``). The format is documented in
``docs/trace_format.md``; :data:`TRACE_VERSION` is its version, and :func:`load_trace` refuses
a trace of another version, a missing column, a NaN or an id out of range with an error naming
the file and the column.

Tables (every one has ``episode`` and ``round`` columns):

- ``population``: per episode and user, what stays fixed: the initial opinion (the
  surrogate's anchor) and the profile statistics the surrogate reads.
- ``users``: per round and user (all N: anchoring moves inactive users too): active or not,
  opinion, expressed attitude and stance before and after, misinformed before and after.
- ``impressions``: per round and shown feed slot: user, post, author, channel, the post's
  features (stance, toxicity, misinformation, kind) and the interest similarity
  cos(x_user, x_post).
- ``reactions``: per reaction: user, post, the impression it answers (-1 if none), kind
  (:class:`agent_models.types.Behaviour`), toxicity, stance.
- ``posts``: per original post written: author, stance, toxicity, misinformation.
- ``edges``: per follow / unfollow the population chose: source, target, ``follow`` (1) or
  unfollow (0).
- ``rounds``: per round, the platform's macro metrics (stance mean/std, toxicity,
  cross-stance ratio, engagement, misinformation).

Any population writes it (the recorder reads the simulation's round results): the surrogate,
the opinion-dynamics ABMs and the LLM users alike. Record with ``env.unwrapped.trace(path)``
or ``policysim run --trace DIR``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TRACE_FORMAT = "policysim-trace"
TRACE_VERSION = 1
TRACE_SUFFIXES = {"parquet": ".parquet", "npz": ".npz"}

#: table -> column -> (dtype kind, description). Kinds: "i" integer, "f" float, "b" bool.
SCHEMA: dict[str, dict[str, tuple[str, str]]] = {
    "population": {
        "episode": ("i", "episode index within the trace"),
        "user": ("i", "user id"),
        "opinion_initial": ("f", "opinion at the episode's start (the surrogate's anchor)"),
        "reply_frequency": ("f", "profile statistic: replies per post"),
        "post_retweet_ratio": ("f", "profile statistic: original posts per retweet"),
        "toxicity_propensity": ("f", "toxicity propensity in [0, 1]"),
        "susceptibility": ("f", "susceptibility to misinformation in [0, 1]"),
        "activity": ("f", "probability of being active in a round"),
    },
    "users": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "user": ("i", "user id"),
        "active": ("b", "active in round t"),
        "opinion_before": ("f", "persistent opinion at the start of the round"),
        "opinion_after": ("f", "persistent opinion at the end of the round"),
        "attitude": (
            "f",
            "expressed attitude the population acted on this round (the opinion "
            "plus any news shock; the opinion where the population exposes none)",
        ),
        "stance_before": ("f", "smoothed stance (Eq. 2) at the start of the round"),
        "stance_after": ("f", "smoothed stance at the end of the round"),
        "discrete_before": ("i", "discrete stance in {-1, 0, 1} at the start of the round"),
        "discrete_after": ("i", "discrete stance at the end of the round"),
        "misinformed_before": ("b", "misinformed at the start of the round"),
        "misinformed_after": ("b", "misinformed at the end of the round"),
    },
    "impressions": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "user": ("i", "the user shown the post"),
        "slot": ("i", "position in the user's feed"),
        "post": ("i", "post id since the episode's start"),
        "author": ("i", "the post's author"),
        "channel": (
            "i",
            "FeedChannel: 0 relational, 1 personalized, 2 headline, 3 injected by the policy",
        ),
        "post_kind": ("i", "PostKind: 0 post, 1 retweet, 2 reply"),
        "post_stance": ("f", "the post's stance in [-1, 1]"),
        "post_toxicity": ("f", "the post's toxicity in [0, 1]"),
        "post_misinfo": ("b", "the post carries misinformation"),
        "similarity": ("f", "interest similarity cos(x_user, x_post)"),
    },
    "reactions": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "user": ("i", "who reacted"),
        "post": ("i", "post id since the episode's start"),
        "impression": ("i", "row of the impressions table it answers (-1: not in the user's feed)"),
        "kind": ("i", "Behaviour: 1 retweet, 2 reply, 3 like, 4 dislike"),
        "toxicity": ("f", "toxicity of a reply (0 for other kinds)"),
        "stance": ("f", "stance the reaction expresses"),
    },
    "posts": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "user": ("i", "author"),
        "stance": ("f", "stance of the post"),
        "toxicity": ("f", "toxicity of the post"),
        "misinfo": ("b", "carries misinformation"),
    },
    "edges": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "src": ("i", "follower"),
        "dst": ("i", "followee"),
        "follow": ("b", "1 follow, 0 unfollow"),
    },
    "rounds": {
        "episode": ("i", "episode index"),
        "round": ("i", "round t"),
        "stance_mean": ("f", "mean smoothed stance after the round"),
        "stance_std": ("f", "std of the smoothed stance after the round"),
        "toxicity": ("f", "mean toxicity of the texts written"),
        "cross_interaction_ratio": ("f", "share of reactions across discrete stances"),
        "engagement": ("f", "reactions per active user"),
        "misinformation_ratio": ("f", "share of users misinformed"),
        "active_users": ("f", "active users"),
    },
}
TABLES = tuple(SCHEMA)
#: meta keys holding one entry per episode (kept in step by ``Trace.episodes`` and
#: :func:`merge_traces`)
PER_EPISODE_META = ("episode_seeds", "policy_per_episode", "run_seeds_per_episode")
META_FIELDS = (
    "format",
    "version",
    "env_id",
    "population",
    "scenario",
    "num_users",
    "episodes",
    "tables",
)


class TraceError(ValueError):
    """A trace file that cannot be read as a PolicySim trace (names the file and column)."""


@dataclass
class Trace:
    """A loaded trace: ``meta`` (dict) and ``tables`` (table -> column -> array)."""

    meta: dict[str, Any]
    tables: dict[str, dict[str, np.ndarray]]
    path: Path | None = None

    def __getitem__(self, table: str) -> dict[str, np.ndarray]:
        return self.tables[table]

    def rows(self, table: str) -> int:
        columns = self.tables[table]
        return len(next(iter(columns.values()))) if columns else 0

    def select(self, users: np.ndarray | None = None, rounds: np.ndarray | None = None) -> Trace:
        """The trace restricted to ``users`` (ids) and/or ``rounds`` (round numbers); the
        population table keeps every user (features of the authors others saw)."""
        tables: dict[str, dict[str, np.ndarray]] = {}
        for name, columns in self.tables.items():
            keep = np.ones(self.rows(name), bool)
            who = columns.get("user", columns.get("src"))
            if users is not None and name != "population" and who is not None:
                keep &= np.isin(who, users)
            if rounds is not None and "round" in columns:
                keep &= np.isin(columns["round"], rounds)
            tables[name] = {key: value[keep] for key, value in columns.items()}
        if "reactions" in tables:  # re-point reactions at the kept impressions
            old = self.tables["impressions"]
            keep = np.ones(self.rows("impressions"), bool)
            if users is not None:
                keep &= np.isin(old["user"], users)
            if rounds is not None:
                keep &= np.isin(old["round"], rounds)
            new_index = np.full(len(keep) + 1, -1, np.int64)
            new_index[:-1][keep] = np.arange(int(keep.sum()))
            imp = tables["reactions"]["impression"]
            tables["reactions"]["impression"] = new_index[np.where(imp >= 0, imp, len(keep))]
        return Trace(dict(self.meta), tables, self.path)

    def episodes(self, ids: Sequence[int]) -> Trace:
        """The trace of episodes ``ids`` alone, renumbered 0, 1, … in the order given (the
        meta's per-episode lists follow)."""
        ids = [int(i) for i in ids]
        total = int(self.meta["episodes"])
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) >= total:
            raise ValueError(f"ids={ids} is not allowed: distinct episode ids in [0, {total})")
        renumber = np.full(total, -1, np.int64)
        renumber[ids] = np.arange(len(ids))
        # the kept impressions in the new episode order, and where each old row went
        imp_episode = self["impressions"]["episode"]
        order = np.concatenate([np.flatnonzero(imp_episode == i) for i in ids])
        new_row = np.full(self.rows("impressions") + 1, -1, np.int64)
        new_row[order] = np.arange(len(order))
        tables: dict[str, dict[str, np.ndarray]] = {}
        for name, columns in self.tables.items():
            rows = np.concatenate([np.flatnonzero(columns["episode"] == i) for i in ids])
            tables[name] = {col: values[rows] for col, values in columns.items()}
            tables[name]["episode"] = renumber[tables[name]["episode"]].astype(
                columns["episode"].dtype
            )
        imp = tables["reactions"]["impression"]
        tables["reactions"]["impression"] = new_row[np.where(imp >= 0, imp, -1)]
        meta = dict(self.meta)
        meta["episodes"] = len(ids)
        for key in PER_EPISODE_META:
            if isinstance(meta.get(key), list) and len(meta[key]) == total:
                meta[key] = [meta[key][i] for i in ids]
        meta["tables"] = {n: len(next(iter(c.values()))) for n, c in tables.items()}
        return Trace(meta, tables, self.path)


def merge_traces(traces: Sequence[Trace], meta: dict[str, Any] | None = None) -> Trace:
    """One trace of every episode of ``traces``, in order (episodes renumbered, reactions
    re-pointed at their impressions), e.g. runs of several policies or seeds recorded apart.
    The traces must share the env, population, scenario and number of users; the meta is the
    first trace's, with the per-episode lists joined (a key whose value differs between the
    traces becomes a per-episode list ``<key>_per_episode``), updated by ``meta``."""
    if not traces:
        raise ValueError("traces=[] is not allowed: at least one trace")
    first = traces[0].meta
    for trace in traces[1:]:
        for key in ("env_id", "population", "scenario", "num_users", "version"):
            if trace.meta.get(key) != first.get(key):
                raise TraceError(
                    f"{trace.path}: meta {key}={trace.meta.get(key)!r} differs from the first "
                    f"trace's {first.get(key)!r}; only traces of one env and population merge"
                )
    tables: dict[str, dict[str, list[np.ndarray]]] = {}
    episode_offset = impression_offset = 0
    for trace in traces:
        for name, columns in trace.tables.items():
            target = tables.setdefault(name, {col: [] for col in columns})
            for col, values in columns.items():
                if col == "episode":
                    values = (values + episode_offset).astype(values.dtype)
                elif name == "reactions" and col == "impression":
                    values = np.where(values >= 0, values + impression_offset, -1)
                target[col].append(values)
        episode_offset += int(trace.meta["episodes"])
        impression_offset += trace.rows("impressions")
    merged = {n: {c: np.concatenate(v) for c, v in cols.items()} for n, cols in tables.items()}
    out = {k: v for k, v in first.items() if k != "storage"}
    for key in PER_EPISODE_META:
        if all(isinstance(t.meta.get(key), list) for t in traces):
            out[key] = [v for t in traces for v in t.meta[key]]
    for key in sorted({k for t in traces for k in t.meta} - {"tables", "created", "storage"}):
        meta_values = [t.meta.get(key) for t in traces]
        if (
            key not in PER_EPISODE_META
            and key != "episodes"
            and any(v != meta_values[0] for v in meta_values)
        ):
            out[f"{key}_per_episode"] = [
                t.meta.get(key) for t in traces for _ in range(t.meta["episodes"])
            ]
            out.pop(key, None)
    out["episodes"] = episode_offset
    out["tables"] = {n: len(next(iter(c.values()))) for n, c in merged.items()}
    out.update(meta or {})
    return Trace(out, merged)


@dataclass
class _Episode:
    seed: int
    parts: dict[str, list[dict[str, np.ndarray]]] = field(
        default_factory=lambda: {t: [] for t in TABLES}
    )


class TraceRecorder:
    """Collects a trace from an env's rounds; ``write(path)`` writes it.

    Attach with ``env.unwrapped.trace(path=None, format="parquet")``: the env calls
    :meth:`start_episode` at each reset and :meth:`before_round` / :meth:`after_round` around
    every round. With a ``path`` the trace is (re)written at the end of every episode, so an
    interrupted run keeps its finished episodes.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        format: str = "parquet",
        meta: dict[str, Any] | None = None,
    ) -> None:
        if format not in TRACE_SUFFIXES:
            raise ValueError(f"format={format!r} is not allowed: one of {sorted(TRACE_SUFFIXES)}")
        self.path = None if path is None else Path(path)
        self.format = format
        self.extra_meta = dict(meta or {})
        self.episodes: list[_Episode] = []
        self._before: dict[str, np.ndarray] | None = None
        self._impression_rows = 0

    # ------------------------------------------------------------------ recording
    def start_episode(self, sim: Any) -> None:
        users = sim.users
        self.episodes.append(_Episode(seed=int(sim.seed)))
        self._impression_rows = sum(len(p["user"]) for p in self.episodes[-1].parts["impressions"])
        n = len(users.opinion)
        self._add(
            "population",
            {
                "user": np.arange(n, dtype=np.int64),
                "opinion_initial": users.opinion.astype(np.float32),
                "reply_frequency": np.asarray(users.profiles.reply_frequency, np.float32),
                "post_retweet_ratio": np.asarray(users.profiles.post_retweet_ratio, np.float32),
                "toxicity_propensity": users.toxicity_propensity.astype(np.float32),
                "susceptibility": users.susceptibility.astype(np.float32),
                "activity": users.activity.astype(np.float32),
            },
            round_=-1,
        )

    def before_round(self, sim: Any) -> None:
        if not self.episodes:
            self.start_episode(sim)
        users = sim.users
        self._before = {"opinion": users.opinion.copy(), "stance": users.stance.copy()}

    def after_round(self, sim: Any, result: Any) -> None:
        """Record round ``result`` (a :class:`socialenv.core.simulation.RoundResult`) of ``sim``."""
        if self._before is None:
            raise RuntimeError("TraceRecorder.after_round without before_round")
        t, users, posts, out = result.round, sim.users, sim.posts, result.output
        n = len(users.opinion)
        dropped = int(getattr(sim, "posts_dropped", 0))
        attitude = getattr(sim.brain, "round_attitude", None)
        if attitude is None or len(attitude) != n:
            attitude = self._before["opinion"]
        active = np.zeros(n, bool)
        active[result.active] = True
        self._add(
            "users",
            {
                "user": np.arange(n, dtype=np.int64),
                "active": active,
                "opinion_before": self._before["opinion"],
                "opinion_after": users.opinion.copy(),
                "attitude": np.asarray(attitude, np.float32),
                "stance_before": self._before["stance"],
                "stance_after": users.stance.copy(),
                "discrete_before": result.discrete_before.astype(np.int8),
                "discrete_after": users.discrete_stance.astype(np.int8),
                "misinformed_before": result.misinformed_before.copy(),
                "misinformed_after": users.misinformed.copy(),
            },
            t,
        )
        feed = result.feed
        rows, slots = np.nonzero(feed >= 0)
        who = result.active[rows]
        post = feed[rows, slots]
        similarity = np.einsum(
            "id,id->i", users.latent[who].astype(np.float64), posts.latent[post].astype(np.float64)
        )
        self._add(
            "impressions",
            {
                "user": who,
                "slot": slots.astype(np.int16),
                "post": post + dropped,
                "author": posts.author[post].astype(np.int64),
                "channel": result.feed_channel[rows, slots].astype(np.int8),
                "post_kind": posts.kind[post].astype(np.int8),
                "post_stance": posts.stance[post].astype(np.float32),
                "post_toxicity": posts.toxicity[post].astype(np.float32),
                "post_misinfo": posts.misinfo[post].astype(bool),
                "similarity": similarity.astype(np.float32),
            },
            t,
        )
        # the impression each reaction answers: (user, post) is unique within a round's feeds
        key = who * (len(posts) + 1) + post
        react_key = out.react_user.astype(np.int64) * (len(posts) + 1) + out.react_post
        impression = np.full(len(react_key), -1, np.int64)
        if len(key):
            order = np.argsort(key, kind="stable")
            pos = np.minimum(np.searchsorted(key[order], react_key), len(key) - 1)
            found = key[order][pos] == react_key
            impression[found] = order[pos[found]] + self._impression_rows
        self._impression_rows += len(who)
        self._add(
            "reactions",
            {
                "user": out.react_user.astype(np.int64),
                "post": out.react_post.astype(np.int64) + dropped,
                "impression": impression.astype(np.int64),
                "kind": out.react_kind.astype(np.int8),
                "toxicity": out.react_toxicity.astype(np.float32),
                "stance": out.react_stance.astype(np.float32),
            },
            t,
        )
        self._add(
            "posts",
            {
                "user": out.post_user.astype(np.int64),
                "stance": out.post_stance.astype(np.float32),
                "toxicity": out.post_toxicity.astype(np.float32),
                "misinfo": out.post_misinfo.astype(bool),
            },
            t,
        )
        self._add(
            "edges",
            {
                "src": np.concatenate([out.follow_src, out.unfollow_src]).astype(np.int64),
                "dst": np.concatenate([out.follow_dst, out.unfollow_dst]).astype(np.int64),
                "follow": np.concatenate(
                    [np.ones(len(out.follow_src), bool), np.zeros(len(out.unfollow_src), bool)]
                ),
            },
            t,
        )
        m = result.metrics
        self._add(
            "rounds",
            {
                key: np.array([m.get(key, np.nan)], np.float64)
                for key in SCHEMA["rounds"]
                if key not in ("episode", "round")
            },
            t,
        )
        self._before = None

    def _add(self, table: str, columns: dict[str, np.ndarray], round_: int) -> None:
        episode = self.episodes[-1]
        rows = len(next(iter(columns.values())))
        part = {"episode": np.full(rows, len(self.episodes) - 1, np.int32)}
        if "round" in SCHEMA[table]:
            part["round"] = np.full(rows, round_, np.int16)
        part.update(columns)
        episode.parts[table].append(part)

    # ------------------------------------------------------------------ output
    def tables(self) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        for table, schema in SCHEMA.items():
            parts = [p for e in self.episodes for p in e.parts[table]]
            out[table] = {
                col: (np.concatenate([p[col] for p in parts]) if parts else np.zeros(0))
                for col in schema
            }
        # impression indices were counted per episode: shift them to the whole table
        offsets, total = [], 0
        for e in self.episodes:
            offsets.append(total)
            total += sum(len(p["user"]) for p in e.parts["impressions"])
        react = out["reactions"]
        if len(react["impression"]) and len(offsets) > 1:
            shift = np.asarray(offsets)[react["episode"].astype(np.int64)]
            react["impression"] = np.where(
                react["impression"] >= 0, react["impression"] + shift, -1
            )
        return out

    def trace(self, env_meta: dict[str, Any] | None = None) -> Trace:
        meta = {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            **self.extra_meta,
            **(env_meta or {}),
            "episodes": len(self.episodes),
            "episode_seeds": [e.seed for e in self.episodes],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tables = self.tables()
        meta["tables"] = {name: len(next(iter(cols.values()))) for name, cols in tables.items()}
        return Trace(meta, tables)

    def write(self, path: str | Path | None = None, env_meta: dict[str, Any] | None = None) -> Path:
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("TraceRecorder.write needs a path (none was given to trace())")
        return write_trace(self.trace(env_meta), target, self.format)


# ---------------------------------------------------------------------- files
def write_trace(trace: Trace, path: str | Path, format: str = "parquet") -> Path:
    """Write ``trace`` to the folder ``path`` (created): meta.json and one file per table."""
    if format not in TRACE_SUFFIXES:
        raise ValueError(f"format={format!r} is not allowed: one of {sorted(TRACE_SUFFIXES)}")
    from policysim_infra.redaction import to_json

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {**trace.meta, "storage": format}
    for name, columns in trace.tables.items():
        file = folder / f"{name}{TRACE_SUFFIXES[format]}"
        if format == "npz":
            np.savez(file, **columns)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(
                pa.table({k: np.ascontiguousarray(v) for k, v in columns.items()}),
                file,
                compression="zstd",
            )
        for other in TRACE_SUFFIXES.values():  # a rewrite in the other format leaves no stale table
            stale = folder / f"{name}{other}"
            if stale != file and stale.exists():
                stale.unlink()
    (folder / "meta.json").write_text(to_json(meta, indent=2))
    return folder


def _read_table(folder: Path, name: str, storage: str) -> dict[str, np.ndarray]:
    file = folder / f"{name}{TRACE_SUFFIXES[storage]}"
    if not file.exists():
        raise TraceError(f"{file}: table {name!r} is missing from the trace")
    try:
        if storage == "npz":
            with np.load(file, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
        import pyarrow.parquet as pq

        table = pq.read_table(file)
        return {col: table.column(col).to_numpy() for col in table.column_names}
    except (OSError, ValueError) as err:
        raise TraceError(f"{file}: not a readable {storage} table: {err}") from err


def load_trace(
    path: str | Path, scenario: str | None = None, tables: tuple[str, ...] = TABLES
) -> Trace:
    """Read and check a trace folder. ``scenario``: refuse a trace of another scenario.

    Raises :class:`TraceError` (a ``ValueError``) naming the file and the column for a wrong
    format or version, a missing table or column, a column of the wrong type, a NaN or an id
    out of range."""
    folder = Path(path)
    meta_file = folder / "meta.json"
    if not meta_file.exists():
        raise TraceError(f"{meta_file}: not a trace folder (no meta.json)")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise TraceError(f"{meta_file}: not JSON: {err}") from err
    if not isinstance(meta, dict):
        raise TraceError(f"{meta_file}: a JSON object is required")
    for key in META_FIELDS:
        if key not in meta:
            raise TraceError(f"{meta_file}: field {key!r} is missing")
    if meta["format"] != TRACE_FORMAT:
        raise TraceError(f"{meta_file}: format={meta['format']!r} is not allowed: {TRACE_FORMAT!r}")
    if meta["version"] != TRACE_VERSION:
        raise TraceError(
            f"{meta_file}: version={meta['version']!r} is not allowed: this PolicySim reads "
            f"trace version {TRACE_VERSION}"
        )
    if scenario is not None and meta["scenario"] != scenario:
        raise TraceError(
            f"{meta_file}: scenario={meta['scenario']!r} is not allowed: this fit is for "
            f"scenario {scenario!r}"
        )
    storage = meta.get("storage", "parquet")
    if storage not in TRACE_SUFFIXES:
        raise TraceError(
            f"{meta_file}: storage={storage!r} is not allowed: one of {sorted(TRACE_SUFFIXES)}"
        )
    n = int(meta["num_users"])
    loaded: dict[str, dict[str, np.ndarray]] = {}
    for name in tables:
        columns = _read_table(folder, name, storage)
        file = folder / f"{name}{TRACE_SUFFIXES[storage]}"
        rows = None
        for col, (kind, _) in SCHEMA[name].items():
            if col not in columns:
                raise TraceError(f"{file}: column {col!r} is missing")
            values = columns[col]
            if rows is None:
                rows = len(values)
            if len(values) != rows:
                raise TraceError(f"{file}: column {col!r} has {len(values)} rows, the table {rows}")
            ok_kind = values.dtype.kind in (
                {"i", "u"} if kind == "i" else {"b"} if kind == "b" else {"f"}
            )
            if not ok_kind and len(values):
                raise TraceError(
                    f"{file}: column {col!r} has dtype {values.dtype}; a "
                    f"{ {'i': 'integer', 'b': 'boolean', 'f': 'float'}[kind] } column is required"
                )
            if kind == "f" and len(values) and not np.all(np.isfinite(values)) and name != "rounds":
                bad = int(np.flatnonzero(~np.isfinite(values))[0])
                raise TraceError(
                    f"{file}: column {col!r} holds {values[bad]} at row {bad}: finite numbers only"
                )
        for col in ("user", "author", "src", "dst"):
            if (
                col in columns
                and len(columns[col])
                and (columns[col].min() < 0 or columns[col].max() >= n)
            ):
                raise TraceError(
                    f"{file}: column {col!r} holds a user id outside 0..{n - 1} (num_users={n})"
                )
        loaded[name] = {col: columns[col] for col in SCHEMA[name]}
    if "reactions" in loaded and "impressions" in loaded:
        imp = loaded["reactions"]["impression"]
        if len(imp) and imp.max() >= len(loaded["impressions"]["user"]):
            raise TraceError(
                f"{folder / ('reactions' + TRACE_SUFFIXES[storage])}: column 'impression' "
                "points past the impressions table"
            )
    return Trace(meta, loaded, folder)
