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
(:mod:`policysim.offline`); with ``trace=DIR`` their behaviour trace goes to the folder DIR
(:mod:`socialenv.fitting.trace`, read by ``policysim fit``).

A run folder is locked (``.lock``, ``fcntl``) while a run writes it; a named folder that
already holds a run is refused, a default name is unique (microseconds, then a counter).
The propensity log and the Minari record so far go to an append-only journal
(``.resume/``, removed once the run is complete), so :func:`resume` continues them too.
``summary.json`` says complete only after every file is written.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import numpy as np

from baselines.policies import make_policy, policy_names
from policysim.summary import (
    FLOW_METRICS,
    LAST_ROUND,
    ROUND_MEAN,
    RunningSummary,
    format_mean_ci,
    summarize,
)
from policysim_infra.extras import require
from policysim_infra.redaction import to_json, to_json_data
from policysim_infra.validation import Limit, check_fields, check_path_segment, did_you_mean
from socialenv.envs.episodes import learn_from_step
from socialenv.envs.policy_registry import (
    GRAPH_POLICIES,
    OriginPolicy,
    arm_groups,
    make_run_policy,
    register_policy,
    select_action,
    select_logged_action,
)

#: The runner's API; the policy and summary helpers live in :mod:`socialenv.envs.policy_registry` and
#: :mod:`policysim.summary` and stay importable from here.
__all__ = [
    "FLOW_METRICS",
    "GRAPH_POLICIES",
    "LAST_ROUND",
    "ROUND_MEAN",
    "OriginPolicy",
    "RunConfig",
    "RunFolder",
    "RunResult",
    "RunningSummary",
    "arm_groups",
    "format_mean_ci",
    "make_run_policy",
    "policy_names",
    "register_policy",
    "resume",
    "run",
    "select_action",
    "select_logged_action",
    "summarize",
]

WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class RunConfig:
    """What to run. ``env_kwargs`` go to ``gym.make``; ``policy_kwargs`` to the policy;
    ``checkpoint_every``: rounds between the run folder's checkpoints (0 = none, no resume);
    ``origin_reference``: also play Origin (no intervention) on the same seeds for the plots
    and ``origin_rounds.csv`` (None = yes unless the population is the costly ``"llm"``)."""

    env_id: str = "PolicySim-Rec-v0"
    policy: str = "random"
    #: a seed s gives episode seeds s·1000 + episode
    seeds: Annotated[Sequence[int], Limit(ge=0, le=2_000_000)] = (0,)
    episodes: Annotated[int, Limit(ge=1, le=1_000_000)] = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    out_dir: str | None = "runs"
    run_name: str | None = None
    wandb: str | None = None
    wandb_project: str = "policysim"
    plots: bool = True
    progress: bool = True
    checkpoint_every: Annotated[int, Limit(ge=0, le=1_000_000_000)] = 1
    origin_reference: bool | None = None
    log_propensities: bool = True
    #: a directory: record the episodes there as a Minari dataset (:mod:`policysim.offline`)
    record: str | None = None
    record_id: str | None = None
    #: a folder: write the behaviour trace of every episode there (:mod:`socialenv.fitting.trace`)
    trace: str | None = None

    def __post_init__(self) -> None:
        check_fields(self, "")
        if self.run_name is not None:
            check_path_segment(self.run_name, "run_name")
        if self.record_id is not None:
            for part in str(self.record_id).split("/"):
                check_path_segment(part, "record_id")
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
LOCK_FILE = ".lock"


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
        try:
            tmp.write_text(to_json(value, indent=2))
            tmp.replace(self.path / name)
        finally:
            tmp.unlink(missing_ok=True)


