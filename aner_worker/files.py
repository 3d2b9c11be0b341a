"""Files read and written so that a file cannot be turned against its reader.

Reading (`open_regular`, `read_limited`): a file is opened without following a symbolic
link (`O_NOFOLLOW`) and without blocking (`O_NONBLOCK`: a FIFO with no writer would
otherwise hold `open` forever), then checked on the open descriptor: `fstat` must say a
regular file, and its size must be within the caller's limit before a byte is read. Bytes
are read in bounded pieces and never past that size, so a file that grows while it is read
or holds more than `fstat` vouches for (`/proc/self/pagemap` says 0 bytes and reads
gigabytes) is refused within one piece past that size and cannot grow the reader. `stat`
of a path is never trusted: a FIFO or a device reports size 0. Anything refused raises
`FileRefused`, whose text says what the file is ("a FIFO, not a regular file", "larger
than the limit of ..."); absence stays `FileNotFoundError` and other system errors stay
`OSError`, for the caller to word.

Writing (`replace_in`, the one atomic writer): a file replaced whole, owner-only, so that a
reader (or a crash) sees the old content or the new, never a part: temporary file in the
same directory, fsync, rename, fsync of the directory, all through a held directory
descriptor, so that a swapped directory cannot redirect it. The job directory's files, the
block cache of a worker and (by `write_atomically`, given a path) the configuration
registry are written by it.

This module is shared by the worker and the coordinator (the coordinator may import the
worker's modules, never the reverse).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

# Pieces in which files are read: small enough that a refused file costs little memory.
READ_PIECE = 1 << 20

# Absent where the platform lacks them (not POSIX): the checks on the descriptor remain.
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

# What aner creates is its owner's alone: files 0600, directories 0700.
FILE_MODE = 0o600
DIR_MODE = 0o700


class FileRefused(Exception):
    """A file that must not be read: not a regular file, a link, or over its size limit.
    The text completes "PATH is ..."."""


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO")."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def open_regular(
    name: str | os.PathLike[str], *, dir_fd: int | None = None, follow: bool = False
) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file `name` (relative to `dir_fd` if given),
    and its `fstat`. Never blocks, never follows a final symbolic link unless `follow`.
    Raises FileRefused for anything that is not a regular file, FileNotFoundError if absent,
    OSError otherwise."""
    flags = os.O_RDONLY | O_NONBLOCK | O_CLOEXEC | (0 if follow else O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except ValueError:  # a NUL in the name, which no file's name can hold
        raise FileRefused("a name with a NUL character, which no file has") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise FileRefused("a symbolic link, not a regular file") from None
        if exc.errno == errno.ENXIO:  # a socket (or a device without its driver)
            raise FileRefused("a socket or a device, not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{kind_of(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def stat_regular(name: str | os.PathLike[str], *, follow: bool = True) -> os.stat_result:
    """The `fstat` of the regular file `name`, taken on a descriptor (`open_regular`), so a
    FIFO, a device or a directory is refused (FileRefused) at once, before anything trusts
    its size."""
    fd, info = open_regular(name, follow=follow)
    os.close(fd)
    return info


def too_large(size: int, limit: int) -> FileRefused:
    return FileRefused(f"{size:,} bytes, over the limit of {limit:,} bytes for this file")


def read_limited(fd: int, limit: int, *, size: int | None = None) -> bytes:
    """Every byte of the regular file open at `fd`, from its current offset, if there are at
    most `limit` and no more than `fstat` says; FileRefused otherwise (checked on `fstat`
    before reading, and again while reading, in pieces of at most READ_PIECE)."""
    known = os.fstat(fd).st_size if size is None else size
    if known > limit:
        raise too_large(known, limit)
    pieces: list[bytes] = []
    total = 0
    while True:
        piece = os.read(fd, min(READ_PIECE, limit + 1 - total))
        if not piece:
            return b"".join(pieces)
        total += len(piece)
        if total > known:
            # It grew while we read, or is no file whose size the system vouches for.
            raise FileRefused(
                f"a file that holds more than the {known:,} bytes its size says (it grew "
                "while it was read, or its size is not its content's, as under /proc)"
            )
        pieces.append(piece)


def read_regular(
    name: str | os.PathLike[str], limit: int, *, dir_fd: int | None = None, follow: bool = False
) -> bytes:
    """`open_regular` then `read_limited`: the whole file, bounded."""
    fd, info = open_regular(name, dir_fd=dir_fd, follow=follow)
    try:
        return read_limited(fd, limit, size=info.st_size)
    finally:
        os.close(fd)


def replace_in(directory: int, name: str, data: bytes) -> None:
    """Replace `name` in the directory open at `directory` with `data`, owner-only: a
    temporary file beside it is written, fsynced and renamed over it, then the directory is
    fsynced. A failure (OSError) leaves `name` as it was and no temporary file behind."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK
    fd = os.open(tmp, flags, FILE_MODE, dir_fd=directory)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    os.fsync(directory)


def write_atomically(path: Path, data: bytes) -> None:
    """`replace_in` for a path: its directory is opened for the replacement."""
    directory = os.open(path.parent, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try:
        replace_in(directory, path.name, data)
    finally:
        os.close(directory)
