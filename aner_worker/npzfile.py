"""Files a user names (training data, feature rows, a model), read without trusting them.

- `read_user_file(path, limit, where)`: the bytes of a regular file of at most `limit` bytes,
  through `files.read_regular` (the one reader of untrusted files): opened without blocking
  (a FIFO with no writer does not hang the open), checked with `fstat` on the open
  descriptor (a FIFO, a device, a socket or a directory is refused at once; `stat` says 0
  bytes for them, so a size is never trusted alone) and read in bounded pieces, so
  `/dev/zero` or a file that grows cannot take the memory. A symbolic link the user names is
  followed (their data may well be one); what it leads to must be a regular file.
- `npz_arrays(data, where, limit, max_values)`: the arrays of an `.npz` archive, every member
  checked before it is decompressed or allocated: a `.npy` member (its header read from the
  member's stream: `numpy.lib.format.read_magic` and `read_array_header_1_0/2_0`) of a plain
  numeric or string dtype (never an object array: no pickles), stored or deflated, not
  encrypted, whose declared shape and dtype fit the limits (at most `max_values` values)
  and match the size the zip entry declares; the sizes the entries declare add up to at
  most `limit` bytes, checked before any member is read, so an archive of many members
  each within the limit cannot inflate past it together. Only then is the member
  read, never past its declared size (a zip bomb stops there), and its bytes must be exactly
  what the header promised.

Every refusal is an `UnsafeFile` whose message is one line naming the file. numpy is
imported here, so this module is not for the light commands (`status`, `cancel`).
"""

from __future__ import annotations

import io
import math
import zipfile
import zlib
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from aner_worker.files import FileRefused, read_regular

# Bytes of a `.npy` header that are read before it is judged (numpy's own cap is 10,000
# for a version 1 header; a version 2 header may announce up to 4 GiB of text).
# The bytes a user's data file (training rows, predict's rows) may have before it is parsed.
MAX_FILE_BYTES = 2 << 30
MAX_NPY_HEADER = 1 << 16


class UnsafeFile(ValueError):
    """A file that cannot be used as given; the message names it, in one line."""


def read_user_file(path: str, limit: int, where: str) -> bytes:
    """The bytes of the regular file at `path` (at most `limit`); `where` names it."""
    try:
        return read_regular(path, limit, follow=True)
    except FileRefused as exc:
        raise UnsafeFile(f"{where}: cannot be read: it is {exc}") from None
    except OSError as exc:
        raise UnsafeFile(f"{where}: cannot read: {exc.strerror or exc}") from None


def npz_arrays(
    data: bytes, where: str, limit: int, max_values: int | None = None
) -> dict[str, npt.NDArray[Any]]:
    """Every `.npy` member of the archive `data`, by name without `.npy` (see the module
    docstring for what is checked); members of more than `limit` bytes in all, or one of
    more than `max_values` values, are refused before any is decompressed."""

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        raise UnsafeFile(f"{where}: not an NPZ archive ({_short(exc)})") from None
    arrays: dict[str, npt.NDArray[Any]] = {}
    with archive:
        total = sum(info.file_size for info in members)
        if total > limit:
            raise UnsafeFile(
                f"{where}: its {len(members):,} members hold {total:,} bytes in all; the "
                f"limit is {limit:,}"
            )
        for info in members:
            name = info.filename
            _check_entry(info, where)
            label = f"{where}: {name}"
            try:
                with archive.open(info) as stream:
                    arrays[name.removesuffix(".npy")] = _member(
                        stream, info.file_size, label, limit, max_values
                    )
            except UnsafeFile:
                raise
            except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError) as exc:
                raise UnsafeFile(f"{label} cannot be read ({_short(exc)})") from None
            except (EOFError, OSError, ValueError) as exc:
                raise UnsafeFile(f"{label} cannot be read ({_short(exc)})") from None
    return arrays


def _check_entry(info: zipfile.ZipInfo, where: str) -> None:
    name = info.filename
    if not name.endswith(".npy"):
        raise UnsafeFile(f"{where}: member {name[:80]!r} is not .npy data")
    if info.flag_bits & 0x1:
        raise UnsafeFile(f"{where}: member {name[:80]} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise UnsafeFile(
            f"{where}: member {name[:80]} uses compression method {info.compress_type}; "
            "only stored and deflated members are read"
        )


def _member(
    stream: IO[bytes], declared: int, where: str, limit: int, max_values: int | None
) -> npt.NDArray[Any]:
    """One `.npy` member, its header read from the stream and checked before the rest."""
    header = _BoundedReader(stream, MAX_NPY_HEADER)
    try:
        version = np.lib.format.read_magic(header)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(header)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(header)
        else:
            raise ValueError(f"format version {version}")
    except (ValueError, SyntaxError, TypeError, EOFError, OverflowError) as exc:
        raise UnsafeFile(f"{where}: not .npy data ({_short(exc)})") from None
    if dtype.hasobject or dtype.kind not in "biufUS":
        raise UnsafeFile(f"{where}: arrays of {dtype} are not read (numbers or text only)")
    if any(d < 0 for d in shape):
        raise UnsafeFile(f"{where}: declares the impossible shape {shape}")
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if max_values is not None and count > max_values:
        raise UnsafeFile(
            f"{where}: declares shape {shape}, {count:,} values; the limit is {max_values:,}"
        )
    held = declared - header.consumed
    if nbytes > limit or nbytes != held:
        raise UnsafeFile(
            f"{where}: declares shape {shape} of {dtype} ({nbytes:,} bytes) "
            f"but holds {held:,} bytes"
        )
    raw = stream.read(nbytes + 1)
    if len(raw) != nbytes:
        raise UnsafeFile(f"{where}: holds {len(raw):,} bytes where its header says {nbytes:,}")
    flat = np.frombuffer(raw, dtype=dtype, count=count)
    out: npt.NDArray[Any] = flat.reshape(shape, order="F" if fortran else "C")
    return out


class _BoundedReader:
    """The member stream as numpy's header readers see it: `read(n)` of at most `bound`
    bytes in all (a header that announces megabytes of text is refused, not read)."""

    def __init__(self, stream: IO[bytes], bound: int) -> None:
        self.stream = stream
        self.bound = bound
        self.consumed = 0

    def read(self, size: int = -1) -> bytes:
        if size < 0 or self.consumed + size > self.bound:
            raise ValueError(f"a header of more than {self.bound:,} bytes")
        data = self.stream.read(size)
        self.consumed += len(data)
        return data


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."
