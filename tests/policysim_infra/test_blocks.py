"""map_blocks runs every block once, on any thread count, and raises what a block raises."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from policysim_infra import blocks


@pytest.fixture
def block_threads():
    """A setter of map_blocks' threads (restores the setting afterwards)."""
    previous = blocks.block_threads()
    yield blocks.set_block_threads
    blocks.set_block_threads(previous)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("n", "block"), [(0, 4), (1, 4), (10, 3), (1000, 64), (64, 64)])
def test_every_block_runs_once_on_any_thread_count(block_threads, threads, n, block):
    block_threads(threads)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    out = np.zeros(n, np.int64)

    def run(lo: int, hi: int) -> None:
        out[lo:hi] += np.arange(lo, hi)
        with lock:
            seen.append((lo, hi))

    blocks.map_blocks(run, n, block)
    assert sorted(seen) == [(lo, min(lo + block, n)) for lo in range(0, n, block)]
    np.testing.assert_array_equal(out, np.arange(n))


def test_blocks_run_on_the_pool_and_nested_calls_run_inline(block_threads):
    block_threads(2)
    names: set[str] = set()
    inner: list[bool] = []

    def run(lo: int, hi: int) -> None:
        names.add(threading.current_thread().name)
        assert blocks.inside_block()
        caller = threading.current_thread()
        blocks.map_blocks(lambda a, b: inner.append(threading.current_thread() is caller), 4, 1)

    blocks.map_blocks(run, 8, 1)
    assert all(name.startswith("policysim-block") for name in names)
    assert inner == [True] * 32  # a block's own map_blocks stays on the block's thread
    assert not blocks.inside_block()


@pytest.mark.parametrize("threads", [1, 2])
def test_an_exception_of_a_block_is_raised(block_threads, threads):
    block_threads(threads)

    def run(lo: int, hi: int) -> None:
        if lo == 6:
            raise RuntimeError("block 6")

    with pytest.raises(RuntimeError, match="block 6"):
        blocks.map_blocks(run, 10, 2)
    assert not blocks.inside_block()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_thread_counts_and_blocks_are_refused(block_threads, bad):
    with pytest.raises(ValueError, match="threads"):
        blocks.set_block_threads(bad)
    with pytest.raises(ValueError, match="block"):
        blocks.map_blocks(lambda lo, hi: None, 10, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("drawn_before", [0, 1, 2, 3])
def test_random_in_blocks_is_one_call_and_leaves_the_same_state(block_threads, dtype, drawn_before):
    """The draws of one ``rng.random`` call and the generator's state after it, whatever the
    blocks, threads and the float32 half-output buffered before (odd float32 draws leave one)."""
    for threads in (1, 2):
        block_threads(threads)
        for size, block in [(10, 7), (1001, 64), (4097, 1000), ((4, 33, 9), 50), (5, 1 << 18)]:
            serial = np.random.default_rng(7)
            blocked = np.random.default_rng(7)
            serial.random(drawn_before, dtype=np.float32)
            blocked.random(drawn_before, dtype=np.float32)
            expected = serial.random(size, dtype=dtype)
            got = blocks.random_in_blocks(blocked, size, dtype, block=block)
            assert got.shape == expected.shape and got.tobytes() == expected.tobytes()
            assert blocked.bit_generator.state == serial.bit_generator.state
            # what comes next is the same too: buffered float32 halves and rejection samplers
            assert (
                blocked.random(3, dtype=np.float32).tobytes()
                == serial.random(3, dtype=np.float32).tobytes()
            )
            assert blocked.standard_normal(4).tobytes() == serial.standard_normal(4).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_in_blocks_draws_into_out(block_threads, dtype):
    """``out``: the same draws and state as one call, written into and returned as ``out``;
    an ``out`` of another shape, dtype or layout is refused, naming what is allowed."""
    for threads in (1, 2):
        block_threads(threads)
        for size, block in [(1001, 64), ((40, 33), 100), (7, 1 << 18)]:
            serial, blocked = np.random.default_rng(9), np.random.default_rng(9)
            out = np.full(size, np.nan, dtype)
            got = blocks.random_in_blocks(blocked, size, dtype, block=block, out=out)
            assert got is out
            assert out.tobytes() == serial.random(size, dtype=dtype).tobytes()
            assert blocked.bit_generator.state == serial.bit_generator.state
    rng = np.random.default_rng(9)
    for bad in (np.empty(10, dtype), np.empty((5, 4), np.float16), np.empty((5, 8), dtype)[:, ::2]):
        with pytest.raises(ValueError, match="out of shape .* C-contiguous array of shape"):
            blocks.random_in_blocks(rng, (5, 4), dtype, out=bad)


def test_random_in_blocks_draws_other_generators_in_one_call(block_threads):
    """Other bit generators are drawn by one ``rng.random`` call, and other dtypes get its
    error."""
    block_threads(2)
    serial = np.random.Generator(np.random.Philox(3))
    blocked = np.random.Generator(np.random.Philox(3))
    got = blocks.random_in_blocks(blocked, 5000, block=64)
    assert got.tobytes() == serial.random(5000).tobytes()
    assert blocked.random(3).tobytes() == serial.random(3).tobytes()
    with pytest.raises(TypeError, match="Unsupported dtype"):  # what rng.random says
        blocks.random_in_blocks(np.random.default_rng(4), 5000, np.float16, block=64)


@pytest.mark.parametrize("threads", [1, 2])
def test_beside_runs_on_the_pool_with_threads_and_at_once_without(block_threads, threads):
    block_threads(threads)
    caller = threading.current_thread()
    started = threading.Event()

    def work() -> tuple[bool, bool, list[tuple[int, int]]]:
        started.set()
        nested: list[tuple[int, int]] = []
        # a nested map_blocks runs inline, on this thread
        blocks.map_blocks(lambda lo, hi: nested.append((lo, hi)), 10, 4)
        return threading.current_thread() is caller, blocks.inside_block(), nested

    result = blocks.beside(work)
    assert started.is_set() or threads > 1
    on_caller, inside, nested = result()
    assert on_caller == (threads == 1)
    assert inside == (threads > 1)
    assert nested == [(0, 4), (4, 8), (8, 10)]
    assert not blocks.inside_block()


@pytest.mark.parametrize("threads", [1, 2])
def test_beside_raises_what_its_function_raises(block_threads, threads):
    block_threads(threads)

    def fail() -> None:
        raise KeyError("beside")

    with pytest.raises(KeyError, match="beside"):
        blocks.beside(fail)()


def test_beside_switched_off_runs_at_once(block_threads):
    block_threads(2)
    caller = threading.current_thread()
    previous = blocks.set_beside(False)
    try:
        assert blocks.beside(lambda: threading.current_thread() is caller)() is True
        blocks.set_beside(True)
        assert blocks.beside(lambda: threading.current_thread() is caller)() is False
    finally:
        blocks.set_beside(previous)


def test_beside_runs_at_once_when_not_worth_a_thread(block_threads):
    block_threads(2)
    caller = threading.current_thread()
    on_caller = blocks.beside(lambda: threading.current_thread() is caller, worth_a_thread=False)
    assert on_caller() is True
