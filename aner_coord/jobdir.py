"""The job directory of SPEC section 7: where the bytes of a job are written and read.

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

`status.json` is written by `StatusWriter` on a thread of its own, at a bounded rate and at
once on every state change, so fsync never stalls the event loop. The lock file is held with
`flock` by the one live coordinator, with its pid inside for people, and removed when it lets
go. `aner parallel cancel` asks a live coordinator to stop by writing `cancel-request`; the
coordinator notices through `cancel_requests()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import EXIT_FAILED, AnerError, RequestError
from aner_coord.status import JobState, StatusSnapshot, decode_status, encode_status

MANIFEST = "run-manifest.json"
STATUS = "status.json"
RESULT = "result.json"
LOCK = "coordinator.lock"
LOG = "coordinator.log"
CANCEL_REQUEST = "cancel-request"
STATUS_MIN_INTERVAL_S = 0.5
WATCH_TICK_MS = 1000
CANCEL_POLL_S = 0.1  # how often a running coordinator looks for `cancel-request`
FILE_MODE = 0o600
DIR_MODE = 0o700

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC

log = logging.getLogger("aner.jobdir")

PathLike = str | os.PathLike[str]


class JobDirError(AnerError):
    """A job file could not be written (full disk, directory deleted or replaced...): the job
    fails (exit 3). The message names the file and the operating system's reason."""

    exit_code = EXIT_FAILED


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


# --------------------------------------------------------------------------- creating


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


