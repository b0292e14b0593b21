"""SFT and DPO datasets from observed (event, user, action) tuples (Eq. 5–6 of the paper).

**Instruction** = topic description ⊕ user profile, rendered with the exact chat prompt the
LLM agents are run with (:func:`agent_models.llm.prompts.agent_messages`): the shared system
message (behaviours, JSON answer format, topic, news) and the user message (persona from
the four profile attributes, memories, the feed with post and user ids).
**Response** = observed action ⊕ its text, as the agents' JSON answer
(:func:`agent_models.llm.schema.answer_json`).

How an observation becomes a prompt and an answer (:class:`ExampleConfig`):

- the feed holds ``feed_size`` posts: for a retweet / reply, the post reacted to (its real
  text when the data has it, else a stub naming its author), plus context posts of other
  users drawn from the same data (same event first), in a seeded random order; post ids
  are distinct random integers (the agent refers to posts only by these ids);
- memories are the user's ``memories`` most recent earlier posts ("You posted: ...");
- the event (e.g. a Weibo rumour's source post) is shown as news when it is not the
  topic itself and not the user's own post;
- answers: post → ``{"type":"post","text":...}``; retweet → ``{"type":"retweet",...}``,
  plus a reply with the user's comment when a repost carries one (Weibo repost comments,
  ``comment_as_reply``); reply → ``{"type":"reply",...}`` with leading @mentions removed.

Records are JSON lines in trl's *conversational prompt-completion* format with a ``meta``
field the evaluation reads::

    {"prompt": [{"role": "system", ...}, {"role": "user", ...}],
     "completion": [{"role": "assistant", "content": "{\\"actions\\":[...]}"}],
     "meta": {"user": 3, "name": "...", "persona": {...}, "topic": "...",
              "behaviour": "reply", "text": "...", "feed": {...}}}

DPO records (:func:`build_dpo_records`): ``prompt`` as above, ``chosen`` = the observed
answer, ``rejected`` = a base-model sample (drawn through a backend, decoded under the
agents' answer schema) whose first action differs from the observed one, or whose text has
a sentence-embedding cosine below ``similarity_threshold`` to the observed text; among the
qualifying samples the least similar one with a different action is taken. Observations
with no qualifying sample are skipped (counted in the stats).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.training.records import ObservedAction
from agent_models.types import BEHAVIOUR_NAMES, Behaviour, Profiles
from policysim_infra.jsonl import read_json_lines

#: Repost comments that carry no content of the user's own (Weibo defaults).
TRIVIAL_COMMENTS: frozenset[str] = frozenset({"", "转发微博", "转发", "repost", "轉發微博", "//"})
_LEADING_MENTIONS = re.compile(r"^(?:\s*[.]?@\w+[:,]?)+\s*")


@dataclass(frozen=True)
class ExampleConfig:
    """How observations become prompts (module docstring). Defaults match the LLM brain's.

    Attributes:
        feed_size: posts in the feed of each instruction (the target plus context).
        memories: earlier own posts shown as memories.
        memory_chars: memory texts are cut to this length (``MemoryConfig.memory_chars``).
        max_actions, max_text_chars, feed_text_chars: as in ``LLMConfig``.
        behaviours: allowed behaviours listed in the system prompt.
        comment_as_reply: a repost with a comment of the user's own also replies with it.
        seed: seeds feed sampling, ordering and post ids.
    """

    feed_size: int = 5
    memories: int = 3
    memory_chars: int = 200
    max_actions: int = 4
    max_text_chars: int = 280
    feed_text_chars: int = 200
    behaviours: tuple[str, ...] = (
        "post",
        "retweet",
        "reply",
        "like",
        "dislike",
        "follow",
        "unfollow",
    )
    comment_as_reply: bool = True
    seed: int = 0


@dataclass
class FeedInfo:
    """The ids an instruction's feed shows (to build the answer schema and validate answers)."""

    post_ids: list[int]
    post_authors: list[int]
    followed: list[bool]
    target_post: int | None = None

    def view(self, user: int) -> Any:
        from agent_models.llm.schema import FeedView

        return FeedView(
            user=user,
            post_ids=list(self.post_ids),
            post_authors=list(self.post_authors),
            followed=list(self.followed),
        )


