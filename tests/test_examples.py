"""Every example (and the vector-env benchmark) runs end to end at a tiny size.

The scripts run as subprocesses, two at a time (this suite targets 2-core machines), each
with its ``--smoke`` size; ``examples/llm_agents.py`` (LLM agents, tiny random model) runs
at 10 users for one round when present.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import ROOT

SCRIPTS: dict[str, list[str]] = {
    "quickstart": ["examples/quickstart.py", "--smoke"],
    "bandit_comparison": ["examples/bandit_comparison.py", "--smoke"],
    "pettingzoo_users": ["examples/pettingzoo_users.py", "--smoke"],
    "sb3_ppo": ["examples/sb3_ppo.py", "--smoke"],
    "ppo_per_arm": ["examples/ppo_per_arm.py", "--smoke", "--workers", "2"],
    "wandb_sweep": ["examples/wandb_sweep.py", "--smoke"],
    # surrogate, ABM and LLM populations under the same policy
    "population_comparison": [
        "examples/population_comparison.py",
        "--smoke",
        "--populations",
        "surrogate",
        "lorenz",
        "llm",
        "--llm-model",
        "tiny",
        "--users",
        "12",
        "--rounds",
        "1",
        "--seeds",
        "0",
    ],
    "llm_agents": ["examples/llm_agents.py", "--users", "10", "--rounds", "1"],
    "vector_env_benchmark": ["benchmarks/vector_env.py", "--smoke", "--workers", "2"],
    "researcher_tools": ["examples/researcher_tools.py", "--smoke"],
}
EXPECTED = {
    "quickstart": "linucb: mean reward",
    "bandit_comparison": "eenet",  # the paper's method runs
    "pettingzoo_users": "platform return",
    "sb3_ppo": "ppo",
    "ppo_per_arm": "ppo - random",
    "wandb_sweep": "rec-policies",
    "population_comparison": "llm",
    "llm_agents": "reward",
    "vector_env_benchmark": "native-w2-2",
    "researcher_tools": "survey:",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    workdir = tmp_path_factory.mktemp("examples")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
        "PYTHONPATH": str(ROOT),
        "MPLBACKEND": "Agg",
    }

    def run(name: str) -> tuple[str, subprocess.CompletedProcess]:
        args = SCRIPTS[name]
        if name == "vector_env_benchmark":
            args = [*args, "--out", str(workdir / "vector_env.json")]
        return name, subprocess.run(
            [sys.executable, str(ROOT / args[0]), *args[1:]],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    present = [n for n in SCRIPTS if (ROOT / SCRIPTS[n][0]).exists()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, present))


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_example_runs(name: str, runs: dict[str, subprocess.CompletedProcess]) -> None:
    assert (ROOT / SCRIPTS[name][0]).exists(), f"{SCRIPTS[name][0]} is missing"
    result = runs[name]
    assert result.returncode == 0, (
        f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    assert EXPECTED[name] in result.stdout, result.stdout[-3000:]


@pytest.mark.slow
def test_sft_dpo_example_runs(tmp_path: Path) -> None:
    """SFT → DPO → evaluation → env rounds with the adapter (≈ 7 min on 2 cores: slow)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "MPLBACKEND": "Agg",
    }
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "sft_dpo.py"),
            "--workdir",
            str(tmp_path / "run"),
            "--rounds",
            "1",
            "--eval-examples",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "round 0: reward" in result.stdout and "== done" in result.stdout
    assert (tmp_path / "run" / "dpo_adapter" / "adapter_config.json").exists()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_example_runs_from_the_install(script: str) -> None:
    """Examples import the installed packages (no ``sys.path`` edits) and take sizes from
    the spaces, not from the env's attributes (``env.unwrapped.num_arms`` and friends)."""
    text = (ROOT / "examples" / script).read_text()
    assert "sys.path" not in text, f"{script} edits sys.path"
    for attribute in ("num_arms", "context_dim", "slate_size", "no_op"):
        assert not re.search(rf"(unwrapped|base|base_env)\.{attribute}\b", text), (
            f"{script} reads {attribute} from the env: use observation_space / action_space"
        )
