"""The LLM user brain: every active user is an LLM agent, all of them in one batched call.

One round (:meth:`LLMBrain.act`), for B active users:

1. feeds → what each agent may refer to (post ids, authors, whether it follows them);
2. memory retrieval for all B at once (similarity × time decay, top-k, vectorized);
3. prompts (shared system part first) and answer schemas → **one** backend call;
4. answers parsed and validated (:mod:`.schema`); a rejected answer = that agent does
   nothing, its reason is counted in ``RoundOutput.invalid``;
5. **one** backend call for memory: summaries of the long posts read this round (short
   ones are stored verbatim) and consolidations of users over their short-term capacity;
6. **one** backend call for stance (Eq. 1): each active user's recent posts → −1/0/+1
   (``stance_user``/``stance_discrete``; the env applies the EMA of Eq. 2); the same call
   asks whether each reply to a misinformation post agrees with its claim;
7. one encoder call (new texts, memories), one toxicity call, the misinformation rule
   (:mod:`.signals`), memory writes; then the columns of :class:`RoundOutput`.

Per-agent Python work is string formatting and parsing only; model calls are batched.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from agent_models.base import Brain
from agent_models.llm.backends.base import (
    Backend,
    Generation,
    LLMBackendError,
    Sampling,
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
    stance_messages,
    summary_messages,
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
    parse_stance,
    stance_schema,
    summary_schema,
)
from agent_models.llm.signals import TextEncoder, make_toxicity, misinformation_update
from agent_models.types import (
    Behaviour,
    PostColumns,
    PostKind,
    RoundInput,
    RoundOutput,
    UserColumns,
)


def profile_text(users: UserColumns, i: int) -> str:
    """The text embedded as user i's profile embedding (Eq. 7)."""
    d = users.profiles.describe(i)
    return (f"{d['likely_identity']}. Interested in {d['interested_areas']}. "
            f"Posting style: {d['posting_style']}. {d['interaction_behaviour']}.")


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
}


def reask_message(reason: str, max_actions: int, max_text_chars: int) -> str:
    """The user message of a re-ask after an answer rejected for ``reason``."""
    why = REASK_REASONS.get(reason, "it was not a valid answer")
    return (f"Your answer was rejected: {why}. Answer again with one JSON object (at most "
            f"{max_actions} actions, texts of at most {max_text_chars} characters), nothing else.")


def without_topic(text: str | None, topic: str) -> str | None:
    """``text`` with the round's topic phrase shortened to "the topic" (memories and their
    length budget then carry what the post says, not the topic every prompt already shows)."""
    if not text or not topic or len(topic) < 12:
        return text
    return text.replace(topic, "the topic")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-8)).astype(np.float32)


