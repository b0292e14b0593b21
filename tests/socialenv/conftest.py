"""Fixtures of the kernel tests: the kernel backend and the thread count, each restored
afterwards (socialenv.core.kernels)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from socialenv.core import kernels


@pytest.fixture
def compiled() -> Iterator[dict[str, Any]]:
    """The numba kernels (restores the backend in use afterwards)."""
    pytest.importorskip("numba")
    previous = kernels.BACKEND
    kernels.use_backend("numba")
    yield kernels._compiled
    kernels.use_backend(previous)


@pytest.fixture(params=["numba", "numpy"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each kernel backend in turn (restores the backend in use afterwards)."""
    previous = kernels.BACKEND
    kernels.use_backend(request.param)
    yield request.param
    kernels.use_backend(previous)


@pytest.fixture
def threads() -> Iterator[Any]:
    """A setter of the thread count, kernels and row blocks (restores the count in use
    afterwards)."""
    previous = kernels.THREADS
    yield kernels.set_threads
    kernels.set_threads(previous)
