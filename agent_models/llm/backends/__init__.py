"""Inference backends behind one interface: :class:`Backend.generate` (a batch of chat
prompts, optional JSON schemas, :class:`Sampling`) → :class:`Generation` (texts, token
counts, finish reasons).

- ``"hf"``: transformers, CPU or GPU, llguidance-constrained (:mod:`.hf`);
- ``"vllm"``: in-process vLLM engine on GPU (:mod:`.vllm_backend`);
- ``"openai"``: any OpenAI-compatible server, async, retried (:mod:`.openai_compat`).

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
    schema_list,
)
from agent_models.llm.config import LLMConfig

BACKENDS = ("vllm", "hf", "openai")


def make_backend(config: LLMConfig | dict) -> Backend:
    """Build the backend ``config.backend`` (loads the model / engine / clients)."""
    if not isinstance(config, LLMConfig):
        config = LLMConfig.model_validate(config)
    if config.backend == "hf":
        from agent_models.llm.backends.hf import HFBackend

        return HFBackend(config)
    if config.backend == "vllm":
        from agent_models.llm.backends.vllm_backend import VLLMBackend

        return VLLMBackend(config)
    if config.backend == "openai":
        from agent_models.llm.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(config)
    raise ValueError(f"backend={config.backend!r} is not allowed: use one of {BACKENDS}")


__all__ = [
    "BACKENDS",
    "Backend",
    "Generation",
    "LLMBackendError",
    "Messages",
    "Sampling",
    "Schemas",
    "make_backend",
    "schema_list",
]