@dataclass
class Example:
    """One instruction / response pair with what the evaluation needs."""

    prompt: list[dict[str, str]]
    response: str
    user: int
    name: str
    persona: dict[str, str]
    topic: str
    behaviour: str
    text: str | None
    feed: FeedInfo
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "completion": [{"role": "assistant", "content": self.response}],
            "meta": {
                "user": self.user,
                "name": self.name,
                "persona": self.persona,
                "topic": self.topic,
                "behaviour": self.behaviour,
                "text": self.text,
                "feed": {
                    "post_ids": self.feed.post_ids,
                    "post_authors": self.feed.post_authors,
                    "followed": self.feed.followed,
                    "target_post": self.feed.target_post,
                },
                **self.extra,
            },
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Example:
        meta = record["meta"]
        feed = meta["feed"]
        known = {"user", "name", "persona", "topic", "behaviour", "text", "feed"}
        return cls(
            prompt=record["prompt"],
            response=record["completion"][0]["content"],
            user=int(meta["user"]),
            name=meta["name"],
            persona=dict(meta["persona"]),
            topic=meta["topic"],
            behaviour=meta["behaviour"],
            text=meta.get("text"),
            feed=FeedInfo(
                [int(x) for x in feed["post_ids"]],
                [int(x) for x in feed["post_authors"]],
                [bool(x) for x in feed["followed"]],
                feed.get("target_post"),
            ),
            extra={k: v for k, v in meta.items() if k not in known},
        )

    def schema(self, config: ExampleConfig | None = None) -> dict[str, Any]:
        """The JSON schema the agent's answer to this prompt is decoded under."""
        from agent_models.llm.schema import answer_schema

        config = config or ExampleConfig()
        view = self.feed.view(self.user)
        return answer_schema(
            behaviours=config.behaviours,
            max_actions=config.max_actions,
            max_text_chars=config.max_text_chars,
            post_ids=view.post_ids,
            follow_ids=view.follow_candidates(),
            unfollow_ids=view.unfollow_candidates(),
        )


def _clean_reply(text: str) -> str:
    return _LEADING_MENTIONS.sub("", text).strip()


def _answer_actions(
    action: ObservedAction, target_post: int | None, config: ExampleConfig
) -> tuple[list[dict[str, Any]], str | None]:
    """(answer actions, the user's own text) of an observation; ([], None) if unusable."""
    limit = config.max_text_chars
    text = (action.text or "").strip()
    if action.behaviour == Behaviour.POST:
        return ([{"type": "post", "text": text[:limit]}], text) if text else ([], None)
    if target_post is None:
        return [], None
    if action.behaviour == Behaviour.RETWEET:
        actions: list[dict[str, Any]] = [{"type": "retweet", "post_id": target_post}]
        comment = text
        if comment.startswith("RT @") or comment == (action.target_text or "").strip():
            comment = ""
        comment = comment.split("//@")[0].strip()  # Weibo: drop the quoted repost chain
        if config.comment_as_reply and comment.lower() not in TRIVIAL_COMMENTS:
            actions.append({"type": "reply", "post_id": target_post, "text": comment[:limit]})
            return actions, comment
        return actions, None
    if action.behaviour == Behaviour.REPLY:
        reply = _clean_reply(text)
        if not reply:
            return [], None
        return [{"type": "reply", "post_id": target_post, "text": reply[:limit]}], reply
    return [], None


def _sample_context(
    pool: Sequence[int], count: int, usable: Any, rng: np.random.Generator
) -> list[int]:
    """Up to ``count`` distinct usable items of ``pool`` in random order: rejection sampling
    (bounded tries) for large pools, a full scan for small ones, so that building examples
    stays linear in the number of observations."""
    if count <= 0 or not pool:
        return []
    if len(pool) > 8 * count + 32:
        chosen: list[int] = []
        seen: set[int] = set()
        for i in rng.integers(0, len(pool), size=16 * count + 32).tolist():
            k = pool[i]
            if k not in seen and usable(k):
                chosen.append(k)
                if len(chosen) == count:
                    return chosen
            seen.add(k)
    candidates = [k for k in pool if usable(k)]
    take = min(count, len(candidates))
    return [candidates[int(i)] for i in rng.choice(len(candidates), size=take, replace=False)]


