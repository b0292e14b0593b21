"""LoRA SFT and DPO of the user-agent model with trl + peft (Eq. 5–6 of the paper).

:func:`train_sft` fine-tunes a LoRA adapter on SFT records (conversational
prompt-completion; the loss covers the completion only). :func:`train_dpo` continues from an
SFT adapter with DPO: the adapter being trained starts as the SFT adapter and the reference
policy is a frozen copy of it (trl adds a "ref" adapter), i.e. the SFT model is the
reference, as in the paper; without an SFT adapter a fresh LoRA is trained against the base
model. Both write a peft adapter directory (``adapter_config.json`` +
``adapter_model.safetensors``, plus the tokenizer) that the hf backend
(``LLMConfig.lora_path``) and vLLM (``LoRARequest``) load by path; its
``base_model_name_or_path`` is the base model path.

Defaults (:class:`TrainConfig`) follow the paper where it gives a number: LoRA rank 64,
batch size 256 (reached by gradient accumulation over micro-batches), up to 10 epochs, DPO
β = 0.1. The others are ours: LoRA α = 2·rank, dropout 0.05, all linear layers; learning
rate 1e-4 (SFT) / 5e-6 (DPO), cosine schedule, 3% warm-up, max length 4096 tokens.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from policysim_infra.extras import require
from policysim_infra.redaction import to_json
from policysim_infra.validation import check

#: Fields of a record kept for the trainers (everything else, e.g. ``meta``, is dropped).
SFT_FIELDS = ("prompt", "completion")
DPO_FIELDS = ("prompt", "chosen", "rejected")


@dataclass
class TrainConfig:
    """Hyper-parameters of SFT and DPO; every field is overridable (CLI flags mirror them).

    Attributes:
        lora_rank: LoRA rank r (paper: 64).
        lora_alpha: LoRA α; None = 2·r.
        lora_dropout: dropout on the LoRA input.
        target_modules: modules to adapt; "all-linear" = every linear layer but the head.
        batch_size: effective batch size (paper: 256) = per_device_batch_size ×
            gradient-accumulation steps × processes (``WORLD_SIZE``); the accumulation is
            derived from it (capped at the dataset size: one optimizer step per epoch).
        per_device_batch_size: micro-batch per forward pass.
        epochs: passes over the data (paper: up to 10).
        max_steps: stop after this many optimizer steps (-1 = run all epochs).
        learning_rate: None = 1e-4 for SFT, 5e-6 for DPO.
        lr_scheduler: transformers scheduler name. warmup_ratio: warm-up share of steps.
        weight_decay: AdamW weight decay.
        max_length: longest prompt + response in tokens (longer ones are truncated).
        beta: DPO temperature β (paper: 0.1).
        loss_type: DPO loss ("sigmoid" is the DPO paper's).
        gradient_checkpointing: trade compute for memory.
        device: "auto" (GPU if available), "cpu" or "cuda".
        bf16: None = bfloat16 on GPUs that support it, float32 on CPU.
        logging_steps, save_strategy: passed to the trainer (checkpoints off by default:
            the adapter is written at the end).
        seed: seeds data order and LoRA init.
        report_to: experiment trackers ("none", "wandb", ...).
        progress: draw the trainer's progress bar (the CLI: on a terminal, unless ``--quiet``).
        extra: further keyword arguments for ``SFTConfig`` / ``DPOConfig``.
    """

    lora_rank: int = 64
    lora_alpha: int | None = None
    lora_dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"
    batch_size: int = 256
    per_device_batch_size: int = 8
    epochs: float = 10.0
    max_steps: int = -1
    learning_rate: float | None = None
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    max_length: int = 4096
    beta: float = 0.1
    loss_type: str = "sigmoid"
    gradient_checkpointing: bool = False
    device: str = "auto"
    bf16: bool | None = None
    logging_steps: int = 10
    save_strategy: str = "no"
    seed: int = 0
    report_to: str | list[str] = "none"
    progress: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "lora_rank",
            "batch_size",
            "per_device_batch_size",
            "max_length",
            "logging_steps",
        ):
            check(
                getattr(self, name) >= 1,
                f"TrainConfig.{name}",
                "an integer >= 1",
                getattr(self, name),
            )
        check(
            self.epochs > 0 or self.max_steps > 0,
            "TrainConfig.epochs",
            "> 0 (or max_steps > 0)",
            self.epochs,
        )
        check(self.beta > 0, "TrainConfig.beta", "a number > 0", self.beta)
        check(
            0 <= self.lora_dropout < 1, "TrainConfig.lora_dropout", "in [0, 1)", self.lora_dropout
        )
        check(
            self.device in ("auto", "cpu") or self.device.startswith("cuda"),
            "TrainConfig.device",
            "'auto', 'cpu' or 'cuda[:N]'",
            self.device,
        )


@dataclass
class TrainResult:
    """Where the adapter went and how training went."""

    adapter_path: Path
    steps: int
    train_loss: float | None
    log_history: list[dict[str, Any]]
    config: dict[str, Any]


def _require_training_stack(feature: str) -> None:
    """The ``train`` extra's libraries, or an error naming ``pip install "policysim[train]"``."""
    for module in ("datasets", "transformers", "peft", "trl"):
        require(module, "train", feature)


def _device(config: TrainConfig) -> str:
    import torch

    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"TrainConfig.device={config.device!r}: CUDA is not available; use 'cpu'"
        )
    return config.device


