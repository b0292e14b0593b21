"""``policysim train sft`` and ``policysim train dpo`` (a typer sub-app, :data:`train_app`).

Typical pipeline (data from ``policysim data prepare``, see :mod:`policysim.loaders_cli`)::

    policysim data prepare twibot20 /data/TwiBot-20 --out run/data
    policysim train sft --model /models/Qwen2.5-3B-Instruct --data run/data/sft_train.jsonl \\
        --output run/sft
    policysim train dpo --model /models/Qwen2.5-3B-Instruct --data run/data/sft_train.jsonl \\
        --sft-adapter run/sft --output run/dpo     # samples rejected answers from the base model
    policysim eval micro --data run/data/sft_test.jsonl --model /models/... --lora run/dpo

Every hyper-parameter of :class:`~agent_models.training.train.TrainConfig` has a flag; the
defaults are the paper's (LoRA rank 64, batch 256, 10 epochs, β = 0.1).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

train_app = typer.Typer(
    help="Train LoRA adapters for the LLM user agents: SFT, then DPO (trl + peft).",
    no_args_is_help=True,
    add_completion=False,
)

ModelOpt = Annotated[
    Path, typer.Option("--model", help="Base model directory (transformers format).")
]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Adapter output directory.")]


@dataclass
class TrainOptions:
    """The :class:`~agent_models.training.train.TrainConfig` flags that ``train sft`` and
    ``train dpo`` share, declared once (:func:`with_train_options` adds them to a command)."""

    lora_rank: Annotated[int, typer.Option(help="LoRA rank (paper: 64).")] = 64
    lora_alpha: Annotated[int | None, typer.Option(help="LoRA alpha (default 2 x rank).")] = None
    lora_dropout: Annotated[float, typer.Option(help="LoRA dropout.")] = 0.05
    batch_size: Annotated[
        int, typer.Option(help="Effective batch size (paper: 256), via gradient accumulation.")
    ] = 256
    per_device_batch_size: Annotated[int, typer.Option(help="Micro-batch per forward pass.")] = 8
    epochs: Annotated[float, typer.Option(help="Epochs (paper: up to 10).")] = 10.0
    max_steps: Annotated[
        int, typer.Option(help="Stop after this many optimizer steps (-1 = all epochs).")
    ] = -1
    learning_rate: Annotated[
        float | None, typer.Option(help="Learning rate (default 1e-4 SFT, 5e-6 DPO).")
    ] = None
    max_length: Annotated[int, typer.Option(help="Max tokens of prompt + response.")] = 4096
    warmup_ratio: Annotated[float, typer.Option(help="Warm-up share of the steps.")] = 0.03
    gradient_checkpointing: Annotated[bool, typer.Option(help="Gradient checkpointing.")] = False
    device: Annotated[str, typer.Option(help="'auto', 'cpu' or 'cuda[:N]'.")] = "auto"
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0
    logging_steps: Annotated[int, typer.Option(help="Log every N steps.")] = 10
    report_to: Annotated[str, typer.Option(help="Experiment tracker: 'none', 'wandb', ...")] = (
        "none"
    )
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help=("No progress bar (there is none when output is not a terminal either)."),
        ),
    ] = False


def with_train_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command(..., options: TrainOptions)`` as a typer command whose flags are its own
    followed by every :class:`TrainOptions` field."""
    hints = get_type_hints(TrainOptions, include_extras=True)
    shared = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
        )
        for f in fields(TrainOptions)
    ]
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "options"]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        options = TrainOptions(**{f.name: kwargs.pop(f.name) for f in fields(TrainOptions)})
        command(**kwargs, options=options)

    wrapper.__signature__ = signature.replace(parameters=own + shared)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in own + shared}
    return wrapper


def _config(quiet: bool = False, **kwargs: object) -> object:
    from agent_models.training.train import TrainConfig

    try:
        return TrainConfig(**kwargs, progress=not quiet and sys.stderr.isatty())  # type: ignore[arg-type]
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err


def _report(result: object) -> None:
    typer.echo(
        json.dumps(
            {
                "adapter": str(result.adapter_path),  # type: ignore[attr-defined]
                "steps": result.steps,  # type: ignore[attr-defined]
                "train_loss": result.train_loss,  # type: ignore[attr-defined]
            }
        )
    )


