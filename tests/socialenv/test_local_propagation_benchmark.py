"""benchmarks/local_propagation.py: both ways give the same contexts and every pair of steps is
timed, on a size either side of the compiled kernels' threshold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_benchmark

pytest.importorskip("numba")


def test_pairs_the_two_ways_and_names_the_packages_way(tmp_path: Path) -> None:
    from socialenv.core import simulation

    above = simulation.COMPILED_LOCAL_PROPAGATION_USERS + 1_000
    out = tmp_path / "local.json"
    done = run_benchmark(
        "local_propagation.py",
        "--users",
        "300",
        str(above),
        "--pairs",
        "3",
        "--out",
        str(out),
        "--quiet",
    )
    result = json.loads(out.read_text())
    assert result["command"].startswith(
        f"python benchmarks/local_propagation.py --users 300 {above}"
    )
    small, large = result["sizes"]
    assert (small["num_users"], large["num_users"]) == (300, above)
    # the second size's way is the package's: the first size's steps left the thresholds as
    # they were (its last step took the whole table)
    assert small["steps"][-1]["way"] == "whole"
    assert (small["package_way"], large["package_way"]) == ("whole", "local")
    for size in (small, large):
        assert size["identical"] and size["kernels"] == "numba"
        assert size["arm_users"] > 0
        assert [s["way"] for s in size["steps"]] == [
            "local",
            "whole",
            "whole",
            "local",
            "local",
            "whole",
        ]
        assert all(s["step_cpu_s"] > 0 and s["context_cpu_s"] > 0 for s in size["steps"])
        assert size["local"]["steps"] == size["whole"]["steps"] == 3
        ratio = size["whole_over_local_step_cpu"]
        assert (
            len(ratio["per_pair"]) == 3 and ratio["ci95"][0] <= ratio["median"] <= ratio["ci95"][1]
        )
    assert f"{above:,} users" in done.stdout and "identical: True" in done.stdout


def test_a_size_the_env_refuses_is_named_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "refused.json"
    done = run_benchmark(
        "local_propagation.py", "--users", "300", "5", "--out", str(out), "--quiet", check=False
    )
    assert done.returncode != 0 and not out.exists()
    assert "--users 5 is not allowed: integers in [10, 1000000]" in done.stderr
