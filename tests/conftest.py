"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The module settings a test may switch, and must switch back: the kernel backends and the
#: kernels' thread count.
_KERNEL_SETTINGS = (
    ("socialenv.core.kernels", "BACKEND"),
    ("agent_models.surrogate_kernels", "BACKEND"),
    ("socialenv.core.kernels", "THREADS"),
)


def _kernel_settings() -> dict[str, object]:
    """Each of :data:`_KERNEL_SETTINGS` whose module is already imported."""
    return {
        f"{module}.{name}": getattr(sys.modules[module], name)
        for module, name in _KERNEL_SETTINGS
        if module in sys.modules
    }


@pytest.fixture(autouse=True)
def _kernel_settings_restored() -> Iterator[None]:
    """Every test leaves the kernel backends and thread count as it found them: one that
    switched them without switching back would run every later test of the session on the
    other path."""
    before = _kernel_settings()
    yield
    after = _kernel_settings()
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    if changed:
        pytest.fail(
            "the test left kernel settings switched (setting: before, after): "
            f"{changed}; restore them (e.g. the `compiled`, `backend` or `threads` fixture)"
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
