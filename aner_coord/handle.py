"""A running job as the caller holds it, and its progress, kept off the computing path.

`parallel.submit(parallel.dense_fit, X, y, ...)` (and `session.submit(...)`) starts a call's
job and returns at once with a `JobHandle`: `status()` the latest snapshot, `watch()` the
snapshots as they come (an iterator and an async iterator), `result()` waits for the
call's result, `cancel()` cancels the job gracefully. Every call also takes `progress=`: a
callable given snapshots, or True for a progress bar (`aner_coord.progressbar`).

The snapshots are the job directory's own (`jobdir.status.StatusSnapshot`), published by
the coordinator to its observers. The coordinator hands each to a `Relay`, which keeps only
the latest and wakes whoever waits: assigning a reference under a lock is all the
coordinator's loop ever does for a display. A `Reporter` thread ("aner-progress") drains the
relay for a `progress=` callable, at most every `STATUS_INTERVAL_S` and always the final
snapshot, dropping the stale ones in between: a callback that takes 50 ms, or a notebook
that renders slowly, delays nothing but itself. A callback that raises is logged and given
no more snapshots; the job goes on. While a call admits its job, before the job has any
snapshot of its own, the display is shown that phase (`Reporter.admitting`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from aner_coord.errors import RequestError
from aner_coord.job.coordinator import STATUS_INTERVAL_S, JobReport
from aner_coord.jobdir.status import STATUS_SCHEMA, JobState, StatusSnapshot

R = TypeVar("R")
ProgressCallback = Callable[[StatusSnapshot], object]

log = logging.getLogger("aner.coordinator")

_WAIT_S = 0.05  # a waiting caller wakes this often, so an interrupt is taken at once


class Relay:
    """The job's observer for its caller: keeps the latest snapshot, wakes those waiting
    for a newer one (threads, and async iterators through their loops)."""

    where = "relaying progress"  # how a failure would be named (it never raises)

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._latest: StatusSnapshot | None = None
        self._count = 0  # snapshots received
        self._closed = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def __call__(self, snapshot: StatusSnapshot) -> None:
        with self._condition:
            self._latest = snapshot
            self._count += 1
            self._wake()

    def close(self) -> None:
        """The job has ended: no snapshot will follow."""
        with self._condition:
            self._closed = True
            self._wake()

    def _wake(self) -> None:
        self._condition.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    @property
    def latest(self) -> StatusSnapshot | None:
        return self._latest

    def _newer(self, seen: int) -> tuple[int, StatusSnapshot | None, bool]:
        """(count, latest, closed) if there is news since `seen`, the caller holding the
        lock; a snapshot is None where there is none newer."""
        if self._count > seen:
            return self._count, self._latest, self._closed
        return seen, None, self._closed

    def wait(self, seen: int, timeout: float | None = None) -> tuple[int, StatusSnapshot | None]:
        """The latest snapshot once there is one after the `seen`th, or None once the job
        has ended without one (or `timeout` passed)."""
        with self._condition:
            self._condition.wait_for(lambda: self._count > seen or self._closed, timeout)
            count, snapshot, _ = self._newer(seen)
            return count, snapshot

    def wait_closed(self, timeout: float) -> None:
        """Until the job has ended, or `timeout` seconds."""
        with self._condition:
            self._condition.wait_for(lambda: self._closed, timeout)

    async def wait_async(self, seen: int) -> tuple[int, StatusSnapshot | None]:
        while True:
            event = asyncio.Event()
            with self._condition:
                count, snapshot, closed = self._newer(seen)
                if snapshot is not None or closed:
                    return count, snapshot
                self._waiters.append((asyncio.get_running_loop(), event))
            await event.wait()


class Watch:
    """The snapshots of one job, each newer than the last one given (those in between are
    dropped), until the job has ended and its final one was given: `for snapshot in
    handle.watch()` or `async for`."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._seen = 0
        self._over = False

    def __iter__(self) -> Iterator[StatusSnapshot]:
        return self

    def __next__(self) -> StatusSnapshot:
        if self._over:
            raise StopIteration
        self._seen, snapshot = self._relay.wait(self._seen)
        return self._give(snapshot, StopIteration)

    def __aiter__(self) -> AsyncIterator[StatusSnapshot]:
        return self

    async def __anext__(self) -> StatusSnapshot:
        if self._over:
            raise StopAsyncIteration
        self._seen, snapshot = await self._relay.wait_async(self._seen)
        return self._give(snapshot, StopAsyncIteration)

    def _give(self, snapshot: StatusSnapshot | None, stop: type[Exception]) -> StatusSnapshot:
        if snapshot is None:  # the job has ended, and its final snapshot was given
            self._over = True
            raise stop
        return snapshot


@runtime_checkable
class Closes(Protocol):
    """A progress display with something to put away once the job has ended (the bar; a
    callback of the caller's that has `close()` too)."""

    def close(self) -> None: ...


def check_progress(progress: object, call: str) -> ProgressCallback | None:
    """`progress=` as every call takes it: a callable given snapshots, True for a progress
    bar, False or None for nothing (RequestError otherwise)."""
    if progress is None or progress is False:
        return None
    if progress is True:
        from aner_coord.progressbar import ProgressBar

        return ProgressBar()
    if callable(progress):
        return cast(ProgressCallback, progress)
    raise RequestError(
        f"{call}() takes progress= as a function of one status snapshot, or True for a "
        f"progress bar, got {progress!r}"
    )


