"""Local HTTP servers that answer OpenAI-style chat completions for the LLM tests, bounded
in requests and time, validating the request body the way the real servers do:

- llama-cpp-python's (pydantic model of ``response_format``; HTTP 500 with the pydantic
  message on a violation; ``json_object`` with a ``schema`` and ``grammar`` are enforced;
  ``logprobs`` / ``top_logprobs`` answered);
- vLLM's (``json_schema`` needs its ``name``, HTTP 400; ``top_logprobs`` at most
  ``max_logprobs`` = 20 and only with ``logprobs: true``, else HTTP 400; ``json_schema`` and
  ``json_object`` enforced; logprobs answered);
- ``transformers serve``'s (``transformers/cli/serving/chat_completion.py``): a field that
  is not an OpenAI chat-completion parameter is HTTP 422 "Unexpected fields in the
  request"; ``response_format``, ``logprobs`` and ``top_logprobs`` are accepted (HTTP 200)
  and ignored: answers are free text, without logprobs.

A server that enforces a schema answers the backend's probe (:data:`PROBE_VALUE` in the
schema) with the one valid answer; one that ignores it answers "Hello! How can I help you
today?". Label scores (``logprobs``): "against" leads when the prompt's posts say "wrong",
"cannot accept" or "shameful", "favor" when they say "right call", "fought for" or "proud",
else "neutral"."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_models.llm.backends.openai_compat import PROBE_VALUE

MAX_REQUESTS = 500  # the servers refuse to serve more than this (bounded load)
SHARED_LOCK = threading.Lock()
IN_FLIGHT = {"now": 0, "max": 0}  # requests being served, over all servers of a test


class LlamaCppPythonResponseFormat(BaseModel):
    """llama_cpp.llama_types.ChatCompletionRequestResponseFormat (llama-cpp-python 0.3)."""

    type: Literal["text", "json_object"]
    schema_: Any = Field(None, alias="schema")


class LlamaCppPythonRequest(BaseModel):
    """The fields of llama-cpp-python's CreateChatCompletionRequest this backend sends."""

    model_config = ConfigDict(extra="allow")
    messages: list[dict[str, Any]]
    response_format: LlamaCppPythonResponseFormat | None = None
    grammar: str | None = None


class VLLMJsonSchema(BaseModel):
    """vllm.entrypoints.openai.protocol.JsonSchemaResponseFormat."""

    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class VLLMResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: VLLMJsonSchema | None = None


class VLLMRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # vLLM warns about unknown fields, ignores them
    messages: list[dict[str, Any]]
    response_format: VLLMResponseFormat | None = None


#: openai.types.chat.CompletionCreateParams keys, plus the three transformers serve adds
TRANSFORMERS_SERVE_FIELDS = frozenset(
    {
        "messages",
        "model",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
        "generation_config",
        "chat_template_kwargs",
    }
)
#: vLLM's default ``--max-logprobs``
VLLM_MAX_LOGPROBS = 20
#: what each server kind enforces and answers
ENFORCES: dict[str | None, tuple[str, ...]] = {
    None: ("json_schema", "json_object", "grammar"),
    "vllm": ("json_schema", "json_object"),
    "llama_cpp_python": ("json_object", "grammar"),
    "transformers_serve": (),
}
GIVES_LOGPROBS: dict[str | None, bool] = {
    None: True,
    "vllm": True,
    "llama_cpp_python": True,
    "transformers_serve": False,
}


