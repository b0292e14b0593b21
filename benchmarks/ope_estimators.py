"""Off-policy evaluation from ε-greedy logs vs the on-policy value, on paired seeds.

For each env: the runner logs ε-greedy (``--epsilon``) for ``--seeds`` seeds (one episode
each; ``logged_rounds.npz`` holds the propensities); then every target policy (fixed,
non-learning) runs on-policy on the same seeds (the same reset seeds, so episode i of the
log and of the target start from the same world). For each target the table gives its
on-policy value (mean step reward; mean ± 95% CI over seeds) and the IPS, SNIPS and DR
estimates from the logs (± 95% CI over logged episodes), whether each estimate falls inside
the on-policy CI, and the paired difference (estimate − on-policy, per seed; mean ± 95% CI).
The same comparison restricted to the first round of each episode (``first_round``) and to
the later rounds (``later_rounds``) separates the estimators' error from the drift of the
world under the target: in round 0 the logged and the on-policy world are the same, later
the target's own earlier slates have shaped it and the log has not seen that. ``slot_value``
compares with the on-policy value of what the estimators estimate, the slate's slot rewards
/ slate size (Rec's step reward; Exposure's step reward averages over every author with
impressions, governed or not).

    python benchmarks/ope_estimators.py                      # both envs, 1,000 users, 20 seeds
    python benchmarks/ope_estimators.py --env rec --seeds 5 --users 300   # quick

Writes ``<out>/ope.json`` (default ``runs/bench-ope``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.progress import add_quiet_option, show_progress

ENVS = {"rec": "PolicySim-Rec-v0", "exposure": "PolicySim-Exposure-v0"}
TARGETS = {"rec": ("random", "popularity", "mmr"), "exposure": ("random", "suppress_flagged")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=[*ENVS, "both"], default="both")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=0.3, help="logging ε-greedy's ε")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-ope"))
    add_quiet_option(parser)
    return parser.parse_args(argv)


def _ci95(values: np.ndarray) -> float:
    from scipy import stats

    values = np.asarray(values, np.float64)
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def _compare(on_policy: np.ndarray, inclusion: np.ndarray, log: Any) -> dict[str, Any]:
    """On-policy value (per seed) vs each estimator's on ``log`` with target ``inclusion``."""
    from bandits.ope import estimate

    ci = _ci95(on_policy)
    entry: dict[str, Any] = {"on_policy": {"mean": float(on_policy.mean()), "ci95": ci}}
    for estimator in ("ips", "snips", "dr"):
        est = estimate(inclusion, log, estimator)
        diff = est.per_episode - on_policy
        entry[estimator] = {
            "value": est.value,
            "ci95": est.ci95,
            "within_on_policy_ci": bool(abs(est.value - on_policy.mean()) <= ci),
            "paired_difference": {"mean": float(diff.mean()), "ci95": _ci95(diff)},
        }
    return entry


def _rounds(log: Any, keep: np.ndarray) -> Any:
    """The logged rounds where ``keep`` (T,) holds."""
    from bandits.ope import LoggedRounds

    fields = ("contexts", "mask", "arms", "propensities", "rewards", "applied", "episode", "method")
    return LoggedRounds(
        **{k: getattr(log, k)[keep] for k in fields}, groups=log.groups, per_group=log.per_group
    )


def on_policy_episode(env: Any, policy: Any, seed: int) -> tuple[list[float], list[float]]:
    """One learning episode of ``policy`` (as :func:`baselines.play_episode`): the step reward
    and the slot value (the slate's slot rewards summed / slate size) of every round."""
    from socialenv.envs.episodes import slate_for

    obs, _ = env.reset(seed=seed)
    base = env.unwrapped
    steps, slots, done = [], [], False
    while not done:
        action = slate_for(policy, obs, env)
        arms = obs["arms"]
        obs, reward, terminated, truncated, info = env.step(action)
        applied = info["arm_applied"]
        if applied.any():
            policy.update(arms[info["arm_indices"][applied]], info["arm_rewards"][applied])
        steps.append(float(reward))
        slots.append(float(np.sum(info["arm_rewards"][applied]) / base.slate_size))
        done = bool(terminated or truncated)
    return steps, slots


def per_seed_reward(rows: list[dict[str, Any]]) -> np.ndarray:
    seeds = sorted({r["seed"] for r in rows})
    return np.asarray([np.mean([r["reward"] for r in rows if r["seed"] == s]) for s in seeds])


