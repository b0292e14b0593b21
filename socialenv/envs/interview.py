"""Interviews and surveys: ask simulated users questions without changing the simulation.

    answers = env.unwrapped.interview([3, 17], "How do you feel about the new law?")
    table = env.unwrapped.survey(["Do you trust what you read here?",
                                  {"id": "stance", "text": "Do you support the law?", "scale": 5,
                                   "measure": "stance"}], sample=50)

Every answer holds the user's **state** (read, never written): smoothed stance and its label,
latent opinion, whether they believe the circulating misinformation, trust (their
susceptibility: how readily they take up what their feed claims), the platform's exposure
level for them, followers, and their **recent exposure** — what the last round's feed showed
them (posts seen, agreeing / opposing their stance, carrying misinformation, toxic).

- **Surrogate users** answer from that state. A question declares what it measures
  (``measure=``, one of :data:`MEASURES`: stance, opinion, misinformed, trust, exposure,
  toxicity, feed_agreement, feed_opposing, feed_misinformation, feed_toxicity); the answer
  is then the first-person sentence about that measure and, with a ``scale``, the scale
  point the measure's value maps to (:func:`measure_value`, linear from the measure's range
  onto 1..scale). A question without a measure gets a summary of the whole state.

A question is a string or a dict ``{"id", "text", "scale", "measure"}`` (only ``text`` is
required); a survey's table has one row per (user, question) with ``question_id``,
``question`` (the text), ``measure``, ``scale``, ``value``, ``answer`` and the user's state.
Stances are labelled by :func:`socialenv.core.world.stance_label`, as in ``policysim play``.
- **LLM users** are prompted with their profile, the memories the brain would retrieve, the
  recent news and their stance, then the question, all users in **one batched backend call**
  (greedy decoding by default, so an interview repeated gives the same answers). With a
  ``scale`` the model is asked to start with a number; the first integer in range is parsed
  (``None`` and ``"invalid": "no_scale_value"`` when there is none).

Nothing in the world, the memories or any random stream of the env changes: interviews draw
no random numbers from the env (the survey's sample uses its own ``seed``), and the backend
call runs under ``torch.random.fork_rng`` where torch is loaded.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from policysim_infra.extras import require
from policysim_infra.validation import config_error, did_you_mean
from socialenv.core import kernels
from socialenv.core.world import discretize_stance, stance_label

#: What a question can measure: the state entry it reads and that entry's range.
MEASURES: dict[str, tuple[str, tuple[float, float]]] = {
    "stance": ("stance", (-1.0, 1.0)),  # smoothed stance (Eq. 2)
    "opinion": ("opinion", (-1.0, 1.0)),  # latent opinion
    "misinformed": ("misinformed", (0.0, 1.0)),  # believes the circulating claim
    "trust": ("trust", (0.0, 1.0)),  # susceptibility to what the feed claims
    "exposure": ("exposure", (0.0, 1.0)),  # the platform's exposure level for the user
    "toxicity": ("toxicity", (0.0, 1.0)),  # toxicity of what the user wrote lately
    "feed_agreement": ("feed_agreement", (0.0, 1.0)),  # shares of last round's feed
    "feed_opposing": ("feed_opposing", (0.0, 1.0)),
    "feed_misinformation": ("feed_misinformation", (0.0, 1.0)),
    "feed_toxicity": ("feed_toxicity", (0.0, 1.0)),
}


def _base(env: Any) -> Any:
    return getattr(env, "unwrapped", env)


def _user_ids(env: Any, user_ids: Any) -> np.ndarray:
    n = len(_base(env).sim.users.stance)
    try:
        ids = np.atleast_1d(np.asarray(user_ids))
    except Exception as err:  # noqa: BLE001 - anything unconvertible is bad input
        raise ValueError(f"user_ids must be a sequence of user ids in [0, {n}): {err}") from err
    if ids.ndim != 1 or len(ids) == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"user_ids={user_ids!r} is not allowed: a non-empty sequence of integer user ids in [0, {n})"
        )
    if ids.min() < 0 or ids.max() >= n:
        raise ValueError(f"user_ids holds ids outside [0, {n})")
    return ids.astype(np.int64)


def user_state(env: Any, user_ids: Any) -> list[dict[str, Any]]:
    """The structured state of each user (see the module docstring); reads only."""
    base = _base(env)
    sim = base.sim
    ids = _user_ids(env, user_ids)
    users, posts = sim.users, sim.posts
    seen = {
        k: np.zeros(len(ids), np.int64)
        for k in ("posts", "agreeing", "opposing", "misinformation", "toxic")
    }
    last = getattr(base, "_last_result", None)
    if last is not None and len(last.active):
        row = kernels.index_of(last.active, ids)
        here = row >= 0
        feed = last.feed[np.maximum(row, 0)]
        valid = (feed >= 0) & here[:, None]
        safe = np.maximum(feed, 0)
        own = last.discrete_before[ids][:, None]
        post_side = discretize_stance(posts.stance[safe])
        seen["posts"] = valid.sum(axis=1)
        seen["agreeing"] = (valid & (post_side == own) & (own != 0)).sum(axis=1)
        seen["opposing"] = (valid & (post_side == -own) & (own != 0)).sum(axis=1)
        seen["misinformation"] = (valid & posts.misinfo[safe]).sum(axis=1)
        seen["toxic"] = (valid & (posts.toxicity[safe] >= 0.15)).sum(axis=1)
    followers_indptr, _ = sim.graph.followers_csr()
    out = []
    for i, u in enumerate(ids.tolist()):
        shown = max(int(seen["posts"][i]), 1)
        out.append(
            {
                "user": u,
                "round": int(sim.round),
                "stance": float(users.stance[u]),
                "stance_label": stance_label(float(users.stance[u])),
                "opinion": float(users.opinion[u]),
                "misinformed": bool(users.misinformed[u]),
                "trust": float(users.susceptibility[u]),
                "exposure": float(users.exposure[u]),
                "toxicity": float(sim.recent_toxicity[u]),
                "followers": int(followers_indptr[u + 1] - followers_indptr[u]),
                **{f"seen_{k}": int(v[i]) for k, v in seen.items()},
                "feed_agreement": int(seen["agreeing"][i]) / shown,
                "feed_opposing": int(seen["opposing"][i]) / shown,
                "feed_misinformation": int(seen["misinformation"][i]) / shown,
                "feed_toxicity": int(seen["toxic"][i]) / shown,
            }
        )
    return out


def _surrogate_text(state: dict[str, Any], topic: str) -> str:
    """A summary of the whole state (a question that declares no measure)."""
    parts = [
        _MEASURE_TEXT[m](state, topic) for m in ("stance", "exposure_feed", "misinformed", "trust")
    ]
    return " ".join(parts)


def _feed_text(state: dict[str, Any], topic: str) -> str:
    if not state["seen_posts"]:
        return "I didn't read my feed last round."
    return (
        f"Last round my feed showed me {state['seen_posts']} posts: {state['seen_agreeing']} agreeing "
        f"with me, {state['seen_opposing']} against, {state['seen_misinformation']} with the "
        f"circulating claim and {state['seen_toxic']} hostile ones."
    )


def _share(state: dict[str, Any], key: str, what: str) -> str:
    if not state["seen_posts"]:
        return "I didn't read my feed last round."
    return f"{state[key]:.0%} of the {state['seen_posts']} posts in my feed last round {what}."


_MEASURE_TEXT = {
    "stance": lambda s, topic: (
        f"On {topic or 'this issue'} I'm {s['stance_label']} (stance {s['stance']:+.2f})."
    ),
    "opinion": lambda s, topic: (
        f"Deep down I'm {stance_label(s['opinion'])} on {topic or 'this issue'} "
        f"(opinion {s['opinion']:+.2f})."
    ),
    "misinformed": lambda s, topic: (
        "I believe the claim that is going around."
        if s["misinformed"]
        else "I don't buy the claims going around."
    ),
    "trust": lambda s, topic: (
        f"I mostly trust what I read here (trust {s['trust']:.2f})."
        if s["trust"] >= 0.5
        else f"I'm sceptical of what I read here (trust {s['trust']:.2f})."
    ),
    "exposure": lambda s, topic: (
        f"The platform shows my posts at {s['exposure']:.0%} of their usual reach."
        if s["exposure"] < 1
        else "The platform shows my posts to everyone as usual."
    ),
    "toxicity": lambda s, topic: (
        f"I've been {'hostile' if s['toxicity'] >= 0.15 else 'civil'} in what I "
        f"wrote lately (toxicity {s['toxicity']:.2f})."
    ),
    "exposure_feed": _feed_text,
    "feed_agreement": lambda s, topic: _share(s, "feed_agreement", "agreed with me"),
    "feed_opposing": lambda s, topic: _share(s, "feed_opposing", "were against my side"),
    "feed_misinformation": lambda s, topic: _share(
        s, "feed_misinformation", "carried the circulating claim"
    ),
    "feed_toxicity": lambda s, topic: _share(s, "feed_toxicity", "were hostile"),
}


def measure_value(state: dict[str, Any], measure: str, scale: int) -> int:
    """The point of 1..scale that ``measure``'s value maps to, linearly from its range
    (:data:`MEASURES`; stance and opinion from [-1, 1], the others from [0, 1])."""
    key, (low, high) = MEASURES[measure]
    unit = (float(state[key]) - low) / (high - low)
    return int(np.clip(1 + round(unit * (scale - 1)), 1, scale))


def _llm_brain(brain: Any) -> Any:
    """The LLM brain behind ``brain`` (unwrapping the PettingZoo view's mixed brain), or None."""
    from agent_models.llm.brain import LLMBrain

    while brain is not None and not isinstance(brain, LLMBrain):
        brain = getattr(brain, "inner", None)
    return brain


def _llm_answers(
    base: Any,
    brain: Any,
    ids: np.ndarray,
    states: list[dict[str, Any]],
    question: str,
    scale: int | None,
    temperature: float,
    max_new_tokens: int,
) -> tuple[list[str], dict[str, Any]]:
    from agent_models.llm.backends.base import Sampling
    from agent_models.llm.brain import profile_text

    sim = base.sim
    users = sim.users.view()
    cfg = brain.config
    if brain.memory is not None:
        remembered = brain.memory.retrieve(
            ids, None, sim.round, cfg.memory.top_k, cfg.memory.decay, cfg.memory.long_term_decay
        )
    else:
        remembered = [[] for _ in ids]
    news = brain.news[-cfg.news_in_prompt :] if cfg.news_in_prompt else []
    topic = sim.scenario.topic if sim.scenario else ""
    ask = (
        question
        if scale is None
        else (
            f"{question}\nStart your answer with a whole number from 1 to {scale}, then give one short reason."
        )
    )
    prompts = []
    for u, state, memories in zip(ids.tolist(), states, remembered, strict=True):
        lines = [
            f"You are {users.profiles.name(u)}, a user of a social media platform. {profile_text(users, u)}",
            f"The topic people discuss: {topic}." if topic else "",
            f"Your current position on it: {state['stance_label']}.",
            ("Recent news: " + " | ".join(news)) if news else "",
            ("What you remember:\n" + "\n".join(memories)) if memories else "",
            "A researcher is interviewing you. Answer in the first person, briefly and in character.",
        ]
        prompts.append(
            [
                {"role": "system", "content": "\n".join(x for x in lines if x)},
                {"role": "user", "content": ask},
            ]
        )
    sampling = Sampling(temperature=temperature, max_new_tokens=max_new_tokens, seed=0)
    try:
        import torch

        fork = torch.random.fork_rng(devices=[])
    except ImportError:  # pragma: no cover - torch is a core dependency
        import contextlib

        fork = contextlib.nullcontext()
    with fork:
        gen = brain.backend.generate(prompts, None, sampling)
    stats = {
        "prompt_tokens": gen.prompt_tokens.tolist(),
        "completion_tokens": gen.completion_tokens.tolist(),
        "errors": list(gen.errors),
        "seconds": gen.seconds,
    }
    return [t.strip() for t in gen.texts], stats


def interview(
    env: Any,
    user_ids: Any,
    question: str,
    *,
    scale: int | None = None,
    measure: str | None = None,
    temperature: float = 0.0,
    max_new_tokens: int = 96,
) -> list[dict[str, Any]]:
    """Ask ``question`` to ``user_ids``; returns one dict per user: its state (see
    :func:`user_state`), ``answer`` (text), ``value`` (the scale point, with ``scale``),
    ``source`` ("llm" or "state"), and for LLM users the token counts. Changes nothing.

    Args:
        env: a PolicySim env (wrapped or not) after ``reset``.
        user_ids: user ids to ask.
        question: the question text.
        scale: ask for a 1..scale answer (Likert); None = free text.
        measure: what the question measures (a key of :data:`MEASURES`): surrogate users
            answer about it (text and, with ``scale``, the scale point); LLM users answer the
            question themselves (the measure is only recorded).
        temperature, max_new_tokens: LLM sampling (greedy by default).
    """
    base = _base(env)
    if getattr(base, "_arms", None) is None:
        raise RuntimeError("call reset() before interview()")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question={question!r} is not allowed: a non-empty string")
    if scale is not None and (
        not isinstance(scale, int) or isinstance(scale, bool) or not 2 <= scale <= 11
    ):
        raise ValueError(f"scale={scale!r} is not allowed: None or an integer in [2, 11]")
    if measure is not None and measure not in MEASURES:
        raise config_error(
            "measure",
            measure,
            f"None or one of {', '.join(MEASURES)}{did_you_mean(measure, MEASURES)}",
        )
    ids = _user_ids(env, user_ids)
    states = user_state(env, ids)
    brain = _llm_brain(base.sim.brain)
    topic = base.sim.scenario.topic if base.sim.scenario else ""
    if brain is None:
        for state in states:
            state["answer"] = (
                _MEASURE_TEXT[measure](state, topic) if measure else _surrogate_text(state, topic)
            )
            state["value"] = (
                measure_value(state, measure, scale) if scale is not None and measure else None
            )
            state["source"] = "state"
        return states
    texts, stats = _llm_answers(
        base, brain, ids, states, question, scale, temperature, max_new_tokens
    )
    for i, (state, text) in enumerate(zip(states, texts, strict=True)):
        state["answer"] = text
        state["source"] = "llm"
        state["prompt_tokens"] = int(stats["prompt_tokens"][i])
        state["completion_tokens"] = int(stats["completion_tokens"][i])
        if stats["errors"][i]:
            state["invalid"] = "backend_error"
        state["value"] = None
        if scale is not None:
            numbers = [int(x) for x in re.findall(r"\d+", text) if 1 <= int(x) <= scale]
            state["value"] = numbers[0] if numbers else None
            if not numbers and "invalid" not in state:
                state["invalid"] = "no_scale_value"
    return states


def survey(env: Any, questions: Any, sample: Any = 20, seed: int = 0, as_frame: bool = True) -> Any:
    """Run a questionnaire over a sample of users; one row per (user, question).

    Args:
        questions: strings, or dicts ``{"id", "text", "scale", "measure"}`` (see
            :func:`interview`; ``id`` defaults to ``q<i>``). Each row holds ``question_id``,
            ``question`` (the text), ``measure`` and ``scale`` beside the answer.
        sample: how many users (drawn without replacement with ``seed``, not from the env's
            random streams) or an explicit sequence of user ids.
        as_frame: return a ``pandas.DataFrame`` (needs pandas) or a list of row dicts.
    """
    base = _base(env)
    n = len(base.sim.users.stance)
    if isinstance(sample, int | np.integer) and not isinstance(sample, bool):
        if not 1 <= sample <= n:
            raise ValueError(
                f"sample={sample} is not allowed: an integer in [1, {n}] or a sequence of user ids"
            )
        ids = np.sort(np.random.default_rng(seed).choice(n, size=int(sample), replace=False))
    else:
        ids = _user_ids(env, sample)
    if isinstance(questions, str | dict) or not len(questions):
        raise ValueError("questions must be a non-empty list of strings or dicts with 'text'")
    rows: list[dict[str, Any]] = []
    for i, q in enumerate(questions):
        spec = {"text": q} if isinstance(q, str) else dict(q)
        unknown = set(spec) - {"id", "text", "scale", "measure"}
        if unknown or "text" not in spec:
            raise ValueError(
                f"questions[{i}]={q!r} is not allowed: a string or a dict with 'text' and optional "
                "'id', 'scale', 'measure'"
            )
        qid = str(spec.get("id", f"q{i}"))
        for answer in interview(
            env, ids, spec["text"], scale=spec.get("scale"), measure=spec.get("measure")
        ):
            rows.append(
                {
                    "question_id": qid,
                    "question": spec["text"],
                    "measure": spec.get("measure"),
                    "scale": spec.get("scale"),
                    **answer,
                }
            )
    if not as_frame:
        return rows
    pd = require("pandas", None, "survey(as_frame=True)", hint="or pass as_frame=False")
    return pd.DataFrame(rows)
