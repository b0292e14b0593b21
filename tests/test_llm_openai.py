"""The OpenAI-compatible backend against real local HTTP servers on 127.0.0.1 (started here,
bounded in requests and time): valid answers, 429s, 500s, slow answers, round-robin over
several base URLs, retries with backoff, then a clear error."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

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


class FakeLLMServer:
    """A tiny ``/v1/chat/completions`` server. Behaviour per prompt is keyed by a tag in the
    last message: ``[ok]`` answers at once, ``[429]`` / ``[500]`` fail the first attempt,
    ``[slow]`` sleeps past the client timeout on the first attempt, ``[dead]`` always 500s.
    Agent prompts (``You are @user_N``) get a like of the first post in their feed."""

    def __init__(self, slow_seconds: float = 1.0, attempts: Counter[str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        #: the Authorization header of each request
        self.authorizations: list[str | None] = []
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
