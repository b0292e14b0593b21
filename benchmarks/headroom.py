"""Headroom: what a hidden-state oracle can move, against the size of the policy's lever.

    python benchmarks/headroom.py                          # 1,000 users, 10 rounds, 5 seeds
    python benchmarks/headroom.py --out benchmarks/results/headroom   # publish

For each lever size (Rec: sampled users × recommended slots per user; Exposure: sampled
authors per round) it plays Origin, random and an oracle on the same seeds and reports the
paired Δ against Origin (mean ± 95% CI) of the objective's platform metric — cross-stance
interaction ratio (Rec, ``oracle_cross``) and final misinformation ratio (Exposure,
``oracle_mute``) — with the measured share of impressions the policy governed. An env
whose oracle cannot move its metric is broken (see ``baselines/oracles.py``).
Writes ``headroom.json`` and ``headroom.png`` to ``--out`` (default ``runs/benchmarks``,
untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from baselines.compare import evaluate, levels, paired_deltas

REC_LEVERS = (
    {"candidate_users": 80, "budget": 5}, {"candidate_users": 160, "budget": 5},
    {"candidate_users": 320, "budget": 1}, {"candidate_users": 320, "budget": 3},
    {"candidate_users": 320, "budget": 5},
)
EXPOSURE_LEVERS = ({"exposure_users": 50}, {"exposure_users": 100}, {"exposure_users": 200},
                   {"exposure_users": 300})
SETTINGS = (
    ("PolicySim-Rec-v0", REC_LEVERS, "oracle_cross", "cross_interaction_ratio"),
    ("PolicySim-Exposure-v0", EXPOSURE_LEVERS, "oracle_mute", "misinformation_ratio"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    args = parser.parse_args()
    seeds = range(args.seeds)
    report: dict = {"config": {"seeds": args.seeds, "users": args.users, "rounds": args.rounds}}
    start = time.perf_counter()
    for env_id, levers, oracle, metric in SETTINGS:
        common = {"num_users": args.users, "rounds": args.rounds}
        origin = evaluate(env_id, ["origin"], seeds, common)["origin"]
        rows = []
        for lever in levers:
            results = {"origin": origin,
                       **evaluate(env_id, ["random", oracle], seeds, {**common, **lever})}
            delta = paired_deltas(results, "origin")
            level = levels(results)
            rows.append({"lever": lever, "policy_share": level[oracle]["policy_share"],
                         "delta": {p: delta[p][metric] for p in delta},
                         "level": {p: level[p][metric] for p in level}})
            d = delta[oracle][metric]
            print(f"{env_id} {lever}: policy share {level[oracle]['policy_share']['mean']:.2f}, "
                  f"{oracle} Δ{metric} {d['mean']:+.3f} ± {d['ci95']:.3f}, random "
                  f"{delta['random'][metric]['mean']:+.3f} ± {delta['random'][metric]['ci95']:.3f}",
                  flush=True)
        report[env_id] = {"metric": metric, "oracle": oracle, "rows": rows}
    report["wall_seconds"] = time.perf_counter() - start
    report["load_average"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "headroom.json").write_text(json.dumps(report, indent=2))
    plot(report, args.out / "headroom.png")
    print(f"wrote {args.out / 'headroom.json'} and headroom.png ({report['wall_seconds']:.0f} s wall, load {report['load_average'][0]:.1f})")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (env_id, _, oracle, metric) in zip(axes, SETTINGS, strict=True):
        rows = sorted(report[env_id]["rows"], key=lambda r: r["policy_share"]["mean"])
        for policy, style in ((oracle, "o-"), ("random", "s--")):
            share = [r["policy_share"]["mean"] for r in rows]
            mean = [r["delta"][policy]["mean"] for r in rows]
            ci = [r["delta"][policy]["ci95"] for r in rows]
            ax.errorbar(share, mean, yerr=ci, fmt=style, capsize=3, label=policy)
        ax.axhline(0, color="grey", lw=0.8)
        target = 0.25 if metric == "cross_interaction_ratio" else -0.15
        ax.axhline(target, color="tab:red", lw=0.8, ls=":", label=f"target {target:+.2f}")
        ax.set_xlabel("share of impressions the policy governs")
        ax.set_ylabel(f"Δ {metric} vs Origin (paired, 95% CI)")
        ax.set_title(env_id)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
