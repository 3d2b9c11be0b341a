"""Local execution: one thread per worker running the nogil kernels in-process, handing its
results to the event loop in batches; and, for one slot's short lockstep tasks, the same
kernel on the event loop's own thread (`INLINE_MAX_S`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from aner_coord.job.backend import BackendPlan, Deliver
from aner_coord.job.events import Event, ResultReceived, TaskError, WorkerLost, WorkerReady
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
from aner_worker.kernels.base import Kernel, Stopped
from protocol import (
    Task,
)

log = logging.getLogger("aner.coordinator")


# A local thread runs its queued tasks back to back and hands its results to the event loop
# in batches of about LOCAL_BATCH_S of its work (at most LOCAL_MAX_BATCH tasks, at least
# one): a batch goes once no more than a batch's worth of tasks is left queued (or when the
# thread would otherwise wait), so it holds two batches (its window) and never runs dry
# while the loop answers. Short tasks so cost one loop wake-up per batch instead of one per
# chunk; long ones keep batches of one, so the work stays balanced to the last task.
LOCAL_BATCH_S = 0.005


LOCAL_MAX_BATCH = 16

# A job on one local slot whose tasks are short and come a few at a time (a Dense training's
# passes on the digits: each waits for the last one's update, then its one or two chunks take
# 0.2-0.5 ms of arithmetic) computes them on the event loop's thread: handing such a task to
# the slot's thread and its result back costs two wake-ups and two GIL hand-overs, about
# 0.1 ms, on the critical path of every step. Only while the thread holds nothing, and only
# a round of sends whose tasks, at the last task's measured seconds, add up to under
# INLINE_MAX_S, so that the loop (status, cancel, interrupts) is never held longer than about
# that; a longer round (many small Monte Carlo chunks) goes to the thread, which overlaps its
# computing with the loop's handling of its results.
INLINE_MAX_S = 0.005


def local_batch(seconds_per_task: float | None) -> int:
    """Results a local thread hands over at once, for tasks of about `seconds_per_task`."""
    if not seconds_per_task or seconds_per_task <= 0:
        return 1
    return max(1, min(LOCAL_MAX_BATCH, round(LOCAL_BATCH_S / seconds_per_task)))


class Handover:
    """Events from local threads to the event loop: one wake-up carries every event posted
    since the last, delivered in the order they were posted."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Deliver) -> None:
        self._loop = loop
        self._deliver = deliver
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._signalled = False

    def post(self, events: Sequence[Event]) -> None:
        with self._lock:
            self._events.extend(events)
            if self._signalled:
                return  # the wake-up already on its way takes these too
            self._signalled = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: the job is over
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            events, self._events = self._events, []
            self._signalled = False
        for event in events:
            try:
                self._deliver(event)
            except Exception:  # as when each event had its own callback: the rest still go
                log.exception("handling %s", type(event).__name__)


