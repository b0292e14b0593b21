"""benchmarks/context_reuse.py: the two ways alternate ABBA on one env, the reusing way writes
into dropped arrays and the fresh way allocates new ones every step."""

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
    assert result["buffers"] == ["arm_contexts"]
    matrices = {way: arrays["matrices"] for way, arrays in result["arrays"].items()}
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


def test_propagation_dedupe_and_share_latents_ways(tmp_path: Path) -> None:
    """Above the local propagation's 50,000 users: the fresh way's hop rows are new arrays
    every step, the reusing way's mostly the kept ones; both ways step the same env."""
    out = tmp_path / "reuse.json"
    run_benchmark(
        "context_reuse.py",
        "--users",
        "60000",
        "--pairs",
        "2",
        "--buffers",
        "share_latents",
        "propagation",
        "dedupe",
        "--quiet",
        "--out",
        str(out),
    )
    result = json.loads(out.read_text())
    assert result["buffers"] == ["propagation", "dedupe", "share_latents"]
    assert "--buffers propagation dedupe share_latents" in result["command"]
    hop_rows = {way: arrays["hop_rows"] for way, arrays in result["arrays"].items()}
    # two float arrays a call (the outer hop's and the result's); three calls of each way
    assert hop_rows["fresh"] == {"allocated": 6, "reused": 0}
    assert hop_rows["reuse"]["reused"] >= 2
    # the arm contexts were not switched: the fresh way's matrices were never used
    assert result["arrays"]["fresh"]["matrices"] == {"allocated": 0, "reused": 0}
    assert all(step["minor_faults"] >= 0 for step in result["steps"])
