"""Transparent huge pages: off for the arrays a reset builds, on for the arrays kept and written
again every round.

Where the kernel honours ``MADV_HUGEPAGE`` (THP ``madvise``, NumPy's default advice for arrays
of 4 MiB and more), the first touch of a huge page can cost far more than the same bytes in
small pages: on the development VMs (Firecracker guests with free-page reporting) a fresh
2 MiB page cost milliseconds of system time. A 1M-user reset spent 1.3-1.6 s of system
time with the advice and 0.6-0.7 s with the reset in small pages, and the rounds after it
were not slower (three alternating pairs of ``benchmarks/env_throughput.py``, published in
``benchmarks/results/env_throughput_reset_small_pages/``). An array that the rounds write again
(``policysim_infra.buffers.ReusedArrays``) pays its first faults once, so :func:`huge_pages`
gives it huge pages even when the reset allocates it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

_T = TypeVar("_T")

_core = getattr(np, "_core", None) or np.core  # NumPy 1.x: numpy.core
_set_advice: Callable[[bool], bool] | None = getattr(
    _core.multiarray, "_set_madvise_hugepage", None
)


def small_pages(build: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``build`` with NumPy's huge-page advice off, restored on return (also after an
    error). Arrays allocated outside keep NumPy's setting."""
    return _with_advice(build, False)


def huge_pages(build: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``build`` with NumPy's huge-page advice on (its default), restored on return: for an
    array kept and written again every round, whose first faults are paid once (also inside
    :func:`small_pages`)."""
    return _with_advice(build, True)


def _with_advice(build: Callable[..., _T], advice: bool) -> Callable[..., _T]:
    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> _T:
        if _set_advice is None:
            return build(*args, **kwargs)
        previous = _set_advice(advice)
        try:
            return build(*args, **kwargs)
        finally:
            _set_advice(previous)

    return wrapper
