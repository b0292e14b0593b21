"""benchmarks/beside_pairs.py: the same round stepped with the beside sections on and off."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_benchmark


def test_beside_pairs_give_the_same_observations_and_their_times(tmp_path: Path) -> None:
    out = tmp_path / "beside.json"
    run_benchmark(
        "beside_pairs.py",
        *("--users", "2000", "--rounds", "2", "--threads", "2", "--quiet", "--out", str(out)),
    )
    result = json.loads(out.read_text())
    assert result["identical_observations"] is True
    assert all(len(v) == 2 and min(v) > 0 for v in result["seconds"].values())
    assert result["at_once_over_beside"]["median"] > 0
