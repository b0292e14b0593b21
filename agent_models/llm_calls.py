"""Small helpers for one-off batched LLM calls outside the agent loop (profile extraction,
stance of history posts, DPO sampling, the micro-level judge) on the backends of
:mod:`agent_models.llm.backends`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Messages = list[dict[str, str]]


def resolve_backend(spec: Any) -> Any:
    """A backend from ``spec``: a :class:`~agent_models.llm.backends.base.Backend` instance
    (returned as is), an :class:`~agent_models.llm.config.LLMConfig`, or a dict of its fields
    (e.g. ``{"backend": "hf", "model": "/path", "lora_path": "/adapter"}``)."""
    from agent_models.llm.backends.base import Backend

    if isinstance(spec, Backend):
        return spec
    from agent_models.llm import backends
    from agent_models.llm.config import LLMConfig

    config = spec if isinstance(spec, LLMConfig) else LLMConfig.model_validate(dict(spec))
    return backends.make_backend(config)


def generate_json(
    backend: Any,
    prompts: Sequence[Messages],
    schema: dict[str, Any] | Sequence[dict[str, Any] | None] | None,
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = 0,
) -> list[str | None]:
    """Completions of ``prompts`` decoded under ``schema`` (one JSON schema for all prompts,
    or one per prompt), in one batched backend call. A failed request gives None."""
    from agent_models.llm.backends.base import Sampling

    if not prompts:
        return []
    sampling = Sampling(
        temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
    )
    generation = backend.generate(list(prompts), schema, sampling)
    return [
        None if reason == "error" else text
        for text, reason in zip(generation.texts, generation.finish_reasons, strict=True)
    ]
