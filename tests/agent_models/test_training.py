"""Two steps of SFT (through the CLI) and of DPO (through the API) on the tiny model, on CPU;
the adapters load (peft and the hf backend) and change the model's output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agent_models.training.data import build_examples, save_records
from socialenv.scenarios.loaders import LoaderConfig, read_twibot20
from tests.support import FIXTURES


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory) -> Path:
    d = read_twibot20(FIXTURES / "twibot20" / "sample.json", config=LoaderConfig(encoder="hash"))
    s = d.scenario
    examples = build_examples(
        d.actions, s.profiles, s.topic, follow_src=s.follow_src, follow_dst=s.follow_dst
    )
    return save_records(
        [e.to_record() for e in examples[:8]], tmp_path_factory.mktemp("data") / "sft.jsonl"
    )


@pytest.fixture(scope="module")
def sft_adapter(tiny_lm_path, sft_file, tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    from policysim.train_cli import train_app

    out = tmp_path_factory.mktemp("sft") / "adapter"
    result = CliRunner().invoke(
        train_app,
        [
            "sft",
            "--model",
            str(tiny_lm_path),
            "--data",
            str(sft_file),
            "--output",
            str(out),
            "--max-steps",
            "2",
            "--batch-size",
            "1",
            "--per-device-batch-size",
            "1",
            "--learning-rate",
            "0.01",
            "--warmup-ratio",
            "0",
            "--lora-rank",
            "8",
            "--max-length",
            "2048",
            "--device",
            "cpu",
            "--logging-steps",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["steps"] == 2 and report["adapter"] == str(out)
    return out


def _logits(model, tokenizer, text: str):
    import torch

    ids = tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        return model(**ids).logits


def test_sft_adapter_files_and_output_change(tiny_lm_path, sft_adapter):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = json.loads((sft_adapter / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(tiny_lm_path)
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16 and cfg["peft_type"] == "LORA"
    assert (sft_adapter / "adapter_model.safetensors").exists()
    info = json.loads((sft_adapter / "policysim_training.json").read_text())
    assert info["kind"] == "sft" and info["batch_size"] == 1
    tok = AutoTokenizer.from_pretrained(tiny_lm_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_lm_path)
    before = _logits(base, tok, '{"actions":[{"type":"post","text":"vote today"}]}')
    tuned = PeftModel.from_pretrained(base, str(sft_adapter))
    after = _logits(tuned, tok, '{"actions":[{"type":"post","text":"vote today"}]}')
    assert not torch.allclose(before, after, atol=1e-5)


def test_dpo_from_sft_adapter(tiny_lm_path, sft_adapter, sft_file, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_models.llm.backends import make_backend
    from agent_models.llm.backends.base import Sampling
    from agent_models.training.data import load_records
    from agent_models.training.train import TrainConfig, train_dpo

    # short prompts (the persona part of real instructions) keep the CPU steps fast
    records = [
        {
            "prompt": [{"role": "user", "content": r["prompt"][1]["content"][:400]}],
            "chosen": r["completion"],
            "rejected": [{"role": "assistant", "content": '{"actions":[]}'}],
        }
        for r in load_records(sft_file)[:4]
    ]
    out = tmp_path / "dpo"
    result = train_dpo(
        tiny_lm_path,
        records,
        out,
        TrainConfig(
            max_steps=2,
            batch_size=1,
            per_device_batch_size=1,
            learning_rate=0.01,
            warmup_ratio=0,
            lora_rank=8,
            max_length=2048,
            device="cpu",
            logging_steps=1,
            beta=0.1,
        ),
        sft_adapter=sft_adapter,
    )
    assert result.steps == 2 and result.config["sft_adapter"] == str(sft_adapter)
    steps = [h for h in result.log_history if "loss" in h]
    assert len(steps) == 2
    # The reference policy is the SFT adapter (the paper's setup; trl >= 0.29 copies the
    # starting adapter as the reference): at the first step policy == reference, so the
    # implicit rewards are exactly 0 and the loss is exactly log 2. With the base model as
    # reference (trl < 0.29) the rewards would be beta * (log p_SFT - log p_base) != 0.
    assert steps[0]["rewards/chosen"] == 0.0 and steps[0]["rewards/rejected"] == 0.0
    assert steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert steps[1]["rewards/margins"] > 0  # and one step of DPO moves them apart
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(tiny_lm_path)
    assert not (out / "ref").exists()  # only the trained adapter is saved

    tok = AutoTokenizer.from_pretrained(tiny_lm_path)
    text = '{"actions":[{"type":"like","post_id":3}]}'
    sft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_lm_path), str(sft_adapter)
    )
    dpo_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_lm_path), str(out)
    )
    assert not torch.allclose(
        _logits(sft_model, tok, text), _logits(dpo_model, tok, text), atol=1e-5
    )

    # the hf backend of the agents loads the adapter by path and generates with it
    backend = make_backend(
        {"backend": "hf", "model": str(tiny_lm_path), "lora_path": str(out), "device": "cpu"}
    )
    gen = backend.generate(
        [records[0]["prompt"]],
        {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": False,
        },
        Sampling(temperature=0.0, max_new_tokens=8),
    )
    assert json.loads(gen.texts[0]) in ({"ok": True}, {"ok": False})


def test_train_config_validation(tmp_path):
    from typer.testing import CliRunner

    from agent_models.training.train import TrainConfig
    from policysim.train_cli import train_app

    with pytest.raises(ValueError, match="TrainConfig.beta"):
        TrainConfig(beta=0)
    defaults = TrainConfig()
    assert (defaults.lora_rank, defaults.batch_size, defaults.epochs, defaults.beta) == (
        64,
        256,
        10.0,
        0.1,
    )
    result = CliRunner().invoke(
        train_app,
        ["sft", "--model", "m", "--data", "d", "--output", str(tmp_path), "--lora-rank", "0"],
    )
    assert result.exit_code != 0 and "lora_rank" in result.output