def build_examples(
    actions: Sequence[ObservedAction],
    profiles: Profiles,
    topic: str,
    *,
    follow_src: np.ndarray | None = None,
    follow_dst: np.ndarray | None = None,
    config: ExampleConfig | None = None,
) -> list[Example]:
    """One :class:`Example` per usable observation (posts need text; reactions need a target).

    Args:
        actions: observations (``ObservedAction.user`` indexes ``profiles``).
        profiles: the users' profiles (persona of the prompt).
        topic: the topic description (system prompt).
        follow_src, follow_dst: follow edges, to mark feed authors the user follows.
        config: prompt options.
    """
    from agent_models.llm.prompts import agent_messages, clip, feed_line
    from agent_models.llm.schema import answer_json

    config = config or ExampleConfig()
    rng = np.random.default_rng(config.seed)
    n_users = len(profiles)
    name_to_user = {profiles.name(i).lower(): i for i in range(n_users)}
    follows: set[tuple[int, int]] = set()
    if follow_src is not None and follow_dst is not None:
        follows = set(
            zip(np.asarray(follow_src).tolist(), np.asarray(follow_dst).tolist(), strict=True)
        )
    # context pool: texts by event, and each user's posts by time
    by_event: dict[str, list[int]] = {}
    own: dict[int, list[int]] = {}
    for j, a in enumerate(actions):
        if a.text:
            by_event.setdefault(a.event, []).append(j)
            own.setdefault(a.user, []).append(j)
    everything = [j for j, a in enumerate(actions) if a.text]
    for lst in own.values():
        lst.sort(key=lambda j: (actions[j].time if actions[j].time is not None else 0.0, j))

    examples: list[Example] = []
    for j, a in enumerate(actions):
        if not 0 <= a.user < n_users:
            raise ValueError(
                f"ObservedAction #{j}: user {a.user} is outside the profiles (N={n_users})"
            )
        needs_target = a.behaviour in (Behaviour.RETWEET, Behaviour.REPLY)
        n_context = config.feed_size - (1 if needs_target else 0)
        target_text = (a.target_text or "").strip() if needs_target else None

        def usable(
            k: int, j: int = j, user: int = a.user, target: str | None = target_text
        ) -> bool:
            c = actions[k]
            return k != j and c.user != user and (c.text or "").strip() != target

        picks = _sample_context(by_event.get(a.event, []), n_context, usable, rng)
        if len(picks) < n_context:
            picks += _sample_context(
                everything,
                n_context - len(picks),
                lambda k, ev=a.event, f=usable: actions[k].event != ev and f(k),
                rng,
            )
        entries: list[tuple[int, str, str | None, int]] = []  # (author, name, text, kind)
        for k in picks:
            c = actions[k]
            entries.append((c.user, profiles.name(c.user), c.text, 0))
        target_index = None
        if needs_target:
            author_name = a.target_author or "someone"
            author = name_to_user.get(
                author_name.lower(), n_users + zlib.crc32(author_name.encode()) % 100_000
            )
            if author == a.user:
                author = n_users
            text = a.target_text or f"(a post by @{author_name}; its text is not in the data)"
            target_index = int(rng.integers(0, len(entries) + 1))
            entries.insert(target_index, (author, author_name, text, 0))
        ids = rng.choice(1_000_000, size=len(entries), replace=False).astype(int).tolist()
        followed = [(a.user, author) in follows for author, _, _, _ in entries]
        target_post = ids[target_index] if target_index is not None else None
        answer, own_text = _answer_actions(a, target_post, config)
        if not answer:
            continue
        channels = rng.integers(0, 3, size=len(entries))
        lines = [
            feed_line(
                pid,
                author,
                name,
                text,
                followed=f,
                channel=(0 if f else int(ch)),
                text_chars=config.feed_text_chars,
            )
            for pid, (author, name, text, _), f, ch in zip(
                ids, entries, followed, channels, strict=True
            )
        ]
        earlier = [
            k
            for k in own.get(a.user, [])
            if k != j
            and (
                (actions[k].time or 0.0) < (a.time or 0.0) or (actions[k].time == a.time and k < j)
            )
        ]
        memories = (
            [
                f"You posted: {clip(actions[k].text, config.memory_chars)}"
                for k in earlier[-config.memories :]
            ]
            if config.memories
            else []
        )
        news = [a.event] if a.event and a.event != topic and a.event != (a.text or "") else []
        persona = profiles.describe(a.user)
        prompt = agent_messages(
            topic,
            profiles.name(a.user),
            persona,
            memories,
            lines,
            news,
            0,
            behaviours=config.behaviours,
            max_actions=config.max_actions,
            max_text_chars=config.max_text_chars,
        )
        examples.append(
            Example(
                prompt=prompt,
                response=answer_json(answer),
                user=a.user,
                name=profiles.name(a.user),
                persona=persona,
                topic=topic,
                behaviour=answer[0]["type"],
                text=own_text,
                feed=FeedInfo(ids, [e[0] for e in entries], followed, target_post),
                extra={
                    "misinfo": bool(a.misinfo),
                    "situation": "\n".join(
                        [f"Topic: {topic}"] + [f"News: {h}" for h in news] + ["Feed:"] + lines
                    ),
                },
            )
        )
    return examples


