"""Grid sweeps: policies × seeds × env configs, in parallel on Ray or in one process.

    from socialenv.sweep import SweepConfig, run_sweep
    config = SweepConfig(policies=("origin", "random", "linucb"), seeds=(0, 1, 2),
                         env_kwargs={"num_users": 1000}, grid={"budget": [2, 5]})
    result = run_sweep(config, backend="ray")          # or backend="local"
    print_table(result)

or from the command line, with a W&B-style grid file (``examples/sweep.yaml``)::

    policysim sweep --grid examples/sweep.yaml                     # local Ray cluster
    policysim sweep --grid examples/sweep.yaml --address auto      # an existing cluster
    policysim sweep --grid examples/sweep.yaml --backend local     # no Ray, one process

Every (policy, config, seed) is one *trial*: a fresh env and a fresh policy, ``episodes``
episodes from ``reset(seed=seed * 1000 + episode)`` (the runner's convention), each round
logged to Weights & Biases when ``wandb`` is set (one W&B run per trial, grouped by the
sweep name). The sweep writes ``<out_dir>/<name>/sweep.json`` (config, per-trial results,
the table) and ``rounds.csv`` (every round of every trial), and returns the table: per
(policy, config), the mean ± 95% CI over seeds of the final metrics (``summarize`` of the
runner) plus HiSim's ``bias`` / ``diversity`` of the latent opinions.

Ray is imported only on the Ray path (extra ``distributed``); on a cluster every node must
be able to import ``socialenv``, ``bandits``, ``agent_models`` and ``baselines`` (install
the package on each node, or pass ``ship_code=True`` to upload them with the job's
``runtime_env``). See ``docs/scaling.md``.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_models.redaction import to_json
from agent_models.validation import Limit, check_fields, check_path_segment
from socialenv.runner import format_mean_ci

SWEEP_BACKENDS = ("ray", "local")
WANDB_MODES = ("online", "offline", "disabled")
#: Grid-file parameters that are not env arguments.
RUN_PARAMETERS = ("env_id", "policy", "seed", "episodes", "policy_kwargs")
#: Metrics in the printed table (all metrics are in the JSON).
TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("reward", "reward"),
    ("cross_interaction_ratio", "cross"),
    ("toxicity", "toxicity"),
    ("stance_mean", "stance"),
    ("stance_std", "stance std"),
    ("misinformation_ratio", "misinfo"),
    ("bias", "bias"),
    ("diversity", "diversity"),
)


#: Documented limits of :class:`SweepConfig`.
SWEEP_LIMITS = {"seeds": Limit(ge=0, le=2_000_000), "episodes": Limit(ge=1, le=1_000_000)}


@dataclass
class SweepConfig:
    """What to sweep.

    Attributes:
        name: sweep name (output folder, W&B group).
        env_id: the env.
        policies: policy names (origin, any bandit, any baseline of ``baselines``).
        seeds: seeds; each is one trial per (policy, config).
        episodes: episodes per trial (the policy keeps learning across them).
        env_kwargs: env arguments shared by every trial.
        grid: env arguments to vary: name -> list of values; the configs are their
            cartesian product (no grid = one config).
        policy_kwargs: policy name -> its hyper-parameters.
        wandb: None (no W&B), "online", "offline" or "disabled".
        wandb_project: W&B project.
        out_dir: parent folder of the sweep folder (None = write nothing).
    """

    name: str = "sweep"
    env_id: str = "PolicySim-Rec-v0"
    policies: Sequence[str] = ("origin", "random")
    seeds: Sequence[int] = (0,)
    episodes: int = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    policy_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    wandb: str | None = None
    wandb_project: str = "policysim"
    out_dir: str | None = "runs/sweeps"

    def __post_init__(self) -> None:
        check_fields(self, "", SWEEP_LIMITS)
        check_path_segment(self.name, "name")
        if not self.policies:
            raise ValueError("policies must name at least one policy")
        if not self.seeds:
            raise ValueError("seeds must name at least one seed")
        if not isinstance(self.episodes, int) or self.episodes < 1:
            raise ValueError(f"episodes={self.episodes!r} is not allowed: an integer >= 1")
        if self.wandb is not None and self.wandb not in WANDB_MODES:
            raise ValueError(f"wandb={self.wandb!r} is not allowed: one of {WANDB_MODES} or None")
        for key, values in self.grid.items():
            if not isinstance(values, list | tuple) or not values:
                raise ValueError(f"grid[{key!r}] must be a non-empty list of values; got {values!r}")
            if key in RUN_PARAMETERS:
                raise ValueError(f"grid[{key!r}]: {key} is set by the sweep itself, not varied as an env argument")
        unknown = set(self.policy_kwargs) - set(self.policies)
        if unknown:
            raise ValueError(f"policy_kwargs names policies not in the sweep: {sorted(unknown)}")

    def validate(self) -> None:
        """Check policy names and env arguments before any trial starts."""
        from socialenv.config import EnvConfig
        from socialenv.registration import ENV_IDS
        from socialenv.runner import policy_names

        if self.env_id not in ENV_IDS:
            raise ValueError(f"env_id={self.env_id!r} is not allowed: use one of {sorted(ENV_IDS)}")
        allowed = policy_names()
        bad = [p for p in self.policies if p not in allowed]
        if bad:
            raise ValueError(f"unknown policy name(s) {bad}: use any of {allowed}")
        from socialenv.runner import check_population

        check_population(self.env_kwargs.get("users", "surrogate"), "env_kwargs['users']")
        for i, users in enumerate(self.grid.get("users", [])):
            check_population(users, f"grid['users'][{i}]")
        names = set(EnvConfig.__dataclass_fields__)
        unknown = (set(self.env_kwargs) | set(self.grid)) - names
        if unknown:
            raise ValueError(f"unknown env argument(s) {sorted(unknown)}; allowed: {sorted(names)}")

    def configs(self) -> list[dict[str, Any]]:
        """The grid's configs (each a dict of the varied env arguments)."""
        keys = list(self.grid)
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(self.grid[k] for k in keys))]

    def trials(self) -> list[Trial]:
        """All trials, policy-major, then config, then seed."""
        out = []
        for policy in self.policies:
            for ci, cfg in enumerate(self.configs()):
                for seed in self.seeds:
                    out.append(Trial(
                        index=len(out), name=f"{policy}-c{ci}-s{seed}", env_id=self.env_id,
                        policy=policy, seed=seed, episodes=self.episodes, config_index=ci,
                        config=cfg, env_kwargs={**self.env_kwargs, **cfg},
                        policy_kwargs=dict(self.policy_kwargs.get(policy, {})),
                    ))
        return out


