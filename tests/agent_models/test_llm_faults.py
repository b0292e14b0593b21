"""The LLM path never crashes on what a server or model returns: malformed 200 responses,
missing usage, Retry-After, and a failed step retried with an identical result."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from agent_models.llm import LLMBackendError, LLMConfig, Sampling, make_backend
from tests.llm_servers import FakeLLMServer

pytest.importorskip("openai")


def _completion(content: Any = '{"stance":"favor"}', usage: Any = "default") -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    body["usage"] = (
        {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if usage == "default"
        else usage
    )
    return body


#: tag -> (status, headers, body) of every attempt; "flaky-" tags fail only the first attempt.
FAULTS: dict[str, tuple[int, dict[str, str], bytes]] = {
    "html": (200, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>"),
    "text": (200, {"Content-Type": "text/plain"}, b"upstream overloaded"),
    "badjson": (200, {"Content-Type": "application/json"}, b'{"choices": [ {"mess'),
    "emptyobj": (200, {"Content-Type": "application/json"}, b"{}"),
    "nochoices": (
        200,
        {"Content-Type": "application/json"},
        json.dumps({**_completion(), "choices": []}).encode(),
    ),
    "nullchoices": (
        200,
        {"Content-Type": "application/json"},
        json.dumps({**_completion(), "choices": None}).encode(),
    ),
    "numbercontent": (
        200,
        {"Content-Type": "application/json"},
        json.dumps(_completion(content=5)).encode(),
    ),
}
OK_FAULTS: dict[str, tuple[int, dict[str, str], bytes]] = {
    "nullusage": (
        200,
        {"Content-Type": "application/json"},
        json.dumps(_completion(usage=None)).encode(),
    ),
    "nulltokens": (
        200,
        {"Content-Type": "application/json"},
        json.dumps(_completion(usage={"prompt_tokens": None, "completion_tokens": None})).encode(),
    ),
    "nocontent": (
        200,
        {"Content-Type": "application/json"},
        json.dumps(_completion(content=None)).encode(),
    ),
}


class FaultServer:
    """``/v1/chat/completions`` answering by the tag in the last message (see FAULTS)."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                content = body["messages"][-1]["content"]
                server.attempts[content] += 1
                status, headers, data = server.respond(content, server.attempts[content])
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @staticmethod
    def respond(content: str, attempt: int) -> tuple[int, dict[str, str], bytes]:
        tag = content.split()[0]
        if tag.startswith("flaky-"):
            if attempt == 1:
                return FAULTS[tag.removeprefix("flaky-")]
            tag = "ok"
        if tag == "stuck":
            time.sleep(1.5)
        if tag == "retryafter" and attempt == 1:
            return (
                429,
                {"Content-Type": "application/json", "Retry-After": "1"},
                b'{"error": {"message": "slow down"}}',
            )
        if tag in FAULTS:
            return FAULTS[tag]
        if tag in OK_FAULTS:
            return OK_FAULTS[tag]
        return 200, {"Content-Type": "application/json"}, json.dumps(_completion()).encode()


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    srv = FaultServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _config(url: str, **extra: Any) -> LLMConfig:
    return LLMConfig.model_validate(
        {
            "backend": "openai",
            "model": "tiny",
            "base_url": url,
            "request_timeout": 5,
            "max_retries": 1,
            "retry_initial_wait": 0.01,
            "retry_max_wait": 0.02,
            **extra,
        }
    )


def _prompt(tag: str, i: int = 0) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{tag} #{i}"}]


def test_malformed_responses_are_counted_not_raised(fault_server: FaultServer) -> None:
    tags = list(FAULTS)
    with make_backend(_config(fault_server.url, fail_on_backend_error=False)) as backend:
        gen = backend.generate(
            [_prompt(t) for t in tags] + [_prompt("ok")], sampling=Sampling(seed=1)
        )
        failures = dict(backend.failures)
    assert gen.finish_reasons == ["error"] * len(tags) + ["stop"]
    assert gen.texts[-1] == '{"stance":"favor"}' and gen.texts[:-1] == [""] * len(tags)
    for tag, error in zip(tags, gen.errors, strict=False):
        assert "after 2 attempt(s)" in error, (tag, error)  # a malformed 200 is retried
    assert sum(failures.values()) == len(tags)
    assert {"malformed_response", "empty_choices"} <= set(failures)
    with make_backend(_config(fault_server.url)) as backend:
        for tag in tags:
            with pytest.raises(LLMBackendError, match="MalformedResponse"):
                backend.generate([_prompt(tag, 1)])


def test_missing_usage_and_content_are_zero_and_empty(fault_server: FaultServer) -> None:
    with make_backend(_config(fault_server.url)) as backend:
        gen = backend.generate([_prompt(t) for t in OK_FAULTS])
    assert gen.finish_reasons == ["stop"] * 3
    assert gen.prompt_tokens.tolist() == [0, 0, 7] and gen.completion_tokens.tolist() == [0, 0, 3]
    assert gen.texts == ['{"stance":"favor"}', '{"stance":"favor"}', ""]


