"""``policysim eval micro`` (a typer sub-app, :data:`eval_app`): the micro-level metrics of
Table 2 for one model (optionally with a LoRA adapter) on held-out SFT records, printed as
a table (with earlier results given by ``--compare``) and written as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

eval_app = typer.Typer(
    help="Evaluate LLM user agents against real user behaviour.",
    no_args_is_help=True,
    add_completion=False,
)


def _spec(
    backend: str, model: str, lora: Path | None, base_url: list[str] | None, device: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {"backend": backend, "model": model}
    if backend != "openai":
        spec["device"] = device
    if lora is not None:
        spec["lora_path"] = str(lora)
    if base_url:
        spec["base_url"] = base_url
    return spec


@eval_app.callback()
def _group() -> None:
    """Evaluate LLM user agents: `micro` (Table 2 metrics)."""


@eval_app.command("micro")
def micro(
    data: Annotated[
        Path, typer.Option(help="Held-out SFT records (JSON lines, e.g. sft_test.jsonl).")
    ],
    model: Annotated[
        str, typer.Option(help="Evaluated model: a directory (hf, vllm) or a served name (openai).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Write the result JSON here.")] = Path(
        "micro_eval.json"
    ),
    lora: Annotated[Path | None, typer.Option(help="LoRA adapter applied to --model.")] = None,
    backend: Annotated[str, typer.Option(help="'hf', 'vllm' or 'openai'.")] = "hf",
    base_url: Annotated[list[str] | None, typer.Option(help="OpenAI-compatible URL(s).")] = None,
    label: Annotated[
        str | None, typer.Option(help="Row name in the table (default: adapter or model name).")
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option(help="Judge model (none: skip the LLM-judge metrics).")
    ] = None,
    judge_backend: Annotated[str, typer.Option(help="Backend of the judge.")] = "hf",
    judge_base_url: Annotated[
        list[str] | None, typer.Option(help="OpenAI-compatible URL(s) of the judge.")
    ] = None,
    bertscore_model: Annotated[
        str | None, typer.Option(help="Local model for BERTScore (default: shipped MiniLM).")
    ] = None,
    bertscore_layers: Annotated[
        int | None, typer.Option(help="Hidden layer for BERTScore (default: last).")
    ] = None,
    encoder: Annotated[
        str, typer.Option(help="Sentence encoder for BertSim: 'auto', 'hash' or a path.")
    ] = "auto",
    candidates: Annotated[int, typer.Option(help="Posts per self-consistency question.")] = 4,
    temperature: Annotated[
        float, typer.Option(help="Decoding temperature of the evaluated model.")
    ] = 0.0,
    max_new_tokens: Annotated[int, typer.Option(help="Answer token budget.")] = 256,
    max_examples: Annotated[
        int | None, typer.Option(help="Evaluate only the first N records.")
    ] = None,
    device: Annotated[
        str, typer.Option(help="Device of hf backends ('auto', 'cpu', 'cuda').")
    ] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of decoding and of the distractor draw.")] = 0,
    compare: Annotated[
        list[Path] | None, typer.Option(help="Earlier result JSONs to show in the same table.")
    ] = None,
) -> None:
    """BERTScore F1, BertSim, behaviour accuracy, self-consistency and the LLM judge."""
    from agent_models.evaluation.micro import (
        MicroEvalConfig,
        MicroResult,
        evaluate_micro,
        print_micro_table,
    )
    from agent_models.training.data import load_examples

    examples = load_examples(data)
    if max_examples is not None:
        examples = examples[:max_examples]
    config = MicroEvalConfig(
        bertscore_model=bertscore_model,
        bertscore_layers=bertscore_layers,
        encoder=encoder,
        candidates=candidates,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    judge = None
    if judge_model is not None:
        judge = _spec(judge_backend, judge_model, None, judge_base_url, device)
    name = label or (lora.name if lora is not None else Path(model).name)
    result = evaluate_micro(
        examples,
        _spec(backend, model, lora, base_url, device),
        judge_backend=judge,
        config=config,
        label=name,
    )
    result.save(out)
    earlier = [MicroResult.load(p) for p in compare or []]
    print_micro_table([*earlier, result])
    typer.echo(f"wrote {out}")
