"""benchmarks/openmp_wait.py: each OpenMP wait setting in fresh processes, what idle threads
burn after a numba kernel and what a small torch update takes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_benchmark

pytest.importorskip("numba")
pytest.importorskip("torch")


def test_each_setting_runs_in_processes_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "wait.json"
    run_benchmark(
        "openmp_wait.py",
        *("--settings", "default", "GOMP_SPINCOUNT=10000", "--repeats", "2"),
        *("--mlp", "16x8", "--updates", "5", "--quiet", "--out", str(out)),
    )
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert [r["openmp_wait"] for r in runs["default"]] == [{}, {}]
    assert [r["openmp_wait"] for r in runs["GOMP_SPINCOUNT=10000"]] == [
        {"GOMP_SPINCOUNT": "10000"}
    ] * 2
    for setting in runs:
        summary = result["summary"][setting]
        assert len(summary["idle_cpu_ms_per_kernel"]) == 2
        assert all(v >= 0 for v in summary["idle_cpu_ms_per_kernel"])
        for key in ("torch_update_ms_alone", "torch_update_ms"):
            assert len(summary[key]["16x8"]) == 2 and all(v > 0 for v in summary[key]["16x8"])


@pytest.mark.parametrize("bad", ["OMP_NUM_THREADS=2", "GOMP_SPINCOUNT", "passive"])
def test_rejects_what_is_not_a_wait_setting(bad: str) -> None:
    shown = run_benchmark("openmp_wait.py", "--settings", bad, check=False)
    assert shown.returncode != 0
    assert f"--settings {bad!r} is not allowed" in shown.stderr
