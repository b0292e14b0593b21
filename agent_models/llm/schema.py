"""The agent's JSON answer: pydantic models, JSON schemas for constrained decoding, checks.

An answer is one JSON object with a list of actions (several behaviours per round; an
empty list = "do nothing")::

    {"actions": [{"type": "like", "post_id": 12},
                 {"type": "reply", "post_id": 7, "text": <reply text>},
                 {"type": "post", "text": <post text>},
                 {"type": "follow", "user_id": 3}]}

:func:`answer_schema` builds the JSON schema the decoder is constrained to — per agent
(post and user ids enumerated from that agent's feed) or shared by all agents of a round
(ids as integer ranges). :func:`parse_answer` turns the raw model text into
:class:`ParsedAnswer` or an :data:`INVALID_REASONS` reason; an agent whose answer has a
problem does nothing that round and the reason is counted in ``RoundOutput.invalid``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from agent_models.types import Behaviour

#: Why an answer was rejected (keys of ``RoundOutput.invalid``).
INVALID_REASONS: tuple[str, ...] = (
    "malformed_json",  # not parseable JSON (includes empty output)
    "truncated",  # generation hit max_new_tokens before the JSON was complete
    "schema",  # JSON, but not an AgentAnswer (wrong keys / types, missing text, ...)
    "unknown_post",  # a post id that is not in this agent's feed
    "unknown_user",  # a user id that is not an author shown in this agent's feed
    "impossible_action",  # e.g. like and dislike of one post, following oneself or a followee
    "too_many_actions",  # more than max_actions actions
    "placeholder_text",  # a text that is a copied placeholder ("<your post>", "...", "text")
    "backend_error",  # the request failed after retries (fail_on_backend_error=False)
    "not_text",  # the backend returned something that is not a string
    "too_deep",  # JSON nested too deeply to parse safely
)
#: Problems of the auxiliary calls, also counted in ``RoundOutput.invalid`` (the brain then
#: falls back: no stance observation / verbatim memory / no misinformation adoption).
AUX_INVALID_REASONS: tuple[str, ...] = (
    "stance_malformed",
    "summary_malformed",
    "consolidation_malformed",
    "agreement_malformed",
    "summary_placeholder",
    "consolidation_placeholder",
)

_PLACEHOLDER = re.compile(r"^(?:<[^<>]*>|[\W_]*)$")
_PLACEHOLDER_WORDS = frozenset(
    {
        "text",
        "summary",
        "memory",
        "string",
        "post",
        "reply",
        "sentence",
        "your post",
        "your reply",
        "your text",
        "your own words",
        "post text",
        "reply text",
        "none",
        "null",
    }
)


#: Written texts must not start with a bracket, white space or punctuation (under constrained
#: decoding a small base model otherwise answers ``"<your post>"``, ``": "`` or ``"}, {"``),
#: and hold no double quote or backslash: llama.cpp's JSON-schema-to-grammar converter (used
#: by llama.cpp servers for ``json_object`` + schema and for the ``grammar`` form) applies a
#: pattern to the raw JSON text, where those characters would end or escape the string.
TEXT_PATTERN = r'^[^<>{}()\[\] \t\n.,:;…][^"\\]*$'


def text_schema(max_chars: int) -> dict[str, Any]:
    """The JSON schema of a model-written text (post, reply, summary, memory)."""
    return {"type": "string", "minLength": 1, "maxLength": int(max_chars), "pattern": TEXT_PATTERN}


def is_placeholder(text: str | None) -> bool:
    """Whether a model-written text is a format placeholder rather than content: empty, only
    punctuation (``"..."``, ``"…"``), an angle-bracket slot (``"<your post>"``), or a field
    name (``"summary"``, ``"text"``)."""
    if text is None:
        return True
    stripped = " ".join(text.split())
    if _PLACEHOLDER.match(stripped):
        return True
    return stripped.strip(" .!?:;\"'").lower() in _PLACEHOLDER_WORDS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


_CANONICAL_ID = re.compile(r"(?:0|[1-9][0-9]{0,17})")


def _id_value(value: Any) -> int:
    """A post or user id: a JSON integer, or its canonical decimal string ("10"); never a
    bool (JSON ``true`` is not post 1), a float, or a string Python's int() would bend
    ("1_0", "+10", " 10")."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"an id must be a JSON integer, not {type(value).__name__}")
    if isinstance(value, str):
        if not _CANONICAL_ID.fullmatch(value):
            raise ValueError(f"an id must be digits only, not {value!r}")
        return int(value)
    return value


Id = Annotated[int, BeforeValidator(_id_value)]


class PostAction(_Strict):
    type: Literal["post"]
    text: str = Field(min_length=1)


