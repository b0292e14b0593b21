"""Where a Rec policy's extra toxicity comes from: replies split by who caused them and who wrote them.

    python benchmarks/toxicity_sources.py                               # 1,000 users, 10 rounds, seeds 0-4
    python benchmarks/toxicity_sources.py --reward hostile_toxicity=0.15
    python benchmarks/toxicity_sources.py --out benchmarks/results/toxicity_sources   # publish

Issue 20 asks for a learner that raises cross-stance dialogue while holding toxicity (the
mean toxicity of the round's texts). Every policy that raises the dialogue also raises
toxicity here; this benchmark says why. Each policy plays the same seeds (paired); every
reply of every round is put in one of eight cells:

- *policy* (a reaction to a post the policy placed) or *platform* (everything else);
- the replier's hidden toxicity propensity at or below the surrogate's
  ``civility_threshold`` (*civil*: their replies are barely toxic, whatever the stance) or
  above it (*hostile-prone*: their replies grow toxic with disagreement);
- a *cross*-stance pair or not.

Per cell it reports replies per round and their mean toxicity, and the paired change of
the round's summed reply toxicity against Origin, so the excess can be attributed; and how
well the platform's observed civility signals (the Rec arm features: the toxicity of a
user's recent posts, of their replies as its classifier scores them, the civil share of
their cross-stance reactions) rank the users' hidden toxicity propensity. The
policy's slots go to a sampled share of active users, civil and hostile-prone alike, and a
slate policy must fill them (a slate value of ``no_op`` leaves a slot to the built-in
recommender, but the bandits pick ``budget`` arms per user). Reads the hidden propensity:
a diagnostic, not something a policy sees. Writes ``toxicity_sources.json`` (with
``_seeds<first>-<last>`` unless the seeds start at 0, and ``_<key><value>`` per reward
override) to ``--out`` (default ``runs/benchmarks``, untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from trajectory_digest import library_versions
from zoo import diff, fmt, override_suffix, parse_reward_overrides

from policysim_infra.progress import add_quiet_option, progress_bar

ENV_ID = "PolicySim-Rec-v0"
POLICIES = ("origin", "random", "egreedy", "linucb", "oracle_objective", "opposite")
CELLS = tuple(
    f"{who}_{writer}_{pair}"
    for who in ("policy", "platform")
    for writer in ("civil", "hostile_prone")
    for pair in ("cross", "other")
)


#: the platform's observed civility signals (arm features of PolicySim-Rec-v0)
SIGNALS = ("recent_toxicity", "reply_toxicity", "cross_civility")


def reply_cells(env: Any) -> dict[str, float]:
    """The last round's replies per cell: count (``<cell>_n``) and summed toxicity
    (``<cell>_tox``); and, over the round's active users, the rank correlation of each
    observed civility signal with the hidden toxicity propensity (``rank_<signal>``)."""
    from scipy.stats import spearmanr

    from agent_models.types import Behaviour

    base = env.unwrapped
    result = base._last_result
    out = result.output
    reply = out.react_kind == int(Behaviour.REPLY)
    threshold = base.brain.config.civility_threshold
    civil = base.sim.users.toxicity_propensity[out.react_user] <= threshold
    caused = result.policy.reaction_choice >= 0
    cross = result.reaction_cross
    row: dict[str, float] = {}
    for who, who_mask in (("policy", caused), ("platform", ~caused)):
        for writer, writer_mask in (("civil", civil), ("hostile_prone", ~civil)):
            for pair, pair_mask in (("cross", cross), ("other", ~cross)):
                cell = reply & who_mask & writer_mask & pair_mask
                name = f"{who}_{writer}_{pair}"
                row[f"{name}_n"] = float(cell.sum())
                row[f"{name}_tox"] = float(out.react_toxicity[cell].sum())
    active = result.active
    observed = base._observed_history()
    signals = {
        "recent_toxicity": base.sim.recent_toxicity[active],
        "reply_toxicity": observed["reply_toxicity"][active],
        "cross_civility": observed["cross_civility"][active],
    }
    propensity = base.sim.users.toxicity_propensity[active]
    for signal, values in signals.items():
        row[f"rank_{signal}"] = float(spearmanr(values, propensity).statistic)
    return row


def play(
    seeds: list[int], env_kwargs: dict[str, Any], quiet: bool
) -> dict[str, list[dict[str, float]]]:
    """policy -> per seed: episode means of the toxicity metric, civil cross-stance reactions
    per active user and every cell's count and summed toxicity per round."""
    import gymnasium as gym

    import socialenv  # noqa: F401
    from baselines.compare import build_policy
    from socialenv.envs.episodes import play_episode

    results: dict[str, list[dict[str, float]]] = {}
    bar = progress_bar(total=len(POLICIES) * len(seeds), desc=ENV_ID, unit="episode", quiet=quiet)
    for name in POLICIES:
        results[name] = []
        for seed in seeds:
            env = gym.make(ENV_ID, **env_kwargs)
            policy = build_policy(name, env, seed)
            rows = play_episode(env, policy, seed * 1000, extra_metrics=reply_cells)
            env.close()
            keys = ["toxicity", "civil_cross_reactions_per_user", "objective"]
            keys += [f"{c}_{s}" for c in CELLS for s in ("n", "tox")]
            keys += [f"rank_{signal}" for signal in SIGNALS]
            means = {key: float(np.mean([r[key] for r in rows])) for key in keys}
            means["reply_toxicity_sum"] = sum(means[f"{c}_tox"] for c in CELLS)
            results[name].append(means)
            bar.update()
    bar.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--reward",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a RewardConfig field for every policy, e.g. hostile_toxicity=0.15 (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()
    overrides = parse_reward_overrides(parser, args.reward)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    start = time.process_time()
    kwargs = {"num_users": args.users, "rounds": args.rounds, "reward": overrides}
    results = play(seeds, kwargs, args.quiet)
    means = {
        name: {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
        for name, rows in results.items()
    }
    versus_origin = {
        name: {
            key: diff(results, name, "origin", key)
            for key in ("toxicity", "civil_cross_reactions_per_user", "reply_toxicity_sum")
            + tuple(f"{c}_{s}" for c in CELLS for s in ("n", "tox"))
        }
        for name in POLICIES
        if name != "origin"
    }
    print(f"{ENV_ID}, {len(seeds)} seeds, reward overrides {overrides or 'none'}")
    print("per round: replies (mean toxicity) per cell")
    for name in POLICIES:
        m = means[name]
        print(f"  {name}")
        for cell in CELLS:
            n, tox = m[f"{cell}_n"], m[f"{cell}_tox"]
            print(f"    {cell:30s} {n:7.1f} ({tox / n if n else 0.0:.3f})")
    ranks = ", ".join(
        f"{signal} {np.mean([means[p][f'rank_{signal}'] for p in POLICIES]):+.2f}"
        for signal in SIGNALS
    )
    print(f"rank correlation with the hidden toxicity propensity (active users): {ranks}")
    for name, cells in versus_origin.items():
        print(
            f"{name} − origin: toxicity {fmt(cells['toxicity'])}, civil cross / user "
            f"{fmt(cells['civil_cross_reactions_per_user'])}, summed reply toxicity per round "
            f"{fmt(cells['reply_toxicity_sum'])} of which policy × hostile-prone "
            f"{fmt(cells['policy_hostile_prone_cross_tox'])} (cross) + "
            f"{fmt(cells['policy_hostile_prone_other_tox'])} (other)"
        )
    report = {
        "config": {
            "env_id": ENV_ID,
            "seeds": seeds,
            "users": args.users,
            "rounds": args.rounds,
            "reward_overrides": overrides,
            "versions": library_versions(),
        },
        "per_seed": results,
        "means": means,
        "vs_origin": versus_origin,
        "cpu_seconds": time.process_time() - start,
        "load_average": os.getloadavg(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "toxicity_sources"
    if args.first_seed:
        name += f"_seeds{seeds[0]}-{seeds[-1]}"
    name += override_suffix(overrides)
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path} ({report['cpu_seconds']:.0f} s CPU)")


if __name__ == "__main__":
    main()
