"""Large output arrays handed out again once no caller holds them.

An env that returns a fresh (K, D) observation every step makes the allocator map new memory
each time (glibc maps blocks above 32 MB anew and unmaps them when freed), and the kernel
faults every page of it in again: 0.5-0.8 s of system time per step for the 190 MB arm
contexts of a 1M-user Rec env on this project's VM (BENCHMARKS.md, issue 24's ninth step).
:class:`ReusedArrays` keeps the last few arrays it handed out and returns one again only when
nothing outside it refers to it any more: no variable, container, view or tensor made from it
(each of those holds a reference to the array, which CPython counts). A caller that keeps an
observation therefore never sees it change; one that drops it lets the next step write into the
same pages. The follow graph's edits merge into the memory of the CSR indices the same way.

CPython's reference count is the test, as in NumPy's own elision of temporaries; on an
interpreter without one (PyPy) nothing is reused.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np


def _refs_of_a_listed_object() -> int:
    """What ``sys.getrefcount`` reports for an item read out of a list that alone holds it (the
    list's reference and the argument's): measured, not assumed, since CPython versions count
    borrowed stack references differently."""
    listed = [object()]
    return sys.getrefcount(listed[0])


#: The size from which :meth:`ReusedArrays.empty_if_large` keeps an array: NumPy asks the kernel
#: for huge pages from 4 MiB on, and glibc maps blocks above 32 MiB anew every time.
LARGE_BYTES = 1 << 22

#: The count of an array that only a ReusedArrays holds (-1: no reference counts, no reuse).
_UNSHARED = _refs_of_a_listed_object() if hasattr(sys, "getrefcount") else -1


def held_only_by(owner: object, name: str) -> bool:
    """Whether the array ``owner.<name>`` is referred to by that attribute alone: no variable,
    container, view or tensor elsewhere (CPython's reference count; False without one)."""
    return _UNSHARED > 0 and sys.getrefcount(getattr(owner, name)) <= _UNSHARED


class ReusedArrays:
    """Up to ``keep`` arrays, each handed out again by :meth:`empty` for a request of its dtype
    that fits in it once no caller refers to it (``keep=0``: none, every call a new array). A
    request of the array's shape gets the array itself, a smaller one a view of its first
    elements (a view refers to the array, so it counts as holding it). The contents of a
    reused array are an earlier request's: the caller must overwrite every element, as after
    ``np.empty``. Pickling or copying keeps the setting, not the arrays."""

    def __init__(self, keep: int = 2) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep={keep!r} is not allowed: an integer >= 0")
        self.keep = keep
        self._arrays: list[np.ndarray] = []
        self.reused = 0
        self.allocated = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type, room: int = 0) -> np.ndarray:
        """An uninitialised C-contiguous ``shape`` array of ``dtype``: a kept one that nobody
        else holds, or a new one with ``room`` more elements than asked (for later requests a
        little larger), kept in place of the oldest when ``keep`` are already kept."""
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        size = int(np.prod(shape))
        arrays = self._arrays
        free = [
            i
            for i in range(len(arrays))
            if _UNSHARED > 0 and sys.getrefcount(arrays[i]) <= _UNSHARED
        ]
        for i in free:
            if arrays[i].dtype == dtype and arrays[i].size >= size:
                array = arrays.pop(i)
                arrays.append(array)
                self.reused += 1
                return _fitted(array, shape, size)
        for i in reversed(free):  # free, but too small or of another dtype: let its memory go
            del arrays[i]
        self.allocated += 1
        array = np.empty(shape if room <= 0 else size + int(room), dtype)
        if self.keep:
            arrays.append(array)
            while len(arrays) > self.keep:
                del arrays[0]
        return _fitted(array, shape, size)

    def empty_if_large(
        self, shape: tuple[int, ...], dtype: np.dtype | type, room: int = 0
    ) -> np.ndarray | None:
        """:meth:`empty` for a request of at least :data:`LARGE_BYTES`, else None: a smaller
        array comes from the allocator's free memory, whose pages are mapped already, and
        reusing it would cost more than it saves."""
        if np.dtype(dtype).itemsize * math.prod(shape) < LARGE_BYTES:
            return None
        return self.empty(shape, dtype, room)

    def clear(self) -> None:
        """Forget every kept array (the memory goes back once callers drop theirs)."""
        self._arrays.clear()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": []}


def _fitted(array: np.ndarray, shape: tuple[int, ...], size: int) -> np.ndarray:
    """``array`` itself when it has ``shape``, else its first ``size`` elements as ``shape``."""
    if array.shape == shape:
        return array
    return array.reshape(-1)[:size].reshape(shape)


class ArraysByRole:
    """The large arrays of a build that runs again and again (a scenario, each reset), kept one
    per role: a request of a role gets that role's last array back once nothing outside refers
    to it (:class:`ReusedArrays` with ``keep=1``), so its pages need not be faulted in again.
    A new array has ``room`` (a fraction) more elements than asked, for a next request a little
    larger; a request under :data:`LARGE_BYTES` gets a new array and nothing is kept."""

    def __init__(self, room: float = 0.02) -> None:
        if not 0 <= room <= 1:
            raise ValueError(f"room={room!r} is not allowed: a fraction in [0, 1]")
        self.room = room
        self._roles: dict[str, ReusedArrays] = {}

    def empty(self, role: str, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialised C-contiguous ``shape`` array of ``dtype`` for ``role`` (see the
        class); the caller must overwrite every element."""
        size = math.prod(shape)
        array = self._roles.setdefault(role, ReusedArrays(keep=1)).empty_if_large(
            shape, dtype, room=math.ceil(size * self.room)
        )
        return np.empty(shape, dtype) if array is None else array

    @property
    def reused(self) -> int:
        """How many requests got a kept array back."""
        return sum(arrays.reused for arrays in self._roles.values())


def role_empty(
    memory: ArraysByRole | None, role: str, shape: tuple[int, ...], dtype: np.dtype | type
) -> np.ndarray:
    """``memory.empty(role, shape, dtype)``, or a new array where there is no ``memory``."""
    return np.empty(shape, dtype) if memory is None else memory.empty(role, shape, dtype)
