"""Run a policy on a PolicySim env for several seeds and episodes; log every round.

Each run writes a folder round by round: ``config.json`` (secrets redacted), ``rounds.csv``
(one row appended per seed × episode × round: reward and every platform metric),
``summary.json`` (rewritten after every round: ``status`` running / complete / failed /
interrupted, and per metric the mean ± 95% CI over seeds), ``checkpoint.ckpt`` (a data-only
checkpoint of the env, the policy and the rows, every ``checkpoint_every`` rounds) and, at
the end, PNG plots and ``logged_rounds.npz`` (the logged bandit feedback for off-policy
evaluation: every round's arm contexts, mask, slate, the propensity of each picked arm and
the slot rewards; :class:`bandits.ope.LoggedRounds`). :func:`resume` (``policysim run --resume DIR``) continues an interrupted
run from its checkpoint to the same result as an uninterrupted one. With ``wandb=`` each
round is also logged to Weights & Biases.
With ``record=DIR`` the episodes also go to a Minari dataset in DIR
(:mod:`socialenv.offline`).
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.extras import require
from agent_models.redaction import to_json, to_json_data
from agent_models.validation import Limit, check_fields, check_path_segment, did_you_mean
from socialenv.policies import (
    BUILTIN_POLICIES,
    GRAPH_POLICIES,
    OriginPolicy,
    arm_groups,
    make_run_policy,
    policy_names,
    register_policy,
    select_action,
    select_logged_action,
)
from socialenv.summary import (
    FLOW_METRICS,
    LAST_ROUND,
    ROUND_MEAN,
    RunningSummary,
    format_mean_ci,
    summarize,
)

#: The runner's API; the policy and summary helpers live in :mod:`socialenv.policies` and
#: :mod:`socialenv.summary` and stay importable from here.
__all__ = [
    "BUILTIN_POLICIES", "FLOW_METRICS", "GRAPH_POLICIES", "LAST_ROUND", "ROUND_MEAN", "OriginPolicy",
    "RunConfig", "RunFolder", "RunResult", "RunningSummary", "arm_groups", "format_mean_ci",
    "make_run_policy", "policy_names", "register_policy", "resume", "run", "select_action",
    "select_logged_action", "summarize",
]

WANDB_MODES = ("online", "offline", "disabled")


#: Documented limits of :class:`RunConfig` (a seed s gives episode seeds s·1000 + episode).
RUN_LIMITS = {"seeds": Limit(ge=0, le=2_000_000), "episodes": Limit(ge=1, le=1_000_000),
              "checkpoint_every": Limit(ge=0, le=1_000_000_000)}


@dataclass
class RunConfig:
    """What to run. ``env_kwargs`` go to ``gym.make``; ``policy_kwargs`` to the policy;
    ``checkpoint_every``: rounds between the run folder's checkpoints (0 = none, no resume);
    ``origin_reference``: also play Origin (no intervention) on the same seeds for the plots
    and ``origin_rounds.csv`` (None = yes unless the population is the costly ``"llm"``)."""

    env_id: str = "PolicySim-Rec-v0"
    policy: str = "random"
    seeds: Sequence[int] = (0,)
    episodes: int = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    out_dir: str | None = "runs"
    run_name: str | None = None
    wandb: str | None = None
    wandb_project: str = "policysim"
    plots: bool = True
    progress: bool = True
    checkpoint_every: int = 1
    origin_reference: bool | None = None
    log_propensities: bool = True
    #: a directory: record the episodes there as a Minari dataset (:mod:`socialenv.offline`)
    record: str | None = None
    record_id: str | None = None

    def __post_init__(self) -> None:
        check_fields(self, "", RUN_LIMITS)
        if self.run_name is not None:
            check_path_segment(self.run_name, "run_name")
        if not self.seeds:
            raise ValueError("seeds must name at least one seed")
        if self.wandb is not None and self.wandb not in WANDB_MODES:
            raise ValueError(f"wandb={self.wandb!r} is not allowed: one of {WANDB_MODES} or None")


@dataclass
class RunResult:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    out_dir: Path | None


RUN_STATUSES = ("running", "complete", "failed", "interrupted")
CHECKPOINT_FILE = "checkpoint.ckpt"


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row with NumPy scalars as Python numbers (CSV, JSON and checkpoints stay plain)."""
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in row.items()}


