"""Software prefetch for numba kernels (imported only when numba is installed).

:func:`prefetch` is ``llvm.prefetch``: it asks the CPU to bring a cache line towards its core
and retires at once, so a memory-bound kernel can have the rows of later iterations on their
way while it works on the current one. A hint only: nothing a kernel reads or writes changes.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

_LINE = 64


@intrinsic
def prefetch(typingctx: Any, address: Any) -> Any:
    """Prefetch the cache line at ``address`` (an integer) for reading, into every level."""
    if not isinstance(address, numba.types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch",
            [pointer.type],
            ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]),
        )
        read, highest_locality, data_cache = (ir.Constant(i32, v) for v in (0, 3, 1))
        builder.call(function, [pointer, read, highest_locality, data_cache])
        return context.get_dummy_value()

    return numba.types.void(address), codegen


@numba.njit(cache=True, nogil=True)
def prefetch_item(values: np.ndarray, i: int) -> None:
    """The cache line of item ``i`` of the contiguous 1-D ``values``."""
    prefetch(values.ctypes.data + i * values.itemsize)


@numba.njit(cache=True, nogil=True)
def prefetch_row(table: np.ndarray, row: int) -> None:
    """Every cache line of row ``row`` of the C-contiguous 2-D ``table``."""
    start = table.ctypes.data + row * table.strides[0]
    for offset in range(0, table.shape[1] * table.itemsize, _LINE):
        prefetch(start + offset)
