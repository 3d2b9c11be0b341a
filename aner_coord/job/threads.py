"""Local execution: one thread per worker running the nogil kernels in-process, handing its
results to the event loop in batches.
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

    def start(self, deliver: Deliver) -> None:
        from aner_worker.host import host_identity
        from aner_worker.machine import machine_identity

        handover = Handover(asyncio.get_running_loop(), deliver)
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
        kernel = self._kernel
        params = self._params
        stopping = self._stop.is_set
        received = self.timing.received
        clock = time.monotonic
        # Load the kernel before the first task, as a worker process does before its
        # Welcome, so that a task's measured compute time is the kernel's alone.
        kernel.warm_up()
        batch = self._batch
        handover.post([WorkerReady(name, window=2 * batch)])
        while not stopping():
            task = tasks.get()
            if task is None or stopping():
                return
            try:
                began = clock()
                stats = kernel.run(params[task.pass_id], task.start, task.count, stopping)
                received(name, task.task_id, clock() - began, started=began)
            except Stopped:
                return
            except Exception as exc:  # a task's failure is the job's failure, named
                self.task_exception = exc
                done.append(TaskError(name, task.task_id, f"{type(exc).__name__}: {exc}"))
                return
            done.append(ResultReceived(name, task.task_id, stats))
            if tasks.qsize() <= batch:
                handover.post(done)
                done.clear()

    def begin_pass(self, pass_id: int, params: Any) -> None:
        self._params.clear()  # the threads hold this dict: update it in place
        self._params[pass_id] = params

    def send(self, worker: str, task: Task) -> None:
        # Stamped before it is queued: the thread may take it at once.
        self.timing.dispatched(worker, [(task.task_id, task.pass_id, task.start, task.count, None)])
        self._queues[worker].put(task)

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
