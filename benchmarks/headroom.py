"""Headroom: what a hidden-state oracle can move, against the size of the policy's lever.

    python benchmarks/headroom.py                          # 1,000 users, 10 rounds, 5 seeds
    python benchmarks/headroom.py --out benchmarks/results/headroom   # publish

For each lever share (the share of the round's active users the policy governs: Rec, users
it recommends to; Exposure, recent authors whose level it sets) it plays Origin, random and
an oracle on the same seeds and reports the paired Δ against Origin (mean ± 95% CI) of the
env's declared objective (``info["metrics"]["objective"]``, averaged over the rounds) and of
the paper's metric beside it — cross-stance interaction ratio (Rec, ``oracle_objective``)
and final misinformation ratio (Exposure, ``oracle_mute``) — with the measured share of
impressions the policy governed. An env whose oracle cannot move its objective is broken
(see ``baselines/oracles.py``). Writes ``headroom.json`` and ``headroom.png`` to ``--out``
(default ``runs/benchmarks``, untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from baselines.compare import evaluate, levels, paired_deltas
from policysim_infra.progress import add_quiet_option, progress_bar

SHARES = (0.1, 0.15, 0.25, 0.5)
SETTINGS = (
    ("PolicySim-Rec-v0", "oracle_objective", "cross_interaction_ratio"),
    ("PolicySim-Exposure-v0", "oracle_mute", "misinformation_ratio"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()
    seeds = range(args.seeds)
    report: dict = {"config": {"seeds": args.seeds, "users": args.users, "rounds": args.rounds}}
    start = time.perf_counter()
    bar = progress_bar(total=len(SETTINGS) * len(SHARES), unit="share", quiet=args.quiet)
    for env_id, oracle, paper_metric in SETTINGS:
        common = {"num_users": args.users, "rounds": args.rounds}
        origin = evaluate(env_id, ["origin"], seeds, common)["origin"]
        rows = []
        for share in SHARES:
            results = {
                "origin": origin,
                **evaluate(env_id, ["random", oracle], seeds, {**common, "lever_share": share}),
            }
            delta = paired_deltas(results, "origin")
            level = levels(results)
            rows.append(
                {
                    "lever_share": share,
                    "policy_share": level[oracle]["policy_share"],
                    "delta": {p: delta[p]["objective"] for p in delta},
                    "delta_paper_metric": {p: delta[p][paper_metric] for p in delta},
                    "level": {p: level[p]["objective"] for p in level},
                }
            )
            d, m = delta[oracle]["objective"], delta[oracle][paper_metric]
            print(
                f"{env_id} share {share}: policy share {level[oracle]['policy_share']['mean']:.2f}, "
                f"{oracle} Δobjective {d['mean']:+.4f} ± {d['ci95']:.4f} (Δ{paper_metric} "
                f"{m['mean']:+.3f} ± {m['ci95']:.3f}), random {delta['random']['objective']['mean']:+.4f} "
                f"± {delta['random']['objective']['ci95']:.4f}",
                flush=True,
            )
            bar.update()
        report[env_id] = {
            "metric": "objective",
            "paper_metric": paper_metric,
            "oracle": oracle,
            "rows": rows,
        }
    bar.close()
    report["reward_alignment"] = reward_alignment(args.seeds, args.users, args.rounds)
    a = report["reward_alignment"]
    print(
        f"Rec reward alignment: {a['top_decile_share']:.2f} of the top-decile arms by expected "
        f"contribution are cross-stance, low-toxicity pairs (base rate {a['base_rate']:.2f}); "
        f"rank correlation of expected reward with P(civil cross-stance reaction) "
        f"{a['spearman']:.2f}"
    )
    report["wall_seconds"] = time.perf_counter() - start
    report["load_average"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "headroom.json").write_text(json.dumps(report, indent=2))
    plot(report, args.out / "headroom.png")
    print(
        f"wrote {args.out / 'headroom.json'} and headroom.png ({report['wall_seconds']:.0f} s wall, load {report['load_average'][0]:.1f})"
    )


def reward_alignment(seeds: int, users: int, rounds: int) -> dict[str, float]:
    """Does ranking Rec arms by their expected contribution to the objective pick the arms
    that move it? Over random-policy episodes, per round: the share of the top decile of
    allowed arms by expected contribution (exact surrogate probabilities) that are
    cross-stance pairs whose expected reply toxicity is below half the hostility threshold,
    against that share among all allowed arms, and the Spearman correlation of the expected
    contribution with P(civil reaction)·[cross-stance]."""
    import gymnasium as gym
    from scipy import stats

    import socialenv  # noqa: F401
    from baselines.oracles import ObjectiveOracle, civil_reaction_probabilities
    from socialenv.envs.policy_registry import make_run_policy, select_action

    top, base, rho = [], [], []
    for seed in range(seeds):
        env = gym.make("PolicySim-Rec-v0", num_users=users, rounds=rounds)
        oracle = ObjectiveOracle(env)
        policy = make_run_policy("random", env.unwrapped, seed)
        obs, _ = env.reset(seed=seed * 1000)
        for _ in range(rounds):
            mask = obs["action_mask"].astype(bool)
            p = civil_reaction_probabilities(env)
            expected = oracle.scores(p)[mask]
            threshold = env.unwrapped.config.reward.hostile_toxicity / 2
            good = (p["cross"] & (p["reply_toxicity_expected"] < threshold))[mask]
            k = max(1, len(expected) // 10)
            best = np.argsort(-expected, kind="stable")[:k]
            top.append(good[best].mean())
            base.append(good.mean())
            rho.append(stats.spearmanr(expected, (p["civil"] * p["cross"])[mask]).statistic)
            obs, *_ = env.step(select_action(policy, obs, env))
        env.close()
    return {
        "top_decile_share": float(np.mean(top)),
        "base_rate": float(np.mean(base)),
        "spearman": float(np.mean(rho)),
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (env_id, oracle, _) in zip(axes, SETTINGS, strict=True):
        rows = sorted(report[env_id]["rows"], key=lambda r: r["policy_share"]["mean"])
        for policy, style in ((oracle, "o-"), ("random", "s--")):
            share = [r["policy_share"]["mean"] for r in rows]
            mean = [r["delta"][policy]["mean"] for r in rows]
            ci = [r["delta"][policy]["ci95"] for r in rows]
            ax.errorbar(share, mean, yerr=ci, fmt=style, capsize=3, label=policy)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("share of impressions the policy governs (lever shares 0.1, 0.15, 0.25, 0.5)")
        ax.set_ylabel("Δ objective vs Origin (paired, 95% CI)")
        ax.set_title(env_id)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