@dataclass
class Trial:
    """One (policy, config, seed) run of a sweep."""

    index: int
    name: str
    env_id: str
    policy: str
    seed: int
    episodes: int
    config_index: int
    config: dict[str, Any]
    env_kwargs: dict[str, Any]
    policy_kwargs: dict[str, Any]


@dataclass
class SweepResult:
    """What a sweep returns.

    Attributes:
        table: one dict per (policy, config): ``policy``, ``config``, ``config_index``,
            ``seeds``, ``seconds`` (mean trial time) and, per metric, ``{"mean", "ci95"}``.
        trials: per trial: its definition, ``rows`` (every round), ``summary``, ``seconds``,
            ``host``; failed trials carry ``error`` instead.
        failures: the failed trials' names and errors.
        backend, seconds: how and how long (wall clock) the sweep ran.
        startup_seconds: part of ``seconds`` spent starting / connecting to Ray.
        out_dir: the sweep folder (None if nothing was written).
    """

    table: list[dict[str, Any]]
    trials: list[dict[str, Any]]
    failures: list[dict[str, str]]
    backend: str
    seconds: float
    out_dir: Path | None = None
    startup_seconds: float = 0.0


# ----------------------------------------------------------------------------- grid files
def load_grid(path: str | Path) -> SweepConfig:
    """Read a grid file in the W&B sweep format (``method: grid``)::

        name: rec-policies
        method: grid
        metric: {name: reward, goal: maximize}
        parameters:
          env_id: {value: PolicySim-Rec-v0}
          policy: {values: [origin, random, linucb]}
          seed: {values: [0, 1, 2]}
          num_users: {value: 1000}
          budget: {values: [2, 5]}
          policy_kwargs: {value: {linucb: {alpha: 1.0}}}

    ``policy``, ``seed``, ``env_id``, ``episodes`` and ``policy_kwargs`` configure the sweep;
    every other parameter is an env argument (``value`` = fixed, ``values`` = varied). The
    same file drives a native W&B sweep (``wandb sweep``), whose agent runs
    ``examples/wandb_sweep.py`` once per combination.
    """
    import yaml

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"grid file {path} does not exist")
    spec = yaml.safe_load(path.read_text()) or {}
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict):
        raise ValueError(f"{path}: a grid file needs a 'parameters' mapping (W&B sweep format)")
    method = spec.get("method", "grid")
    if method != "grid":
        raise ValueError(f"{path}: method={method!r} is not allowed: policysim sweep runs 'grid' sweeps")
    fixed: dict[str, Any] = {}
    varied: dict[str, list[Any]] = {}
    for key, param in spec["parameters"].items():
        if not isinstance(param, dict) or not ({"value", "values"} & set(param)):
            raise ValueError(f"{path}: parameter {key!r} needs 'value' or 'values' (grid sweeps take no distributions)")
        if "values" in param:
            if not isinstance(param["values"], list) or not param["values"]:
                raise ValueError(f"{path}: parameter {key!r}: 'values' must be a non-empty list")
            varied[key] = list(param["values"])
        else:
            fixed[key] = param["value"]

    def take(key: str, default: Any) -> list[Any]:
        if key in varied:
            return varied.pop(key)
        return [fixed.pop(key)] if key in fixed else default

    env_ids = take("env_id", ["PolicySim-Rec-v0"])
    if len(env_ids) != 1:
        raise ValueError(f"{path}: env_id must have a single value (run one sweep per env)")
    episodes = take("episodes", [1])
    if len(episodes) != 1:
        raise ValueError(f"{path}: episodes must have a single value")
    policy_kwargs = take("policy_kwargs", [{}])
    if len(policy_kwargs) != 1 or not isinstance(policy_kwargs[0], dict):
        raise ValueError(f"{path}: policy_kwargs must be a single mapping policy -> hyper-parameters")
    return SweepConfig(
        name=str(spec.get("name", path.stem)), env_id=str(env_ids[0]),
        policies=tuple(take("policy", ["origin", "random"])), seeds=tuple(take("seed", [0])),
        episodes=int(episodes[0]), env_kwargs=fixed, grid=varied, policy_kwargs=policy_kwargs[0],
    )


