"""Grid files in the W&B sweep format, read into a :class:`SweepConfig`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policysim.sweep.config import SweepConfig

#: Largest grid file read (bytes) and deepest nesting (checked before the YAML is expanded;
#: aliases are refused, see :mod:`policysim_infra.datafile`).
MAX_GRID_FILE_BYTES = 1 << 20
MAX_GRID_DEPTH = 32


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
    from policysim_infra.datafile import read_data_file

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"grid file {path} does not exist")
    spec = (
        read_data_file(path, "grid file", max_bytes=MAX_GRID_FILE_BYTES, max_depth=MAX_GRID_DEPTH)
        or {}
    )
    if not isinstance(spec, dict) or not isinstance(spec.get("parameters"), dict):
        raise ValueError(f"{path}: a grid file needs a 'parameters' mapping (W&B sweep format)")
    method = spec.get("method", "grid")
    if method != "grid":
        raise ValueError(
            f"{path}: method={method!r} is not allowed: policysim sweep runs 'grid' sweeps"
        )
    fixed: dict[str, Any] = {}
    varied: dict[str, list[Any]] = {}
    for key, param in spec["parameters"].items():
        if not isinstance(param, dict) or not ({"value", "values"} & set(param)):
            raise ValueError(
                f"{path}: parameter {key!r} needs 'value' or 'values' (grid sweeps take no distributions)"
            )
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
        raise ValueError(
            f"{path}: policy_kwargs must be a single mapping policy -> hyper-parameters"
        )
    return SweepConfig(
        name=str(spec.get("name", path.stem)),
        env_id=str(env_ids[0]),
        policies=tuple(take("policy", ["origin", "random"])),
        seeds=tuple(take("seed", [0])),
        episodes=int(episodes[0]),
        env_kwargs=fixed,
        grid=varied,
        policy_kwargs=policy_kwargs[0],
    )
