"""The job directory of SPEC section 7: where the bytes of a job are written and read.

Every file is written whole or not at all (temp file in the same directory, fsync, rename,
fsync the directory), so a reader never sees a partial file. `status.json` is rewritten at a
bounded rate, and immediately on every state change. The lock file is held with `flock` by
the one live coordinator, with its pid inside for people, and removed when it lets go.
`aner parallel cancel` asks a live coordinator to stop by writing `cancel-request`; the
coordinator notices through `cancel_requests()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import stat
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Collection
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_coord.status import JobState, StatusSnapshot, decode_status, encode_status

MANIFEST = "run-manifest.json"
STATUS = "status.json"
RESULT = "result.json"
LOCK = "coordinator.lock"
LOG = "coordinator.log"
CANCEL_REQUEST = "cancel-request"
STATUS_MIN_INTERVAL_S = 0.5
WATCH_TICK_MS = 1000

log = logging.getLogger("aner.jobdir")


def check_new_output(path: str | os.PathLike[str]) -> Path:
    """Validate a requested output directory without creating anything."""
    target = Path(path)
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
        raise RequestError(f"output's parent directory {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RequestError(f"cannot create {target}: its parent {parent} is not writable")
    return target


def create_job_dir(path: str | os.PathLike[str]) -> Path:
    target = check_new_output(path)
    try:
        os.mkdir(target, 0o700)
    except FileExistsError:
        raise RequestError(f"output {target} appeared meanwhile: choose another path") from None
    os.chmod(target, 0o700)  # whatever the umask said
    return target


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


def read_json(path: Path) -> Any:
    return msgspec.json.decode(path.read_bytes())


class StatusWriter:
    """Observer that writes snapshots to `status.json`, at most every 0.5 s unless the state
    changed, so that a fast job does not spend its time in fsync.

    A COMPLETED snapshot is held back until `commit_completed()`, which the job calls once
    `result.json` is on disk: a reader that sees COMPLETED always finds the result."""

    def __init__(self, job: Path) -> None:
        self._path = job / STATUS
        self._last_state: JobState | None = None
        self._last_write = 0.0
        self._completed: StatusSnapshot | None = None

    def commit_completed(self) -> None:
        if self._completed is not None:
            write_atomic(self._path, encode_status(self._completed))
            self._completed = None

    def __call__(self, snapshot: StatusSnapshot) -> None:
        if snapshot.state is JobState.COMPLETED:
            self._completed = snapshot  # the latest one: its accounting is final
            return
        now = time.monotonic()
        if snapshot.state == self._last_state and now - self._last_write < STATUS_MIN_INTERVAL_S:
            return
        write_atomic(self._path, encode_status(snapshot))
        self._last_state = snapshot.state
        self._last_write = now


def read_status(job: Path) -> StatusSnapshot:
    return decode_status((job / STATUS).read_bytes())


class JobLock:
    """The coordinator's `flock` on the job's lock file, held for its whole life."""

    def __init__(self, job: Path) -> None:
        self.path = job / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        # O_CLOEXEC: worker processes never inherit the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RequestError(
                f"job {self.path.parent} already has a live coordinator (its lock is held)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        # Unlink before closing: while we still hold the lock nobody else can be relying on
        # this inode, and a finished job directory keeps no stale lock file.
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None


def lock_is_held(job: Path) -> bool:
    """True if some process holds the job's lock (a live coordinator)."""
    try:
        fd = os.open(job / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def owner_matches(job: Path) -> bool:
    return os.stat(job).st_uid == os.getuid()


def is_job_dir(job: Path) -> bool:
    try:
        mode = os.lstat(job).st_mode
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(mode) and (job / MANIFEST).exists()


async def watch_job_dir(
    job: Path, names: Collection[str], stop: asyncio.Event
) -> AsyncGenerator[None, None]:
    """Yield whenever one of `names` in the job directory changes, and at least every
    WATCH_TICK_MS, until `stop` is set.

    The tick lets callers re-check what they care about (a file's presence, the lock) even
    when no event comes: a change made before the watch was set up, or a lock released by a
    killed process. Without inotify (limits reached, odd filesystems) it degrades to polling
    on the same tick rather than failing.
    """
    from watchfiles import awatch

    def relevant(_change: object, path: str) -> bool:
        return os.path.basename(path) in names

    try:
        changes = awatch(
            job,
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
        return
    except (OSError, RuntimeError) as exc:
        log.warning("cannot watch the job directory (%s); polling instead", exc)
    while not stop.is_set():
        yield
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_TICK_MS / 1000)


@contextlib.asynccontextmanager
async def cancel_requests(job: Path, cancel: asyncio.Event) -> AsyncIterator[None]:
    """While the body runs, `cancel-request` appearing in the job directory sets `cancel`."""
    stop = asyncio.Event()

    async def watch() -> None:
        request = job / CANCEL_REQUEST
        async with contextlib.aclosing(watch_job_dir(job, {CANCEL_REQUEST}, stop)) as ticks:
            async for _ in ticks:
                if request.exists():
                    log.info("cancel requested through %s", CANCEL_REQUEST)
                    cancel.set()
                    return

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        stop.set()
        await watcher
