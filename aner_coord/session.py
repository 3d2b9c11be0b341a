"""Sessions: worker processes started once and kept across calls (`parallel.session`).

    with parallel.session(parallel.cluster("cluster.txt")) as s:
        first = s.monte_carlo(samples=10**8, seed=1)   # starts the group's workers
        second = s.monte_carlo(samples=10**8, seed=2)  # the same processes, warm

How it works. A session owns an event loop in a daemon thread ("aner-session") and a
`WorkerPool` (aner_coord.job.pool) on it. Each call admits its request with the session's
execution and runs `aner_coord.job.execute` on that loop, exactly as a one-off call runs it: its
own coordinator, job state machine, accounting and optional job directory, and so the same
result bit for bit; only the process backend takes the group's workers from the pool instead
of starting them, and gives them back when the job ends. Calls on one session run one after
another. A local session's calls on threads start them afresh (microseconds; the kernels
stay loaded in this process); its calls that run on local worker processes (work that holds
the GIL, `aner_coord.localplan`) keep those processes as a group's, so code can switch
between a local and a cluster session without change.

A worker lost while the session is idle (it crashed, was killed) is noticed by the pool and
reported by the next call: with `restart=True` (the default) it is started again, and the
loss is logged, appended to that call's `result.losses` (phase "idle", during "between
calls") and kept in `session.losses`; with `restart=False` that call counts it as a lost
worker, so it fails naming the worker unless its `retries` allow the loss.

An interrupt of a synchronous call (Ctrl-C, a notebook's kernel interrupt) cancels that call's
job gracefully and raises `JobCancelled` chained from the interrupt; the workers that still
had tasks in flight are shut down (the next call starts them again), the others are kept.
The `*_async` forms await the job without blocking the caller's loop; cancelling the awaiting
task cancels the job the same way, and its `asyncio.CancelledError` goes on once the job has
stopped.

The workers end on `close()` or leaving the `with` block, when the session is garbage
collected (`weakref.finalize`) and at interpreter exit (the same finalizer), each with the
orderly stop of a one-off job (Shutdown, close stdin, wait, terminate, kill). Were the
process killed outright, its workers would see end of file on their stdin and exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from aner_coord.admission import Job
from aner_coord.arguments import checked
from aner_coord.calls import Calls, Placement, awaited, outcome
from aner_coord.errors import RequestError
from aner_coord.job.coordinator import JobReport, Observer
from aner_coord.job.execute import execute
from aner_coord.job.pool import WorkerPool
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import WorkerLoss
from aner_coord.requests import ComputationRequest, Execution, LocalExecution
from aner_coord.runner import loop_factory

if TYPE_CHECKING:
    pass

log = logging.getLogger("aner.coordinator")

T = TypeVar("T")

CLOSE_TIMEOUT_S = 30.0  # ample for Shutdown, then terminate and kill, of every kept worker
_WAIT_S = 0.05  # a waiting caller wakes this often, so an interrupt is taken at once


class _Runner:
    """The session's loop thread and pool. It holds no reference to its `Session`, so that
    garbage collection can find the session and run the finalizer that closes this."""

    def __init__(self, restart: bool) -> None:
        self.pool = WorkerPool(restart=restart)
        factory = loop_factory()
        self.loop = factory() if factory is not None else asyncio.new_event_loop()
        self.closed = False
        self._lock: asyncio.Lock | None = None  # made on the loop: one job at a time
        self.thread = threading.Thread(target=self._run, name="aner-session", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.closed:
            coro.close()
            raise RequestError("this session is closed: make a new one with parallel.session()")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def cancel(self, event: asyncio.Event) -> None:
        """Set a job's cancel event from any thread."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(event.set)

    async def job(
        self, job: Job, cancel: asyncio.Event, observers: Sequence[Observer] = ()
    ) -> JobReport:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await execute(job, cancel=cancel, pool=self.pool, observers=observers)

    def close(self) -> None:
        """Shut down the kept workers and stop the loop thread (the session's finalizer)."""
        if self.closed:
            return
        self.closed = True
        if self.loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self._close(), self.loop)
        if threading.current_thread() is self.thread:
            return  # collected on the loop itself: the close goes on there, nothing to wait on
        try:
            future.result(CLOSE_TIMEOUT_S)
        except Exception:
            log.exception("closing the session's workers")
        self.thread.join(CLOSE_TIMEOUT_S)

    async def _close(self) -> None:
        try:
            if self._lock is not None:
                async with self._lock:  # a job in progress ends first
                    await self.pool.close()
            else:
                await self.pool.close()
        finally:
            asyncio.get_running_loop().call_soon(self.loop.stop)


