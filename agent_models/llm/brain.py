"""The LLM user brain: every active user is an LLM agent, all of them in one batched call.

One round (:meth:`LLMBrain.act`), for B active users, one method per step:

1. ``_read_feeds``: what each agent may refer to (post ids, authors, whether it follows them);
2. ``_recall``: memory retrieval for all B at once (similarity × time decay, top-k, vectorized);
3. ``_agent_prompts`` (shared system part first) and answer schemas → **one** backend call;
4. ``_validate``: answers parsed and validated (:mod:`.schema`); a rejected answer = that
   agent does nothing, its reason is counted in ``RoundOutput.invalid``;
5. ``_memory_call``: **one** backend call for memory: summaries of the long posts read this
   round (short ones are stored verbatim) and consolidations of users over their short-term
   capacity;
6. ``_stance_call``: **one** backend call for stance (Eq. 1): each active user's recent posts
   → −1/0/+1 (``stance_user``/``stance_discrete``; the env applies the EMA of Eq. 2); the
   same call asks whether each reply to a misinformation post agrees with its claim;
7. ``_encode_and_score``: one encoder call (new texts, memories), one toxicity call, the
   misinformation rule (:mod:`.signals`); then ``_write_memories`` and ``_output`` (the
   columns of :class:`RoundOutput`).

Per-agent Python work is string formatting and parsing only; model calls are batched.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from agent_models.base import Brain
from agent_models.llm.backends.base import (
    Backend,
    Generation,
    LLMBackendError,
    Sampling,
    ScoringUnsupported,
    fold_system,
)
from agent_models.llm.config import LLMConfig
from agent_models.llm.memory import SHORT, MemoryStore, group_rank
from agent_models.llm.prompts import (
    agent_system_prompt,
    agent_user_prompt,
    agreement_messages,
    clip,
    consolidation_messages,
    feed_line,
    interaction_in_words,
    stance_in_words,
    summary_messages,
    topic_free,
)
from agent_models.llm.schema import (
    ConsolidationAnswer,
    FeedView,
    ParsedAnswer,
    SummaryAnswer,
    agreement_schema,
    answer_schema,
    consolidation_schema,
    is_placeholder,
    parse_agreement,
    parse_answer,
    parse_field,
    summary_schema,
)
from agent_models.llm.signals import TextEncoder, make_toxicity, misinformation_update
from agent_models.llm.stance import (
    StanceLabels,
    decode_stances,
    labeller_check,
    score_stances,
)
from agent_models.llm.text_quality import TEXT_INVALID_REASONS, PromptCopyCheck, RoundTexts
from agent_models.types import (
    Behaviour,
    PostColumns,
    RoundInput,
    RoundOutput,
    UserColumns,
)


def profile_text(users: UserColumns, i: int) -> str:
    """The text embedded as user i's profile embedding (Eq. 7)."""
    d = users.profiles.describe(i)
    return (
        f"{d['likely_identity']}. Interested in {d['interested_areas']}. "
        f"Posting style: {d['posting_style']}. {d['interaction_behaviour']}."
    )


#: What the re-ask (``retry_invalid``) tells the agent about its rejected answer.
REASK_REASONS: dict[str, str] = {
    "malformed_json": "it was not one valid JSON object",
    "truncated": "it was cut off before the JSON object was complete; answer with fewer or shorter actions",
    "schema": "it did not follow the answer format of the instructions",
    "unknown_post": "it used a post id that is not in [brackets] in your feed",
    "unknown_user": "it used a user id that is not shown (id ...) in your feed",
    "impossible_action": "it holds an impossible action (like and dislike of one post, following "
    "yourself or someone you already follow, unfollowing someone you do not follow, "
    "or a behaviour that is not allowed)",
    "too_many_actions": "it has more actions than allowed",
    "placeholder_text": "a text was a placeholder, not your own words",
    "copied_prompt": "a text copied your instructions, profile, memories or feed; write your own new words",
    "json_debris": "a text held pieces of JSON (quotes and brackets); write plain words",
    "duplicate_text": "a text repeated what another user wrote this round; write your own words",
}


def persona(users: UserColumns, i: int) -> dict[str, str]:
    """User i's profile as the agent prompt states it: the four attributes, its stance on
    the topic in words and its interaction behaviour in plain language with its activity."""
    p = users.profiles
    described = p.describe(i)
    described["stance"] = stance_in_words(float(users.stance[i]))
    described["interaction_behaviour"] = interaction_in_words(
        p.interaction_role[i],
        float(p.post_retweet_ratio[i]),
        float(p.reply_frequency[i]),
        float(p.follower_following_ratio[i]),
        float(users.activity[i]),
    )
    return described


def reask_message(reason: str, max_actions: int, max_text_chars: int) -> str:
    """The user message of a re-ask after an answer rejected for ``reason``."""
    why = REASK_REASONS.get(reason, "it was not a valid answer")
    return (
        f"Your answer was rejected: {why}. Answer again with one JSON object (at most "
        f"{max_actions} actions, texts of at most {max_text_chars} characters), nothing else."
    )


def without_topic(text: str | None, topic: str) -> str | None:
    """``text`` without the round's topic phrase (:func:`~agent_models.llm.prompts.topic_free`:
    a leading "On <topic>: " dropped, other mentions shortened to "the topic"), so memories
    and their length budget carry what the post says, not the topic every prompt names once."""
    return topic_free(text, topic)


def checked_memory_text(
    raw: str,
    answer: type[SummaryAnswer] | type[ConsolidationAnswer],
    kind: str,
    invalid: dict[str, int],
) -> str | None:
    """The text of a summary / consolidation answer, or None after counting why it is
    rejected (``<kind>_malformed`` or ``<kind>_placeholder``) in ``invalid``."""
    value = parse_field(raw, answer)
    if value is not None and not is_placeholder(value):
        return value
    reason = f"{kind}_malformed" if value is None else f"{kind}_placeholder"
    invalid[reason] = invalid.get(reason, 0) + 1
    return None


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-8)).astype(np.float32)


@dataclass
class _Feeds:
    """Step 1: the active agents' (B, K) feeds."""

    feed: np.ndarray  # post ids, -1 = empty slot
    valid: np.ndarray  # the slot holds a post
    safe: np.ndarray  # feed with empty slots at post 0, for gathers
    authors: np.ndarray  # each slot's author, -1 = empty
    followed: np.ndarray  # the agent follows that author


@dataclass
class _Prompts:
    """Step 3: the decision call's prompts, the views answers are checked against, schemas."""

    messages: list[Any] = field(default_factory=list)
    views: list[FeedView] = field(default_factory=list)
    schemas: list[dict[str, Any]] = field(default_factory=list)
    shared_schema: dict[str, Any] | None = None

    @property
    def schema_arg(self) -> dict[str, Any] | list[dict[str, Any]]:
        return self.shared_schema if self.shared_schema is not None else self.schemas


