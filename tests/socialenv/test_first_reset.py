"""benchmarks/first_reset.py: a fresh process's first reset loads numba's kernels, the second
loads none; both resets are counted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import run_benchmark


def test_first_reset_loads_the_kernels_once(tmp_path: Path) -> None:
    if os.environ.get("POLICYSIM_KERNELS") == "numpy":
        pytest.skip("the NumPy kernels load nothing from numba")
    out = tmp_path / "first.json"
    run_benchmark("first_reset.py", "--users", "300", "--quiet", "--out", str(out))
    row = json.loads(out.read_text())["rows"][0]
    first, again = row["first"], row["again"]
    assert first["kernels_loaded"] > 0 and again["kernels_loaded"] == 0
    assert 0 < first["numba_registries_cpu_s"] <= first["numba_dispatch_cpu_s"] <= first["cpu_s"]
    assert again["numba_dispatch_cpu_s"] == 0.0
    assert first["cpu_s"] > again["cpu_s"] > 0
    assert row["first_minus_again_cpu_s"] == pytest.approx(first["cpu_s"] - again["cpu_s"])
