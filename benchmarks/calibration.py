"""Calibration of the surrogate population against the paper's Origin row and Fig. 3.

    python benchmarks/calibration.py                 # 1,000 users, 10 rounds, 5 seeds

Runs the no-intervention platform ("Origin": every slot of the slate empty) and prints, per
seed: the cross-stance interaction ratio and toxicity (averaged over the rounds) on the
abortion scenario and the misinformation ratio at the last round of the misinformation
scenario, next to the paper's 0.04 / 0.0556 / 40%. Then the macro dynamics of Fig. 3 on the
abortion scenario (news at rounds 0, 4, 7): stance mean and std per round, with the
personalized recommender on (5 posts), off, and on without its stance ranking
(``personalized_stance_weight=0``; ``benchmarks/fig3.py`` gives the paired checks and the
plot); each opinion mechanism switched off (paired
Δ of stance dispersion); the response to a single news shock; engagement per active user
over 30 rounds; reply toxicity by pair type. Writes ``--out`` (default
``runs/benchmarks/calibration.json``, untracked).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from agent_models.surrogate_mechanisms import MECHANISMS
from agent_models.types import Behaviour, NewsEvent
from baselines.compare import mean_ci95
from policysim_infra.progress import add_quiet_option, progress_bar
from socialenv.envs.exposure import ExposureEnv
from socialenv.envs.rec import RecEnv
from socialenv.scenarios.builtin import abortion

RESULTS = Path("runs/benchmarks/calibration.json")
#: Switched off one at a time (surrogate config overrides): every mechanism of the surrogate's
#: registry, and the confidence bound of assimilation and reinforcement.
ABLATIONS: dict[str, dict[str, float]] = {
    **{f"{mechanism.name} off": dict(mechanism.OFF) for mechanism in MECHANISMS},
    "bounded confidence off": {"confidence_bound": 1.0},
}
#: The metric that shows each ablation acting (a mechanism's own ``metric``).
ABLATION_METRICS: dict[str, str] = {
    **{f"{mechanism.name} off": mechanism.metric for mechanism in MECHANISMS},
    "bounded confidence off": "stance_std",
}
PAPER_ORIGIN = {
    "cross_interaction_ratio": 0.04,
    "toxicity": 0.0556,
    "misinformation_ratio": 0.40,
    "stance_mean": 0.014,
    "stance_std": 0.47,
}


def origin_episode(
    env: RecEnv | ExposureEnv, seed: int, on_round: object = None
) -> list[dict[str, float]]:
    env.reset(seed=seed)
    start = {
        "stance_mean": float(env.sim.users.stance.mean()),
        "stance_std": float(env.sim.users.stance.std()),
    }
    rows = [start]
    for _ in range(env.config.rounds):
        _, _, _, _, info = env.step(np.full(env.slate_size, env.no_op))
        rows.append(info["metrics"])
        if on_round is not None:
            on_round(env)
    return rows


def mechanisms(users: int, seeds: int) -> dict:
    """Paired Δ at the last round when each mechanism is switched off: of the stance std and
    mean, and of the mechanism's own metric (the misinformation ratio for the contagion, on
    the misinformation scenario)."""

    def final(surrogate: dict, seed: int, scenario: str) -> dict[str, float]:
        env = RecEnv(num_users=users, rounds=10, surrogate=surrogate, scenario=scenario)
        return origin_episode(env, seed)[-1]

    def scenario_for(metric: str) -> str:
        return "misinformation" if metric == "misinformation_ratio" else "abortion"

    base = {
        scenario: [final({}, s, scenario) for s in range(seeds)]
        for scenario in {scenario_for(m) for m in ABLATION_METRICS.values()}
    }
    out = {}
    for name, override in ABLATIONS.items():
        metric = ABLATION_METRICS[name]
        reference = base[scenario_for(metric)]
        runs = [final(override, s, scenario_for(metric)) for s in range(seeds)]
        out[name] = {
            key: mean_ci95([r[key] - b[key] for r, b in zip(runs, reference, strict=True)])
            for key in dict.fromkeys(("stance_std", "stance_mean", metric))
        }
    return out


def shock_response(users: int, seeds: int, rounds: int = 20) -> list[float]:
    """Mean stance per round with a single news shock (−0.45) at round 2."""
    paths = []
    for seed in range(seeds):
        scenario = abortion(users, seed=seed)
        scenario.news = [NewsEvent(2, "Trigger-law abortion bans take effect.", -0.45)]
        rows = origin_episode(RecEnv(num_users=users, rounds=rounds, scenario=scenario), seed)
        paths.append([r["stance_mean"] for r in rows])
    return np.mean(paths, axis=0).round(4).tolist()


def toxicity_by_pair(users: int, seeds: int) -> dict[str, float]:
    """Mean reply toxicity by (cross-stance or not) × (author above the civility threshold or
    not), over Origin episodes."""
    buckets: dict[str, list[np.ndarray]] = {}

    def collect(env: RecEnv) -> None:
        out = env._last_result.output
        reply = out.react_kind == int(Behaviour.REPLY)
        u, p = out.react_user[reply], out.react_post[reply]
        stance = env._last_result.discrete_before
        cross = stance[u].astype(np.int16) * stance[env.sim.posts.author[p]] == -1
        hostile = env.sim.users.toxicity_propensity[u] > env.brain.config.civility_threshold
        for c in (True, False):
            for h in (True, False):
                key = (
                    f"{'cross' if c else 'same/neutral'}, {'hostile-prone' if h else 'civil'} user"
                )
                buckets.setdefault(key, []).append(
                    out.react_toxicity[reply][(cross == c) & (hostile == h)]
                )

    for seed in range(seeds):
        origin_episode(RecEnv(num_users=users, rounds=10), seed, on_round=collect)
    return {k: float(np.concatenate(v).mean()) for k, v in buckets.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_quiet_option(parser)
    args = parser.parse_args()

    recommenders = {
        "personalized_5": {"personalized": 5},
        "personalized_0": {"personalized": 0},
        "personalized_5_stance_weight_0": {"personalized_stance_weight": 0.0},
    }
    # The seeds of the Origin table, one step per recommender, then ablation, shock, long run, toxicity.
    bar = progress_bar(total=args.seeds + len(recommenders) + 4, unit="step", quiet=args.quiet)
    per_seed = []
    print(
        f"Origin, {args.users} users, {args.rounds} rounds "
        f"(paper: cross {PAPER_ORIGIN['cross_interaction_ratio']}, toxicity "
        f"{PAPER_ORIGIN['toxicity']}, misinformation {PAPER_ORIGIN['misinformation_ratio']:.0%})"
    )
    print(f"{'seed':>4} {'cross':>7} {'toxicity':>9} {'stance':>15} {'misinformed':>12}")
    for seed in range(args.seeds):
        rec = origin_episode(RecEnv(num_users=args.users, rounds=args.rounds), seed)[1:]
        mis = origin_episode(ExposureEnv(num_users=args.users, rounds=args.rounds), seed)[1:]
        row = {
            "seed": seed,
            "cross_interaction_ratio": float(np.mean([r["cross_interaction_ratio"] for r in rec])),
            "toxicity": float(np.mean([r["toxicity"] for r in rec])),
            "stance_mean": rec[-1]["stance_mean"],
            "stance_std": rec[-1]["stance_std"],
            "misinformation_ratio": mis[-1]["misinformation_ratio"],
        }
        per_seed.append(row)
        bar.update()
        print(
            f"{seed:>4} {row['cross_interaction_ratio']:7.3f} {row['toxicity']:9.4f} "
            f"{row['stance_mean']:+7.3f} ± {row['stance_std']:.3f} {row['misinformation_ratio']:12.1%}"
        )
    means = {k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0] if k != "seed"}
    print(
        f"mean {means['cross_interaction_ratio']:7.3f} {means['toxicity']:9.4f} "
        f"{means['stance_mean']:+7.3f} ± {means['stance_std']:.3f} {means['misinformation_ratio']:12.1%}"
    )

    macro = {}
    for name, recommender in recommenders.items():
        # Origin's dynamics do not depend on the env's arms; the exposure env is used because
        # a recommendation env needs recommended slots to act on.
        paths = [
            origin_episode(
                ExposureEnv(
                    num_users=args.users,
                    rounds=args.rounds,
                    scenario="abortion",
                    recommender=recommender,
                ),
                seed,
            )
            for seed in range(args.seeds)
        ]
        macro[name] = {
            key: np.mean([[r[key] for r in path] for path in paths], axis=0).round(4).tolist()
            for key in ("stance_mean", "stance_std")
        }
        bar.update()
    print("\nFig. 3 dynamics (abortion, news at rounds 0, 4, 7; column t = after round t-1):")
    for name, series in macro.items():
        for key, values in series.items():
            print(f"{name:>30} {key:>11}: " + " ".join(f"{v:+.3f}" for v in values))
    ablation = mechanisms(args.users, args.seeds)
    bar.update()
    print("\nMechanisms switched off (paired Δ at round 10, mean ± 95% CI):")
    for name, d in ablation.items():
        print(
            f"{name:>28}: "
            + ", ".join(
                f"{key.replace('_', ' ')} {v['mean']:+.4f} ± {v['ci95']:.4f}"
                for key, v in d.items()
            )
        )
    shock = shock_response(args.users, args.seeds)
    bar.update()
    print(
        "\nOne news shock at round 2, stance mean per round: "
        + " ".join(f"{v:+.3f}" for v in shock)
    )
    long = [
        origin_episode(RecEnv(num_users=args.users, rounds=30), seed) for seed in range(args.seeds)
    ]
    bar.update()
    engagement = np.mean([[r["engagement"] for r in path[1:]] for path in long], axis=0)
    band = engagement[4:30]
    deviation = float(np.abs(band / band.mean() - 1).max())
    print(
        f"\nEngagement per active user, rounds 5-30: {band.min():.2f}..{band.max():.2f} "
        f"(max deviation from their mean {deviation:.1%})"
    )
    tox = toxicity_by_pair(args.users, args.seeds)
    bar.update()
    bar.close()
    print("\nReply toxicity by pair: " + ", ".join(f"{k}: {v:.3f}" for k, v in tox.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "config": {k: str(v) for k, v in vars(args).items() if k != "quiet"},
                "paper_origin": PAPER_ORIGIN,
                "per_seed": per_seed,
                "mean": means,
                "macro": macro,
                "ablation": ablation,
                "shock_response": shock,
                "engagement_rounds_5_30": band.round(3).tolist(),
                "engagement_max_deviation": deviation,
                "reply_toxicity_by_pair": tox,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
