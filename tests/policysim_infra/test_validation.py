"""One checker for every config field: types, finiteness, documented bounds before any
allocation, the field named in every message; scenario files; names; dataset index lines."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import socialenv  # noqa: F401 - registers the env ids
from agent_models.surrogate import SurrogateConfig
from policysim.runner import RunConfig
from policysim.sweep import SweepConfig
from socialenv.core.config import EnvConfig
from socialenv.envs.exposure import ExposureLeverConfig
from socialenv.scenarios.builtin import PopulationConfig, make_scenario
from socialenv.scenarios.scenario import Scenario

BAD_ENV_KWARGS = [
    ({"num_users": True}, "num_users=True is not allowed: an integer (not a bool)"),
    ({"num_users": 100.0}, "num_users=100.0 is not allowed: an integer"),
    ({"num_users": "100"}, "num_users='100' is not allowed: an integer"),
    ({"num_users": 10**9}, "num_users=1000000000 is not allowed: an integer in [10, 1000000]"),
    ({"rounds": True}, "rounds=True is not allowed"),
    ({"rounds": 0}, "rounds=0 is not allowed"),
    ({"budget": 2.5}, "budget=2.5 is not allowed"),
    ({"budget": 10**7}, "budget=10000000 is not allowed"),
    (
        {"candidate_users": 100_000, "candidates": {"interest": 100}},
        "candidate_users=100000 is not allowed: candidate_users × candidate posts per user",
    ),
    ({"exposure_users": 10**7}, "exposure_users=10000000 is not allowed"),
    (
        {"exposure_levels": (0.5, float("nan"))},
        "exposure_levels[1]=nan is not allowed: a finite number",
    ),
    ({"exposure_levels": "0.5"}, "exposure_levels='0.5' is not allowed: a list"),
    ({"exposure_levels": tuple(np.linspace(0, 1, 1000))}, "exposure_levels="),
    ({"stance_ema": float("inf")}, "stance_ema=inf is not allowed: a finite number"),
    ({"stance_ema": 1.0}, "stance_ema=1.0 is not allowed"),
    ({"memory_ema": None}, "memory_ema=None is not allowed: a number"),
    ({"observe_users": 1}, "observe_users=1 is not allowed: true or false"),
    ({"recommender": {"window": 0}}, "recommender.window=0 is not allowed"),
    (
        {"recommender": {"candidates_per_slot": 10**6}},
        "recommender.candidates_per_slot=1000000 is not allowed",
    ),
    (
        {"recommender": {"personalized_stance_weight": float("nan")}},
        "recommender.personalized_stance_weight=nan",
    ),
    ({"recommender": {"relational": True}}, "recommender.relational=True is not allowed"),
    ({"reward": {"stance_weight": float("nan")}}, "reward.stance_weight=nan is not allowed"),
    (
        {"reward": {"engagement": {"like": "high"}}},
        "reward.engagement['like']='high' is not allowed",
    ),
    ({"context": {"hops": 2.0}}, "context.hops=2.0 is not allowed"),
    ({"context": {"alpha": float("-inf")}}, "context.alpha=-inf is not allowed"),
    (
        {"surrogate": {"stance_noise": float("nan")}},
        "surrogate.stance_noise=nan is not allowed: a finite number",
    ),
    ({"surrogate": {"post_rate": True}}, "surrogate.post_rate=True is not allowed"),
    ({"surrogate": {"like_bias": "high"}}, "surrogate.like_bias='high' is not allowed"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_ENV_KWARGS)
def test_bad_env_config_is_refused_naming_the_field(kwargs: dict, message: str) -> None:
    start = time.perf_counter()
    # the Exposure lever's own arguments go to the env whose lever takes them
    env_id = (
        "PolicySim-Exposure-v0"
        if {"exposure_users", "exposure_levels"} & set(kwargs)
        else "PolicySim-Rec-v0"
    )
    with pytest.raises(ValueError) as err:
        gym.make(env_id, **kwargs)
    assert message in str(err.value)
    assert time.perf_counter() - start < 2  # refused before anything big is allocated


def test_numpy_numbers_are_accepted_and_converted() -> None:
    config = EnvConfig(
        num_users=np.int64(50),
        rounds=np.int32(2),
        stance_ema=np.float32(0.5),
        observe_users=np.bool_(True),
        recommender={"window": np.int16(3)},
    )
    assert type(config.num_users) is int and type(config.rounds) is int
    assert type(config.stance_ema) is float
    assert ExposureLeverConfig(exposure_levels=np.array([0.0, 1.0])).exposure_levels == (0.0, 1.0)
    assert config.observe_users is True and type(config.recommender.window) is int
    env = gym.make("PolicySim-Rec-v0", num_users=np.int64(50), rounds=np.int64(1))
    env.reset(seed=0)
    assert SurrogateConfig(post_rate=np.float64(0.2)).post_rate == 0.2


def test_population_run_and_sweep_configs_use_the_same_checker() -> None:
    with pytest.raises(
        ValueError, match=r"population.latent_dim=100000 is not allowed: an integer in \[2, 4096\]"
    ):
        PopulationConfig(latent_dim=100_000)
    with pytest.raises(ValueError, match=r"population.activity_beta\[0\]=nan is not allowed"):
        PopulationConfig(activity_beta=(float("nan"), 1.0))
    with pytest.raises(ValueError, match="episodes=True is not allowed"):
        RunConfig(episodes=True)
    with pytest.raises(ValueError, match=r"seeds\[0\]=-1 is not allowed"):
        RunConfig(seeds=(-1,))
    with pytest.raises(ValueError, match=r"seeds\[0\]='1' is not allowed"):
        SweepConfig(seeds=("1",))


@pytest.mark.parametrize(
    "name", ["../x", "/tmp/x", "a/b", "..", ".", "", "a\\b", "x" * 300, ".hidden", "-rf"]
)
def test_run_and_sweep_names_are_one_path_segment(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not allowed: one folder name"):
        RunConfig(run_name=name, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="is not allowed: one folder name"):
        SweepConfig(name=name, out_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    RunConfig(run_name="ok-name_1.v2=3")


def _saved(tmp_path: Path) -> tuple[Scenario, Path]:
    scenario = make_scenario("abortion", 40, 0)
    return scenario, scenario.save(tmp_path / "pop")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("opinion", np.nan, "Scenario.opinion holds NaN or inf"),
        ("activity", np.nan, "Scenario.activity holds NaN or inf"),
        ("susceptibility", np.inf, "Scenario.susceptibility holds NaN or inf"),
        ("toxicity_propensity", np.nan, "Scenario.toxicity_propensity holds NaN"),
    ],
)
def test_scenario_nan_is_refused(tmp_path: Path, field: str, value: float, message: str) -> None:
    scenario, _ = _saved(tmp_path)
    getattr(scenario, field)[3] = value
    with pytest.raises(ValueError, match=message):
        scenario.validate()
    path = scenario.save(tmp_path / "bad")
    with pytest.raises(ValueError, match=message):
        Scenario.load(path)


def test_scenario_profile_codes_names_and_news_are_checked(tmp_path: Path) -> None:
    scenario, _ = _saved(tmp_path)
    scenario.profiles.identity.codes[0] = 99
    with pytest.raises(ValueError, match="profiles.identity.codes must index its vocab"):
        scenario.validate()
    scenario, _ = _saved(tmp_path)
    scenario.profiles.names = ["a"] * 3
    with pytest.raises(ValueError, match="profiles.names must be 40 non-empty strings"):
        scenario.validate()
    scenario, _ = _saved(tmp_path)
    scenario.news[0] = type(scenario.news[0])(-1, "x", 0.1)
    with pytest.raises(ValueError, match=r"Scenario.news\[0\]"):
        scenario.validate()


def test_corrupt_scenario_files_name_the_file(tmp_path: Path) -> None:
    _, path = _saved(tmp_path)
    path.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=f"scenario file {path}.*is not a valid scenario"):
        Scenario.load(path)
    _, path = _saved(tmp_path)
    path.with_suffix(".json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"scenario file {path}"):
        Scenario.load(path)
    _, path = _saved(tmp_path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files if k != "opinion"}
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=f"scenario file {path}.*lacks 'opinion'"):
        Scenario.load(path)
    with pytest.raises(ValueError, match=f"scenario file {path}"):
        gym.make("PolicySim-Rec-v0", scenario=str(path))


def test_weibo_index_lines_cannot_leave_the_dataset_folder(tmp_path: Path) -> None:
    from socialenv.scenarios.loaders.common import DatasetFormatError
    from socialenv.scenarios.loaders.weibo import load_weibo

    secret = tmp_path / "outside.json"
    secret.write_text("[]")
    root = tmp_path / "weibo"
    (root / "Weibo").mkdir(parents=True)
    for eid in ("../../outside", "../outside", "/etc/passwd", "a/b"):
        (root / "Weibo.txt").write_text(f"eid:{eid}\tlabel:1\t1 2\n")
        with pytest.raises(DatasetFormatError, match="event id is letters, digits"):
            load_weibo(root)


def test_huge_float_action_is_reported_as_given() -> None:
    env = gym.make("PolicySim-Rec-v0", num_users=50, rounds=2)
    env.reset(seed=0)
    action = np.full(env.action_space.shape, 1e20)
    with pytest.raises(ValueError, match=r"action holds arm index (np.float64\()?1e\+20"):
        env.unwrapped.step(action)


def test_llm_config_numbers_follow_the_same_rules() -> None:
    from agent_models.llm import LLMConfig

    for kwargs, message in [
        ({"max_retries": True}, "max_retries=True is not allowed: an integer (not a bool)"),
        ({"max_retries": 2.5}, "max_retries=2.5 is not allowed: an integer"),
        ({"batch_size": "4"}, "batch_size='4' is not allowed"),
        ({"temperature": float("nan")}, "temperature"),
        ({"memory": {"top_k": True}}, "memory.top_k=True is not allowed"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            LLMConfig(model="m", **kwargs)
    config = LLMConfig(
        model="m", batch_size=np.int64(4), temperature=np.float32(0.5), max_retries=np.int32(2)
    )
    assert (config.batch_size, config.temperature, config.max_retries) == (4, 0.5, 2)
