"""The lock file: held with `flock` by the one live coordinator of a job (docs/contracts.md, section
7), with its pid inside for people, and removed when it lets go. A monitor that can take the
lock knows the coordinator is gone.

`flock` is POSIX: where `fcntl` is missing (Windows) this module still imports, so that
local computation works, and taking or testing a lock is refused in one line (see
`aner_coord.posix`; admission refuses a job directory there before anything is made).
"""

from __future__ import annotations

import contextlib
import logging
import os
from types import ModuleType

from aner_coord.errors import RequestError
from aner_coord.jobdir.directory import LOCK, JobDir, PathLike, opened
from aner_coord.posix import require
from aner_worker.files import FileRefused, open_regular

log = logging.getLogger("aner.jobdir")


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
        # The job's one live coordinator from here: what a killed one left half-written goes.
        removed = self._dir.sweep_temporaries()
        if removed:
            log.info("removed what a stopped coordinator left half-written: %s", ", ".join(removed))

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


PROC_LOCKS = "/proc/locks"
_PROC_LOCKS_LIMIT = 4 << 20  # the system's lock table, read no further than this


def foreign_holder(job: JobDir | PathLike) -> str | None:
    """Why the job's lock is held by a process that is not its coordinator, or None.

    The coordinator writes its pid into the lock file as it takes the lock. Where the system
    lists the holders of `flock` locks (Linux's /proc/locks), a holder that is not that pid,
    while that pid no longer runs, is someone else (a `flock` command, a backup tool): no
    coordinator will act on the job. None when it is the coordinator, or cannot be told."""
    with opened(job) as directory:
        try:
            fd, info = open_regular(LOCK, dir_fd=directory.fileno())
        except (OSError, FileRefused):
            return None
    try:
        recorded = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open(PROC_LOCKS, "rb") as table:
            lines = table.read(_PROC_LOCKS_LIMIT).decode("ascii", "replace").splitlines()
    except OSError:
        return None
    holders = {
        fields[4]
        for fields in (line.split() for line in lines if "->" not in line)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode
    }
    if not holders or recorded in holders or not recorded.isdigit() or _runs(int(recorded)):
        return None
    others = ", ".join(sorted(holders))
    return (
        f"its lock is held by process {others}, not by its coordinator (pid {recorded}, which "
        "no longer runs): no coordinator will act on it; end that process to resume the job"
    )


def _runs(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state follows the command's parenthesised name, which may hold anything.
            return stat.read(4096).rpartition(b")")[2].split()[:1] != [b"Z"]
    except FileNotFoundError:
        return False
    except OSError:
        return True  # it is there, though we may not look
