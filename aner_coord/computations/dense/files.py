"""Files a user names for `predict` (a model, feature rows), read without trusting them.

- `read_regular(path, limit)`: the bytes of a regular file of at most `limit` bytes. The
  file is opened without blocking (a FIFO with no writer does not hang the open), checked
  with `fstat` on the open descriptor (a FIFO, a device, a socket or a directory is refused
  at once; `stat` says 0 bytes for them, so the size is never trusted alone) and read in
  bounded pieces, so `/dev/zero` or a file that grows cannot take the memory.
- `npz_arrays(data, where, limit)`: the arrays of an `.npz` archive, every member checked
  before it is decompressed or allocated: a `.npy` member of a plain numeric or string
  dtype (never an object array: no pickles), stored or deflated, not encrypted, whose
  declared shape matches the bytes it holds (a header that claims 10**12 values is refused
  before anything that size is allocated).

Every refusal is an `UnsafeFile` whose message is one line naming the file.
"""

from __future__ import annotations

import io
import math
import os
import stat
import zipfile
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

PIECE = 1 << 20


class UnsafeFile(ValueError):
    """A file that cannot be used as given; the message names it, in one line."""


def read_regular(path: str, limit: int, where: str) -> bytes:
    """The bytes of the regular file at `path` (at most `limit`); `where` names it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafeFile(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{where}: not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise UnsafeFile(f"{where}: {info.st_size:,} bytes; the limit is {limit:,}")
        pieces: list[bytes] = []
        size = 0
        while piece := os.read(fd, PIECE):
            size += len(piece)
            if size > limit:
                raise UnsafeFile(f"{where}: more than {limit:,} bytes (it grew while read)")
            pieces.append(piece)
        return b"".join(pieces)
    except OSError as exc:
        raise UnsafeFile(f"{where}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def npz_arrays(data: bytes, where: str, limit: int) -> dict[str, npt.NDArray[Any]]:
    """Every `.npy` member of the archive `data`, by name without `.npy` (see the module
    docstring for what is checked); a member larger than `limit` bytes is refused."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        raise UnsafeFile(f"{where}: not an NPZ archive ({exc})") from None
    arrays: dict[str, npt.NDArray[Any]] = {}
    with archive:
        for info in members:
            name = info.filename
            if not name.endswith(".npy"):
                raise UnsafeFile(f"{where}: member {name[:80]!r} is not .npy data")
            if info.flag_bits & 0x1:
                raise UnsafeFile(f"{where}: member {name} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise UnsafeFile(
                    f"{where}: member {name} uses compression method {info.compress_type}; "
                    "only stored and deflated members are read"
                )
            if info.file_size > limit:
                raise UnsafeFile(f"{where}: member {name} has {info.file_size:,} bytes")
            try:
                raw = archive.read(info)
            except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError) as exc:
                raise UnsafeFile(f"{where}: member {name} cannot be read ({exc})") from None
            except (EOFError, OSError, ValueError) as exc:
                raise UnsafeFile(f"{where}: member {name} cannot be read ({exc})") from None
            arrays[name.removesuffix(".npy")] = npy_array(raw, f"{where}: {name}")
    return arrays


def npy_array(raw: bytes, where: str) -> npt.NDArray[Any]:
    """One `.npy` member: its header read and checked against its bytes before use."""
    buffer = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(buffer)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(buffer)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(buffer)
        else:
            raise ValueError(f"format version {version}")
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise UnsafeFile(f"{where}: not .npy data ({str(exc)[:120]})") from None
    if dtype.hasobject or dtype.kind not in "biufU":
        raise UnsafeFile(f"{where}: arrays of {dtype} are not read (numbers or text only)")
    count = math.prod(shape)
    held = len(raw) - buffer.tell()
    if count * dtype.itemsize != held:
        raise UnsafeFile(
            f"{where}: declares shape {shape} of {dtype} ({count * dtype.itemsize:,} bytes) "
            f"but holds {held:,} bytes"
        )
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=buffer.tell())
    out: npt.NDArray[Any] = flat.reshape(shape, order="F" if fortran else "C")
    return out