class Session(Calls):
    """Workers started once for several calls; see the module docstring. Make one with
    `parallel.session(execution)` and use it in a `with` block (or call `close()`). Every
    call of `parallel` is a method here (`aner_coord.calls`), run on the kept workers;
    `chunk=` overrides the session execution's chunk for one call."""

    @checked
    def __init__(self, execution: Execution | None = None, *, restart: bool = True) -> None:
        self.execution = execution if execution is not None else LocalExecution()
        self._runner = _Runner(restart)
        self._finalizer = weakref.finalize(self, self._runner.close)
        self._reported = 0  # losses of `losses` already reported to a call

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @checked
    def close(self) -> None:
        """End the session's workers (idempotent). Called on leaving `with`, on garbage
        collection and at interpreter exit."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def losses(self) -> list[WorkerLoss]:
        """Workers lost while the session was idle, in the order they were noticed."""
        return list(self._runner.pool.losses)

    # -- how a call's job runs here ----------------------------------------------------------
    def _job(self, computation: ComputationRequest, placement: Placement) -> Job:
        if self.closed:
            raise RequestError("this session is closed: make a new one with parallel.session()")
        if placement.get("execution") is not None:
            raise RequestError(
                "a session's calls run on the session's own workers: give the execution to "
                "parallel.session(), or chunk= to change the chunk of one call"
            )
        return super()._job(computation, placement)

    def _wait(
        self, job: Job, observers: Sequence[Observer] = ()
    ) -> tuple[JobReport, KeyboardInterrupt | None]:
        cancel = asyncio.Event()
        future = self._runner.submit(self._runner.job(job, cancel, observers))
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        interrupted: list[KeyboardInterrupt] = []
        while not done.is_set():
            try:
                done.wait(_WAIT_S)
            except KeyboardInterrupt as exc:
                interrupted.append(exc)
                self._runner.cancel(cancel)
        return future.result(), (interrupted[0] if interrupted else None)

    async def _wait_async(self, job: Job, observers: Sequence[Observer] = ()) -> JobReport:
        cancel = asyncio.Event()
        future = asyncio.wrap_future(self._runner.submit(self._runner.job(job, cancel, observers)))
        return await awaited(future, lambda: self._runner.cancel(cancel))

    def _start(
        self, job: Job, observers: Sequence[Observer]
    ) -> tuple[concurrent.futures.Future[JobReport], Callable[[], None]]:
        cancel = asyncio.Event()
        future = self._runner.submit(self._runner.job(job, cancel, observers))
        return future, lambda: self._runner.cancel(cancel)

    def _finish(self, report: JobReport, interrupt: BaseException | None) -> Any:
        """The call's result, with the workers lost since the last call in its `losses`."""
        losses = self._runner.pool.losses
        fresh, self._reported = losses[self._reported :], len(losses)
        result = outcome(report, interrupt)
        if fresh and isinstance(result, ResultBase):  # every computation's result has losses
            result = msgspec.structs.replace(result, losses=[*fresh, *result.losses])
        return result


@checked
def session(execution: Execution | None = None, *, restart: bool = True) -> Session:
    """Workers started once and kept for several calls: `with parallel.session(execution) as
    s: s.monte_carlo(...)`. `execution` is `local(...)` (the default) or `cluster(...)`;
    `restart` starts a worker lost between calls again (see `aner_coord.session`)."""
    return Session(execution, restart=restart)
