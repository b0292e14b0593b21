"""The in-process vLLM backend (GPU only; skipped without CUDA or without vLLM installed).

The prompt, schema and parsing code it uses is the same as the transformers backend's and is
tested on CPU in ``test_llm_core.py`` / ``test_llm_hf.py``; its request building
(``engine_kwargs`` / ``sampling_kwargs``) is tested there too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM tests need a CUDA GPU"),
]


@pytest.fixture(scope="module")
def vllm_backend(tiny_lm_path: Path):
    pytest.importorskip("vllm")
    from agent_models.llm import make_backend

    backend = make_backend(
        {
            "backend": "vllm",
            "model": str(tiny_lm_path),
            "max_model_len": 4096,
            "gpu_memory_utilization": 0.3,
            "vllm_engine_kwargs": {"enforce_eager": True},
        }
    )
    yield backend
    backend.close()


def test_vllm_constrained_answers_validate(vllm_backend) -> None:
    from agent_models.llm import LLMConfig, Sampling, answer_schema, parse_answer
    from agent_models.llm.schema import FeedView, ParsedAnswer

    views = [
        FeedView(user=i, post_ids=[10 + i, 20], post_authors=[3, 4], followed=[False, True])
        for i in range(8)
    ]
    prompts = [
        [
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": f"user {v.user}"},
        ]
        for v in views
    ]
    behaviours = LLMConfig(model="m").behaviours
    schemas = [
        answer_schema(
            behaviours=behaviours,
            max_actions=3,
            max_text_chars=40,
            post_ids=v.post_ids,
            follow_ids=v.follow_candidates(),
            unfollow_ids=v.unfollow_candidates(),
        )
        for v in views
    ]
    gen = vllm_backend.generate(
        prompts, schemas, Sampling(temperature=1.0, max_new_tokens=320, seed=0)
    )
    assert set(gen.finish_reasons) == {"stop"} and (gen.prompt_tokens > 0).all()
    for text, view in zip(gen.texts, views, strict=True):
        parsed = parse_answer(text, view, max_actions=3, max_text_chars=40, behaviours=behaviours)
        assert isinstance(parsed, ParsedAnswer) or parsed in (
            "impossible_action",
            "placeholder_text",
        ), text


def test_vllm_env_round(tiny_lm_path: Path, vllm_backend) -> None:
    from agent_models.llm import LLMBrain, LLMConfig
    from agent_models.testing import make_round_input

    cfg = LLMConfig(
        backend="vllm",
        model=str(tiny_lm_path),
        max_new_tokens=320,
        max_text_chars=40,
        max_actions=3,
    )
    brain = LLMBrain(cfg, backend=vllm_backend)
    ri = make_round_input(num_users=16, num_posts=40, feed_size=6)
    brain.reset(ri.users, ri.posts, seed=0)
    out = brain.act(ri)
    out.validate(16, len(ri.posts), brain.embedding_dim)
    assert not {"malformed_json", "truncated", "schema", "unknown_post"} & set(out.invalid)


def test_vllm_loads_a_trained_adapter_with_lora_request(tiny_lm_path: Path, tmp_path: Path) -> None:
    """An adapter trained by ``train_sft`` is served by vLLM through ``LoRARequest``: the
    backend applies it to every call, and it changes the model's next-token distribution."""
    pytest.importorskip("vllm")
    pytest.importorskip("trl")
    from vllm import SamplingParams

    from agent_models.llm import Sampling, make_backend
    from agent_models.training.train import TrainConfig, train_sft

    records = [
        {
            "prompt": [{"role": "user", "content": f"user {i}: what do you do?"}],
            "completion": [{"role": "assistant", "content": '{"actions":[]}'}],
        }
        for i in range(4)
    ]
    adapter = train_sft(
        tiny_lm_path,
        records,
        tmp_path / "adapter",
        TrainConfig(
            max_steps=2,
            batch_size=1,
            per_device_batch_size=1,
            learning_rate=0.05,
            warmup_ratio=0,
            lora_rank=8,
            max_length=512,
            device="cpu",
        ),
    ).adapter_path
    backend = make_backend(
        {
            "backend": "vllm",
            "model": str(tiny_lm_path),
            "lora_path": str(adapter),
            "max_lora_rank": 8,
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.3,
            "vllm_engine_kwargs": {"enforce_eager": True},
        }
    )
    try:
        assert backend._lora is not None and backend._lora.lora_path == str(adapter)
        prompt = [[{"role": "user", "content": "user 9: what do you do?"}]]
        gen = backend.generate(prompt, None, Sampling(temperature=0, max_new_tokens=8))
        assert gen.finish_reasons[0] in ("stop", "length") and gen.completion_tokens[0] > 0
        params = SamplingParams(temperature=0, max_tokens=1, logprobs=5)
        with_adapter = backend.llm.chat(prompt, params, use_tqdm=False, lora_request=backend._lora)
        without = backend.llm.chat(prompt, params, use_tqdm=False)
        a = {t: lp.logprob for t, lp in with_adapter[0].outputs[0].logprobs[0].items()}
        b = {t: lp.logprob for t, lp in without[0].outputs[0].logprobs[0].items()}
        assert a != b
    finally:
        backend.close()
