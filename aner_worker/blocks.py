"""The worker's cache of staged data blocks, under the user's cache directory, reached so
that it cannot be turned against its owner.

A block is named by the SHA256 of its bytes and stored as a file of that name in
`$XDG_CACHE_HOME/aner/blocks` (else `~/.cache/aner/blocks`). The base directory is the
user's to choose (it may be a link to another disk); below it, `aner` and `blocks` are
aner's own and are reached only through descriptors, one `openat` at a time, never
following a symbolic link (`O_NOFOLLOW`): each must be a directory of ours (made here, or
checked with `fstat`: our uid, not a link); one with group or other permission bits is
repaired to `0700` through its descriptor (`fchmod`), never by path. A link, another
user's directory or anything else there refuses the cache (`CacheRefused`): the worker
then works without it, and blocks are sent again.

A block is read only if it is a regular file of ours (opened without following a link or
blocking on a FIFO) of exactly its expected size (`BLOCK_BYTES`, or at most that for the
last block of a data set, whose size the staging does not name), in bounded pieces, and
only if its bytes still hash to its name; anything else counts as missing and is sent
again (and the bad file is replaced by the good one). Writes are atomic (a new temporary
file `O_EXCL` in the directory's descriptor, fsync, rename over the name, fsync of the
directory), `0600`, so a worker killed mid-write leaves no half block behind a valid name
and nothing is ever written or chmod-ed through a link.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from aner_worker.files import (
    DIR_MODE,
    O_CLOEXEC,
    O_DIRECTORY,
    O_NOFOLLOW,
    FileRefused,
    open_regular,
    read_limited,
    replace_in,
)

# One block of a staged data set: a frame carries one, well inside the frame limit.
BLOCK_BYTES = 4 << 20

OWN = ("aner", "blocks")  # aner's own directories below the user's cache base
_DIR_FLAGS = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC


class CacheRefused(OSError):
    """The cache directory cannot be trusted (a link, another user's, not a directory):
    the worker goes on without a cache."""


def cache_base() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    return Path(base) if os.path.isabs(base) else Path.home() / ".cache"


def split(blob: bytes | memoryview, size: int = BLOCK_BYTES) -> list[tuple[str, memoryview]]:
    """`(sha256 hex, bytes)` of each block of `blob`, in order, the last the remainder."""
    view = memoryview(blob)
    return [
        (hashlib.sha256(view[start : start + size]).hexdigest(), view[start : start + size])
        for start in range(0, len(view), size)
    ]


def expected_sizes(blocks: Sequence[str]) -> dict[str, int | None]:
    """The size of each block of a data set staged as `blocks`: every block but the last is
    exactly BLOCK_BYTES (`split`); the last is at most that (None)."""
    sizes: dict[str, int | None] = {digest: None for digest in blocks[-1:]}
    sizes.update({digest: BLOCK_BYTES for digest in blocks[:-1]})
    return sizes


def _own_directory(parent: int, name: str, where: Path, *, create: bool) -> int | None:
    """A descriptor of aner's own directory `name` in `parent` (made if `create`), checked;
    None if absent and not to be made. CacheRefused if it cannot be trusted."""
    for _attempt in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            break
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):  # made meanwhile: open what stands
                os.mkdir(name, DIR_MODE, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise CacheRefused(
                    exc.errno, f"{where} is a symbolic link or not a directory: not used"
                ) from None
            raise
    else:
        raise CacheRefused(errno.ENOENT, f"{where} keeps vanishing: not used")
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise CacheRefused(errno.EPERM, f"{where} belongs to uid {info.st_uid}: not used")
        if info.st_mode & 0o077:
            os.fchmod(fd, DIR_MODE)  # ours: repaired through the descriptor, never a link
    except BaseException:
        os.close(fd)
        raise
    return fd


class BlockCache:
    def __init__(self, root: Path | None = None) -> None:
        """The cache under `root` (a cache base, as `$XDG_CACHE_HOME` is), or the user's."""
        self.base = root if root is not None else cache_base()
        self.root = self.base.joinpath(*OWN)

    @contextlib.contextmanager
    def _directory(self, *, create: bool) -> Iterator[int | None]:
        """A checked descriptor of the blocks directory (None if it does not exist and
        `create` is false), reached from the base without following a link."""
        if create:
            self.base.mkdir(parents=True, exist_ok=True)  # the user's own, as the umask says
        try:
            fd: int | None = os.open(self.base, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        where = self.base
        try:
            for name in OWN:
                where = where / name
                assert fd is not None
                child = _own_directory(fd, name, where, create=create)
                os.close(fd)
                fd = child
                if fd is None:
                    break
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def get(self, digest: str, size: int | None = None) -> bytes | None:
        """The block's bytes if cached and intact: a regular file of ours of exactly `size`
        bytes (at most BLOCK_BYTES if None) that hashes to `digest`; else None."""
        if not _is_digest(digest):
            return None
        try:
            with self._directory(create=False) as directory:
                if directory is None:
                    return None
                return self._read(directory, digest, size)
        except (OSError, FileRefused):
            return None

    def _read(self, directory: int, digest: str, size: int | None) -> bytes | None:
        fd, info = open_regular(digest, dir_fd=directory)
        try:
            wrong = (
                info.st_size != size if size is not None else not 0 < info.st_size <= BLOCK_BYTES
            )
            if info.st_uid != os.geteuid() or wrong:
                return None
            data = read_limited(fd, info.st_size, size=info.st_size)
        finally:
            os.close(fd)
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def put(self, digest: str, data: bytes) -> None:
        """Store a block (OSError, CacheRefused included, if it cannot be)."""
        if not _is_digest(digest):
            raise CacheRefused(errno.EINVAL, f"{digest!r} is not a block name")
        with self._directory(create=True) as directory:
            assert directory is not None
            replace_in(directory, digest, data)


def _is_digest(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)
