"""The one small interface every inference backend implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Messages = list[dict[str, str]]
#: ``None`` = unconstrained for all prompts; a dict = one schema for all; a list = per prompt.
Schemas = Sequence[dict[str, Any] | None] | dict[str, Any] | None


class LLMBackendError(RuntimeError):
    """A backend request failed for good (after its retries), or the backend cannot start."""


class ScoringUnsupported(LLMBackendError):
    """The backend (or the server behind it) cannot return label likelihoods."""


def fold_system(messages: Messages) -> Messages:
    """The same conversation without a system message: the system content goes at the top
    of the first user message (for chat templates without a system role)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    head = "\n\n".join(system)
    for m in rest:
        if m["role"] == "user":
            m["content"] = f"{head}\n\n{m['content']}"
            return rest
    return [{"role": "user", "content": head}, *rest]


def template_keeps_system(render: Any) -> bool:
    """Whether a chat template renders a system message: ``render(messages) -> str`` is
    called with a marked system message; a template that raises (no system role) or drops
    the marker (e.g. llama.cpp's gemma format) does not keep it."""
    marker = "policysim-system-marker-7f3a"
    try:
        text = render([{"role": "system", "content": marker}, {"role": "user", "content": "hi"}])
    except Exception:
        return False
    return marker in str(text)


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one backend call.

    Attributes:
        temperature: 0 = greedy.
        top_p: nucleus mass in (0, 1].
        top_k: -1 = off.
        max_new_tokens: completion budget per prompt.
        repetition_penalty: 1.0 = off.
        seed: base seed; prompt ``i`` of the call is sampled with ``seed + i`` where the
            backend supports per-request seeds (vLLM, OpenAI), else the call is seeded once.
    """

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    repetition_penalty: float = 1.0
    seed: int | None = None


@dataclass
class Generation:
    """The result of one backend call over n prompts (in prompt order).

    Attributes:
        texts: n completions (without the end-of-turn token).
        prompt_tokens, completion_tokens: (n,) int64 token counts per prompt.
        finish_reasons: ``"stop"``, ``"length"`` (hit max_new_tokens) or ``"error"``.
        errors: None, or the error message of a failed request (``finish_reason == "error"``).
        seconds: wall time of the call.
        replayed: how many of the n answers came from a replay cache (no model call).
    """

    texts: list[str]
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    finish_reasons: list[str]
    errors: list[str | None] = field(default_factory=list)
    seconds: float = 0.0
    replayed: int = 0

    def __post_init__(self) -> None:
        if not self.errors:
            self.errors = [None] * len(self.texts)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> Generation:
        """From one ``(text, prompt_tokens, completion_tokens, finish_reason[, error])`` row
        per prompt."""
        return cls(
            texts=[r[0] for r in rows],
            prompt_tokens=np.array([r[1] for r in rows], np.int64),
            completion_tokens=np.array([r[2] for r in rows], np.int64),
            finish_reasons=[r[3] for r in rows],
            errors=[r[4] if len(r) > 4 else None for r in rows],
        )

    @classmethod
    def failed(cls, n: int, message: str, seconds: float = 0.0) -> Generation:
        """n empty completions, each with finish reason ``"error"`` and ``message``."""
        return cls(
            texts=[""] * n,
            prompt_tokens=np.zeros(n, np.int64),
            completion_tokens=np.zeros(n, np.int64),
            finish_reasons=["error"] * n,
            errors=[message] * n,
            seconds=seconds,
        )

    def __len__(self) -> int:
        return len(self.texts)


def schema_list(schemas: Schemas, n: int) -> list[dict[str, Any] | None]:
    """Normalize the ``schemas`` argument of :meth:`Backend.generate` to one entry per prompt."""
    if schemas is None:
        return [None] * n
    if isinstance(schemas, dict):
        return [schemas] * n
    out = list(schemas)
    if len(out) != n:
        raise ValueError(f"schemas: got {len(out)} schemas for {n} prompts")
    return out


class Backend(ABC):
    """Generates completions for a batch of chat prompts, optionally JSON-schema constrained.

    One call = one batch: implementations batch or run the prompts concurrently; callers
    never loop over prompts.
    """

    name: str = "backend"
    #: whether the chat template keeps a system message (see :func:`template_keeps_system`)
    system_role: bool = True

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Messages],
        schemas: Schemas = None,
        sampling: Sampling | None = None,
    ) -> Generation:
        """Complete every prompt (chat messages); decode prompt ``i`` under ``schemas[i]``."""

    def count_tokens(self, prompts: Sequence[Messages]) -> np.ndarray:
        """(n,) prompt token counts with the chat template applied, where the backend has a
        local tokenizer; raises ``TypeError`` otherwise."""
        raise TypeError(f"{type(self).__name__} has no local tokenizer to count tokens with")

    def score_labels(self, prompts: Sequence[Messages], labels: Sequence[str]) -> np.ndarray:
        """(n, L) log-likelihood of each label as the answer to each prompt (the stance
        labeller scores labels this way); raises :class:`ScoringUnsupported` where the
        backend cannot."""
        raise ScoringUnsupported(f"{type(self).__name__} cannot score labels")

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release models, engines and connections."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BatchBackend(Backend):
    """The in-tree backends' ``generate``: it fills in the default :class:`Sampling`, gives
    :meth:`_complete` one schema per prompt and sets the call's wall time."""

    def generate(
        self,
        prompts: Sequence[Messages],
        schemas: Schemas = None,
        sampling: Sampling | None = None,
    ) -> Generation:
        start = time.perf_counter()
        generation = self._complete(
            prompts, schema_list(schemas, len(prompts)), sampling or Sampling()
        )
        generation.seconds = time.perf_counter() - start
        return generation

    @abstractmethod
    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        """Complete every prompt, prompt ``i`` under ``schemas[i]`` (None = unconstrained)."""
