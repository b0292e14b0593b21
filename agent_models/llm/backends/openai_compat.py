"""OpenAI-compatible HTTP backend (vLLM serve, llama.cpp server, SGLang, a remote cluster).

Uses the ``openai`` package's ``AsyncOpenAI`` client (one per base URL, its own retries
off) on a private event loop thread, so it works from plain scripts and from notebooks
that already run a loop. A call sends all its prompts concurrently, at most
``concurrency`` in flight (a semaphore), spread round-robin over the base URLs. Requests
that fail with 429, 408, 5xx, a timeout, a connection error or a malformed 200 (an HTML or
text body, ``{}``, no choices) are retried with exponential backoff and jitter
(``tenacity``), waiting at least what a ``Retry-After`` header asks, each retry on the next
URL; null or missing ``usage`` counts 0 tokens; after ``max_retries`` the
call raises :class:`LLMBackendError` naming the URL, the status and the attempts (or, with
``fail_on_backend_error=False``, reports the prompt as ``finish_reason="error"``).

Constrained decoding (``config.response_format``), because servers disagree on the form:

- ``"json_schema"``: ``response_format={"type": "json_schema", "json_schema": {"name": ...,
  "schema": ..., "strict": true}}`` (OpenAI, vLLM, SGLang, llama.cpp's llama-server);
- ``"json_object"``: ``response_format={"type": "json_object", "schema": ...}``
  (llama-cpp-python's server, which answers ``json_schema`` with HTTP 500 "Input should be
  'text' or 'json_object'");
- ``"grammar"``: a GBNF ``grammar`` body field converted from the schema with
  llama-cpp-python's ``json_schema_to_gbnf`` (llama.cpp servers);
- ``"none"``: no constraint; the answer is validated afterwards like any other.

``"auto"`` starts with json_schema; a server that rejects a form (HTTP 400/422, or a 5xx
whose message names the response format) is asked again at once with the next form, without
the retry backoff, and the working form is kept for the rest of the run (``self.form``).
Rejections are never retried with the same form: they cannot succeed.

**Probe.** A server may accept a form and ignore it (``transformers serve`` answers HTTP 200
to ``json_schema`` and ``json_object`` and logs "Ignoring unsupported fields:
response_format"). Before its first constrained request the backend therefore sends one
probe per form, in order, until one is enforced: "Say hello." under a schema whose only
valid answer is ``{"probe": "policysim-probe-7f3a"}``. A form whose answer does not
validate counts as refused (``rejected_forms``, ``probe_results``), even under HTTP 200.
When no form is enforced, ``"auto"`` warns and decodes free text (``"none"``, answers
validated after); an explicit form, or ``strict=True``, raises :class:`LLMBackendError`.
During the run the brain stops once too many constrained answers fail to parse
(``LLMConfig.max_unparsed_share``).

**Label scores.** :meth:`OpenAIBackend.score_labels` asks for one answer token with
``logprobs`` / ``top_logprobs`` (vLLM, llama.cpp and OpenAI return them) and scores each
label by the best top token that starts it; a server that returns no logprobs (``transformers
serve`` ignores the fields) makes it raise
:class:`~agent_models.llm.backends.base.ScoringUnsupported` (the stance labeller then
decodes).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    BatchBackend,
    Generation,
    LLMBackendError,
    Messages,
    Sampling,
    ScoringUnsupported,
)
from agent_models.llm.config import RESPONSE_FORMS, LLMConfig
from policysim_infra.extras import require
from policysim_infra.redaction import redact_text

#: Longest ``Retry-After`` honoured (seconds); a server asking for more waits this long.
MAX_RETRY_AFTER = 300.0


class MalformedResponse(ValueError):
    """A response that is not a usable chat completion (HTML or text body, ``{}``, no
    choices, a non-string content...); retried like a 5xx, then reported with its reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_response(response: Any) -> tuple[str, int, int, str]:
    """(text, prompt tokens, completion tokens, finish reason) of a chat completion; raises
    :class:`MalformedResponse` naming what is wrong. Missing or null usage counts as 0."""
    choices = getattr(response, "choices", None)
    if choices is None:
        kind = type(response).__name__
        preview = response[:80] if isinstance(response, str) else ""
        raise MalformedResponse("malformed_response", f"not a chat completion ({kind}) {preview!r}")
    if not isinstance(choices, list | tuple) or not choices:
        raise MalformedResponse("empty_choices", f"choices is {choices!r}")
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None) if message is not None else None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise MalformedResponse("malformed_response", f"message content is a {type(text).__name__}")
    usage = getattr(response, "usage", None)

    def count(name: str) -> int:
        value = getattr(usage, name, None) if usage is not None else None
        return int(value) if isinstance(value, int | float) and value >= 0 and value == value else 0

    finish = "length" if getattr(choices[0], "finish_reason", None) == "length" else "stop"
    return text, count("prompt_tokens"), count("completion_tokens"), finish