class RunLock:
    """An exclusive ``fcntl`` lock on ``<run folder>/.lock``, held while a run writes the
    folder: a second run or resume of the same folder is refused instead of mixing rows."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fh = (folder / LOCK_FILE).open("a")
        try:
            import fcntl
        except ImportError:  # not POSIX: no advisory locks, the name checks still apply
            return
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise ValueError(
                f"run folder {folder} is in use by another run (its {LOCK_FILE} is locked): "
                "wait for it to finish or choose another name"
            ) from None

    def release(self) -> None:
        self._fh.close()  # closing the file releases the lock


def _open_run_folder(config: RunConfig, resuming: bool) -> tuple[Path, RunLock]:
    """The run's folder, created and locked. A named folder that already holds a run is
    refused (unless resuming it); a default name is made unique (microseconds, then a
    counter), so runs started together never share a folder."""
    root = Path(config.out_dir)
    root.mkdir(parents=True, exist_ok=True)
    if config.run_name is not None:
        out_dir = root / config.run_name
        if not resuming:
            try:
                out_dir.mkdir()
            except FileExistsError:
                if not out_dir.is_dir() or any(out_dir.iterdir()):
                    raise ValueError(_taken(config.run_name, out_dir)) from None
    else:
        from datetime import datetime

        base = f"{config.env_id}-{config.policy}-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
        for attempt in range(1, 10_000):
            out_dir = root / (base if attempt == 1 else f"{base}-{attempt}")
            try:
                out_dir.mkdir()
                break
            except FileExistsError:
                continue
    lock = RunLock(out_dir)
    if not resuming and (out_dir / "config.json").exists():
        lock.release()
        raise ValueError(_taken(out_dir.name, out_dir))
    if resuming:
        _remove_stale_temporaries(out_dir)
    return out_dir, lock


def _taken(name: str, out_dir: Path) -> str:
    return (
        f"run_name={name!r} is not allowed: {out_dir} already holds a run; choose another name "
        f"(or continue it: policysim run --resume {out_dir})"
    )


def _remove_stale_temporaries(out_dir: Path) -> list[str]:
    """Remove the temporary files a killed run left (called with the folder's lock held)."""
    stale = [p for pattern in (".*.tmp-*", "*.tmp") for p in out_dir.glob(pattern) if p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return [p.name for p in stale]


def check_population(users: Any, name: str) -> None:
    """A population name must be registered (:func:`agent_models.factory.population_names`);
    a Brain instance is checked when the env is built."""
    if isinstance(users, str):
        from agent_models.factory import population_names

        names = population_names()
        if users not in names:
            raise ValueError(
                f"{name}={users!r} is not allowed: use one of {names} or a Brain instance"
                f"{did_you_mean(users, names)}"
            )


def _policy_state(policy: Any) -> Any:
    return policy.state_dict() if hasattr(policy, "state_dict") else None


def resume(
    run_dir: str | Path,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    wandb_run: Any = None,
    **changes: Any,
) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint; the result (rows, summary,
    files) equals that of an uninterrupted run. ``changes`` override RunConfig fields that do
    not change the result (``progress``, ``plots``, ``wandb``, ``wandb_project``,
    ``checkpoint_every``) and re-supply what a checkpoint may not choose: ``llm`` (the LLM
    config, required when the saved one names code, an endpoint, a secret's source or a path
    to write) and ``record`` (the Minari folder of a run that records one). W&B logging is
    not taken from the file: pass ``wandb=`` again to keep it."""
    from socialenv.envs.checkpoint import (
        CheckpointError,
        Placeholder,
        code_references,
        read_checkpoint,
        refusal,
    )

    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        raise FileNotFoundError(_mark_unresumable(run_dir))
    allowed = {"progress", "plots", "wandb", "wandb_project", "checkpoint_every", "llm", "record"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"resume cannot change {sorted(unknown)}; allowed: {sorted(allowed)}")
    state = read_checkpoint(path, "run")
    _check_run_state(state, path)
    saved = state["config"]
    env_kwargs = dict(saved.get("env_kwargs") or {})
    risky = code_references(SimpleNamespace(llm=env_kwargs.get("llm")))
    if "llm" in changes:
        if env_kwargs.get("llm") is None:
            raise ValueError(
                f"llm: {run_dir} was not run with an LLM config; resume it without llm="
            )
        env_kwargs["llm"] = changes.pop("llm")
    elif risky:
        raise refusal(
            path,
            risky,
            "pass the LLM config again: resume(run_dir, llm=...), "
            "policysim run --resume DIR --llm JSON",
        )
    if saved.get("record") is not None and changes.get("record") is None:
        raise CheckpointError(
            f"{path}: record={saved['record']!r}: the run records a Minari dataset, and a checkpoint "
            "may not choose a path to write: pass the folder again, resume(run_dir, record=...), "
            "policysim run --resume DIR --record DIR"
        )
    if saved.get("record") is None and changes.get("record") is not None:
        raise ValueError(
            f"record: {run_dir} was run without a Minari record; one cannot start mid-run"
        )
    for group, values in (
        ("env_kwargs", env_kwargs),
        ("policy_kwargs", saved.get("policy_kwargs") or {}),
    ):
        for key, value in values.items():
            if isinstance(value, Placeholder):
                raise ValueError(
                    f"{run_dir} cannot be resumed: {group}[{key!r}] was a {value.type_name} "
                    "instance, which a data-only checkpoint does not store"
                )
    lock = RunLock(run_dir)  # refuses a folder another run is writing
    try:
        finished = _finished_run(run_dir, state)
    finally:
        lock.release()
    if finished is not None:
        return finished
    fields = {
        **saved,
        "wandb": None,
        **changes,
        "env_kwargs": env_kwargs,
        "out_dir": str(run_dir.parent),
        "run_name": run_dir.name,
    }
    try:
        config = RunConfig(**fields)
    except TypeError as err:
        raise CheckpointError(f"{path}: the saved run config is not a RunConfig ({err})") from None
    return run(config, on_round=on_round, wandb_run=wandb_run, _resume=state)


def _finished_run(run_dir: Path, state: dict[str, Any]) -> RunResult | None:
    """The result of a run already complete (its files checked), else None. A complete run's
    propensity log that no longer reads is an error: its journal is gone, run it again."""
    import json

    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(summary, dict) or summary.get("status") != "complete":
        return None
    if state.get("logger") is not None:
        from bandits.ope import LoggedRounds

        try:
            LoggedRounds.load(run_dir / "logged_rounds.npz")
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(
                f"{run_dir} is complete but its logged_rounds.npz is damaged ({err}); a complete "
                "run keeps no journal to rebuild it from: run it again"
            ) from None
    return RunResult(rows=list(state["rows"]), summary=summary, out_dir=run_dir)


def _check_run_state(state: Any, path: Path) -> None:
    from socialenv.envs.checkpoint import CheckpointError

    required = {"config", "position", "rows", "policy", "env"}
    if (
        not isinstance(state, dict)
        or not required <= set(state)
        or not isinstance(state["config"], dict)
        or not isinstance(state["position"], dict)
        or not isinstance(state["rows"], list)
    ):
        raise CheckpointError(
            f"{path} is not a PolicySim run checkpoint: it needs {sorted(required)} "
            "(config and position objects, rows a list)"
        )
    config, position = state["config"], state["position"]
    seeds, episodes = config.get("seeds"), config.get("episodes")
    if (
        not isinstance(seeds, list | tuple)
        or not seeds
        or isinstance(episodes, bool)
        or not isinstance(episodes, int)
        or episodes < 1
    ):
        raise CheckpointError(f"{path}: config.seeds and config.episodes are not a valid run's")
    limits = {"seed_index": len(seeds), "episode": episodes}
    for name, bound in limits.items():
        value = position.get(name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not 0 <= value < bound
        ):
            raise CheckpointError(
                f"{path}: position.{name}={value!r} is not allowed: an integer in [0, {bound})"
            )
    if not isinstance(position.get("episode_done"), bool | np.bool_):
        raise CheckpointError(
            f"{path}: position.episode_done={position.get('episode_done')!r} is not "
            "allowed: true or false"
        )
    for i, row in enumerate(state["rows"]):
        if not isinstance(row, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float | np.number) for k, v in row.items()
        ):
            raise CheckpointError(
                f"{path}: rows[{i}] is not allowed: a mapping of metric names to numbers"
            )


def _restore(target: Any, state: Any, name: str, out_dir: Path | None) -> None:
    """``target.load_state_dict(state)``; a state that does not fit is a CheckpointError
    naming the file and the part (not an error from deep inside the policy)."""
    from socialenv.envs.checkpoint import CheckpointError

    try:
        target.load_state_dict(state)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as err:
        raise CheckpointError(
            f"{Path(out_dir or '.') / CHECKPOINT_FILE}: the saved {name} state does not fit "
            f"({type(err).__name__}: {err})"
        ) from None


def _mark_unresumable(run_dir: Path) -> str:
    """Why ``run_dir`` cannot be resumed; a run folder left "running" by a killed run is
    marked failed with that reason and cleared of its temporary files."""
    import json

    if not (run_dir / "config.json").is_file():
        return f"{run_dir} has no {CHECKPOINT_FILE} to resume from: it is not a run folder"
    try:
        every = json.loads((run_dir / "config.json").read_text()).get("checkpoint_every")
    except (ValueError, OSError, AttributeError, RecursionError):
        every = None
    if every == 0:
        why = f"{run_dir} cannot be resumed: it was run with checkpoint_every=0 (no checkpoints)"
    else:
        why = (
            f"{run_dir} cannot be resumed: the run stopped before its first checkpoint was written "
            "(nothing to continue from); start it again under a new name"
        )
    lock = RunLock(run_dir)
    try:
        _remove_stale_temporaries(run_dir)
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (ValueError, OSError, RecursionError):
            summary = {}
        if not isinstance(summary, dict) or summary.get("status") in (None, "running"):
            summary = summary if isinstance(summary, dict) else {}
            RunFolder.write_json(
                SimpleNamespace(path=run_dir),
                "summary.json",  # type: ignore[arg-type]
                {**summary, "status": "failed", "error": why},
            )
    finally:
        lock.release()
    return why


def run(
    config: RunConfig,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    wandb_run: Any = None,
    _resume: dict[str, Any] | None = None,
) -> RunResult:
    """Run ``config``; returns every round's row and the summary (also written to disk,
    round by round). A failure marks ``summary.json`` failed (or interrupted) with the
    error and re-raises; :func:`resume` continues from the last checkpoint."""

    allowed = policy_names()
    if config.policy not in allowed:
        raise ValueError(
            f"policy={config.policy!r} is not allowed: use one of {allowed}"
            f"{did_you_mean(config.policy, allowed)}"
        )
    from socialenv.envs.registration import ENV_IDS

    if config.env_id not in ENV_IDS:
        raise ValueError(
            f"env_id={config.env_id!r} is not allowed: use one of {sorted(ENV_IDS)}"
            f"{did_you_mean(config.env_id, ENV_IDS)}"
        )
    check_population(config.env_kwargs.get("users", "surrogate"), "users")
    rows: list[dict[str, Any]] = [] if _resume is None else list(_resume["rows"])
    running = RunningSummary()
    for row in rows:
        running.add(row)
    folder = lock = None
    record_id = None
    if config.record:
        from policysim.offline import check_dataset_free, default_dataset_id

        record_id = config.record_id or default_dataset_id(config.env_id, config.policy)
        if _resume is None:
            check_dataset_free(config.record, record_id)
    out_dir = None
    if config.out_dir is not None:
        out_dir, lock = _open_run_folder(config, resuming=_resume is not None)
        try:
            (out_dir / "config.json").write_text(to_json(asdict(config), indent=2))
            folder = RunFolder(out_dir, rows)
        except BaseException:
            lock.release()
            raise

    try:
        return _play(
            config, rows, running, out_dir, folder, record_id, on_round, wandb_run, _resume
        )
    finally:
        if lock is not None:
            lock.release()


def _play(
    config: RunConfig,
    rows: list[dict[str, Any]],
    running: RunningSummary,
    out_dir: Path | None,
    folder: RunFolder | None,
    record_id: str | None,
    on_round: Callable[[dict[str, Any]], None] | None,
    wandb_run: Any,
    _resume: dict[str, Any] | None,
) -> RunResult:
    """The episodes of :func:`run`, then the run's files; ``summary.json`` says "complete"
    only once every file is written."""
    import gymnasium as gym

    def summary_of(status: str, **extra: Any) -> dict[str, Any]:
        keys = [k for k in rows[0] if k not in ("seed", "episode", "round")] if rows else []
        return {
            "env_id": config.env_id,
            "policy": config.policy,
            "status": status,
            "rounds_done": len(rows),
            **extra,
            **running.summary(keys),
        }

    own_wandb = False
    if wandb_run is None and config.wandb is not None:
        wandb = require("wandb", "wandb", f"RunConfig.wandb={config.wandb!r}")
        wandb_run = wandb.init(
            project=config.wandb_project,
            mode=config.wandb,
            name=config.run_name,
            config=to_json_data(asdict(config)),
            dir=str(out_dir) if out_dir else None,
            reinit="finish_previous",
        )
        own_wandb = True

    total = len(config.seeds) * config.episodes
    from tqdm.auto import tqdm

    bar = tqdm(
        total=None,
        initial=len(rows),
        disable=not config.progress,
        desc=f"{config.policy} on {config.env_id}",
        unit="round",
    )
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
    logger = recorder = base = None
    journal = _Journal(out_dir)
    log = config.log_propensities and (out_dir is not None or config.record)
    record = config.record
    recorder_state = None
    if _resume is not None:  # the log and the record continue from the checkpoint's
        if log and _resume.get("logger") is not None:
            from bandits.ope import RoundLogger

            logger = RoundLogger()
            _restore(logger, journal.restore(_resume["logger"], "rows"), "logger", out_dir)
        if _resume.get("recorder") is not None:
            recorder_state = journal.restore(_resume["recorder"], "events")
        log = logger is not None
        record = record if recorder_state is not None else None
    tracer = None
    if config.trace and _resume is not None:  # nor may a file choose where a resumed run writes
        import warnings

        warnings.warn(
            f"trace={config.trace!r}: a resumed run writes no behaviour trace (a trace "
            "covers a run played from its start); run it again with --trace for one",
            RuntimeWarning,
            stacklevel=2,
        )
    if config.trace and _resume is None:  # a trace covers runs played from their start
        from socialenv.fitting.trace import TraceRecorder

        tracer = TraceRecorder(
            config.trace, meta={"policy": config.policy, "run_seeds": list(config.seeds)}
        )
    try:
        for seed_index in range(start_seed, len(config.seeds)):
            seed = config.seeds[seed_index]
            restoring = _resume is not None and seed_index == int(_resume["position"]["seed_index"])
            if restoring:
                from socialenv.envs.base import PolicySimEnv

                llm = (
                    {"llm": config.env_kwargs["llm"]}
                    if config.env_kwargs.get("llm") is not None
                    else {}
                )
                env = PolicySimEnv.from_checkpoint_state(
                    _resume["env"], out_dir or "checkpoint", **llm
                )
            else:
                env = gym.make(config.env_id, **config.env_kwargs)
            base = env.unwrapped
            if tracer is not None:
                base.trace(recorder=tracer)
            if bar.total is None:
                bar.total = total * base.config.rounds
                bar.refresh()
            policy = make_policy(config.policy, base, seed, **config.policy_kwargs)
            if restoring and _resume["policy"] is not None:
                _restore(policy, _resume["policy"], "policy", out_dir)
            if log and logger is None:
                from bandits.ope import RoundLogger

                logger = RoundLogger(groups=arm_groups(base), per_group=base.per_user)
            if record and recorder is None:
                from policysim.offline import EpisodeRecorder

                recorder = EpisodeRecorder(base.observation_space, base.slate_size)
                if recorder_state is not None:
                    _restore(recorder, recorder_state, "recorder", out_dir)
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
                        logger.add(
                            arms,
                            arm_mask,
                            action,
                            propensities,
                            method,
                            info["arm_rewards"],
                            info["arm_applied"],
                        )
                    if recorder is not None:
                        recorder.step(
                            action,
                            obs,
                            reward,
                            terminated,
                            truncated,
                            info,
                            propensities if logger is not None else None,
                        )
                    learn_from_step(policy, arms, info, env)
                    done = terminated or truncated
                    row = _plain(
                        {
                            "seed": seed,
                            "episode": episode,
                            "round": info["round"],
                            "reward": reward,
                            **info["metrics"],
                        }
                    )
                    rows.append(row)
                    running.add(row)
                    if folder is not None:
                        folder.append(row)
                        folder.write_json("summary.json", summary_of("running"))
                        every = config.checkpoint_every
                        if every and (len(rows) % every == 0 or done):
                            _write_run_checkpoint(
                                out_dir / CHECKPOINT_FILE,
                                config,
                                rows,
                                policy,
                                base,
                                seed_index,
                                episode,
                                done,
                                journal,
                                logger,
                                recorder,
                            )
                    if wandb_run is not None:
                        wandb_run.log(dict(row), step=len(rows) - 1)
                    if on_round is not None:
                        on_round(row)
                    bar.update(1)
            env.close()
        # every file first, then "complete": a run that cannot write them is marked failed
        if folder is not None:
            if logger is not None and len(logger):
                logger.rounds().save(out_dir / "logged_rounds.npz")
            if config.plots:
                _plot(config, rows, out_dir)
        if record and (base is None or base.spec is None):  # resumed: the restored env has no spec
            base = gym.make(config.env_id, **config.env_kwargs).unwrapped
        if (
            record and recorder is None and recorder_state is not None
        ):  # resumed after the last round
            from policysim.offline import EpisodeRecorder

            recorder = EpisodeRecorder(base.observation_space, base.slate_size)
            _restore(recorder, recorder_state, "recorder", out_dir)
        if recorder is not None and not (
            _resume is not None and (Path(config.record) / record_id).exists()
        ):
            recorder.write(
                config.record,
                record_id,
                base,
                algorithm_name=config.policy,
                description=f"{config.policy} on {config.env_id}, seeds {list(config.seeds)}",
            )
        summary = summary_of("complete")
        if folder is not None:
            folder.write_json("summary.json", summary)
        status = "complete"
        journal.remove()
    except BaseException as err:
        status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        if folder is not None:
            extra: dict[str, Any] = {"error": f"{type(err).__name__}: {err}"}
            if (out_dir / CHECKPOINT_FILE).exists():
                extra["resume"] = f"policysim run --resume {out_dir}"
            try:
                folder.write_json("summary.json", summary_of(status, **extra))
            except OSError as write_error:  # e.g. the disk is full: keep the run's own error
                err.add_note(f"summary.json could not be marked {status}: {write_error}")
        raise
    finally:
        bar.close()
        if own_wandb:
            wandb_run.finish(exit_code=0 if status == "complete" else 1)
    return RunResult(rows=rows, summary=summary, out_dir=out_dir)


def _plot(config: RunConfig, rows: list[dict[str, Any]], out_dir: Path) -> None:
    """The run's PNG plots, with news rounds and the Origin reference (see :func:`plot_run`)."""
    import gymnasium as gym

    from policysim.plots import plot_run

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
                obs, reward, terminated, truncated, info = env.step(
                    np.full(env.unwrapped.slate_size, env.unwrapped.no_op, np.int64)
                )
                done = terminated or truncated
                origin_rows.append(
                    _plain(
                        {
                            "seed": seed,
                            "episode": last,
                            "round": info["round"],
                            "reward": reward,
                            **info["metrics"],
                        }
                    )
                )
            env.close()
        with (out_dir / "origin_rounds.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(
                fh, fieldnames=list(dict.fromkeys(k for r in origin_rows for k in r))
            )
            writer.writeheader()
            writer.writerows(origin_rows)
    plot_run(
        rows,
        out_dir,
        title=f"{config.policy} on {config.env_id}",
        news_rounds=news_rounds,
        origin_rows=origin_rows,
    )


def _write_run_checkpoint(
    path: Path,
    config: RunConfig,
    rows: list[dict[str, Any]],
    policy: Any,
    env: Any,
    seed_index: int,
    episode: int,
    episode_done: bool,
    journal: _Journal,
    logger: Any = None,
    recorder: Any = None,
) -> None:
    """Everything :func:`resume` needs, in one data-only file (replaced atomically); the
    propensity log and the Minari record so far go to the journal (:class:`_Journal`)."""
    from socialenv.envs.checkpoint import write_checkpoint

    write_checkpoint(
        path,
        "run",
        {
            "config": asdict(config),
            "position": {
                "seed_index": seed_index,
                "episode": episode,
                "episode_done": episode_done,
            },
            "rows": rows,
            "policy": _policy_state(policy),
            "env": env.checkpoint_state(),
            "logger": None
            if logger is None
            else journal.save(logger.state_dict(), "rows", "logged"),
            "recorder": None
            if recorder is None
            else journal.save(recorder.state_dict(), "events", "recorded"),
        },
        objects="placeholder",
    )


class _Journal:
    """The append-only lists of a run (the logged rounds, the recorded steps) in
    ``<run folder>/.resume/``: each checkpoint writes only what was added since the previous
    one (one data-only chunk per list), so checkpoints stay the size of one round whatever
    the run's length; the checkpoint holds the count. Removed once the run is complete."""

    def __init__(self, out_dir: Path | None) -> None:
        self.folder = None if out_dir is None else out_dir / ".resume"
        self.written: dict[str, int] = {}

    def save(self, state: dict[str, Any], key: str, name: str) -> dict[str, Any]:
        """``state`` with its list ``state[key]`` replaced by ``{"journal": name, "count": n}``."""
        from socialenv.envs.checkpoint import write_checkpoint

        items = state[key]
        start = self.written.get(name, 0)
        if self.folder is not None and len(items) > start:
            write_checkpoint(self.folder / f"{name}-{start:09d}.ckpt", "journal", items[start:])
        self.written[name] = len(items)
        return {**state, key: {"journal": name, "count": len(items)}}

    def restore(self, state: Any, key: str) -> dict[str, Any]:
        """``state`` with ``state[key]`` read back from the journal (its first ``count`` items)."""
        from socialenv.envs.checkpoint import CheckpointError, read_checkpoint

        ref = state.get(key) if isinstance(state, dict) else None
        if (
            not isinstance(ref, dict)
            or not isinstance(ref.get("journal"), str)
            or isinstance(ref.get("count"), bool)
            or not isinstance(ref.get("count"), int)
            or ref["count"] < 0
        ):
            raise CheckpointError(
                f"{self.folder}: the checkpoint's {key} is not a journal reference"
            )
        name, count = ref["journal"], ref["count"]
        if name not in ("logged", "recorded") or self.folder is None:
            raise CheckpointError(f"{self.folder}: journal {name!r} is not allowed")
        items: list[Any] = []
        for path in sorted(self.folder.glob(f"{name}-*.ckpt")):
            start = (
                int(path.stem.rsplit("-", 1)[1]) if path.stem.rsplit("-", 1)[1].isdigit() else -1
            )
            if (
                start < 0 or start >= count
            ):  # written after the checkpoint: replaced as the run goes on
                path.unlink()
                continue
            if start > len(items):
                raise CheckpointError(f"{path}: the journal misses items {len(items)}..{start - 1}")
            chunk = read_checkpoint(path, "journal")
            if not isinstance(chunk, list):
                raise CheckpointError(f"{path} is not a journal chunk (a list)")
            items = items[:start] + chunk
        if len(items) < count:
            raise CheckpointError(
                f"{self.folder}: the journal holds {len(items)} {name} items, the "
                f"checkpoint needs {count}"
            )
        self.written[name] = count
        return {**state, key: items[:count]}

    def remove(self) -> None:
        import shutil

        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