def _records(data: str | Path | Sequence[dict[str, Any]], fields: Sequence[str]) -> Any:
    from datasets import Dataset

    from agent_models.training.data import load_records

    records = load_records(data, fields) if isinstance(data, (str, Path)) else list(data)
    if not records:
        raise ValueError("training data is empty")
    for i, r in enumerate(records):
        for key in fields:
            if key not in r:
                raise ValueError(
                    f"training record {i}: missing field {key!r} (need {list(fields)})"
                )
    return Dataset.from_list([{k: r[k] for k in fields} for r in records])


def _load(model_path: str | Path, device: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.float32
    if device.startswith("cuda"):
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype)
    return model.to(device), tokenizer


def _lora(config: TrainConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha if config.lora_alpha is not None else 2 * config.lora_rank,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


def _common_args(
    config: TrainConfig, output_dir: Path, device: str, n: int, lr: float
) -> dict[str, Any]:
    import torch

    world = max(1, int(os.environ.get("WORLD_SIZE", "1")))  # processes under accelerate/torchrun
    per_step = config.per_device_batch_size * world
    accumulation = max(1, math.ceil(min(config.batch_size, n) / per_step))
    bf16 = config.bf16
    if bf16 is None:
        bf16 = device.startswith("cuda") and torch.cuda.is_bf16_supported()
    if config.gradient_checkpointing:
        extra = {"gradient_checkpointing": True, **config.extra}
    else:
        extra = dict(config.extra)
    return dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.per_device_batch_size,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        learning_rate=lr,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_ratio,  # transformers >= 5: a float < 1 is a share of the steps
        weight_decay=config.weight_decay,
        max_length=config.max_length,
        bf16=bool(bf16),
        use_cpu=device == "cpu",
        logging_steps=config.logging_steps,
        save_strategy=config.save_strategy,
        seed=config.seed,
        data_seed=config.seed,
        report_to=config.report_to,
        disable_tqdm=not config.progress,
        **extra,
    )