def validation_error(kind: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The error a real server of ``kind`` answers to ``body``, or None when it accepts it."""
    if kind == "transformers_serve":
        unexpected = set(body) - TRANSFORMERS_SERVE_FIELDS
        if unexpected:
            return 422, {"detail": f"Unexpected fields in the request: {unexpected}"}
        return None
    if kind == "vllm" and body.get("top_logprobs") is not None:
        if not body.get("logprobs"):
            return 400, {
                "error": {
                    "message": "when using `top_logprobs`, `logprobs` must be set to true.",
                    "type": "BadRequestError",
                    "code": 400,
                }
            }
        if body["top_logprobs"] > VLLM_MAX_LOGPROBS:
            return 400, {
                "error": {
                    "message": f"Requested sample logprobs of {body['top_logprobs']}, "
                    f"which is greater than max allowed: {VLLM_MAX_LOGPROBS}",
                    "type": "BadRequestError",
                    "code": 400,
                }
            }
    try:
        if kind == "llama_cpp_python":
            LlamaCppPythonRequest.model_validate(body)
        elif kind == "vllm":
            request = VLLMRequest.model_validate(body)
            fmt = request.response_format
            if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
                return 400, {
                    "error": {
                        "message": "response_format.json_schema is required",
                        "type": "BadRequestError",
                        "code": 400,
                    }
                }
    except ValidationError as err:
        if kind == "llama_cpp_python":  # its RouteErrorHandler wraps every exception as 500
            return 500, {"error": {"message": str(err), "type": "internal_server_error"}}
        return 400, {"error": {"message": str(err), "type": "BadRequestError", "code": 400}}
    return None


class FakeLLMServer:
    """A tiny ``/v1/chat/completions`` server. Behaviour per prompt is keyed by a tag in the
    last message: ``[ok]`` answers at once, ``[429]`` / ``[500]`` fail the first attempt,
    ``[slow]`` sleeps past the client timeout on the first attempt, ``[dead]`` always 500s.
    Agent prompts (``You are @user_N``) get a like of the first post in their feed."""

    def __init__(
        self,
        slow_seconds: float = 1.0,
        attempts: Counter[str] | None = None,
        validate: str | None = None,
        free_text: bool | None = None,
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        #: the Authorization header of each request
        self.authorizations: list[str | None] = []
        self.validate = validate
        #: a schema the server does not enforce gets a free-text answer (default: only
        #: for transformers serve, which ignores response_format)
        self.free_text = validate == "transformers_serve" if free_text is None else free_text
        #: attempts per prompt, shared by the servers of one test (retries change server)
        self.attempts: Counter[str] = Counter() if attempts is None else attempts
        self.lock = SHARED_LOCK
        self.slow_seconds = slow_seconds
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.authorizations.append(self.headers.get("Authorization"))
                with server.lock:
                    IN_FLIGHT["now"] += 1
                    IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
                counted = True
                try:
                    status, payload, delay = server.respond(self.path, body)
                    if delay:  # the client gives up on this one early: stop counting it
                        with server.lock:
                            IN_FLIGHT["now"] -= 1
                        counted = False
                    time.sleep(delay or 0.02)
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    if counted:
                        with server.lock:
                            IN_FLIGHT["now"] -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        with self.lock:
            self.requests.append(body)
            if len(self.requests) > MAX_REQUESTS:
                return 503, {"error": {"message": "test server request budget exhausted"}}, 0.0
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}, 0.0
        if self.validate is not None:
            refused = validation_error(self.validate, body)
            if refused is not None:
                return refused[0], refused[1], 0.0
        content = body["messages"][-1]["content"]
        enforced = self.enforced_form(body)
        if PROBE_VALUE in json.dumps(body.get("response_format")) + str(body.get("grammar")):
            answer = (
                json.dumps({"probe": PROBE_VALUE})
                if enforced
                else "Hello! How can I help you today?"
            )
            return 200, self.completion(answer), 0.0
        if body.get("logprobs") and GIVES_LOGPROBS[self.validate]:
            return 200, self.completion("x", self.label_logprobs(content)), 0.0
        if self.free_text and body.get("response_format") is not None and not enforced:
            return 200, self.completion("Sure! I think this is a great post."), 0.0
        key = content
        with self.lock:
            self.attempts[key] += 1
            attempt = self.attempts[key]
        if "[dead]" in content:
            return 500, {"error": {"message": "internal error"}}, 0.0
        if "[429]" in content and attempt == 1:
            return 429, {"error": {"message": "rate limited"}}, 0.0
        if "[500]" in content and attempt == 1:
            return 500, {"error": {"message": "internal error"}}, 0.0
        if "[slow]" in content and attempt == 1:
            return 200, self.completion('{"stance":"favor"}'), self.slow_seconds
        if content.startswith("You are @user_"):
            feed = re.findall(r"^\[(\d+)\]", content, flags=re.M)
            answer = (
                {"actions": [{"type": "like", "post_id": int(feed[0])}]}
                if feed
                else {"actions": []}
            )
            return 200, self.completion(json.dumps(answer)), 0.0
        if "Recent posts of" in content:
            return 200, self.completion('{"stance":"against"}'), 0.0
        if "memories" in content.lower():
            return 200, self.completion('{"memory":"merged"}'), 0.0
        if "Post by" in content:
            return 200, self.completion('{"summary":"gist"}'), 0.0
        return 200, self.completion('{"stance":"favor"}'), 0.0

    def enforced_form(self, body: dict[str, Any]) -> bool:
        """Whether this server kind enforces the structured-output form of ``body``."""
        fmt = body.get("response_format") or {}
        form = "grammar" if body.get("grammar") else fmt.get("type")
        if form == "json_object" and self.validate == "llama_cpp_python" and "schema" not in fmt:
            return False
        return form in ENFORCES[self.validate]

    @staticmethod
    def label_logprobs(content: str) -> dict[str, Any]:
        """The first answer token's top logprobs for a stance prompt (see the module docstring)."""
        text = content.lower()
        lead = (
            "against"
            if any(w in text for w in ("wrong", "cannot accept", "shameful"))
            else "favor"
            if any(w in text for w in ("right call", "fought for", "proud"))
            else "neutral"
        )
        top = (
            [{"token": lead[:3], "logprob": -0.1, "bytes": None}]
            + [
                {"token": label[:3], "logprob": -3.0, "bytes": None}
                for label in ("against", "neutral", "favor")
                if label != lead
            ]
            + [{"token": "The", "logprob": -4.0, "bytes": None}]
        )
        return {
            "content": [{"token": lead[:3], "logprob": -0.1, "bytes": None, "top_logprobs": top}]
        }

    @staticmethod
    def completion(text: str, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "id": "cmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": "tiny",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