@dataclass
class _Actions:
    """Step 4: the answers (None = rejected) and their actions, flattened in agent order."""

    parsed: list[ParsedAnswer | None]
    post_user: list[int] = field(default_factory=list)
    post_text: list[str] = field(default_factory=list)
    r_user: list[int] = field(default_factory=list)
    r_post: list[int] = field(default_factory=list)
    r_kind: list[int] = field(default_factory=list)
    r_text: list[str | None] = field(default_factory=list)
    f_src: list[int] = field(default_factory=list)
    f_dst: list[int] = field(default_factory=list)
    u_src: list[int] = field(default_factory=list)
    u_dst: list[int] = field(default_factory=list)

    @classmethod
    def collect(cls, active: np.ndarray, parsed: list[ParsedAnswer | None]) -> _Actions:
        out = cls(parsed)
        for b, answer in enumerate(parsed):
            if answer is None:
                continue
            user = int(active[b])
            out.post_user += [user] * len(answer.posts)
            out.post_text += answer.posts
            for kind, pid, text in answer.reactions:
                out.r_user.append(user)
                out.r_post.append(pid)
                out.r_kind.append(kind)
                out.r_text.append(text)
            out.f_src += [user] * len(answer.follows)
            out.f_dst += answer.follows
            out.u_src += [user] * len(answer.unfollows)
            out.u_dst += answer.unfollows
        return out

    @cached_property
    def react_user(self) -> np.ndarray:
        return np.array(self.r_user, np.int64)

    @cached_property
    def react_post(self) -> np.ndarray:
        return np.array(self.r_post, np.int64)

    @cached_property
    def react_kind(self) -> np.ndarray:
        return np.array(self.r_kind, np.int8)

    @cached_property
    def is_reply(self) -> np.ndarray:
        return self.react_kind == int(Behaviour.REPLY)

    @cached_property
    def written_user(self) -> np.ndarray:
        """Authors of the round's texts: posts first, then replies."""
        return np.array(
            self.post_user + [self.r_user[i] for i in np.flatnonzero(self.is_reply)], np.int64
        )

    @cached_property
    def written_text(self) -> list[str]:
        return self.post_text + [self.r_text[i] or "" for i in np.flatnonzero(self.is_reply)]


@dataclass
class _Reads:
    """Step 5: this round's reads not yet in memory, and the memory call's results."""

    read_user: np.ndarray
    read_post: np.ndarray
    to_summarise: list[int] = field(default_factory=list)  # first read, long: summarised
    long_texts: list[str] = field(default_factory=list)  # their texts
    verbatim: list[int] = field(default_factory=list)  # first read, short: kept as is
    summaries: dict[int, str] = field(default_factory=dict)
    cons_users: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cons_groups: list[np.ndarray] = field(default_factory=list)
    consolidated: list[str] = field(default_factory=list)


@dataclass
class _Stances:
    """Step 6: the stance call's answers."""

    value: dict[int, int] = field(default_factory=dict)  # user → −1/0/+1
    agreed: list[int] = field(default_factory=list)  # repliers agreeing with a misinformation post


