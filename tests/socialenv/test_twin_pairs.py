"""benchmarks/twin_pairs.py: the compiled round passes against their NumPy twins on one
recorded round's inputs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_benchmark


def test_twin_pairs_are_identical_and_timed(tmp_path: Path) -> None:
    out = tmp_path / "twins.json"
    run_benchmark("twin_pairs.py", "--users", "2000", "--repeats", "2", "--out", str(out))
    result = json.loads(out.read_text())
    rows = {row["pass"]: row for row in result["rows"]}
    compared = {
        "noisy_unit_rows",
        "pushed_opinions",
        "observe_reactions",
        "assign_clusters",
        "cluster_order",
        "flagged_per_row",
        "reaction_ends",
        "reaction_choices",
        "generate_candidates",
        "reaction_moves",
        "post_choices",
        "post_columns",
        "reaction_values",
        "round_means",
        "objective_arm_rewards",
        "isin",
    }
    assert set(rows) == compared | {"count_reactions"}
    for name in compared:
        assert rows[name]["identical"] is True
        assert rows[name]["numpy_over_compiled"]["median"] > 0
    for row in rows.values():
        assert all(len(times) == 2 and min(times) > 0 for times in row["seconds"].values())
    assert min(result["sizes"].values()) > 0