def retry_after_seconds(err: BaseException | None) -> float | None:
    """The wait a 429 / 503 response asks for (``retry-after-ms`` or ``Retry-After`` in
    seconds or as an HTTP date), capped at :data:`MAX_RETRY_AFTER`; None if it asks none."""
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    seconds: float | None = None
    try:
        if headers.get("retry-after-ms") is not None:
            seconds = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after") is not None:
            value = str(headers["retry-after"]).strip()
            try:
                seconds = float(value)
            except ValueError:
                from email.utils import parsedate_to_datetime

                seconds = parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    if seconds is None or seconds != seconds:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


#: The probe of a structured-output form: under the schema the only valid answer to
#: :data:`PROBE_MESSAGES` is ``{"probe": PROBE_VALUE}``; a free answer never is.
PROBE_VALUE = "policysim-probe-7f3a"
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"probe": {"type": "string", "enum": [PROBE_VALUE]}},
    "required": ["probe"],
    "additionalProperties": False,
}
PROBE_MESSAGES: Messages = [{"role": "user", "content": "Say hello."}]


def probe_answer_valid(text: str) -> bool:
    """Whether a probe answer follows :data:`PROBE_SCHEMA`."""
    try:
        return json.loads(text) == {"probe": PROBE_VALUE}
    except (ValueError, TypeError):
        return False


def top_logprobs_of(response: Any) -> tuple[str, int, int, str]:
    """Like :func:`parse_response`, but the text is the first answer token's
    ``top_logprobs`` as JSON ``[[token, logprob], ...]``, or ``"null"`` when the server
    returned none."""
    text, prompt_tokens, completion_tokens, finish = parse_response(response)
    logprobs = getattr(response.choices[0], "logprobs", None)
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    if not content:
        return "null", prompt_tokens, completion_tokens, finish
    top = getattr(content[0], "top_logprobs", None) or []
    pairs = [
        [str(getattr(t, "token", "")), float(getattr(t, "logprob", float("-inf")))] for t in top
    ]
    return json.dumps(pairs), prompt_tokens, completion_tokens, finish


def label_logprobs(top: Sequence[Sequence[Any]], labels: Sequence[str]) -> np.ndarray:
    """(L,) each label's log-probability read from the first answer token's top list: the
    best token that starts the label (case and spaces folded); a label no top token starts
    gets the lowest top log-probability minus 1 (it is less likely than all of them); all
    -inf when no label is started by any top token."""
    out = np.full(len(labels), -np.inf)
    if not top:
        return out
    for j, label in enumerate(labels):
        starts = [
            float(lp)
            for tok, lp in top
            if (word := str(tok).strip().lower()) and label.lower().startswith(word)
        ]
        if starts:
            out[j] = max(starts)
    if np.isfinite(out).any():
        out[~np.isfinite(out)] = min(float(lp) for _, lp in top) - 1.0
    return out


#: words in a server's error message that say the structured-output request was refused
FORM_WORDS: tuple[str, ...] = (
    "response_format",
    "json_schema",
    "json_object",
    "grammar",
    "structured",
    "guided",
    "schema",
)


def is_form_rejection(err: BaseException) -> bool:
    """The server refused the structured-output form of the request (HTTP 400/422, or a 5xx
    whose message names the response format, as llama-cpp-python's server answers)."""
    import openai

    if not isinstance(err, openai.APIStatusError):
        return False
    text = str(err).lower()
    if err.status_code in (400, 415, 422) or err.status_code >= 500:
        return any(word in text for word in FORM_WORDS)
    return False


