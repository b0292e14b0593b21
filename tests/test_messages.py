"""One error template for config, policies and the command line; a missing optional extra
names its ``pip install``."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import bandits
from baselines.opinion_dynamics import make_opinion_model
from policysim.cli import app
from policysim_infra.extras import DependencyNotInstalled, require
from socialenv.core.config import EnvConfig
from socialenv.envs.rec import RecLeverConfig

ROOT = Path(__file__).resolve().parents[1]
#: ``name=value is not allowed: what is`` (policysim_infra.validation.config_error).
TEMPLATE = re.compile(r"^\S+=.+ is not allowed: .+", re.S)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RecLeverConfig(budget=0), "budget=0 is not allowed: an integer"),
        (
            lambda: EnvConfig.from_kwargs(num_user=10),
            "kwargs=['num_user'] is not allowed: unknown env argument(s); allowed: action_format, activity",
        ),
        (
            lambda: bandits.make_policy("linucb", 4, alpha=-1.0),
            "alpha=-1.0 is not allowed: a finite number >= 0",
        ),
        (
            lambda: bandits.make_policy("eenet", 4, hidden_sizes=[]),
            "hidden_sizes=() is not allowed: a non-empty tuple of positive integers",
        ),
        (
            lambda: bandits.make_policy("linucb", 4, alhpa=1.0),
            "hyperparameters=['alhpa'] is not allowed: unknown hyper-parameter(s) of policy 'linucb'; allowed: alpha",
        ),
        (
            lambda: bandits.make_policy("lin_ucb", 4),
            "policy='lin_ucb' is not allowed: one of eenet",
        ),
        (
            lambda: make_opinion_model("lorenz", mu=0.1),
            "params=['mu'] is not allowed: unknown parameter(s) of opinion model 'lorenz'; allowed:",
        ),
    ],
)
def test_config_and_policy_errors_share_one_template(build, message: str) -> None:
    with pytest.raises(ValueError) as err:
        build()
    assert TEMPLATE.match(str(err.value)), str(err.value)
    assert str(err.value).startswith(message), str(err.value)


def test_slate_budget_error_uses_the_template() -> None:
    policy = bandits.make_policy("random", 3)
    with pytest.raises(ValueError, match=r"^budget=0 is not allowed: an integer >= 1$"):
        policy.select(np.zeros((4, 3), np.float32), None, 0)


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("[1, 2]", "a JSON object, not a list"),
        ("{bad", "a JSON object (Expecting property name"),
    ],
)
def test_cli_json_option_errors_use_the_template(value: str, allowed: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--env-kwargs", value, "--out", str(tmp_path)])
    assert result.exit_code == 2
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())  # rich's error box
    assert f"--env-kwargs='{value}' is not allowed: {allowed}" in text, text
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("module", "extra", "call"),
    [
        ("pettingzoo", "rl", lambda: __import__("socialenv").parallel_env()),
        (
            "minari",
            "rl",
            lambda: __import__("policysim.offline").offline.check_dataset_free(".", "x/y-v0"),
        ),
        (
            "profanity_check",
            "llm",
            lambda: __import__(
                "socialenv.scenarios.loaders.common"
            ).scenarios.loaders.common.toxicity_scores(["x"], method="profanity"),
        ),
        (
            "stable_baselines3",
            "rl",
            lambda: __import__("baselines.sb3").sb3.train_ppo(total_timesteps=1),
        ),
        (
            "vaderSentiment",
            "llm",
            lambda: __import__("agent_models.profile").profile.sentiment_scores(["x"]),
        ),
        (
            "trl",
            "train",
            lambda: __import__("agent_models.training.train").training.train.train_sft(
                ".", [], "."
            ),
        ),
        (
            "wandb",
            "wandb",
            lambda: __import__("policysim.sweep.trial").sweep.trial.run_trial(
                __import__("policysim.sweep.config").sweep.config.Trial(
                    index=0,
                    name="t",
                    env_id="PolicySim-Rec-v0",
                    policy="origin",
                    seed=0,
                    episodes=1,
                    config_index=0,
                    config={},
                    env_kwargs={"num_users": 50, "rounds": 1},
                    policy_kwargs={},
                ),
                wandb_mode="offline",
            ),
        ),
    ],
)
def test_a_missing_extra_names_its_pip_install(
    module: str, extra: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes an import fail; submodules an earlier test imported too
    for name in [module, *(m for m in sys.modules if m.startswith(module + "."))]:
        monkeypatch.setitem(sys.modules, name, None)
    if module == "vaderSentiment":
        monkeypatch.setattr("agent_models.profile._VADER", None)
    with pytest.raises(
        DependencyNotInstalled, match=re.escape(f'pip install "policysim[{extra}]"')
    ) as err:
        call()
    assert isinstance(err.value, ImportError) and err.value.extra == extra


def test_a_dependency_of_no_extra_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(
        ImportError, match=r"needs pandas, which is not installed: pip install pandas \(or pass"
    ):
        require("pandas", None, "survey(as_frame=True)", hint="or pass as_frame=False")


def _require_calls() -> list[tuple[Path, str, str]]:
    """(file, module, extra) of every literal ``require(module, extra, ...)`` in the packages."""
    calls = []
    for package in (
        "policysim_infra",
        "socialenv",
        "agent_models",
        "bandits",
        "baselines",
        "policysim",
    ):
        for source in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", None) == "require"
                    and len(node.args) >= 2
                    and all(isinstance(a, ast.Constant) for a in node.args[:2])
                ):
                    calls.append((source, node.args[0].value, node.args[1].value))
    return calls


def test_every_required_extra_exists_and_brings_the_module() -> None:
    """Each extra named at a ``require`` site is in pyproject.toml and lists the module's
    distribution (directly or through an extra it includes)."""
    toml = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    extras = toml.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def requirements(extra: str) -> set[str]:
        out = set()
        for req in extras[extra]:
            name = re.split(r"[<>=;! \[]", req, maxsplit=1)[0].lower()
            nested = re.fullmatch(r"policysim\[(.+)\]", req.split(";")[0].strip())
            out |= (
                set().union(*(requirements(e) for e in nested.group(1).split(",")))
                if nested
                else {name}
            )
        return out

    calls = _require_calls()
    assert len(calls) >= 10
    for source, module, extra in calls:
        if extra is None:
            continue
        assert extra in extras, (
            f"{source.name}: require({module!r}, {extra!r}) names no extra of pyproject.toml"
        )
        distribution = DependencyNotInstalled(module, extra, "x").distribution.split("[")[0].lower()
        assert distribution.replace("_", "-") in {
            r.replace("_", "-") for r in requirements(extra)
        }, f"{source.name}: policysim[{extra}] does not install {distribution}"
