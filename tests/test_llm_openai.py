"""The OpenAI-compatible backend against real local HTTP servers on 127.0.0.1 (started here,
bounded in requests and time): valid answers, 429s, 500s, slow answers, round-robin over
several base URLs, retries with backoff, then a clear error. The servers validate the
request body the way real servers do (``validate=``): llama-cpp-python's server (pydantic
model of ``response_format``: type ``text`` / ``json_object`` with an optional ``schema``;
a violation is answered with HTTP 500 and the pydantic message) and vLLM's (type ``text`` /
``json_object`` / ``json_schema`` / ``structural_tag``, ``json_schema`` needs its ``name``;
a violation is HTTP 400)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_models.llm import (
    LLMBackendError,
    LLMBrain,
    LLMConfig,
    Sampling,
    TextEncoder,
    make_backend,
)
from agent_models.testing import make_round_input

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


def validation_error(kind: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The error a real server of ``kind`` answers to ``body``, or None when it accepts it."""
    try:
        if kind == "llama_cpp_python":
            LlamaCppPythonRequest.model_validate(body)
        elif kind == "vllm":
            request = VLLMRequest.model_validate(body)
            fmt = request.response_format
            if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is None:
                return 400, {"error": {"message": "response_format.json_schema is required",
                                       "type": "BadRequestError", "code": 400}}
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

    def __init__(self, slow_seconds: float = 1.0, attempts: Counter[str] | None = None,
                 validate: str | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        #: the Authorization header of each request
        self.authorizations: list[str | None] = []
        self.validate = validate
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
            answer = {"actions": [{"type": "like", "post_id": int(feed[0])}]} if feed else {"actions": []}
            return 200, self.completion(json.dumps(answer)), 0.0
        if "Recent posts of" in content:
            return 200, self.completion('{"stance":"against"}'), 0.0
        if "memories" in content.lower():
            return 200, self.completion('{"memory":"merged"}'), 0.0
        if "Post by" in content:
            return 200, self.completion('{"summary":"gist"}'), 0.0
        return 200, self.completion('{"stance":"favor"}'), 0.0

    @staticmethod
    def completion(text: str) -> dict[str, Any]:
        return {
            "id": "cmpl-test", "object": "chat.completion", "created": 0, "model": "tiny",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
        }

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[FakeLLMServer]]:
    attempts: Counter[str] = Counter()
    IN_FLIGHT.update(now=0, max=0)
    with FakeLLMServer(attempts=attempts) as a, FakeLLMServer(attempts=attempts) as b:
        yield [a, b]


def config(servers: list[FakeLLMServer], **extra: Any) -> LLMConfig:
    return LLMConfig.model_validate({
        "backend": "openai", "model": "tiny", "base_url": [s.url for s in servers],
        "request_timeout": 0.4, "max_retries": 3, "retry_initial_wait": 0.01,
        "retry_max_wait": 0.05, "concurrency": 4, **extra,
    })