def is_retryable(err: BaseException) -> bool:
    """429 / 408 / 5xx responses, timeouts, connection errors and malformed 200 responses
    are retried; a rejected request form is not (the same request cannot succeed)."""
    import openai

    if isinstance(err, MalformedResponse):
        return True
    if isinstance(err, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(err, openai.APIStatusError):
        if is_form_rejection(err):
            return False
        return err.status_code in (408, 409, 429) or err.status_code >= 500
    return False


def schema_to_gbnf(schema: dict[str, Any]) -> str:
    """A GBNF grammar for ``schema`` (llama-cpp-python's converter, the one its server uses)."""
    grammar = require(
        "llama_cpp.llama_grammar",
        "llamacpp",
        "response_format='grammar' (llama-cpp-python's JSON-schema converter)",
    )
    return grammar.json_schema_to_gbnf(json.dumps(schema))


def grammar_available() -> bool:
    """Whether :func:`schema_to_gbnf` can run here."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def request_kwargs(
    model: str,
    messages: Messages,
    schema: dict[str, Any] | None,
    sampling: Sampling,
    index: int,
    form: str = "json_schema",
    grammar: str | None = None,
) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments of one prompt (pure; tested).

    ``form`` is one of :data:`~agent_models.llm.config.RESPONSE_FORMS`; ``grammar`` is the
    GBNF text for the ``"grammar"`` form."""
    if form not in RESPONSE_FORMS:
        raise ValueError(f"form: {form!r} not allowed; use one of {list(RESPONSE_FORMS)}")
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
    if schema is not None and form == "json_schema":
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    elif schema is not None and form == "json_object":
        kwargs["response_format"] = {"type": "json_object", "schema": schema}
    elif schema is not None and form == "grammar":
        if grammar is None:
            raise ValueError("grammar: the 'grammar' form needs the GBNF text")
        extra["grammar"] = grammar
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


class OpenAIBackend(BatchBackend):
    """OpenAI-compatible chat completions behind the :class:`Backend` interface."""

    name = "openai"

    def __init__(self, config: LLMConfig) -> None:
        require("openai", "llm", "backend='openai'")
        require("tenacity", "llm", "backend='openai'")
        assert config.base_url
        self.config = config
        self.urls = list(config.base_url)
        self._counter = itertools.count()
        #: failed requests (after retries) by reason: "malformed_response", "empty_choices",
        #: or the exception type ("RateLimitError", "APITimeoutError", ...)
        self.failures: Counter[str] = Counter()
        if config.response_format == "auto":
            self.forms = [f for f in RESPONSE_FORMS if f != "grammar" or grammar_available()]
        else:
            self.forms = [config.response_format]
            if config.response_format == "grammar":
                schema_to_gbnf({"type": "object"})  # fails now, with the install hint
        self._form_index = 0
        self._gbnf: dict[str, str] = {}
        #: forms the server refused, with its message (reported by the brain); a form the
        #: probe found ignored (HTTP 200, answer off the schema) counts as refused
        self.rejected_forms: dict[str, str] = {}
        #: form → "enforced", "refused: ..." or "ignored: ..." (see the module docstring)
        self.probe_results: dict[str, str] = {}
        self._probed = not (config.constrained and config.probe_forms)
        self._logprobs: bool | None = None
        self.system_role = config.system_role != "fold"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="policysim-openai", daemon=True
        )
        self._thread.start()
        self._clients: list[Any] = self._run(self._make_clients())

    async def _make_clients(self) -> list[Any]:
        from openai import AsyncOpenAI

        return [
            AsyncOpenAI(
                base_url=url,
                api_key=self.config.resolved_api_key(),
                max_retries=0,
                timeout=self.config.request_timeout,
            )
            for url in self.urls
        ]

    @property
    def form(self) -> str:
        """The structured-output request form in use."""
        return self.forms[self._form_index]

    def _grammar(self, schema: dict[str, Any]) -> str:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._gbnf:
            self._gbnf[key] = schema_to_gbnf(schema)
        return self._gbnf[key]

    def _kwargs(
        self, messages: Messages, schema: dict[str, Any] | None, sampling: Sampling, index: int
    ) -> tuple[str, dict[str, Any]]:
        form = self.form
        grammar = self._grammar(schema) if schema is not None and form == "grammar" else None
        return form, request_kwargs(
            self.config.model, messages, schema, sampling, index, form, grammar
        )

    def _rejected(self, form: str, err: BaseException) -> bool:
        """Record that the server refused ``form``; True when another form is left to try."""
        if form != self.form:  # another request already moved on
            return True
        self.rejected_forms[form] = str(err)[:300]
        if self._form_index + 1 < len(self.forms):
            self._form_index += 1
            return True
        return False

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # ------------------------------------------------------------------ probe
    def probe(self) -> dict[str, str]:
        """Probe the forms in order until one is enforced (see the module docstring); sets
        :attr:`form` and returns :attr:`probe_results`."""
        self._probed = True
        for index, form in enumerate(self.forms):
            if form == "none":
                break
            try:
                outcome = self._run(self._probe_form(form))
            except LLMBackendError as err:
                if self.config.fail_on_backend_error:
                    raise
                # the request failed (not refused): keep the form, count the run's failures
                self.probe_results[form] = f"failed: {err}"
                warnings.warn(
                    f"structured-output probe failed, form {form!r} kept unchecked: {err}",
                    RuntimeWarning,
                    stacklevel=4,
                )
                return self.probe_results
            self.probe_results[form] = outcome
            if outcome == "enforced":
                self._form_index = index
                return self.probe_results
            self.rejected_forms[form] = outcome
        message = (
            f"no structured-output form is enforced by the server at {', '.join(self.urls)}: "
            + "; ".join(f"{f}: {o}" for f, o in self.probe_results.items())
        )
        if "none" not in self.forms or self.config.strict:
            raise LLMBackendError(
                message + ". Use a server that enforces JSON schemas (vLLM, "
                "llama.cpp, SGLang) or response_format='none' / constrained=False."
            )
        self._form_index = self.forms.index("none")
        warnings.warn(
            message + "; answers are decoded free and validated after (response_format='none')",
            RuntimeWarning,
            stacklevel=4,
        )
        return self.probe_results

    async def _probe_form(self, form: str) -> str:
        import openai

        grammar = self._grammar(PROBE_SCHEMA) if form == "grammar" else None
        kwargs = request_kwargs(
            self.config.model,
            PROBE_MESSAGES,
            PROBE_SCHEMA,
            Sampling(temperature=0.0, max_new_tokens=24),
            0,
            form,
            grammar,
        )
        try:
            response = await self._clients[0].chat.completions.create(**kwargs)
            text = parse_response(response)[0]
        except openai.APIStatusError as err:
            if is_form_rejection(err) or err.status_code in (400, 415, 422):
                return f"refused: HTTP {err.status_code}: {redact_text(str(err))[:200]}"
            raise LLMBackendError(
                redact_text(
                    f"probe of response_format {form!r} at {self.urls[0]} failed: "
                    f"{type(err).__name__} (HTTP {err.status_code}): {err}"
                )
            ) from err
        except (openai.APIConnectionError, openai.APIResponseValidationError, ValueError) as err:
            raise LLMBackendError(
                redact_text(
                    f"probe of response_format {form!r} at {self.urls[0]} failed: "
                    f"{type(err).__name__}: {err}"
                )
            ) from err
        if probe_answer_valid(text):
            return "enforced"
        return f"ignored: HTTP 200 but the answer {text[:80]!r} does not follow the schema"

    # ------------------------------------------------------------------ label scores
    def score_labels(self, prompts: Sequence[Messages], labels: Sequence[str]) -> np.ndarray:
        """(n, L) label log-probabilities from the first answer token's ``top_logprobs``
        (see :func:`label_logprobs`); rows of a failed request are -inf. Raises
        :class:`ScoringUnsupported` when the server returns no logprobs or refuses them."""
        if self._logprobs is False:
            raise ScoringUnsupported("the server returns no logprobs")
        extra = {"logprobs": True, "top_logprobs": self.config.top_logprobs}
        sampling = Sampling(temperature=0.0, max_new_tokens=1)
        try:
            rows = self._run(
                self._all(
                    prompts, [None] * len(prompts), sampling, extra=extra, parse=top_logprobs_of
                )
            )
        except LLMBackendError as err:
            cause = err.__cause__
            import openai

            if isinstance(cause, openai.APIStatusError) and cause.status_code in (400, 422):
                self._logprobs = False
                raise ScoringUnsupported(f"the server refuses logprobs: {err}") from err
            raise
        out = np.full((len(prompts), len(labels)), -np.inf)
        for i, (text, _, _, finish, _) in enumerate(rows):
            if finish == "error":
                continue
            if text == "null":
                self._logprobs = False
                raise ScoringUnsupported(
                    f"the server at {', '.join(self.urls)} answered without logprobs (it "
                    "ignores logprobs/top_logprobs, as `transformers serve` does)"
                )
            out[i] = label_logprobs(json.loads(text), labels)
        self._logprobs = True
        return out

    async def _one(
        self,
        index: int,
        messages: Messages,
        schema: dict[str, Any] | None,
        sampling: Sampling,
        semaphore: asyncio.Semaphore,
        extra: dict[str, Any] | None = None,
        parse: Callable[[Any], tuple[str, int, int, str]] = parse_response,
    ) -> tuple[str, int, int, str, str | None]:
        import openai
        from tenacity import (
            AsyncRetrying,
            retry_if_exception,
            stop_after_attempt,
            stop_after_delay,
            wait_exponential,
            wait_random,
        )

        cfg = self.config
        first = next(self._counter)
        attempts = 0
        backoff = wait_exponential(
            multiplier=cfg.retry_initial_wait, max=cfg.retry_max_wait
        ) + wait_random(0, cfg.retry_initial_wait)

        def wait(retry_state: Any) -> float:
            seconds = backoff(retry_state)
            outcome = retry_state.outcome
            after = retry_after_seconds(outcome.exception() if outcome is not None else None)
            return seconds if after is None else max(seconds, after)

        form = self.form
        async with semaphore:
            try:
                while True:
                    form, kwargs = self._kwargs(messages, schema, sampling, index)
                    kwargs.update(extra or {})
                    try:
                        async for attempt in AsyncRetrying(
                            stop=stop_after_attempt(cfg.max_retries + 1)
                            | stop_after_delay(cfg.request_deadline),
                            wait=wait,
                            retry=retry_if_exception(is_retryable),
                            reraise=True,
                        ):
                            with attempt:
                                client = self._clients[(first + attempts) % len(self._clients)]
                                attempts += 1
                                try:
                                    response = await client.chat.completions.create(**kwargs)
                                except (openai.APIResponseValidationError, ValueError) as err:
                                    raise MalformedResponse(
                                        "malformed_response", f"unparseable body: {err}"
                                    ) from err
                                result = parse(response)
                        break
                    except Exception as err:
                        if (
                            schema is None
                            or form == "none"
                            or not is_form_rejection(err)
                            or not self._rejected(form, err)
                        ):
                            raise
            except Exception as err:
                url = self.urls[(first + attempts - 1) % len(self.urls)]
                status = getattr(err, "status_code", None)
                hint = ""
                if schema is not None and is_form_rejection(err):
                    hint = (
                        f" (the server refused the structured-output form {form!r}; tried "
                        f"{list(self.rejected_forms) or [form]}; set response_format to "
                        f"one of {list(RESPONSE_FORMS)} or 'auto')"
                    )
                message = redact_text(
                    f"OpenAI-compatible request {index} failed after {attempts} attempt(s); "
                    f"last at {url}: {type(err).__name__}"
                    + (f" (HTTP {status})" if status else "")
                    + f": {err}{hint}"
                )
                reason = err.reason if isinstance(err, MalformedResponse) else type(err).__name__
                self.failures[reason] += 1
                if cfg.fail_on_backend_error:
                    raise LLMBackendError(message) from err
                return "", 0, 0, "error", message
        return (*result, None)

    async def _all(
        self,
        prompts: Sequence[Messages],
        schemas: list[dict[str, Any] | None],
        sampling: Sampling,
        extra: dict[str, Any] | None = None,
        parse: Callable[[Any], tuple[str, int, int, str]] = parse_response,
    ) -> list[tuple[str, int, int, str, str | None]]:
        semaphore = asyncio.Semaphore(self.config.concurrency)
        tasks = [
            asyncio.ensure_future(self._one(i, list(p), s, sampling, semaphore, extra, parse))
            for i, (p, s) in enumerate(zip(prompts, schemas, strict=True))
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _complete(
        self, prompts: Sequence[Messages], schemas: list[dict[str, Any] | None], sampling: Sampling
    ) -> Generation:
        if not self._probed and any(s is not None for s in schemas):
            self.probe()
        return Generation.from_rows(self._run(self._all(prompts, schemas, sampling)))

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
