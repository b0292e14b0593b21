"""Weibo rumour dataset (Ma et al., IJCAI 2016) → :class:`~socialenv.scenarios.scenario.Scenario`.

Accepted format (the release's layout)::

    <root>/Weibo.txt            one event per line:
                                eid:<event id>\\tlabel:<0|1>\\t<mid> <mid> ...
                                (label 1 = rumour, 0 = non-rumour; tabs or spaces)
    <root>/Weibo/<eid>.json     (or <root>/<eid>.json) the event's posts: a JSON array of
                                objects, the source post first, then its reposts

Fields read from each post object (others are ignored):

=================  =========  ====================================================
``mid``            required   post id (string or integer)
``uid``            required   author id (string or integer)
``text``           required   text (a repost's comment; may be empty)
``t``              required   unix time in seconds (integer or numeric string)
``parent``         optional   mid of the reposted post; null / "" / absent = source
``screen_name`` /  optional   display name
``username``
``user_description`` optional bio
``followers_count``, ``friends_count``, ``statuses_count``  optional counts (int or numeric string)
``verified``       optional   bool or "True"/"False"
=================  =========  ====================================================

What is built: one user per ``uid`` (with ``max_users``, the most active ones); their
posts become history (the source post is kind POST, every repost kind RETWEET whose
``target_text`` is the parent's text); the dataset has no follow graph, so the graph is
the **repost graph**: a reposter follows the author of the post it reposted (Weibo reposts
spread along follow edges, so this is a lower bound of the real follow graph). Posts of
rumour events are misinformation posts; users who posted or reposted in a rumour event
start out misinformed; susceptibility = (rumour events joined + 2·prior) / (events joined +
2) with prior ``LoaderConfig.default_susceptibility``; the misinformation message is the
source text of the largest rumour event. Each post's ``event`` is its event's source text.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.profile import UserRecord
from agent_models.types import PostKind
from socialenv.scenarios.loaders.common import (
    DatasetFormatError,
    LoadedDataset,
    LoaderConfig,
    RawPost,
    assemble,
    dedupe_edges,
    select_users,
)
from socialenv.scenarios.scenario import Scenario

_LINE = re.compile(r"^eid:(\S+)\s+label:(\S+)\s*(.*)$")
#: An event id: it names ``<eid>.json`` inside the dataset folder, so no separators or dots.
_EID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def _index(root: Path) -> tuple[Path, list[tuple[str, int]]]:
    index_file = root / "Weibo.txt" if root.is_dir() else root
    if not index_file.exists():
        raise FileNotFoundError(f"Weibo index file {index_file} does not exist")
    events: list[tuple[str, int]] = []
    try:
        index_text = index_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(index_file, None, None, f"not UTF-8 text: {exc}") from exc
    for lineno, line in enumerate(index_text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if m is None:
            raise DatasetFormatError(
                index_file,
                f"line {lineno}",
                "eid",
                f"expected 'eid:<id> label:<0|1> <mids...>', got {line[:80]!r}",
            )
        eid, label = m.group(1), m.group(2)
        if not _EID.fullmatch(eid):
            raise DatasetFormatError(
                index_file,
                f"line {lineno}",
                "eid",
                f"an event id is letters, digits, '_' and '-' (it names a file "
                f"in the dataset folder), got {eid[:80]!r}",
            )
        if label not in ("0", "1"):
            raise DatasetFormatError(
                index_file,
                f"line {lineno} (eid {eid})",
                "label",
                f"expected 0 (non-rumour) or 1 (rumour), got {label!r}",
            )
        events.append((eid, int(label)))
    if not events:
        raise DatasetFormatError(index_file, None, None, "no events listed")
    return index_file, events


def _event_file(index_file: Path, eid: str) -> Path:
    root = index_file.parent
    for candidate in (root / "Weibo" / f"{eid}.json", root / f"{eid}.json"):
        if not candidate.resolve().is_relative_to(root.resolve()):
            raise DatasetFormatError(
                index_file, f"eid {eid}", "eid", "the event file is outside the dataset folder"
            )
        if candidate.exists():
            return candidate
    raise DatasetFormatError(
        index_file,
        f"eid {eid}",
        "eid",
        f"event file not found (looked for Weibo/{eid}.json and {eid}.json in {root})",
    )


#: Largest magnitude of a count or timestamp (2^53: every integer up to it is exact in a float).
MAX_NUMBER = float(2**53)


def _num(value: Any, file: Path, rec: str, name: str, *, required: bool = False) -> float:
    if value is None or value == "":
        if required:
            raise DatasetFormatError(file, rec, name, "missing (expected a number)")
        return 0.0
    if isinstance(value, bool):
        raise DatasetFormatError(file, rec, name, f"expected a number, got {value!r}")
    number: float | None = None
    if isinstance(value, (int, float)):
        number = float(value) if abs(value) <= MAX_NUMBER else math.inf
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            pass
    if number is None:
        raise DatasetFormatError(file, rec, name, f"expected a number, got {value!r}")
    if not math.isfinite(number) or abs(number) > MAX_NUMBER:
        raise DatasetFormatError(
            file,
            rec,
            name,
            f"expected a finite number of at most {MAX_NUMBER:.0e} in size, got {value!r}",
        )
    return number


def _ident(value: Any, file: Path, rec: str, name: str, *, required: bool) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise DatasetFormatError(file, rec, name, "missing (expected an id)")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DatasetFormatError(
            file, rec, name, f"expected an id (string or integer), got {value!r}"
        )
    return str(value).strip()


def _parse_event(file: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(
            file, None, None, f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(file, None, None, f"not UTF-8 text: {exc}") from exc
    except RecursionError:
        raise DatasetFormatError(file, None, None, "not valid JSON: nested too deeply") from None
    if not isinstance(data, list) or not data:
        raise DatasetFormatError(file, None, None, "expected a non-empty JSON array of posts")
    posts = []
    for k, raw in enumerate(data):
        if not isinstance(raw, dict):
            raise DatasetFormatError(
                file, k, None, f"expected a post object, got {type(raw).__name__}"
            )
        mid = _ident(raw.get("mid"), file, str(k), "mid", required=True)
        rec = f"{k} (mid {mid})"
        text = raw.get("text")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise DatasetFormatError(
                file, rec, "text", f"expected a string, got {type(text).__name__}"
            )
        verified = raw.get("verified", False)
        if isinstance(verified, str):
            if verified.strip() not in ("True", "False", "true", "false", ""):
                raise DatasetFormatError(
                    file, rec, "verified", f"expected a boolean, got {verified!r}"
                )
            verified = verified.strip() in ("True", "true")
        elif not isinstance(verified, (bool, int)) and verified is not None:
            raise DatasetFormatError(file, rec, "verified", f"expected a boolean, got {verified!r}")
        name = raw.get("screen_name") or raw.get("username")
        if name is not None and not isinstance(name, str):
            raise DatasetFormatError(file, rec, "screen_name", f"expected a string, got {name!r}")
        bio = raw.get("user_description") or ""
        if not isinstance(bio, str):
            raise DatasetFormatError(
                file, rec, "user_description", f"expected a string, got {bio!r}"
            )
        posts.append(
            {
                "mid": mid,
                "uid": _ident(raw.get("uid"), file, rec, "uid", required=True),
                "parent": _ident(raw.get("parent"), file, rec, "parent", required=False),
                "text": text.strip(),
                "t": _num(raw.get("t"), file, rec, "t", required=True),
                "name": (name or "").strip(),
                "bio": bio.strip(),
                "followers": _num(raw.get("followers_count"), file, rec, "followers_count"),
                "following": _num(raw.get("friends_count"), file, rec, "friends_count"),
                "statuses": _num(raw.get("statuses_count"), file, rec, "statuses_count"),
                "verified": bool(verified),
            }
        )
    return posts


def read_weibo(
    root: str | Path,
    *,
    max_events: int | None = None,
    config: LoaderConfig | None = None,
    backend: Any = None,
) -> LoadedDataset:
    """Read the Weibo rumour dataset (format in the module docstring).

    Args:
        root: the folder holding ``Weibo.txt`` (or the path of ``Weibo.txt`` itself).
        max_events: read only the first ``max_events`` events of the index.
        config: loader options; topic defaults to "rumours and news events on Weibo".
        backend: an LLM backend of :mod:`agent_models.llm` for profiles and stance.
    """
    config = config or LoaderConfig()
    index_file, events = _index(Path(root))
    if max_events is not None:
        events = events[:max_events]

    user_info: dict[str, dict[str, Any]] = {}
    user_posts: dict[str, list[tuple[dict[str, Any], int, str]]] = {}
    event_users: dict[str, set[str]] = {}
    rumour_users: dict[str, set[str]] = {}
    event_sizes: list[tuple[int, str]] = []
    mid_info: dict[str, tuple[str, str]] = {}  # mid -> (uid, text)
    parsed_events: list[tuple[str, int, list[dict[str, Any]]]] = []
    for eid, label in events:
        posts = _parse_event(_event_file(index_file, eid))
        parsed_events.append((eid, label, posts))
        for p in posts:
            mid_info[p["mid"]] = (p["uid"], p["text"])
    for eid, label, posts in parsed_events:
        source_text = posts[0]["text"]
        if label == 1:
            event_sizes.append((len(posts), source_text))
        for p in posts:
            uid = p["uid"]
            info = user_info.setdefault(
                uid,
                {
                    "name": "",
                    "bio": "",
                    "followers": 0.0,
                    "following": 0.0,
                    "statuses": 0.0,
                    "verified": False,
                    "t": -np.inf,
                },
            )
            if p["t"] >= info["t"]:  # latest post's user fields win
                info.update(t=p["t"], name=p["name"] or info["name"], bio=p["bio"] or info["bio"])
            info["followers"] = max(info["followers"], p["followers"])
            info["following"] = max(info["following"], p["following"])
            info["statuses"] = max(info["statuses"], p["statuses"])
            info["verified"] = info["verified"] or p["verified"]
            user_posts.setdefault(uid, []).append((p, label, source_text))
            event_users.setdefault(uid, set()).add(eid)
            if label == 1:
                rumour_users.setdefault(uid, set()).add(eid)

    uids = list(user_posts)
    chosen = select_users(
        np.array([len(user_posts[u]) for u in uids], dtype=np.float64), config.max_users
    )
    uids = [uids[int(i)] for i in chosen]
    row = {u: i for i, u in enumerate(uids)}
    n = len(uids)

    records: list[UserRecord] = []
    raw_posts: list[RawPost] = []
    src: list[int] = []
    dst: list[int] = []
    for i, uid in enumerate(uids):
        info = user_info[uid]
        items = sorted(
            user_posts[uid], key=lambda x: (-x[0]["t"], x[0]["mid"])
        )  # most recent first
        texts, kinds = [], []
        for p, label, source_text in items:
            parent = p["parent"]
            kind = PostKind.POST if parent is None else PostKind.RETWEET
            target_uid, target_text = mid_info.get(parent, (None, None)) if parent else (None, None)
            if target_uid is not None and target_uid in row:
                src.append(i)
                dst.append(row[target_uid])
            text = p["text"] or (target_text or "")
            texts.append(text)
            kinds.append(int(kind))
            raw_posts.append(
                RawPost(
                    user=i,
                    text=text,
                    kind=kind,
                    time=p["t"],
                    misinfo=label == 1,
                    event=source_text,
                    target_text=target_text,
                    target_author=user_info[target_uid]["name"] or target_uid
                    if target_uid
                    else None,
                )
            )
        records.append(
            UserRecord(
                name=info["name"] or uid,
                description=info["bio"],
                posts=texts,
                kinds=kinds,
                followers=int(info["followers"]),
                following=int(info["following"]),
                verified=bool(info["verified"]),
                statuses=int(info["statuses"]) or None,
            )
        )
    follow_src, follow_dst = dedupe_edges(src, dst, n)
    joined = np.array([len(event_users[u]) for u in uids], dtype=np.float32)
    rumours = np.array([len(rumour_users.get(u, ())) for u in uids], dtype=np.float32)
    prior = config.default_susceptibility
    susceptibility = (rumours + 2 * prior) / (joined + 2)
    misinformed = rumours > 0
    message = max(event_sizes)[1] if event_sizes else None
    total = np.array(
        [max(user_info[u]["statuses"], len(user_posts[u])) for u in uids], dtype=np.float64
    )
    return assemble(
        name="weibo-rumour",
        topic=config.topic or "rumours and news events on Weibo",
        records=records,
        posts=raw_posts,
        follow_src=follow_src,
        follow_dst=follow_dst,
        total_posts=total,
        config=config,
        backend=backend,
        susceptibility=susceptibility,
        misinformed=misinformed,
        misinformation_message=message,
        user_ids=uids,
        source=index_file.parent,
    )


def load_weibo(
    root: str | Path,
    *,
    max_events: int | None = None,
    config: LoaderConfig | None = None,
    backend: Any = None,
) -> Scenario:
    """The :class:`Scenario` of :func:`read_weibo` (same arguments)."""
    return read_weibo(root, max_events=max_events, config=config, backend=backend).scenario