class ThreadBackend:
    """Local workers: a fixed set of threads, each with its own task queue."""

    staging: Sequence[StagingRecord] = ()  # threads read the data in this process

    def __init__(
        self, names: Sequence[str], kernel: Kernel, seconds_per_task: float | None = None
    ) -> None:
        self._names = list(names)
        self._kernel = kernel
        self._batch = local_batch(seconds_per_task)
        self._queues: dict[str, queue.SimpleQueue[Task | None]] = {
            name: queue.SimpleQueue() for name in self._names
        }
        self._params: dict[int, Any] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.task_exception: BaseException | None = None
        self.timing = TaskTimes(link=False)
        # Computing on the loop's thread (`INLINE_MAX_S`); all but `_last_s` are the loop's.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Deliver | None = None
        self._ready = False  # the single slot's thread has loaded the kernel
        self._in_thread = 0  # tasks given to the threads whose results are not yet delivered
        self._pending: list[tuple[str, Task]] = []  # sent this round: inline if short
        self._last_s: float | None = None  # the last task's compute seconds (any thread)

    def start(self, deliver: Deliver) -> None:
        from aner_worker.host import host_identity
        from aner_worker.machine import machine_identity

        self._loop, self._deliver = asyncio.get_running_loop(), deliver
        handover = Handover(self._loop, self._from_threads)
        self.timing.start()
        # Local threads run on this host: they report its identity as a worker process
        # here would, so that they compare equal with pipe workers on the same host.
        machine, host = machine_identity(), host_identity().value
        for name in self._names:
            self.timing.machine(name, machine, host)
            thread = threading.Thread(
                target=self._run, args=(name, handover), name=f"aner-{name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _run(self, name: str, handover: Handover) -> None:
        done: list[Event] = []  # results not yet handed over, in completion order
        try:
            self._serve(name, handover, done)
        except Exception as exc:  # a bug here must fail the job, not leave it waiting
            log.exception("local worker %s", name)
            detail = f"internal error in the local worker: {exc!r}"
            done.append(WorkerLost(name, "run", detail, at=time.time()))
        finally:
            if done:  # nothing computed is kept back, even while stopping
                handover.post(done)

    def _serve(self, name: str, handover: Handover, done: list[Event]) -> None:
        tasks = self._queues[name]
        stopping = self._stop.is_set
        # Load the kernel before the first task, as a worker process does before its
        # Welcome, so that a task's measured compute time is the kernel's alone.
        self._kernel.warm_up()
        batch = self._batch
        handover.post([WorkerReady(name, window=2 * batch)])
        while not stopping():
            task = tasks.get()
            if task is None or stopping():
                return
            try:
                event = self._compute(name, task)
            except Stopped:
                return
            done.append(event)
            if isinstance(event, TaskError):
                return
            if tasks.qsize() <= batch:
                handover.post(done)
                done.clear()

    def _compute(self, worker: str, task: Task) -> ResultReceived | TaskError:
        """Compute `task` on the calling thread (its slot's, or the loop's): its result, or
        its failure, which is the job's, named. `Stopped` goes to the caller."""
        began = time.monotonic()
        try:
            stats = self._kernel.run(
                self._params[task.pass_id], task.start, task.count, self._stop.is_set
            )
        except Stopped:
            raise
        except Exception as exc:
            self.task_exception = exc
            return TaskError(worker, task.task_id, f"{type(exc).__name__}: {exc}")
        self._last_s = seconds = time.monotonic() - began
        self.timing.received(worker, task.task_id, seconds, started=began)
        return ResultReceived(worker, task.task_id, stats)

    def begin_pass(self, pass_id: int, params: Any) -> None:
        self._params.clear()  # the threads hold this dict: update it in place
        self._params[pass_id] = params

    def send(self, worker: str, task: Task) -> None:
        # Stamped before it is queued: the thread may take it at once.
        self.timing.dispatched(worker, [(task.task_id, task.pass_id, task.start, task.count, None)])
        if self._may_inline():
            self._pending.append((worker, task))
            if len(self._pending) == 1:  # decided once the round's sends are all in
                assert self._loop is not None
                self._loop.call_soon(self._run_pending)
            return
        self._to_thread(worker, task)

    def _to_thread(self, worker: str, task: Task) -> None:
        self._in_thread += 1
        self._queues[worker].put(task)

    def _may_inline(self) -> bool:
        last = self._last_s
        return (
            len(self._names) == 1
            and self._ready
            and self._in_thread == 0
            and last is not None
            and last < INLINE_MAX_S
            and not self._stop.is_set()
        )

    def _run_pending(self) -> None:
        """The round's sends are in: a short round is computed here and now, a longer one
        goes to the thread (it computes while the loop handles the results)."""
        pending, self._pending = self._pending, []
        if self._stop.is_set():
            return  # as a thread drops what it had not begun
        last = self._last_s or 0.0
        if self._in_thread or len(pending) * last >= INLINE_MAX_S:
            for worker, task in pending:
                self._to_thread(worker, task)
            return
        events: list[Event] = []
        for worker, task in pending:
            try:
                event = self._compute(worker, task)
            except Stopped:
                break
            events.append(event)
            if isinstance(event, TaskError):
                break
        assert self._deliver is not None
        for computed in events:  # in the order computed, as a thread's batch is
            try:
                self._deliver(computed)
            except Exception:  # as the hand-over of a thread's results does
                log.exception("handling %s", type(computed).__name__)

    def _from_threads(self, event: Event) -> None:
        """An event a thread posted, on the loop: the account of what the threads hold."""
        if isinstance(event, ResultReceived | TaskError):
            self._in_thread -= 1
        elif isinstance(event, WorkerReady):
            self._ready = True
        assert self._deliver is not None
        self._deliver(event)

    def flush_soon(self) -> None:
        pass  # a queue's tasks are taken at once

    def drop(self, worker: str) -> None:
        self.timing.lost(worker)
        self._queues[worker].put(None)  # its thread has already ended; nothing more for it

    def request_stop(self, reason: str) -> None:
        self._stop.set()
        for tasks in self._queues.values():
            tasks.put(None)

    async def wait_stopped(self) -> None:
        for thread in self._threads:
            await asyncio.to_thread(thread.join)

    async def close(self) -> None:
        self.request_stop("closing")
        await self.wait_stopped()


class Threads:
    """The "threads" backend (`backend.BACKENDS`): the job's slots as threads of this process."""

    def make(self, plan: BackendPlan) -> ThreadBackend:
        return ThreadBackend(list(plan.slots), plan.kernel, plan.seconds_per_task)
