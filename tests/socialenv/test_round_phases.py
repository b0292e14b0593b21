"""benchmarks/round_phases.py --in-process: every thread count's phases timed on one env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import ROOT, run_benchmark


def test_in_process_times_every_phase_at_every_count(tmp_path: Path) -> None:
    out = tmp_path / "phases.json"
    run_benchmark(
        "round_phases.py",
        *("--users", "500", "--threads", "1", "2", "--steps", "2", "--in-process", "--quiet"),
        *("--out", str(out)),
    )
    result = json.loads(out.read_text())
    assert result["command"].endswith("--in-process")
    rows = {row["threads"]: row for row in result["rows"]}
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert row["in_process"] and row["steps"] == 2
        assert row["package"] == str(ROOT)
        phases = row["phases"]
        # a phase's time includes the phases it calls
        assert (
            phases["step"]["wall_s"] >= phases["run_round"]["wall_s"] + phases["_observe"]["wall_s"]
        )
        assert phases["run_round"]["wall_s"] >= phases["_ask_brain"]["wall_s"] > 0
    assert rows[1]["reset_cpu_s"] == rows[2]["reset_cpu_s"]  # the one reset
    two = rows[2]["phases"]["step"]
    assert two["speedup_wall"] == pytest.approx(rows[1]["phases"]["step"]["wall_s"] / two["wall_s"])
    assert "2" in result["summary"]["per_threads"]


def test_repeated_thread_counts_are_refused() -> None:
    shown = run_benchmark("round_phases.py", "--threads", "1", "1", check=False)
    assert shown.returncode != 0
    assert "--threads=[1, 1] is not allowed" in shown.stderr
