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
from agent_models.validation import Limit, check_fields, check_path_segment

#: Policies that are not bandits: "origin" leaves every slot empty (no intervention);
#: the bandit names come from ``bandits.POLICIES``.
BUILTIN_POLICIES = ("origin",)
WANDB_MODES = ("online", "offline", "disabled")


#: Bandits that also read the follow graph (``observe_graph``); name -> "module:class".
GRAPH_POLICIES = {"eenet_gnn": "bandits.graph_eenet:GraphEENet"}


#: Policies registered by plugins: name -> factory(env, seed, **hyper-parameters) (the shipped
#: ``baselines`` plugin adds popularity, mmr and suppress_flagged; :mod:`agent_models.plugins`).
_PLUGIN_POLICIES: dict[str, Callable[..., Any]] = {}


def register_policy(name: str, factory: Callable[..., Any]) -> None:
    """Make ``name`` a policy of ``policysim run`` / ``sweep``: ``factory(env, seed, **kw)``
    (``env`` unwrapped) returns an object with ``select``, ``update`` and ``reset``."""
    _PLUGIN_POLICIES[name] = factory


def policy_names() -> tuple[str, ...]:
    """Every policy name ``run`` and ``sweep`` accept: origin, the bandits, the graph
    bandits and the plugins' policies."""
    from agent_models.plugins import load_plugins
    from bandits import POLICIES

    load_plugins()
    return tuple(dict.fromkeys(BUILTIN_POLICIES + tuple(POLICIES) + tuple(GRAPH_POLICIES)
                               + tuple(_PLUGIN_POLICIES)))


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


class OriginPolicy:
    """No intervention (the paper's Origin row): every slot of the slate is left empty."""

    def __init__(self, no_op: int) -> None:
        self.no_op = no_op

    def select(self, contexts: np.ndarray, mask: np.ndarray, budget: int) -> np.ndarray:
        return np.full(budget, self.no_op, np.int64)

    def inclusion_probabilities(self, contexts: np.ndarray, mask: np.ndarray | None = None,
                                budget: int = 1) -> tuple[np.ndarray, str]:
        """No arm is ever chosen: every inclusion probability is 0."""
        return np.zeros(len(contexts)), "deterministic"

    def is_deterministic(self, contexts: np.ndarray, mask: np.ndarray | None = None) -> bool:
        return True

    def update(self, contexts: np.ndarray, rewards: np.ndarray) -> None:
        del contexts, rewards

    def reset(self) -> None:
        pass


def make_run_policy(name: str, env: Any, seed: int, **kwargs: Any) -> Any:
    """A policy for ``env`` (an unwrapped PolicySim env): "origin", any bandit name, a graph
    bandit of :data:`GRAPH_POLICIES` (built with ``cls.build``; ``run`` feeds it the graph),
    or a plugin's policy (:func:`register_policy`)."""
    if name == "origin":
        return OriginPolicy(env.no_op)
    if name not in _PLUGIN_POLICIES:
        allowed = policy_names()  # loads the plugins, which register their policies
        if name not in allowed:
            raise ValueError(f"policy={name!r} is not allowed: use one of {allowed}")
    if name in _PLUGIN_POLICIES:
        return _PLUGIN_POLICIES[name](env, seed, **kwargs)
    if name in GRAPH_POLICIES:
        import importlib

        module, cls_name = GRAPH_POLICIES[name].split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        return cls.build(context_dim=env.context_dim, seed=seed, **kwargs)
    from bandits import make_policy

    return make_policy(name, context_dim=env.context_dim, seed=seed, **kwargs)


def arm_groups(env: Any) -> np.ndarray:
    """(K,) the sampled user each arm belongs to; at most ``env.per_user`` arms of a group
    take effect in a round (Rec: recommended slots per user; Exposure: one level per user)."""
    return getattr(env, "unwrapped", env).arm_groups()


def select_action(policy: Any, obs: dict[str, np.ndarray], env: Any) -> np.ndarray:
    """The (slate_size,) slate ``policy`` picks for ``obs`` on ``env`` (a PolicySim env): at most
    ``per_user`` arms per sampled user (:func:`bandits.slate.select_per_group`), padded with
    empty slots (``no_op``) if fewer arms are allowed than the slate holds."""
    from bandits.slate import select_per_group

    base = getattr(env, "unwrapped", env)
    if base.config.action_format != "slate":
        raise ValueError(
            f"select_action builds slates of arm indices; this env takes action_format="
            f"{base.config.action_format!r}: make it with action_format=\"slate\" (the default)"
        )
    mask = obs["action_mask"].astype(bool)
    action = np.full(base.slate_size, base.no_op, np.int64)
    if isinstance(policy, OriginPolicy) or not mask.any():
        return action
    picks = select_per_group(policy, obs["arms"], mask, base.slate_size, base.arm_groups(),
                             base.per_user)
    action[: len(picks)] = picks
    return action


