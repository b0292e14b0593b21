"""benchmarks/env_throughput.py --compare: the two codes alternate which runs first, and the
summary gives the paired ratio of each repeat with its interval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import ROOT, run_benchmark


def test_compare_alternates_the_first_code_and_pairs_each_repeat(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    shown = run_benchmark(
        "env_throughput.py",
        "--users",
        "300",
        "--steps",
        "6",
        "--long-rounds",
        "0",
        "--repeats",
        "3",
        "--compare",
        str(ROOT),
        "--quiet",
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    rows = result["rows"]
    order = [(row["repeat"], row["code_label"]) for row in rows]
    assert order == [
        (0, "this"),
        (0, "compare"),
        (1, "compare"),
        (1, "this"),
        (2, "this"),
        (2, "compare"),
    ]
    cpu = {(row["repeat"], row["code_label"]): row["cpu_s_median"] for row in rows}
    other = next(e for e in result["summary"]["settings"] if e["code"] == "compare")
    paired = other["cpu_s_over_this_1_paired"]
    assert paired["per_pair"] == pytest.approx(
        [cpu[r, "compare"] / cpu[r, "this"] for r in range(3)]
    )
    low, high = paired["ci95"]
    assert low <= paired["median"] <= high
    assert "per repeat x" in shown.stdout