def create_job_dir(path: PathLike) -> JobDir:
    """`JobDir.create(path)`: the new job directory, open."""
    return JobDir.create(path)


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
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
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
        fd = os.open(target, _DIR_FLAGS)
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
            fd = os.open(name, flags | _FILE_FLAGS, FILE_MODE, dir_fd=self.fileno())
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
        """Replace `name` atomically: temp file, fsync, rename, fsync the directory."""
        dir_fd = self.fileno()
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, FILE_MODE, dir_fd=dir_fd
            )
        except OSError as exc:
            raise self.write_error("write", name, exc) from None
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            self._made.add(name)
            os.fsync(dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise self.write_error("write", name, exc) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise

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
    def read_bytes(self, name: str) -> bytes:
        fd = os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=self.fileno())
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fileno(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True


@contextlib.contextmanager
def _opened(job: JobDir | PathLike, *, own: bool = False) -> Iterator[JobDir]:
    """The JobDir itself, or one opened for the duration (closed afterwards)."""
    if isinstance(job, JobDir):
        yield job
        return
    with JobDir.open(job, own=own) as opened:
        yield opened


# --------------------------------------------------------------------------- path helpers


def write_atomic(path: Path, data: bytes) -> None:
    """Replace the file at `path` atomically, through a descriptor of its directory."""
    with JobDir.open(path.parent) as directory:
        directory.write_bytes(path.name, data)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


def read_json(job: JobDir | PathLike, name: str) -> Any:
    with _opened(job) as directory:
        return msgspec.json.decode(directory.read_bytes(name))


def read_status(job: JobDir | PathLike) -> StatusSnapshot:
    with _opened(job) as directory:
        return decode_status(directory.read_bytes(STATUS))


# --------------------------------------------------------------------------- status


class StatusWriter:
    """Observer that writes snapshots to `status.json` from a thread of its own.

    Calls only put the latest snapshot in a slot (older unwritten ones are dropped); the
    thread writes a new state at once and the same state at most every `min_interval_s`, so
    that a fast job does not spend its time in fsync and the event loop never waits for the
    disk. The first snapshot is written before the call returns: a job is ready only once
    its first status is on disk.

    A COMPLETED snapshot is held back until `commit_completed()`, which the job calls once
    `result.json` is on disk: a reader that sees COMPLETED always finds the result.
    `close()` (or `await aclose()` on the event loop) writes what is pending and joins the
    thread; call it before letting go of the lock. A write error (JobDirError) is passed to
    `on_error` (on the writer thread: reach the event loop with `call_soon_threadsafe`) and
    raised by the next call, `flush()` or `close()`; after it nothing more is written.
    `before_write` runs on the writer thread before each status write (the job's ledger
    makes what the status will report durable there)."""

    def __init__(
        self,
        job: JobDir | PathLike,
        *,
        min_interval_s: float = STATUS_MIN_INTERVAL_S,
        on_error: Callable[[JobDirError], None] | None = None,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(job, JobDir):
            self._dir, self._own_dir = job, False
        else:
            self._dir, self._own_dir = JobDir.open(job, own=True), True
        self._interval = min_interval_s
        self._on_error = on_error
        self._before_write = before_write
        self._cond = threading.Condition()
        self._slot: StatusSnapshot | None = None
        self._completed: StatusSnapshot | None = None
        self._writing = False
        self._closing = False
        self._flushing = 0
        self._error: JobDirError | None = None
        self._raised = False
        self._last_state: JobState | None = None
        self._last_write = 0.0
        self._started = False
        self._thread = threading.Thread(target=self._run, name="aner-status-writer", daemon=True)

    # -- the caller's side -----------------------------------------------------------------
    def __call__(self, snapshot: StatusSnapshot) -> None:
        self._raise_error()
        if snapshot.state is JobState.COMPLETED:
            with self._cond:
                self._completed = snapshot  # the latest one: its accounting is final
            return
        if not self._started:
            self._write(snapshot)
            self._started = True
            self._thread.start()
            return
        with self._cond:
            self._slot = snapshot
            self._cond.notify()

    def commit_completed(self) -> None:
        """result.json is on disk: the held COMPLETED snapshot may be written."""
        self._raise_error()
        with self._cond:
            if self._completed is not None:
                self._slot, self._completed = self._completed, None
                self._cond.notify()
        if not self._started:
            self.flush()

    def flush(self) -> None:
        """Wait until what was handed over is on disk; raise a write error if there was one."""
        with self._cond:
            if self._thread.is_alive():
                self._flushing += 1
                self._cond.notify_all()
                try:
                    self._cond.wait_for(lambda: self._error is not None or not self._busy())
                finally:
                    self._flushing -= 1
            elif self._slot is not None and self._error is None:
                pending, self._slot = self._slot, None
                self._write_or_keep(pending)
        self._raise_error()

    def close(self) -> None:
        """Write what is pending, stop the thread; raise a write error not yet raised."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        elif self._slot is not None:
            self.flush()
        if self._own_dir:
            self._dir.close()
        self._raise_error()

    async def aclose(self) -> None:
        """`close()` from the event loop: the last flush waits for the disk on a thread."""
        await asyncio.to_thread(self.close)

    def _raise_error(self) -> None:
        with self._cond:
            error = self._error if not self._raised else None
            self._raised = self._raised or error is not None
        if error is not None:
            raise error

    # -- the writer thread -----------------------------------------------------------------
    def _busy(self) -> bool:
        return self._slot is not None or self._writing

    def _due(self) -> float:
        """Seconds until the slot's snapshot may be written (0: now)."""
        assert self._slot is not None
        if self._closing or self._flushing or self._slot.state != self._last_state:
            return 0.0
        return max(0.0, self._last_write + self._interval - time.monotonic())

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._slot is None:
                    if self._closing:
                        return
                    self._cond.wait()
                    continue
                wait = self._due()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                snapshot, self._slot = self._slot, None
                self._writing = True
                self._cond.release()
                try:
                    failed = self._write_or_keep(snapshot)
                finally:
                    self._cond.acquire()
                    self._writing = False
                    self._cond.notify_all()
                if failed:
                    return

    def _write_or_keep(self, snapshot: StatusSnapshot) -> bool:
        """Write; on error keep it for the caller and report it. True if it failed."""
        try:
            self._write(snapshot)
        except JobDirError as exc:
            with self._cond:
                self._error = exc
                self._slot = None
                self._cond.notify_all()
            if self._on_error is not None:
                self._on_error(exc)
            return True
        return False

    def _write(self, snapshot: StatusSnapshot) -> None:
        if self._before_write is not None:
            self._before_write()  # the ledger: what a status reports is durable first
        self._dir.write_bytes(STATUS, encode_status(snapshot))
        self._last_state = snapshot.state
        self._last_write = time.monotonic()


# --------------------------------------------------------------------------- the lock


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
    """True if some process holds the job's lock (a live coordinator)."""
    with _opened(job) as directory:
        try:
            fd = os.open(LOCK, os.O_RDONLY | _FILE_FLAGS, dir_fd=directory.fileno())
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a planted link is nobody's lock
                return False
            raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def owner_matches(job: Path) -> bool:
    return os.stat(job).st_uid == os.getuid()


def is_job_dir(job: JobDir | PathLike) -> bool:
    try:
        with _opened(job) as directory:
            return directory.exists(MANIFEST)
    except OSError:
        return False


# --------------------------------------------------------------------------- watching


async def watch_job_dir(
    job: JobDir | PathLike, names: Collection[str], stop: asyncio.Event
) -> AsyncGenerator[None, None]:
    """Yield whenever one of `names` in the job directory changes, and at least every
    WATCH_TICK_MS, until `stop` is set or the directory is deleted.

    The tick lets callers re-check what they care about (a file's presence, the lock) even
    when no event comes: a change made before the watch was set up, or a lock released by a
    killed process. Without inotify (limits reached, odd filesystems) it degrades to polling
    on the same tick rather than failing. Given a JobDir, the watch follows that directory
    (through /proc/self/fd) even if it is renamed.
    """
    from watchfiles import awatch

    def relevant(_change: object, path: str) -> bool:
        return os.path.basename(path) in names

    where = job.watch_path if isinstance(job, JobDir) else str(job)
    try:
        changes = awatch(
            where,
            watch_filter=relevant,
            step=50,
            rust_timeout=WATCH_TICK_MS,
            yield_on_timeout=True,
            stop_event=stop,
            recursive=False,
        )
        async with contextlib.aclosing(changes):
            async for _ in changes:
                yield
                if isinstance(job, JobDir) and job.gone():
                    return
        return
    except (OSError, RuntimeError) as exc:
        if isinstance(job, JobDir) and job.gone():
            return
        log.warning("cannot watch the job directory (%s); polling instead", exc)
    while not stop.is_set():
        yield
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_TICK_MS / 1000)


@contextlib.asynccontextmanager
async def cancel_requests(job: JobDir | PathLike, cancel: asyncio.Event) -> AsyncIterator[None]:
    """While the body runs, `cancel-request` appearing in the job directory sets `cancel`.
    A deleted directory ends the watch quietly: the status writer reports that.

    It looks every CANCEL_POLL_S (one `fstatat` on the directory's descriptor) rather than
    through `watch_job_dir`: importing and starting watchfiles would cost a short job more
    than a lifetime of polls, and a tenth of a second is prompt for a cancel."""
    stop = asyncio.Event()

    async def watch(directory: JobDir) -> None:
        while not stop.is_set():
            if directory.exists(CANCEL_REQUEST):
                log.info("cancel requested through %s", CANCEL_REQUEST)
                cancel.set()
                return
            if directory.gone():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CANCEL_POLL_S)

    with _opened(job) as directory:
        watcher = asyncio.create_task(watch(directory))
        try:
            yield
        finally:
            stop.set()
            await watcher