def test_a_malformed_first_answer_is_retried(fault_server: FaultServer) -> None:
    with make_backend(_config(fault_server.url)) as backend:
        gen = backend.generate([_prompt(f"flaky-{t}", 2) for t in FAULTS])
    assert gen.texts == ['{"stance":"favor"}'] * len(FAULTS)


def test_retry_after_is_honoured(fault_server: FaultServer) -> None:
    with make_backend(_config(fault_server.url)) as backend:
        start = time.perf_counter()
        gen = backend.generate([_prompt("retryafter", 3)])
        elapsed = time.perf_counter() - start
    assert gen.finish_reasons == ["stop"] and fault_server.attempts["retryafter #3"] == 2
    assert elapsed >= 1.0  # the backoff alone would wait ~0.02 s


class _FailOnce(FakeLLMServer):
    """Answers like FakeLLMServer, but fails one request with a 500 while ``armed``."""

    armed = False

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        with self.lock:
            if self.armed:
                self.armed = False
                return 500, {"error": {"message": "injected failure"}}, 0.0
        return super().respond(path, body)


def test_a_failed_step_retried_equals_an_uninterrupted_run() -> None:
    small = {
        "users": "llm",
        "num_users": 12,
        "rounds": 2,
        "budget": 1,
        "candidate_users": 2,
        "candidates": {"interest": 1, "opposite": 1, "fresh": 1},
    }
    actions = [np.array([0, 3]), np.array([1, 4])]

    def episode(server: _FailOnce, fail_first_step: bool) -> tuple[list[Any], list[str]]:
        llm = {
            "backend": "openai",
            "model": "tiny",
            "base_url": server.url,
            "max_retries": 0,
            "request_timeout": 10,
            "concurrency": 2,
        }
        env = gym.make("PolicySim-Rec-v0", **small, llm=llm)
        env.reset(seed=5)
        out = []
        for t, action in enumerate(actions):
            if fail_first_step and t == 0:
                server.armed = True
                with pytest.raises(LLMBackendError, match="HTTP 500"):
                    env.step(action)
            obs, reward, _, _, info = env.step(action)
            out.append((obs["arms"], reward, info["metrics"]))
        env.close()
        systems = sorted(
            {
                r["messages"][0]["content"]
                for r in server.requests
                if r["messages"][-1]["content"].startswith("You are @user_")
            }
        )
        return out, systems

    with _FailOnce() as a:
        full, full_systems = episode(a, False)
    with _FailOnce() as b:
        retried, retried_systems = episode(b, True)
    assert retried_systems == full_systems  # the round's news is in the prompt once
    for (obs1, r1, m1), (obs2, r2, m2) in zip(full, retried, strict=True):
        np.testing.assert_array_equal(obs1, obs2)
        assert r1 == r2
        assert {k: v for k, v in m1.items() if "seconds" not in k} == {
            k: v for k, v in m2.items() if "seconds" not in k
        }


def test_a_stuck_server_fails_by_the_deadline(fault_server: FaultServer) -> None:
    config = _config(fault_server.url, request_timeout=0.3, max_retries=50, request_deadline=1.0)
    with make_backend(config) as backend:
        start = time.perf_counter()
        with pytest.raises(LLMBackendError, match="APITimeoutError"):
            backend.generate([_prompt("stuck", 4)])
        elapsed = time.perf_counter() - start
    assert elapsed < 3.0  # not 51 attempts × 0.3 s


class _GarbageServer(FaultServer):
    """Answers every request with a 200 HTML page."""

    @staticmethod
    def respond(content: str, attempt: int) -> tuple[int, dict[str, str], bytes]:
        return FAULTS["html"]


def test_an_env_step_against_a_garbage_server_counts_instead_of_crashing() -> None:
    server = _GarbageServer()
    server.thread.start()
    try:
        llm = {
            "backend": "openai",
            "model": "tiny",
            "base_url": server.url,
            "max_retries": 0,
            "request_timeout": 5,
            "fail_on_backend_error": False,
        }
        env = gym.make(
            "PolicySim-Rec-v0",
            users="llm",
            num_users=10,
            rounds=1,
            budget=1,
            candidate_users=2,
            candidates={"interest": 1, "opposite": 1, "fresh": 1},
            llm=llm,
        )
        env.reset(seed=0)
        _, _, _, truncated, info = env.step(np.array([0, 1]))
        env.close()
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    active = info["metrics"]["active_users"]
    assert truncated and active > 0
    assert info["metrics"]["invalid_backend_error"] == active
    assert info["metrics"]["reactions"] == 0 and info["metrics"]["posts"] == 0
