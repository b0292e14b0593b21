"""Inference backends behind one interface: :class:`Backend.generate` (a batch of chat
prompts, optional JSON schemas, :class:`Sampling`) → :class:`Generation` (texts, token
counts, finish reasons).

- ``"hf"``: transformers, CPU or GPU, llguidance-constrained (:mod:`.hf`);
- ``"vllm"``: in-process vLLM engine on GPU (:mod:`.vllm_backend`);
- ``"llamacpp"``: in-process llama.cpp on a GGUF file (``llama-cpp-python``, CPU) (:mod:`.llamacpp`);
- ``"openai"``: any OpenAI-compatible server, async, retried (:mod:`.openai_compat`).

With ``config.replay`` set, the backend is wrapped in a :class:`~.replay.ReplayBackend`
(record every call, replay recorded answers; ``replay_mode="replay"`` loads no model).

Heavy libraries are imported only when a backend is built.
"""

from __future__ import annotations

from agent_models.llm.backends.base import (
    Backend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
    Schemas,
    fold_system,
    schema_list,
)
from agent_models.llm.config import LLMConfig
from agent_models.validation import did_you_mean

BACKENDS = ("vllm", "hf", "openai", "llamacpp")


def model_name(config: LLMConfig) -> str:
    """The model's name in replay keys: file/folder names, not paths (portable caches)."""
    from pathlib import PurePath

    parts = [PurePath(config.model).name or config.model]
    if config.gguf_file:
        parts.append(config.gguf_file)
    if config.lora_path:
        parts.append("lora:" + PurePath(config.lora_path).name)
    return "/".join(parts)


def make_backend(config: LLMConfig | dict) -> Backend:
    """Build the backend ``config.backend`` (loads the model / engine / clients), wrapped in
    a replay cache when ``config.replay`` is set."""
    if not isinstance(config, LLMConfig):
        config = LLMConfig.model_validate(config)
    if config.replay:
        from agent_models.llm.backends.replay import ReplayBackend

        inner = None if config.replay_mode == "replay" else _make_model_backend(config)
        return ReplayBackend(config.replay, config.replay_mode, model_name(config), inner)
    return _make_model_backend(config)


def _make_model_backend(config: LLMConfig) -> Backend:
    if config.backend == "hf":
        from agent_models.llm.backends.hf import HFBackend

        return HFBackend(config)
    if config.backend == "vllm":
        from agent_models.llm.backends.vllm_backend import VLLMBackend

        return VLLMBackend(config)
    if config.backend == "openai":
        from agent_models.llm.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(config)
    if config.backend == "llamacpp":
        from agent_models.llm.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(config)
    raise ValueError(
        f"backend={config.backend!r} is not allowed: use one of {BACKENDS}"
        f"{did_you_mean(config.backend, BACKENDS)}"
    )


__all__ = [
    "BACKENDS",
    "Backend",
    "Generation",
    "LLMBackendError",
    "Messages",
    "Sampling",
    "Schemas",
    "fold_system",
    "make_backend",
    "model_name",
    "schema_list",
]