@dataclass
class _Encoded:
    """Step 7: memory texts, embeddings and scores of the round's texts."""

    read_order: list[int]
    read_texts: list[str]
    own_texts: list[str]
    read_emb: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    own_emb: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    written_emb: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    cons_emb: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    written_tox: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    similarity: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    has_misinfo: bool = False
    newly_misinformed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class LLMBrain(Brain):
    """User behaviour from a language model (see the module docstring for one round).

    Args:
        config: an :class:`LLMConfig` or a dict of its fields.
        backend: an already built backend (shared between brains, or a test double);
            default: built from ``config`` on the first :meth:`reset`.
        encoder: an already loaded :class:`TextEncoder` to share; default: ``config.encoder``.
    """

    needs_text = True

    def __init__(
        self,
        config: LLMConfig | dict[str, Any],
        backend: Backend | None = None,
        encoder: TextEncoder | None = None,
    ) -> None:
        self.config = config if isinstance(config, LLMConfig) else LLMConfig.model_validate(config)
        self._backend = backend
        cfg = self.config
        self.encoder = encoder or TextEncoder(
            cfg.resolved_encoder(), cfg.encoder_device, cfg.encoder_batch_size
        )
        self.toxicity = make_toxicity(cfg.toxicity)
        self.memory: MemoryStore | None = None
        self.news: list[str] = []
        self._seeded = False
        self._reset_seed = 0
        self._checked = True
        self._misinfo_key: str | None = None
        self._misinfo_emb: np.ndarray | None = None
        self.last_stats: dict[str, float] = {}
        #: ``reasoning="bdi"``: user → emotion / belief / desire / intention of the last round
        self.last_states: dict[int, dict[str, str]] = {}
        #: the labeller check of the last reset (``stance_check_*``, see :mod:`.stance`)
        self.stance_check: dict[str, float] = {}
        self._stance_warned = False
        self._scoring: bool | None = None  # None: not tried yet
        #: answers decoded under a schema / of those, answers that did not parse (whole run)
        self.constrained_answers = 0
        self.constrained_unparsed = 0

    # ------------------------------------------------------------------ Brain API
    @property
    def embedding_dim(self) -> int:  # type: ignore[override]
        return self.encoder.dim

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from agent_models.llm.backends import make_backend

            self._backend = make_backend(self.config)
        return self._backend

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    def reset(self, users: UserColumns, posts: PostColumns, seed: int) -> np.ndarray:
        """Load the model (first time), clear memories, return (N, d) profile embeddings."""
        _ = self.backend
        self.toxicity(["warm-up"])  # loads the classifier now, not inside round 0's timing
        self.memory = MemoryStore(self.embedding_dim)
        self.news = []
        self._seeded = False
        self.constrained_answers = self.constrained_unparsed = 0
        self.stance_check = {}
        self._reset_seed = int(seed)
        self._checked = False
        return self.encoder.encode([profile_text(users, i) for i in range(len(users))])

    def check_labeller(
        self, users: UserColumns, posts: PostColumns, seed: int, topic: str
    ) -> dict[str, float]:
        """Before round 0 (the first :meth:`act` after :meth:`reset`, which knows the topic):
        label the history posts of ``stance_check_users`` users (drawn from ``seed``) and
        compare with their seed stances (cut at ±1/3): agreement and confusion matrix
        (:func:`~agent_models.llm.stance.labeller_check`); warns once below
        ``stance_min_agreement``, or raises :class:`LLMBackendError` with ``strict=True``."""
        cfg = self.config
        if cfg.stance_check_users == 0 or posts.text is None or not len(posts):
            return {}
        idx = np.flatnonzero((posts.round < 0) & np.array([bool(t) for t in posts.text]))
        idx = idx[np.lexsort((-idx, posts.author[idx]))]
        idx = idx[group_rank(posts.author[idx]) < cfg.stance_history]
        authors = np.unique(posts.author[idx])
        if not len(authors):
            return {}
        rng = np.random.default_rng([int(seed), 1])
        chosen = np.sort(
            rng.choice(authors, min(cfg.stance_check_users, len(authors)), replace=False)
        )
        texts = {int(u): [] for u in chosen.tolist()}
        for i, a in zip(idx.tolist(), posts.author[idx].tolist(), strict=True):
            if a in texts:
                texts[a].append(posts.text[i] or "")
        stats: dict[str, float] = {"llm_calls": 0.0, "llm_seconds": 0.0}
        labels = self._label(
            rng, topic, [users.profiles.name(u) for u in texts], list(texts.values()), stats
        )
        truth = np.where(
            users.stance[chosen] > 1 / 3, 1, np.where(users.stance[chosen] < -1 / 3, -1, 0)
        )
        check = labeller_check(labels.value, truth.tolist())
        check["stance_check_scored"] = float(labels.method == "scored")
        agreement = check.get("stance_check_agreement", 1.0)
        if agreement < cfg.stance_min_agreement:
            message = (
                f"stance labeller: agrees with the scenario's seed stances on "
                f"{agreement:.0%} of {len(truth)} users (stance_min_agreement="
                f"{cfg.stance_min_agreement}; always answering the most common stance "
                f"would reach {check['stance_check_majority']:.0%}); labels "
                f"({labels.method}) by known stance against/neutral/favor: "
                + "; ".join(
                    f"{t}: "
                    + "/".join(
                        str(int(check[f"stance_check_{t}_as_{x}"]))
                        for x in ("against", "neutral", "favor")
                    )
                    for t in ("against", "neutral", "favor")
                )
                + ". The stances of this run are not to be trusted: use a larger model."
            )
            if cfg.strict:
                raise LLMBackendError(message + " (strict=True refuses to run)")
            if not self._stance_warned:
                warnings.warn(message, RuntimeWarning, stacklevel=3)
                self._stance_warned = True
        return check

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "memory": None if self.memory is None else self.memory.state_dict(),
            "news": list(self.news),
            "seeded": self._seeded,
            "stance_check": dict(self.stance_check),
            "checked": self._checked,
            "reset_seed": self._reset_seed,
            "constrained": [self.constrained_answers, self.constrained_unparsed],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mem = state.get("memory")
        self.memory = None if mem is None else MemoryStore.from_state_dict(mem)
        self.news = list(state.get("news", []))
        self._seeded = bool(state.get("seeded", False))
        self.stance_check = {str(k): float(v) for k, v in state.get("stance_check", {}).items()}
        self._checked = bool(state.get("checked", True))
        self._reset_seed = int(state.get("reset_seed", 0))
        self.constrained_answers, self.constrained_unparsed = (
            int(x) for x in state.get("constrained", [0, 0])
        )

    # ------------------------------------------------------------------ helpers
    def _call(
        self,
        prompts: list[Any],
        schemas: Any,
        sampling: Sampling,
        stats: dict[str, float],
        tag: str,
    ) -> Generation:
        backend = self.backend
        fold = self.config.system_role == "fold" or (
            self.config.system_role == "auto" and not backend.system_role
        )
        if fold:
            prompts = [fold_system(p) for p in prompts]
        gen = backend.generate(prompts, schemas if self.config.constrained else None, sampling)
        if len(gen.texts) != len(prompts) or len(gen.finish_reasons) != len(prompts):
            message = (
                f"backend {type(self.backend).__name__} returned {len(gen.texts)} completions "
                f"for {len(prompts)} prompts"
            )
            if self.config.fail_on_backend_error:
                raise LLMBackendError(message)
            gen = Generation.failed(len(prompts), message, gen.seconds)
        stats["llm_calls"] += 1
        stats["llm_seconds"] += gen.seconds
        stats["llm_prompts"] = stats.get("llm_prompts", 0.0) + len(prompts)
        stats["replay_hits"] = stats.get("replay_hits", 0.0) + gen.replayed
        stats[f"{tag}_prompts"] = float(len(prompts))
        stats[f"{tag}_prompt_tokens"] = float(gen.prompt_tokens.sum())
        stats[f"{tag}_completion_tokens"] = float(gen.completion_tokens.sum())
        return gen

    def _sampling(
        self,
        rng: np.random.Generator,
        aux: bool,
        max_new_tokens: int,
        temperature: float | None = None,
    ) -> Sampling:
        cfg = self.config
        if temperature is None:
            temperature = cfg.aux_temperature if aux else cfg.temperature
        return Sampling(
            temperature=temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_new_tokens=max_new_tokens,
            repetition_penalty=cfg.repetition_penalty,
            seed=int(rng.integers(0, 2**31 - 1)),
        )

    def _misinfo_embedding(self, message: str | None) -> np.ndarray | None:
        if not message:
            return None
        if message != self._misinfo_key:
            self._misinfo_emb = self.encoder.encode([message])[0]
            self._misinfo_key = message
        return self._misinfo_emb

    def _seed_memory(self, ri: RoundInput) -> None:
        """Round 0: each user remembers its last few pre-simulation posts (verbatim)."""
        assert self.memory is not None
        self._seeded = True
        k = self.config.memory.history_posts
        posts = ri.posts
        if k == 0 or len(posts) == 0 or posts.text is None:
            return
        idx = np.flatnonzero(posts.round < 0)
        idx = idx[np.lexsort((-idx, posts.author[idx]))]
        idx = idx[group_rank(posts.author[idx]) < k]
        texts = [
            f"You posted: {clip(without_topic(posts.text[i], ri.topic), self.config.memory.memory_chars)}"
            for i in idx.tolist()
        ]
        if not texts:
            return
        if posts.latent.shape[1] == self.memory.dim:
            emb = _unit_rows(posts.latent[idx])
        else:
            emb = self.encoder.encode(texts)
        rows = self.memory.add_texts(texts, emb)
        self.memory.add_entries(posts.author[idx], -1, SHORT, rows)

    # ------------------------------------------------------------------ one round
    def act(self, round_input: RoundInput) -> RoundOutput:
        """One round: the steps of the module docstring, one method each, in that order."""
        ri = round_input
        t_start = time.perf_counter()
        stats: dict[str, float] = {
            "llm_calls": 0.0,
            "llm_seconds": 0.0,
            "llm_prompts": 0.0,
            "replay_hits": 0.0,
            "encoder_seconds": 0.0,
            "toxicity_seconds": 0.0,
        }
        store = self._round_memory(ri)
        if not self._checked:
            self.stance_check = self.check_labeller(ri.users, ri.posts, self._reset_seed, ri.topic)
            self._checked = True
        # committed to self.news only when the round completes, so a round retried after a
        # backend error sees the same news as an uninterrupted run
        news = self.news + [e.headline for e in ri.news]
        active = np.asarray(ri.active, np.int64)
        if len(active) == 0:
            return self._finish(
                RoundOutput(post_latent=np.zeros((0, store.dim), np.float32)), stats, news
            )
        feeds = self._read_feeds(ri, active)
        remembered = self._recall(ri, active, feeds)
        prompts = self._agent_prompts(ri, active, feeds, remembered, news, stats)
        decision = self._call(
            prompts.messages,
            prompts.schema_arg,
            self._sampling(ri.rng, False, self.config.max_new_tokens),
            stats,
            "agent",
        )
        invalid: dict[str, int] = {}
        actions = self._validate(ri, active, prompts, decision, invalid, stats)
        reads = self._memory_call(ri, active, feeds, invalid, stats)
        stances = self._stance_call(ri, active, actions, invalid, stats)
        encoded = self._encode_and_score(ri, actions, reads, stances, stats)
        self._write_memories(ri, actions, reads, encoded)
        out = self._output(ri, actions, stances, encoded, invalid)
        self._round_stats(stats, active, actions, t_start)
        return self._finish(out, stats, news)

    def _round_memory(self, ri: RoundInput) -> MemoryStore:
        """The memory store, created (and seeded from round 0's history) on first use."""
        if self.memory is None:
            self.memory = MemoryStore(self.embedding_dim)
        if not self._seeded:
            self._seed_memory(ri)
        return self.memory

    def _finish(self, out: RoundOutput, stats: dict[str, float], news: list[str]) -> RoundOutput:
        """Attach the round's stats and commit its news (the round completed)."""
        out.stats = stats
        self.last_stats = stats
        self.news = news
        return out

    # step 1 ---------------------------------------------------------------------------
    def _read_feeds(self, ri: RoundInput, active: np.ndarray) -> _Feeds:
        """What each agent may refer to: its feed's posts, their authors, whom it follows."""
        posts, n_users = ri.posts, len(ri.users)
        feed = np.asarray(ri.feed, np.int64)
        valid = feed >= 0
        safe = np.where(valid, feed, 0)
        authors = np.where(valid, posts.author[safe] if len(posts) else 0, -1)
        src = np.repeat(np.arange(n_users, dtype=np.int64), np.diff(ri.following_indptr))
        follow_keys = src * n_users + np.asarray(ri.following_indices, np.int64)
        followed = valid & np.isin(active[:, None] * n_users + authors, follow_keys)
        return _Feeds(feed, valid, safe, authors, followed)

    # step 2 ---------------------------------------------------------------------------
    def _recall(self, ri: RoundInput, active: np.ndarray, feeds: _Feeds) -> list[list[str]]:
        """Memory retrieval for all agents at once; the query is the mean of the feed's post
        embeddings (the agent's own latent for an empty feed) when they share the memory's space."""
        store, posts, users = self.memory, ri.posts, ri.users
        assert store is not None
        valid, safe = feeds.valid, feeds.safe
        queries = None
        if len(posts) and posts.latent.shape[1] == store.dim:
            summed = (posts.latent[safe] * valid[..., None]).sum(axis=1)
            fallback = users.latent[active] if users.latent.shape[1] == store.dim else summed
            queries = _unit_rows(np.where(valid.any(axis=1, keepdims=True), summed, fallback))
        elif users.latent.shape[1] == store.dim:
            queries = _unit_rows(users.latent[active])
        mcfg = self.config.memory
        return store.retrieve(
            active, queries, ri.round, mcfg.top_k, mcfg.decay, mcfg.long_term_decay
        )

    # step 3 ---------------------------------------------------------------------------
    def _agent_prompts(
        self,
        ri: RoundInput,
        active: np.ndarray,
        feeds: _Feeds,
        remembered: list[list[str]],
        news: list[str],
        stats: dict[str, float],
    ) -> _Prompts:
        """The decision call's prompts (shared system part first) and answer schemas."""
        cfg = self.config
        t_prompt = time.perf_counter()
        users, n_posts, n_users = ri.users, len(ri.posts), len(ri.users)
        shown_news = news[-cfg.news_in_prompt :] if cfg.news_in_prompt else []
        system = agent_system_prompt(
            ri.topic,
            shown_news,
            behaviours=cfg.behaviours,
            max_actions=cfg.max_actions,
            max_text_chars=cfg.max_text_chars,
            reasoning=cfg.reasoning,
        )
        bdi = cfg.reasoning == "bdi"
        prompts = _Prompts()
        if cfg.schema_mode == "shared":
            prompts.shared_schema = answer_schema(
                behaviours=cfg.behaviours,
                max_actions=cfg.max_actions,
                max_text_chars=cfg.max_text_chars,
                post_ids=(0, n_posts - 1),
                follow_ids=(0, n_users - 1),
                unfollow_ids=(0, n_users - 1),
                bdi=bdi,
                bdi_chars=cfg.bdi_chars,
            )
        for b, (lines, view) in enumerate(self._feed_lines(ri, active, feeds)):
            prompts.views.append(view)
            prompts.messages.append(
                [
                    {"role": "system", "content": system},
                    {
                        "role": "user",
                        "content": agent_user_prompt(
                            users.profiles.name(int(active[b])),
                            persona(users, view.user),
                            remembered[b],
                            lines,
                            ri.round,
                        ),
                    },
                ]
            )
            if prompts.shared_schema is None:
                prompts.schemas.append(
                    answer_schema(
                        behaviours=cfg.behaviours,
                        max_actions=cfg.max_actions,
                        max_text_chars=cfg.max_text_chars,
                        post_ids=sorted(set(view.post_ids)),
                        follow_ids=view.follow_candidates(),
                        unfollow_ids=view.unfollow_candidates(),
                        bdi=bdi,
                        bdi_chars=cfg.bdi_chars,
                    )
                )
        stats["prompt_seconds"] = time.perf_counter() - t_prompt
        return prompts

    def _feed_lines(
        self, ri: RoundInput, active: np.ndarray, feeds: _Feeds
    ) -> list[tuple[list[str], FeedView]]:
        """Each agent's feed as prompt lines, and as the view its answer is checked against."""
        posts, profiles, texts = ri.posts, ri.users.profiles, ri.posts.text
        safe, has_posts = feeds.safe, bool(len(posts))
        feed_l, authors_l, followed_l = (
            feeds.feed.tolist(),
            feeds.authors.tolist(),
            feeds.followed.tolist(),
        )
        channel_l = np.asarray(ri.feed_channel).tolist()
        kind_a, parent_a, likes_a, replies_a, retweets_a = (
            getattr(posts, name)[safe].tolist() if has_posts else feed_l
            for name in ("kind", "parent", "likes", "replies", "retweets")
        )
        out: list[tuple[list[str], FeedView]] = []
        for b, user in enumerate(active.tolist()):
            lines, ids, auth, fol = [], [], [], []
            for s, pid in enumerate(feed_l[b]):
                if pid < 0:
                    continue
                a = authors_l[b][s]
                ids.append(pid)
                auth.append(a)
                fol.append(followed_l[b][s])
                lines.append(
                    feed_line(
                        pid,
                        a,
                        profiles.name(a),
                        None if texts is None else texts[pid],
                        followed=followed_l[b][s],
                        channel=channel_l[b][s],
                        kind=kind_a[b][s],
                        parent=parent_a[b][s],
                        likes=likes_a[b][s],
                        replies=replies_a[b][s],
                        retweets=retweets_a[b][s],
                        text_chars=self.config.feed_text_chars,
                        topic=ri.topic,
                    )
                )
            out.append((lines, FeedView(user, ids, auth, fol)))
        return out

    # step 4 ---------------------------------------------------------------------------
    def _validate(
        self,
        ri: RoundInput,
        active: np.ndarray,
        prompts: _Prompts,
        decision: Generation,
        invalid: dict[str, int],
        stats: dict[str, float],
    ) -> _Actions:
        """Parse and validate the answers (with ``retry_invalid``, re-ask the rejected ones
        once); a rejected answer is counted in ``invalid`` and that agent does nothing."""
        cfg = self.config
        bdi = cfg.reasoning == "bdi"
        results: list[ParsedAnswer | str] = []
        for b, text in enumerate(decision.texts):
            if decision.finish_reasons[b] == "error":
                results.append("backend_error")
            else:
                results.append(
                    parse_answer(
                        text,
                        prompts.views[b],
                        max_actions=cfg.max_actions,
                        max_text_chars=cfg.max_text_chars,
                        behaviours=cfg.behaviours,
                        truncated=decision.finish_reasons[b] == "length",
                        bdi=bdi,
                    )
                )
        self._count_constrained(
            sum(f == "stop" for f in decision.finish_reasons),
            sum(
                r in ("malformed_json", "schema") and f == "stop"
                for r, f in zip(results, decision.finish_reasons, strict=True)
            ),
        )
        accepted = RoundTexts(cfg.near_duplicate)
        quality = {
            "text_checked": 0.0,
            "text_copied_prompt": 0.0,
            "text_json_debris": 0.0,
            "text_duplicate_text": 0.0,
        }
        self._check_texts(
            results, range(len(results)), active, prompts, accepted, quality, ri.topic
        )
        if cfg.retry_invalid:
            redo = self._reask(
                results,
                decision,
                prompts.messages,
                prompts.schemas,
                prompts.shared_schema,
                prompts.views,
                ri.rng,
                stats,
            )
            self._check_texts(results, redo, active, prompts, accepted, quality, ri.topic)
            stats["reask_recovered"] = float(sum(not isinstance(results[b], str) for b in redo))
        stats.update(quality)
        stats["text_rejected"] = float(sum(r in TEXT_INVALID_REASONS for r in results))
        stats["texts_accepted"] = float(
            sum(
                len(r.posts) + sum(t is not None for _, _, t in r.reactions)
                for r in results
                if not isinstance(r, str)
            )
        )
        parsed: list[ParsedAnswer | None] = []
        for result in results:
            if isinstance(result, str):
                invalid[result] = invalid.get(result, 0) + 1
                parsed.append(None)
            else:
                parsed.append(result)
        if bdi:
            self.last_states = {
                int(active[b]): a.state
                for b, a in enumerate(parsed)
                if a is not None and a.state is not None
            }
            for state in self.last_states.values():
                key = f"emotion_{state['emotion']}"
                stats[key] = stats.get(key, 0.0) + 1.0
        return _Actions.collect(active, parsed)

    def _check_texts(
        self,
        results: list[ParsedAnswer | str],
        which: Any,
        active: np.ndarray,
        prompts: _Prompts,
        accepted: RoundTexts,
        quality: dict[str, float],
        topic: str,
    ) -> None:
        """Reject (in place) the answers in ``which`` whose texts copy their prompt, carry JSON
        debris or duplicate a text another agent of the round wrote (:mod:`.text_quality`);
        the texts of the answers kept join ``accepted``."""
        cfg = self.config
        for b in which:
            answer = results[b]
            if isinstance(answer, str):
                continue
            texts = answer.posts + [t for _, _, t in answer.reactions if t]
            if not texts:
                continue
            author = int(active[b])
            check = PromptCopyCheck(
                "\n".join(m["content"] for m in prompts.messages[b]),
                cfg.copy_ngram,
                cfg.copy_overlap,
                cfg.copy_run_words,
                topic,
            )
            problem = None
            for text in texts:
                quality["text_checked"] += 1
                problem = check.problem(text) or (
                    "duplicate_text" if accepted.duplicate(text, author) else None
                )
                if problem is not None:
                    quality[f"text_{problem}"] += 1
                    break
            if problem is None:
                accepted.add(texts, author)
            else:
                results[b] = problem

    # step 5 ---------------------------------------------------------------------------
    def _memory_call(
        self,
        ri: RoundInput,
        active: np.ndarray,
        feeds: _Feeds,
        invalid: dict[str, int],
        stats: dict[str, float],
    ) -> _Reads:
        """One call for memory: summaries of the long posts read for the first time (short
        ones are kept verbatim) and consolidations of users over their short-term capacity."""
        cfg, mcfg, store = self.config, self.config.memory, self.memory
        assert store is not None
        reads = self._fresh_reads(ri, active, feeds)
        cons_users, cons_groups = store.sample_consolidation(
            mcfg.short_term_capacity, mcfg.consolidate_size, ri.rng
        )
        reads.cons_users, reads.cons_groups = cons_users, cons_groups
        names = ri.users.profiles
        mem_prompts: list[Any] = [
            summary_messages(names.name(int(ri.posts.author[p])), text, mcfg.summary_chars)
            for p, text in zip(reads.to_summarise, reads.long_texts, strict=True)
        ]
        mem_prompts += [
            consolidation_messages(
                names.name(u), [store.texts[r] for r in store.row[group]], mcfg.memory_chars
            )
            for u, group in zip(cons_users.tolist(), cons_groups, strict=True)
        ]
        mem_schemas = [summary_schema(mcfg.summary_chars)] * len(reads.to_summarise) + [
            consolidation_schema(mcfg.memory_chars)
        ] * len(cons_users)
        stats["summaries"] = float(len(reads.to_summarise))
        stats["consolidations"] = float(len(cons_users))
        mem_texts: list[str] = []
        if mem_prompts:
            gen = self._call(
                mem_prompts,
                mem_schemas,
                self._sampling(ri.rng, True, cfg.summary_max_new_tokens, cfg.memory_temperature),
                stats,
                "memory",
            )
            mem_texts = gen.texts
        before = sum(invalid.get(k, 0) for k in ("summary_malformed", "consolidation_malformed"))
        self._parse_memory_answers(ri, reads, mem_texts, invalid)
        if mem_texts:
            after = sum(invalid.get(k, 0) for k in ("summary_malformed", "consolidation_malformed"))
            self._count_constrained(sum(f == "stop" for f in gen.finish_reasons), after - before)
        return reads

    def _fresh_reads(self, ri: RoundInput, active: np.ndarray, feeds: _Feeds) -> _Reads:
        """The (user, post) reads not yet in memory, and the posts read for the first time:
        longer than ``length_threshold`` (to summarise) or not (kept verbatim)."""
        store, texts, threshold = self.memory, ri.posts.text, self.config.memory.length_threshold
        assert store is not None
        read_b, read_s = np.nonzero(feeds.valid)
        read_user, read_post = active[read_b], feeds.feed[read_b, read_s]
        fresh = ~store.has_read(read_user, read_post)
        reads = _Reads(read_user[fresh], read_post[fresh])
        new_posts = [p for p in np.unique(reads.read_post).tolist() if p not in store.post_row]
        for p in new_posts:
            text = "" if texts is None or texts[p] is None else texts[p]
            if len(text) > threshold:
                reads.to_summarise.append(p)
                reads.long_texts.append(text)
            else:
                reads.verbatim.append(p)
        return reads

    def _parse_memory_answers(
        self, ri: RoundInput, reads: _Reads, raws: list[str], invalid: dict[str, int]
    ) -> None:
        """``reads.summaries`` (the clipped post for a rejected summary) and
        ``reads.consolidated`` (the joined short-term entries, clipped, for a rejected one)."""
        store, mcfg, texts = self.memory, self.config.memory, ri.posts.text
        assert store is not None
        n_s = len(reads.to_summarise)
        for p, raw in zip(reads.to_summarise, raws[:n_s], strict=True):
            value = checked_memory_text(raw, SummaryAnswer, "summary", invalid)
            reads.summaries[p] = (
                value
                if value is not None
                else clip(
                    without_topic(texts[p] if texts is not None else "", ri.topic),
                    mcfg.summary_chars,
                )
            )
        for group, raw in zip(reads.cons_groups, raws[n_s:], strict=True):
            value = checked_memory_text(raw, ConsolidationAnswer, "consolidation", invalid)
            if value is None:
                value = clip(" ".join(store.texts[r] for r in store.row[group]), mcfg.memory_chars)
            reads.consolidated.append(value[: mcfg.memory_chars])

    # step 6 ---------------------------------------------------------------------------
    def _label(
        self,
        rng: np.random.Generator,
        topic: str,
        names: list[str],
        texts: list[list[str]],
        stats: dict[str, float],
    ) -> StanceLabels:
        """Stance labels of users from their texts: scored where the backend can (see
        :mod:`.stance`), else decoded; counts the call in ``stats``."""
        cfg = self.config
        backend = self.backend
        t0 = time.perf_counter()
        labels: StanceLabels | None = None
        if cfg.stance_method != "decoded" and self._scoring is not False:
            try:
                fold = cfg.system_role == "fold" or (
                    cfg.system_role == "auto" and not backend.system_role
                )
                labels = score_stances(
                    backend,
                    topic,
                    names,
                    texts,
                    rng,
                    text_chars=cfg.feed_text_chars,
                    calibrate=cfg.stance_calibration == "contextual",
                    fold=fold,
                )
                self._scoring = True
            except ScoringUnsupported:
                if cfg.stance_method == "scored":
                    raise
                self._scoring = False
        if labels is None:
            labels = decode_stances(
                lambda p, schema, sampling: self._call(p, schema, sampling, stats, "stance"),
                topic,
                names,
                texts,
                rng,
                text_chars=cfg.feed_text_chars,
                sampling=self._sampling(rng, True, cfg.stance_max_new_tokens),
            )
            self._count_constrained(len(labels.value), sum(v is None for v in labels.value))
        else:
            stats["llm_calls"] += 1
            stats["llm_seconds"] += time.perf_counter() - t0
        stats["stance_scored"] = float(labels.method == "scored")
        return labels

    def _count_constrained(self, answers: int, unparsed: int) -> None:
        """The constrained-decoding monitor: stops the run once more than
        ``max_unparsed_share`` of the answers decoded under a schema did not parse."""
        cfg = self.config
        if not cfg.constrained or answers == 0:
            return
        self.constrained_answers += answers
        self.constrained_unparsed += unparsed
        n, bad = self.constrained_answers, self.constrained_unparsed
        if n >= cfg.unparsed_min_answers and bad / n > cfg.max_unparsed_share:
            backend = self.backend
            form = getattr(backend, "form", None)
            where = (
                f"the server at {', '.join(getattr(backend, 'urls', []))} answered "
                f"requests with response_format form {form!r}"
                if form is not None
                else f"backend {backend.name!r} decoded"
            )
            raise LLMBackendError(
                f"constrained decoding is not enforced: {bad} of {n} answers decoded under a "
                f"JSON schema did not parse (max_unparsed_share={cfg.max_unparsed_share}); "
                f"{where} but the answers do not follow the schema: the server accepts the "
                "structured-output request and ignores it (e.g. `transformers serve` logs "
                "'Ignoring unsupported fields: response_format'). Use a server that enforces "
                "schemas (vLLM, llama.cpp, SGLang), or constrained=False with retry_invalid=True."
            )

    def _stance_call(
        self,
        ri: RoundInput,
        active: np.ndarray,
        actions: _Actions,
        invalid: dict[str, int],
        stats: dict[str, float],
    ) -> _Stances:
        """Stance (Eq. 1) of the users who wrote this round, from their new texts only (old
        posts are not labelled again); one decoding call asks whether each reply to a
        misinformation post agrees with its claim."""
        cfg, users, texts = self.config, ri.users, ri.posts.text
        recent = self._recent_posts(ri, active, actions)
        stance_users = [u for u in active.tolist() if recent[u]]
        r_post, r_text = actions.r_post, actions.r_text
        agree_idx = [
            i for i in np.flatnonzero(actions.is_reply).tolist() if ri.posts.misinfo[r_post[i]]
        ]
        stances = _Stances()
        stats["stance_prompts"] = float(len(stance_users))
        if stance_users:
            labels = self._label(
                ri.rng,
                ri.topic,
                [users.profiles.name(u) for u in stance_users],
                [recent[u][: cfg.stance_history] for u in stance_users],
                stats,
            )
            for u, value in zip(stance_users, labels.value, strict=True):
                if value is None:
                    invalid["stance_malformed"] = invalid.get("stance_malformed", 0) + 1
                else:
                    stances.value[u] = value
        if agree_idx:
            gen = self._call(
                [
                    agreement_messages(
                        texts[r_post[i]] if texts is not None else "", r_text[i] or ""
                    )
                    for i in agree_idx
                ],
                [agreement_schema()] * len(agree_idx),
                self._sampling(ri.rng, True, cfg.stance_max_new_tokens),
                stats,
                "agreement",
            )
            unparsed = 0
            for i, raw in zip(agree_idx, gen.texts, strict=True):
                agrees = parse_agreement(raw)
                if agrees is None:
                    unparsed += 1
                    invalid["agreement_malformed"] = invalid.get("agreement_malformed", 0) + 1
                elif agrees:
                    stances.agreed.append(actions.r_user[i])
            self._count_constrained(len(agree_idx), unparsed)
        return stances

    def _recent_posts(
        self, ri: RoundInput, active: np.ndarray, actions: _Actions
    ) -> dict[int, list[str]]:
        """Each active user's texts of this round (posts, then replies): the new evidence."""
        recent: dict[int, list[str]] = {u: [] for u in active.tolist()}
        for u, text in zip(actions.written_user.tolist(), actions.written_text, strict=True):
            recent[u].append(text)
        return recent

    # step 7 ---------------------------------------------------------------------------
    def _encode_and_score(
        self,
        ri: RoundInput,
        actions: _Actions,
        reads: _Reads,
        stances: _Stances,
        stats: dict[str, float],
    ) -> _Encoded:
        """One encoder call (new texts, memories), one toxicity call, the misinformation rule."""
        cfg, users, posts, store = self.config, ri.users, ri.posts, self.memory
        assert store is not None
        t_enc = time.perf_counter()
        enc = self._memory_texts(ri, actions, reads)
        # Memory keys of read posts and of reactions are the posts' own content embeddings
        # (already in the encoder's space when the env embedded them), so the encoder only
        # runs on what was written this round and on consolidated memories.
        reuse = bool(len(posts)) and posts.latent.shape[1] == store.dim
        written_text, consolidated = actions.written_text, reads.consolidated
        emb = self.encoder.encode(written_text + consolidated + ([] if reuse else enc.read_texts))
        misinfo_emb = self._misinfo_embedding(ri.misinformation_message)
        n_w, n_c = len(written_text), len(consolidated)
        enc.written_emb, enc.cons_emb = emb[:n_w], emb[n_w : n_w + n_c]
        n_posted, r_kind = len(actions.post_text), actions.r_kind
        if reuse:
            enc.read_emb = _unit_rows(
                posts.latent[np.array(enc.read_order, np.int64)].reshape(-1, store.dim)
            )
            react_emb = _unit_rows(posts.latent[actions.react_post].reshape(-1, store.dim))
        else:
            enc.read_emb = emb[n_w + n_c :]
            react_emb = (
                self.encoder.encode([enc.own_texts[n_posted + i] for i in range(len(r_kind))])
                if len(r_kind)
                else np.zeros((0, store.dim), np.float32)
            )
        enc.own_emb = (
            np.concatenate([enc.written_emb[:n_posted], react_emb]) if enc.own_texts else react_emb
        )
        if actions.is_reply.any():
            enc.own_emb[n_posted + np.flatnonzero(actions.is_reply)] = enc.written_emb[n_posted:]
        stats["encoder_seconds"] = time.perf_counter() - t_enc
        t_tox = time.perf_counter()
        enc.written_tox = self.toxicity(written_text)
        stats["toxicity_seconds"] = time.perf_counter() - t_tox
        enc.has_misinfo = misinfo_emb is not None
        enc.similarity = (
            enc.written_emb @ misinfo_emb
            if misinfo_emb is not None
            else np.full(n_w, -1.0, np.float32)
        )
        enc.newly_misinformed = misinformation_update(
            actions.react_user,
            actions.react_post,
            actions.react_kind,
            posts.misinfo,
            actions.written_user,
            enc.similarity,
            cfg.misinfo_similarity,
            users.misinformed,
            agreed_user=np.array(stances.agreed, np.int64),
        )
        return enc

    def _memory_texts(self, ri: RoundInput, actions: _Actions, reads: _Reads) -> _Encoded:
        """The texts this round writes to memory: posts read for the first time (summary or
        clipped text, after their author) and the agents' own actions."""
        names, posts, texts = ri.users.profiles, ri.posts, ri.posts.text
        threshold = self.config.memory.length_threshold
        read_texts = [
            f"@{names.name(int(posts.author[p]))}: {reads.summaries[p]}" for p in reads.to_summarise
        ] + [
            f"@{names.name(int(posts.author[p]))}: {clip(without_topic(texts[p] if texts else '', ri.topic), threshold)}"
            for p in reads.verbatim
        ]
        own_texts = self._own_memory_texts(
            actions.post_text,
            actions.r_kind,
            actions.r_post,
            actions.r_text,
            posts,
            ri.users,
            ri.topic,
            reads.summaries,
        )
        return _Encoded(
            read_order=reads.to_summarise + reads.verbatim,
            read_texts=read_texts,
            own_texts=own_texts,
        )

    # memory writes ----------------------------------------------------------------------
    def _write_memories(
        self, ri: RoundInput, actions: _Actions, reads: _Reads, enc: _Encoded
    ) -> None:
        """Store the read posts, the reads, the agents' own actions and the consolidations."""
        store = self.memory
        assert store is not None
        if enc.read_texts:
            rows = store.add_texts(enc.read_texts, enc.read_emb)
            for p, row in zip(enc.read_order, rows.tolist(), strict=True):
                store.post_row[p] = row
        known = np.array([store.post_row.get(p, -1) for p in reads.read_post.tolist()], np.int64)
        ok = known >= 0
        store.add_entries(reads.read_user[ok], ri.round, SHORT, known[ok], reads.read_post[ok])
        if enc.own_texts:
            own_user = np.array(actions.post_user + actions.r_user, np.int64)
            store.add_entries(
                own_user, ri.round, SHORT, store.add_texts(enc.own_texts, enc.own_emb)
            )
        cons_rows = (
            store.add_texts(reads.consolidated, enc.cons_emb)
            if reads.consolidated
            else np.zeros(0, np.int64)
        )
        store.consolidate(
            reads.cons_users,
            reads.cons_groups,
            cons_rows,
            ri.round,
            self.config.memory.long_term_capacity,
        )

    # output -----------------------------------------------------------------------------
    def _output(
        self,
        ri: RoundInput,
        actions: _Actions,
        stances: _Stances,
        enc: _Encoded,
        invalid: dict[str, int],
    ) -> RoundOutput:
        """The columns of :class:`RoundOutput`; a reply carries its author's stance and its
        own toxicity, other reactions the reacted post's stance (negated for a dislike)."""
        users, posts, a = ri.users, ri.posts, actions
        n_p = len(a.post_user)
        stance_now = np.where(users.stance > 1 / 3, 1, np.where(users.stance < -1 / 3, -1, 0))
        author_stance = np.array(
            [stances.value.get(u, stance_now[u]) for u in a.written_user.tolist()], np.float32
        )
        react_stance = np.zeros(len(a.react_user), np.float32)
        if len(a.react_user):
            post_stance_of = posts.stance[a.react_post].astype(np.float32)
            react_stance = np.where(
                a.react_kind == int(Behaviour.DISLIKE), -post_stance_of, post_stance_of
            )
            react_stance[a.is_reply] = author_stance[n_p:]
        react_tox = np.zeros(len(a.react_user), np.float32)
        react_tox[a.is_reply] = enc.written_tox[n_p:]
        newly = enc.newly_misinformed
        return RoundOutput(
            react_user=a.react_user,
            react_post=a.react_post,
            react_kind=a.react_kind,
            react_stance=react_stance.astype(np.float32),
            react_toxicity=react_tox,
            react_text=a.r_text,
            post_user=np.array(a.post_user, np.int64),
            post_latent=enc.written_emb[:n_p].astype(np.float32),
            post_stance=author_stance[:n_p],
            post_toxicity=enc.written_tox[:n_p].astype(np.float32),
            post_misinfo=(enc.similarity[:n_p] >= self.config.misinfo_similarity)
            if enc.has_misinfo
            else np.zeros(n_p, bool),
            post_text=list(a.post_text),
            follow_src=np.array(a.f_src, np.int64),
            follow_dst=np.array(a.f_dst, np.int64),
            unfollow_src=np.array(a.u_src, np.int64),
            unfollow_dst=np.array(a.u_dst, np.int64),
            stance_user=np.array(list(stances.value), np.int64),
            stance_discrete=np.array(list(stances.value.values()), np.int8),
            misinformed_user=newly,
            misinformed_value=np.ones(len(newly), bool),
            invalid=invalid,
        )

    def _round_stats(
        self, stats: dict[str, float], active: np.ndarray, actions: _Actions, t_start: float
    ) -> None:
        """Per-step token counts, the time split and the replay hit rate."""
        assert self.memory is not None
        total = time.perf_counter() - t_start
        steps = float(len(active))
        stats.update(
            {
                "agent_steps": steps,
                "valid_answers": float(sum(p is not None for p in actions.parsed)),
                "prompt_tokens_per_step": stats["agent_prompt_tokens"] / steps,
                "completion_tokens_per_step": stats["agent_completion_tokens"] / steps,
                "memory_entries": float(len(self.memory)),
                "round_seconds": total,
                "other_seconds": total
                - stats["llm_seconds"]
                - stats["encoder_seconds"]
                - stats["toxicity_seconds"],
            }
        )
        stats["outside_llm_share"] = (total - stats["llm_seconds"]) / max(total, 1e-9)
        stats.update(self.stance_check)
        stats["constrained_answers"] = float(self.constrained_answers)
        stats["constrained_unparsed"] = float(self.constrained_unparsed)
        if self.config.replay:
            stats["replay_hit_rate"] = stats["replay_hits"] / max(stats["llm_prompts"], 1.0)

    def _reask(
        self,
        results: list[ParsedAnswer | str],
        decision: Generation,
        prompts: list[Any],
        schemas: list[dict[str, Any]],
        shared_schema: dict[str, Any] | None,
        views: list[FeedView],
        rng: np.random.Generator,
        stats: dict[str, float],
    ) -> list[int]:
        """Ask each agent whose answer was rejected (not for a backend error) once more, in one
        batched call, with its answer and the validation error appended; replaces
        ``results[b]`` by the new outcome. Counts ``reask_prompts`` / ``reask_recovered``."""
        cfg = self.config
        redo = [b for b, r in enumerate(results) if isinstance(r, str) and r != "backend_error"]
        stats["reask_prompts"] = float(len(redo))
        stats["reask_recovered"] = 0.0
        if not redo:
            return redo
        retry_prompts = [
            [
                *prompts[b],
                {"role": "assistant", "content": decision.texts[b]},
                {
                    "role": "user",
                    "content": reask_message(str(results[b]), cfg.max_actions, cfg.max_text_chars),
                },
            ]
            for b in redo
        ]
        retry_schemas = shared_schema if shared_schema is not None else [schemas[b] for b in redo]
        gen = self._call(
            retry_prompts,
            retry_schemas,
            self._sampling(rng, False, cfg.max_new_tokens),
            stats,
            "reask",
        )
        for b, text, finish in zip(redo, gen.texts, gen.finish_reasons, strict=True):
            if finish == "error":
                continue
            result = parse_answer(
                text,
                views[b],
                max_actions=cfg.max_actions,
                max_text_chars=cfg.max_text_chars,
                behaviours=cfg.behaviours,
                truncated=finish == "length",
                bdi=cfg.reasoning == "bdi",
            )
            if not isinstance(result, str):
                stats["reask_recovered"] += 1
            results[b] = result
        return redo

    def _own_memory_texts(
        self,
        post_text: list[str],
        r_kind: list[int],
        r_post: list[int],
        r_text: list[str | None],
        posts: PostColumns,
        users: UserColumns,
        topic: str = "",
        summaries: dict[int, str] | None = None,
    ) -> list[str]:
        """Memory texts of the agents' own actions (posts first, then reactions). A reaction
        remembers what the post says: its summary when it has one, else its text (topic
        phrase shortened, see :func:`without_topic`)."""
        limit = self.config.memory.memory_chars
        summaries = summaries or {}
        verbs = {
            int(Behaviour.RETWEET): "You retweeted",
            int(Behaviour.REPLY): "You replied to",
            int(Behaviour.LIKE): "You liked",
            int(Behaviour.DISLIKE): "You disliked",
        }
        out = [f"You posted: {clip(t, limit)}" for t in post_text]
        texts = posts.text
        for kind, pid, text in zip(r_kind, r_post, r_text, strict=True):
            who = users.profiles.name(int(posts.author[pid]))
            if kind == int(Behaviour.REPLY):
                out.append(f"You replied to @{who}: {clip(text, limit)}")
            else:
                seen = summaries.get(pid) or clip(
                    without_topic(texts[pid] if texts is not None else None, topic), limit // 2
                )
                out.append(f"{verbs[kind]} @{who}'s post: {seen}")
        return out
