"""benchmarks/kernel_pairs.py: this tree's compiled kernels against a revision's, on the same
recorded inputs, in one process."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import ROOT, run_benchmark


def test_kernels_against_this_tree_are_identical_and_timed(tmp_path: Path) -> None:
    """The other version is this tree's own file, loaded as a second module: every kernel
    recorded gives the same bits and has its times."""
    out = tmp_path / "kernels.json"
    run_benchmark(
        "kernel_pairs.py",
        *("--compare", str(ROOT), "--users", "600", "--calls", "2", "--repeats", "3"),
        *("--kernels", "relational_draws", "search_guided", "feed_impressions"),
        *("--out", str(out)),
    )
    result = json.loads(out.read_text())
    assert result["other"] == result["commit"]  # this tree's commit (+dirty when edited)
    rows = {(row["kernel"], row["phase"]): row for row in result["rows"]}
    # the follow graph's search runs in the reset, the relational channel's draws in both
    assert {("search_guided", "reset"), ("relational_draws", "step")} <= set(rows)
    assert {kernel for kernel, _ in rows} <= {
        "relational_draws",
        "search_guided",
        "feed_impressions",
    }
    for row in rows.values():
        assert 1 <= row["calls"] <= 2
        assert row["identical"] is True  # the same source: the same bits
        for clock in ("cpu", "wall"):
            assert len(row[f"{clock}_s"]["this"]) == len(row[f"{clock}_s"]["other"]) == 3
            assert row[f"other_over_this_{clock}"] > 0
        assert row["calls_left_out_for_memory"] == 0


def test_calls_beyond_the_memory_budget_are_left_out_and_counted(tmp_path: Path) -> None:
    out = tmp_path / "kernels.json"
    run_benchmark(
        "kernel_pairs.py",
        *("--compare", str(ROOT), "--users", "600", "--calls", "2", "--repeats", "1"),
        *("--kernels", "search_guided", "--phase", "reset", "--max-gib", "0"),
        *("--out", str(out)),
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["kernel"] == "search_guided" and row["calls"] == 0
    assert row["calls_left_out_for_memory"] == 2
    assert "left out" in row["other"]


def test_a_revision_without_the_kernels_is_refused(tmp_path: Path) -> None:
    for other in ("no-such-revision", str(tmp_path)):
        shown = run_benchmark("kernel_pairs.py", "--compare", other, check=False)
        assert shown.returncode != 0
        assert f"--compare={other!r} is not allowed" in shown.stderr


def test_an_unknown_kernel_is_refused_with_the_allowed_names() -> None:
    shown = run_benchmark(
        "kernel_pairs.py",
        "--compare",
        str(ROOT),
        "--users",
        "300",
        "--kernels",
        "no_such",
        check=False,
    )
    assert shown.returncode != 0
    assert "--kernels ['no_such'] is not allowed: one of" in shown.stderr
    assert "'search_guided'" in shown.stderr


def test_env_pairs_time_whole_resets_and_steps_with_each_kernel_table(tmp_path: Path) -> None:
    """--env-only --env-pairs: resets and steps of one env, the two versions' kernel tables
    swapped in turn; each pair has both versions' times, and the ratio its interval."""
    out = tmp_path / "env.json"
    shown = run_benchmark(
        "kernel_pairs.py",
        *("--compare", str(ROOT), "--users", "400", "--env-only", "--env-pairs", "3"),
        *("--out", str(out)),
    )
    result = json.loads(out.read_text())
    assert result["rows"] == []  # no kernel recorded
    env = result["env_pairs"]
    assert env["pairs"] == 3
    for phase in ("reset", "step"):
        for clock in ("cpu", "wall"):
            times = env["seconds"][phase][clock]
            assert len(times["this"]) == len(times["other"]) == 3
            assert all(t > 0 for t in times["this"] + times["other"])
            entry = env[f"{phase}_{clock}"]
            low, high = entry["ci95"]
            assert 0 < low <= high and entry["other_over_this_median_of_pairs"] > 0
    assert "whole step  (3 pairs)" in shown.stdout
    refused = run_benchmark("kernel_pairs.py", "--compare", str(ROOT), "--env-only", check=False)
    assert refused.returncode != 0
    assert "--env-pairs=0 is not allowed" in refused.stderr


def test_env_pairs_refuse_a_revision_whose_kernels_take_other_arguments(tmp_path: Path) -> None:
    """A source tree whose memory update takes other arguments: --env-pairs stops with what
    went wrong instead of timing a crash."""
    kernels_file = tmp_path / "socialenv" / "core" / "_numba_kernels.py"
    kernels_file.parent.mkdir(parents=True)
    source = (ROOT / "socialenv" / "core" / "_numba_kernels.py").read_text()
    kernels_file.write_text(
        source + "\n\n@jit\ndef _changed(memory):\n    return True\n\n\n"
        'KERNELS["memory_update"] = _changed\nPARALLEL_KERNELS["memory_update"] = _changed\n'
    )
    shown = run_benchmark(
        "kernel_pairs.py",
        *("--compare", str(tmp_path), "--users", "300", "--env-only", "--env-pairs", "1"),
        check=False,
    )
    assert shown.returncode != 0
    assert "--env-pairs: the other version's kernels do not run with this tree's calls" in (
        shown.stderr
    )


def test_a_revision_importing_a_moved_module_still_loads(tmp_path: Path) -> None:
    """A kernel file of a revision from before ``_prefetch`` moved to ``policysim_infra``."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "kernel_pairs_script", ROOT / "benchmarks" / "kernel_pairs.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec.loader.exec_module(script)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    source = "from socialenv.core._prefetch import prefetch_row\nKERNELS = {'row': prefetch_row}\n"
    module = script._load(source, "moved_test", tmp_path)
    from policysim_infra._prefetch import prefetch_row

    assert module.KERNELS["row"] is prefetch_row