# ----------------------------------------------------------------------------- one trial
def _resolve_env_kwargs(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The env arguments of a trial (population names such as ``"lorenz"`` are resolved by
    the env itself, one fresh brain per env: :func:`agent_models.factory.make_brain`)."""
    return dict(env_kwargs)


def run_trial(trial: Trial, *, wandb_mode: str | None = None, wandb_project: str = "policysim",
              group: str = "sweep", out_dir: str | None = None, threads: int | None = None,
              wandb_run: Any = None) -> dict[str, Any]:
    """Run one trial; returns its definition, rows (one per round), summary and timing.

    Args:
        trial: what to run.
        wandb_mode: start a W&B run in this mode (None = no W&B, unless ``wandb_run``).
        wandb_project, group: W&B project and group (the sweep name).
        out_dir: folder for the W&B files of the trial.
        threads: torch threads for the policy (1 on a Ray worker, so trials do not fight
            over cores); None leaves torch's setting.
        wandb_run: an already started W&B run to log into (a W&B sweep agent's run).
    """
    import gymnasium as gym

    import socialenv  # noqa: F401 - registers the env ids
    from baselines.episodes import opinion_metrics, play_episode
    from baselines.policies import make_policy
    from socialenv.runner import summarize

    if threads is not None:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    start = time.perf_counter()
    own_run = False
    if wandb_run is None and wandb_mode is not None:
        import wandb

        run_dir = Path(out_dir) if out_dir else None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
        wandb_run = wandb.init(
            project=wandb_project, group=group, name=trial.name, job_type=trial.policy,
            mode=wandb_mode, dir=str(run_dir) if run_dir else None, reinit="finish_previous",
            config={**_jsonable(asdict(trial))},
            settings=wandb.Settings(silent=True, console="off"),  # one line per trial is enough
        )
        own_run = True
    env = gym.make(trial.env_id, **_resolve_env_kwargs(trial.env_kwargs))
    rows: list[dict[str, Any]] = []
    try:
        policy = make_policy(trial.policy, env, trial.seed, **trial.policy_kwargs)
        for episode in range(trial.episodes):
            for row in play_episode(env, policy, trial.seed * 1000 + episode, extra_metrics=opinion_metrics):
                row = {"seed": trial.seed, "episode": episode, **row}
                if wandb_run is not None:
                    wandb_run.log({k: v for k, v in row.items() if k != "seed"}, step=len(rows))
                rows.append(row)
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")]
        summary = summarize(rows, keys)
        if wandb_run is not None:
            wandb_run.summary.update({f"final/{k}": v["mean"] for k, v in summary.items() if isinstance(v, dict) and "mean" in v})
    finally:
        env.close()
        if own_run:
            wandb_run.finish()
    return {
        "trial": _jsonable(asdict(trial)), "rows": rows, "summary": summary,
        "seconds": time.perf_counter() - start, "host": socket.gethostname(), "pid": os.getpid(),
    }


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data with secrets redacted (:mod:`agent_models.redaction`)."""
    from agent_models.redaction import to_json_data

    return to_json_data(value)


# ----------------------------------------------------------------------------- backends
def _package_dirs() -> list[str]:
    import agent_models
    import bandits
    import baselines
    import socialenv

    return [str(Path(m.__file__).parent) for m in (socialenv, bandits, agent_models, baselines)]


def _run_local(trials: list[Trial], settings: dict[str, Any],
               on_result: Callable[[dict[str, Any]], None]) -> None:
    for trial in trials:
        try:
            on_result(run_trial(trial, **settings))
        except Exception as err:  # noqa: BLE001 - a failed trial is reported, the sweep goes on
            on_result(_failure(trial, err))


def _failure(trial: Trial, err: BaseException) -> dict[str, Any]:
    """The record of a failed trial: its definition, the error and where it was raised."""
    import traceback

    return {"trial": _jsonable(asdict(trial)), "error": f"{type(err).__name__}: {err}",
            "traceback": "".join(traceback.format_exception(err, limit=-8))}


def _run_ray(trials: list[Trial], settings: dict[str, Any], on_result: Callable[[dict[str, Any]], None],
             address: str | None, num_cpus: int | None, cpus_per_trial: float, ship_code: bool,
             shutdown: bool) -> float:
    """Run the trials as Ray tasks; returns the seconds spent starting / joining Ray."""
    import ray

    started = False
    start = time.perf_counter()
    if not ray.is_initialized():
        init: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False}
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
                    on_result(_failure(trial, err))
    finally:
        if started and shutdown:
            ray.shutdown()
    return startup


def run_sweep(config: SweepConfig, backend: str = "ray", *, address: str | None = None,
              num_cpus: int | None = None, cpus_per_trial: float = 1.0, ship_code: bool = False,
              shutdown: bool = True, progress: Callable[[dict[str, Any], int, int], None] | None = None,
              resume: bool = False) -> SweepResult:
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
        raise ValueError(f"backend={backend!r} is not allowed: use one of {SWEEP_BACKENDS}")
    if cpus_per_trial <= 0:
        raise ValueError(f"cpus_per_trial={cpus_per_trial!r} is not allowed: a number > 0")
    config.validate()
    trials = config.trials()
    out_dir = Path(config.out_dir) / config.name if config.out_dir else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "wandb_mode": config.wandb, "wandb_project": config.wandb_project, "group": config.name,
        "out_dir": str(out_dir / "wandb") if out_dir else None,
    }
    results: list[dict[str, Any]] = []
    log = out_dir / "trials.jsonl" if out_dir is not None else None
    if resume and log is not None and log.exists():
        names = {t.name for t in trials}
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the sweep died
            if "error" not in record and record.get("trial", {}).get("name") in names:
                names.discard(record["trial"]["name"])
                results.append(record)
        trials = [t for t in trials if t.name in names]
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
        startup = _run_ray(trials, settings, on_result, address, num_cpus, cpus_per_trial, ship_code, shutdown)
    seconds = time.perf_counter() - start
    results.sort(key=lambda r: r["trial"]["index"])
    failures = [{"trial": r["trial"]["name"], "error": r["error"]} for r in results if "error" in r]
    result = SweepResult(table=aggregate(results), trials=results, failures=failures,
                         backend=backend, seconds=seconds, out_dir=out_dir, startup_seconds=startup)
    if out_dir is not None:
        write_sweep(result, config, out_dir)
    return result


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (policy, config): mean ± 95% CI over seeds of each metric (see ``summarize``)."""
    from socialenv.runner import summarize

    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in results:
        if "error" not in r:
            groups.setdefault((r["trial"]["policy"], r["trial"]["config_index"]), []).append(r)
    table = []
    for (policy, ci), members in groups.items():
        rows = [row for m in members for row in m["rows"]]
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")]
        summary = summarize(rows, keys)
        entry = {"policy": policy, "config_index": ci, "config": members[0]["trial"]["config"],
                 "seeds": summary["seeds"], "seconds": sum(m["seconds"] for m in members) / len(members)}
        entry.update({k: v for k, v in summary.items() if isinstance(v, dict) and "mean" in v})
        table.append(entry)
    table.sort(key=lambda e: (e["config_index"], e["policy"]))
    return table


def write_sweep(result: SweepResult, config: SweepConfig, out_dir: Path) -> None:
    """``sweep.json`` (config, table, trials, failures) and ``rounds.csv`` in ``out_dir``."""
    payload = {
        "config": _jsonable(asdict(config)), "backend": result.backend, "seconds": result.seconds,
        "startup_seconds": result.startup_seconds,
        "table": result.table, "failures": result.failures,
        "trials": [{k: v for k, v in r.items() if k != "rows"} for r in result.trials],
    }
    (out_dir / "sweep.json").write_text(to_json(payload, indent=2))
    rows = [{"trial": r["trial"]["name"], "policy": r["trial"]["policy"],
             "config_index": r["trial"]["config_index"], **row}
            for r in result.trials if "error" not in r for row in r["rows"]]
    if rows:
        fieldnames = list(rows[0]) + sorted({k for row in rows for k in row} - set(rows[0]))
        with (out_dir / "rounds.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)


def config_label(config: dict[str, Any]) -> str:
    """Short text for a grid config (``budget=5, users=lorenz``)."""
    if not config:
        return "-"
    return ", ".join(f"{k}={v if not isinstance(v, dict) else json.dumps(v, separators=(',', ':'))}"
                     for k, v in config.items())


def print_table(result: SweepResult, console: Any = None, title: str | None = None) -> None:
    """Print the sweep table (rich): one row per (policy, config), mean ± CI over seeds."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        probe = Console()
        console = probe if probe.is_terminal else Console(width=200)
    table = Table(title=title or f"sweep ({result.backend}, {result.seconds:.1f} s)")
    table.add_column("policy")
    table.add_column("config")
    table.add_column("seeds", justify="right")
    metrics = [(k, label) for k, label in TABLE_METRICS if any(k in e for e in result.table)]
    for _, label in metrics:
        table.add_column(label, justify="right")
    for entry in result.table:
        cells = [entry["policy"], config_label(entry["config"]), str(entry["seeds"])]
        for key, _ in metrics:
            v = entry.get(key)
            cells.append(format_mean_ci(v, 3) if v else "")
        table.add_row(*cells)
    console.print(table)
    from socialenv.runner import FLOW_METRICS

    means = [label for key, label in metrics if key in FLOW_METRICS]
    lasts = [label for key, label in metrics if key not in FLOW_METRICS]
    console.print(f"mean over the rounds of the last episode: {', '.join(means) or '-'}; "
                  f"last round's value: {', '.join(lasts) or '-'}; ± is the 95% CI over seeds "
                  "(n/a with one seed)")
    for failure in result.failures:
        console.print(f"[red]failed[/red] {failure['trial']}: {failure['error']}")
