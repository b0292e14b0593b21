"""What the tests share: the env ids, small env configs, the fixture paths and a scripted
LLM backend.

Each test module takes a small config from :func:`small_env` and overrides only what its
checks need, so the sizes the suite runs at are written once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.llm.backends.base import (
    Backend,
    Generation,
    Messages,
    Sampling,
    Schemas,
    schema_list,
)
from socialenv import ENV_IDS
from socialenv.scenarios.loaders import LoaderConfig

REC, EXPOSURE, MODERATION = "PolicySim-Rec-v0", "PolicySim-Exposure-v0", "PolicySim-Moderation-v0"
assert set(ENV_IDS) == {REC, EXPOSURE, MODERATION}, (
    "a new env id: add it here and to the tests that loop over env ids"
)
#: The two intervention envs whose action is a slate of (user, post) / (author, level) arms.
LEVER_ENV_IDS: tuple[str, ...] = (REC, EXPOSURE)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TWIBOT = FIXTURES / "twibot20" / "sample.json"
WEIBO = FIXTURES / "weibo"
#: The loaders with the hashing encoder (no model download).
HASH_LOADER = LoaderConfig(encoder="hash")

#: The suite's default: 150 surrogate users, 3 rounds.
SMALL_ENV: dict[str, Any] = {"num_users": 150, "rounds": 3}
#: A small Rec lever (20 sampled users x 2 slots, 6 candidates each) for loops over many steps.
SMALL_REC_LEVER: dict[str, Any] = {
    "candidate_users": 20,
    "budget": 2,
    "candidates": {"interest": 2, "opposite": 2, "popular": 1, "fresh": 1},
}


def run_benchmark(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python benchmarks/<script> ARGS`` from the benchmarks folder, this tree's package on
    the path (as a user runs it); stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT / "benchmarks",
        check=check,
        capture_output=True,
        text=True,
        timeout=300,
    )


def bits(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    """dtype, shape and raw bytes: equal exactly when two arrays are equal bit for bit."""
    return str(a.dtype), a.shape, np.ascontiguousarray(a).tobytes()


def small_env(**overrides: Any) -> dict[str, Any]:
    """``gym.make`` kwargs of a small env: :data:`SMALL_ENV` with ``overrides`` on top."""
    return {**SMALL_ENV, **overrides}


def small_rec(**overrides: Any) -> dict[str, Any]:
    """:func:`small_env` with the small Rec lever :data:`SMALL_REC_LEVER`, then ``overrides``."""
    return {**SMALL_ENV, **SMALL_REC_LEVER, **overrides}


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Bit-for-bit equality of two trajectories (nested dicts, lists, tuples, arrays and
    scalars): the same keys, lengths, shapes and values, NaN equal to NaN."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (
            f"{path}: keys {sorted(a)} != {sorted(b)}"
        )
        for key in a:
            assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        np.testing.assert_array_equal(a, b, err_msg=path)


class ScriptedBackend(Backend):
    """A backend answering prompt i of a call with ``answer(i, messages, schema)`` (the
    schema the caller asked for, or None); records each call's prompt count and schemas."""

    name = "scripted"

    def __init__(self, answer: Callable[[int, Messages, dict[str, Any] | None], str]) -> None:
        self.answer = answer
        self.calls: list[tuple[int, list[dict[str, Any] | None]]] = []

    def generate(
        self, prompts: Sequence[Messages], schemas: Schemas = None, sampling: Sampling | None = None
    ) -> Generation:
        per_prompt = schema_list(schemas, len(prompts))
        self.calls.append((len(prompts), per_prompt))
        texts = [self.answer(i, prompt, per_prompt[i]) for i, prompt in enumerate(prompts)]
        n = len(texts)
        return Generation(texts, np.zeros(n, np.int64), np.zeros(n, np.int64), ["stop"] * n)
