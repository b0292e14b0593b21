"""SFT → DPO of user agents on real data, evaluated, then run in the sandbox — end to end on CPU.

    python examples/sft_dpo.py                      # tiny random model, fixture TwiBot-20 data
    python examples/sft_dpo.py --dataset weibo      # the Weibo rumour fixture
    python examples/sft_dpo.py --model /models/Qwen2.5-0.5B-Instruct --data /data/TwiBot-20 \\
        --sft-steps -1 --dpo-steps -1 --lora-rank 64 --batch-size 256   # a real run (GPU advised)

Steps:
1. load a dataset into a :class:`~socialenv.scenarios.scenario.Scenario` plus observed actions
   (:mod:`socialenv.scenarios.loaders`; by default the small TwiBot-20 fixture of the test suite);
2. build SFT examples in the agents' chat format and split them into train / test;
3. LoRA SFT (trl), then DPO pairs (rejected answers sampled from the base model through the
   hf backend) and DPO from the SFT adapter;
4. micro-level evaluation of base, SFT and DPO models (Table 2 metrics; the base model is the
   judge here — use a strong instruction model as judge in real runs);
5. 3 rounds of ``PolicySim-Rec-v0`` with LLM users running the DPO adapter.

Without ``--model`` a tiny random model is built (:func:`agent_models.testing.build_tiny_lm`):
the numbers are then meaningless, the point is that every stage runs. Defaults keep the run
to a few minutes on a laptop CPU (2 optimizer steps per stage, LoRA rank 8).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = {
    "twibot20": ROOT / "tests" / "fixtures" / "twibot20" / "sample.json",
    "weibo": ROOT / "tests" / "fixtures" / "weibo",
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", choices=sorted(FIXTURES), default="twibot20")
    parser.add_argument("--data", type=Path, help="dataset path (default: the test fixture)")
    parser.add_argument(
        "--model", type=Path, help="base model directory (default: build a tiny one)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("runs/sft_dpo"))
    parser.add_argument("--sft-steps", type=int, default=2, help="-1 = full epochs")
    parser.add_argument("--dpo-steps", type=int, default=2, help="-1 = full epochs")
    parser.add_argument("--epochs", type=float, default=10.0)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--dpo-samples", type=int, default=2, help="base-model samples per observation"
    )
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--eval-examples", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--encoder", default="hash", help="'auto' (MiniLM), 'hash' or a path")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import gymnasium as gym

    import socialenv  # noqa: F401  (registers the env ids)
    from agent_models.evaluation import MicroEvalConfig, evaluate_micro, print_micro_table
    from agent_models.llm.backends import make_backend
    from agent_models.testing import build_tiny_lm
    from agent_models.training.data import (
        DPOSamplingConfig,
        ExampleConfig,
        build_dpo_records,
        build_examples,
        save_records,
    )
    from agent_models.training.train import TrainConfig, train_dpo, train_sft
    from socialenv.scenarios.loaders import LoaderConfig, read_twibot20, read_weibo

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def stage(name: str) -> None:
        print(f"\n== {name}  (t = {time.perf_counter() - started:.0f}s)", flush=True)

    stage("1. load the dataset")
    model = args.model or build_tiny_lm(work / "tiny_lm", seed=args.seed)
    path = args.data or FIXTURES[args.dataset]
    config = LoaderConfig(encoder=args.encoder, seed=args.seed)
    loaded = (
        read_twibot20(path, config=config)
        if args.dataset == "twibot20"
        else read_weibo(path, config=config)
    )
    scenario = loaded.scenario
    print(
        f"{scenario.name}: {scenario.num_users} users, {len(scenario.follow_src)} follow edges, "
        f"{len(scenario.history_author)} history posts, {len(loaded.actions)} observed actions"
    )
    for i in range(min(3, scenario.num_users)):
        print(f"  @{scenario.profiles.name(i)}: {scenario.profiles.describe(i)}")

    stage("2. SFT / test examples")
    ex_config = ExampleConfig(seed=args.seed)
    examples = build_examples(
        loaded.actions,
        scenario.profiles,
        scenario.topic,
        follow_src=scenario.follow_src,
        follow_dst=scenario.follow_dst,
        config=ex_config,
    )
    order = np.random.default_rng(args.seed).permutation(len(examples))
    n_test = max(args.eval_examples, len(examples) // 5)
    test = [examples[i] for i in order[:n_test]]
    train = [examples[i] for i in order[n_test:]]
    save_records([e.to_record() for e in train], work / "sft_train.jsonl")
    save_records([e.to_record() for e in test], work / "sft_test.jsonl")
    print(f"{len(train)} train / {len(test)} test examples; one answer: {train[0].response}")

    train_config = TrainConfig(
        lora_rank=args.lora_rank,
        batch_size=args.batch_size,
        per_device_batch_size=min(args.batch_size, 2),
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        warmup_ratio=0.0,
        device=args.device,
        logging_steps=1,
        seed=args.seed,
    )

    stage("3a. SFT")
    sft = train_sft(
        model,
        [e.to_record() for e in train],
        work / "sft_adapter",
        TrainConfig(**{**train_config.__dict__, "max_steps": args.sft_steps}),
    )
    print(f"SFT: {sft.steps} steps, loss {sft.train_loss:.4f} -> {sft.adapter_path}")

    stage("3b. DPO pairs from base-model samples")
    base = make_backend({"backend": "hf", "model": str(model), "device": args.device})
    pairs, stats = build_dpo_records(
        train,
        base,
        encoder=args.encoder,
        config=ex_config,
        sampling=DPOSamplingConfig(
            num_samples=args.dpo_samples, max_new_tokens=args.max_new_tokens, seed=args.seed
        ),
    )
    save_records(pairs, work / "dpo_pairs.jsonl")
    print(f"DPO pairs: {stats}")

    stage("3c. DPO from the SFT adapter (the SFT model is the reference)")
    dpo = train_dpo(
        model,
        pairs,
        work / "dpo_adapter",
        TrainConfig(**{**train_config.__dict__, "max_steps": args.dpo_steps}),
        sft_adapter=sft.adapter_path,
    )
    print(f"DPO: {dpo.steps} steps, loss {dpo.train_loss:.4f} -> {dpo.adapter_path}")

    stage("4. micro-level evaluation")
    eval_config = MicroEvalConfig(
        encoder=args.encoder,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        example=ex_config,
        device=args.device,
        candidates=3,
    )
    held_out = test[: args.eval_examples]
    results = [evaluate_micro(held_out, base, judge_backend=base, config=eval_config, label="base")]
    for name, adapter in (("SFT", sft.adapter_path), ("SFT+DPO", dpo.adapter_path)):
        tuned = make_backend(
            {"backend": "hf", "model": str(model), "lora_path": str(adapter), "device": args.device}
        )
        results.append(
            evaluate_micro(held_out, tuned, judge_backend=base, config=eval_config, label=name)
        )
        tuned.close()
    print_micro_table(
        results, title=f"Micro-level evaluation ({len(held_out)} held-out observations)"
    )
    (work / "micro_eval.json").write_text(
        json.dumps([r.to_dict() for r in results], indent=2, ensure_ascii=False)
    )
    base.close()

    stage(f"5. {args.rounds} rounds of PolicySim-Rec-v0 with the DPO adapter")
    env = gym.make(
        "PolicySim-Rec-v0",
        users="llm",
        scenario=scenario,
        rounds=args.rounds,
        llm={
            "backend": "hf",
            "model": str(model),
            "lora_path": str(dpo.adapter_path),
            "device": args.device,
            "max_new_tokens": args.max_new_tokens * 2,
        },
    )
    obs, info = env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    base_env = env.unwrapped
    for t in range(args.rounds):
        # a random recommender: random scores, each sampled user's `budget` best allowed arms
        action = base_env.slate_from_scores(rng.random(env.observation_space["arms"].shape[0]))
        obs, reward, terminated, truncated, info = env.step(action)
        metrics = info.get("metrics", {})
        shown = {
            k: round(float(v), 4)
            for k, v in metrics.items()
            if k in ("stance_mean", "toxicity", "cross_interaction_ratio", "engagement")
            or k.startswith("invalid_")
        }
        print(f"round {t}: reward {reward:.3f}  {shown}")
        if terminated or truncated:
            break
    env.close()
    stage("done")
    print(f"adapters: {sft.adapter_path}, {dpo.adapter_path}; results in {work}")


if __name__ == "__main__":
    main()
