"""benchmarks/threads_in_process.py: every thread count steps the same env, in a balanced order,
and each round's speed-up is the ratio of that round's two steps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import ROOT, run_benchmark

#: A population and a number of rounds that run in seconds
SMALL = ("--users", "300", "--rounds", "3")


def test_thread_counts_alternate_on_one_env_and_pair_by_round(tmp_path: Path) -> None:
    out = tmp_path / "threads.json"
    run_benchmark(
        "threads_in_process.py",
        "--users",
        "300",
        "--threads",
        "1",
        "2",
        "--rounds",
        "3",
        "--quiet",
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    steps = result["steps"]
    # round 0 warms up; then one step per count, in order on even rounds, reversed on odd ones
    assert [(s["round"], s["threads"]) for s in steps] == [
        (1, 2),
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 2),
        (3, 1),
    ]
    wall = {(s["round"], s["threads"]): s["wall_s"] for s in steps}
    two = result["summary"]["2"]
    assert two["speedup_wall_per_round"] == pytest.approx(
        [wall[(r, 1)] / wall[(r, 2)] for r in (1, 2, 3)]
    )
    low, high = two["speedup_wall_ci95"]
    assert low <= two["speedup_wall_median"] <= high
    assert result["summary"]["1"]["steps"] == 3


def test_rejects_repeated_thread_counts() -> None:
    shown = run_benchmark("threads_in_process.py", "--threads", "2", "2", check=False)
    assert shown.returncode != 0
    assert "--threads=[2, 2] is not allowed" in shown.stderr


def test_compare_alternates_the_two_codes_and_pools_their_rounds(tmp_path: Path) -> None:
    """--compare runs fresh processes of the other tree and this one in turn; the summary
    pools each code's rounds and the difference of medians is this code's minus the other's."""
    out = tmp_path / "compare.json"
    shown = run_benchmark(
        "threads_in_process.py",
        *SMALL,
        "--compare",
        str(ROOT),
        "--processes",
        "1",
        "--quiet",
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    assert [len(result["runs"][code]) for code in ("other", "this")] == [1, 1]
    assert [run["package_tree"] for run in result["runs"]["this"]] == [str(ROOT)]
    two = result["summary"]["2"]
    for code in ("other", "this"):
        pooled = [
            x for run in result["runs"][code] for x in run["summary"]["2"]["speedup_wall_per_round"]
        ]
        assert two[code]["rounds"] == 3
        assert two[code]["speedup_wall_median"] == pytest.approx(float(np.median(pooled)))
        low, high = two[code]["speedup_wall_ci95"]
        assert low <= two[code]["speedup_wall_median"] <= high
    difference = two["difference"]
    assert difference["this_minus_other"] == pytest.approx(
        two["this"]["speedup_wall_median"] - two["other"]["speedup_wall_median"]
    )
    assert difference["ci95"][0] <= difference["this_minus_other"] <= difference["ci95"][1]
    assert "this - other:" in shown.stdout


def test_compare_rejects_an_unknown_revision() -> None:
    shown = run_benchmark(
        "threads_in_process.py", "--compare", "no-such-revision", "--users", "300", check=False
    )
    assert shown.returncode != 0
    assert "--compare='no-such-revision' is not allowed" in shown.stderr


def test_compare_measures_the_other_trees_package(tmp_path: Path) -> None:
    """The other side's processes import the package of the other tree (a copy here), not the
    tree this script belongs to, which ``env_throughput`` puts on ``sys.path`` when imported;
    each run records the package file it measured."""
    other = tmp_path / "other"
    for package in (
        "agent_models",
        "bandits",
        "baselines",
        "policysim",
        "policysim_infra",
        "socialenv",
    ):
        shutil.copytree(
            ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path / "compare.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "threads_in_process.py"),
            *SMALL,
            "--compare",
            str(other),
            "--processes",
            "1",
            "--quiet",
            "--out",
            str(out),
        ],
        # the NumPy kernels: the copy's numba cache would be compiled first
        env={**os.environ, "PYTHONPATH": str(ROOT), "POLICYSIM_KERNELS": "numpy"},
        cwd=ROOT / "benchmarks",
        check=True,
        capture_output=True,
        timeout=300,
    )
    runs = json.loads(out.read_text())["runs"]
    assert [Path(run["package_file"]).parent.parent for run in runs["other"]] == [other]
    assert [Path(run["package_file"]).parent.parent for run in runs["this"]] == [ROOT]


def test_compare_env_sets_the_variables_on_the_other_side_only(tmp_path: Path) -> None:
    """--compare-env runs this tree on both sides, the "other" side's processes started with
    the variables set (each run records the environment it ran with), this side's without."""
    out = tmp_path / "compare_env.json"
    shown = run_benchmark(
        "threads_in_process.py",
        *SMALL,
        "--compare-env",
        "OMP_WAIT_POLICY=PASSIVE",
        "--processes",
        "2",
        "--quiet",
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    assert result["other_variables"] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert [run["environment"].get("OMP_WAIT_POLICY") for run in result["runs"]["other"]] == [
        "PASSIVE",
        "PASSIVE",
    ]
    assert [run["environment"].get("OMP_WAIT_POLICY") for run in result["runs"]["this"]] == [
        None,
        None,
    ]
    assert {run["package_tree"] for code in ("other", "this") for run in result["runs"][code]} == {
        str(ROOT)
    }
    assert "other (OMP_WAIT_POLICY=PASSIVE)" in shown.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--compare-env", "PASSIVE"], "--compare-env 'PASSIVE' is not allowed"),
        (
            ["--compare-env", "A=1", "--compare", "HEAD"],
            "--compare and --compare-env are not allowed together",
        ),
    ],
)
def test_compare_env_rejects_what_is_not_a_setting(arguments: list[str], message: str) -> None:
    shown = run_benchmark("threads_in_process.py", *arguments, "--users", "300", check=False)
    assert shown.returncode != 0
    assert message in shown.stderr
