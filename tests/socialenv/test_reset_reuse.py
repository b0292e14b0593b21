"""benchmarks/reset_reuse.py: the ways alternate ABBA on one env; the reusing way's resets write
into the last episode's arrays, the fresh way's (whose old arrays the benchmark holds) do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_benchmark


def test_resets_alternate_and_only_the_reusing_way_reuses(tmp_path: Path) -> None:
    out = tmp_path / "reset.json"
    run_benchmark(
        "reset_reuse.py", "--users", "300", "--pairs", "3", "--steps", "2", "--quiet",
        "--out", str(out),
    )  # fmt: skip
    result = json.loads(out.read_text())
    episodes = result["episodes"]
    assert [(e["pair"], e["way"]) for e in episodes] == [
        (0, "reuse"),
        (0, "fresh"),
        (1, "fresh"),
        (1, "reuse"),
        (2, "reuse"),
        (2, "fresh"),
    ]
    for episode in episodes:
        reused = episode["way"] == "reuse"
        # 300 users: the scenario's arrays are below the size from which they are kept
        assert episode["reused"] == {
            "posts": reused,
            "memory_latent": reused,
            "scenario_arrays": 0,
        }
        assert episode["reset"]["wall_s"] > 0 and episode["steps"]["minor_faults"] >= 0
        assert episode["reset"]["cpu_s"] > 0
    wall = {(e["pair"], e["way"]): e["reset"]["wall_s"] + e["steps"]["wall_s"] for e in episodes}
    ratio = result["summary"]["fresh_over_reuse_wall"]
    assert ratio["per_pair"] == pytest.approx(
        [wall[p, "fresh"] / wall[p, "reuse"] for p in range(3)]
    )
    low, high = ratio["ci95"]
    assert low <= ratio["median"] <= high
    cpu = result["summary"]["fresh_over_reuse_reset_cpu"]
    assert cpu["per_pair"] == pytest.approx(
        [
            next(e for e in episodes if e["pair"] == p and e["way"] == "fresh")["reset"]["cpu_s"]
            / next(e for e in episodes if e["pair"] == p and e["way"] == "reuse")["reset"]["cpu_s"]
            for p in range(3)
        ]
    )
    assert "--steps 2" in result["command"]


def test_reset_reuse_refuses_zero_pairs() -> None:
    done = run_benchmark("reset_reuse.py", "--users", "300", "--pairs", "0", "--quiet", check=False)
    assert done.returncode != 0
    assert "--pairs=0 is not allowed: an integer >= 1" in done.stderr
