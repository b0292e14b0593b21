"""LLM user agents in the PolicySim recommendation env.

Every active user is an LLM agent: it reads its feed (with post ids), its retrieved
memories and the news, and answers with a JSON list of actions decoded under a JSON schema.
Stance is classified by the LLM each round and smoothed by the env; toxicity comes from a
local classifier; memories are summarised, embedded and consolidated.

On CPU, with any local causal LM directory (default: a tiny random model built on the fly,
which exercises the whole pipeline in a minute but writes gibberish)::

    python examples/llm_agents.py
    python examples/llm_agents.py --model /models/Qwen2.5-0.5B-Instruct --users 20 --rounds 3

On a GPU with vLLM (``pip install 'policysim[vllm]'``), in-process, prefix caching and
structured outputs on::

    python examples/llm_agents.py --backend vllm --model /models/Qwen2.5-3B-Instruct \\
        --users 1000 --rounds 10 [--lora /adapters/sft-dpo] [--tensor-parallel 2]

Against OpenAI-compatible servers (``vllm serve``, llama.cpp, a cluster; round-robin over
the URLs, retries with backoff)::

    python examples/llm_agents.py --backend openai --model Qwen/Qwen2.5-3B-Instruct \\
        --base-url http://gpu1:8000/v1 http://gpu2:8000/v1 --users 1000
"""

from __future__ import annotations

import argparse
import tempfile
import textwrap
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="local causal LM dir (default: tiny random model)"
    )
    parser.add_argument("--backend", choices=["hf", "vllm", "openai"], default="hf")
    parser.add_argument("--base-url", nargs="+", default=None, help="OpenAI-compatible URL(s)")
    parser.add_argument("--lora", default=None, help="LoRA adapter dir (hf, vllm)")
    parser.add_argument("--device", default="auto", help="hf: auto, cpu, cuda, cuda:1, mps")
    parser.add_argument("--tensor-parallel", type=int, default=1, help="vllm tensor_parallel_size")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import gymnasium as gym

    import socialenv  # noqa: F401  (registers the env ids)
    from agent_models.testing import build_tiny_lm

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        llm: dict[str, Any] = {"backend": args.backend}
        if model is None:
            model = str(build_tiny_lm(Path(tmp) / "tiny-lm", seed=args.seed))
            # the random model fills every string to its limit: keep answers short
            llm.update(
                max_new_tokens=320,
                max_text_chars=60,
                max_actions=3,
                cpu_threads=1,
                memory={"summary_chars": 60, "memory_chars": 80},
            )
            print(f"built a tiny random model in {model} (use --model for a real one)")
        llm["model"] = model
        if args.base_url:
            llm["base_url"] = args.base_url
        if args.lora:
            llm["lora_path"] = args.lora
        if args.backend == "hf":
            llm["device"] = args.device
        if args.backend == "vllm":
            llm["tensor_parallel_size"] = args.tensor_parallel

        env = gym.make(
            "PolicySim-Rec-v0",
            users="llm",
            llm=llm,
            num_users=args.users,
            rounds=args.rounds,
            render_mode="ansi",
        )
        brain = env.unwrapped.brain
        obs, info = env.reset(seed=args.seed)
        num_arms, context_dim = env.observation_space["arms"].shape
        print(
            f"{args.users} LLM users, {num_arms} arms, context dim {context_dim}; backend {args.backend}"
        )
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            done = terminated or truncated
            s = brain.last_stats
            print(env.render())
            invalid = {
                k[len("invalid_") :]: int(v)
                for k, v in info["metrics"].items()
                if k.startswith("invalid_")
            }
            print(
                f"  reward {reward:.3f}; {int(s['agent_steps'])} agents, "
                f"{int(s['valid_answers'])} valid answers, invalid {invalid or 'none'}; "
                f"{s['prompt_tokens_per_step']:.0f} prompt / {s['completion_tokens_per_step']:.0f} "
                f"completion tokens per agent; {int(s['llm_calls'])} LLM calls in "
                f"{s['round_seconds']:.1f} s ({s['outside_llm_share']:.0%} outside the LLM)"
            )
        posts = env.unwrapped.sim.posts
        written = [i for i in range(len(posts) - 1, -1, -1) if posts.round[i] >= 0][:3]
        for i in written:
            text = posts.text[i] if posts.text is not None else ""
            print(f"  post {i} by user {posts.author[i]}: " + textwrap.shorten(text or "", 100))
        env.close()


if __name__ == "__main__":
    main()
