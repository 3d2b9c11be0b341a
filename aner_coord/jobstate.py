"""The job state machine: pure, synchronous, and the only place where job logic lives.

Theory of operation
-------------------
A job is a computation (Monte Carlo: one pass; the fixture: `steps + 2` passes) over a chunk
plan, carried out by a fixed set of workers. The machine receives events (what happened)
and answers with instructions (what the shell must do next); it never does I/O, so every
transition can be tested by feeding events and comparing instructions.

- A worker becomes usable with `WorkerReady`, which also says how many tasks it may hold at
  once (its window: its slots, plus enough queued tasks to hide its link's round trip).
- Dispatch fills ready workers' windows from the current pass, in chunk order, but always
  holds back one chunk for every configured worker that has not yet received any: every
  worker gets at least one chunk.
- Each result is checked against the outstanding task it names (same worker, same range,
  plausible statistics). A result for an unknown or already-answered task, or an
  inconsistent one, is rejected and fails the job naming the worker: it is never counted.
- When every chunk of a pass is accepted the computation commits the pass (the barrier) and
  the next pass is dispatched with the committed parameters. A partial pass is never
  committed.
- A lost worker or failed task fails the job. A cancel request stops dispatch; the shell stops
  the workers and reports `WorkersStopped`, after which the job is CANCELLED. Results that
  arrive while cancelling are still checked and counted, but only as diagnostics.
- Once the job has ended (COMPLETED, FAILED or CANCELLED) results are ignored, and tasks still
  outstanding are abandoned: they are no longer in flight, their work was never accepted.
- Each worker's `items_by_pass` has one entry per pass started so far, zero where it
  accepted nothing in that pass.

Transitions (state, event -> state):

    STARTING   WorkerReady            -> RUNNING
    STARTING   CancelRequested        -> CANCELLING
    RUNNING    last result of a pass  -> RUNNING (next pass) | COMPLETED (last pass)
    STARTING,
    RUNNING    WorkerLost / TaskError /
               inconsistent result    -> FAILED
    RUNNING    CancelRequested        -> CANCELLING
    CANCELLING WorkersStopped         -> CANCELLED
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from aner_coord.computations import Computation, Result, Task
from protocol import TaskFailed


class JobState(enum.Enum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


# Events: what happened.
@dataclass(frozen=True)
class WorkerReady:
    worker: str
    window: int


@dataclass(frozen=True)
class ResultReceived:
    worker: str
    message: Result | TaskFailed


@dataclass(frozen=True)
class WorkerLost:
    worker: str
    phase: str
    detail: str


@dataclass(frozen=True)
class CancelRequested:
    reason: str


@dataclass(frozen=True)
class WorkersStopped:
    pass


Event = WorkerReady | ResultReceived | WorkerLost | CancelRequested | WorkersStopped


# Instructions: what to do.
@dataclass(frozen=True)
class SendTask:
    worker: str
    task: Task


@dataclass(frozen=True)
class StopWorkers:
    reason: str


@dataclass(frozen=True)
class WriteStatus:
    """The state changed: write a status snapshot now, whatever the rate limit says."""


@dataclass(frozen=True)
class JobEnded:
    state: JobState


Instruction = SendTask | StopWorkers | WriteStatus | JobEnded


@dataclass
class WorkerAccount:
    """What one worker has done for this job; public identity only."""

    slots: int
    window: int = 0
    ready: bool = False
    in_flight: int = 0
    items: int = 0
    chunks: int = 0
    items_by_pass: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Outstanding:
    worker: str
    chunk: int
    task: Task


class JobMachine:
    def __init__(self, computation: Computation, workers: dict[str, int]) -> None:
        if not workers:
            raise ValueError("a job needs at least one worker")
        self.computation = computation
        self.state = JobState.STARTING
        self.error: str | None = None
        # items_by_pass gets one entry per started pass for every worker (zero if idle).
        self.accounts = {
            name: WorkerAccount(slots=slots, items_by_pass=[0]) for name, slots in workers.items()
        }
        self.pass_index = 0
        self.items_done = 0  # accepted in the current pass
        self.items_total_done = 0  # accepted over all passes
        self.chunks_done = 0  # accepted in the current pass
        self._next_chunk = 0
        self._next_task_id = 1
        self._outstanding: dict[int, _Outstanding] = {}
        self._never_served: set[str] = set(workers)
        self._ready_order: deque[str] = deque()

    # -- queries -------------------------------------------------------------------------
    @property
    def n_chunks(self) -> int:
        return self.computation.plan.n_chunks

    @property
    def passes(self) -> int:
        return self.computation.passes

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    # -- the one entry point -------------------------------------------------------------
    def handle(self, event: Event) -> list[Instruction]:
        if isinstance(event, ResultReceived):
            return self._on_result(event)
        if isinstance(event, WorkerReady):
            return self._on_ready(event)
        if isinstance(event, WorkerLost):
            return self._on_lost(event)
        if isinstance(event, CancelRequested):
            return self._on_cancel(event)
        return self._on_stopped()

    # -- transitions ---------------------------------------------------------------------
    def _on_ready(self, event: WorkerReady) -> list[Instruction]:
        account = self.accounts[event.worker]
        if self.state not in (JobState.STARTING, JobState.RUNNING) or account.ready:
            return []
        account.ready = True
        account.window = max(1, event.window)
        self._ready_order.append(event.worker)
        out: list[Instruction] = []
        if self.state is JobState.STARTING:
            self.state = JobState.RUNNING
            out.append(WriteStatus())
        out.extend(self._dispatch())
        return out

    def _on_result(self, event: ResultReceived) -> list[Instruction]:
        if self.state.terminal:
            return []  # too late: a finished job accepts nothing more
        message = event.message
        pending = self._outstanding.get(message.task_id)
        if pending is None or pending.worker != event.worker:
            return self._fail(
                event.worker,
                "run",
                f"sent a result for task {message.task_id}, "
                "which is not outstanding on it (duplicate or unknown); rejected",
            )
        if isinstance(message, TaskFailed):
            return self._fail(
                event.worker, "task", f"task {message.task_id} failed: {message.reason}"
            )
        problem = self.computation.check(pending.task, message)
        if problem is not None:
            return self._fail(event.worker, "run", f"inconsistent result rejected: {problem}")
        del self._outstanding[message.task_id]
        account = self.accounts[event.worker]
        account.in_flight -= 1
        account.items += message.count
        account.chunks += 1
        account.items_by_pass[self.pass_index] += message.count
        self.computation.accept(pending.chunk, message)
        self.items_done += message.count
        self.items_total_done += message.count
        self.chunks_done += 1
        if self.state is not JobState.RUNNING:
            return []  # cancelling: diagnostic accounting only
        if self.chunks_done < self.n_chunks:
            return self._dispatch()
        return self._end_pass()

    def _end_pass(self) -> list[Instruction]:
        self.computation.end_pass()
        self.pass_index += 1
        if self.pass_index == self.passes:
            self.state = JobState.COMPLETED
            return [WriteStatus(), StopWorkers("job completed"), JobEnded(JobState.COMPLETED)]
        self.items_done = 0
        self.chunks_done = 0
        self._next_chunk = 0
        for account in self.accounts.values():
            account.items_by_pass.append(0)
        return [WriteStatus(), *self._dispatch()]

    def _on_lost(self, event: WorkerLost) -> list[Instruction]:
        return self._fail(event.worker, event.phase, event.detail)

    def _on_cancel(self, event: CancelRequested) -> list[Instruction]:
        if self.state not in (JobState.STARTING, JobState.RUNNING):
            return []
        self.state = JobState.CANCELLING
        self.error = f"cancelled: {event.reason}"
        return [WriteStatus(), StopWorkers(event.reason)]

    def _on_stopped(self) -> list[Instruction]:
        if self.state is not JobState.CANCELLING:
            return []
        self.state = JobState.CANCELLED
        self._abandon_outstanding()
        return [WriteStatus(), JobEnded(JobState.CANCELLED)]

    def _fail(self, worker: str, phase: str, detail: str) -> list[Instruction]:
        if self.state.terminal or self.state is JobState.CANCELLING:
            return []
        self.state = JobState.FAILED
        self.error = f'worker "{worker}" failed during {phase}: {detail}'
        self._abandon_outstanding()
        return [WriteStatus(), StopWorkers(self.error), JobEnded(JobState.FAILED)]

    def _abandon_outstanding(self) -> None:
        """The job ended with tasks outstanding: the workers drop them and no result for them
        will be accepted, so they are no longer in flight (the work was never accepted)."""
        self._outstanding.clear()
        for account in self.accounts.values():
            account.in_flight = 0

    def _dispatch(self) -> list[Instruction]:
        """Fill ready windows in readiness order, keeping one chunk per unserved worker."""
        out: list[Instruction] = []
        progressed = True
        while progressed:
            progressed = False
            for name in self._ready_order:
                account = self.accounts[name]
                if account.in_flight >= account.window:
                    continue
                remaining = self.n_chunks - self._next_chunk
                # An unserved worker may always take one; a served one leaves one chunk for
                # each unserved worker. With fewer chunks than workers (local runs allow
                # that) holding chunks back for everyone would dispatch nothing at all.
                reserved = 0 if name in self._never_served else len(self._never_served)
                if remaining <= reserved:
                    continue  # the rest is held for unserved workers, who may come later
                out.append(self._send(name))
                progressed = True
        return out

    def _send(self, worker: str) -> SendTask:
        chunk = self._next_chunk
        self._next_chunk += 1
        start, count = self.computation.plan.chunk_range(chunk)
        task = self.computation.make_task(self._next_task_id, start, count)
        self._next_task_id += 1
        self._outstanding[task.task_id] = _Outstanding(worker, chunk, task)
        self.accounts[worker].in_flight += 1
        self._never_served.discard(worker)
        return SendTask(worker, task)