class RetweetAction(_Strict):
    type: Literal["retweet"]
    post_id: Id


class ReplyAction(_Strict):
    type: Literal["reply"]
    post_id: Id
    text: str = Field(min_length=1)


class LikeAction(_Strict):
    type: Literal["like"]
    post_id: Id


class DislikeAction(_Strict):
    type: Literal["dislike"]
    post_id: Id


class FollowAction(_Strict):
    type: Literal["follow"]
    user_id: Id


class UnfollowAction(_Strict):
    type: Literal["unfollow"]
    user_id: Id


Action = Annotated[
    PostAction
    | RetweetAction
    | ReplyAction
    | LikeAction
    | DislikeAction
    | FollowAction
    | UnfollowAction,
    Field(discriminator="type"),
]


class AgentAnswer(_Strict):
    """What one agent does in one round (empty ``actions`` = nothing)."""

    actions: list[Action] = Field(default_factory=list)


#: Emotions of the opt-in belief-desire-intention answer (``LLMConfig.reasoning="bdi"``).
EMOTIONS: tuple[str, ...] = (
    "calm",
    "happy",
    "hopeful",
    "curious",
    "indifferent",
    "anxious",
    "sad",
    "angry",
)
#: The inner-state fields of a BDI answer, written before the actions.
BDI_FIELDS: tuple[str, ...] = ("emotion", "belief", "desire", "intention")


class BDIAnswer(AgentAnswer):
    """An :class:`AgentAnswer` preceded by the agent's emotion, belief, desire and intention."""

    emotion: Literal[
        "calm", "happy", "hopeful", "curious", "indifferent", "anxious", "sad", "angry"
    ]
    belief: str = Field(min_length=1)
    desire: str = Field(min_length=1)
    intention: str = Field(min_length=1)


class StanceAnswer(_Strict):
    """Eq. 1: the discrete stance of a user toward the topic."""

    stance: Literal["favor", "neutral", "against"]


class SummaryAnswer(_Strict):
    """Eq. 3: the salient point of a read post, as a short-term memory."""

    summary: str = Field(min_length=1)


class ConsolidationAnswer(_Strict):
    """Several short-term memories merged into one long-term memory."""

    memory: str = Field(min_length=1)


class AgreementAnswer(_Strict):
    """Whether a reply agrees with the claim of the post it answers."""

    agrees: bool


STANCE_VALUES: dict[str, int] = {"favor": 1, "neutral": 0, "against": -1}
_ANSWER = TypeAdapter(AgentAnswer)
_BDI_ANSWER = TypeAdapter(BDIAnswer)
_ACTION_BEHAVIOUR: dict[str, Behaviour] = {
    "post": Behaviour.POST,
    "retweet": Behaviour.RETWEET,
    "reply": Behaviour.REPLY,
    "like": Behaviour.LIKE,
    "dislike": Behaviour.DISLIKE,
    "follow": Behaviour.FOLLOW,
    "unfollow": Behaviour.UNFOLLOW,
}


# ------------------------------------------------------------------------------ schemas
def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _ids(values: Sequence[int] | tuple[int, int]) -> dict[str, Any]:
    if isinstance(values, tuple):
        lo, hi = values
        return {"type": "integer", "minimum": int(lo), "maximum": int(hi)}
    return {"type": "integer", "enum": [int(v) for v in values]}


