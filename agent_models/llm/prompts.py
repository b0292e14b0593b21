"""Prompt construction for the LLM user agents.

Layout of an agent prompt (chat messages), shared part FIRST so that a server with prefix
caching (vLLM ``enable_prefix_caching``) computes it once per round for all agents:

1. ``system``: the role, the allowed behaviours, the JSON answer format and its rules,
   then the topic and the current news — identical for every agent of a round (and the
   part before the news identical across rounds).
2. ``user``: the persona (the four profile attributes, §2.1.1), retrieved memories, the
   round's feed with post ids and author ids, and the question.

Templates live in :mod:`agent_models.prompts` (``$name`` fields, :class:`string.Template`).
The functions here are plain (no model, no env) so training-data builders can render the
exact format the agents are prompted with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from string import Template

Messages = list[dict[str, str]]

#: The form of each action, with ``<...>`` placeholders rather than example values: a small
#: model copies example texts word for word (and copied placeholders are rejected, see
#: :func:`agent_models.llm.schema.is_placeholder`).
BEHAVIOUR_HELP: dict[str, str] = {
    "post": 'post: write a new post {"type":"post","text":"<your post>"}',
    "retweet": 'retweet: share a feed post {"type":"retweet","post_id":<post id>}',
    "reply": 'reply: answer a feed post {"type":"reply","post_id":<post id>,"text":"<your reply>"}',
    "like": 'like a feed post: {"type":"like","post_id":<post id>}',
    "dislike": 'dislike a feed post: {"type":"dislike","post_id":<post id>}',
    "follow": 'follow the author of a feed post: {"type":"follow","user_id":<user id>}',
    "unfollow": 'unfollow an author you follow: {"type":"unfollow","user_id":<user id>}',
}
CHANNEL_NAMES: tuple[str, ...] = ("following", "for you", "trending", "suggested")


@lru_cache(maxsize=64)
def load_template(name: str, template_dir: str | None = None) -> Template:
    """The template ``name`` (without ``.txt``) from ``template_dir`` or the shipped ones."""
    if template_dir is not None:
        text = (Path(template_dir) / f"{name}.txt").read_text(encoding="utf-8")
    else:
        text = resources.files("agent_models.prompts").joinpath(f"{name}.txt").read_text("utf-8")
    return Template(text)


def _render(template: str, template_dir: str | None = None, **fields: object) -> str:
    return load_template(template, template_dir).substitute(**fields).strip()


#: Public name of the template renderer: ``render_template("agent_user", name=..., ...)``.
render_template = _render


def clip(text: str | None, limit: int) -> str:
    """One line of at most ``limit`` characters (ellipsis when cut)."""
    if not text:
        return "(no text)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 1, 1)].rstrip() + "…"


def agent_system_prompt(
    topic: str,
    news: Sequence[str] = (),
    *,
    behaviours: Sequence[str],
    max_actions: int,
    max_text_chars: int,
    template_dir: str | None = None,
    reasoning: str = "none",
) -> str:
    """The shared system message of one round (same for every agent); ``reasoning="bdi"``
    adds the emotion / belief-desire-intention module (template ``agent_bdi``)."""
    news_block = ""
    if news:
        news_block = "News:\n" + "\n".join(f"- {clip(h, 300)}" for h in news)
    module = ""
    if reasoning == "bdi":
        from agent_models.llm.schema import EMOTIONS

        module = _render("agent_bdi", template_dir, emotions=", ".join(EMOTIONS))
    elif reasoning != "none":
        raise ValueError(f"reasoning: {reasoning!r} not allowed; use 'none' or 'bdi'")
    text = _render(
        "agent_system",
        template_dir,
        behaviours="\n".join(f"- {BEHAVIOUR_HELP[b]}" for b in behaviours),
        max_actions=max_actions,
        max_text_chars=max_text_chars,
        topic=topic or "general news",
        news=news_block,
        reasoning=module,
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def topic_free(text: str | None, topic: str) -> str | None:
    """``text`` without the round's topic phrase, which the system message names once: a
    leading ``"On <topic>: "`` is dropped, any other mention becomes "the topic"."""
    if not text or not topic or len(topic) < 12:
        return text
    head = f"On {topic}:"
    if text.startswith(head):
        text = text[len(head) :].lstrip()
        return text[:1].upper() + text[1:] if text else text
    return text.replace(topic, "the topic")


#: Stance in words, by the stance value's band (thresholds of :func:`stance_in_words`).
STANCE_WORDS: tuple[tuple[float, str], ...] = (
    (-0.6, "you are strongly against it"),
    (-1 / 3, "you are against it"),
    (1 / 3, "you are undecided"),
    (0.6, "you are in favour of it"),
    (1.01, "you are strongly in favour of it"),
)


def stance_in_words(stance: float) -> str:
    """The agent's stance on the topic (in [−1, 1]) as the profile states it: below −0.6
    strongly against, below −1/3 against, up to 1/3 undecided, up to 0.6 in favour, above
    that strongly in favour (the ±1/3 bands are those of the discrete stance of Eq. 1)."""
    for bound, words in STANCE_WORDS:
        if stance < bound:
            return words
    return STANCE_WORDS[-1][1]


def _share(x: float) -> str:
    for bound, words in (
        (0.05, "almost never"),
        (0.2, "rarely"),
        (0.4, "sometimes"),
        (0.6, "often"),
        (0.85, "most of the time"),
    ):
        if x < bound:
            return words
    return "almost always"


def interaction_in_words(
    role: str,
    post_retweet_ratio: float,
    reply_frequency: float,
    follower_following_ratio: float,
    activity: float | None,
) -> str:
    """The interaction statistics of a profile in plain language, with the base activity
    rate (the probability that the user is active in a round)."""
    if post_retweet_ratio >= 1.5:
        writes = "you write your own posts more often than you retweet"
    elif post_retweet_ratio <= 1 / 1.5:
        writes = "you retweet others more often than you write your own posts"
    else:
        writes = "you write your own posts about as often as you retweet"
    audience = (
        "more people follow you than you follow"
        if follower_following_ratio >= 1.5
        else "you follow more people than follow you"
        if follower_following_ratio <= 1 / 1.5
        else "you follow about as many people as follow you"
    )
    parts = [
        f"You are a {role}: {writes}; you {_share(reply_frequency)} reply to others "
        f"({reply_frequency:.0%} of what you do is replies); {audience}."
    ]
    if activity is not None:
        parts.append(
            f"You are on the platform in about {max(1, round(activity * 10))} of "
            "10 rounds; when you are, you react to the posts that catch your eye "
            "(like, dislike, reply, retweet) as a real user would."
        )
    return " ".join(parts)


def feed_line(
    post_id: int,
    author: int,
    author_name: str,
    text: str | None,
    *,
    followed: bool = False,
    channel: int = 0,
    kind: int = 0,
    parent: int = -1,
    likes: int = 0,
    replies: int = 0,
    retweets: int = 0,
    text_chars: int = 200,
    topic: str = "",
) -> str:
    """One feed entry: ``[12] @user_3 (id 3, you follow) · trending, reply to [7]: text (2 likes)``."""
    who = f"@{author_name} (id {author}{', you follow' if followed else ''})"
    where = CHANNEL_NAMES[channel] if 0 <= channel < len(CHANNEL_NAMES) else "feed"
    if kind == 1 and parent >= 0:
        where += f", retweet of [{parent}]"
    elif kind == 2 and parent >= 0:
        where += f", reply to [{parent}]"
    counts = [
        f"{n} {label}"
        for n, label in ((likes, "likes"), (retweets, "retweets"), (replies, "replies"))
        if n > 0
    ]
    tail = f" ({', '.join(counts)})" if counts else ""
    return f"[{post_id}] {who} · {where}: {clip(topic_free(text, topic), text_chars)}{tail}"


def agent_user_prompt(
    name: str,
    persona: Mapping[str, str],
    memories: Sequence[str],
    feed: Sequence[str],
    round_: int,
    template_dir: str | None = None,
) -> str:
    """The per-agent user message: persona (``Profiles.describe`` keys), memories, feed lines."""
    return _render(
        "agent_user",
        template_dir,
        name=name,
        identity=persona.get("likely_identity", "unknown"),
        interests=persona.get("interested_areas", "general news"),
        style=persona.get("posting_style", "unknown"),
        interaction=persona.get("interaction_behaviour", "unknown"),
        stance=persona.get("stance", "you have no settled view"),
        memories="\n".join(f"- {m}" for m in memories) if memories else "- nothing yet",
        feed="\n".join(feed) if feed else "(your feed is empty)",
        round=round_,
    )


def agent_messages(
    topic: str,
    name: str,
    persona: Mapping[str, str],
    memories: Sequence[str] = (),
    feed: Sequence[str] = (),
    news: Sequence[str] = (),
    round_: int = 0,
    *,
    behaviours: Sequence[str] = tuple(BEHAVIOUR_HELP),
    max_actions: int = 4,
    max_text_chars: int = 280,
    template_dir: str | None = None,
) -> Messages:
    """Chat messages of one agent-step (what the brain sends; use for SFT instructions)."""
    return [
        {
            "role": "system",
            "content": agent_system_prompt(
                topic,
                news,
                behaviours=behaviours,
                max_actions=max_actions,
                max_text_chars=max_text_chars,
                template_dir=template_dir,
            ),
        },
        {
            "role": "user",
            "content": agent_user_prompt(name, persona, memories, feed, round_, template_dir),
        },
    ]


#: The stance labels in the order of their values −1, 0, +1.
STANCE_LABELS: tuple[str, ...] = ("against", "neutral", "favor")


def label_list(labels: Sequence[str]) -> str:
    """``"a, b or c"``."""
    return ", ".join(labels[:-1]) + f" or {labels[-1]}" if len(labels) > 1 else labels[0]


def stance_messages(
    topic: str,
    name: str,
    texts: Sequence[str],
    text_chars: int = 200,
    template_dir: str | None = None,
    order: Sequence[str] = STANCE_LABELS,
    scored: bool = False,
) -> Messages:
    """Eq. 1: where a user stands on the topic, from its recent posts (topic phrase
    shortened, the topic is named once in the system message). ``order`` is the order the
    labels are listed in (randomised per prompt by the labeller); ``scored`` asks for one
    word (the labeller scores each label's likelihood) rather than a JSON object (decoded)."""
    if scored:
        answer_format = f"Answer with one word: {label_list(order)}."
    else:
        answer_format = 'Answer with one JSON object: {"stance":"<' + label_list(order) + '>"}.'
    return [
        {
            "role": "system",
            "content": _render(
                "stance_system",
                template_dir,
                topic=topic or "general news",
                answer_format=answer_format,
            ),
        },
        {
            "role": "user",
            "content": _render(
                "stance_user",
                template_dir,
                name=name,
                posts="\n".join(f"- {clip(topic_free(t, topic), text_chars)}" for t in texts),
            ),
        },
    ]


def summary_messages(
    author_name: str, text: str, max_chars: int, template_dir: str | None = None
) -> Messages:
    """Eq. 3: the salient summary of a read post."""
    return [
        {"role": "system", "content": _render("summary_system", template_dir, max_chars=max_chars)},
        {
            "role": "user",
            "content": _render(
                "summary_user", template_dir, author=author_name, text=clip(text, 1000)
            ),
        },
    ]


def consolidation_messages(
    name: str, memories: Sequence[str], max_chars: int, template_dir: str | None = None
) -> Messages:
    """Merge sampled short-term memories into one long-term memory."""
    return [
        {
            "role": "system",
            "content": _render("consolidate_system", template_dir, max_chars=max_chars),
        },
        {
            "role": "user",
            "content": _render(
                "consolidate_user",
                template_dir,
                name=name,
                memories="\n".join(f"- {clip(m, 300)}" for m in memories),
            ),
        },
    ]


def agreement_messages(
    post: str, reply: str, text_chars: int = 300, template_dir: str | None = None
) -> Messages:
    """Does ``reply`` agree with the claim of ``post``? (misinformation adoption by reply)"""
    return [
        {"role": "system", "content": _render("agree_system", template_dir)},
        {
            "role": "user",
            "content": _render(
                "agree_user",
                template_dir,
                post=clip(post, text_chars),
                reply=clip(reply, text_chars),
            ),
        },
    ]
