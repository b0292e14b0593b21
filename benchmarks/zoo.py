"""Policy zoo: does the reward rank policies as the declared objective does?

    python benchmarks/zoo.py                                  # 1,000 users, 10 rounds, seeds 0-4
    python benchmarks/zoo.py --reward-form paper              # the same zoo, v0's Eq. 9 / Eq. 10
    python benchmarks/zoo.py --grid                           # 300/1,000/3,000 users × 3 lever shares
    python benchmarks/zoo.py --train-episodes 3               # learners first train 3 episodes
    python benchmarks/zoo.py --reward reply_toxicity_weight=8 # one reward weight changed
    python benchmarks/zoo.py --envs PolicySim-Rec-v0 --reward step=slots  # Rec's slot step reward
    python benchmarks/zoo.py --first-seed 10 --seeds 10       # unseen seeds 10-19
    python benchmarks/zoo.py --out benchmarks/results/zoo     # publish

Fifteen policies per env (sixteen in Rec) play the same seeds (same population, same random
streams): Origin, random, ε-greedy, LinUCB, LinTS, EE-Net, NeuralUCB, in Rec the
cost-constrained ε-greedy (``egreedy_constrained``: the arms whose learnt
``info["arm_toxicity"]`` is ≤ 0 only), the three ridge bandits with a null arm
(``egreedy_null``, ``linucb_null``, ``lints_null``: ``null_reward`` = the env's
``null_arm_reward()``, so they leave a slot to the platform rather than fill it with an arm
they expect to do worse; objective form only), a hidden-state oracle of the objective and
one-line rules (Rec: always opposite stance, always most popular, always agreeing, MMR;
Exposure: mute all, let all through, everyone at 0.5, mute flagged). Per env it reports

- the Spearman rank correlation, over the policies' means, of the mean step reward with the
  objective (``info["metrics"]["objective"]``, averaged over rounds) and with the audit
  metric (Rec: civil cross-stance reactions per active user; Exposure: the final
  misinformation ratio, negated so that higher is better), with a 95% bootstrap interval
  over the seeds (the policies' order within a cluster of statistically tied policies is
  noise, and the interval says how much). The objective-form step reward is the objective
  in every env, so its correlation with the objective is 1 by construction; in Rec the same
  is reported for the slot reward (``info["metrics"]["slot_reward"]``, the arms' own credit
  ΣΔ per governed user, which the bandits learn from), under ``slot_reward_vs_*``;
- every *inverted pair*: one policy with more reward but less objective (or audit metric),
  both paired 95% CIs excluding zero;
- the best learner against the best rule on the objective (paired), the oracle's headroom
  over Origin and the share of it the best learner reaches, learners vs Origin on the
  civil cross-stance reactions and on toxicity (Rec) with the learners that raise the first
  while holding or lowering the second (paired CIs), and the round-0 reward (and Rec's
  round-0 slot reward) of the untrained LinUCB against random (paired; with
  ``--train-episodes``, the trained LinUCB's).

``--train-episodes K`` lets every learner play K training episodes on its own seeds
(1,000,000 + 100·seed + j, never an evaluation seed) before the evaluation episode, in
which it goes on learning; the rules, random, Origin and the oracle do not train.

``--reward KEY=VALUE`` (repeatable) sets a field of the env's ``RewardConfig`` for every
policy (validated by the env; e.g. ``reply_toxicity_weight``, ``clean_removal_cost``): the
trade-off between the declared objective and the audit metrics as a weight moves.

``--grid`` plays Origin, random, LinUCB and the oracle at 300, 1,000 and 3,000 users and
lever shares 0.075, 0.15 (the default) and 0.3 and reports each one's paired Δ objective vs Origin and
LinUCB − random. Writes ``zoo.json`` (``zoo_paper.json``, ``zoo_grid.json``; with
``_seeds<first>-<last>`` unless the seeds start at 0, ``_train<K>`` with training episodes,
``_<key><value>`` per reward override) to ``--out`` (default
``runs/benchmarks``, untracked) with the CPU seconds it took.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from itertools import combinations, product
from pathlib import Path
from typing import Any

import numpy as np
from trajectory_digest import library_versions

from policysim_infra.progress import add_quiet_option, progress_bar

ZOO: dict[str, dict[str, Any]] = {
    "PolicySim-Rec-v0": {
        "learners": ("egreedy", "linucb", "lints", "eenet", "neural_ucb", "egreedy_constrained"),
        "oracle": "oracle_objective",
        "rules": ("opposite", "popularity", "agreeing", "mmr"),
        "audit": ("civil_cross_reactions_per_user", 1.0),
    },
    "PolicySim-Exposure-v0": {
        "learners": ("egreedy", "linucb", "lints", "eenet", "neural_ucb"),
        "oracle": "oracle_mute",
        "rules": ("mute_all", "let_all", "half_all", "suppress_flagged"),
        "audit": ("misinformation_ratio", -1.0),
    },
}
#: the ridge bandits the zoo also plays with a null arm (``null_reward`` = the env's
#: :meth:`null_arm_reward`, 0.5 in the objective form): ``<name>_null``, objective form only
NULL_ARM_LEARNERS = ("egreedy", "linucb", "lints")
ALIASES = {
    "mute_all": "fixed_level",
    "let_all": "fixed_level",
    "half_all": "fixed_level",
    **{f"{name}_null": name for name in NULL_ARM_LEARNERS},
}
RULE_KWARGS = {"mute_all": {"level": 0.0}, "let_all": {"level": 1.0}, "half_all": {"level": 0.5}}
#: issue 20's zoo of twelve per env: the Spearman is also reported over these alone
CORE_ZOO = (
    "origin",
    "random",
    "egreedy",
    "linucb",
    "lints",
    "eenet",
    "neural_ucb",
    *(spec["oracle"] for spec in ZOO.values()),
    *(rule for spec in ZOO.values() for rule in spec["rules"]),
)
GRID_USERS = (300, 1000, 3000)
GRID_SHARES = (0.075, 0.15, 0.3)
#: seeds of learner training episodes: TRAIN_SEED_BASE + 100·seed + j (disjoint from the
#: evaluation seeds, ``seed·1000``, for seeds below 1,000)
TRAIN_SEED_BASE = 1_000_000


def play(
    env_id: str,
    policies: list[str],
    seeds: list[int],
    env_kwargs: dict[str, Any],
    quiet: bool = True,
    train_episodes: int = 0,
    learners: tuple[str, ...] = (),
) -> dict[str, list[dict[str, float]]]:
    """policy -> per seed: mean reward, objective and audit metric over the episode, final
    misinformation, round-0 reward (the episode seed is ``seed * 1000``, the runner's). The
    policies in ``learners`` first play ``train_episodes`` episodes on training seeds."""
    import gymnasium as gym

    import socialenv  # noqa: F401
    from baselines.compare import build_policy
    from socialenv.envs.episodes import play_episode

    out: dict[str, list[dict[str, float]]] = {}
    bar = progress_bar(total=len(policies) * len(seeds), desc=env_id, unit="episode", quiet=quiet)
    for name in policies:
        out[name] = []
        for seed in seeds:
            env = gym.make(env_id, **env_kwargs)
            kwargs = dict(RULE_KWARGS.get(name, {}))
            if name.endswith("_null"):
                kwargs["null_reward"] = env.unwrapped.null_arm_reward()
            policy = build_policy(ALIASES.get(name, name), env, seed, **kwargs)
            if name in learners:
                for episode in range(train_episodes):
                    play_episode(env, policy, TRAIN_SEED_BASE + 100 * seed + episode)
            rows = play_episode(env, policy, seed * 1000)
            env.close()
            mean = {
                key: float(np.mean([r[key] for r in rows]))
                for key in (
                    "reward",
                    "slot_reward",
                    "objective",
                    "civil_cross_reactions_per_user",
                    "cross_interaction_ratio",
                    "toxicity",
                    "engagement",
                    "policy_share",
                    "exposure_removed",
                )
                if key in rows[0]
            }
            mean["misinformation_ratio"] = float(rows[-1]["misinformation_ratio"])
            mean["reward_round0"] = float(rows[0]["reward"])
            if "slot_reward" in rows[0]:
                mean["slot_reward_round0"] = float(rows[0]["slot_reward"])
            out[name].append(mean)
            bar.update()
    bar.close()
    return out


def ci(values: np.ndarray) -> dict[str, float]:
    from baselines.compare import mean_ci95

    return mean_ci95(list(values))


def diff(
    results: dict[str, list[dict[str, float]]], a: str, b: str, key: str, sign: float = 1.0
) -> dict[str, float]:
    """Paired a − b of ``key`` (× ``sign``): mean and 95% CI half-width over seeds."""
    return ci(
        np.array([sign * (x[key] - y[key]) for x, y in zip(results[a], results[b], strict=True)])
    )


def excludes_zero(cell: dict[str, float]) -> bool:
    return cell["ci95"] is not None and abs(cell["mean"]) > cell["ci95"]


def spearman_interval(
    results: dict[str, list[dict[str, float]]],
    target: str,
    sign: float,
    reward_key: str = "reward",
    resamples: int = 2000,
) -> list[float] | None:
    """95% percentile-bootstrap interval of Spearman(mean ``reward_key``, ``sign`` × mean
    ``target``) over the policies, resampling the seeds (paired: one draw of seeds for every
    policy; the bootstrap's generator is seeded, so the interval is reproducible). None with
    fewer than 3 seeds."""
    from scipy import stats

    names = list(results)
    reward = np.array([[r[reward_key] for r in results[n]] for n in names])  # (P, S)
    value = sign * np.array([[r[target] for r in results[n]] for n in names])
    if reward.shape[1] < 3:
        return None

    def spearman(seeds: np.ndarray) -> float:
        seeds = seeds.astype(np.int64)
        return float(
            stats.spearmanr(reward[:, seeds].mean(axis=1), value[:, seeds].mean(axis=1)).statistic
        )

    result = stats.bootstrap(
        (np.arange(reward.shape[1]),),
        spearman,
        vectorized=False,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    interval = result.confidence_interval
    return [float(interval.low), float(interval.high)]


def analyse(
    env_id: str,
    results: dict[str, list[dict[str, float]]],
    trained: bool = False,
    learners: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    from scipy import stats

    spec = {**ZOO[env_id], **({} if learners is None else {"learners": learners})}
    audit, sign = spec["audit"]
    names = list(results)
    means = {
        n: {k: float(np.mean([r[k] for r in results[n]])) for k in results[n][0]} for n in names
    }
    report: dict[str, Any] = {"means": means}
    # the step reward, and in Rec the arms' own credit (ΣΔ per governed user) beside it
    reward_keys = ["reward", *(["slot_reward"] if "slot_reward" in results[names[0]][0] else [])]
    for reward_key, (target, tsign) in product(reward_keys, (("objective", 1.0), (audit, sign))):
        reward = [means[n][reward_key] for n in names]
        value = [tsign * means[n][target] for n in names]
        inverted = []
        for a, b in combinations(names, 2):
            d_reward = diff(results, a, b, reward_key)
            d_target = diff(results, a, b, target, tsign)
            if (
                excludes_zero(d_reward)
                and excludes_zero(d_target)
                and np.sign(d_reward["mean"]) != np.sign(d_target["mean"])
            ):
                inverted.append({"pair": [a, b], reward_key: d_reward, target: d_target})
        core = [i for i, n in enumerate(names) if n in CORE_ZOO]
        prefix = "" if reward_key == "reward" else f"{reward_key}_"
        report[f"{prefix}vs_{target}"] = {
            "spearman": float(stats.spearmanr(reward, value).statistic),
            # over issue 20's twelve policies (without the null-arm and constrained learners)
            "spearman_without_null_arm": float(
                stats.spearmanr([reward[i] for i in core], [value[i] for i in core]).statistic
            ),
            "spearman_ci95": spearman_interval(results, target, tsign, reward_key),
            "inverted_pairs": inverted,
        }
    # how far the objective itself ranks the zoo as the audit metric does: a reward equal
    # to the objective could do no better against the audit metric
    objective_means = [means[n]["objective"] for n in names]
    audit_means = [sign * means[n][audit] for n in names]
    report["objective_vs_audit_spearman"] = float(
        stats.spearmanr(objective_means, audit_means).statistic
    )
    learners = [p for p in spec["learners"] if p in results]
    rules = [p for p in spec["rules"] if p in results]
    best_learner = max(learners, key=lambda p: means[p]["objective"])
    best_rule = max(rules, key=lambda p: means[p]["objective"])
    oracle = spec["oracle"]
    headroom = diff(results, oracle, "origin", "objective")
    reached = diff(results, best_learner, "origin", "objective")
    report["best_learner_vs_best_rule"] = {
        "learner": best_learner,
        "rule": best_rule,
        "objective": diff(results, best_learner, best_rule, "objective"),
    }
    report["headroom"] = {
        "oracle": oracle,
        "oracle_vs_origin": headroom,
        "best_learner": best_learner,
        "best_learner_vs_origin": reached,
        "share_reached": reached["mean"] / headroom["mean"] if headroom["mean"] else None,
    }
    report["learners_vs_origin"] = {
        p: {
            k: diff(results, p, "origin", k)
            for k in (
                "objective",
                "civil_cross_reactions_per_user",
                "cross_interaction_ratio",
                "toxicity",
                "misinformation_ratio",
            )
            if k in results[p][0]
        }
        for p in [*learners, oracle]
    }
    if "civil_cross_reactions_per_user" in results["origin"][0]:
        # the paper's direction: more civil dialogue across stances, toxicity lowered or held
        # (its paired 95% CI vs Origin reaches zero or lies below it)
        report["dialogue_without_more_toxicity"] = [
            p
            for p in learners
            if report["learners_vs_origin"][p]["civil_cross_reactions_per_user"]["mean"]
            > report["learners_vs_origin"][p]["civil_cross_reactions_per_user"]["ci95"]
            and report["learners_vs_origin"][p]["toxicity"]["mean"]
            <= report["learners_vs_origin"][p]["toxicity"]["ci95"]
        ]
    key = "trained_linucb_round0_vs_random" if trained else "untrained_linucb_round0_vs_random"
    report[key] = diff(results, "linucb", "random", "reward_round0")
    if "slot_reward_round0" in results["linucb"][0]:
        report[f"{key}_slot_reward"] = diff(results, "linucb", "random", "slot_reward_round0")
    return report


def grid(
    env_id: str, seeds: list[int], rounds: int, reward: dict[str, Any], quiet: bool = True
) -> list[dict[str, Any]]:
    rows = []
    oracle = ZOO[env_id]["oracle"]
    bar = progress_bar(
        total=len(GRID_USERS) * len(GRID_SHARES), desc=env_id, unit="cell", quiet=quiet
    )
    for users in GRID_USERS:
        for share in GRID_SHARES:
            kwargs = {
                "num_users": users,
                "rounds": rounds,
                "lever_share": share,
                "reward": reward,
            }
            start = time.process_time()
            res = play(env_id, ["origin", "random", "linucb", oracle], seeds, kwargs)
            row = {
                "users": users,
                "lever_share": share,
                "policy_share": float(np.mean([r["policy_share"] for r in res[oracle]])),
                "oracle_vs_origin": diff(res, oracle, "origin", "objective"),
                "linucb_vs_origin": diff(res, "linucb", "origin", "objective"),
                "random_vs_origin": diff(res, "random", "origin", "objective"),
                "linucb_vs_random": diff(res, "linucb", "random", "objective"),
                "cpu_seconds": time.process_time() - start,
            }
            rows.append(row)
            print(
                f"{env_id} {users} users share {share}: policy share {row['policy_share']:.2f}, "
                f"oracle {fmt(row['oracle_vs_origin'])}, linucb {fmt(row['linucb_vs_origin'])}, "
                f"linucb-random {fmt(row['linucb_vs_random'])}",
                flush=True,
            )
            bar.update()
    bar.close()
    return rows


def parse_reward_overrides(
    parser: argparse.ArgumentParser, items: list[str]
) -> dict[str, float | str]:
    """``["key=value", ...]`` -> {key: value}, a number where the value reads as one, else the
    text (e.g. ``step=slots``); the env validates the keys and values."""
    overrides: dict[str, float | str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            parser.error(
                f"--reward takes KEY=VALUE, e.g. hostile_weight=2 or step=slots; got {item!r}"
            )
        try:
            overrides[key] = float(value)
        except ValueError:
            overrides[key] = value
    return overrides


def override_suffix(overrides: dict[str, float | str]) -> str:
    """The file-name part of ``--reward`` overrides: ``_<key><value>`` each."""
    return "".join(
        f"_{key}{value:g}" if isinstance(value, float) else f"_{key}{value}"
        for key, value in overrides.items()
    )


def fmt(cell: dict[str, float]) -> str:
    if cell["ci95"] is None:
        return f"{cell['mean']:+.4f}"
    return f"{cell['mean']:+.4f} ± {cell['ci95']:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--reward-form", choices=("objective", "paper"), default="objective")
    parser.add_argument(
        "--train-episodes",
        type=int,
        default=0,
        help="training episodes each learner plays on its own seeds before the evaluation one",
    )
    parser.add_argument("--envs", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument(
        "--grid", action="store_true", help="sizes × lever shares instead of the zoo"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    parser.add_argument(
        "--reward",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RewardConfig field for every policy, e.g. reply_toxicity_weight=8 or step=slots "
        "(repeatable)",
    )
    add_quiet_option(parser)
    args = parser.parse_args()
    if args.train_episodes < 0:
        parser.error("--train-episodes must be >= 0")
    overrides = parse_reward_overrides(parser, args.reward)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    start = time.process_time()
    report: dict[str, Any] = {
        "config": {
            "seeds": seeds,
            "users": args.users,
            "rounds": args.rounds,
            "reward_form": args.reward_form,
            "grid": args.grid,
            "train_episodes": args.train_episodes,
            "reward_overrides": overrides,
            "versions": library_versions(),  # the trajectories depend on them
        }
    }
    for env_id in args.envs:
        if args.grid:
            reward = {"form": args.reward_form, **overrides}
            report[env_id] = grid(env_id, seeds, args.rounds, reward, args.quiet)
            continue
        spec = dict(ZOO[env_id])
        if args.reward_form == "objective":
            spec["learners"] = (*spec["learners"], *(f"{n}_null" for n in NULL_ARM_LEARNERS))
        else:  # the paper form reports no per-arm costs for the constrained learner to learn
            spec["learners"] = tuple(p for p in spec["learners"] if p != "egreedy_constrained")
        policies = ["origin", "random", *spec["learners"], spec["oracle"], *spec["rules"]]
        kwargs = {
            "num_users": args.users,
            "rounds": args.rounds,
            "reward": {"form": args.reward_form, **overrides},
        }
        results = play(
            env_id, policies, seeds, kwargs, args.quiet, args.train_episodes, spec["learners"]
        )
        a = analyse(env_id, results, trained=args.train_episodes > 0, learners=spec["learners"])
        report[env_id] = {"per_seed": results, **a}
        audit = spec["audit"][0]
        print(f"\n{env_id} ({args.reward_form} reward), {len(seeds)} seeds")
        print(
            f"{'policy':18s} {'reward':>9s} {'objective':>10s} {audit[:24]:>24s} {'toxicity':>9s} "
            f"{'cross ratio':>11s} {'policy share':>12s}"
        )
        for name in policies:
            m = a["means"][name]
            print(
                f"{name:18s} {m['reward']:+9.4f} {m['objective']:+10.4f} {m[audit]:24.4f} "
                f"{m['toxicity']:9.4f} {m['cross_interaction_ratio']:11.4f} {m['policy_share']:12.3f}"
            )
        for prefix, target in product(("", "slot_reward_"), ("objective", audit)):
            if f"{prefix}vs_{target}" not in a:
                continue
            v = a[f"{prefix}vs_{target}"]
            interval = v["spearman_ci95"]
            bounds = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
            print(
                f"{'slot' if prefix else 'step'} reward vs {target}: Spearman {v['spearman']:.3f}{bounds} (95% CI, "
                f"seeds resampled; {v['spearman_without_null_arm']:.3f} over issue 20's twelve), "
                f"inverted pairs {[p['pair'] for p in v['inverted_pairs']]}"
            )
        print(
            f"objective vs {audit} (no reward involved): Spearman {a['objective_vs_audit_spearman']:.3f}"
        )
        b = a["best_learner_vs_best_rule"]
        print(
            f"best learner {b['learner']} − best rule {b['rule']} on the objective: {fmt(b['objective'])}"
        )
        h = a["headroom"]
        print(
            f"headroom: {h['oracle']} − origin {fmt(h['oracle_vs_origin'])}; {h['best_learner']} − origin "
            f"{fmt(h['best_learner_vs_origin'])} ({h['share_reached']:.2f} of it)"
        )
        for p, cells in a["learners_vs_origin"].items():
            print(f"  {p} − origin: " + ", ".join(f"{k} {fmt(c)}" for k, c in cells.items()))
        if "dialogue_without_more_toxicity" in a:
            print(
                "learners raising civil cross-stance reactions with toxicity held or lowered: "
                f"{a['dialogue_without_more_toxicity']}"
            )
        if args.train_episodes:
            label, key = f"LinUCB after {args.train_episodes} training episodes", "trained"
        else:
            label, key = "untrained LinUCB", "untrained"
        print(f"{label} − random, round-0 reward: {fmt(a[f'{key}_linucb_round0_vs_random'])}")
        if f"{key}_linucb_round0_vs_random_slot_reward" in a:
            cell = a[f"{key}_linucb_round0_vs_random_slot_reward"]
            print(f"{label} − random, round-0 slot reward: {fmt(cell)}")
    report["cpu_seconds"] = time.process_time() - start
    report["load_average"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    name = "zoo_grid" if args.grid else f"zoo{'' if args.reward_form == 'objective' else '_paper'}"
    if args.first_seed:
        name += f"_seeds{seeds[0]}-{seeds[-1]}"
    if args.train_episodes:
        name += f"_train{args.train_episodes}"
    name += override_suffix(overrides)
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path} ({report['cpu_seconds']:.0f} s CPU)")


if __name__ == "__main__":
    main()
