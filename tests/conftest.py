"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The modules whose kernel backend (``BACKEND``) a test may switch, and must switch back.
_BACKEND_MODULES = ("socialenv.core.kernels", "agent_models.surrogate_kernels")


def _backends() -> dict[str, str]:
    """The backend of each of :data:`_BACKEND_MODULES` already imported."""
    return {name: sys.modules[name].BACKEND for name in _BACKEND_MODULES if name in sys.modules}


@pytest.fixture(autouse=True)
def _kernel_backends_restored() -> Iterator[None]:
    """Every test leaves the kernel backends as it found them: one that switched them without
    switching back would run every later test of the session on the other path."""
    before = _backends()
    yield
    after = _backends()
    changed = {name: (before[name], after[name]) for name in before if before[name] != after[name]}
    if changed:
        pytest.fail(
            "the test left kernel backends switched (module: before, after): "
            f"{changed}; restore them (e.g. the `compiled` or `backend` fixture)"
        )


@pytest.fixture(scope="session")
def tiny_lm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 causal LM with a from-scratch BPE tokenizer and a chat template,
    built once per test session (:func:`agent_models.testing.build_tiny_lm`)."""
    from agent_models.testing import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"), seed=0)


@pytest.fixture(scope="session")
def twibot():
    """The TwiBot-20 fixture file read with the hashing encoder (no model)."""
    from socialenv.scenarios.loaders import LoaderConfig, read_twibot20
    from tests.support import TWIBOT

    return read_twibot20(TWIBOT, config=LoaderConfig(encoder="hash"))
