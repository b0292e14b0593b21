"""Row blocks of a batched phase run on a small thread pool, with the same results as in order.

:func:`map_blocks` calls ``func(lo, hi)`` for the consecutive blocks of a range. With one
thread (the default) it runs them in order on the calling thread; with more
(:func:`set_block_threads`, which ``socialenv.core.kernels.set_threads`` and the environment
variable ``POLICYSIM_THREADS`` set) it shares them out to a kept pool. The blocks are the same
whatever the thread count, and each writes its own rows, so a phase whose blocks run NumPy
calls that release the GIL (gathers, ufuncs, ``einsum``, nogil compiled kernels) gets
bit-identical results on any number of threads.

:func:`random_in_blocks` draws ``rng.random(size)`` the same way: each block from a copy of a
PCG64 generator jumped ahead to the block's first draw, so the draws and the generator's state
afterwards are those of one call.

:func:`beside` runs a function on the same pool while the calling thread goes on, for two
sections of a round that share nothing; with one thread it runs at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

_T = TypeVar("_T")
_state = threading.local()
_threads = 1
#: ``POLICYSIM_BESIDE=0`` (read at import) or :func:`set_beside` runs every :func:`beside`
#: function at once, on the calling thread: to measure what running beside gains
_beside = os.environ.get("POLICYSIM_BESIDE", "1").strip() != "0"
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
    _run_inside(lambda: func(*bound))


def _executor() -> ThreadPoolExecutor:
    """The kept pool of :func:`block_threads` threads (a new one after the count changed)."""
    global _pool
    if _pool is None or _pool[0] != _threads:
        if _pool is not None:
            _pool[1].shutdown(wait=True)
        _pool = (_threads, ThreadPoolExecutor(_threads, thread_name_prefix="policysim-block"))
    return _pool[1]


def _run_inside(func: Callable[[], _T]) -> _T:
    # on a pool thread: nested blocks and kernels run on this thread
    _state.inside = True
    try:
        return func()
    finally:
        _state.inside = False


def set_beside(enabled: bool) -> bool:
    """Whether :func:`beside` may run its function on the pool (False: always at once, on the
    calling thread; the results are the same). Returns the previous setting."""
    global _beside
    previous, _beside = _beside, bool(enabled)
    return previous


def beside(func: Callable[[], _T], worth_a_thread: bool = True) -> Callable[[], _T]:
    """Start ``func()`` on the pool, beside the calling thread, and return a function that
    waits for its result (raising its exception). With one thread, from inside a block, with
    :func:`set_beside` off, or when the caller says the work is not ``worth_a_thread`` (handing
    it over costs tens of microseconds), ``func`` runs at once on the calling thread (and
    raises at once). Like a block, it runs nested blocks and kernels on its own thread.
    ``func`` must not draw from a generator the caller draws from, nor read what the caller
    writes before taking the result, nor write what the caller reads: then its result is the
    same whether it runs beside or at once."""
    if _threads == 1 or not _beside or not worth_a_thread or inside_block():
        result = func()
        return lambda: result
    future = _executor().submit(_run_inside, func)
    return future.result


def map_blocks(func: Callable[[int, int], None], n: int, block: int) -> None:
    """``func(lo, hi)`` for the consecutive blocks ``[lo, hi)`` of ``range(n)``, ``block`` long
    (the last one shorter): in order on the calling thread with one thread (or when called
    from inside a block), else on the pool. ``func`` must write disjoint outputs per block;
    the first exception of a block is raised once all blocks have run."""
    if block < 1:
        raise ValueError(f"block={block!r} is not allowed: an integer >= 1")
    if n <= block:  # one block (or none): on the calling thread
        if n > 0:
            func(0, n)
        return
    bounds = [(lo, min(lo + block, n)) for lo in range(0, n, block)]
    if _threads == 1 or inside_block():
        for lo, hi in bounds:
            func(lo, hi)
        return
    pool = _executor()
    futures = [pool.submit(_run, func, bound) for bound in bounds]
    for future in futures:
        future.exception()  # wait for every block before raising
    for future in futures:
        future.result()


def _set_buffered_half(bit_generator: np.random.PCG64, has_uint32: int, uinteger: int) -> None:
    """Set PCG64's buffered half-output, the high half kept for the next float32 draw."""
    state: Any = bit_generator.state
    moved: Any = {**state, "has_uint32": has_uint32, "uinteger": uinteger}
    bit_generator.state = moved


def _pcg64_at(state: Any, outputs: int, has_uint32: int, uinteger: int) -> np.random.PCG64:
    """A PCG64 at ``state`` advanced by ``outputs`` 64-bit outputs, with the given buffered
    half-output (``advance`` alone would clear it)."""
    bit_generator = np.random.PCG64(0)
    bit_generator.state = state
    bit_generator.advance(outputs)
    _set_buffered_half(bit_generator, has_uint32, uinteger)
    return bit_generator


def random_in_blocks(
    rng: np.random.Generator,
    size: int | tuple[int, ...],
    dtype: type = np.float64,
    block: int = 1 << 18,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``rng.random(size, dtype)``: the same array, and ``rng`` left in the same state, drawn
    ``block`` values at a time on :func:`map_blocks`' threads when ``rng`` is a PCG64 and there
    are several blocks (each block from a copy of ``rng`` advanced to its first draw). ``out``:
    a C-contiguous array of ``size`` and ``dtype`` to draw into (and return), e.g. kept memory
    whose pages are already mapped.

    PCG64 can jump ahead exactly: a float64 draw takes one 64-bit output, a float32 draw half of
    one (the low half first, the high half kept for the next float32 draw)."""
    if _threads == 1 and out is None:
        return rng.random(size, dtype=dtype)
    kind = np.dtype(dtype)
    shape = tuple(int(v) for v in np.atleast_1d(np.asarray(size, np.int64)))
    if out is not None and (out.shape != shape or out.dtype != kind or not out.flags.c_contiguous):
        raise ValueError(
            f"out of shape {out.shape} and dtype {out.dtype} is not allowed: a C-contiguous "
            f"array of shape {shape} and dtype {kind}"
        )
    n = int(np.prod(shape))
    if (
        _threads == 1
        or n < 2 * block
        or type(rng.bit_generator) is not np.random.PCG64
        or kind not in (np.float32, np.float64)
    ):
        return rng.random(shape, dtype=kind, out=out)
    start: Any = rng.bit_generator.state
    buffered, held = int(start["has_uint32"]), int(start["uinteger"])
    out = np.empty(shape, kind) if out is None else out
    flat = out.reshape(n)
    ends: list[Any] = [None for _ in range(0, n, block)]  # each block's PCG64 after its draws

    def run(lo: int, hi: int) -> None:
        if kind == np.float64:  # one output per draw; a buffered half stays buffered
            bit_generator = _pcg64_at(start, lo, buffered, held)
        elif lo == 0:
            bit_generator = _pcg64_at(start, 0, buffered, held)
        else:
            halves = lo - buffered  # new half-outputs before this block's first draw
            bit_generator = _pcg64_at(start, halves // 2, 0, 0)
            if halves % 2:  # the block starts on the high half of an output
                high = int(bit_generator.random_raw()) >> 32
                _set_buffered_half(bit_generator, 1, high)
        np.random.Generator(bit_generator).random(hi - lo, dtype=kind, out=flat[lo:hi])
        ends[lo // block] = bit_generator.state

    map_blocks(run, n, block)
    rng.bit_generator.state = ends[-1]  # where one call would have left it
    return out
