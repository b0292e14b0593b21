"""benchmarks/trajectory_digest.py: a reference written with other CPU kernels is named as such,
with the settings that emulate its kernels here."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import run_benchmark


def test_check_names_the_kernels_a_reference_was_written_with(tmp_path: Path) -> None:
    own = tmp_path / "own.json"
    done = run_benchmark(
        "trajectory_digest.py", "--cases", "rec_1k_noop", "--out", str(own), "--quiet"
    )
    written = json.loads(own.read_text())
    numerics = written["numerics"]
    assert numerics["blas"] and all(len(entry.split()) == 3 for entry in numerics["blas"])
    same = run_benchmark(
        "trajectory_digest.py", "--cases", "rec_1k_noop", "--check", str(own), "--quiet"
    )
    assert "identical to" in same.stdout and "note:" not in same.stdout, done.stdout
    # the same digests under other kernels: named, with the settings, and still compared
    other = {
        **written,
        "numerics": {
            "blas": [" ".join([*entry.split()[:2], "Prescott"]) for entry in numerics["blas"]],
            "numpy_simd": [],
        },
    }
    reference = tmp_path / "other.json"
    reference.write_text(json.dumps(other))
    noted = run_benchmark(
        "trajectory_digest.py", "--cases", "rec_1k_noop", "--check", str(reference), "--quiet"
    )
    assert "the reference was written with kernels" in noted.stdout
    assert "OPENBLAS_CORETYPE=Prescott" in noted.stdout
    if numerics["numpy_simd"]:
        assert "NPY_DISABLE_CPU_FEATURES='" in noted.stdout
    assert "identical to" in noted.stdout
    # a different digest fails the check
    other["rec_1k_noop"] = ["0" * 64] * len(written["rec_1k_noop"])
    reference.write_text(json.dumps(other))
    failed = run_benchmark(
        "trajectory_digest.py",
        "--cases",
        "rec_1k_noop",
        "--check",
        str(reference),
        "--quiet",
        check=False,
    )
    assert failed.returncode == 1 and "DIFFERENT: rec_1k_noop (first differing round index 0)" in (
        failed.stdout
    )