def select_logged_action(policy: Any, obs: dict[str, np.ndarray], env: Any
                         ) -> tuple[np.ndarray, np.ndarray, str]:
    """:func:`select_action` and the propensity of each slot's arm: the (slate_size,) slate,
    the (slate_size,) inclusion probabilities (NaN for empty slots) and how they were
    obtained (:data:`bandits.base.PROPENSITY_METHODS`; :func:`bandits.slate.per_group_inclusion`).
    The slate is the one ``select_action`` picks."""
    from bandits.slate import per_group_inclusion

    base = getattr(env, "unwrapped", env)
    mask = obs["action_mask"].astype(bool)
    propensities = np.full(base.slate_size, np.nan)
    if isinstance(policy, OriginPolicy) or not mask.any():
        return np.full(base.slate_size, base.no_op, np.int64), propensities, "deterministic"
    probs, method = per_group_inclusion(policy, obs["arms"], mask, base.slate_size,
                                        base.arm_groups(), base.per_user)
    action = select_action(policy, obs, base)
    picked = action[action != base.no_op]
    propensities[: len(picked)] = probs[picked]
    if method == "monte_carlo":
        propensities = np.maximum(propensities, 1.0 / (policy.propensity_draws + 1))
    return action, propensities, method


#: Metrics summarized as the mean over the rounds of the (last) episode: they measure what
#: happens during a round. Every other metric is a state, summarized by its last-round value.
FLOW_METRICS = frozenset({
    "reward", "toxicity", "cross_interaction_ratio", "cross_interaction_ratio_recommended",
    "engagement", "exposure_removed", "recommended_reaction_rate",
})
ROUND_MEAN = "mean over the rounds of the last episode"
LAST_ROUND = "value at the last round"
RUN_STATUSES = ("running", "complete", "failed", "interrupted")
CHECKPOINT_FILE = "checkpoint.ckpt"


def _ci95(values: Sequence[float]) -> float | None:
    """Half-width of the 95% t-interval of the mean; None for fewer than 2 values (n/a)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return None
    from scipy import stats

    return float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def format_mean_ci(stat: dict[str, Any], digits: int = 4) -> str:
    """``"mean ± ci"`` of a summary entry, or ``"mean ± n/a"`` when there is no CI (1 seed)."""
    ci = stat.get("ci95")
    return f"{stat['mean']:.{digits}f} ± " + ("n/a" if ci is None else f"{ci:.{digits}f}")


class RunningSummary:
    """The per-seed values :func:`summarize` reports, kept up to date row by row (O(metrics)
    per row, so a summary can be rewritten after every round of a long run)."""

    def __init__(self) -> None:
        self._seeds: dict[Any, dict[str, Any]] = {}

    def add(self, row: dict[str, Any]) -> None:
        seed, episode = row["seed"], row["episode"]
        state = self._seeds.get(seed)
        if state is None or episode > state["episode"]:
            state = {"episode": episode, "sums": {}, "counts": {}, "last": row}
            self._seeds[seed] = state
        elif episode < state["episode"]:
            return
        for key, value in row.items():
            if key in FLOW_METRICS:
                state["sums"][key] = state["sums"].get(key, 0.0) + float(value)
                state["counts"][key] = state["counts"].get(key, 0) + 1
        state["last"] = row

    def per_seed(self, keys: Sequence[str]) -> dict[Any, dict[str, float]]:
        out = {}
        for seed in sorted(self._seeds):
            state = self._seeds[seed]
            last = state["last"]
            out[seed] = {k: state["sums"][k] / state["counts"][k] if k in FLOW_METRICS else float(last[k])
                         for k in keys if k in last and (k not in FLOW_METRICS or k in state["counts"])}
        return out

    def summary(self, keys: Sequence[str]) -> dict[str, Any]:
        per_seed = self.per_seed(keys)
        out: dict[str, Any] = {"seeds": len(per_seed), "per_seed": per_seed}
        for k in keys:
            values = [s[k] for s in per_seed.values() if k in s]
            if values:
                out[k] = {"mean": float(np.mean(values)), "ci95": _ci95(values),
                          "aggregation": ROUND_MEAN if k in FLOW_METRICS else LAST_ROUND}
        out["ci95"] = ("95% t-interval over seeds" if len(per_seed) > 1
                       else "n/a: one seed gives no interval")
        return out


def summarize(rows: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Per-seed value of each key (its seed's last episode: the mean over the rounds for
    flow metrics (:data:`FLOW_METRICS`), the last round's value for state metrics), then
    mean ± 95% CI over seeds (``ci95`` None with one seed). Each metric's entry says which
    (``aggregation``)."""
    running = RunningSummary()
    for row in rows:
        running.add(row)
    return running.summary(keys)


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
            raise ValueError(f"{name}={users!r} is not allowed: use one of {names} or a Brain instance")


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
        raise ValueError(f"policy={config.policy!r} is not allowed: use one of {allowed}")
    from socialenv.registration import ENV_IDS

    if config.env_id not in ENV_IDS:
        raise ValueError(f"env_id={config.env_id!r} is not allowed: use one of {sorted(ENV_IDS)}")
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