def _finish(
    trainer: Any, tokenizer: Any, output_dir: Path, base: str, config: TrainConfig, kind: str
) -> TrainResult:
    output = trainer.train()
    model = trainer.model
    output_dir.mkdir(parents=True, exist_ok=True)
    adapters = list(getattr(model, "peft_config", {}) or {})
    selected = ["default"] if "default" in adapters else None
    model.save_pretrained(str(output_dir), selected_adapters=selected)
    tokenizer.save_pretrained(str(output_dir))
    cfg_path = output_dir / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = base  # the backends resolve the base model from here
    cfg_path.write_text(json.dumps(cfg, indent=2))
    info = {"kind": kind, "base_model": base, **asdict(config)}
    (output_dir / "policysim_training.json").write_text(
        to_json({**info, "log_history": trainer.state.log_history}, indent=2)
    )
    return TrainResult(
        adapter_path=output_dir,
        steps=int(trainer.state.global_step),
        train_loss=getattr(output, "training_loss", None),
        log_history=list(trainer.state.log_history),
        config=info,
    )


def train_sft(
    model_path: str | Path,
    data: str | Path | Sequence[dict[str, Any]],
    output_dir: str | Path,
    config: TrainConfig | None = None,
) -> TrainResult:
    """LoRA SFT of ``model_path`` on ``data``; writes the adapter to ``output_dir``.

    Args:
        model_path: local base model directory (transformers format, with a chat template).
        data: SFT records (a JSON-lines path or a list) with ``prompt`` / ``completion``
            (:meth:`agent_models.training.data.Example.to_record`).
        output_dir: adapter directory (created).
        config: hyper-parameters (:class:`TrainConfig`).
    """
    _require_training_stack("train_sft")
    from trl import SFTConfig, SFTTrainer

    config = config or TrainConfig()
    device = _device(config)
    dataset = _records(data, SFT_FIELDS)
    model, tokenizer = _load(model_path, device)
    output_dir = Path(output_dir)
    args = SFTConfig(
        **_common_args(config, output_dir, device, len(dataset), config.learning_rate or 1e-4)
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=_lora(config),
    )
    return _finish(trainer, tokenizer, output_dir, str(model_path), config, "sft")


def train_dpo(
    model_path: str | Path,
    data: str | Path | Sequence[dict[str, Any]],
    output_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    sft_adapter: str | Path | None = None,
) -> TrainResult:
    """DPO of ``model_path`` (+ ``sft_adapter``) on preference ``data``; writes the adapter.

    Args:
        model_path: local base model directory.
        data: DPO records (JSON-lines path or list) with ``prompt`` / ``chosen`` /
            ``rejected`` (:func:`agent_models.training.data.build_dpo_records`).
        output_dir: adapter directory (created). The adapter includes the SFT update, so it
            is applied to the base model alone.
        config: hyper-parameters; ``beta`` is the DPO temperature.
        sft_adapter: the SFT adapter to start from and to use as the reference policy;
            None trains a fresh LoRA against the base model.
    """
    _require_training_stack("train_dpo")
    from trl import DPOConfig, DPOTrainer

    config = config or TrainConfig()
    device = _device(config)
    dataset = _records(data, DPO_FIELDS)
    model, tokenizer = _load(model_path, device)
    peft_config = None
    if sft_adapter is not None:
        from peft import PeftModel

        if not (Path(sft_adapter) / "adapter_config.json").exists():
            raise FileNotFoundError(f"sft_adapter: {sft_adapter} has no adapter_config.json")
        model = PeftModel.from_pretrained(model, str(sft_adapter), is_trainable=True)
    else:
        peft_config = _lora(config)
    output_dir = Path(output_dir)
    common = _common_args(config, output_dir, device, len(dataset), config.learning_rate or 5e-6)
    args = DPOConfig(beta=config.beta, loss_type=[config.loss_type], **common)
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    result = _finish(trainer, tokenizer, output_dir, str(model_path), config, "dpo")
    if sft_adapter is not None:
        result.config["sft_adapter"] = str(sft_adapter)
    return result


def with_overrides(config: TrainConfig, **overrides: Any) -> TrainConfig:
    """``config`` with the non-None ``overrides`` applied (used by the CLI)."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
