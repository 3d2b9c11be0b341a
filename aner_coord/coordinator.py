"""The coordinator: runs one job's machine on a backend, publishing snapshots as it goes.

`startup` starts the workers, `main_loop` waits for the machine to end while publishing
status at a bounded rate and turning cancel requests into events, `shutdown` stops and reaps
every worker within a bounded time. Observers (the job directory, a progress display,
systemd) only receive snapshots; they never steer the job.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aner_coord.backends import Backend, Driver, ProcessBackend, ThreadBackend
from aner_coord.computations import Computation, Fixture
from aner_coord.contexts import ClusterExecution, Execution, LocalExecution
from aner_coord.jobstate import CancelRequested, JobMachine, JobState, WorkersStopped
from aner_coord.status import STATUS_SCHEMA, StatusSnapshot, WorkerStatus

Observer = Callable[[StatusSnapshot], None]

TICK_S = 0.2
# Estimated kernel cost per item, used only to size in-flight windows.
SECONDS_PER_SAMPLE = 1 / 150e6
SECONDS_PER_ROW = 1 / 20e6


@dataclass(frozen=True)
class JobReport:
    """How a job ended: its state, the error if any, and the final snapshot's accounting."""

    state: JobState
    error: str | None
    snapshot: StatusSnapshot
    seconds: float
    task_exception: BaseException | None = None


class Coordinator:
    def __init__(
        self,
        computation: Computation,
        execution: Execution,
        *,
        kind: str,
        observers: Sequence[Observer] = (),
        cancel: asyncio.Event | None = None,
    ) -> None:
        self.computation = computation
        self.execution = execution
        self.kind = kind
        self.observers = list(observers)
        self.cancel = cancel if cancel is not None else asyncio.Event()
        self.machine = JobMachine(computation, execution.worker_slots())
        self._seq = 0
        self._created = time.time()
        self._started = time.monotonic()
        self._driver: Driver | None = None
        self._backend: Backend | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> JobReport:
        try:
            self.startup()
            await self.main_loop()
        finally:
            await self.shutdown()
        snapshot = self.publish()
        driver = self._driver
        return JobReport(
            state=self.machine.state,
            error=self.machine.error,
            snapshot=snapshot,
            seconds=time.monotonic() - self._started,
            task_exception=driver.task_exception if driver else None,
        )

    def startup(self) -> None:
        self._started = time.monotonic()
        self._backend = self._make_backend()
        self._driver = Driver(self.machine, self._backend, asyncio.get_running_loop())
        self.publish()
        self._backend.start(self._driver)

    async def main_loop(self) -> None:
        driver = self._driver
        assert driver is not None and self._backend is not None
        cancel_wait = asyncio.ensure_future(self.cancel.wait())
        try:
            while not driver.ended.is_set():
                driver.changed.clear()
                changed = asyncio.ensure_future(driver.changed.wait())
                await asyncio.wait(
                    {changed, cancel_wait}, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                if self.cancel.is_set() and self.machine.state in (
                    JobState.STARTING,
                    JobState.RUNNING,
                ):
                    driver.handle(CancelRequested("cancel requested"))
                if self.machine.state is JobState.CANCELLING:
                    self.publish()  # show CANCELLING while the workers stop, which may take a while
                    await self._backend.wait_stopped()
                    driver.handle(WorkersStopped())
                self.publish()
        finally:
            cancel_wait.cancel()

    async def shutdown(self) -> None:
        if self._backend is not None:
            await self._backend.close()

    # -- parts -----------------------------------------------------------------------------
    def _make_backend(self) -> Backend:
        execution = self.execution
        if isinstance(execution, LocalExecution):
            from aner_worker.tasks import execute

            return ThreadBackend(list(execution.worker_slots()), execute)
        assert isinstance(execution, ClusterExecution)
        from aner_worker.contract import source_fingerprint

        per_item = SECONDS_PER_ROW if isinstance(self.computation, Fixture) else SECONDS_PER_SAMPLE
        return ProcessBackend(
            execution.config.workers,
            source_fingerprint(),
            seconds_per_task=per_item * self.computation.plan.chunk,
        )

    def snapshot(self) -> StatusSnapshot:
        lock = self._driver.locked() if self._driver else None
        if lock is not None:
            with lock:
                return self._snapshot()
        return self._snapshot()

    def _snapshot(self) -> StatusSnapshot:
        machine = self.machine
        plan = self.computation.plan
        now = time.time()
        elapsed = time.monotonic() - self._started
        done = machine.items_total_done
        total = plan.total * machine.passes
        throughput = done / elapsed if elapsed > 0 and done else None
        eta: float | None = None
        # ETA only once it means something: 1% of the work and half a second observed.
        if throughput and done >= total / 100 and elapsed >= 0.5 and not machine.state.terminal:
            eta = (total - done) / throughput
        fixture = self.computation if isinstance(self.computation, Fixture) else None
        self._seq += 1
        return StatusSnapshot(
            schema=STATUS_SCHEMA,
            seq=self._seq,
            state=machine.state.value,
            kind=self.kind,
            pid=os.getpid(),
            created_at=self._created,
            updated_at=now,
            elapsed_s=round(elapsed, 6),
            requested=plan.total,
            passes=machine.passes,
            pass_index=min(machine.pass_index, machine.passes),
            phase=self.computation.describe_pass(min(machine.pass_index, machine.passes - 1)),
            accepted=done,
            accepted_in_pass=machine.items_done,
            chunks_total=plan.n_chunks,
            chunks_done=machine.chunks_done,
            in_flight=machine.in_flight,
            throughput=throughput,
            eta_s=eta,
            workers=[
                WorkerStatus(name, a.slots, a.items, a.chunks, list(a.items_by_pass))
                for name, a in machine.accounts.items()
            ],
            error=machine.error,
            committed_steps=fixture.committed_steps if fixture else None,
        )

    def publish(self) -> StatusSnapshot:
        snapshot = self.snapshot()
        for observer in self.observers:
            observer(snapshot)
        return snapshot
