"""Row blocks of a batched phase run on a small thread pool, with the same results as in order.

:func:`map_blocks` calls ``func(lo, hi)`` for the consecutive blocks of a range. With one
thread (the default) it runs them in order on the calling thread; with more
(:func:`set_block_threads`, which ``socialenv.core.kernels.set_threads`` and the environment
variable ``POLICYSIM_THREADS`` set) it shares them out to a kept pool. The blocks are the same
whatever the thread count, and each writes its own rows, so a phase whose blocks run NumPy
calls that release the GIL (gathers, ufuncs, ``einsum``, nogil compiled kernels) gets
bit-identical results on any number of threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_state = threading.local()
_threads = 1
_pool: tuple[int, ThreadPoolExecutor] | None = None


def set_block_threads(threads: int) -> int:
    """Threads of :func:`map_blocks` (1: every block on the calling thread). Returns it."""
    global _threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r} is not allowed: an integer >= 1")
    _threads = threads
    return _threads


def block_threads() -> int:
    """The threads :func:`map_blocks` uses."""
    return _threads


def inside_block() -> bool:
    """Whether the calling thread is running a block of :func:`map_blocks` on the pool (a
    kernel called there should not start threads of its own)."""
    return bool(getattr(_state, "inside", False))


def _run(func: Callable[[int, int], None], bound: tuple[int, int]) -> None:
    _state.inside = True
    try:
        func(*bound)
    finally:
        _state.inside = False


def map_blocks(func: Callable[[int, int], None], n: int, block: int) -> None:
    """``func(lo, hi)`` for the consecutive blocks ``[lo, hi)`` of ``range(n)``, ``block`` long
    (the last one shorter): in order on the calling thread with one thread (or when called
    from inside a block), else on the pool. ``func`` must write disjoint outputs per block;
    the first exception of a block is raised once all blocks have run."""
    global _pool
    if block < 1:
        raise ValueError(f"block={block!r} is not allowed: an integer >= 1")
    bounds = [(lo, min(lo + block, n)) for lo in range(0, n, block)]
    if _threads == 1 or len(bounds) < 2 or inside_block():
        for lo, hi in bounds:
            func(lo, hi)
        return
    if _pool is None or _pool[0] != _threads:
        if _pool is not None:
            _pool[1].shutdown(wait=True)
        _pool = (_threads, ThreadPoolExecutor(_threads, thread_name_prefix="policysim-block"))
    futures = [_pool[1].submit(_run, func, bound) for bound in bounds]
    for future in futures:
        future.exception()  # wait for every block before raising
    for future in futures:
        future.result()
