"""An open job directory (`JobDir`): every file of a job is written and read through one
descriptor of its directory, never by path after `mkdir`.

Every file is reached through a descriptor of the job directory (`JobDir`), never by path
after `mkdir`: `JobDir.create()` makes the directory `0700`, opens it with `O_DIRECTORY |
O_NOFOLLOW` and checks by `fstat` that it is the one it made (same inode, ours, empty). Another
user who can write to the parent and swaps the new directory for a symbolic link or for a
directory of theirs then makes the run fail cleanly instead of making aner write elsewhere.
Files are opened relative to that descriptor with `O_NOFOLLOW | O_CLOEXEC` (and `O_EXCL`
where new), mode `0600`.

Every file is written whole or not at all (temp file in the directory, fsync, rename, fsync
the directory), so a reader never sees a partial file. A write that fails (a full disk, the
directory deleted under a running job) raises `JobDirError`, one line naming the file and
the reason, exit code 3. A directory whose run could not start is removed (`JobDir.remove`).

Every file is read through the same descriptor, and only if it is what aner wrote there: it
is opened without following a link and without blocking (a FIFO never holds a reader), the
open descriptor must be a regular file, and its size is checked (`fstat`, then again while
reading in bounded pieces) against a hard limit for its kind (`READ_LIMITS`) before it is
read. A file that fails this, or that the system will not let us read, raises
`JobFileError`: one line naming the file and what it is, exit code 2. Only absence stays a
`FileNotFoundError`, which monitors need to tell apart.

"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import EXIT_FAILED, AnerError, RequestError
from aner_coord.jobdir.status import StatusSnapshot, decode_status
from aner_worker.files import (
    DIR_MODE,
    FILE_MODE,
    O_CLOEXEC,
    O_NOFOLLOW,
    O_NONBLOCK,
    FileRefused,
    open_regular,
    read_limited,
    replace_in,
)

MANIFEST = "run-manifest.json"


STATUS = "status.json"


RESULT = "result.json"


ERROR_DETAIL = "error-detail.txt"  # a failure's whole message, where status.json's is cut


LOCK = "coordinator.lock"


LOG = "coordinator.log"


CANCEL_REQUEST = "cancel-request"


REQUEST = "request.json"


LEDGER = "ledger"


MODEL = "model.npz"


# A training's last checkpoint (`aner_coord.computations.dense.checkpoint`); its own bound is
# the run's (`Checkpoints.checkpoint_limit`, from the model's shapes), this one is for any
# reader.
CHECKPOINT = "checkpoint.npz"


# Where the job's time went (`aner_coord.jobdir.timeline`), bounded in size: past
# TIMELINE_MAX_BYTES nothing more is written.
TIMELINE = "timeline.jsonl"
TIMELINE_MAX_BYTES = 64 << 20


# The most bytes a job file of each kind may have to be read: far above what aner writes
# (a status of 32 workers is a few KiB, a ledger of a million chunks some 50 MiB), far below
# what would hurt the reader. A file over its limit is refused, never read.
READ_LIMITS = {
    STATUS: 16 << 20,
    MANIFEST: 16 << 20,
    REQUEST: 1 << 20,
    RESULT: 64 << 20,
    LEDGER: 1 << 30,  # read in pieces, never whole (`aner_coord.jobdir.ledger`)
    MODEL: 256 << 20,
    CHECKPOINT: 1 << 30,
    TIMELINE: TIMELINE_MAX_BYTES + (1 << 20),  # its bound, a line past it, `truncated`
    LOCK: 4096,
    CANCEL_REQUEST: 4096,
}
DEFAULT_READ_LIMIT = 16 << 20


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


FILE_FLAGS = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK  # never a link, never a wait


log = logging.getLogger("aner.jobdir")
# A replacement's temporary file (`aner_worker.files.replace_in`): `.NAME.<12 hex>.tmp`.
_TEMPORARY = re.compile(r"\.(.+)\.[0-9a-f]{12}\.tmp")


PathLike = str | os.PathLike[str]


class JobDirError(AnerError):
    """A job file could not be written (full disk, directory deleted or replaced...): the job
    fails (exit 3). The message names the file and the operating system's reason."""

    exit_code = EXIT_FAILED