@train_app.command("sft")
@with_train_options
def sft(
    model: ModelOpt,
    data: Annotated[Path, typer.Option(help="SFT records (JSON lines with prompt/completion).")],
    output: OutputOpt,
    *,
    options: TrainOptions,
) -> None:
    """Supervised fine-tuning of a LoRA adapter on observed (instruction, response) pairs."""
    from agent_models.training.train import train_sft

    config = _config(**asdict(options))
    _report(train_sft(model, data, output, config))  # type: ignore[arg-type]


@train_app.command("dpo")
@with_train_options
def dpo(
    model: ModelOpt,
    data: Annotated[
        Path,
        typer.Option(
            help=(
                "DPO records (prompt/chosen/rejected) or SFT records; from SFT records the rejected "
                "answers are sampled from the base model first."
            )
        ),
    ],
    output: OutputOpt,
    sft_adapter: Annotated[
        Path | None,
        typer.Option(help="SFT adapter to start from; it is also the reference policy."),
    ] = None,
    beta: Annotated[float, typer.Option(help="DPO temperature beta (paper: 0.1).")] = 0.1,
    loss_type: Annotated[str, typer.Option(help="trl DPO loss type.")] = "sigmoid",
    num_samples: Annotated[int, typer.Option(help="Base-model samples per observation.")] = 4,
    sample_temperature: Annotated[
        float, typer.Option(help="Sampling temperature of the base model.")
    ] = 1.0,
    sample_max_new_tokens: Annotated[int, typer.Option(help="Token budget of one sample.")] = 256,
    similarity_threshold: Annotated[
        float,
        typer.Option(
            help="A same-action sample is rejected below this cosine to the observed text."
        ),
    ] = 0.5,
    sample_backend: Annotated[
        str, typer.Option(help="Backend for sampling: 'hf', 'vllm' or 'openai'.")
    ] = "hf",
    sample_model: Annotated[
        str | None,
        typer.Option(help="Model for sampling (default: --model; a served name for openai)."),
    ] = None,
    sample_base_url: Annotated[
        list[str] | None, typer.Option(help="OpenAI-compatible URL(s) for sampling.")
    ] = None,
    sample_device: Annotated[str, typer.Option(help="Device of the hf sampling backend.")] = "auto",
    encoder: Annotated[
        str, typer.Option(help="Sentence encoder for the similarity: 'auto', 'hash' or a path.")
    ] = "auto",
    pairs_out: Annotated[
        Path | None, typer.Option(help="Also write the built DPO pairs here (JSON lines).")
    ] = None,
    *,
    options: TrainOptions,
) -> None:
    """Direct preference optimization: observed answers preferred over base-model samples."""
    from agent_models.training.data import (
        DPOSamplingConfig,
        Example,
        build_dpo_records,
        load_records,
        save_records,
    )
    from agent_models.training.train import train_dpo

    config = _config(**asdict(options), beta=beta, loss_type=loss_type)
    records = load_records(data)
    if "chosen" not in records[0]:
        if "completion" not in records[0] or "meta" not in records[0]:
            raise typer.BadParameter(
                f"{data}: records need prompt/chosen/rejected (DPO) or prompt/completion/meta (SFT)"
            )
        spec = {
            "backend": sample_backend,
            "model": sample_model or str(model),
            "device": sample_device,
        }
        if sample_base_url:
            spec["base_url"] = sample_base_url
        examples = [Example.from_record(r) for r in records]
        records, stats = build_dpo_records(
            examples,
            spec,
            encoder=encoder,
            sampling=DPOSamplingConfig(
                num_samples=num_samples,
                temperature=sample_temperature,
                max_new_tokens=sample_max_new_tokens,
                similarity_threshold=similarity_threshold,
                seed=options.seed,
            ),
        )
        typer.echo(json.dumps({"dpo_pairs": stats.__dict__}))
        if not records:
            raise typer.BadParameter(
                "no DPO pair could be built (every sample matched the observed answer)"
            )
        if pairs_out is not None:
            save_records(records, pairs_out)
    _report(train_dpo(model, records, output, config, sft_adapter=sft_adapter))  # type: ignore[arg-type]
