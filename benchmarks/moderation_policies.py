"""PolicySim-Moderation-v0: no moderation, suppress-flagged heuristics and a learned bandit,
on paired seeds.

    python benchmarks/moderation_policies.py                          # 1,000 users, 10 rounds, 10 seeds
    python benchmarks/moderation_policies.py --seeds 3 --episodes 2 --out runs/bench
    python benchmarks/moderation_policies.py --first-seed 10 --seeds 10   # seeds 10-19
    python benchmarks/moderation_policies.py --seeds 5 --episodes 20 \
        --policies none suppress_flagged_label linucb eenet neural_ucb   # the neural learners too

Every policy plays the same env seeds (seed s, episode e → ``reset(seed=1000·s + e)``); the
bandits keep learning across their ``--episodes`` episodes and every policy is scored on the
last one. ``<bandit>_null`` is the bandit with a null arm (``null_reward`` = the env's
``null_arm_reward()``, 0.5 = no effect): it acts on a post only where it expects the action
to do better than no action, instead of always spending the budget.
``suppress_flagged_label_delete_toxic`` reads the posts' toxicity scores too: it deletes a
post at or above ``moderation.toxic_threshold`` and labels the other flagged posts.
``oracle_harmful_<action>`` reads the hidden truth
(:class:`baselines.oracles.HarmfulPostsOracle`): the rule with a perfect classifier, the
headroom that better targeting could reach. Per policy: mean step reward, misinformation
ratio at the last round, the shares of
impressions that delivered misinformation / toxic posts, the share of clean impressions
removed, wrongful removals (delete/suspend of a post that was not harmful) and actions
taken per episode. Then each policy's paired difference from no moderation, mean and 95% CI
(t over seeds). The classifier's precision / recall are options, so over-moderation under a
poor classifier can be shown. Each learner is compared with each suppress-flagged rule
(paired). Writes ``<out>/moderation.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from scipy import stats

import socialenv  # noqa: F401
from baselines.oracles import HarmfulPostsOracle
from baselines.suppress_flagged import SuppressFlagged
from policysim_infra.progress import add_quiet_option, progress_bar
from socialenv.envs.episodes import play_episode
from socialenv.envs.policy_registry import OriginPolicy, make_run_policy
from socialenv.mechanisms.governance import MODERATION_ACTIONS

POLICIES = (
    "none",
    "oracle_harmful_delete",
    "oracle_harmful_label",
    "suppress_flagged_delete",
    "suppress_flagged_label",
    "suppress_flagged_label_delete_toxic",
    "random",
    "linucb",
    "linucb_null",
    "egreedy",
    "egreedy_null",
)
#: learners playable with --policies but not in the default run (slower; not published)
NEURAL_LEARNERS = ("eenet", "neural_ucb")
RULES = ("suppress_flagged_delete", "suppress_flagged_label", "suppress_flagged_label_delete_toxic")
#: the flag-following rule with the hidden truth for flags: the headroom of better targeting
ORACLES = ("oracle_harmful_delete", "oracle_harmful_label")
LEARNERS = ("linucb", "linucb_null", "egreedy", "egreedy_null", *NEURAL_LEARNERS)
METRICS = (
    "reward",
    "misinformation_ratio_final",
    "misinformation_impression_share",
    "toxic_impression_share",
    "clean_removed_share",
    "wrongful_removals",
    "actions",
)


def make(name: str, env: Any, seed: int) -> Any:
    base = env.unwrapped
    if name == "none":
        return OriginPolicy(base.no_op)
    if name == "suppress_flagged_label_delete_toxic":  # flags and toxicity scores: two lines
        return SuppressFlagged(env, action="label", toxic_action="delete")
    if name.startswith("suppress_flagged_"):
        return SuppressFlagged(env, action=name.removeprefix("suppress_flagged_"))
    if name.startswith("oracle_harmful_"):
        return HarmfulPostsOracle(env, action=name.removeprefix("oracle_harmful_"))
    if name.endswith("_null"):  # a null arm: act only where it expects to beat no action
        return make_run_policy(
            name.removesuffix("_null"), base, seed, null_reward=base.null_arm_reward()
        )
    return make_run_policy(name, base, seed)


def episode_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "reward": float(np.mean([r["reward"] for r in rows])),
        "misinformation_ratio_final": rows[-1]["misinformation_ratio"],
        "misinformation_impression_share": float(
            np.mean([r["misinformation_impression_share"] for r in rows])
        ),
        "toxic_impression_share": float(np.mean([r["toxic_impression_share"] for r in rows])),
        "clean_removed_share": float(np.mean([r["clean_removed_share"] for r in rows])),
        "wrongful_removals": float(sum(r["wrongful_removals"] for r in rows)),
        "actions": float(sum(r[f"actions_{a}"] for r in rows for a in MODERATION_ACTIONS)),
    }


def ci95(values: np.ndarray) -> float:
    if len(values) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument(
        "--episodes", type=int, default=5, help="episodes per seed (the bandit learns across them)"
    )
    parser.add_argument("--precision", type=float, default=0.8)
    parser.add_argument("--recall", type=float, default=0.7)
    parser.add_argument(
        "--policies", nargs="+", default=list(POLICIES), choices=(*POLICIES, *NEURAL_LEARNERS)
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()

    kwargs = {
        "num_users": args.users,
        "rounds": args.rounds,
        "moderation": {"precision": args.precision, "recall": args.recall},
    }
    start = time.perf_counter()
    per_policy: dict[str, list[dict[str, float]]] = {}
    bar = progress_bar(total=len(args.policies) * args.seeds, unit="seed", quiet=args.quiet)
    for name in args.policies:
        per_policy[name] = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            bar.set_description(f"{name} seed {seed}")
            bar.update()
            env = gym.make("PolicySim-Moderation-v0", **kwargs)
            policy = make(name, env, seed)
            for episode in range(args.episodes):
                rows = play_episode(env, policy, seed=1000 * seed + episode)
            per_policy[name].append(episode_summary(rows))
            env.close()
    elapsed = time.perf_counter() - start

    table: dict[str, Any] = {}
    print(
        f"PolicySim-Moderation-v0, {args.users} users, {args.rounds} rounds, {args.seeds} paired seeds from {args.first_seed}, "
        f"last of {args.episodes} episodes, classifier precision {args.precision} recall {args.recall}"
    )
    print(f"{'policy':<26}" + "".join(f"{m[:18]:>20}" for m in METRICS))
    for name, rows in per_policy.items():
        means = {m: float(np.mean([r[m] for r in rows])) for m in METRICS}
        table[name] = {"mean": means, "per_seed": rows}
        print(f"{name:<26}" + "".join(f"{means[m]:>20.4f}" for m in METRICS))
    if "none" in per_policy:
        print("\npaired difference from no moderation, mean ± 95% CI over seeds")
        print(f"{'policy':<26}" + "".join(f"{m[:18]:>20}" for m in METRICS))
        for name, rows in per_policy.items():
            if name == "none":
                continue
            diffs = {}
            for m in METRICS:
                d = np.array([r[m] - b[m] for r, b in zip(rows, per_policy["none"], strict=True)])
                diffs[m] = {"mean": float(d.mean()), "ci95": ci95(d)}
            table[name]["diff_vs_none"] = diffs
            print(
                f"{name:<26}"
                + "".join(f"{diffs[m]['mean']:>+11.4f} ±{diffs[m]['ci95']:<7.4f}" for m in METRICS)
            )
    print()
    for learner in (n for n in (*LEARNERS, *ORACLES) if n in per_policy):
        table[learner]["reward_minus_rule"] = {}
        for rule in (r for r in RULES if r in per_policy):
            d = np.array(
                [
                    r["reward"] - b["reward"]
                    for r, b in zip(per_policy[learner], per_policy[rule], strict=True)
                ]
            )
            table[learner]["reward_minus_rule"][rule] = {"mean": float(d.mean()), "ci95": ci95(d)}
            print(
                f"{learner} − {rule}, reward (= objective), paired: {d.mean():+.4f} ± {ci95(d):.4f}"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "moderation.json"
    path.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "results": table,
                "seconds": elapsed,
            },
            indent=1,
        )
    )
    print(f"wrote {path} ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