def prompt(tag: str, i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Classify."}, {"role": "user", "content": f"{tag} #{i}"}]


def test_valid_429_500_and_slow_answers_are_retried(servers: list[FakeLLMServer]) -> None:
    schema = {"type": "object", "properties": {"stance": {"type": "string"}}, "required": ["stance"],
              "additionalProperties": False}
    tags = ["[ok]", "[429]", "[500]", "[slow]"]
    prompts = [prompt(tags[i % 4], i) for i in range(16)]
    start = time.perf_counter()
    with make_backend(config(servers)) as backend:
        gen = backend.generate(prompts, schema, Sampling(temperature=0.5, max_new_tokens=16, seed=3))
    assert time.perf_counter() - start < 20
    assert gen.texts == ['{"stance":"favor"}'] * 16 and set(gen.finish_reasons) == {"stop"}
    assert gen.prompt_tokens.tolist() == [11] * 16 and gen.completion_tokens.tolist() == [5] * 16
    requests = servers[0].requests + servers[1].requests
    # 16 first attempts + one retry for each of the 12 failing prompts
    assert len(requests) == 28
    assert min(len(servers[0].requests), len(servers[1].requests)) >= 10  # round-robin
    assert 2 <= IN_FLIGHT["max"] <= 4  # concurrent, bounded by concurrency=4
    sent = requests[0]
    assert sent["model"] == "tiny" and sent["max_tokens"] == 16
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"] == schema
    assert sorted(r["seed"] for r in requests if "[ok]" in r["messages"][-1]["content"]) == [
        3, 7, 11, 15]


def test_exhausted_retries_give_a_clear_error(servers: list[FakeLLMServer]) -> None:
    with make_backend(config(servers)) as backend:
        with pytest.raises(LLMBackendError, match=r"failed after 4 attempt\(s\).*HTTP 500"):
            backend.generate([prompt("[ok]", 0), prompt("[dead]", 1)])
    with make_backend(config(servers, fail_on_backend_error=False)) as backend:
        gen = backend.generate([prompt("[ok]", 0), prompt("[dead]", 1)])
    assert gen.finish_reasons == ["stop", "error"]
    assert gen.errors[0] is None and "HTTP 500" in gen.errors[1]
    dead = [r for s in servers for r in s.requests if "[dead]" in r["messages"][-1]["content"]]
    assert len(dead) == 8  # 2 calls × (1 + max_retries)


def test_unreachable_server_is_a_clear_error() -> None:
    with FakeLLMServer() as srv:
        url = srv.url
    cfg = LLMConfig(backend="openai", model="tiny", base_url=url, max_retries=1,
                    retry_initial_wait=0.01, retry_max_wait=0.02, request_timeout=0.5)
    with make_backend(cfg) as backend:
        with pytest.raises(LLMBackendError, match="APIConnectionError"):
            backend.generate([prompt("[ok]", 0)])


def test_llm_brain_over_http(servers: list[FakeLLMServer]) -> None:
    cfg = config(servers, fail_on_backend_error=False)
    brain = LLMBrain(cfg, encoder=TextEncoder(cfg.resolved_encoder()))
    ri = make_round_input(num_users=8, num_posts=24, feed_size=4, seed=11)
    try:
        brain.reset(ri.users, ri.posts, seed=0)
        out = brain.act(ri)
    finally:
        brain.close()
    out.validate(8, len(ri.posts), brain.embedding_dim)
    assert out.invalid == {}
    assert len(out.react_user) == 8 and (out.react_post == ri.feed[:, 0]).all()
    # stance is classified for the users with something written (history posts here)
    assert sorted(out.stance_user.tolist()) == np.unique(ri.posts.author).tolist()
    assert (out.stance_discrete == -1).all()
    assert np.isclose(out.stats["prompt_tokens_per_step"], 11)


# ----------------------------------------------------------------------------- request forms
SCHEMA = {"type": "object", "properties": {"stance": {"type": "string"}}, "required": ["stance"],
          "additionalProperties": False}


def _form_of(request: dict[str, Any]) -> str:
    if "response_format" in request:
        return request["response_format"]["type"]
    return "grammar" if "grammar" in request else "none"


def test_auto_form_falls_back_on_llama_cpp_python_server() -> None:
    """llama-cpp-python refuses json_schema with a 500; ``auto`` switches to json_object at
    once (no backoff, no retry of the refused form) and keeps it."""
    with FakeLLMServer(validate="llama_cpp_python") as server:
        cfg = config([server], max_retries=3, retry_initial_wait=0.5, concurrency=1)
        with make_backend(cfg) as backend:
            start = time.perf_counter()
            gen = backend.generate([prompt("[ok]", i) for i in range(6)], SCHEMA,
                                   Sampling(max_new_tokens=16, seed=0))
            assert time.perf_counter() - start < 2.0  # no retry backoff was waited
            assert backend.form == "json_object"
            assert "json_schema" in backend.rejected_forms
            assert "Input should be 'text' or 'json_object'" in backend.rejected_forms["json_schema"]
    assert gen.texts == ['{"stance":"favor"}'] * 6 and set(gen.finish_reasons) == {"stop"}
    forms = [_form_of(r) for r in server.requests]
    assert forms == ["json_schema"] + ["json_object"] * 6  # one refusal, never repeated
    assert server.requests[1]["response_format"]["schema"] == SCHEMA


def test_vllm_server_accepts_json_schema_and_rejects_json_object_without_fallback() -> None:
    with FakeLLMServer(validate="vllm") as server:
        with make_backend(config([server])) as backend:
            gen = backend.generate([prompt("[ok]", i) for i in range(3)], SCHEMA)
            assert backend.form == "json_schema" and not backend.rejected_forms
        assert [_form_of(r) for r in server.requests] == ["json_schema"] * 3
        assert set(gen.finish_reasons) == {"stop"}
        bad = dict(server.requests[0], response_format={"type": "json_schema"})
        assert validation_error("vllm", bad)[0] == 400  # name-less json_schema is refused
        assert validation_error("vllm", dict(bad, response_format={"type": "grammar"}))[0] == 400


def test_explicit_form_refused_is_one_clear_error() -> None:
    """A form the server refuses, set explicitly: one request, then an error that says what
    to change (retrying it could not succeed)."""
    with FakeLLMServer(validate="llama_cpp_python") as server:
        cfg = config([server], response_format="json_schema", max_retries=3)
        with make_backend(cfg) as backend:
            with pytest.raises(LLMBackendError, match=r"(?s)1 attempt.*HTTP 500.*refused the structured-output form 'json_schema'"):
                backend.generate([prompt("[ok]", 0)], SCHEMA)
    assert len(server.requests) == 1


def test_forms_none_and_grammar_requests() -> None:
    with FakeLLMServer(validate="llama_cpp_python") as server:
        with make_backend(config([server], response_format="none")) as backend:
            gen = backend.generate([prompt("[ok]", 0)], SCHEMA)
        assert gen.texts == ['{"stance":"favor"}']
        assert _form_of(server.requests[-1]) == "none"
        try:
            from llama_cpp.llama_grammar import json_schema_to_gbnf  # noqa: F401
        except (ImportError, OSError):
            with pytest.raises(ImportError, match="llama-cpp-python"):
                make_backend(config([server], response_format="grammar"))
            return
        with make_backend(config([server], response_format="grammar")) as backend:
            backend.generate([prompt("[ok]", 0)], SCHEMA)
        sent = server.requests[-1]
        assert _form_of(sent) == "grammar" and "root ::=" in sent["grammar"]
