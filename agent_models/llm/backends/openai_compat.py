"""OpenAI-compatible HTTP backend (vLLM serve, llama.cpp server, SGLang, a remote cluster).

Uses the ``openai`` package's ``AsyncOpenAI`` client (one per base URL, its own retries
off) on a private event loop thread, so it works from plain scripts and from notebooks
that already run a loop. A call sends all its prompts concurrently, at most
``concurrency`` in flight (a semaphore), spread round-robin over the base URLs. Requests
that fail with 429, 408, 5xx, a timeout or a connection error are retried with exponential
backoff and jitter (``tenacity``), each retry on the next URL; after ``max_retries`` the
call raises :class:`LLMBackendError` naming the URL, the status and the attempts (or, with
``fail_on_backend_error=False``, reports the prompt as ``finish_reason="error"``).

Constrained decoding: ``response_format={"type": "json_schema", "json_schema": {...,
"strict": true}}``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Sequence
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
)
from agent_models.llm.config import LLMConfig


def is_retryable(err: BaseException) -> bool:
    """429 / 408 / 5xx responses, timeouts and connection errors are retried."""
    import openai

    if isinstance(err, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(err, openai.APIStatusError):
        return err.status_code in (408, 409, 429) or err.status_code >= 500
    return False


def request_kwargs(model: str, messages: Messages, schema: dict[str, Any] | None,
                   sampling: Sampling, index: int) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments of one prompt (pure; tested)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_new_tokens,
    }
    if sampling.temperature > 0 and sampling.top_p < 1:
        kwargs["top_p"] = sampling.top_p
    if sampling.seed is not None:
        kwargs["seed"] = int(sampling.seed) + index
    extra: dict[str, Any] = {}
    if sampling.top_k > 0:
        extra["top_k"] = sampling.top_k
    if sampling.repetition_penalty != 1.0:
        extra["repetition_penalty"] = sampling.repetition_penalty
    if extra:
        kwargs["extra_body"] = extra
    if schema is not None:
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    return kwargs


class OpenAIBackend(Backend):
    """OpenAI-compatible chat completions behind the :class:`Backend` interface."""

    name = "openai"

    def __init__(self, config: LLMConfig) -> None:
        try:
            import openai  # noqa: F401
            import tenacity  # noqa: F401
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("backend='openai' needs `pip install openai tenacity`") from err
        assert config.base_url
        self.config = config
        self.urls = list(config.base_url)
        self._counter = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="policysim-openai",
                                        daemon=True)
        self._thread.start()
        self._clients: list[Any] = self._run(self._make_clients())

    async def _make_clients(self) -> list[Any]:
        from openai import AsyncOpenAI

        return [
            AsyncOpenAI(base_url=url, api_key=self.config.resolved_api_key(), max_retries=0,
                        timeout=self.config.request_timeout)
            for url in self.urls
        ]

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _one(self, index: int, messages: Messages, schema: dict[str, Any] | None,
                   sampling: Sampling, semaphore: asyncio.Semaphore) -> tuple[str, int, int, str, str | None]:
        from tenacity import (
            AsyncRetrying,
            retry_if_exception,
            stop_after_attempt,
            wait_exponential,
            wait_random,
        )

        cfg = self.config
        first = next(self._counter)
        attempts = 0
        kwargs = request_kwargs(cfg.model, messages, schema, sampling, index)
        async with semaphore:
            try:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(cfg.max_retries + 1),
                    wait=wait_exponential(multiplier=cfg.retry_initial_wait, max=cfg.retry_max_wait)
                    + wait_random(0, cfg.retry_initial_wait),
                    retry=retry_if_exception(is_retryable),
                    reraise=True,
                ):
                    with attempt:
                        client = self._clients[(first + attempts) % len(self._clients)]
                        attempts += 1
                        response = await client.chat.completions.create(**kwargs)
            except Exception as err:
                url = self.urls[(first + attempts - 1) % len(self.urls)]
                status = getattr(err, "status_code", None)
                message = (
                    f"OpenAI-compatible request {index} failed after {attempts} attempt(s); "
                    f"last at {url}: {type(err).__name__}"
                    + (f" (HTTP {status})" if status else "") + f": {err}"
                )
                if cfg.fail_on_backend_error:
                    raise LLMBackendError(message) from err
                return "", 0, 0, "error", message
        choice = response.choices[0]
        usage = response.usage
        text = choice.message.content or ""
        finish = "length" if choice.finish_reason == "length" else "stop"
        return (text, int(usage.prompt_tokens) if usage else 0,
                int(usage.completion_tokens) if usage else 0, finish, None)

    async def _all(self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None],
                   sampling: Sampling) -> list[tuple[str, int, int, str, str | None]]:
        semaphore = asyncio.Semaphore(self.config.concurrency)
        tasks = [asyncio.ensure_future(self._one(i, list(p), s, sampling, semaphore))
                 for i, (p, s) in enumerate(zip(prompts, schemas, strict=True))]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def generate(
        self,
        prompts: Sequence[Messages],
        schemas: Schemas = None,
        sampling: Sampling | None = None,
    ) -> Generation:
        start = time.perf_counter()
        sampling = sampling or Sampling()
        results = self._run(self._all(prompts, schema_list(schemas, len(prompts)), sampling))
        return Generation(
            texts=[r[0] for r in results],
            prompt_tokens=np.array([r[1] for r in results], np.int64),
            completion_tokens=np.array([r[2] for r in results], np.int64),
            finish_reasons=[r[3] for r in results],
            errors=[r[4] for r in results],
            seconds=time.perf_counter() - start,
        )

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def _close() -> None:
            for client in self._clients:
                await client.close()

        try:
            self._run(_close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