def save_records(records: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write records as JSON lines (UTF-8)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def load_records(path: str | Path, required: Sequence[str] = ("prompt",)) -> list[dict[str, Any]]:
    """Read JSON-lines records; an error names the file, line and missing field."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    out = []
    for lineno, record in read_json_lines(path):
        if not isinstance(record, dict):
            raise ValueError(f"{path}: line {lineno}: expected a JSON object")
        for key in required:
            if key not in record:
                raise ValueError(f"{path}: line {lineno}: missing field {key!r}")
        out.append(record)
    if not out:
        raise ValueError(f"{path}: no records")
    return out


def load_examples(path: str | Path) -> list[Example]:
    """Examples from a JSON-lines file written with :meth:`Example.to_record`."""
    return [Example.from_record(r) for r in load_records(path, ("prompt", "completion", "meta"))]


# ------------------------------------------------------------------------------ DPO


@dataclass(frozen=True)
class DPOSamplingConfig:
    """How rejected responses are drawn (module docstring).

    Attributes:
        num_samples: base-model samples per observation (one batched backend call for all).
        temperature, top_p, max_new_tokens: sampling of the base model.
        similarity_threshold: a sample with the same first action is a rejection only if
            the cosine of its text to the observed text is below this.
        seed: base sampling seed.
    """

    num_samples: int = 4
    temperature: float = 1.0
    top_p: float = 0.95
    max_new_tokens: int = 256
    similarity_threshold: float = 0.5
    seed: int = 0


@dataclass
class DPOStats:
    """Counts of a DPO build."""

    examples: int = 0
    pairs: int = 0
    skipped: int = 0
    different_action: int = 0
    low_similarity: int = 0
    invalid_samples: int = 0


def answer_summary(
    text: str | None, example: Example, config: ExampleConfig | None = None
) -> tuple[str, str | None, bool]:
    """(first behaviour name or "nothing", the answer's own text or None, valid) of a raw
    completion, validated against the example's feed."""
    from agent_models.llm.schema import ParsedAnswer, parse_answer

    config = config or ExampleConfig()
    if text is None:
        return "nothing", None, False
    parsed = parse_answer(
        text,
        example.feed.view(example.user),
        max_actions=config.max_actions,
        max_text_chars=config.max_text_chars,
        behaviours=config.behaviours,
    )
    if not isinstance(parsed, ParsedAnswer):
        return "nothing", None, False
    first = _first_behaviour(text)
    own = [t for t in parsed.posts] + [t for _, _, t in parsed.reactions if t]
    return first, (" ".join(own) if own else None), True


def json_object(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a completion (the whole text, else its outermost ``{...}``), or None."""
    if not text:
        return None
    text = text.strip()
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        return data if isinstance(data, dict) else None
    return None


def _first_behaviour(text: str) -> str:
    data = json_object(text)
    actions = data.get("actions") if data else None
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return "nothing"
    kind = actions[0].get("type")
    return kind if kind in BEHAVIOUR_NAMES else "nothing"


def build_dpo_records(
    examples: Sequence[Example],
    backend: Any,
    *,
    encoder: Any = "auto",
    sampling: DPOSamplingConfig | None = None,
    config: ExampleConfig | None = None,
) -> tuple[list[dict[str, Any]], DPOStats]:
    """DPO records (chosen = observed answer, rejected = a dissimilar base-model sample).

    Args:
        examples: SFT examples (:func:`build_examples` / :func:`load_examples`).
        backend: an inference backend of :mod:`agent_models.llm.backends` serving the base
            model (or its spec dict, see :func:`agent_models.llm_calls.resolve_backend`).
        encoder: sentence encoder for the similarity (:func:`agent_models.encoders.load_encoder`).
        sampling: sampling options. config: prompt options (answer schema and validation).

    Returns:
        (records, stats). Each record: ``prompt``, ``chosen``, ``rejected`` (conversational)
        and ``meta`` (observed and rejected behaviour, similarity).
    """
    from agent_models.encoders import cosine_rows, load_encoder
    from agent_models.llm.backends.base import Sampling
    from agent_models.llm_calls import resolve_backend

    sampling = sampling or DPOSamplingConfig()
    config = config or ExampleConfig()
    backend = resolve_backend(backend)
    enc = load_encoder(encoder)
    k = sampling.num_samples
    prompts = [ex.prompt for ex in examples for _ in range(k)]
    schemas = [ex.schema(config) for ex in examples for _ in range(k)]
    generation = backend.generate(
        prompts,
        schemas,
        Sampling(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
        ),
    )
    stats = DPOStats(examples=len(examples))
    summaries = []
    for idx, (text, reason) in enumerate(
        zip(generation.texts, generation.finish_reasons, strict=True)
    ):
        ex = examples[idx // k]
        summaries.append(answer_summary(None if reason == "error" else text, ex, config))
    # similarity of each sample's text to the observed text (0 where either has none)
    pairs = [(examples[i // k].text, summaries[i][1]) for i in range(len(summaries))]
    both = [i for i, (a, b) in enumerate(pairs) if a and b]
    sims = np.zeros(len(pairs), dtype=np.float32)
    if both:
        ea = enc.encode([pairs[i][0] for i in both])
        eb = enc.encode([pairs[i][1] for i in both])
        sims[both] = cosine_rows(ea, eb)
    records = []
    for e, ex in enumerate(examples):
        best: tuple[tuple[int, int, float], int] | None = None
        for s in range(e * k, (e + 1) * k):
            behaviour, own, valid = summaries[s]
            if not valid:
                stats.invalid_samples += 1
            different = behaviour != ex.behaviour
            low = sims[s] < sampling.similarity_threshold
            if not (different or low):
                continue
            key = (0 if valid else 1, 0 if different else 1, float(sims[s]))
            if best is None or key < best[0]:
                best = (key, s)
        if best is None:
            stats.skipped += 1
            continue
        s = best[1]
        behaviour = summaries[s][0]
        if behaviour != ex.behaviour:
            stats.different_action += 1
        else:
            stats.low_similarity += 1
        stats.pairs += 1
        records.append(
            {
                "prompt": ex.prompt,
                "chosen": [{"role": "assistant", "content": ex.response}],
                "rejected": [{"role": "assistant", "content": generation.texts[s]}],
                "meta": {
                    "user": ex.user,
                    "behaviour": ex.behaviour,
                    "rejected_behaviour": behaviour,
                    "similarity": float(sims[s]),
                    "rejected_valid": bool(summaries[s][2]),
                },
            }
        )
    return records, stats