class LLMBrain(Brain):
    """User behaviour from a language model (see the module docstring for one round).

    Args:
        config: an :class:`LLMConfig` or a dict of its fields.
        backend: an already built backend (shared between brains, or a test double);
            default: built from ``config`` on the first :meth:`reset`.
        encoder: an already loaded :class:`TextEncoder` to share; default: ``config.encoder``.
    """

    needs_text = True

    def __init__(self, config: LLMConfig | dict[str, Any], backend: Backend | None = None,
                 encoder: TextEncoder | None = None) -> None:
        self.config = config if isinstance(config, LLMConfig) else LLMConfig.model_validate(config)
        self._backend = backend
        cfg = self.config
        self.encoder = encoder or TextEncoder(cfg.resolved_encoder(), cfg.encoder_device,
                                              cfg.encoder_batch_size)
        self.toxicity = make_toxicity(cfg.toxicity)
        self.memory: MemoryStore | None = None
        self.news: list[str] = []
        self._seeded = False
        self._misinfo_key: str | None = None
        self._misinfo_emb: np.ndarray | None = None
        self.last_stats: dict[str, float] = {}
        #: ``reasoning="bdi"``: user → emotion / belief / desire / intention of the last round
        self.last_states: dict[int, dict[str, str]] = {}

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
        return self.encoder.encode([profile_text(users, i) for i in range(len(users))])

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "memory": None if self.memory is None else self.memory.state_dict(),
            "news": list(self.news),
            "seeded": self._seeded,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mem = state.get("memory")
        self.memory = None if mem is None else MemoryStore.from_state_dict(mem)
        self.news = list(state.get("news", []))
        self._seeded = bool(state.get("seeded", False))

    # ------------------------------------------------------------------ helpers
    def _call(self, prompts: list[Any], schemas: Any, sampling: Sampling,
              stats: dict[str, float], tag: str) -> Generation:
        backend = self.backend
        fold = self.config.system_role == "fold" or (
            self.config.system_role == "auto" and not backend.system_role)
        if fold:
            prompts = [fold_system(p) for p in prompts]
        gen = backend.generate(prompts, schemas if self.config.constrained else None, sampling)
        if len(gen.texts) != len(prompts) or len(gen.finish_reasons) != len(prompts):
            message = (f"backend {type(self.backend).__name__} returned {len(gen.texts)} completions "
                       f"for {len(prompts)} prompts")
            if self.config.fail_on_backend_error:
                raise LLMBackendError(message)
            n = len(prompts)
            gen = Generation(texts=[""] * n, prompt_tokens=np.zeros(n, np.int64),
                             completion_tokens=np.zeros(n, np.int64), finish_reasons=["error"] * n,
                             errors=[message] * n, seconds=gen.seconds)
        stats["llm_calls"] += 1
        stats["llm_seconds"] += gen.seconds
        stats["llm_prompts"] = stats.get("llm_prompts", 0.0) + len(prompts)
        stats["replay_hits"] = stats.get("replay_hits", 0.0) + gen.replayed
        stats[f"{tag}_prompts"] = float(len(prompts))
        stats[f"{tag}_prompt_tokens"] = float(gen.prompt_tokens.sum())
        stats[f"{tag}_completion_tokens"] = float(gen.completion_tokens.sum())
        return gen

    def _sampling(self, rng: np.random.Generator, aux: bool, max_new_tokens: int,
                  temperature: float | None = None) -> Sampling:
        cfg = self.config
        if temperature is None:
            temperature = cfg.aux_temperature if aux else cfg.temperature
        return Sampling(
            temperature=temperature,
            top_p=cfg.top_p, top_k=cfg.top_k, max_new_tokens=max_new_tokens,
            repetition_penalty=cfg.repetition_penalty, seed=int(rng.integers(0, 2**31 - 1)),
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
        texts = [f"You posted: {clip(without_topic(posts.text[i], ri.topic), self.config.memory.memory_chars)}"
                 for i in idx.tolist()]
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
        ri = round_input
        cfg = self.config
        t_start = time.perf_counter()
        stats: dict[str, float] = {"llm_calls": 0.0, "llm_seconds": 0.0, "llm_prompts": 0.0,
                                   "replay_hits": 0.0, "encoder_seconds": 0.0,
                                   "toxicity_seconds": 0.0}
        if self.memory is None:
            self.memory = MemoryStore(self.embedding_dim)
        if not self._seeded:
            self._seed_memory(ri)
        # committed to self.news only when the round completes, so a round retried after a
        # backend error sees the same news as an uninterrupted run
        news = self.news + [e.headline for e in ri.news]
        active = np.asarray(ri.active, np.int64)
        out = RoundOutput(post_latent=np.zeros((0, self.memory.dim), np.float32))
        if len(active) == 0:
            self.news = news
            self.last_stats = stats
            out.stats = stats
            return out
        users, posts = ri.users, ri.posts
        n_users, n_posts = len(users), len(posts)
        names = [users.profiles.name(int(u)) for u in active]

        # 1. feeds -------------------------------------------------------------------
        feed = np.asarray(ri.feed, np.int64)
        valid = feed >= 0
        safe = np.where(valid, feed, 0)
        authors = np.where(valid, posts.author[safe] if n_posts else 0, -1)
        src = np.repeat(np.arange(n_users, dtype=np.int64), np.diff(ri.following_indptr))
        follow_keys = src * n_users + np.asarray(ri.following_indices, np.int64)
        followed = valid & np.isin(active[:, None] * n_users + authors, follow_keys)

        # 2. memories ----------------------------------------------------------------
        queries = None
        if n_posts and posts.latent.shape[1] == self.memory.dim:
            summed = (posts.latent[safe] * valid[..., None]).sum(axis=1)
            fallback = users.latent[active] if users.latent.shape[1] == self.memory.dim else summed
            queries = _unit_rows(np.where(valid.any(axis=1, keepdims=True), summed, fallback))
        elif users.latent.shape[1] == self.memory.dim:
            queries = _unit_rows(users.latent[active])
        mcfg = cfg.memory
        remembered = self.memory.retrieve(active, queries, ri.round, mcfg.top_k, mcfg.decay,
                                          mcfg.long_term_decay)

        # 3. prompts + the decision call --------------------------------------------
        t_prompt = time.perf_counter()
        shown_news = news[-cfg.news_in_prompt:] if cfg.news_in_prompt else []
        system = agent_system_prompt(ri.topic, shown_news, behaviours=cfg.behaviours,
                                     max_actions=cfg.max_actions, max_text_chars=cfg.max_text_chars,
                                     reasoning=cfg.reasoning)
        bdi = cfg.reasoning == "bdi"
        feed_l, authors_l, followed_l = feed.tolist(), authors.tolist(), followed.tolist()
        channel_l = np.asarray(ri.feed_channel).tolist()
        kind_a = posts.kind[safe].tolist() if n_posts else feed_l
        parent_a = posts.parent[safe].tolist() if n_posts else feed_l
        likes_a = posts.likes[safe].tolist() if n_posts else feed_l
        replies_a = posts.replies[safe].tolist() if n_posts else feed_l
        retweets_a = posts.retweets[safe].tolist() if n_posts else feed_l
        texts = posts.text
        prompts: list[Any] = []
        views: list[FeedView] = []
        schemas: list[dict[str, Any]] = []
        shared_schema = None
        if cfg.schema_mode == "shared":
            shared_schema = answer_schema(
                behaviours=cfg.behaviours, max_actions=cfg.max_actions,
                max_text_chars=cfg.max_text_chars, post_ids=(0, n_posts - 1),
                follow_ids=(0, n_users - 1), unfollow_ids=(0, n_users - 1), bdi=bdi,
                bdi_chars=cfg.bdi_chars)
        for b, user in enumerate(active.tolist()):
            lines, ids, auth, fol = [], [], [], []
            for s, pid in enumerate(feed_l[b]):
                if pid < 0:
                    continue
                a = authors_l[b][s]
                ids.append(pid)
                auth.append(a)
                fol.append(followed_l[b][s])
                lines.append(feed_line(
                    pid, a, users.profiles.name(a), None if texts is None else texts[pid],
                    followed=followed_l[b][s], channel=channel_l[b][s], kind=kind_a[b][s],
                    parent=parent_a[b][s], likes=likes_a[b][s], replies=replies_a[b][s],
                    retweets=retweets_a[b][s], text_chars=cfg.feed_text_chars))
            view = FeedView(user, ids, auth, fol)
            views.append(view)
            prompts.append([
                {"role": "system", "content": system},
                {"role": "user", "content": agent_user_prompt(
                    names[b], users.profiles.describe(user), remembered[b], lines, ri.round)},
            ])
            if shared_schema is None:
                schemas.append(answer_schema(
                    behaviours=cfg.behaviours, max_actions=cfg.max_actions,
                    max_text_chars=cfg.max_text_chars, post_ids=sorted(set(ids)),
                    follow_ids=view.follow_candidates(), unfollow_ids=view.unfollow_candidates(),
                    bdi=bdi, bdi_chars=cfg.bdi_chars))
        stats["prompt_seconds"] = time.perf_counter() - t_prompt
        decision = self._call(prompts, shared_schema if shared_schema is not None else schemas,
                              self._sampling(ri.rng, False, cfg.max_new_tokens), stats, "agent")

        # 4. validation (and, with retry_invalid, one re-ask of the rejected answers) ----------
        invalid: dict[str, int] = {}
        results: list[ParsedAnswer | str] = []
        for b, text in enumerate(decision.texts):
            if decision.finish_reasons[b] == "error":
                results.append("backend_error")
            else:
                results.append(parse_answer(
                    text, views[b], max_actions=cfg.max_actions, max_text_chars=cfg.max_text_chars,
                    behaviours=cfg.behaviours, truncated=decision.finish_reasons[b] == "length",
                    bdi=bdi))
        if cfg.retry_invalid:
            self._reask(results, decision, prompts, schemas, shared_schema, views, ri.rng, stats)
        parsed: list[ParsedAnswer | None] = []
        for result in results:
            if isinstance(result, str):
                invalid[result] = invalid.get(result, 0) + 1
                parsed.append(None)
            else:
                parsed.append(result)
        if bdi:
            self.last_states = {int(active[b]): a.state for b, a in enumerate(parsed)
                                if a is not None and a.state is not None}
            for state in self.last_states.values():
                key = f"emotion_{state['emotion']}"
                stats[key] = stats.get(key, 0.0) + 1.0
        post_user, post_text = [], []
        r_user, r_post, r_kind, r_text = [], [], [], []
        f_src, f_dst, u_src, u_dst = [], [], [], []
        for b, answer in enumerate(parsed):
            if answer is None:
                continue
            user = int(active[b])
            post_user += [user] * len(answer.posts)
            post_text += answer.posts
            for kind, pid, text in answer.reactions:
                r_user.append(user)
                r_post.append(pid)
                r_kind.append(kind)
                r_text.append(text)
            f_src += [user] * len(answer.follows)
            f_dst += answer.follows
            u_src += [user] * len(answer.unfollows)
            u_dst += answer.unfollows
        react_user = np.array(r_user, np.int64)
        react_post = np.array(r_post, np.int64)
        react_kind = np.array(r_kind, np.int8)
        is_reply = react_kind == int(Behaviour.REPLY)

        # 5. memory call: summaries of long read posts + consolidations -------------------
        read_b, read_s = np.nonzero(valid)
        read_user, read_post = active[read_b], feed[read_b, read_s]
        fresh = ~self.memory.has_read(read_user, read_post)
        read_user, read_post = read_user[fresh], read_post[fresh]
        new_posts = [p for p in np.unique(read_post).tolist() if p not in self.memory.post_row]
        post_texts = ["" if texts is None or texts[p] is None else texts[p] for p in new_posts]
        long_mask = [len(t) > mcfg.length_threshold for t in post_texts]
        to_summarise = [p for p, m in zip(new_posts, long_mask, strict=True) if m]
        cons_users, cons_groups = self.memory.sample_consolidation(
            mcfg.short_term_capacity, mcfg.consolidate_size, ri.rng)
        mem_prompts: list[Any] = []
        mem_schemas: list[dict[str, Any]] = []
        s_schema = summary_schema(mcfg.summary_chars)
        c_schema = consolidation_schema(mcfg.memory_chars)
        for p, text in zip(new_posts, post_texts, strict=True):
            if len(text) > mcfg.length_threshold:
                mem_prompts.append(summary_messages(users.profiles.name(int(posts.author[p])), text,
                                                    mcfg.summary_chars))
                mem_schemas.append(s_schema)
        for u, group in zip(cons_users.tolist(), cons_groups, strict=True):
            mem_prompts.append(consolidation_messages(
                users.profiles.name(u), [self.memory.texts[r] for r in self.memory.row[group]],
                mcfg.memory_chars))
            mem_schemas.append(c_schema)
        stats["summaries"] = float(len(to_summarise))
        stats["consolidations"] = float(len(cons_users))
        mem_texts: list[str] = []
        if mem_prompts:
            gen = self._call(mem_prompts, mem_schemas,
                             self._sampling(ri.rng, True, cfg.summary_max_new_tokens,
                                            cfg.memory_temperature), stats, "memory")
            mem_texts = gen.texts
        summaries: dict[int, str] = {}
        for p, raw in zip(to_summarise, mem_texts[: len(to_summarise)], strict=True):
            value = parse_field(raw, SummaryAnswer)
            reason = ("summary_malformed" if value is None
                      else "summary_placeholder" if is_placeholder(value) else None)
            if reason is not None:
                invalid[reason] = invalid.get(reason, 0) + 1
                value = clip(without_topic(texts[p] if texts is not None else "", ri.topic),
                             mcfg.summary_chars)
            summaries[p] = value
        consolidated: list[str] = []
        for group, raw in zip(cons_groups, mem_texts[len(to_summarise):], strict=True):
            value = parse_field(raw, ConsolidationAnswer)
            reason = ("consolidation_malformed" if value is None
                      else "consolidation_placeholder" if is_placeholder(value) else None)
            if reason is not None:
                invalid[reason] = invalid.get(reason, 0) + 1
                value = clip(" ".join(self.memory.texts[r] for r in self.memory.row[group]),
                             mcfg.memory_chars)
            consolidated.append(value[: mcfg.memory_chars])

        # 6. stance call ---------------------------------------------------------------------
        written_user = np.array(post_user + [r_user[i] for i in np.flatnonzero(is_reply)], np.int64)
        written_text = post_text + [r_text[i] or "" for i in np.flatnonzero(is_reply)]
        recent: dict[int, list[str]] = {u: [] for u in active.tolist()}
        for u, text in zip(written_user.tolist(), written_text, strict=True):
            recent[u].append(text)
        if n_posts and texts is not None:
            idx = np.flatnonzero(np.isin(posts.author, active))
            idx = idx[np.lexsort((-idx, posts.author[idx]))]
            idx = idx[group_rank(posts.author[idx]) < cfg.stance_history]
            for i, a in zip(idx.tolist(), posts.author[idx].tolist(), strict=True):
                if texts[i]:
                    prefix = {int(PostKind.RETWEET): "RT: ", int(PostKind.REPLY): "reply: "}
                    recent[a].append(prefix.get(int(posts.kind[i]), "") + texts[i])
        stance_users = [u for u in active.tolist() if recent[u]]
        # replies to misinformation posts: does the reply agree with the claim? (same call)
        agree_idx = [i for i in np.flatnonzero(is_reply).tolist() if posts.misinfo[r_post[i]]]
        stance_value: dict[int, int] = {}
        agreed: list[int] = []
        if stance_users or agree_idx:
            gen = self._call(
                [stance_messages(ri.topic, users.profiles.name(u), recent[u][: cfg.stance_history],
                                 cfg.feed_text_chars) for u in stance_users]
                + [agreement_messages(texts[r_post[i]] if texts is not None else "", r_text[i] or "")
                   for i in agree_idx],
                [stance_schema()] * len(stance_users) + [agreement_schema()] * len(agree_idx),
                self._sampling(ri.rng, True, cfg.stance_max_new_tokens), stats, "stance")
            for u, raw in zip(stance_users, gen.texts[: len(stance_users)], strict=True):
                value = parse_stance(raw)
                if value is None:
                    invalid["stance_malformed"] = invalid.get("stance_malformed", 0) + 1
                else:
                    stance_value[u] = value
            for i, raw in zip(agree_idx, gen.texts[len(stance_users):], strict=True):
                agrees = parse_agreement(raw)
                if agrees is None:
                    invalid["agreement_malformed"] = invalid.get("agreement_malformed", 0) + 1
                elif agrees:
                    agreed.append(r_user[i])

        # 7. encoder, toxicity, misinformation ------------------------------------------------
        t_enc = time.perf_counter()
        verbatim = [p for p, m in zip(new_posts, long_mask, strict=True) if not m]
        read_order = to_summarise + verbatim
        read_texts = ([f"@{users.profiles.name(int(posts.author[p]))}: {summaries[p]}" for p in to_summarise]
                      + [f"@{users.profiles.name(int(posts.author[p]))}: {clip(without_topic(texts[p] if texts else '', ri.topic), mcfg.length_threshold)}"
                         for p in verbatim])
        own_texts = self._own_memory_texts(post_text, r_kind, r_post, r_text, posts, users,
                                           ri.topic, summaries)
        # Memory keys of read posts and of reactions are the posts' own content embeddings
        # (already in the encoder's space when the env embedded them), so the encoder only
        # runs on what was written this round and on consolidated memories.
        reuse = bool(n_posts) and posts.latent.shape[1] == self.memory.dim
        batch = written_text + consolidated + ([] if reuse else read_texts)
        emb = self.encoder.encode(batch)
        misinfo_emb = self._misinfo_embedding(ri.misinformation_message)
        n_w, n_c = len(written_text), len(consolidated)
        written_emb, cons_emb = emb[:n_w], emb[n_w : n_w + n_c]
        if reuse:
            read_emb = _unit_rows(posts.latent[np.array(read_order, np.int64)].reshape(-1, self.memory.dim))
            react_emb = _unit_rows(posts.latent[react_post].reshape(-1, self.memory.dim))
        else:
            read_emb = emb[n_w + n_c :]
            react_emb = (self.encoder.encode([own_texts[len(post_text) + i] for i in range(len(r_kind))])
                         if len(r_kind) else np.zeros((0, self.memory.dim), np.float32))
        own_emb = np.concatenate([written_emb[: len(post_text)], react_emb]) if own_texts else react_emb
        if is_reply.any():
            own_emb[len(post_text) + np.flatnonzero(is_reply)] = written_emb[len(post_text):]
        n_r, n_o = len(read_texts), len(own_texts)
        stats["encoder_seconds"] = time.perf_counter() - t_enc
        t_tox = time.perf_counter()
        written_tox = self.toxicity(written_text)
        stats["toxicity_seconds"] = time.perf_counter() - t_tox
        similarity = (written_emb @ misinfo_emb if misinfo_emb is not None
                      else np.full(n_w, -1.0, np.float32))
        newly = misinformation_update(
            react_user, react_post, react_kind, posts.misinfo, written_user, similarity,
            cfg.misinfo_similarity, users.misinformed, agreed_user=np.array(agreed, np.int64))

        # memory writes ----------------------------------------------------------------------
        store = self.memory
        if n_r:
            rows = store.add_texts(read_texts, read_emb)
            for p, row in zip(read_order, rows.tolist(), strict=True):
                store.post_row[p] = row
        known = np.array([store.post_row.get(p, -1) for p in read_post.tolist()], np.int64)
        ok = known >= 0
        store.add_entries(read_user[ok], ri.round, SHORT, known[ok], read_post[ok])
        if n_o:
            own_user = np.array(post_user + r_user, np.int64)
            store.add_entries(own_user, ri.round, SHORT, store.add_texts(own_texts, own_emb))
        cons_rows = store.add_texts(consolidated, cons_emb) if consolidated else np.zeros(0, np.int64)
        store.consolidate(cons_users, cons_groups, cons_rows, ri.round, mcfg.long_term_capacity)

        # output -----------------------------------------------------------------------------
        n_p = len(post_user)
        stance_now = np.where(users.stance > 1 / 3, 1, np.where(users.stance < -1 / 3, -1, 0))
        author_stance = np.array([stance_value.get(u, stance_now[u]) for u in written_user.tolist()],
                                 np.float32)
        react_stance = np.zeros(len(react_user), np.float32)
        if len(react_user):
            post_stance_of = posts.stance[react_post].astype(np.float32)
            react_stance = np.where(react_kind == int(Behaviour.DISLIKE), -post_stance_of, post_stance_of)
            react_stance[is_reply] = author_stance[n_p:]
        react_tox = np.zeros(len(react_user), np.float32)
        react_tox[is_reply] = written_tox[n_p:]
        out = RoundOutput(
            react_user=react_user, react_post=react_post, react_kind=react_kind,
            react_stance=react_stance.astype(np.float32), react_toxicity=react_tox,
            react_text=r_text,
            post_user=np.array(post_user, np.int64),
            post_latent=written_emb[:n_p].astype(np.float32),
            post_stance=author_stance[:n_p], post_toxicity=written_tox[:n_p].astype(np.float32),
            post_misinfo=(similarity[:n_p] >= cfg.misinfo_similarity) if misinfo_emb is not None
            else np.zeros(n_p, bool),
            post_text=list(post_text),
            follow_src=np.array(f_src, np.int64), follow_dst=np.array(f_dst, np.int64),
            unfollow_src=np.array(u_src, np.int64), unfollow_dst=np.array(u_dst, np.int64),
            stance_user=np.array(list(stance_value), np.int64),
            stance_discrete=np.array(list(stance_value.values()), np.int8),
            misinformed_user=newly, misinformed_value=np.ones(len(newly), bool),
            invalid=invalid,
        )
        total = time.perf_counter() - t_start
        steps = float(len(active))
        stats.update({
            "agent_steps": steps,
            "valid_answers": float(sum(p is not None for p in parsed)),
            "prompt_tokens_per_step": stats["agent_prompt_tokens"] / steps,
            "completion_tokens_per_step": stats["agent_completion_tokens"] / steps,
            "memory_entries": float(len(store)),
            "round_seconds": total,
            "other_seconds": total - stats["llm_seconds"] - stats["encoder_seconds"]
            - stats["toxicity_seconds"],
        })
        stats["outside_llm_share"] = (total - stats["llm_seconds"]) / max(total, 1e-9)
        if cfg.replay:
            stats["replay_hit_rate"] = stats["replay_hits"] / max(stats["llm_prompts"], 1.0)
        out.stats = stats
        self.last_stats = stats
        self.news = news
        return out

    def _reask(self, results: list[ParsedAnswer | str], decision: Generation, prompts: list[Any],
               schemas: list[dict[str, Any]], shared_schema: dict[str, Any] | None,
               views: list[FeedView], rng: np.random.Generator, stats: dict[str, float]) -> None:
        """Ask each agent whose answer was rejected (not for a backend error) once more, in one
        batched call, with its answer and the validation error appended; replaces
        ``results[b]`` by the new outcome. Counts ``reask_prompts`` / ``reask_recovered``."""
        cfg = self.config
        redo = [b for b, r in enumerate(results) if isinstance(r, str) and r != "backend_error"]
        stats["reask_prompts"] = float(len(redo))
        stats["reask_recovered"] = 0.0
        if not redo:
            return
        retry_prompts = [[*prompts[b], {"role": "assistant", "content": decision.texts[b]},
                          {"role": "user", "content": reask_message(str(results[b]), cfg.max_actions,
                                                                   cfg.max_text_chars)}]
                         for b in redo]
        retry_schemas = shared_schema if shared_schema is not None else [schemas[b] for b in redo]
        gen = self._call(retry_prompts, retry_schemas,
                         self._sampling(rng, False, cfg.max_new_tokens), stats, "reask")
        for b, text, finish in zip(redo, gen.texts, gen.finish_reasons, strict=True):
            if finish == "error":
                continue
            result = parse_answer(text, views[b], max_actions=cfg.max_actions,
                                  max_text_chars=cfg.max_text_chars, behaviours=cfg.behaviours,
                                  truncated=finish == "length", bdi=cfg.reasoning == "bdi")
            if not isinstance(result, str):
                stats["reask_recovered"] += 1
            results[b] = result

    def _own_memory_texts(self, post_text: list[str], r_kind: list[int], r_post: list[int],
                          r_text: list[str | None], posts: PostColumns,
                          users: UserColumns, topic: str = "",
                          summaries: dict[int, str] | None = None) -> list[str]:
        """Memory texts of the agents' own actions (posts first, then reactions). A reaction
        remembers what the post says: its summary when it has one, else its text (topic
        phrase shortened, see :func:`without_topic`)."""
        limit = self.config.memory.memory_chars
        summaries = summaries or {}
        verbs = {int(Behaviour.RETWEET): "You retweeted", int(Behaviour.REPLY): "You replied to",
                 int(Behaviour.LIKE): "You liked", int(Behaviour.DISLIKE): "You disliked"}
        out = [f"You posted: {clip(t, limit)}" for t in post_text]
        texts = posts.text
        for kind, pid, text in zip(r_kind, r_post, r_text, strict=True):
            who = users.profiles.name(int(posts.author[pid]))
            if kind == int(Behaviour.REPLY):
                out.append(f"You replied to @{who}: {clip(text, limit)}")
            else:
                seen = summaries.get(pid) or clip(
                    without_topic(texts[pid] if texts is not None else None, topic), limit // 2)
                out.append(f"{verbs[kind]} @{who}'s post: {seen}")
        return out

