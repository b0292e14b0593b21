"""The OpenAI-compatible backend against real local HTTP servers on 127.0.0.1 (started here,
bounded in requests and time): valid answers, 429s, 500s, slow answers, round-robin over
several base URLs, retries with backoff, then a clear error. The servers validate the
request body the way real servers do (``validate=``): llama-cpp-python's server (pydantic
model of ``response_format``: type ``text`` / ``json_object`` with an optional ``schema``;
a violation is answered with HTTP 500 and the pydantic message) and vLLM's (type ``text`` /
``json_object`` / ``json_schema`` / ``structural_tag``, ``json_schema`` needs its ``name``;
a violation is HTTP 400)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
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
from tests.llm_servers import IN_FLIGHT, FakeLLMServer, validation_error


@pytest.fixture
def servers() -> Iterator[list[FakeLLMServer]]:
    attempts: Counter[str] = Counter()
    IN_FLIGHT.update(now=0, max=0)
    with FakeLLMServer(attempts=attempts) as a, FakeLLMServer(attempts=attempts) as b:
        yield [a, b]


def config(servers: list[FakeLLMServer], **extra: Any) -> LLMConfig:
    """The request-level tests count requests: the form probe is off unless asked for (its
    own tests are under "probe")."""
    return LLMConfig.model_validate(
        {
            "backend": "openai",
            "model": "tiny",
            "base_url": [s.url for s in servers],
            "request_timeout": 0.4,
            "max_retries": 3,
            "retry_initial_wait": 0.01,
            "retry_max_wait": 0.05,
            "concurrency": 4,
            "probe_forms": False,
            **extra,
        }
    )


def prompt(tag: str, i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Classify."}, {"role": "user", "content": f"{tag} #{i}"}]


def test_valid_429_500_and_slow_answers_are_retried(servers: list[FakeLLMServer]) -> None:
    schema = {
        "type": "object",
        "properties": {"stance": {"type": "string"}},
        "required": ["stance"],
        "additionalProperties": False,
    }
    tags = ["[ok]", "[429]", "[500]", "[slow]"]
    prompts = [prompt(tags[i % 4], i) for i in range(16)]
    start = time.perf_counter()
    with make_backend(config(servers)) as backend:
        gen = backend.generate(
            prompts, schema, Sampling(temperature=0.5, max_new_tokens=16, seed=3)
        )
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
        3,
        7,
        11,
        15,
    ]


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
    cfg = LLMConfig(
        backend="openai",
        model="tiny",
        base_url=url,
        max_retries=1,
        retry_initial_wait=0.01,
        retry_max_wait=0.02,
        request_timeout=0.5,
    )
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
    # only new texts are labelled: likes write none, so nobody gets a stance observation;
    # the labeller check of round 0 scored the history posts over logprobs
    assert len(out.stance_user) == 0
    history_authors = np.unique(ri.posts.author[ri.posts.round < 0])
    assert out.stats["stance_check_scored"] == 1
    assert out.stats["stance_check_users"] == len(history_authors)
    assert np.isclose(out.stats["prompt_tokens_per_step"], 11)


# ----------------------------------------------------------------------------- request forms
SCHEMA = {
    "type": "object",
    "properties": {"stance": {"type": "string"}},
    "required": ["stance"],
    "additionalProperties": False,
}


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
            gen = backend.generate(
                [prompt("[ok]", i) for i in range(6)], SCHEMA, Sampling(max_new_tokens=16, seed=0)
            )
            assert time.perf_counter() - start < 2.0  # no retry backoff was waited
            assert backend.form == "json_object"
            assert "json_schema" in backend.rejected_forms
            assert (
                "Input should be 'text' or 'json_object'" in backend.rejected_forms["json_schema"]
            )
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
            with pytest.raises(
                LLMBackendError,
                match=r"(?s)1 attempt.*HTTP 500.*refused the structured-output form 'json_schema'",
            ):
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


# ----------------------------------------------------------------------------- probe
@pytest.mark.parametrize(
    ("kind", "form", "probes"),
    [
        (None, "json_schema", ["json_schema"]),
        ("vllm", "json_schema", ["json_schema"]),
        ("llama_cpp_python", "json_object", ["json_schema", "json_object"]),
    ],
)
def test_probe_keeps_the_first_enforced_form(
    kind: str | None, form: str, probes: list[str]
) -> None:
    with FakeLLMServer(validate=kind) as server:
        with make_backend(config([server], probe_forms=True)) as backend:
            gen = backend.generate([prompt("[ok]", 0)], SCHEMA)
            assert backend.form == form and backend.probe_results[form] == "enforced"
            assert set(backend.probe_results) == set(probes)  # one probe per form tried
        assert gen.texts == ['{"stance":"favor"}']
        probe_requests = [
            r for r in server.requests if "Say hello." in r["messages"][-1]["content"]
        ]
        assert [_form_of(r) for r in probe_requests] == probes


def test_probe_counts_a_form_answered_off_schema_as_refused() -> None:
    """transformers serve answers HTTP 200 to json_schema and json_object and ignores both:
    the probe finds it, ``auto`` warns and decodes free text; strict or an explicit form
    refuses to run."""
    with FakeLLMServer(validate="transformers_serve") as server:
        with make_backend(config([server], probe_forms=True)) as backend:
            with pytest.warns(RuntimeWarning, match="no structured-output form is enforced"):
                backend.generate([prompt("[ok]", 0)], SCHEMA)
            assert backend.form == "none"
            assert backend.probe_results["json_schema"].startswith("ignored: HTTP 200")
            assert backend.probe_results["json_object"].startswith("ignored: HTTP 200")
            assert set(backend.rejected_forms) >= {"json_schema", "json_object"}
        assert _form_of(server.requests[-1]) == "none"
        for extra in ({"strict": True}, {"response_format": "json_schema"}):
            with make_backend(config([server], probe_forms=True, **extra)) as backend:
                with pytest.raises(
                    LLMBackendError,
                    match=r"(?s)no structured-output form is enforced.*ignored: HTTP 200",
                ):
                    backend.generate([prompt("[ok]", 0)], SCHEMA)


def test_transformers_serve_refuses_unknown_fields_like_the_real_one() -> None:
    assert validation_error("transformers_serve", {"messages": [], "model": "m"}) is None
    assert validation_error("transformers_serve", {"messages": [], "response_format": {}}) is None
    status, body = validation_error("transformers_serve", {"messages": [], "top_k": 5})
    assert status == 422 and "Unexpected fields" in body["detail"]


def test_run_stops_when_constrained_answers_do_not_parse() -> None:
    """Without the probe, a server that ignores the schema is caught during the run: more
    than max_unparsed_share of the constrained answers fail to parse -> an error naming it."""
    with FakeLLMServer(validate="transformers_serve") as server:
        cfg = config([server], stance_check_users=0)
        brain = LLMBrain(cfg, encoder=TextEncoder(cfg.resolved_encoder()))
        ri = make_round_input(num_users=24, num_posts=48, feed_size=3, seed=4)
        try:
            brain.reset(ri.users, ri.posts, seed=0)
            with pytest.raises(LLMBackendError, match=r"(?s)24 of 24 answers.*ignores it"):
                brain.act(ri)
        finally:
            brain.close()


# ----------------------------------------------------------------------------- label scores
def test_stance_labels_scored_over_logprobs() -> None:
    from agent_models.llm.backends.base import ScoringUnsupported
    from agent_models.llm.stance import labeller_check, score_stances

    texts = [
        ["On the law: this is wrong and must be stopped."],
        ["On the law: proud of this outcome."],
        ["On the law: waiting for more facts."],
    ] * 3
    for kind in (None, "vllm", "llama_cpp_python"):
        with FakeLLMServer(validate=kind) as server:
            with make_backend(config([server])) as backend:
                labels = score_stances(
                    backend,
                    "the law",
                    [f"u{i}" for i in range(9)],
                    texts,
                    np.random.default_rng(0),
                    text_chars=200,
                    calibrate=False,
                )
            sent = [r for r in server.requests if r.get("logprobs")]
            assert sent and all(r["top_logprobs"] == 20 and r["max_tokens"] == 1 for r in sent)
        assert labels.method == "scored" and labels.value == [-1, 1, 0] * 3
        assert labeller_check(labels.value, [-1, 1, 0] * 3)["stance_check_agreement"] == 1.0
    with FakeLLMServer(validate="transformers_serve") as server:
        with make_backend(config([server])) as backend:
            with pytest.raises(ScoringUnsupported, match="without logprobs"):
                backend.score_labels([prompt("[ok]", 0)], ["against", "neutral", "favor"])
    assert (
        validation_error("vllm", {"messages": [], "logprobs": True, "top_logprobs": 21})[0] == 400
    )
    assert validation_error("vllm", {"messages": [], "top_logprobs": 5})[0] == 400
