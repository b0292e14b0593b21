"""Table 3 of the paper, reproduced on the surrogate population.

    python benchmarks/table3.py                         # 1,000 users, 10 rounds, 5 seeds
    python benchmarks/table3.py --rounds 50             # the longer-horizon option
    python benchmarks/table3.py --policies origin eenet --seeds 2   # a subset
    python benchmarks/table3.py --show benchmarks/results/table3.json  # reprint a saved run

Policies: origin, random, ε-greedy, LinUCB, NeuralUCB, EE-Net (label-propagated user context,
Eq. 8) and ``eenet_gnn`` (EE-Net on a GraphSAGE encoder of the follow graph trained end to end,
:class:`bandits.graph_eenet.GraphEENet`). Exposure slates hold one arm per user (the runner's
``arm_groups``): a second arm on a user would be discarded and score 0.

Objective 1 (PolicySim-Rec-v0, cross-viewpoint reward, Eq. 9): stance mean / std at the last
round, toxicity and the cross-stance interaction ratio averaged over the rounds (platform
wide, and among reactions to recommended posts), mean arm reward.
Objective 2 (PolicySim-Exposure-v0, misinformation reward): misinformation ratio at the
last round, share of impressions removed, mean arm reward.
Every cell is mean ± 95% CI (Student t) over seeds; the paper's Table 3 is printed beside.
Writes ``benchmarks/results/table3.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from socialenv.runner import RunConfig, run

PAPER = {
    "origin": {"stance_mean": 0.014, "stance_std": 0.47, "toxicity": 0.0556,
               "cross_interaction_ratio": 0.04, "misinformation_ratio": 0.40},
    "egreedy": {"stance_mean": 0.184, "stance_std": 0.42, "toxicity": 0.0426,
                "cross_interaction_ratio": 0.14, "misinformation_ratio": 0.26},
    "ucb": {"stance_mean": 0.026, "stance_std": 0.34, "toxicity": 0.0628,
            "cross_interaction_ratio": 0.50, "misinformation_ratio": 0.30},
    "eenet": {"stance_mean": 0.376, "stance_std": 0.48, "toxicity": 0.0386,
              "cross_interaction_ratio": 0.56, "misinformation_ratio": 0.24},
}
PAPER_ROW = {"origin": "origin", "egreedy": "egreedy", "linucb": "ucb", "neural_ucb": "ucb",
             "eenet": "eenet"}
DEFAULT_POLICIES = ("origin", "random", "egreedy", "linucb", "neural_ucb", "eenet", "eenet_gnn")
OBJECTIVE_1 = ("stance_mean", "stance_std", "toxicity", "cross_interaction_ratio",
               "cross_interaction_ratio_recommended", "reward")
OBJECTIVE_2 = ("misinformation_ratio", "exposure_removed", "reward")
RESULTS = Path(__file__).parent / "results" / "table3.json"


def evaluate(env_id: str, policy: str, seeds: list[int], env_kwargs: dict[str, Any],
             episodes: int, policy_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    result = run(RunConfig(
        env_id=env_id, policy=policy, seeds=seeds, episodes=episodes, env_kwargs=env_kwargs,
        policy_kwargs=policy_kwargs or {}, out_dir=None, progress=False, plots=False,
    ))
    summary = result.summary
    summary["seconds"] = time.perf_counter() - start
    return summary


def cell(summary: dict[str, Any], key: str) -> str:
    if key not in summary:
        return "-"
    value = summary[key]
    return f"{value['mean']:.3f} ± " + ("n/a" if value["ci95"] is None else f"{value['ci95']:.3f}")


ENVS = ((1, "PolicySim-Rec-v0", OBJECTIVE_1), (2, "PolicySim-Exposure-v0", OBJECTIVE_2))


def table_for(objective: int, env_id: str, keys: tuple[str, ...], rows: dict[str, Any],
              config: dict[str, Any]) -> Table:
    """The printed table of one objective: a row per policy (``rows``: policy -> summary)."""
    table = Table(title=f"Objective {objective} ({env_id}): {config['users']} users, "
                        f"{config['rounds']} rounds, {config['seeds']} seeds, mean ± 95% CI")
    table.add_column("policy")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("paper", justify="right")
    table.add_column("s", justify="right")
    paper_keys = ("stance_mean", "stance_std", "toxicity", "cross_interaction_ratio") \
        if objective == 1 else ("misinformation_ratio",)
    for policy, summary in rows.items():
        paper = PAPER.get(PAPER_ROW.get(policy, ""), {})
        paper_text = " / ".join(f"{paper[k]:g}" for k in paper_keys) if paper else "-"
        table.add_row(policy, *(cell(summary, k) for k in keys), paper_text,
                      f"{summary['seconds']:.0f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=1,
                        help="episodes per seed; the policy keeps learning, the last is reported")
    parser.add_argument("--objectives", nargs="+", type=int, default=[1, 2], choices=[1, 2])
    parser.add_argument("--env-kwargs", type=json.loads, default={},
                        help="extra env keyword arguments (JSON) for both envs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1 is fastest for these small networks on a shared "
                             "2-core machine)")
    parser.add_argument("--show", type=Path, default=None, metavar="JSON",
                        help="print the tables of a results file written earlier; run nothing")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 170))
    if args.show is not None:
        saved = json.loads(args.show.read_text())
        for objective, env_id, keys in ENVS:
            if saved.get(f"objective_{objective}"):
                console.print(table_for(objective, env_id, keys, saved[f"objective_{objective}"],
                                        saved["config"]))
        return
    import torch

    torch.set_num_threads(args.threads)

    seeds = list(range(args.seeds))
    env_kwargs = {"num_users": args.users, "rounds": args.rounds, **args.env_kwargs}
    results: dict[str, Any] = {"config": vars(args) | {"out": str(args.out)}, "objective_1": {},
                               "objective_2": {}}
    for objective, env_id, keys in ENVS:
        if objective not in args.objectives:
            continue
        for policy in args.policies:
            summary = evaluate(env_id, policy, seeds, env_kwargs, args.episodes)
            results[f"objective_{objective}"][policy] = summary
            console.print(f"  {policy} on {env_id}: done in {summary['seconds']:.1f} s")
        console.print(table_for(objective, env_id, keys, results[f"objective_{objective}"],
                                vars(args)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
