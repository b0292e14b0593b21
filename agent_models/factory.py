"""Build a brain from the env's ``users=`` argument."""

from __future__ import annotations

from typing import Any

from agent_models.base import Brain

BRAIN_KINDS = ("surrogate", "llm")


def make_brain(
    users: str | Brain,
    *,
    llm: dict[str, Any] | Any | None = None,
    surrogate: dict[str, Any] | Any | None = None,
) -> Brain:
    """``users="surrogate"`` (default, CPU, vectorized), ``users="llm"`` (needs ``llm=`` config),
    or a :class:`Brain` instance of your own."""
    if isinstance(users, Brain):
        return users
    if users == "surrogate":
        from agent_models.surrogate import SurrogateBrain, SurrogateConfig

        config = surrogate if isinstance(surrogate, SurrogateConfig) else SurrogateConfig(**(surrogate or {}))
        return SurrogateBrain(config)
    if users == "llm":
        from agent_models.llm import LLMBrain, LLMConfig

        if llm is None:
            raise ValueError(
                "users='llm' needs llm={'backend': 'hf'|'vllm'|'openai', 'model': ...}"
            )
        config = llm if isinstance(llm, LLMConfig) else LLMConfig.model_validate(llm)
        return LLMBrain(config)
    raise ValueError(f"users={users!r} is not allowed: use one of {BRAIN_KINDS} or a Brain instance")
