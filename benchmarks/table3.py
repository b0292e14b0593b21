"""Table 3 of the paper on the surrogate population, as paired differences.

    python benchmarks/table3.py                               # 1,000 users, 10 rounds, 5 seeds
    python benchmarks/table3.py --rounds 50                   # the longer horizon
    python benchmarks/table3.py --policies origin random linucb --seeds 2
    python benchmarks/table3.py --out benchmarks/results/table3   # publish
    python benchmarks/table3.py --policies origin random eenet --no-baselines \
        --variant 'eenet_reference=eenet:{"initialization": "default", "exploration_input_scale": "none"}'

Every policy plays the same seeds (same population, same random streams), so each cell is
the paired difference against Origin and against random: mean ± 95% CI (Student t) over
seeds. Objective 1 (PolicySim-Rec-v0): the env's declared objective and civil cross-stance
reactions per active user, the paper's cross-stance interaction ratio platform-wide and among
reactions to the policy's posts, toxicity, stance mean/std at the last round, reward.
Objective 2 (PolicySim-Exposure-v0): the declared objective, misinformation ratio at the last
round, share of impressions removed, reward. The oracles (hidden state) bound what any policy can do.
Writes ``table3.json`` and ``table3.png`` (Δ vs Origin with CI bars beside the paper's Δ)
to ``--out`` (default ``runs/benchmarks``, untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from baselines.compare import evaluate, levels, paired_deltas
from policysim_infra.progress import add_quiet_option, progress_bar

PAPER = {
    "origin": {
        "stance_mean": 0.014,
        "stance_std": 0.47,
        "toxicity": 0.0556,
        "cross_interaction_ratio": 0.04,
        "misinformation_ratio": 0.40,
    },
    "egreedy": {
        "stance_mean": 0.184,
        "stance_std": 0.42,
        "toxicity": 0.0426,
        "cross_interaction_ratio": 0.14,
        "misinformation_ratio": 0.26,
    },
    "linucb": {
        "stance_mean": 0.026,
        "stance_std": 0.34,
        "toxicity": 0.0628,
        "cross_interaction_ratio": 0.50,
        "misinformation_ratio": 0.30,
    },
    "eenet": {
        "stance_mean": 0.376,
        "stance_std": 0.48,
        "toxicity": 0.0386,
        "cross_interaction_ratio": 0.56,
        "misinformation_ratio": 0.24,
    },
}
OBJECTIVES = {
    "PolicySim-Rec-v0": (
        "objective",
        "civil_cross_reactions_per_user",
        "cross_interaction_ratio",
        "cross_interaction_ratio_recommended",
        "toxicity",
        "stance_mean",
        "stance_std",
        "reward",
        "policy_share",
    ),
    "PolicySim-Exposure-v0": (
        "objective",
        "misinformation_ratio",
        "exposure_removed",
        "reward",
        "policy_share",
    ),
}
ORACLES = {
    "PolicySim-Rec-v0": ("oracle_objective", "oracle_cross", "oracle_civil"),
    "PolicySim-Exposure-v0": ("oracle_mute",),
}
EXTRA = {"PolicySim-Rec-v0": ("popularity", "mmr"), "PolicySim-Exposure-v0": ("suppress_flagged",)}
DEFAULT_POLICIES = ("origin", "random", "egreedy", "linucb", "lints", "neural_ucb", "eenet")


def fmt(cell: dict[str, float]) -> str:
    if cell["ci95"] is None:  # one seed: no interval
        return f"{cell['mean']:+.3f} (n/a)"
    return f"{cell['mean']:+.3f} ± {cell['ci95']:.3f}"


def table(env_id: str, report: dict[str, Any]) -> Table:
    keys = OBJECTIVES[env_id]
    t = Table(
        title=f"{env_id}: paired Δ vs Origin | vs random (mean ± 95% CI over "
        f"{report['config']['seeds']} seeds), level in brackets"
    )
    t.add_column("policy")
    for key in keys:
        t.add_column(key, justify="right")
    for policy, level in report[env_id]["levels"].items():
        cells = []
        for key in keys:
            text = f"[{level[key]['mean']:.3f}]"
            if policy != "origin":
                text = fmt(report[env_id]["vs_origin"][policy][key]) + " " + text
            if policy not in ("origin", "random") and "random" in report[env_id]["levels"]:
                text += " | " + fmt(report[env_id]["vs_random"][policy][key])
            cells.append(text)
        t.add_row(policy, *cells)
    return t


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [
        ("PolicySim-Rec-v0", "cross_interaction_ratio"),
        ("PolicySim-Rec-v0", "toxicity"),
        ("PolicySim-Rec-v0", "stance_mean"),
        ("PolicySim-Exposure-v0", "misinformation_ratio"),
    ]
    panels = [p for p in panels if p[0] in report]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (env_id, key) in zip(axes[0], panels, strict=True):
        deltas = report[env_id]["vs_origin"]
        names = list(deltas)
        mean = [deltas[n][key]["mean"] for n in names]
        ci = [deltas[n][key]["ci95"] or 0.0 for n in names]
        y = np.arange(len(names))
        ax.barh(
            y, mean, xerr=ci, capsize=3, color="tab:blue", alpha=0.7, label="PolicySim (surrogate)"
        )
        paper = [
            PAPER.get(n, {}).get(key, np.nan) - PAPER["origin"].get(key, np.nan) for n in names
        ]
        ax.plot(paper, y, "r*", ms=10, label="paper Δ vs Origin")
        ax.set_yticks(y, names)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_title(f"Δ {key}", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Paired Δ vs Origin, mean ± 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument(
        "--no-baselines", action="store_true", help="skip the oracle and the non-learned baselines"
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--envs", nargs="+", default=list(OBJECTIVES), choices=list(OBJECTIVES))
    parser.add_argument(
        "--env-kwargs",
        type=json.loads,
        default={},
        help="extra env keyword arguments (JSON) for both envs",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=POLICY:JSON",
        help="an extra row: POLICY built with the JSON hyper-parameters",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    console = Console(width=max(Console().width, 200))
    report: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "quiet")}
    }
    start = time.perf_counter()
    for env_id in args.envs:
        policies = list(dict.fromkeys(["origin", *args.policies]))
        if not args.no_baselines:
            policies += [*EXTRA[env_id], *ORACLES[env_id]]
        aliases, kwargs = {}, {}
        for spec in args.variant:
            name, _, rest = spec.partition("=")
            policy, _, hyper = rest.partition(":")
            aliases[name], kwargs[name] = policy, json.loads(hyper or "{}")
            policies.append(name)
        bar = progress_bar(
            total=len(policies) * args.seeds, desc=env_id, unit="episode", quiet=args.quiet
        )
        results = evaluate(
            env_id,
            policies,
            range(args.seeds),
            {"num_users": args.users, "rounds": args.rounds, **args.env_kwargs},
            progress=lambda name, seed, bar=bar: bar.update(),
            aliases=aliases,
            policy_kwargs=kwargs,
        )
        bar.close()
        report[env_id] = {
            "per_seed": results,
            "levels": levels(results),
            "vs_origin": paired_deltas(results, "origin"),
            "vs_random": paired_deltas(results, "random") if "random" in results else {},
        }
        console.print(table(env_id, report))
    report["wall_seconds"] = time.perf_counter() - start
    report["load_average"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    name = "table3" if args.rounds == 10 else f"table3_rounds{args.rounds}"
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2))
    plot(report, args.out / f"{name}.png")
    console.print(
        f"wrote {args.out / name}.json and .png ({report['wall_seconds']:.0f} s wall, load {report['load_average'][0]:.1f})"
    )


if __name__ == "__main__":
    main()
