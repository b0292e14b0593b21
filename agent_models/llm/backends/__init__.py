"""Inference backends behind one interface: :class:`Backend.generate` (a batch of chat
prompts, optional JSON schemas, :class:`Sampling`) → :class:`Generation` (texts, token
counts, finish reasons).

The backends are declared once, in :data:`agent_models.llm.config.BACKENDS` (name →
``module:Class``, settings model, pip extra, summary; re-exported here).

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
from agent_models.llm.config import BACKENDS, LLMConfig


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
    return BACKENDS[config.backend].load()(config)


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