class Reporter:
    """A thread handing a relay's latest snapshot to `callback`: at most every
    `STATUS_INTERVAL_S` (a new state at once), the final snapshot always, in the context
    the call was made in (a notebook cell's display goes to that cell)."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.relay = Relay()
        self._callback: ProgressCallback | None = callback
        self._context = contextvars.copy_context()
        self._thread = threading.Thread(target=self._context.run, args=(self._run,))
        self._thread.name = "aner-progress"
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        seen, last_at, last_state = 0, float("-inf"), None
        while True:
            seen, snapshot = self.relay.wait(seen)
            if snapshot is None:
                break  # the job ended; its final snapshot was given
            if not snapshot.terminal and snapshot.state is last_state:
                pause = last_at + STATUS_INTERVAL_S - time.monotonic()
                if pause > 0:
                    # Wait out the interval, unless the job ends: the final one goes now.
                    self.relay.wait_closed(pause)
                    seen, newer = self.relay.wait(seen, 0)
                    snapshot = newer or snapshot
            last_at, last_state = time.monotonic(), snapshot.state
            self._give(snapshot)
        if isinstance(self._callback, Closes):
            self._callback.close()

    def _give(self, snapshot: StatusSnapshot) -> None:
        callback = self._callback
        if callback is None:
            return
        try:
            callback(snapshot)
        except Exception:
            log.exception("the progress= callback failed; it is given no more snapshots")
            self._callback = None

    def close(self) -> None:
        """The job has ended: give the final snapshot and wait for the thread."""
        self.relay.close()
        self._thread.join()

    @contextlib.contextmanager
    def admitting(self, call: str) -> Iterator[None]:
        """While a call admits its job (reads the data, assigns roles and folds, plans its
        passes: a search of the digits spent 3.1 s of 3.8 there), a display shows that
        phase once it has lasted `ADMITTING_AFTER_S`: progress from the first second, never
        a flash of it for a call admitted at once. A refusal after the phase was shown ends
        it FAILED before the error is raised (no snapshot is shown otherwise)."""
        shown = threading.Event()

        def show() -> None:
            shown.set()
            self.relay(admission_snapshot(call, JobState.STARTING))

        timer = threading.Timer(ADMITTING_AFTER_S, show)
        timer.daemon = True
        timer.start()
        try:
            yield
        except BaseException:
            timer.cancel()
            timer.join()
            if shown.is_set():
                self.relay(admission_snapshot(call, JobState.FAILED))
            self.close()
            raise
        timer.cancel()
        timer.join()


# A display shows a call's admission once it has lasted this long (`Reporter.admitting`).
ADMITTING_AFTER_S = 0.5
ADMITTING = "admitting: reading the data, planning the passes"


def admission_snapshot(call: str, state: JobState) -> StatusSnapshot:
    """What a display is given while a call admits its job: no work is planned yet (its
    phase is `ADMITTING`, or `refused at admission` once it failed)."""
    now = time.time()
    return StatusSnapshot(
        schema=STATUS_SCHEMA, seq=0, state=state, kind=call, pid=os.getpid(), created_at=now,
        updated_at=now, elapsed_s=0.0, requested=0, passes=0, pass_index=0,
        phase=ADMITTING if state is JobState.STARTING else "refused at admission", accepted=0,
        accepted_in_pass=0, chunks_total=0, chunks_done=0, in_flight=0, throughput=None,
        eta_s=None, workers=[], submitted_at=now,
    )  # fmt: skip


class JobHandle(Generic[R]):
    """A submitted call's job: `status()`, `watch()`, `result()`, `cancel()`, `done()`."""

    def __init__(
        self,
        future: concurrent.futures.Future[JobReport],
        finish: Callable[[JobReport, BaseException | None], R],
        cancel: Callable[[], None],
        relay: Relay,
        reporter: Reporter | None = None,
    ) -> None:
        self._future = future
        self._finish = finish
        self._cancel = cancel
        self._relay = relay
        self._reporter = reporter
        self._outcome: tuple[Any, BaseException | None] | None = None
        self._interrupt: KeyboardInterrupt | None = None
        future.add_done_callback(lambda _: relay.close())

    def status(self) -> StatusSnapshot | None:
        """The job's latest status snapshot (None before its first)."""
        return self._relay.latest

    def watch(self) -> Watch:
        """The job's snapshots as they come, to the final one: newer ones only, the stale
        dropped. Iterate it (`for`) or, from async code, `async for` it."""
        return Watch(self._relay)

    def done(self) -> bool:
        """Whether the job has ended."""
        return self._future.done()

    def cancel(self) -> None:
        """Cancel the job gracefully (idempotent); `result()` then raises JobCancelled."""
        if not self._future.done():
            self._cancel()

    def result(self, timeout: float | None = None) -> R:
        """The call's result once the job has ended (JobFailed, JobCancelled as the call
        raises them; TimeoutError after `timeout` seconds, the job going on). An interrupt
        while waiting cancels the job, as a call's would."""
        if self._outcome is None:
            self._wait(timeout)
            report = self._future.result()
            if self._reporter is not None:
                self._reporter.close()
            try:
                self._outcome = (self._finish(report, self._interrupt), None)
            except BaseException as exc:
                self._outcome = (None, exc)
        value, error = self._outcome
        if error is not None:
            raise error
        return cast(R, value)

    def _wait(self, timeout: float | None) -> None:
        ended = threading.Event()
        self._future.add_done_callback(lambda _: ended.set())
        limit = None if timeout is None else time.monotonic() + timeout
        while not ended.is_set():
            if limit is not None and time.monotonic() >= limit:
                raise TimeoutError(f"the job is still running after {timeout} s")
            try:
                ended.wait(_WAIT_S)
            except KeyboardInterrupt as exc:
                self._interrupt = self._interrupt or exc
                self._cancel()
                limit = None  # the cancel ends it: wait for that
