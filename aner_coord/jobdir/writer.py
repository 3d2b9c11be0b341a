"""`status.json`, written by `StatusWriter` on a thread of its own, at a bounded rate and at
once on every state change, so fsync never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from aner_coord.jobdir.directory import STATUS, JobDir, JobDirError, PathLike
from aner_coord.jobdir.status import JobState, StatusSnapshot, encode_status

STATUS_MIN_INTERVAL_S = 0.5


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
    raised by the next call, `flush()` or `close()`; after it nothing more is written. A
    failure of the first write is raised by that call and every later one
    (`first_write_failed`): the job never started as far as its directory is concerned.
    `before_write` runs on the writer thread before each status write (the job's ledger
    makes what the status will report durable there), `after_write` after it (a diagnosis,
    the timeline, whose lines never take the room a status needs)."""

    # How a failure of this observer is named in the job's error (never a class name).
    where = "writing the job directory"

    def __init__(
        self,
        job: JobDir | PathLike,
        *,
        min_interval_s: float = STATUS_MIN_INTERVAL_S,
        on_error: Callable[[JobDirError], None] | None = None,
        before_write: Callable[[], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(job, JobDir):
            self._dir, self._own_dir = job, False
        else:
            self._dir, self._own_dir = JobDir.open(job, own=True), True
        self._interval = min_interval_s
        self._on_error = on_error
        self._before_write = before_write
        self._after_write = after_write
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
            self._write_first(snapshot)
            return
        with self._cond:
            # Wake the writer only when this snapshot changes what it waits for: an empty
            # slot (it waits for one), or a new state (due at once). A snapshot of the same
            # state replacing a pending one is due when that one was: the writer's timed
            # wait takes it (a wake-up per pass of a fast job took the GIL for nothing).
            wake = self._slot is None or snapshot.state != self._last_state
            self._slot = snapshot
            if wake:
                self._cond.notify()

    def _write_first(self, snapshot: StatusSnapshot) -> None:
        # A first status that never reached the disk stops everything after it: no later
        # snapshot is written and no later observer (readiness) hears of one.
        if self._error is not None:
            raise self._error
        try:
            self._write(snapshot)
        except JobDirError as exc:
            with self._cond:
                self._error = exc
                self._raised = True
            raise
        self._started = True
        self._thread.start()

    @property
    def first_write_failed(self) -> JobDirError | None:
        """The error that kept the job's first status from the disk, if one did."""
        return self._error if not self._started else None

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
        if self._after_write is not None:
            self._after_write()