def answer_schema(
    *,
    behaviours: Sequence[str],
    max_actions: int,
    max_text_chars: int,
    post_ids: Sequence[int] | tuple[int, int] | None = None,
    follow_ids: Sequence[int] | tuple[int, int] | None = None,
    unfollow_ids: Sequence[int] | tuple[int, int] | None = None,
    bdi: bool = False,
    bdi_chars: int = 100,
) -> dict[str, Any]:
    """JSON schema of an :class:`AgentAnswer` for constrained decoding (of a
    :class:`BDIAnswer` with ``bdi``: emotion, belief, desire and intention of at most
    ``bdi_chars`` characters each, before the actions).

    Args:
        behaviours: allowed action types (subset of ``ACTION_TYPES``).
        max_actions: ``maxItems`` of the action list.
        max_text_chars: ``maxLength`` of texts (keeps decoding bounded).
        post_ids: feed post ids the agent may react to: a list (enumerated, per-agent
            schema) or a ``(lo, hi)`` tuple (an inclusive integer range, shared schema).
            None or empty: no reactions possible.
        follow_ids, unfollow_ids: user ids that may be followed / unfollowed, same forms.

    Returns:
        A JSON-schema dict (``additionalProperties: false`` and all properties required,
        so it is also accepted by OpenAI's strict structured outputs).
    """
    text = text_schema(max_text_chars)
    variants: list[dict[str, Any]] = []

    def has(ids: Sequence[int] | tuple[int, int] | None) -> bool:
        if ids is None:
            return False
        if isinstance(ids, tuple):
            return ids[1] >= ids[0]
        return len(ids) > 0

    for kind in behaviours:
        tag = {"type": "string", "const": kind}
        if kind == "post":
            variants.append(_obj({"type": tag, "text": text}))
        elif kind in ("retweet", "like", "dislike") and has(post_ids):
            variants.append(_obj({"type": tag, "post_id": _ids(post_ids)}))  # type: ignore[arg-type]
        elif kind == "reply" and has(post_ids):
            variants.append(_obj({"type": tag, "post_id": _ids(post_ids), "text": text}))  # type: ignore[arg-type]
        elif kind == "follow" and has(follow_ids):
            variants.append(_obj({"type": tag, "user_id": _ids(follow_ids)}))  # type: ignore[arg-type]
        elif kind == "unfollow" and has(unfollow_ids):
            variants.append(_obj({"type": tag, "user_id": _ids(unfollow_ids)}))  # type: ignore[arg-type]
    actions: dict[str, Any] = {"type": "array", "maxItems": int(max_actions) if variants else 0}
    if variants:
        actions["items"] = {"anyOf": variants}
    else:
        actions["items"] = {"type": "object"}
    if bdi:
        state = {
            "emotion": {"type": "string", "enum": list(EMOTIONS)},
            **{k: text_schema(bdi_chars) for k in BDI_FIELDS[1:]},
        }
        return _obj({**state, "actions": actions})
    return _obj({"actions": actions})


def stance_schema() -> dict[str, Any]:
    return _obj({"stance": {"type": "string", "enum": list(STANCE_VALUES)}})


def agreement_schema() -> dict[str, Any]:
    return _obj({"agrees": {"type": "boolean"}})


def summary_schema(max_chars: int) -> dict[str, Any]:
    return _obj({"summary": text_schema(max_chars)})


def consolidation_schema(max_chars: int) -> dict[str, Any]:
    return _obj({"memory": text_schema(max_chars)})


def answer_json(actions: Sequence[dict[str, Any]]) -> str:
    """The canonical compact JSON of an answer (what a model should emit; SFT targets)."""
    answer = _ANSWER.validate_python({"actions": list(actions)})
    return answer.model_dump_json(exclude_none=True)


# ------------------------------------------------------------------------------ parsing
@dataclass
class FeedView:
    """What one agent was shown: the ids it may refer to.

    Attributes:
        user: the agent's user id.
        post_ids: feed post ids (any order, no -1).
        post_authors: author of each feed post (same order).
        followed: whether the agent follows each feed post's author (same order).
    """

    user: int
    post_ids: list[int]
    post_authors: list[int]
    followed: list[bool]

    def follow_candidates(self) -> list[int]:
        return sorted(
            {
                a
                for a, f in zip(self.post_authors, self.followed, strict=True)
                if not f and a != self.user
            }
        )

    def unfollow_candidates(self) -> list[int]:
        return sorted(
            {
                a
                for a, f in zip(self.post_authors, self.followed, strict=True)
                if f and a != self.user
            }
        )


@dataclass
class ParsedAnswer:
    """A validated answer as plain lists (``kind`` values are :class:`Behaviour`)."""

    posts: list[str] = field(default_factory=list)
    reactions: list[tuple[int, int, str | None]] = field(default_factory=list)  # (kind, post, text)
    follows: list[int] = field(default_factory=list)
    unfollows: list[int] = field(default_factory=list)
    #: emotion / belief / desire / intention of a BDI answer (None otherwise)
    state: dict[str, str] | None = None

    @property
    def num_actions(self) -> int:
        return len(self.posts) + len(self.reactions) + len(self.follows) + len(self.unfollows)


#: Deepest JSON nesting a completion may have (a valid answer needs 4 levels); deeper text
#: is refused before parsing, so neither ``json`` nor pydantic can hit the recursion limit.
MAX_JSON_DEPTH = 32


class NotText(TypeError):
    """A completion that is not a ``str`` (a custom backend returned bytes, None, a dict...)."""


class TooDeep(ValueError):
    """A completion whose JSON nests deeper than :data:`MAX_JSON_DEPTH`."""


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS_ONLY = {c: None for c in range(128) if chr(c) not in "[]{}"}


