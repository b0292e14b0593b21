"""The paper's Fig. 3 at the defaults: stance mean and std per round, with and without the
personalized channel's stance filtering, paired over seeds.

    python benchmarks/fig3.py --out runs/benchmarks/fig3      # 1,000 users, 10 rounds, seeds 0-4

Origin (no intervention) on the abortion scenario (news at rounds 0, 4, 7). Each seed is
played twice on the same population and random streams: with the default recommender and
with ``recommender.personalized_stance_weight=0`` (the personalized channel ranks by interest
alone; its slots keep the same size and the same attention bonus, so only the stance
filtering differs). Reports, each as a mean over seeds with a 95% CI:

- the drop of the stance mean at each news round (column r+1 − column r; column t is the
  state after round t−1, column 0 the reset state) and the recovery after it: the last column
  before the next news (or the episode's end) minus the lowest column since the news;
- the growth of the stance std over the episode (last column − column 0);
- the paired effect of the stance filtering on polarization: final stance std and final
  opinion std, default − unfiltered;
- the neutral share of the initial stances, and Origin's cross-stance ratio and toxicity
  (means over rounds) beside the paper's row.

Writes ``fig3.json`` and ``fig3.png`` (the two curves of each quantity with 95% bands, news
rounds marked, the paper's description beside them) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from baselines.compare import mean_ci95
from policysim_infra.progress import add_quiet_option, progress_bar
from socialenv.envs.rec import RecEnv

PAPER_DESCRIPTION = (
    "Paper (§4.2.2, Fig. 3): with trigger news at rounds 0, 4 and 7, the mean stance shows a rapid "
    "initial decline followed by a gradual increase; the std of stance increases over rounds "
    "(polarization); with the recommender applied, polarization intensifies (users see more "
    "homogeneous content). Table 3 Origin: stance 0.014 (std 0.47), toxicity 0.0556, cross 0.04."
)
PAPER_ORIGIN = {
    "cross_interaction_ratio": 0.04,
    "toxicity": 0.0556,
    "stance_mean": 0.014,
    "stance_std": 0.47,
}
UNFILTERED = {"personalized_stance_weight": 0.0}


def origin_curves(
    seed: int,
    users: int,
    rounds: int,
    recommender: dict[str, Any] | None = None,
    surrogate: dict[str, Any] | None = None,
) -> dict[str, list[float]]:
    """Per-column stance mean / std / opinion std (column 0 = reset), per-round cross-stance
    ratio and toxicity, and the neutral share at reset of one Origin episode."""
    env = RecEnv(
        num_users=users, rounds=rounds, recommender=recommender or {}, surrogate=surrogate or {}
    )
    env.reset(seed=seed)
    users_state = env.sim.users
    out: dict[str, list[float]] = {
        "stance_mean": [float(users_state.stance.mean())],
        "stance_std": [float(users_state.stance.std())],
        "opinion_std": [float(users_state.opinion.std())],
        "neutral_share_at_reset": [float(np.mean(users_state.discrete_stance == 0))],
        "cross_interaction_ratio": [],
        "toxicity": [],
    }
    for _ in range(rounds):
        _, _, _, _, info = env.step(np.full(env.slate_size, env.no_op))
        metrics = info["metrics"]
        for key in ("stance_mean", "stance_std", "cross_interaction_ratio", "toxicity"):
            out[key].append(float(metrics[key]))
        out["opinion_std"].append(float(env.sim.users.opinion.std()))
    env.close()
    return out


def news_rounds(users: int, seed: int) -> list[int]:
    env = RecEnv(num_users=users, rounds=1)
    env.reset(seed=seed)
    rounds = sorted({event.round for event in env.sim.scenario.news})
    env.close()
    return rounds


def shock_checks(mean: np.ndarray, news: list[int]) -> list[dict[str, Any]]:
    """(seeds, columns) stance means → per news round: drop (column r+1 − column r, < 0 is a
    drop), recovery (the column before the next news − the lowest column since the news) and
    the recovered share of the drop, each mean ± 95% CI over seeds."""
    last = mean.shape[1] - 1
    rows = []
    for i, r in enumerate(news):
        if r + 1 > last:
            continue
        end = min(news[i + 1] if i + 1 < len(news) else last, last)
        drop = mean[:, r + 1] - mean[:, r]
        low = mean[:, r + 1 : end + 1].min(axis=1)
        recovery = mean[:, end] - low
        fall = mean[:, r] - low
        rows.append(
            {
                "news_round": r,
                "recovery_column": end,
                "drop": mean_ci95(drop.tolist()),
                "recovery": mean_ci95(recovery.tolist()),
                "recovered_share": mean_ci95((recovery / np.maximum(fall, 1e-9)).tolist()),
            }
        )
    return rows


def plot(path: Path, curves: dict[str, dict[str, np.ndarray]], news: list[int], note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4.8), gridspec_kw={"width_ratios": [1, 1, 1, 0.9]})
    labels = {
        "default": "recommender with stance filtering (default)",
        "unfiltered": "personalized_stance_weight=0 (same slots, same attention)",
    }

    def band(ax: Any, values: np.ndarray, style: str, label: str) -> None:
        x = np.arange(values.shape[1])
        centre = values.mean(axis=0)
        half = np.array([mean_ci95(values[:, j].tolist())["ci95"] for j in range(values.shape[1])])
        ax.plot(x, centre, style, marker="o", markersize=3, label=label)
        ax.fill_between(x, centre - half, centre + half, alpha=0.2)

    for ax, key, title in (
        (axes[0], "stance_mean", "stance mean"),
        (axes[1], "stance_std", "stance std"),
    ):
        for name, style in (("default", "-"), ("unfiltered", "--")):
            band(ax, curves[name][key], style, labels[name])
        ax.set_title(f"Origin: {title} per round (95% CI over seeds)")
    band(
        axes[2],
        curves["default"]["stance_std"] - curves["unfiltered"]["stance_std"],
        "-",
        "stance std, default − weight 0 (paired)",
    )
    band(
        axes[2],
        curves["default"]["opinion_std"] - curves["unfiltered"]["opinion_std"],
        "-.",
        "opinion std, default − weight 0 (paired)",
    )
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_title("effect of the stance filtering (paired, 95% CI)")
    for ax in axes[:3]:
        for i, r in enumerate(news):
            ax.axvline(
                r + 0.5,
                color="grey",
                linestyle=":",
                linewidth=1,
                label="news (acts between columns r and r+1)" if i == 0 else None,
            )
        ax.set_xlabel("column t (state after round t−1; 0 = reset)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    axes[2].legend(fontsize=7, loc="upper left")
    axes[3].axis("off")
    axes[3].text(0.0, 1.0, note, va="top", ha="left", fontsize=8, transform=axes[3].transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder (created)")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--surrogate",
        type=json.loads,
        default={},
        help="surrogate config overrides (JSON), for exploring; default none",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    start = time.process_time()
    news = news_rounds(args.users, seeds[0])
    bar = progress_bar(total=2 * len(seeds), unit="episode", quiet=args.quiet)
    runs: dict[str, list[dict[str, list[float]]]] = {}
    for name, recommender in (("default", {}), ("unfiltered", UNFILTERED)):
        runs[name] = []
        for s in seeds:
            runs[name].append(
                origin_curves(s, args.users, args.rounds, recommender, args.surrogate)
            )
            bar.update()
    bar.close()
    curves = {
        name: {
            key: np.array([run[key] for run in paths])
            for key in ("stance_mean", "stance_std", "opinion_std")
        }
        for name, paths in runs.items()
    }
    default, unfiltered = curves["default"], curves["unfiltered"]
    result: dict[str, Any] = {
        "command": "python benchmarks/fig3.py "
        + " ".join(
            f"--{k.replace('_', '-')} {json.dumps(v) if isinstance(v, dict) else v}"
            for k, v in vars(args).items()
            if k != "quiet"
        ),
        "seeds": seeds,
        "news_rounds": news,
        "paper": PAPER_DESCRIPTION,
        "paper_origin": PAPER_ORIGIN,
        "curves": {
            name: {
                key: {
                    "mean": v.mean(axis=0).round(4).tolist(),
                    "ci95": [
                        round(mean_ci95(v[:, j].tolist())["ci95"], 4) for j in range(v.shape[1])
                    ],
                }
                for key, v in series.items()
            }
            for name, series in curves.items()
        },
        "shocks": shock_checks(default["stance_mean"], news),
        "std_growth": mean_ci95(
            (default["stance_std"][:, -1] - default["stance_std"][:, 0]).tolist()
        ),
        "filtering_effect": {
            "final_stance_std": mean_ci95(
                (default["stance_std"][:, -1] - unfiltered["stance_std"][:, -1]).tolist()
            ),
            "final_opinion_std": mean_ci95(
                (default["opinion_std"][:, -1] - unfiltered["opinion_std"][:, -1]).tolist()
            ),
        },
        "neutral_share_at_reset": mean_ci95(
            [r["neutral_share_at_reset"][0] for r in runs["default"]]
        ),
        "origin": {
            key: mean_ci95([float(np.mean(r[key])) for r in runs["default"]])
            for key in ("cross_interaction_ratio", "toxicity")
        },
        "origin_final_stance": {
            key: mean_ci95([r[key][-1] for r in runs["default"]])
            for key in ("stance_mean", "stance_std")
        },
        "cpu_seconds": round(time.process_time() - start, 1),
    }

    def fmt(d: dict[str, float]) -> str:
        return f"{d['mean']:+.4f} ± {d['ci95']:.4f}"

    lines = [
        f"Origin, {args.users} users, {args.rounds} rounds, seeds {seeds[0]}-{seeds[-1]}, "
        f"news at rounds {news}"
    ]
    for name, series in curves.items():
        for key in ("stance_mean", "stance_std"):
            lines.append(
                f"{name:>10} {key:>11}: " + " ".join(f"{v:+.3f}" for v in series[key].mean(axis=0))
            )
    for row in result["shocks"]:
        lines.append(
            f"news at round {row['news_round']}: drop {fmt(row['drop'])}, recovery by column "
            f"{row['recovery_column']} {fmt(row['recovery'])} (share {fmt(row['recovered_share'])})"
        )
    lines.append(f"stance std growth (last − reset): {fmt(result['std_growth'])}")
    eff = result["filtering_effect"]
    lines.append(
        f"stance filtering, default − weight 0: final stance std {fmt(eff['final_stance_std'])}, "
        f"final opinion std {fmt(eff['final_opinion_std'])}"
    )
    lines.append(
        f"neutral share at reset {fmt(result['neutral_share_at_reset'])}; Origin cross "
        f"{fmt(result['origin']['cross_interaction_ratio'])} (paper 0.04), toxicity "
        f"{fmt(result['origin']['toxicity'])} (paper 0.0556); final stance "
        f"{fmt(result['origin_final_stance']['stance_mean'])} "
        f"(std {fmt(result['origin_final_stance']['stance_std'])}; paper 0.014 (0.47))"
    )
    print("\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fig3.json").write_text(json.dumps(result, indent=2))
    note = PAPER_DESCRIPTION + "\n\nMeasured here:\n" + "\n".join(lines[5:])
    plot(args.out / "fig3.png", curves, news, "\n".join(_wrap(note, 60)))
    print(
        f"wrote {args.out / 'fig3.json'} and {args.out / 'fig3.png'} "
        f"({result['cpu_seconds']} s CPU)"
    )


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return [
        line for paragraph in text.split("\n") for line in (textwrap.wrap(paragraph, width) or [""])
    ]


if __name__ == "__main__":
    main()
