"""Reading ``.npz`` files (zips of ``.npy`` members) with every limit checked before any
array is read.

:class:`NpzReader` opens the zip and, before reading a single array, refuses members it does
not know, then reads each member's ``.npy`` header (``numpy.lib.format.read_magic`` /
``read_array_header_*``) and checks the declared dtype (no object arrays, only the allowed
kinds) and shape against the file's own sizes:

- a member's array may not need more bytes than the member holds (its size in the zip);
- all arrays together may not exceed ``max_bytes`` (each caller documents its limit);
- a file may not expand more than :data:`MAX_EXPANSION` times its size on disk once its
  arrays exceed :data:`SMALL_ARRAYS_BYTES` (deflate reaches ~1000x only on degenerate data,
  the "zip bomb" case; real logs and scenarios stay well under 10x).

Every failure, a damaged zip (bad CRC, truncated file) included, is an
:class:`ArrayFileError`, a ValueError naming the file and the member.
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

#: A file whose arrays take more than SMALL_ARRAYS_BYTES may not expand beyond this many
#: times its size on disk.
MAX_EXPANSION = 100
SMALL_ARRAYS_BYTES = 64 * 1024 * 1024
#: Largest ``.npy`` header read (numpy's own default).
MAX_HEADER_BYTES = 10_000
#: dtype kinds a data file may hold: bool, integers, floats, fixed-width text.
DATA_KINDS = "biufUS"
_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError)

Header = tuple[tuple[int, ...], np.dtype]


class ArrayFileError(ValueError):
    """An ``.npz`` file that cannot be read within its limits (names the file and member)."""


class NpzReader:
    """An open ``.npz`` file whose array headers have been checked (see the module doc).

    ``members``: the array names (without ``.npy``) the file may hold (None: any name);
    ``extra``: other member names allowed (e.g. ``meta.json``); ``required``: names that
    must be present; ``max_bytes``: the largest total of array bytes; ``kinds``: allowed
    dtype kinds; ``check``: called with ``{name: (shape, dtype)}`` before any array is
    read (raise ValueError to refuse); ``max_expansion``, ``small_bytes``: the zip-bomb rule
    (arrays beyond ``small_bytes`` may take at most ``max_expansion`` times the file's size)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int,
        members: Collection[str] | None = None,
        extra: Collection[str] = (),
        required: Collection[str] = (),
        kinds: str = DATA_KINDS,
        check: Callable[[dict[str, Header]], None] | None = None,
        what: str = "file",
        max_expansion: float = MAX_EXPANSION,
        small_bytes: int = SMALL_ARRAYS_BYTES,
    ) -> None:
        self.path = Path(path)
        self.max_expansion, self.small_bytes = max_expansion, small_bytes
        self.what = what
        if not self.path.is_file():
            raise FileNotFoundError(f"{what} {self.path} does not exist")
        if not zipfile.is_zipfile(self.path):
            raise self.error("is not a zip/npz archive")
        try:
            self.zf = zipfile.ZipFile(self.path)
        except _DAMAGED as err:
            raise self.error(f"is damaged ({type(err).__name__}: {err})") from None
        try:
            self.headers = self._check_headers(members, set(extra), set(required), max_bytes, kinds)
            if check is not None:
                try:
                    check(self.headers)
                except ValueError as err:
                    raise self.error(str(err)) from None
        except BaseException:
            self.zf.close()
            raise

    def error(self, why: str) -> ArrayFileError:
        return ArrayFileError(f"{self.what} {self.path} {why}")

    def _check_headers(
        self,
        members: Collection[str] | None,
        extra: set[str],
        required: set[str],
        max_bytes: int,
        kinds: str,
    ) -> dict[str, Header]:
        infos = self.zf.infolist()
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):
            raise self.error("holds the same member twice")
        unknown = [
            n
            for n in names
            if n not in extra
            and not (n.endswith(".npy") and (members is None or n[:-4] in members))
        ]
        if unknown:
            allowed = sorted(extra | {f"{m}.npy" for m in members or ()})
            raise self.error(
                f"holds unknown member(s) {sorted(unknown)[:5]} (allowed: "
                f"{allowed if members is not None else 'any *.npy'})"
            )
        arrays = {n[:-4] for n in names if n.endswith(".npy") and n not in extra}
        missing = sorted(required - arrays - {n for n in names if n in extra})
        if missing:
            raise self.error(f"lacks {', '.join(map(repr, missing))} (a required member)")
        headers: dict[str, Header] = {}
        total = 0
        for info in infos:
            if info.filename in extra:
                continue
            name = info.filename[:-4]
            shape, dtype, offset = self._header(info)
            if dtype.hasobject or dtype.kind not in kinds:
                raise self.error(
                    f"array {name!r}: dtype {dtype} is not allowed (data only: "
                    f"kinds {kinds!r}, no objects)"
                )
            if any(not isinstance(d, int) or d < 0 for d in shape):
                raise self.error(f"array {name!r}: shape {shape} is not a valid shape")
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes + offset > info.file_size:
                raise self.error(
                    f"array {name!r}: its header declares shape {shape} of {dtype} "
                    f"({nbytes} bytes) but the member holds {info.file_size} bytes"
                )
            total += nbytes
            if total > max_bytes:
                raise self.error(
                    f"array {name!r}: the arrays exceed the limit of {max_bytes} bytes"
                )
            headers[name] = (shape, dtype)
        on_disk = self.path.stat().st_size
        if total > self.small_bytes and total > self.max_expansion * on_disk:
            raise self.error(
                f"would expand from {on_disk} bytes on disk to {total} bytes of arrays "
                f"(more than {self.max_expansion:g}x): refused as a zip bomb"
            )
        return headers

    def _header(self, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype, int]:
        name = info.filename[:-4]
        try:
            with self.zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(
                        fh, max_header_size=MAX_HEADER_BYTES
                    )
                elif version in ((2, 0), (3, 0)):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(
                        fh, max_header_size=MAX_HEADER_BYTES
                    )
                else:
                    raise ValueError(f"unsupported .npy version {version}")
                return tuple(shape), dtype, fh.tell()
        except (ValueError, TypeError, SyntaxError) as err:
            raise self.error(f"array {name!r}: not a valid .npy header ({err})") from None
        except _DAMAGED as err:
            raise self.error(
                f"is damaged at array {name!r} ({type(err).__name__}: {err})"
            ) from None

    def read(self, name: str) -> np.ndarray:
        """The array ``name`` (its header was checked when the file was opened)."""
        if name not in self.headers:
            raise self.error(f"lacks the array {name!r}")
        try:
            with self.zf.open(f"{name}.npy") as fh, io.BufferedReader(fh) as buffered:
                array = np.lib.format.read_array(
                    buffered, allow_pickle=False, max_header_size=MAX_HEADER_BYTES
                )
                if buffered.read(1):
                    raise ValueError("bytes after the array")
        except ValueError as err:
            raise self.error(f"array {name!r}: {err}") from None
        except _DAMAGED as err:
            raise self.error(
                f"is damaged at array {name!r} ({type(err).__name__}: {err})"
            ) from None
        return array

    def read_all(self) -> dict[str, np.ndarray]:
        return {name: self.read(name) for name in self.headers}

    def close(self) -> None:
        self.zf.close()

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def nonfinite_arrays(
    arrays: dict[str, np.ndarray], names: Collection[str] | None = None
) -> list[str]:
    """The names of the float arrays among ``names`` (default all) that hold NaN or ±inf."""
    bad = []
    for name, array in arrays.items():
        if names is not None and name not in names:
            continue
        if array.dtype.kind in "fc" and array.size and not np.isfinite(array).all():
            bad.append(name)
    return bad
