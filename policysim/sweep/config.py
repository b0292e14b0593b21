"""What a sweep runs: :class:`SweepConfig` (policies × seeds × env configs) and its trials."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from policysim_infra.validation import (
    Limit,
    check_fields,
    check_path_segment,
    did_you_mean,
    field_limits,
)

WANDB_MODES = ("online", "offline", "disabled")
#: Grid-file parameters that are not env arguments.
RUN_PARAMETERS = ("env_id", "policy", "seed", "episodes", "policy_kwargs")


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
    seeds: Annotated[Sequence[int], Limit(ge=0, le=2_000_000)] = (0,)
    episodes: Annotated[int, Limit(ge=1, le=1_000_000)] = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    policy_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    wandb: str | None = None
    wandb_project: str = "policysim"
    out_dir: str | None = "runs/sweeps"

    def __post_init__(self) -> None:
        check_fields(self, "")
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
                raise ValueError(
                    f"grid[{key!r}] must be a non-empty list of values; got {values!r}"
                )
            if key in RUN_PARAMETERS:
                raise ValueError(
                    f"grid[{key!r}]: {key} is set by the sweep itself, not varied as an env argument"
                )
        unknown = set(self.policy_kwargs) - set(self.policies)
        if unknown:
            raise ValueError(f"policy_kwargs names policies not in the sweep: {sorted(unknown)}")

    def validate(self) -> None:
        """Check policy names and env arguments before any trial starts."""
        from baselines.policies import policy_names
        from socialenv.envs.registration import ENV_IDS, env_keywords

        if self.env_id not in ENV_IDS:
            raise ValueError(
                f"env_id={self.env_id!r} is not allowed: use one of {sorted(ENV_IDS)}"
                f"{did_you_mean(self.env_id, ENV_IDS)}"
            )
        allowed = policy_names()
        bad = [p for p in self.policies if p not in allowed]
        if bad:
            raise ValueError(f"unknown policy name(s) {bad}: use any of {allowed}")
        from policysim.runner import check_population

        check_population(self.env_kwargs.get("users", "surrogate"), "env_kwargs['users']")
        for i, users in enumerate(self.grid.get("users", [])):
            check_population(users, f"grid['users'][{i}]")
        names = set(env_keywords(self.env_id))
        unknown = (set(self.env_kwargs) | set(self.grid)) - names
        if unknown:
            raise ValueError(f"unknown env argument(s) {sorted(unknown)}; allowed: {sorted(names)}")

    def configs(self) -> list[dict[str, Any]]:
        """The grid's configs (each a dict of the varied env arguments)."""
        keys = list(self.grid)
        return [
            dict(zip(keys, values, strict=True))
            for values in itertools.product(*(self.grid[k] for k in keys))
        ]

    def trials(self) -> list[Trial]:
        """All trials, policy-major, then config, then seed."""
        out = []
        for policy in self.policies:
            for ci, cfg in enumerate(self.configs()):
                for seed in self.seeds:
                    out.append(
                        Trial(
                            index=len(out),
                            name=f"{policy}-c{ci}-s{seed}",
                            env_id=self.env_id,
                            policy=policy,
                            seed=seed,
                            episodes=self.episodes,
                            config_index=ci,
                            config=cfg,
                            env_kwargs={**self.env_kwargs, **cfg},
                            policy_kwargs=dict(self.policy_kwargs.get(policy, {})),
                        )
                    )
        return out


#: The limits :class:`SweepConfig` declares on its fields (derived).
SWEEP_LIMITS = field_limits(SweepConfig)


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