def bench_env(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import socialenv  # noqa: F401
    from bandits.ope import LoggedRounds, target_inclusion_and_methods
    from baselines import make_policy
    from policysim.runner import RunConfig, run

    env_id = ENVS[kind]
    seeds = tuple(range(args.seeds))
    env_kwargs = {"num_users": args.users, "rounds": args.rounds}
    common = {
        "env_id": env_id,
        "seeds": seeds,
        "env_kwargs": env_kwargs,
        "plots": False,
        "progress": show_progress(args.quiet),
        "out_dir": str(args.out / "runs"),
    }
    start, cpu = time.perf_counter(), time.process_time()
    logging_run = run(
        RunConfig(
            policy="egreedy",
            policy_kwargs={"epsilon": args.epsilon},
            run_name=f"{kind}-log-egreedy",
            **common,
        )
    )
    logging_seconds, logging_cpu = time.perf_counter() - start, time.process_time() - cpu
    log = LoggedRounds.load(logging_run.out_dir)
    env = gym.make(env_id, **env_kwargs)
    out: dict[str, Any] = {
        "env_id": env_id,
        "logging_policy": f"egreedy(epsilon={args.epsilon})",
        "logged_rounds": log.num_rounds,
        "propensity_methods": sorted(set(log.method.tolist())),
        "min_logged_propensity": float(np.nanmin(log.propensities)),
        "logging_value": float(per_seed_reward(logging_run.rows).mean()),
        "logging_seconds": round(logging_seconds, 1),
        "logging_cpu_seconds": round(logging_cpu, 1),
        "targets": {},
    }
    position = np.arange(log.num_rounds) - np.searchsorted(
        log.episode, log.episode
    )  # round in episode
    for name in TARGETS[kind]:
        # the runner's reset seeds (seed * 1000 + episode), so target and log are paired
        per_round, slot_value = map(
            np.asarray,
            zip(
                *[on_policy_episode(env, make_policy(name, env, seed=s), s * 1000) for s in seeds],
                strict=True,
            ),
        )
        policy = make_policy(name, env, seed=0)
        start, cpu = time.perf_counter(), time.process_time()
        inclusion, methods = target_inclusion_and_methods(policy, log)
        entry: dict[str, Any] = {
            "target_inclusion_seconds": round(time.perf_counter() - start, 2),
            "target_inclusion_cpu_seconds": round(time.process_time() - cpu, 2),
            "target_inclusion_methods": {
                m: int(n) for m, n in zip(*np.unique(methods, return_counts=True), strict=True)
            },
            **_compare(per_round.mean(axis=1), inclusion, log),
            # what the estimators estimate: the slate's slot rewards / slate size (Exposure's
            # step reward is the mean over every author with impressions, not only the slate's)
            "slot_value": _compare(slot_value.mean(axis=1), inclusion, log),
        }
        for part, keep in (("first_round", position == 0), ("later_rounds", position > 0)):
            entry[part] = _compare(
                per_round[:, np.unique(position[keep])].mean(axis=1),
                inclusion[keep],
                _rounds(log, keep),
            )
        out["targets"][name] = entry
    return out


def _diff(entry: dict[str, Any], estimator: str = "dr") -> str:
    d = entry[estimator]["paired_difference"]
    return f"{d['mean']:+.4f} ± {d['ci95']:.4f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    kinds = list(ENVS) if args.env == "both" else [args.env]
    result: dict[str, Any] = {
        "command": " ".join(
            ["python benchmarks/ope_estimators.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "users": args.users,
        "rounds": args.rounds,
        "seeds": args.seeds,
        "epsilon": args.epsilon,
        "envs": {kind: bench_env(kind, args) for kind in kinds},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ope.json").write_text(json.dumps(result, indent=2))
    for env in result["envs"].values():
        print(
            f"\n{env['env_id']}: {env['logged_rounds']} logged rounds of {env['logging_policy']} "
            f"(propensities: {', '.join(env['propensity_methods'])}; logged value {env['logging_value']:.4f})"
        )
        print(f"{'target':18s} {'on-policy':>17s} {'IPS':>19s} {'SNIPS':>19s} {'DR':>19s}")
        for name, t in env["targets"].items():
            cells = [
                f"{t[e]['value']:.4f} ± {t[e]['ci95']:.4f}{'' if t[e]['within_on_policy_ci'] else '*'}"
                for e in ("ips", "snips", "dr")
            ]
            print(
                f"{name:18s} {t['on_policy']['mean']:.4f} ± {t['on_policy']['ci95']:.4f} "
                + " ".join(f"{c:>19s}" for c in cells)
            )
        print(
            "DR − on-policy (paired):",
            "; ".join(
                f"{name} all {_diff(t)}, first round {_diff(t['first_round'])}, later {_diff(t['later_rounds'])}, "
                f"vs the slot value {_diff(t['slot_value'])}"
                for name, t in env["targets"].items()
            ),
        )
    print("\n* outside the on-policy 95% CI")
    return result


if __name__ == "__main__":
    main()
