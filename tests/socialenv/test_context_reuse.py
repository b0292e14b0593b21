"""benchmarks/context_reuse.py: the two ways alternate ABBA on one env, the reusing way writes
into dropped matrices and the fresh way allocates one per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_benchmark


def test_ways_alternate_and_only_the_reusing_way_reuses(tmp_path: Path) -> None:
    out = tmp_path / "reuse.json"
    run_benchmark(
        "context_reuse.py", "--users", "300", "--pairs", "3", "--quiet", "--out", str(out)
    )
    result = json.loads(out.read_text())
    steps = result["steps"]
    assert [(s["pair"], s["way"]) for s in steps] == [
        (0, "reuse"),
        (0, "fresh"),
        (1, "fresh"),
        (1, "reuse"),
        (2, "reuse"),
        (2, "fresh"),
    ]
    # the fresh way allocates a matrix every step (its warm-up included); the reusing way
    # writes into the two it keeps (the reset's and one more, while the caller holds one)
    matrices = result["matrices"]
    assert matrices["fresh"] == {"allocated": 4, "reused": 0}
    assert matrices["reuse"]["allocated"] <= 2
    assert matrices["reuse"]["reused"] >= 3
    wall = {(s["pair"], s["way"]): s["wall_s"] for s in steps}
    ratio = result["summary"]["fresh_over_reuse_wall"]
    assert ratio["per_pair"] == pytest.approx(
        [wall[p, "fresh"] / wall[p, "reuse"] for p in range(3)]
    )
    low, high = ratio["ci95"]
    assert low <= ratio["median"] <= high
