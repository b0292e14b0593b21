"""ReusedArrays: an array is handed out again only when no caller refers to it."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from policysim_infra.buffers import LARGE_BYTES, ArraysByRole, ReusedArrays


def test_a_dropped_array_is_handed_out_again() -> None:
    arrays = ReusedArrays(keep=2)
    first = arrays.empty((4, 3), np.float32)
    address = first.__array_interface__["data"][0]
    del first
    again = arrays.empty((4, 3), np.float32)
    assert again.__array_interface__["data"][0] == address
    assert (arrays.allocated, arrays.reused) == (1, 1)


@pytest.mark.parametrize(
    "hold",
    [
        lambda a: a,  # the array itself
        lambda a: a[1:],  # a view
        lambda a: a.T,  # a transposed view
        lambda a: {"arms": a},  # an observation dict
        lambda a: [a],  # a replay list
        lambda a: memoryview(a),  # the buffer protocol
        lambda a: np.asarray(a),  # asarray returns the array itself
        lambda a: np.frombuffer(a, np.uint8),  # a view over its bytes
    ],
    ids=["array", "view", "transpose", "dict", "list", "memoryview", "asarray", "frombuffer"],
)
def test_an_array_someone_holds_is_never_handed_out(hold) -> None:
    arrays = ReusedArrays(keep=2)
    array = arrays.empty((4, 3), np.float32)
    array[:] = 7.0
    held = hold(array)
    del array
    gc.collect()
    for _ in range(5):  # more requests than it keeps
        fresh = arrays.empty((4, 3), np.float32)
        fresh[:] = -1.0
    kept = held if isinstance(held, np.ndarray) else None
    if isinstance(held, dict):
        kept = held["arms"]
    elif isinstance(held, list):
        kept = held[0]
    elif isinstance(held, memoryview):
        kept = np.asarray(held)
    assert kept is not None
    assert (kept.view(np.float32) if kept.dtype == np.uint8 else kept).min() == 7.0


def test_a_torch_tensor_holds_its_array() -> None:
    torch = pytest.importorskip("torch")
    arrays = ReusedArrays(keep=1)
    array = arrays.empty((8,), np.float32)
    array[:] = 3.0
    tensor = torch.from_numpy(array)
    del array
    arrays.empty((8,), np.float32)[:] = -1.0
    assert float(tensor.min()) == 3.0


def test_a_held_obs_survives_the_next_steps_and_a_dropped_one_is_reused() -> None:
    """The RL loop: obs is kept until the next step returns; two kept arrays suffice."""
    arrays = ReusedArrays(keep=2)
    obs = arrays.empty((16, 2), np.float32)
    for step in range(6):
        obs[:] = step
        previous = obs
        obs = arrays.empty((16, 2), np.float32)
        assert obs is not previous
        assert previous.min() == previous.max() == step
    assert arrays.allocated == 2 and arrays.reused == 5


def test_other_shapes_and_dtypes_get_new_arrays_and_free_ones_are_let_go() -> None:
    arrays = ReusedArrays(keep=2)
    a = arrays.empty((4,), np.float32)
    del a
    b = arrays.empty((5,), np.float32)  # the free (4,) one is too small: let go, not kept
    c = arrays.empty((5,), np.float64)
    assert b.shape == (5,) and c.dtype == np.float64
    assert arrays.allocated == 3 and arrays.reused == 0
    assert len(arrays._arrays) == 2


def test_a_kept_array_serves_requests_that_fit_as_views_that_hold_it() -> None:
    arrays = ReusedArrays(keep=1)
    first = arrays.empty((3, 100), np.float32, room=75)  # room for 375 values
    assert first.shape == (3, 100) and first.base is not None
    address = first.__array_interface__["data"][0]
    del first
    smaller = arrays.empty((2, 110), np.float32)
    assert smaller.shape == (2, 110) and smaller.flags.c_contiguous
    assert smaller.__array_interface__["data"][0] == address
    smaller[:] = 5.0
    other = arrays.empty((2, 110), np.float32)  # the view holds the kept array: a new one
    assert other.__array_interface__["data"][0] != address
    assert smaller.min() == 5.0
    del smaller, other
    bigger = arrays.empty((4, 100), np.float32)  # fits in no kept array: a new one
    assert bigger.shape == (4, 100) and bigger.base is None
    assert (arrays.allocated, arrays.reused) == (3, 1)


def test_keep_zero_always_allocates() -> None:
    arrays = ReusedArrays(keep=0)
    for _ in range(3):
        arrays.empty((4,), np.float32)
    assert (arrays.allocated, arrays.reused) == (3, 0)


@pytest.mark.parametrize("keep", [-1, 1.5, True, "2"])
def test_bad_keep_is_refused(keep) -> None:
    with pytest.raises(ValueError, match="keep="):
        ReusedArrays(keep=keep)


def test_pickling_keeps_the_setting_not_the_arrays() -> None:
    import copy
    import pickle

    arrays = ReusedArrays(keep=3)
    arrays.empty((1000,), np.float64)
    for clone in (pickle.loads(pickle.dumps(arrays)), copy.deepcopy(arrays)):
        assert (clone.keep, clone._arrays) == (3, [])


def test_only_large_requests_are_kept() -> None:
    """Below LARGE_BYTES the caller gets None (and allocates itself); from it on, kept
    memory, handed out again once dropped."""
    from policysim_infra.buffers import LARGE_BYTES

    arrays = ReusedArrays(keep=1)
    assert arrays.empty_if_large((LARGE_BYTES // 8 - 1,), np.float64) is None
    large = arrays.empty_if_large((LARGE_BYTES // 4,), np.float32)
    assert large is not None and large.shape == (LARGE_BYTES // 4,)
    address = large.__array_interface__["data"][0]
    del large
    again = arrays.empty_if_large((2, LARGE_BYTES // 8), np.float32)
    assert again is not None and again.__array_interface__["data"][0] == address
    assert (arrays.allocated, arrays.reused) == (1, 1)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_each_role_gets_its_own_last_array_back_with_room_for_a_larger_request() -> None:
    memory = ArraysByRole(room=0.02)
    rows = LARGE_BYTES // (4 * 8)  # (rows, 8) float32: at the size from which arrays are kept
    first = memory.empty("latent", (rows, 8), np.float32)
    other = memory.empty("history", (rows, 8), np.float32)
    addresses = _address(first), _address(other)
    assert first.shape == (rows, 8) and first.flags.c_contiguous
    del first, other
    # the other role's array fits too, but each role gets its own back, 1% larger still fits
    again = memory.empty("history", (rows + rows // 100, 8), np.float32)
    latent = memory.empty("latent", (rows, 8), np.float32)
    assert (_address(latent), _address(again)) == addresses and memory.reused == 2
    # held: a new array, and the held one is left as it was
    latent[:] = 1.0
    fresh = memory.empty("latent", (rows, 8), np.float32)
    assert _address(fresh) != addresses[0] and (latent == 1.0).all()
    # too small for the request: let go, a new one allocated
    del again
    larger = memory.empty("history", (2 * rows, 8), np.float32)
    assert larger.shape == (2 * rows, 8) and memory.reused == 2


def test_small_requests_are_new_arrays_and_a_bad_room_is_refused() -> None:
    memory = ArraysByRole()
    small = memory.empty("latent", (4, 3), np.float64)
    assert small.shape == (4, 3) and memory._roles["latent"]._arrays == []  # nothing kept
    del small
    assert memory.empty("latent", (4, 3), np.float64).shape == (4, 3) and memory.reused == 0
    with pytest.raises(ValueError, match=r"room=-0.5 is not allowed: a fraction in \[0, 1\]"):
        ArraysByRole(room=-0.5)