class JobFileError(RequestError):
    """A job file that cannot be read as one: not a regular file (a FIFO, a link, a
    directory...), over its size limit, unreadable or malformed. One line naming the file;
    exit 2 (the job directory is not one this command can use as it is)."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_new_output(path: PathLike) -> Path:
    """Validate a requested output directory without creating anything (RequestError, exit 2)."""
    target = Path(path)
    try:
        if os.path.lexists(target):
            if target.is_symlink():
                what = "a symbolic link"
            elif target.is_dir():
                what = "an existing directory"
            else:
                what = "an existing file"
            raise RequestError(f"output {target} is {what}: choose a path that does not exist yet")
        parent = target.absolute().parent
        if not parent.is_dir():
            raise RequestError(
                f"output's parent directory {parent} does not exist: create it first"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise RequestError(f"cannot create {target}: its parent {parent} is not writable")
    except OSError as exc:
        raise RequestError(f"cannot use output {target}: {_reason(exc)}") from None
    return target


def _make_dir(parent_fd: int, name: str) -> os.stat_result:
    """mkdir, and what was made. A function of its own so that a test can act right after it,
    at the worst moment for a swap."""
    os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
    return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)


class JobDir:
    """An open job directory. Every file of the job is written and read through its
    descriptor; `path` is only for messages and for tools that need a name.

    Writes raise JobDirError; reads raise OSError as the system does (FileNotFoundError
    means the file is not there yet, which monitors need to tell apart)."""

    def __init__(self, path: Path, fd: int, *, parent_fd: int | None = None) -> None:
        self.path = path
        self._fd: int | None = fd
        self._parent_fd = parent_fd  # only for a directory we created: to remove it
        self._ino = os.fstat(fd).st_ino
        self._made: set[str] = set()  # files this object created, removed by remove()

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: PathLike) -> JobDir:
        """Make a new job directory (0700) and open it, checking it is the one we made.

        RequestError (exit 2) when the path cannot be created; JobDirError (exit 3) when
        what stands at the path right after mkdir is not what we made."""
        target = check_new_output(path)
        parent = target.absolute().parent
        try:
            parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise RequestError(f"cannot create output {target}: {_reason(exc)}") from None
        try:
            return cls._create_in(target, parent_fd)
        except BaseException:
            os.close(parent_fd)
            raise

    @classmethod
    def _create_in(cls, target: Path, parent_fd: int) -> JobDir:
        name = target.name
        try:
            made = _make_dir(parent_fd, name)
        except FileExistsError:
            raise RequestError(f"output {target} appeared meanwhile: choose another path") from None
        except OSError as exc:
            raise RequestError(
                f"cannot create output {target}: {_reason(exc)}: choose a path in a directory "
                "where you can create files"
            ) from None
        swapped = (
            f"output {target} was replaced right after aner created it (%s): another user "
            f"can write to {target.absolute().parent}; use a directory only you can write to"
        )
        if not stat.S_ISDIR(made.st_mode) or made.st_uid != os.geteuid():
            raise JobDirError(swapped % "not our directory")
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise JobDirError(swapped % _reason(exc)) from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
                raise JobDirError(swapped % "another directory stands there")
            if now.st_uid != os.geteuid() or os.listdir(fd):
                raise JobDirError(swapped % "not our empty directory")
            os.fchmod(fd, DIR_MODE)  # whatever the umask said
        except OSError as exc:
            os.close(fd)
            raise JobDirError(f"cannot set up output {target}: {_reason(exc)}") from None
        except BaseException:
            os.close(fd)
            raise
        return cls(target, fd, parent_fd=parent_fd)

    @classmethod
    def open(cls, path: PathLike, *, own: bool = False) -> JobDir:
        """An existing directory, not through a symbolic link. With `own`, refuse one that
        belongs to another user (for writers: cancel, lock). Raises OSError as the system does
        (FileNotFoundError, NotADirectoryError, ELOOP for a symlink) or JobDirError."""
        target = Path(path)
        fd = os.open(target, DIR_FLAGS)
        if own:
            uid = os.fstat(fd).st_uid
            if uid != os.geteuid():
                os.close(fd)
                raise JobDirError(f"job directory {target} belongs to another user (uid {uid})")
        return cls(target, fd)

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"job directory {self.path} is closed")
        return self._fd

    def close(self) -> None:
        for fd in (self._fd, self._parent_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._parent_fd = None

    def __enter__(self) -> JobDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def watch_path(self) -> str:
        """A name for inotify that follows this directory wherever it is renamed."""
        proc = f"/proc/self/fd/{self.fileno()}"
        return proc if os.path.isdir(proc) else str(self.path)

    def gone(self) -> bool:
        """True once the directory has been deleted (its link count drops to zero)."""
        try:
            return os.fstat(self.fileno()).st_nlink == 0
        except OSError:
            return True

    # -- writing ---------------------------------------------------------------------------
    def write_error(self, action: str, name: str, exc: OSError) -> JobDirError:
        """The one-line error for a failed operation on `name`."""
        where = self.path / name
        if exc.errno == errno.ENOENT and self.gone():
            return JobDirError(f"cannot {action} {where}: the job directory was deleted")
        return JobDirError(f"cannot {action} {where}: {_reason(exc)}")

    def open_file(self, name: str, flags: int, *, action: str = "open") -> int:
        """A descriptor of `name` in this directory: no symlink followed, not inherited,
        0600 if created. Raises JobDirError."""
        try:
            fd = os.open(name, flags | FILE_FLAGS, FILE_MODE, dir_fd=self.fileno())
        except OSError as exc:
            raise self.write_error(action, name, exc) from None
        if flags & os.O_CREAT:
            self._made.add(name)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise JobDirError(f"cannot {action} {self.path / name}: not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_bytes(self, name: str, data: bytes) -> None:
        """Replace `name` atomically (`replace_in`: temp file, fsync, rename, fsync the
        directory)."""
        try:
            replace_in(self.fileno(), name, data)
        except OSError as exc:
            raise self.write_error("write", name, exc) from None
        self._made.add(name)

    def write_json(self, name: str, obj: Any) -> None:
        self.write_bytes(name, msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")

    def open_log(self, *, append: bool = False) -> int:
        """A new `coordinator.log` for appending (O_EXCL: never someone else's file), or with
        `append` the one a resumed job already has (still never through a symlink)."""
        exclusive = 0 if append else os.O_EXCL
        return self.open_file(LOG, os.O_WRONLY | os.O_CREAT | exclusive | os.O_APPEND)

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fileno())

    def sweep_temporaries(self) -> list[str]:
        """Remove what replacements cut short left behind (a coordinator killed while it
        wrote a checkpoint leaves `.checkpoint.npz.<12 hex>.tmp`, megabytes each): regular
        files named as `aner_worker.files.replace_in` names them, except a cancel request's
        (`aner parallel cancel` writes that one without the job's lock). Only the holder of
        the job's lock calls this, so no live write of the job's own is among them."""
        fd = self.fileno()
        try:
            names = os.listdir(fd)
        except OSError:
            return []
        removed = []
        for name in sorted(names):
            found = _TEMPORARY.fullmatch(name)
            if found is None or found.group(1) == CANCEL_REQUEST:
                continue
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue
                os.unlink(name, dir_fd=fd)
            except OSError:
                continue
            removed.append(name)
        return removed

    def remove(self) -> None:
        """Undo `create()` for a run that could not start: remove the files this object
        made and the directory itself (if it is still ours and then empty), and close."""
        if self._fd is not None:
            for name in sorted(self._made):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._fd)
            parent_fd, name = self._parent_fd, self.path.name
            if parent_fd is not None:
                with contextlib.suppress(OSError):
                    here = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                    if here.st_ino == self._ino and stat.S_ISDIR(here.st_mode):
                        os.rmdir(name, dir_fd=parent_fd)
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def read_error(self, name: str, why: str) -> JobFileError:
        return JobFileError(f"{self.path / name} cannot be read: {why}")

    def open_reader(self, name: str, limit: int | None = None) -> tuple[int, int]:
        """A read-only descriptor of the regular file `name` and its size, checked against
        `limit` (default: READ_LIMITS for its kind). FileNotFoundError if absent;
        JobFileError for anything else that keeps it from being read."""
        limit = READ_LIMITS.get(name, DEFAULT_READ_LIMIT) if limit is None else limit
        try:
            fd, info = open_regular(name, dir_fd=self.fileno())
        except FileRefused as exc:
            raise self.read_error(name, f"it is {exc}") from None
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self.read_error(name, _reason(exc)) from None
        if info.st_size > limit:
            os.close(fd)
            raise self.read_error(
                name, f"it has {info.st_size:,} bytes; the limit is {limit:,}"
            ) from None
        return fd, info.st_size

    def read_bytes(self, name: str, limit: int | None = None) -> bytes:
        """The whole file `name`, read as `open_reader` says (bounded, never blocking)."""
        limit = READ_LIMITS.get(name, DEFAULT_READ_LIMIT) if limit is None else limit
        fd, size = self.open_reader(name, limit)
        try:
            return read_limited(fd, limit, size=size)
        except FileRefused as exc:
            raise self.read_error(name, f"it has {exc}") from None
        except OSError as exc:
            raise self.read_error(name, _reason(exc)) from None
        finally:
            os.close(fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fileno(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True


@contextlib.contextmanager
def opened(job: JobDir | PathLike, *, own: bool = False) -> Iterator[JobDir]:
    """The JobDir itself, or one opened for the duration (closed afterwards)."""
    if isinstance(job, JobDir):
        yield job
        return
    with JobDir.open(job, own=own) as opened:
        yield opened


def read_json(job: JobDir | PathLike, name: str) -> Any:
    """The JSON document `name`; JobFileError if it is not one (or nests too deep)."""
    with opened(job) as directory:
        data = directory.read_bytes(name)
        try:
            return msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise directory.read_error(name, f"it is not JSON: {exc}") from None


def read_status(job: JobDir | PathLike) -> StatusSnapshot:
    """The last status snapshot; FileNotFoundError before the first, JobFileError for a
    file that is not a status this aner reads."""
    with opened(job) as directory:
        data = directory.read_bytes(STATUS)
        try:
            return decode_status(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise directory.read_error(
                STATUS, f"it is not a status this aner reads: {exc}"
            ) from None
