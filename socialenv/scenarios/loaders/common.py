"""Shared parts of the dataset loaders: errors, configuration, stance / toxicity scoring and
the assembly of a :class:`~socialenv.scenarios.scenario.Scenario` from parsed users and posts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent_models.encoders import TextEncoder, load_encoder
from agent_models.profile import (
    TOPICS,
    UserRecord,
    extract_profiles,
    profile_text,
    sentiment_scores,
)
from agent_models.training.records import ObservedAction
from agent_models.types import Behaviour, NewsEvent, PostKind
from policysim_infra.extras import DependencyNotInstalled, require
from policysim_infra.validation import config_error
from socialenv.scenarios.scenario import Scenario


class DatasetFormatError(ValueError):
    """A dataset file does not have the expected format.

    Attributes:
        file: the offending file.
        record: index or ID of the record (None for file-level problems).
        field: the field (dotted path, e.g. ``profile.followers_count``), or None.
    """

    def __init__(self, file: str | Path, record: int | str | None, field: str | None, message: str):
        self.file = str(file)
        self.record = record
        self.field = field
        where = [self.file]
        if record is not None:
            where.append(f"record {record}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join(where)}: {message}")


@dataclass
class LoaderConfig:
    """Options shared by the loaders; every default is documented here.

    Attributes:
        topic: topic description used in prompts (default: set by each loader).
        max_users: keep at most this many users (the most active ones); None keeps all.
        max_history_per_user: most recent posts per user kept as ``Scenario.history_*``
            (all observed posts still feed the profile statistics and the actions). Default 20.
        encoder: sentence encoder spec for latents and post embeddings (see
            :func:`agent_models.encoders.load_encoder`): "auto" = shipped MiniLM if
            installed, else the deterministic hashing encoder; "hash"; or a model path.
        profile: "auto" (LLM if a backend is given, else heuristic), "heuristic" or "llm".
        stance: "auto" (LLM if a backend is given, else heuristic), "heuristic" or "llm".
        topic_keywords: a post is on-topic if it contains one (empty: every post is).
        pro_keywords / anti_keywords: keywords counting +1 / -1 toward the topic.
        stance_threshold: |score| above which the heuristic stance is +-1 (default 0.3).
        sentiment_weight: weight of the VADER compound score in the heuristic (default 0.5).
        toxicity: "auto" (alt-profanity-check if installed, else lexicon), "profanity",
            "lexicon".
        activity_floor / activity_ceiling: activity = floor + (ceiling - floor) * percentile
            rank of the user's post count (defaults 0.05 / 0.9).
        default_susceptibility: prior mean susceptibility to misinformation (0.3); Weibo
            updates it with the user's share of rumour events (prior strength 2).
        news: news events to attach to the scenario.
        seed: for tie-breaking only (loading is deterministic).
    """

    topic: str | None = None
    max_users: int | None = None
    max_history_per_user: int = 20
    encoder: str | TextEncoder = "auto"
    profile: Literal["auto", "heuristic", "llm"] = "auto"
    stance: Literal["auto", "heuristic", "llm"] = "auto"
    topic_keywords: tuple[str, ...] = ()
    pro_keywords: tuple[str, ...] = ()
    anti_keywords: tuple[str, ...] = ()
    stance_threshold: float = 0.3
    sentiment_weight: float = 0.5
    toxicity: Literal["auto", "profanity", "lexicon"] = "auto"
    activity_floor: float = 0.05
    activity_ceiling: float = 0.9
    default_susceptibility: float = 0.3
    news: list[NewsEvent] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        for name, allowed in (
            ("profile", ("auto", "heuristic", "llm")),
            ("stance", ("auto", "heuristic", "llm")),
            ("toxicity", ("auto", "profanity", "lexicon")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"LoaderConfig.{name}={getattr(self, name)!r} is not allowed: use one of {allowed}"
                )
        if self.max_users is not None and self.max_users < 2:
            raise config_error("LoaderConfig.max_users", self.max_users, "an integer >= 2 or None")
        if self.max_history_per_user < 0:
            raise config_error(
                "LoaderConfig.max_history_per_user", self.max_history_per_user, "an integer >= 0"
            )
        if not 0.0 <= self.activity_floor <= self.activity_ceiling <= 1.0:
            raise ValueError("LoaderConfig: need 0 <= activity_floor <= activity_ceiling <= 1")


@dataclass
class LoadedDataset:
    """What a loader read: the scenario, the observed actions, and the source ids.

    Attributes:
        scenario: the population, graph and history as arrays.
        actions: every observed post / retweet / reply of the kept users (SFT material).
        user_ids: dataset ID of each scenario user (row order).
        descriptions: bio of each user.
        source: the file or folder read.
    """

    scenario: Scenario
    actions: list[ObservedAction]
    user_ids: list[str]
    descriptions: list[str]
    source: Path


@dataclass
class RawPost:
    """A parsed post before assembly (``user`` is the kept-user row)."""

    user: int
    text: str
    kind: PostKind
    time: float
    misinfo: bool = False
    event: str | None = None
    target_text: str | None = None
    target_author: str | None = None


_KIND_TO_BEHAVIOUR = {
    PostKind.POST: Behaviour.POST,
    PostKind.RETWEET: Behaviour.RETWEET,
    PostKind.REPLY: Behaviour.REPLY,
}

# ---------------------------------------------------------------- stance


_TOKEN = re.compile(r"[#@]?\w+", re.UNICODE)


def _contains(text: str, keyword: str) -> bool:
    keyword = keyword.lower()
    if " " in keyword or not keyword.isascii():
        return keyword in text
    return any(tok.lstrip("#@").startswith(keyword.lstrip("#@")) for tok in _TOKEN.findall(text))


def heuristic_stance(
    texts: Sequence[str],
    *,
    topic_keywords: Sequence[str] = (),
    pro_keywords: Sequence[str] = (),
    anti_keywords: Sequence[str] = (),
    threshold: float = 0.3,
    sentiment_weight: float = 0.5,
) -> np.ndarray:
    """(n,) int8 stance in {-1, 0, +1} toward the topic, without a model.

    score = (#pro keywords - #anti keywords) + sentiment_weight * VADER compound, for posts
    that are on-topic (contain a topic keyword, or any post if none are given); off-topic
    posts are 0. The stance is sign(score) where |score| > threshold. This is a crude proxy:
    sentiment is not stance; give pro/anti keywords for the topic, or an LLM backend.
    """
    n = len(texts)
    lowered = [t.lower() for t in texts]
    on_topic = np.array(
        [not topic_keywords or any(_contains(t, k) for k in topic_keywords) for t in lowered],
        dtype=bool,
    )
    score = np.zeros(n, dtype=np.float32)
    for i, t in enumerate(lowered):
        score[i] = sum(_contains(t, k) for k in pro_keywords) - sum(
            _contains(t, k) for k in anti_keywords
        )
    if sentiment_weight:
        try:
            score += sentiment_weight * sentiment_scores(list(texts))
        except ImportError:
            pass
    stance = np.where(score > threshold, 1, np.where(score < -threshold, -1, 0)).astype(np.int8)
    stance[~on_topic] = 0
    return stance


def llm_stance(
    texts: Sequence[str],
    topic: str,
    backend: Any,
    *,
    author_names: Sequence[str] | None = None,
    max_new_tokens: int = 16,
) -> tuple[np.ndarray, int]:
    """(n,) int8 stance of each post from an LLM backend and the number of answers that did
    not validate (those count as 0). One batched call, decoded under the agents' stance
    schema with the agents' stance prompt (:func:`agent_models.llm.prompts.stance_messages`)."""
    from agent_models.llm.prompts import stance_messages
    from agent_models.llm.schema import parse_stance, stance_schema
    from agent_models.llm_calls import generate_json

    names = list(author_names) if author_names is not None else ["user"] * len(texts)
    prompts = [stance_messages(topic, name, [t]) for name, t in zip(names, texts, strict=True)]
    answers = generate_json(backend, prompts, stance_schema(), max_new_tokens=max_new_tokens)
    out = np.zeros(len(texts), dtype=np.int8)
    failures = 0
    for i, a in enumerate(answers):
        value = parse_stance(a) if a is not None else None
        if value is None:
            failures += 1
        else:
            out[i] = value
    return out, failures


# ---------------------------------------------------------------- toxicity

#: Fallback toxicity lexicon (score = min(1, 0.35 * hits)).
TOXIC_WORDS: tuple[str, ...] = (
    "idiot",
    "stupid",
    "moron",
    "dumb",
    "hate",
    "shut up",
    "loser",
    "fool",
    "scum",
    "trash",
    "disgusting",
    "pathetic",
    "liar",
    "fuck",
    "shit",
    "damn",
    "crap",
    "bitch",
    "bastard",
    "傻",
    "滚",
    "垃圾",
    "白痴",
    "混蛋",
    "脑残",
)


def toxicity_scores(texts: Sequence[str], method: str = "auto") -> np.ndarray:
    """(n,) float32 toxicity in [0, 1]: alt-profanity-check's probability ("profanity"), a
    keyword lexicon ("lexicon"), or the first available ("auto")."""
    if not texts:
        return np.zeros(0, dtype=np.float32)
    if method in ("auto", "profanity"):
        try:
            module = require(
                "profanity_check", "llm", "toxicity method='profanity'", hint="or method='lexicon'"
            )
        except DependencyNotInstalled:
            if method == "profanity":
                raise
        else:
            return np.clip(np.asarray(module.predict_prob(list(texts)), dtype=np.float32), 0.0, 1.0)
    lowered = [t.lower() for t in texts]
    hits = np.array([sum(t.count(w) for w in TOXIC_WORDS) for t in lowered], dtype=np.float32)
    return np.minimum(1.0, 0.35 * hits).astype(np.float32)


# ---------------------------------------------------------------- assembly


def select_users(activity_count: np.ndarray, max_users: int | None) -> np.ndarray:
    """Sorted indices of the ``max_users`` most active users (ties by index), or all."""
    n = len(activity_count)
    if max_users is None or n <= max_users:
        return np.arange(n)
    order = np.lexsort((np.arange(n), -activity_count))
    return np.sort(order[:max_users])


def assemble(
    *,
    name: str,
    topic: str,
    records: list[UserRecord],
    posts: list[RawPost],
    follow_src: np.ndarray,
    follow_dst: np.ndarray,
    total_posts: np.ndarray,
    config: LoaderConfig,
    backend: Any = None,
    susceptibility: np.ndarray | None = None,
    misinformed: np.ndarray | None = None,
    misinformation_message: str | None = None,
    user_ids: list[str],
    source: Path,
) -> LoadedDataset:
    """Build the scenario and the observed actions from parsed users and posts.

    ``posts`` hold every observed post of the kept users; the ``max_history_per_user`` most
    recent of each user become history posts. ``total_posts`` (N,) is each user's post count
    from metadata (for activity).
    """
    n = len(records)
    if n < 2:
        raise ValueError(
            f"{source}: only {n} user(s) left after filtering; a scenario needs at least 2 "
            "(check the domain / label filters)"
        )
    use_llm_profile = config.profile == "llm" or (config.profile == "auto" and backend is not None)
    use_llm_stance = config.stance == "llm" or (config.stance == "auto" and backend is not None)
    if (use_llm_profile or use_llm_stance) and backend is None:
        raise ValueError("LoaderConfig: profile='llm' / stance='llm' need a backend=")
    profiles = extract_profiles(
        records, backend=backend if use_llm_profile else None, topics=TOPICS
    )
    encoder = load_encoder(config.encoder)

    # history: most recent posts of each user
    by_user: dict[int, list[int]] = {}
    for j, p in enumerate(posts):
        by_user.setdefault(p.user, []).append(j)
    keep: list[int] = []
    for u in range(n):
        idx = sorted(by_user.get(u, []), key=lambda j: (-posts[j].time, j))
        keep.extend(sorted(idx[: config.max_history_per_user], key=lambda j: (posts[j].time, j)))
    hist = [posts[j] for j in keep]
    texts = [p.text for p in hist]
    history_author = np.array([p.user for p in hist], dtype=np.int64)
    history_latent = encoder.encode(texts) if texts else np.zeros((0, encoder.dim), np.float32)
    if use_llm_stance and texts:
        stance, _ = llm_stance(
            texts, topic, backend, author_names=[records[p.user].name for p in hist]
        )
    else:
        stance = heuristic_stance(
            texts,
            topic_keywords=config.topic_keywords,
            pro_keywords=config.pro_keywords,
            anti_keywords=config.anti_keywords,
            threshold=config.stance_threshold,
            sentiment_weight=config.sentiment_weight,
        )
    history_stance = stance.astype(np.float32)
    history_toxicity = toxicity_scores(texts, config.toxicity)
    history_misinfo = np.array([p.misinfo for p in hist], dtype=bool)

    # latent = normalized(profile embedding + mean embedding of the user's history posts)
    descriptions = [r.description for r in records]
    latent = encoder.encode([profile_text(profiles, i, descriptions[i]) for i in range(n)])
    if len(hist):
        sums = np.zeros_like(latent)
        np.add.at(sums, history_author, history_latent)
        counts = np.bincount(history_author, minlength=n)[:, None].astype(np.float32)
        latent = latent + np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    norms = np.linalg.norm(latent, axis=1, keepdims=True)
    latent = np.divide(latent, norms, out=np.zeros_like(latent), where=norms > 0).astype(np.float32)
    zero = norms[:, 0] == 0
    if zero.any():  # users with no text at all: a fixed unit vector
        latent[zero] = 0.0
        latent[zero, 0] = 1.0

    opinion = np.zeros(n, dtype=np.float32)
    tox = np.zeros(n, dtype=np.float32)
    if len(hist):
        counts1 = np.maximum(np.bincount(history_author, minlength=n), 1)
        opinion = (np.bincount(history_author, history_stance, minlength=n) / counts1).astype(
            np.float32
        )
        tox = (np.bincount(history_author, history_toxicity, minlength=n) / counts1).astype(
            np.float32
        )
    ranks = np.argsort(np.argsort(total_posts, kind="stable"), kind="stable")
    pct = (ranks + 1) / n
    activity = (
        config.activity_floor + (config.activity_ceiling - config.activity_floor) * pct
    ).astype(np.float32)
    activity = np.clip(activity, 1e-3, 1.0)
    if susceptibility is None:
        susceptibility = np.full(n, config.default_susceptibility, dtype=np.float32)

    scenario = Scenario(
        name=name,
        topic=topic,
        profiles=profiles,
        latent=latent,
        opinion=np.clip(opinion, -1, 1),
        activity=activity,
        toxicity_propensity=np.clip(tox, 0, 1),
        susceptibility=np.clip(np.asarray(susceptibility, np.float32), 0, 1),
        misinformed=np.zeros(n, bool) if misinformed is None else np.asarray(misinformed, bool),
        follow_src=np.asarray(follow_src, np.int64),
        follow_dst=np.asarray(follow_dst, np.int64),
        history_author=history_author,
        history_latent=np.asarray(history_latent, np.float32),
        history_stance=history_stance,
        history_toxicity=history_toxicity,
        history_misinfo=history_misinfo,
        history_text=texts,
        news=list(config.news),
        misinformation_message=misinformation_message,
    )
    scenario.validate()

    row_of = {j: r for r, j in enumerate(keep)}
    actions = [
        ObservedAction(
            user=p.user,
            behaviour=_KIND_TO_BEHAVIOUR[PostKind(p.kind)],
            text=p.text,
            event=p.event or topic,
            target_text=p.target_text,
            target_author=p.target_author,
            time=p.time,
            misinfo=p.misinfo,
            history_index=row_of.get(j),
        )
        for j, p in enumerate(posts)
    ]
    return LoadedDataset(scenario, actions, user_ids, descriptions, source)


def dedupe_edges(src: list[int], dst: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique edges without self-loops, sorted by (src, dst)."""
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    keep = s != d
    keys = np.unique(s[keep] * n + d[keep])
    return keys // n, keys % n
