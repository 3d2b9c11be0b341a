"""The lock file: held with `flock` by the one live coordinator of a job (docs/contracts.md, section
7), with its pid inside for people, and removed when it lets go. A monitor that can take the
lock knows the coordinator is gone.

`flock` is POSIX: where `fcntl` is missing (Windows) this module still imports, so that
local computation works, and taking or testing a lock is refused in one line (see
`aner_coord.posix`; admission refuses a job directory there before anything is made).
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType

from aner_coord.errors import RequestError
from aner_coord.jobdir.directory import LOCK, JobDir, PathLike, opened
from aner_coord.posix import require
from aner_worker.files import FileRefused, open_regular


def _fcntl() -> ModuleType:
    require("job directories (lock files held with flock)")
    import fcntl

    return fcntl


class JobLock:
    """The coordinator's `flock` on the job's lock file, held for its whole life."""

    def __init__(self, job: JobDir | PathLike) -> None:
        if isinstance(job, JobDir):
            self._dir, self._own_dir = job, False
        else:
            self._dir, self._own_dir = JobDir.open(job, own=True), True
        self.path = self._dir.path / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        fcntl = _fcntl()
        # O_CLOEXEC: worker processes never inherit the lock. O_NOFOLLOW and a regular-file
        # check: a planted link never makes us truncate another file.
        fd = self._dir.open_file(LOCK, os.O_RDWR | os.O_CREAT, action="lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RequestError(
                f"job {self._dir.path} already has a live coordinator (its lock is held)"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            os.close(fd)
            raise self._dir.write_error("write", LOCK, exc) from None
        self._fd = fd

    def release(self) -> None:
        # Unlink before closing: while we still hold the lock nobody else can be relying on
        # this inode, and a finished job directory keeps no stale lock file.
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._dir.unlink(LOCK)
            os.close(self._fd)
            self._fd = None
        if self._own_dir:
            self._dir.close()
            self._own_dir = False


def lock_is_held(job: JobDir | PathLike) -> bool:
    """True if some process holds the job's lock (a live coordinator).

    Only a regular file can be a coordinator's lock (it makes it so): anything else there,
    a link, a FIFO, a directory or a socket, is nobody's lock, and it is neither followed
    nor waited on (the open never blocks). A lock file we may not open is refused
    (JobFileError): whether a coordinator lives cannot be known then."""
    fcntl = _fcntl()
    with opened(job) as directory:
        try:
            fd, _info = open_regular(LOCK, dir_fd=directory.fileno())
        except (FileNotFoundError, FileRefused):
            return False
        except OSError as exc:
            raise directory.read_error(LOCK, exc.strerror or str(exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