def _depth(text: str) -> int:
    """Deepest bracket nesting of ``text``, ignoring brackets inside JSON strings (vectorized)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    brackets = (
        _JSON_STRING.sub("", text).encode("ascii", "ignore").decode().translate(_BRACKETS_ONLY)
    )
    steps = np.frombuffer(brackets.encode(), np.uint8)
    return int(np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1)).max(initial=0))


def _loads(text: str) -> Any:
    """JSON from a model completion: the whole text, else the outermost {...} in it
    (tolerates code fences / prose around the object when decoding is unconstrained).

    Raises :class:`NotText` for a non-string, :class:`TooDeep` for nesting beyond
    :data:`MAX_JSON_DEPTH`, ``json.JSONDecodeError`` (a ValueError) for anything else."""
    if not isinstance(text, str):
        raise NotText(f"a completion must be a str, got {type(text).__name__}")
    text = text.strip()
    if _depth(text) > MAX_JSON_DEPTH:
        raise TooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise
        return json.loads(text[start : end + 1])


#: What a parser catches: every way a completion can fail to be a valid answer.
_PARSE_ERRORS = (ValueError, TypeError, RecursionError, ValidationError)


#: Public name of the lenient JSON loader used for all model completions.
loads_json = _loads


def parse_answer(
    text: str,
    view: FeedView,
    *,
    max_actions: int,
    max_text_chars: int,
    behaviours: Sequence[str],
    truncated: bool = False,
    bdi: bool = False,
) -> ParsedAnswer | str:
    """Validate one completion against what the agent saw.

    Returns a :class:`ParsedAnswer`, or the :data:`INVALID_REASONS` reason (a str) why the
    whole answer is rejected. Exact duplicate actions are merged; texts longer than
    ``max_text_chars`` are cut (a length budget, not an error).
    """
    try:
        raw = _loads(text)
    except NotText:
        return "not_text"
    except TooDeep:
        return "too_deep"
    except (ValueError, RecursionError):
        return "truncated" if truncated else "malformed_json"
    try:
        answer = (_BDI_ANSWER if bdi else _ANSWER).validate_python(raw)
    except (ValidationError, ValueError, TypeError, RecursionError):
        return "schema"
    if len(answer.actions) > max_actions:
        return "too_many_actions"
    feed = set(view.post_ids)
    authors = set(view.post_authors)
    followed = {a for a, f in zip(view.post_authors, view.followed, strict=True) if f}
    out = ParsedAnswer()
    if isinstance(answer, BDIAnswer):
        out.state = {k: getattr(answer, k) for k in BDI_FIELDS}
    seen: set[tuple[Any, ...]] = set()
    reacted: dict[int, str] = {}
    for action in answer.actions:
        if action.type not in behaviours:
            return "impossible_action"
        key = tuple(action.model_dump().values())
        if key in seen:
            continue
        seen.add(key)
        if hasattr(action, "text") and is_placeholder(action.text):
            return "placeholder_text"
        if isinstance(action, PostAction):
            out.posts.append(action.text[:max_text_chars])
        elif isinstance(action, FollowAction | UnfollowAction):
            target = action.user_id
            if target not in authors:
                return "unknown_user"
            if target == view.user:
                return "impossible_action"
            if isinstance(action, FollowAction):
                if target in followed or target in out.unfollows:
                    return "impossible_action"
                out.follows.append(target)
            else:
                if target not in followed or target in out.follows:
                    return "impossible_action"
                out.unfollows.append(target)
        else:
            if action.post_id not in feed:
                return "unknown_post"
            if action.type in ("like", "dislike"):
                other = "dislike" if action.type == "like" else "like"
                if reacted.get(action.post_id) == other:
                    return "impossible_action"
                reacted.setdefault(action.post_id, action.type)
            text_value = getattr(action, "text", None)
            out.reactions.append(
                (
                    int(_ACTION_BEHAVIOUR[action.type]),
                    action.post_id,
                    None if text_value is None else text_value[:max_text_chars],
                )
            )
    return out


def parse_stance(text: str) -> int | None:
    """-1 / 0 / +1 from a stance completion, or None if it does not validate."""
    try:
        return STANCE_VALUES[StanceAnswer.model_validate(_loads(text)).stance]
    except _PARSE_ERRORS:
        return None


def parse_agreement(text: str) -> bool | None:
    """True / False from an agreement completion, or None if it does not validate."""
    try:
        return AgreementAnswer.model_validate(_loads(text)).agrees
    except _PARSE_ERRORS:
        return None


def parse_field(text: str, model: type[SummaryAnswer] | type[ConsolidationAnswer]) -> str | None:
    """The text field of a summary / consolidation completion, or None."""
    try:
        value = model.model_validate(_loads(text))
    except _PARSE_ERRORS:
        return None
    return value.summary if isinstance(value, SummaryAnswer) else value.memory