class RunFolder:
    """A run folder written as the run goes: ``rounds.csv`` appended row by row (rewritten
    when a new column appears), ``summary.json`` replaced atomically."""

    def __init__(self, path: Path, rows: Sequence[dict[str, Any]] = ()) -> None:
        self.path = path
        self.fieldnames: list[str] = []
        self._rewrite(list(rows))

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.fieldnames += [k for k in row if k not in self.fieldnames]
        tmp = self.path / "rounds.csv.tmp"
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.fieldnames)
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(self.path / "rounds.csv")
        self._rows = rows

    def append(self, row: dict[str, Any]) -> None:
        if any(k not in self.fieldnames for k in row):
            self._rewrite([*self._rows, row])
            return
        self._rows.append(row)
        with (self.path / "rounds.csv").open("a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self.fieldnames).writerow(row)

    def write_json(self, name: str, value: Any) -> None:
        tmp = self.path / f"{name}.tmp"
        tmp.write_text(to_json(value, indent=2))
        tmp.replace(self.path / name)


def check_population(users: Any, name: str) -> None:
    """A population name must be registered (:func:`agent_models.factory.population_names`);
    a Brain instance is checked when the env is built."""
    if isinstance(users, str):
        from agent_models.factory import population_names

        names = population_names()
        if users not in names:
            raise ValueError(f"{name}={users!r} is not allowed: use one of {names} or a Brain instance"
                             f"{did_you_mean(users, names)}")


def _policy_state(policy: Any) -> Any:
    return policy.state_dict() if hasattr(policy, "state_dict") else None


def resume(run_dir: str | Path, on_round: Callable[[dict[str, Any]], None] | None = None,
           wandb_run: Any = None, **changes: Any) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint; the result (rows, summary,
    files) equals that of an uninterrupted run. ``changes`` override RunConfig fields that do
    not change the result (``progress``, ``plots``, ``wandb``, ``checkpoint_every``)."""
    from socialenv.checkpoint import read_checkpoint

    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {CHECKPOINT_FILE} to resume from (was it written with "
            "checkpoint_every=0, or is it not a run folder?)")
    state = read_checkpoint(path, "run")
    allowed = {"progress", "plots", "wandb", "wandb_project", "checkpoint_every"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"resume cannot change {sorted(unknown)}; allowed: {sorted(allowed)}")
    from types import SimpleNamespace

    from socialenv.checkpoint import CheckpointError, code_references

    risky = code_references(SimpleNamespace(llm=state["config"].get("env_kwargs", {}).get("llm")))
    if risky:
        raise CheckpointError(f"{path}: the saved config names code to run ({', '.join(risky)}); "
                              "a checkpoint may not choose code, so this run cannot be resumed from it")
    from socialenv.checkpoint import Placeholder

    for group in ("env_kwargs", "policy_kwargs"):
        for key, value in state["config"].get(group, {}).items():
            if isinstance(value, Placeholder):
                raise ValueError(f"{run_dir} cannot be resumed: {group}[{key!r}] was a {value.type_name} "
                                 "instance, which a data-only checkpoint does not store")
    fields = {**state["config"], **changes, "out_dir": str(run_dir.parent), "run_name": run_dir.name}
    config = RunConfig(**fields)
    return run(config, on_round=on_round, wandb_run=wandb_run, _resume=state)


def run(config: RunConfig, on_round: Callable[[dict[str, Any]], None] | None = None,
        wandb_run: Any = None, _resume: dict[str, Any] | None = None) -> RunResult:
    """Run ``config``; returns every round's row and the summary (also written to disk,
    round by round). A failure marks ``summary.json`` failed (or interrupted) with the
    error and re-raises; :func:`resume` continues from the last checkpoint."""
    import gymnasium as gym

    allowed = policy_names()
    if config.policy not in allowed:
        raise ValueError(f"policy={config.policy!r} is not allowed: use one of {allowed}"
                         f"{did_you_mean(config.policy, allowed)}")
    from socialenv.registration import ENV_IDS

    if config.env_id not in ENV_IDS:
        raise ValueError(f"env_id={config.env_id!r} is not allowed: use one of {sorted(ENV_IDS)}"
                         f"{did_you_mean(config.env_id, ENV_IDS)}")
    check_population(config.env_kwargs.get("users", "surrogate"), "users")
    rows: list[dict[str, Any]] = [] if _resume is None else list(_resume["rows"])
    running = RunningSummary()
    for row in rows:
        running.add(row)
    folder = None
    if config.record:
        from socialenv.offline import check_dataset_free, default_dataset_id

        check_dataset_free(config.record, config.record_id or default_dataset_id(config.env_id, config.policy))
    out_dir = None
    if config.out_dir is not None:
        name = config.run_name or f"{config.env_id}-{config.policy}-{time.strftime('%Y%m%d-%H%M%S')}"
        out_dir = Path(config.out_dir) / name
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(to_json(asdict(config), indent=2))
        folder = RunFolder(out_dir, rows)

    def summary_of(status: str, **extra: Any) -> dict[str, Any]:
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")] if rows else []
        return {"env_id": config.env_id, "policy": config.policy, "status": status,
                "rounds_done": len(rows), **extra, **running.summary(keys)}

    own_wandb = False
    if wandb_run is None and config.wandb is not None:
        wandb = require("wandb", "wandb", f"RunConfig.wandb={config.wandb!r}")
        wandb_run = wandb.init(
            project=config.wandb_project, mode=config.wandb, name=config.run_name,
            config=to_json_data(asdict(config)), dir=str(out_dir) if out_dir else None, reinit="finish_previous",
        )
        own_wandb = True

    total = len(config.seeds) * config.episodes
    from tqdm.auto import tqdm

    bar = tqdm(total=None, initial=len(rows), disable=not config.progress,
               desc=f"{config.policy} on {config.env_id}", unit="round")
    start_seed, start_episode, mid_episode = 0, 0, False
    if _resume is not None:
        position = _resume["position"]
        start_seed, start_episode = int(position["seed_index"]), int(position["episode"])
        mid_episode = not position["episode_done"]
        if not mid_episode:
            start_episode += 1
            if start_episode >= config.episodes:
                start_seed, start_episode = start_seed + 1, 0
    status = "running"
    logger = recorder = None
    # the propensity log and the Minari record cover runs played from their start
    log = config.log_propensities and (out_dir is not None or config.record) and _resume is None
    record = config.record if _resume is None else None
    try:
        for seed_index in range(start_seed, len(config.seeds)):
            seed = config.seeds[seed_index]
            restoring = _resume is not None and seed_index == int(_resume["position"]["seed_index"])
            if restoring:
                from socialenv.envs.base import PolicySimEnv

                env = PolicySimEnv.from_checkpoint_state(_resume["env"], out_dir or "checkpoint")
            else:
                env = gym.make(config.env_id, **config.env_kwargs)
            base = env.unwrapped
            if bar.total is None:
                bar.total = total * base.config.rounds
                bar.refresh()
            policy = make_run_policy(config.policy, base, seed, **config.policy_kwargs)
            if restoring and _resume["policy"] is not None:
                policy.load_state_dict(_resume["policy"])
            if log and logger is None:
                from bandits.ope import RoundLogger

                logger = RoundLogger(groups=arm_groups(base), per_group=base.per_user)
            if record and recorder is None:
                from socialenv.offline import EpisodeRecorder

                recorder = EpisodeRecorder(base.observation_space, base.slate_size)
            for episode in range(start_episode if seed_index == start_seed else 0, config.episodes):
                if mid_episode and restoring:
                    obs = base._observe()
                    mid_episode = False
                else:
                    obs, reset_info = env.reset(seed=seed * 1000 + episode)
                    if logger is not None:
                        logger.start_episode()
                    if recorder is not None:
                        recorder.reset(obs, reset_info, seed=seed * 1000 + episode)
                done = False
                while not done:
                    if hasattr(policy, "observe_graph"):
                        policy.observe_graph(base.graph_data())
                    if logger is not None:
                        action, propensities, method = select_logged_action(policy, obs, base)
                    else:
                        action = select_action(policy, obs, base)
                    arms, arm_mask = obs["arms"], obs["action_mask"]
                    obs, reward, terminated, truncated, info = env.step(action)
                    if logger is not None:
                        logger.add(arms, arm_mask, action, propensities, method,
                                   info["arm_rewards"], info["arm_applied"])
                    if recorder is not None:
                        recorder.step(action, obs, reward, terminated, truncated, info,
                                      propensities if logger is not None else None)
                    applied = info["arm_applied"]
                    if applied.any():
                        policy.update(arms[info["arm_indices"][applied]], info["arm_rewards"][applied])
                    done = terminated or truncated
                    row = _plain({"seed": seed, "episode": episode, "round": info["round"],
                                  "reward": reward, **info["metrics"]})
                    rows.append(row)
                    running.add(row)
                    if folder is not None:
                        folder.append(row)
                        folder.write_json("summary.json", summary_of("running"))
                        every = config.checkpoint_every
                        if every and (len(rows) % every == 0 or done):
                            _write_run_checkpoint(out_dir / CHECKPOINT_FILE, config, rows, policy, base,
                                                  seed_index, episode, done)
                    if wandb_run is not None:
                        wandb_run.log(dict(row), step=len(rows) - 1)
                    if on_round is not None:
                        on_round(row)
                    bar.update(1)
            env.close()
        status = "complete"
    except BaseException as err:
        status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        if folder is not None:
            extra: dict[str, Any] = {"error": f"{type(err).__name__}: {err}"}
            if (out_dir / CHECKPOINT_FILE).exists():
                extra["resume"] = f"policysim run --resume {out_dir}"
            folder.write_json("summary.json", summary_of(status, **extra))
        raise
    finally:
        bar.close()
        if own_wandb:
            wandb_run.finish(exit_code=0 if status == "complete" else 1)

    summary = summary_of("complete")
    if folder is not None:
        folder.write_json("summary.json", summary)
        if logger is not None and len(logger):
            logger.rounds().save(out_dir / "logged_rounds.npz")
        if config.plots:
            _plot(config, rows, out_dir)
    if recorder is not None:
        from socialenv.offline import default_dataset_id

        recorder.write(config.record, config.record_id or default_dataset_id(config.env_id, config.policy),
                       base, algorithm_name=config.policy,
                       description=f"{config.policy} on {config.env_id}, seeds {list(config.seeds)}")
    return RunResult(rows=rows, summary=summary, out_dir=out_dir)


def _plot(config: RunConfig, rows: list[dict[str, Any]], out_dir: Path) -> None:
    """The run's PNG plots, with news rounds and the Origin reference (see :func:`plot_run`)."""
    import gymnasium as gym

    from socialenv.plots import plot_run

    env = gym.make(config.env_id, **config.env_kwargs)
    base = env.unwrapped
    env.reset(seed=config.seeds[0] * 1000)
    news_rounds = sorted({e.round for e in (base.sim.scenario.news if base.sim.scenario else [])})
    env.close()
    reference = config.origin_reference
    if reference is None:
        reference = config.env_kwargs.get("users", "surrogate") != "llm"
    origin_rows = None
    if reference and config.policy != "origin":
        last = config.episodes - 1
        origin_rows = []
        for seed in config.seeds:
            env = gym.make(config.env_id, **config.env_kwargs)
            obs, _ = env.reset(seed=seed * 1000 + last)
            done = False
            while not done:
                obs, reward, terminated, truncated, info = env.step(np.full(env.unwrapped.slate_size,
                                                                            env.unwrapped.no_op, np.int64))
                done = terminated or truncated
                origin_rows.append(_plain({"seed": seed, "episode": last, "round": info["round"],
                                           "reward": reward, **info["metrics"]}))
            env.close()
        with (out_dir / "origin_rounds.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in origin_rows for k in r)))
            writer.writeheader()
            writer.writerows(origin_rows)
    plot_run(rows, out_dir, title=f"{config.policy} on {config.env_id}", news_rounds=news_rounds,
             origin_rows=origin_rows)


def _write_run_checkpoint(path: Path, config: RunConfig, rows: list[dict[str, Any]], policy: Any,
                          env: Any, seed_index: int, episode: int, episode_done: bool) -> None:
    """Everything :func:`resume` needs, in one data-only file (replaced atomically)."""
    from socialenv.checkpoint import write_checkpoint

    write_checkpoint(path, "run", {
        "config": asdict(config),
        "position": {"seed_index": seed_index, "episode": episode, "episode_done": episode_done},
        "rows": rows,
        "policy": _policy_state(policy),
        "env": env.checkpoint_state(),
    }, objects="placeholder")
