"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


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
