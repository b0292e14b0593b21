"""Same policy, different populations: surrogate users, HiSim ABMs, LLM agents.

The platform runs one policy (default LinUCB) on PolicySim-Rec-v0 while the users'
behaviour / stance dynamics come from

- ``surrogate``: the default vectorized behavioural model,
- ``bounded_confidence``, ``lorenz``, ``relative_agreement``: HiSim's opinion-dynamics
  ABMs as the stance dynamics (surrogate behaviour, ABM opinion update over the users each
  user interacted with),
- ``llm``: LLM agents (``--llm-model PATH`` to a local causal LM, or ``tiny`` for a tiny
  random model that exercises the pipeline but writes gibberish; CPU is slow, keep
  ``--users`` small).

Printed per population (mean ± 95% CI over seeds): the platform's reward, cross-stance
interactions, toxicity, the stance mean/std of the last round and HiSim's bias (mean
latent opinion) and diversity (its variance).

    python examples/population_comparison.py                            # 1,000 users, ~40 s
    python examples/population_comparison.py --users 30 --rounds 3 --seeds 0 \\
        --populations surrogate lorenz llm --llm-model tiny
    python examples/population_comparison.py --smoke
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym

import socialenv  # noqa: F401  (registers the env ids)
from baselines import make_policy, make_population, opinion_metrics, play_episode
from policysim.summary import format_mean_ci, summarize

METRICS = (
    "reward",
    "cross_interaction_ratio",
    "toxicity",
    "stance_mean",
    "stance_std",
    "bias",
    "diversity",
)


def llm_config(model: str, tmp: str) -> dict[str, Any]:
    """LLM brain settings; ``tiny`` builds a tiny random model (short answers)."""
    if model != "tiny":
        return {"backend": "hf", "model": model}
    from agent_models.testing import build_tiny_lm

    path = build_tiny_lm(Path(tmp) / "tiny-lm", seed=0)
    return {
        "backend": "hf",
        "model": str(path),
        "max_new_tokens": 320,
        "max_text_chars": 60,
        "max_actions": 3,
        "cpu_threads": 1,
        "memory": {"summary_chars": 60, "memory_chars": 80},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="compare user populations under one policy")
    parser.add_argument(
        "--populations",
        nargs="+",
        default=["surrogate", "bounded_confidence", "lorenz", "relative_agreement"],
    )
    parser.add_argument("--policy", default="linucb")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--llm-model", default=None, help="local causal LM dir, or 'tiny' (for --populations llm)"
    )
    parser.add_argument(
        "--smoke", action="store_true", default=os.environ.get("POLICYSIM_SMOKE") == "1"
    )
    args = parser.parse_args(argv)
    if args.smoke:  # tiny sizes (explicit smaller values are kept)
        args.users, args.rounds, args.seeds = (
            min(args.users, 150),
            min(args.rounds, 3),
            args.seeds[:2],
        )
    if "llm" in args.populations and args.llm_model is None:
        parser.error("--populations llm needs --llm-model PATH (or 'tiny')")

    with tempfile.TemporaryDirectory() as tmp:
        llm = llm_config(args.llm_model, tmp) if "llm" in args.populations else None
        table = {}
        for population in args.populations:
            rows = []
            for seed in args.seeds:
                # a fresh brain per run: brains keep per-episode state
                env = gym.make(
                    "PolicySim-Rec-v0",
                    num_users=args.users,
                    rounds=args.rounds,
                    users=make_population(population),
                    llm=llm,
                )
                policy = make_policy(args.policy, env, seed=seed)
                episode = play_episode(env, policy, seed * 1000, extra_metrics=opinion_metrics)
                rows += [{"seed": seed, "episode": 0, **r} for r in episode]
                env.close()
            table[population] = summarize(rows, METRICS)

    print(
        f"\npolicy {args.policy}; {args.users} users, {args.rounds} rounds, seeds {args.seeds} "
        "(mean ± 95% CI over seeds; stance, bias, diversity at the last round)"
    )
    print(f"{'population':>20} " + " ".join(f"{m[:14]:>17}" for m in METRICS))
    for population, s in table.items():
        print(f"{population:>20} " + " ".join(f"{format_mean_ci(s[m], 3):>16}" for m in METRICS))


if __name__ == "__main__":
    main()
