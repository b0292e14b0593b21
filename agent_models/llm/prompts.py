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
        "agent_system", template_dir,
        behaviours="\n".join(f"- {BEHAVIOUR_HELP[b]}" for b in behaviours),
        max_actions=max_actions, max_text_chars=max_text_chars,
        topic=topic or "general news", news=news_block, reasoning=module,
    )
    return re.sub(r"\n{3,}", "\n\n", text)


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
) -> str:
    """One feed entry: ``[12] @user_3 (id 3, you follow) · trending, reply to [7]: text (2 likes)``."""
    who = f"@{author_name} (id {author}{', you follow' if followed else ''})"
    where = CHANNEL_NAMES[channel] if 0 <= channel < len(CHANNEL_NAMES) else "feed"
    if kind == 1 and parent >= 0:
        where += f", retweet of [{parent}]"
    elif kind == 2 and parent >= 0:
        where += f", reply to [{parent}]"
    counts = [f"{n} {label}" for n, label in ((likes, "likes"), (retweets, "retweets"),
                                               (replies, "replies")) if n > 0]
    tail = f" ({', '.join(counts)})" if counts else ""
    return f"[{post_id}] {who} · {where}: {clip(text, text_chars)}{tail}"


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
        "agent_user", template_dir,
        name=name,
        identity=persona.get("likely_identity", "unknown"),
        interests=persona.get("interested_areas", "general news"),
        style=persona.get("posting_style", "unknown"),
        interaction=persona.get("interaction_behaviour", "unknown"),
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
        {"role": "system", "content": agent_system_prompt(
            topic, news, behaviours=behaviours, max_actions=max_actions,
            max_text_chars=max_text_chars, template_dir=template_dir)},
        {"role": "user", "content": agent_user_prompt(name, persona, memories, feed, round_,
                                                      template_dir)},
    ]


def stance_messages(topic: str, name: str, texts: Sequence[str], text_chars: int = 200,
                    template_dir: str | None = None) -> Messages:
    """Eq. 1: classify a user's recent posts into favor / neutral / against."""
    return [
        {"role": "system", "content": _render("stance_system", template_dir,
                                              topic=topic or "general news")},
        {"role": "user", "content": _render(
            "stance_user", template_dir, name=name,
            posts="\n".join(f"- {clip(t, text_chars)}" for t in texts))},
    ]


def summary_messages(author_name: str, text: str, max_chars: int,
                     template_dir: str | None = None) -> Messages:
    """Eq. 3: the salient summary of a read post."""
    return [
        {"role": "system", "content": _render("summary_system", template_dir, max_chars=max_chars)},
        {"role": "user", "content": _render("summary_user", template_dir, author=author_name,
                                            text=clip(text, 1000))},
    ]


def consolidation_messages(name: str, memories: Sequence[str], max_chars: int,
                           template_dir: str | None = None) -> Messages:
    """Merge sampled short-term memories into one long-term memory."""
    return [
        {"role": "system", "content": _render("consolidate_system", template_dir,
                                              max_chars=max_chars)},
        {"role": "user", "content": _render(
            "consolidate_user", template_dir, name=name,
            memories="\n".join(f"- {clip(m, 300)}" for m in memories))},
    ]


def agreement_messages(post: str, reply: str, text_chars: int = 300,
                       template_dir: str | None = None) -> Messages:
    """Does ``reply`` agree with the claim of ``post``? (misinformation adoption by reply)"""
    return [
        {"role": "system", "content": _render("agree_system", template_dir)},
        {"role": "user", "content": _render("agree_user", template_dir, post=clip(post, text_chars),
                                            reply=clip(reply, text_chars))},
    ]
