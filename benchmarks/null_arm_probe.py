"""Probe: Rec bandits that may leave a slot to the built-in recommender (a null arm).

    python benchmarks/null_arm_probe.py                         # seeds 0-4
    python benchmarks/null_arm_probe.py --first-seed 10 --seeds 10
    python benchmarks/null_arm_probe.py --out benchmarks/results/null_arm_probe   # publish

The bandits pick ``budget`` arms for every sampled user, so a hostile-prone receiver gets
the policy's posts whatever it predicts (``benchmarks/toxicity_sources.py``). In the Rec
env's objective-form reward 0.5 means "as good as the built-in slot", and the slate form
leaves a slot to the built-in recommender with ``no_op``. This probe bolts a null arm onto
ridge bandits without changing the package: each bandit learns the reward centred on 0.5
(r − 0.5, so its untrained estimate, 0, is the null arm's value), the env's usual slate is
built (``select_action``), and every picked arm whose score is below 0 is replaced by
``no_op``. Policies: ``<name>`` as shipped and ``<name>+null``; every one plays the same
seeds (paired against Origin). It is a probe of a design, not a shipped policy: the null
arm is not in ``bandits.slate.select_per_group`` nor in the OPE propensities. Writes
``null_arm_probe.json`` (``_seeds<first>-<last>`` unless the seeds start at 0) to ``--out``
(default ``runs/benchmarks``, untracked).
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
from zoo import diff, fmt

from policysim_infra.progress import add_quiet_option, progress_bar

ENV_ID = "PolicySim-Rec-v0"
#: the ridge bandits the probe can centre (their ``_update`` feeds one ``OnlineRidge``)
RIDGE_BANDITS = ("egreedy", "linucb", "lints")
KEYS = ("objective", "civil_cross_reactions_per_user", "toxicity", "policy_share")
NULL_VALUE = 0.5


def centre_rewards(policy: Any) -> None:
    """Make ``policy`` learn r − ``NULL_VALUE`` from the rewards its public ``update`` has
    validated (in [0, 1]): the ridge then starts at the null arm's value."""
    learn = policy._update

    def centred(contexts: np.ndarray, rewards: np.ndarray) -> None:
        learn(contexts, rewards - NULL_VALUE)

    policy._update = centred


def play_with_null_arm(env: Any, policy: Any, seed: int, null_arm: bool) -> list[dict[str, Any]]:
    """One episode; with ``null_arm`` the policy learns r − 0.5 and a picked arm whose score
    is below 0 leaves its slot to the built-in recommender."""
    from socialenv.envs.policy_registry import select_action

    base = env.unwrapped
    if null_arm:
        centre_rewards(policy)
    obs, _ = env.reset(seed=seed)
    rows: list[dict[str, Any]] = []
    done = False
    while not done:
        action = select_action(policy, obs, base)
        if null_arm:
            scores = np.asarray(policy.scores(obs["arms"]), np.float64)
            picked = action != base.no_op
            below = np.zeros(len(action), bool)
            below[picked] = scores[action[picked]] < 0.0
            action = np.where(below, base.no_op, action)
        arms = obs["arms"]
        obs, _, terminated, truncated, info = env.step(action)
        applied = info["arm_applied"]
        if applied.any():
            policy.update(arms[info["arm_indices"][applied]], info["arm_rewards"][applied])
        rows.append(dict(info["metrics"]))
        done = bool(terminated or truncated)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bandits", nargs="+", default=list(RIDGE_BANDITS), choices=RIDGE_BANDITS)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    add_quiet_option(parser)
    args = parser.parse_args()

    import gymnasium as gym

    import socialenv  # noqa: F401
    from baselines.compare import build_policy

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    policies = ["origin", *args.bandits, *(f"{b}+null" for b in args.bandits)]
    start = time.process_time()
    results: dict[str, list[dict[str, float]]] = {}
    bar = progress_bar(
        total=len(policies) * len(seeds), desc=ENV_ID, unit="episode", quiet=args.quiet
    )
    for name in policies:
        results[name] = []
        bandit, null_arm = name.removesuffix("+null"), name.endswith("+null")
        for seed in seeds:
            env = gym.make(ENV_ID, num_users=args.users, rounds=args.rounds)
            policy = build_policy(bandit, env, seed)
            rows = play_with_null_arm(env, policy, seed * 1000, null_arm)
            env.close()
            results[name].append({k: float(np.mean([r[k] for r in rows])) for k in KEYS})
            bar.update()
    bar.close()
    versus_origin = {
        name: {key: diff(results, name, "origin", key) for key in KEYS}
        for name in policies
        if name != "origin"
    }
    print(f"{ENV_ID}, seeds {seeds[0]}-{seeds[-1]}, paired Δ vs Origin")
    for name, cells in versus_origin.items():
        print(f"{name:14s} " + ", ".join(f"{k} {fmt(c)}" for k, c in cells.items()))
    report = {
        "config": {
            "env_id": ENV_ID,
            "seeds": seeds,
            "users": args.users,
            "rounds": args.rounds,
            "null_value": NULL_VALUE,
            "versions": library_versions(),
        },
        "per_seed": results,
        "vs_origin": versus_origin,
        "cpu_seconds": time.process_time() - start,
        "load_average": os.getloadavg(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "null_arm_probe" + (f"_seeds{seeds[0]}-{seeds[-1]}" if args.first_seed else "")
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path} ({report['cpu_seconds']:.0f} s CPU)")


if __name__ == "__main__":
    main()
