"""TwiBot-20 → :class:`~socialenv.scenarios.scenario.Scenario`.

Accepted format (the public TwiBot-20 release: ``train.json``, ``dev.json``, ``test.json``,
``support.json``): each file is one JSON array of user objects::

    {"ID": "17461978",
     "profile": {"id": "17461978 ", "screen_name": "SHAQ ", "name": "SHAQ ",
                 "description": "... ", "followers_count": "15349596 ",
                 "friends_count": "692 ", "statuses_count": "9798 ",
                 "verified": "True ", ...},          # Twitter v1.1 fields as strings
     "tweet": ["RT @user: text", "@friend reply", "a post", ...] | null,
     "neighbor": {"following": ["id", ...], "follower": ["id", ...]} | null,
     "domain": ["Politics", "Business"],
     "label": "0" | "1"}                             # 0 human, 1 bot; absent in support.json

Profile strings carry a trailing space; numbers are parsed from them (missing count fields
count as 0). Tweets are taken to be most recent first (the release stores no timestamps).
A tweet starting with ``RT @`` is a retweet, one starting with ``@`` a reply, anything else
a post.

What is kept: users whose ``label`` is in ``keep_labels`` (default humans, ``"0"``; users
without a label only with ``keep_unlabelled=True``) and whose ``domain`` contains ``domain``
(default ``"Politics"``, as the paper; None keeps every domain) and, with
``require_tweets_and_neighbors`` (default, as the paper's preprocessing), that have at least
one tweet and a non-empty ``neighbor`` entry. With ``max_users`` the most
active users (most tweets) are kept. The follow graph is ``neighbor.following`` (user →
followee) and ``neighbor.follower`` (follower → user) restricted to kept users.

A record that does not fit raises :class:`DatasetFormatError` naming the file, the record
(index and ID) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.profile import UserRecord, classify_tweet
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

#: Files read when a TwiBot-20 folder is given (``support.json`` only with keep_unlabelled).
SPLIT_FILES = ("train.json", "dev.json", "test.json")


def _files(paths: str | Path | Sequence[str | Path], keep_unlabelled: bool) -> list[Path]:
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            names = SPLIT_FILES + (("support.json",) if keep_unlabelled else ())
            found = [p / n for n in names if (p / n).exists()]
            if not found:
                raise FileNotFoundError(
                    f"{p}: no TwiBot-20 file ({', '.join(names)}) in this folder"
                )
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"TwiBot-20 file {p} does not exist")
    return files


#: Largest count read (2^53).
MAX_COUNT = 2**53


def _int_field(value: Any, file: Path, record: str, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise DatasetFormatError(
            file, record, name, f"expected an integer string like '123 ', got {value!r}"
        )
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        s = value.strip()
        if s in ("", "None"):
            return 0
        if s.isascii() and s.isdigit() and len(s) <= 16:
            number = int(s)
    if number is None or abs(number) > MAX_COUNT:
        raise DatasetFormatError(
            file,
            record,
            name,
            f"expected an integer string like '123 ' (at most {MAX_COUNT}), got {value!r}",
        )
    return number


def _str_field(value: Any, file: Path, record: str, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DatasetFormatError(
            file, record, name, f"expected a string, got {type(value).__name__}"
        )
    s = value.strip()
    return "" if s == "None" else s


def _bool_field(value: Any, file: Path, record: str, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip() in ("True", "False", "true", "false", "None", ""):
        return value.strip() in ("True", "true")
    raise DatasetFormatError(file, record, name, f"expected 'True ' or 'False ', got {value!r}")


def _id_list(value: Any, file: Path, record: str, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DatasetFormatError(
            file, record, name, f"expected a list of user IDs, got {type(value).__name__}"
        )
    out = []
    for k, v in enumerate(value):
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise DatasetFormatError(
                file, record, f"{name}[{k}]", f"expected a user ID string, got {v!r}"
            )
        out.append(str(v).strip())
    return out


def _parse_user(raw: Any, file: Path, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DatasetFormatError(
            file, index, None, f"expected a user object, got {type(raw).__name__}"
        )
    uid = raw.get("ID")
    if not isinstance(uid, (str, int)) or isinstance(uid, bool) or not str(uid).strip():
        raise DatasetFormatError(
            file, index, "ID", f"missing or not a non-empty ID string: {uid!r}"
        )
    uid = str(uid).strip()
    rec = f"{index} (ID {uid})"
    profile = raw.get("profile")
    if not isinstance(profile, dict):
        raise DatasetFormatError(
            file,
            rec,
            "profile",
            f"expected an object of profile fields, got {type(profile).__name__}",
        )
    label = raw.get("label")
    if label is not None:
        label = str(label).strip()
        if label not in ("0", "1"):
            raise DatasetFormatError(
                file, rec, "label", f"expected '0' (human) or '1' (bot), got {raw.get('label')!r}"
            )
    domain = raw.get("domain")
    if domain is None:
        domains: list[str] = []
    elif isinstance(domain, str):
        domains = [domain.strip()]
    elif isinstance(domain, list) and all(isinstance(d, str) for d in domain):
        domains = [d.strip() for d in domain]
    else:
        raise DatasetFormatError(
            file, rec, "domain", f"expected a list of domain names, got {domain!r}"
        )
    tweets = raw.get("tweet")
    if tweets is None:
        tweets = []
    if not isinstance(tweets, list):
        raise DatasetFormatError(
            file,
            rec,
            "tweet",
            f"expected a list of tweet texts or null, got {type(tweets).__name__}",
        )
    texts: list[str] = []
    for k, t in enumerate(tweets):
        if t is None:
            continue
        if not isinstance(t, str):
            raise DatasetFormatError(
                file, rec, f"tweet[{k}]", f"expected a tweet text, got {type(t).__name__}"
            )
        if t.strip():
            texts.append(t.strip())
    neighbor = raw.get("neighbor")
    if neighbor is not None and not isinstance(neighbor, dict):
        raise DatasetFormatError(
            file,
            rec,
            "neighbor",
            f"expected {{'following': [...], 'follower': [...]}} or null, got {type(neighbor).__name__}",
        )
    neighbor = neighbor or {}
    return {
        "id": uid,
        "label": label,
        "domains": domains,
        "tweets": texts,
        "following": _id_list(neighbor.get("following"), file, rec, "neighbor.following"),
        "follower": _id_list(neighbor.get("follower"), file, rec, "neighbor.follower"),
        "screen_name": _str_field(profile.get("screen_name"), file, rec, "profile.screen_name")
        or uid,
        "description": _str_field(profile.get("description"), file, rec, "profile.description"),
        "followers": _int_field(
            profile.get("followers_count"), file, rec, "profile.followers_count"
        ),
        "following_count": _int_field(
            profile.get("friends_count"), file, rec, "profile.friends_count"
        ),
        "statuses": _int_field(profile.get("statuses_count"), file, rec, "profile.statuses_count"),
        "verified": _bool_field(profile.get("verified"), file, rec, "profile.verified"),
    }


def _read_file(file: Path) -> list[Any]:
    try:
        with file.open(encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(
            file, None, None, f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(file, None, None, f"not UTF-8 text: {exc}") from exc
    except RecursionError:
        raise DatasetFormatError(file, None, None, "not valid JSON: nested too deeply") from None
    if not isinstance(data, list):
        raise DatasetFormatError(
            file, None, None, f"expected a JSON array of users, got {type(data).__name__}"
        )
    return data


def _split_retweet(text: str) -> tuple[str | None, str]:
    """('author', 'retweeted text') of ``RT @author: text``."""
    body = text.lstrip()[3:]  # after "RT "
    head, sep, rest = body.partition(":")
    if sep and head.startswith("@") and " " not in head.strip():
        return head.strip()[1:], rest.strip()
    return None, body.strip()


def read_twibot20(
    paths: str | Path | Sequence[str | Path],
    *,
    domain: str | None = "Politics",
    keep_labels: Sequence[str] = ("0",),
    keep_unlabelled: bool = False,
    require_tweets_and_neighbors: bool = True,
    config: LoaderConfig | None = None,
    backend: Any = None,
) -> LoadedDataset:
    """Read TwiBot-20 file(s) or a folder into a scenario plus the observed actions.

    Args:
        paths: a JSON file, a list of them, or the dataset folder (train/dev/test.json).
        domain: keep users whose ``domain`` list contains this (case-insensitive); None = all.
        keep_labels: labels kept ("0" humans, "1" bots).
        keep_unlabelled: also keep users without a label (``support.json``).
        require_tweets_and_neighbors: drop users without tweets or without any neighbor
            (in the whole dataset, before restricting the graph to kept users).
        config: loader options (:class:`LoaderConfig`); topic defaults to the domain.
        backend: an LLM backend of :mod:`agent_models.llm` for profiles and stance.
    """
    config = config or LoaderConfig()
    keep_labels = tuple(str(label) for label in keep_labels)
    files = _files(paths, keep_unlabelled)
    users: list[dict[str, Any]] = []
    seen: set[str] = set()
    want = domain.strip().lower() if domain else None
    for file in files:
        for index, raw in enumerate(_read_file(file)):
            user = _parse_user(raw, file, index)
            if user["label"] is None and not keep_unlabelled:
                continue
            if user["label"] is not None and user["label"] not in keep_labels:
                continue
            if want is not None and want not in {d.lower() for d in user["domains"]}:
                continue
            if require_tweets_and_neighbors and not (
                user["tweets"] and (user["following"] or user["follower"])
            ):
                continue
            if user["id"] in seen:
                continue
            seen.add(user["id"])
            users.append(user)
    if len(users) < 2:
        raise ValueError(
            f"{', '.join(map(str, files))}: {len(users)} user(s) match domain={domain!r}, "
            f"labels={keep_labels}; a scenario needs at least 2"
        )
    chosen = select_users(
        np.array([len(u["tweets"]) for u in users], dtype=np.float64), config.max_users
    )
    users = [users[int(i)] for i in chosen]
    row = {u["id"]: i for i, u in enumerate(users)}
    n = len(users)

    src: list[int] = []
    dst: list[int] = []
    for i, u in enumerate(users):
        for v in u["following"]:
            if v in row:
                src.append(i)
                dst.append(row[v])
        for w in u["follower"]:
            if w in row:
                src.append(row[w])
                dst.append(i)
    follow_src, follow_dst = dedupe_edges(src, dst, n)

    topic = config.topic or (
        f"{domain} discussion on Twitter" if domain else "public discussion on Twitter"
    )
    records: list[UserRecord] = []
    posts: list[RawPost] = []
    for i, u in enumerate(users):
        kinds = [int(classify_tweet(t)) for t in u["tweets"]]
        records.append(
            UserRecord(
                name=u["screen_name"],
                description=u["description"],
                posts=u["tweets"],
                kinds=kinds,
                followers=u["followers"],
                following=u["following_count"],
                verified=u["verified"],
                domains=tuple(u["domains"]),
                statuses=u["statuses"] or None,
            )
        )
        for k, (text, kind) in enumerate(zip(u["tweets"], kinds, strict=True)):
            target_author = target_text = None
            if kind == PostKind.RETWEET:
                target_author, target_text = _split_retweet(text)
            elif kind == PostKind.REPLY:
                target_author = text.split()[0][1:].rstrip(":,")
            posts.append(
                RawPost(
                    user=i,
                    text=text,
                    kind=PostKind(kind),
                    time=float(-k),
                    target_text=target_text,
                    target_author=target_author,
                )
            )
    total = np.array([max(u["statuses"], len(u["tweets"])) for u in users], dtype=np.float64)
    name = f"twibot20-{domain.lower()}" if domain else "twibot20"
    return assemble(
        name=name,
        topic=topic,
        records=records,
        posts=posts,
        follow_src=follow_src,
        follow_dst=follow_dst,
        total_posts=total,
        config=config,
        backend=backend,
        user_ids=[u["id"] for u in users],
        source=files[0] if len(files) == 1 else files[0].parent,
    )


def load_twibot20(
    paths: str | Path | Sequence[str | Path],
    *,
    domain: str | None = "Politics",
    keep_labels: Sequence[str] = ("0",),
    keep_unlabelled: bool = False,
    require_tweets_and_neighbors: bool = True,
    config: LoaderConfig | None = None,
    backend: Any = None,
) -> Scenario:
    """The :class:`Scenario` of :func:`read_twibot20` (same arguments)."""
    return read_twibot20(
        paths,
        domain=domain,
        keep_labels=keep_labels,
        keep_unlabelled=keep_unlabelled,
        require_tweets_and_neighbors=require_tweets_and_neighbors,
        config=config,
        backend=backend,
    ).scenario
