"""benchmarks/amdahl_fit.py: Amdahl's serial share fitted to measured thread sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import ROOT, run_benchmark

DEVICE = ROOT / "benchmarks/results/env_throughput_issue24/device_h200_16cpu_0ecd0e8"


def _sweep(tmp_path: Path, name: str, speedups: dict[int, float], first: int = 1) -> Path:
    """A threads_in_process.py result with these median speed-ups over ``first`` threads."""
    counts = [first, *speedups]
    summary: dict[str, dict[str, float]] = {str(first): {"wall_s_median": 2.0}}
    summary.update({str(n): {"speedup_wall_median": s} for n, s in speedups.items()})
    command = "python benchmarks/threads_in_process.py --threads " + " ".join(map(str, counts))
    path = tmp_path / name
    path.write_text(json.dumps({"command": command, "summary": summary}))
    return path


def test_an_exact_law_gives_back_its_serial_share(tmp_path: Path) -> None:
    share = 0.25
    law = {n: 1 / (share + (1 - share) / n) for n in (2, 4, 8, 16)}
    out = tmp_path / "fit.json"
    run_benchmark("amdahl_fit.py", str(_sweep(tmp_path, "law.json", law)), "--out", str(out))
    fit = json.loads(out.read_text())
    assert fit["serial_share"] == pytest.approx(share, abs=1e-4)
    assert fit["ceiling"] == pytest.approx(4.0, abs=2e-3)
    for n, value in law.items():
        assert fit["fitted"][str(n)] == pytest.approx(value, rel=1e-4)


def test_the_published_device_fit_is_reproduced(tmp_path: Path) -> None:
    """BENCHMARKS, 'Issue 24, seventh step': s = 0.38, ceiling ×2.6, from both 16-core sweeps."""
    out = tmp_path / "fit.json"
    result = run_benchmark(
        "amdahl_fit.py",
        str(DEVICE / "threads_in_process_1m.json"),
        str(DEVICE / "threads_1m.json"),
        "--out",
        str(out),
    )
    fit = json.loads(out.read_text())
    assert round(fit["serial_share"], 2) == 0.38 and round(fit["ceiling"], 1) == 2.6
    assert len(fit["measured"]["16"]) == 2  # one speed-up from each file
    assert "serial share 0.380" in result.stdout


def test_a_sweep_not_starting_at_one_thread_is_refused(tmp_path: Path) -> None:
    path = _sweep(tmp_path, "from2.json", {4: 1.8, 8: 2.5}, first=2)
    result = run_benchmark("amdahl_fit.py", str(path), check=False)
    assert result.returncode != 0
    assert "first thread count is 2, not 1" in result.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"summary": {"rows": []}}))
    result = run_benchmark("amdahl_fit.py", str(other), check=False)
    assert "neither a threads_in_process.py nor an env_throughput.py result" in result.stderr
