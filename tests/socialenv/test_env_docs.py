"""The env docstrings follow Gymnasium's sections, and what they state is what the code does:
the arm-feature tables list the code's feature tuples in order with ranges the observations
respect, and the ``## Arguments`` tables list exactly the keyword arguments ``gym.make``
accepts, with their defaults."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from socialenv.core.config import EnvConfig
from socialenv.envs import ExposureEnv, ModerationEnv, PolicySimEnv, RecEnv
from socialenv.envs.exposure import EXPOSURE_ARM_FEATURES
from socialenv.envs.moderation import MODERATION_FEATURES
from socialenv.envs.rec import REC_ARM_FEATURES
from socialenv.mechanisms.governance import ModerationConfig
from tests.support import EXPOSURE, MODERATION, REC, small_env

SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Rewards",
    "Starting State",
    "Episode End",
    "Arguments",
    "Version History",
)
ENVS = {
    REC: (RecEnv, REC_ARM_FEATURES, {"candidate_users": 12, "budget": 2}),
    EXPOSURE: (ExposureEnv, EXPOSURE_ARM_FEATURES, {"exposure_users": 12}),
    MODERATION: (ModerationEnv, MODERATION_FEATURES, {"budget": 4}),
}


def table(doc: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table whose header row starts ``header``."""
    lines = [line.strip() for line in doc.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def section(doc: str, name: str) -> str:
    match = re.search(rf"^\s*## {name}\n(.*?)(?=^\s*## |\Z)", doc, re.S | re.M)
    assert match, f"no ## {name} section"
    return match.group(1)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_docstring_has_gymnasium_sections_and_states_the_no_op(env_id: str) -> None:
    cls = ENVS[env_id][0]
    doc = inspect.getdoc(cls)
    headings = re.findall(r"^## (.+)$", doc, re.M)
    assert headings == list(SECTIONS), headings
    actions = " ".join(section(doc, "Action Space").split())
    assert "**No-op**: the value K (``env.unwrapped.no_op``)" in actions
    assert '``"slate"`` (default): ``MultiDiscrete([K + 1] *' in actions
    assert '``"scores"``: ``Box(-1, 1, (K,), float32)``' in actions
    assert "* v0:" in section(doc, "Version History")


def feature_rows(cls: type) -> list[list[str]]:
    return table(
        section(inspect.getdoc(cls), "Observation Space"), "| idx | feature | meaning | min | max |"
    )


@pytest.mark.parametrize("env_id", list(ENVS))
def test_feature_table_lists_the_code_features_in_order(env_id: str) -> None:
    cls, features, _ = ENVS[env_id]
    rows = feature_rows(cls)
    assert [row[1] for row in rows] == list(features)
    assert [int(row[0]) for row in rows] == list(range(len(features)))
    assert cls.num_arm_features == len(features)


def bound(cell: str, env: PolicySimEnv) -> float:
    """A documented min/max: a number, ``expression ≈ number``, or an expression in the
    config (``rounds + 1``, ``log1p(N)``)."""
    text = cell.split("≈")[-1].strip().replace("−", "-")
    names = {
        "rounds": env.config.rounds,
        "N": env._num_users(),
        "inf": np.inf,
        "log1p": np.log1p,
        "log": np.log,
    }
    return float(eval(text, {"__builtins__": {}}, names))  # noqa: S307 - our own docstring


@pytest.mark.parametrize("env_id", list(ENVS))
def test_feature_ranges_match_the_space_and_hold_in_observations(env_id: str) -> None:
    cls, features, kwargs = ENVS[env_id]
    env = gym.make(env_id, **small_env(num_users=60, **kwargs))
    base = env.unwrapped
    rows = feature_rows(cls)
    low = np.array([bound(row[3], base) for row in rows])
    high = np.array([bound(row[4], base) for row in rows])
    box = env.observation_space["arms"]
    space_low, space_high = box.low[0, -len(features) :], box.high[0, -len(features) :]
    finite = np.isfinite(space_low) & np.isfinite(space_high)
    # a bounded column's Box bounds are the documented range (an unbounded one, Moderation's,
    # is checked against the observations below only)
    np.testing.assert_allclose(low[finite], space_low[finite], atol=1e-3)
    np.testing.assert_allclose(high[finite], space_high[finite], atol=1e-3)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    seen = 0
    for _ in range(3):
        arms = obs["arms"][obs["action_mask"].astype(bool)][:, -len(features) :]
        bad = (arms < low - 1e-5) | (arms > high + 1e-5)
        assert not bad.any(), (
            f"{[features[j] for j in np.flatnonzero(bad.any(axis=0))]} outside the documented range"
        )
        seen += len(arms)
        obs, _, terminated, truncated, _ = env.step(
            rng.integers(0, base.no_op + 1, env.action_space.shape)
        )
        if terminated or truncated:
            break
    assert seen > 0


def argument_rows(cls: type) -> dict[str, str]:
    rows = table(section(inspect.getdoc(cls), "Arguments"), "| argument | default | description |")
    names = [row[0] for row in rows]
    assert len(names) == len(set(names)), names
    return {row[0]: row[1] for row in rows}


def documented_default(cell: str):
    try:
        return ast.literal_eval(cell)
    except (ValueError, SyntaxError):
        return cell


@pytest.mark.parametrize("env_id", list(ENVS))
def test_arguments_tables_list_exactly_the_accepted_keywords_with_their_defaults(
    env_id: str,
) -> None:
    cls = ENVS[env_id][0]
    shared, own = argument_rows(PolicySimEnv), argument_rows(cls)
    assert not set(shared) & set(own), set(shared) & set(own)
    documented = {**shared, **own}
    fields = {f.name: f for f in dataclasses.fields(EnvConfig)}
    lever_fields = {f.name: f for f in dataclasses.fields(cls.lever_class.config_class)}
    assert not set(fields) & set(lever_fields)
    constructor = {"render_mode", "seed"}
    assert set(documented) == set(fields) | set(lever_fields) | constructor
    # the env's own table lists its lever's fields and no other env's
    assert set(lever_fields) <= set(own)
    defaults = {
        name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
        for name, f in {**fields, **lever_fields}.items()
    }
    defaults.update(cls.default_kwargs())
    signature = inspect.signature(cls.__init__).parameters
    defaults.update({name: signature[name].default for name in constructor})
    for name, cell in documented.items():
        value = documented_default(cell)
        if dataclasses.is_dataclass(defaults[name]):
            assert value == f"{type(defaults[name]).__name__}()", (name, cell)
        else:
            assert value == defaults[name], (name, cell, defaults[name])
    # every documented keyword reaches the config (and nothing else is accepted)
    env = gym.make(env_id, **small_env(num_users=60, rounds=2, **ENVS[env_id][2]))
    assert env.unwrapped.config.num_users == 60
    for name, value in ENVS[env_id][2].items():
        assert getattr(env.unwrapped.lever_config, name) == value
    with pytest.raises(
        ValueError, match=r"kwargs=\['num_user'\] is not allowed: unknown env argument"
    ):
        gym.make(env_id, num_user=60)


def test_moderation_arguments_name_every_moderation_field() -> None:
    text = section(inspect.getdoc(ModerationEnv), "Arguments")
    listed = re.findall(r"``(\w+)``", text.split("``moderation={...}`` fields:")[1])
    assert listed == [f.name for f in dataclasses.fields(ModerationConfig)]
