"""Run a sweep's trials in this process or as Ray tasks, and gather the results.

Each finished or failed trial is appended to the sweep folder's ``trials.jsonl`` as soon as
it ends, so a sweep that dies keeps them (``resume=True`` runs only the others).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from policysim.sweep.config import SweepConfig, Trial
from policysim.sweep.report import SweepResult, aggregate, write_sweep
from policysim.sweep.trial import run_trial, trial_failure
from policysim_infra.extras import require
from policysim_infra.redaction import to_json
from policysim_infra.validation import did_you_mean

SWEEP_BACKENDS = ("ray", "local")


def _package_dirs() -> list[str]:
    """The folders of the PolicySim packages and of the plugins' packages
    (:mod:`policysim_infra.plugins`: ``baselines`` and ``$POLICYSIM_PLUGINS``), to ship with a
    Ray job. A plugin that is a single module, not a package, must be installed on the nodes."""
    from importlib.util import find_spec

    from policysim_infra.plugins import plugin_modules

    names = dict.fromkeys(
        [
            "policysim_infra",
            "socialenv",
            "bandits",
            "agent_models",
            "baselines",
            "policysim",
            *(m.split(".")[0] for m in plugin_modules()),
        ]
    )
    dirs = []
    for name in names:
        spec = find_spec(name)
        if spec is not None and spec.submodule_search_locations and spec.origin:
            dirs.append(str(Path(spec.origin).parent))
    return dirs


def _run_local(
    trials: list[Trial], settings: dict[str, Any], on_result: Callable[[dict[str, Any]], None]
) -> None:
    for trial in trials:
        try:
            on_result(run_trial(trial, **settings))
        except Exception as err:  # noqa: BLE001 - a failed trial is reported, the sweep goes on
            on_result(trial_failure(trial, err))


def _run_ray(
    trials: list[Trial],
    settings: dict[str, Any],
    on_result: Callable[[dict[str, Any]], None],
    address: str | None,
    num_cpus: int | None,
    cpus_per_trial: float,
    ship_code: bool,
    shutdown: bool,
) -> float:
    """Run the trials as Ray tasks; returns the seconds spent starting / joining Ray."""
    ray = require("ray", "distributed", "backend='ray'")

    started = False
    start = time.perf_counter()
    if not ray.is_initialized():
        init: dict[str, Any] = {
            "address": address,
            "include_dashboard": False,
            "log_to_driver": False,
        }
        if address is None and num_cpus is not None:
            init["num_cpus"] = num_cpus
        if ship_code:
            init["runtime_env"] = {"py_modules": _package_dirs()}
        ray.init(**init)
        started = True
    startup = time.perf_counter() - start
    try:
        remote = ray.remote(num_cpus=cpus_per_trial, max_retries=0)(run_trial)
        threads = max(1, int(round(cpus_per_trial)))
        pending = {remote.remote(t, **settings, threads=threads): t for t in trials}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                trial = pending.pop(ref)
                try:
                    on_result(ray.get(ref))
                except Exception as err:  # noqa: BLE001 - RayTaskError wraps the trial's error
                    on_result(trial_failure(trial, err))
    finally:
        if started and shutdown:
            ray.shutdown()
    return startup


def trial_identity(trial: dict[str, Any]) -> str:
    """What makes a recorded trial the same trial: its whole definition (policy, seed,
    episodes, env and policy keyword arguments), not its position in the sweep."""
    return json.dumps({k: v for k, v in trial.items() if k != "index"}, sort_keys=True, default=str)


def _finished_trials(log: Path, trials: list[Trial]) -> list[dict[str, Any]]:
    """The successful records of ``log`` whose definition equals one of ``trials`` (a trial
    run under another configuration, a failed one or a line cut short runs again)."""
    wanted = {
        trial_identity(json.loads(to_json(asdict(t)))): t for t in trials
    }  # as the log holds it
    kept: dict[str, dict[str, Any]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line cut short when the sweep died
        if (
            not isinstance(record, dict)
            or "error" in record
            or not isinstance(record.get("trial"), dict)
        ):
            continue
        trial = wanted.get(trial_identity(record["trial"]))
        if trial is not None and _plain_record(record):
            record["trial"]["index"] = trial.index
            kept[trial.name] = record
    return list(kept.values())


def _plain_record(record: dict[str, Any]) -> bool:
    """A trial record whose rows are number-valued dicts (what the report aggregates)."""

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    rows = record.get("rows")
    return (
        isinstance(rows, list)
        and bool(rows)
        and isinstance(record.get("summary"), dict)
        and number(record.get("seconds"))
        and all(
            isinstance(row, dict) and all(isinstance(k, str) and number(v) for k, v in row.items())
            for row in rows
        )
    )


def run_sweep(
    config: SweepConfig,
    backend: str = "ray",
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_trial: float = 1.0,
    ship_code: bool = False,
    shutdown: bool = True,
    progress: Callable[[dict[str, Any], int, int], None] | None = None,
    resume: bool = False,
) -> SweepResult:
    """Run every trial of ``config`` and aggregate over seeds.

    Args:
        config: the sweep.
        backend: "ray" (parallel; ``ray.init()`` starts a local cluster unless one is running
            or ``address`` names one — e.g. "auto" or "ray://head:10001") or "local" (one
            process, trials in order).
        num_cpus: CPUs of the local Ray cluster started here (default: all).
        cpus_per_trial: CPUs Ray reserves per trial (and torch threads per trial).
        ship_code: upload the PolicySim packages with the Ray job (``runtime_env``
            ``py_modules``), for cluster nodes that do not have them installed.
        shutdown: shut Ray down afterwards if this call started it.
        progress: called after each trial with (trial result, done count, total).
        resume: keep the finished trials recorded in the sweep folder's ``trials.jsonl`` and
            run only the others (failed trials run again).

    Each finished or failed trial is appended to ``trials.jsonl`` in the sweep folder as soon
    as it ends (a failed one with its error and traceback), so a sweep that dies keeps them.
    """
    if backend not in SWEEP_BACKENDS:
        raise ValueError(
            f"backend={backend!r} is not allowed: use one of {SWEEP_BACKENDS}"
            f"{did_you_mean(backend, SWEEP_BACKENDS)}"
        )
    if cpus_per_trial <= 0:
        raise ValueError(f"cpus_per_trial={cpus_per_trial!r} is not allowed: a number > 0")
    config.validate()
    trials = config.trials()
    out_dir = Path(config.out_dir) / config.name if config.out_dir else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "wandb_mode": config.wandb,
        "wandb_project": config.wandb_project,
        "group": config.name,
        "out_dir": str(out_dir / "wandb") if out_dir else None,
    }
    results: list[dict[str, Any]] = []
    log = out_dir / "trials.jsonl" if out_dir is not None else None
    if resume and log is not None and log.exists():
        results = _finished_trials(log, trials)
        done = {r["trial"]["name"] for r in results}
        trials = [t for t in trials if t.name not in done]
        tmp = log.with_name(f".{log.name}.tmp")  # only the kept records stay in the log
        tmp.write_text("".join(to_json(r) + "\n" for r in results))
        tmp.replace(log)
    elif log is not None:
        log.write_text("")
    total = len(results) + len(trials)

    def on_result(result: dict[str, Any]) -> None:
        results.append(result)
        if log is not None:
            with log.open("a") as fh:
                fh.write(to_json(result) + "\n")
        if progress is not None:
            progress(result, len(results), total)

    start = time.perf_counter()
    startup = 0.0
    if backend == "local":
        _run_local(trials, settings, on_result)
    else:
        startup = _run_ray(
            trials, settings, on_result, address, num_cpus, cpus_per_trial, ship_code, shutdown
        )
    seconds = time.perf_counter() - start
    results.sort(key=lambda r: r["trial"]["index"])
    failures = [{"trial": r["trial"]["name"], "error": r["error"]} for r in results if "error" in r]
    result = SweepResult(
        table=aggregate(results),
        trials=results,
        failures=failures,
        backend=backend,
        seconds=seconds,
        out_dir=out_dir,
        startup_seconds=startup,
    )
    if out_dir is not None:
        write_sweep(result, config, out_dir)
    return result
