"""The job state machine: pure, synchronous, and the only place where job logic lives.

Theory of operation
-------------------
A job is a computation's run (`computations.base.Run`) carried out pass by pass by a fixed
set of workers. The machine receives events (what happened) and answers with instructions
(what the shell must do next); it never does I/O and never reads a clock, so every
transition can be tested by feeding events and comparing instructions. Instructions are the
only channel to the shell: progress leaves the machine inside `WriteStatus`, never by the
shell reading the machine's fields. The events are spelled out in `aner_coord.job.events`,
the instructions in `aner_coord.job.instructions`.

- A pass is what `run.next_pass()` returns: its items, cut into chunks of the plan's chunk
  size (the last keeps the remainder), and its frozen parameters, which `BeginPass` hands
  to the shell before any task of the pass.
- A worker becomes usable with `WorkerReady`, which also says how many tasks it may hold at
  once (its window). `WindowChanged` moves that window while it works (the shell sizes it
  from measured round trips); a smaller one only holds back further tasks.
- Dispatch fills ready workers' windows in chunk order, but always holds back one chunk for
  every configured worker that has not yet received any: every worker gets at least one.
- Each result is checked against the outstanding task it names (same worker) and by the
  computation. A result for a task that is not outstanding on that worker, or an
  inconsistent one, fails the job naming the worker: it is never counted. A task chosen
  for audit (one in each window of 1/fraction tasks, where in the window drawn from a seed
  the shell picks at random) is recomputed by the shell, which reports `AuditFailed` if the
  worker's answer differs.
- When every chunk of a pass is accepted the run commits the pass (the barrier) and the
  next pass begins. A partial pass is never committed.
- Anything that goes wrong fails the job with a message saying where: a lost worker, a
  failed task, a computation that raised (`Diverged` is the request's fault, anything else
  a bug, both named), or a fault the shell reports as `ShellFailed`.
- Retries (docs/contracts.md, section 11): with `retries=N`, up to N lost workers are survived while
  another worker remains. The lost worker's outstanding chunks go back to the front of the
  queue and are recomputed by others (`DropWorker` tells the shell to let it go); a late
  result from it is ignored, never counted. The shell may reconnect it after a back-off: a
  new `WorkerReady` makes it a worker again. Chunk results sit in per-chunk slots and a pass
  commits only when all are accepted, so the result is the undisturbed run's, bit for bit.
- A run that names workers (`NamesWorkers`) receives each result with the identity it came
  from before it is checked; a run that reports progress (`ReportsProgress`) is asked for
  its account, given the chunks outstanding on each worker, in every status.
- Ledger: each accepted chunk and committed pass is handed to the shell (`RecordAccepted`,
  `RecordCommitted`) before any status reports it; the status counts only what the ledger
  holds: every accepted chunk, or, for a run whose chunks are not recorded (a training:
  `durable_chunks` false), the items of its committed passes. A resumed job starts with `recovered`
  chunk statistics: each pass first accepts those chunks, each checked as a live result is
  (range, then the computation's `check`; one that fails fails the job naming the ledger),
  then dispatches only the rest.
- Each status also says how many of the items it counts this coordinator accepted itself
  (not recovered), by the kind of their pass (`PassSpec.kind`): what the shell measures
  rates and costs on (`aner_coord.job.pace`).
- A run restored from a checkpoint of its first `first_pass` committed passes (the shell
  restores it before the machine starts) numbers its next pass `first_pass`, and counts
  their `first_items` items (the checkpoint records them) as done and recovered.
- A cancel request stops dispatch; the shell stops the workers and reports
  `WorkersStopped`, after which the job is CANCELLED. Results that arrive while cancelling
  are checked, counted and recorded (a resume takes them), but nothing more is dispatched.
- Once the job has ended (COMPLETED, FAILED or CANCELLED) nothing more is accepted and tasks
  still outstanding are abandoned: their work was never accepted.

Transitions (state, event -> state):

    STARTING   WorkerReady              -> RUNNING
    RUNNING    WindowChanged            -> RUNNING (a larger window is filled)
    STARTING,
    RUNNING    CancelRequested          -> CANCELLING
    RUNNING    last result of a pass    -> RUNNING (next pass) | COMPLETED (no next pass)
    STARTING,
    RUNNING    WorkerLost / TaskError /
               AuditFailed / ShellFailed /
               inconsistent result /
               computation error        -> FAILED
    CANCELLING WorkersStopped           -> CANCELLED
    CANCELLING ShellFailed              -> CANCELLING (recorded; the stop goes on)
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

from aner_coord.computations import Diverged, PassSpec, Run
from aner_coord.computations.base import (
    ONE_KIND,
    NamesWorkers,
    ReportsPosition,
    ReportsProgress,
)
from aner_coord.errors import bounded_message
from aner_coord.job.chunks import ChunkQueue
from aner_coord.job.events import (
    AuditFailed,
    CancelRequested,
    Event,
    ResultReceived,
    ShellFailed,
    TaskError,
    WindowChanged,
    WorkerLost,
    WorkerReady,
    WorkersStopped,
)
from aner_coord.job.instructions import (
    BeginPass,
    DropWorker,
    Instruction,
    JobEnded,
    Progress,
    RecordAccepted,
    RecordCommitted,
    RecordLoss,
    SendTask,
    StopWorkers,
    WriteStatus,
)
from aner_coord.jobdir.status import JobState, WorkerAccount, WorkerLoss
from protocol import Task


@dataclass
class _Worker:
    slots: int
    window: int = 0
    ready: bool = False
    in_flight: int = 0
    items: int = 0
    chunks: int = 0
    items_by_pass: list[int] = field(default_factory=list)
    lost: bool = False

    def account(self, identity: str) -> WorkerAccount:
        return WorkerAccount(
            identity, self.slots, self.items, self.chunks, list(self.items_by_pass)
        )


# Progress reports per pass, at most (besides every state change).
PROGRESS_STEPS = 1000


@dataclass(frozen=True)
class _Outstanding:
    worker: str
    chunk: int
    task: Task


class JobMachine:
    def __init__(
        self,
        run: Run,
        workers: dict[str, int],
        *,
        chunk: int,
        passes: int,
        audit: float = 0.0,
        audit_seed: int = 0,
        retries: int = 0,
        recovered: Mapping[int, Mapping[int, Any]] | None = None,
        losses: Sequence[WorkerLoss] = (),
        first_pass: int = 0,
        first_items: int = 0,
    ) -> None:
        if not workers:
            raise ValueError("a job needs at least one worker")
        self._run = run
        self._chunk = chunk
        self._passes = passes
        self._audit = audit
        self._audit_seq = 0
        # The shell draws the seed at random, so no worker can tell which tasks are audited.
        self._audit_rng = random.Random(audit_seed)
        self._audit_window = -1
        self._audit_pick = -1
        self._retries = retries
        self._ledger_chunks = run.durable_chunks
        self._namer = run if isinstance(run, NamesWorkers) else None
        self._reporter = run if isinstance(run, ReportsProgress) else None
        self._position = run.position if isinstance(run, ReportsPosition) else None
        self._losses: list[WorkerLoss] = list(losses)  # earlier coordinators' count too
        self._recovered = {p: dict(c) for p, c in (recovered or {}).items()}
        # The items of the passes a checkpoint restored count as done, and as recovered.
        self._recovered_items = first_items
        self.state = JobState.STARTING
        self.error: str | None = None
        self._workers = {name: _Worker(slots) for name, slots in workers.items()}
        self._pass: PassSpec | None = None
        # A run restored from a checkpoint (`Checkpoints`) continues after `first_pass`
        # committed passes: its passes keep the numbers an uninterrupted run gives them.
        self._pass_id = first_pass - 1
        self._passes_done = first_pass
        self._requested = 0
        self._n_chunks = 0
        self._progress_every = 1  # chunks between progress reports in the current pass
        self._items_done = 0  # accepted in the current pass
        # Accepted over all passes, as far as the ledger (or a checkpoint it vouches for)
        # holds them: every accepted chunk where chunks are recorded, else committed passes
        # only, so that no status reports work a resume would do again.
        self._items_total = first_items
        self._items_committed = first_items  # the items of every committed pass
        # This coordinator's own share of `_items_total`, by kind of pass (`PassSpec.kind`):
        # what its rate and ETA are measured on.
        self._live: dict[str, int] = {}
        self._chunks_done = 0  # accepted in the current pass
        self._todo = ChunkQueue(0, set())  # chunks of the current pass still to dispatch
        self._next_task_id = 1
        self._outstanding: dict[int, _Outstanding] = {}
        self._never_served: set[str] = set(workers)
        self._ready_order: deque[str] = deque()

    @property
    def committed_items(self) -> int:
        """The items of every committed pass (a checkpoint records them)."""
        return self._items_committed

    # -- the one entry point -------------------------------------------------------------
    def start(self) -> list[Instruction]:
        """The first instructions: begin the first pass and report STARTING."""
        out = self._begin_pass()
        if self.state is JobState.STARTING and self._pass is None:
            # A run restored from a checkpoint of its last pass: nothing is left to compute.
            self.state = JobState.COMPLETED
            return [
                *out,
                self._status(urgent=True),
                StopWorkers("job completed"),
                JobEnded(self.state),
            ]
        if self.state is JobState.STARTING and self._pass is not None and not self._todo:
            out.extend(self._end_pass())  # a resumed pass that the ledger already holds
        if self.state.terminal:
            return out  # it ended already (planning failed, or the ledger held everything)
        return [*out, self._status(urgent=True)]

    def handle(self, event: Event) -> list[Instruction]:
        """The instructions that `event` calls for. Anything that is not an `Event` is the
        shell's bug and raises (AssertionError), whatever the state."""
        match event:
            case (
                ResultReceived()
                | WorkerReady()
                | WindowChanged()
                | TaskError()
                | AuditFailed()
                | WorkerLost()
            ) if event.worker not in self._workers:
                return self._fail(
                    f"the shell reported an event for unknown worker {event.worker!r}"
                )
            case ResultReceived():
                return self._on_result(event)
            case WorkerReady():
                return self._on_ready(event)
            case WindowChanged():
                return self._on_window(event)
            case TaskError():
                if self._workers[event.worker].lost:
                    return []
                return self._fail(f'worker "{event.worker}" failed during task: {event.reason}')
            case AuditFailed():
                return self._fail(
                    f'worker "{event.worker}" failed during audit: its result for task '
                    f"{event.task_id} differs from the coordinator's own: {event.detail}"
                )
            case WorkerLost():
                return self._on_lost(event)
            case ShellFailed():
                return self._on_shell_failed(event)
            case CancelRequested():
                return self._on_cancel(event)
            case WorkersStopped():
                return self._on_stopped()
            case _:
                assert_never(event)

    # -- transitions ---------------------------------------------------------------------
    def _on_ready(self, event: WorkerReady) -> list[Instruction]:
        worker = self._workers[event.worker]
        if not self.state.active or (worker.ready and not worker.lost):
            return []
        if worker.lost:
            # A lost worker the shell reconnected (retries): it starts afresh, its earlier
            # tasks long since requeued; its loss stays counted and recorded.
            worker.lost = False
            worker.in_flight = 0
        worker.ready = True
        worker.window = max(1, event.window)
        self._ready_order.append(event.worker)
        out: list[Instruction] = []
        if self.state is JobState.STARTING:
            self.state = JobState.RUNNING
            out.append(self._status(urgent=True))
        out.extend(self._dispatch())
        return out

    def _on_window(self, event: WindowChanged) -> list[Instruction]:
        worker = self._workers[event.worker]
        if not worker.ready or worker.lost:
            return []  # its next WorkerReady brings the window
        worker.window = max(1, event.window)
        return self._dispatch() if self.state is JobState.RUNNING else []

    def _on_lost(self, event: WorkerLost) -> list[Instruction]:
        lost = self._workers[event.worker]
        if lost.lost:
            return []
        survivors = [w for name, w in self._workers.items() if not w.lost and name != event.worker]
        if not self.state.active or len(self._losses) >= self._retries or not survivors:
            return self._fail(
                f'worker "{event.worker}" failed during {event.phase}: {event.detail}'
            )
        label = self._pass.label if self._pass is not None else "start"
        # Kept in status.json and result.json: bounded as a failure's message is.
        detail = bounded_message(event.detail, None)
        loss = WorkerLoss(event.worker, event.phase, detail, event.at, label)
        self._losses.append(loss)
        lost.lost = True
        lost.in_flight = 0
        mine = sorted(
            (o.chunk, task_id)
            for task_id, o in self._outstanding.items()
            if o.worker == event.worker
        )
        for _, task_id in mine:
            del self._outstanding[task_id]
        # Back to the front of the queue, in chunk order.
        self._todo.requeue([chunk for chunk, _ in mine])
        self._never_served.discard(event.worker)
        if event.worker in self._ready_order:
            self._ready_order.remove(event.worker)
        reason = f"lost during {event.phase}: {detail}"
        return [
            RecordLoss(loss),
            DropWorker(event.worker, reason),
            self._status(urgent=True),
            *self._dispatch(),
        ]

    def _on_result(self, event: ResultReceived) -> list[Instruction]:
        # The path of every chunk: kept lean (local threads send thousands a second).
        worker = self._workers[event.worker]
        state = self.state
        if worker.lost or (state is not JobState.RUNNING and state.terminal):
            return []  # too late: a finished job or a dropped worker counts nothing more
        pending = self._outstanding.get(event.task_id)
        if pending is None or pending.worker != event.worker:
            return self._fail(
                f'worker "{event.worker}" failed during run: sent a result for task '
                f"{event.task_id}, which is not outstanding on it (duplicate or unknown); "
                "rejected"
            )
        task = pending.task
        count = task.count
        stats = event.stats
        if self._namer is not None:
            stats = self._namer.received_from(stats, event.worker)
        try:
            problem = self._run.check(pending.chunk, task.start, count, stats)
        except Diverged as exc:
            # Non-finite statistics: the fit diverged, or the worker is faulty (an audit
            # tells which); either way the result is refused, naming who sent it.
            return self._fail(
                f'numerical divergence: {exc} (in the result of worker "{event.worker}" for '
                f"task {event.task_id})"
            )
        except Exception as exc:
            return self._fail(f"computation error while checking a result: {exc!r}")
        if problem is not None:
            return self._fail(
                f'worker "{event.worker}" failed during run: inconsistent result rejected: '
                f"{problem}"
            )
        del self._outstanding[event.task_id]
        worker.in_flight -= 1
        worker.items += count
        worker.chunks += 1
        worker.items_by_pass[-1] += count
        try:
            self._run.accept(pending.chunk, stats)
        except Exception as exc:
            return self._fail(f"computation error while accepting a result: {exc!r}")
        self._items_done += count
        if self._ledger_chunks:
            self._items_total += count
            self._count_live(count)
        self._chunks_done += 1
        out: list[Instruction] = []
        if self._ledger_chunks:
            # Also while cancelling: the status counts this chunk, so the ledger holds it
            # (a resume recovers exactly what the last status reported).
            out.append(RecordAccepted(self._pass_id, pending.chunk, stats))
        if state is not JobState.RUNNING:
            return out  # cancelling: nothing more is dispatched
        if self._chunks_done < self._n_chunks:
            out.extend(self._dispatch())
            # Progress about every 1/PROGRESS_STEPS of a pass (every chunk of a short one):
            # plenty for a status written at most twice a second, and no per-chunk cost.
            if self._chunks_done % self._progress_every == 0:
                out.append(self._status(urgent=False))
            return out
        return [*out, *self._end_pass()]

    def _end_pass(self) -> list[Instruction]:
        label = self._pass.label if self._pass else "?"
        try:
            self._run.commit()
        except Diverged as exc:
            return self._fail(f"numerical divergence: {exc}")
        except Exception as exc:
            return self._fail(f"computation error while committing {label}: {exc!r}")
        self._passes_done += 1
        self._items_committed += self._items_done
        if not self._ledger_chunks:
            self._items_total += self._items_done
            self._count_live(self._items_done)
        committed = RecordCommitted(self._pass_id)
        begin = self._begin_pass()
        if self.state.terminal:
            return [committed, *begin]  # the computation failed to begin its next pass
        if self._pass is None:
            self.state = JobState.COMPLETED
            return [
                committed,
                self._status(urgent=True),
                StopWorkers("job completed"),
                JobEnded(self.state),
            ]
        if not self._todo:  # the ledger of a resumed job already holds this whole pass
            return [committed, *begin, *self._end_pass()]
        # A new pass is progress, not news: the shell publishes it within its interval (a
        # snapshot per pass cost a Dense step on the digits 5%), after its tasks are sent.
        return [committed, *begin, *self._dispatch(), self._status(urgent=False)]

    def _count_live(self, items: int) -> None:
        kind = self._pass.kind if self._pass is not None else ONE_KIND
        self._live[kind] = self._live.get(kind, 0) + items

    def _begin_pass(self) -> list[Instruction]:
        try:
            spec = self._run.next_pass()
        except Exception as exc:
            return self._fail(f"computation error while planning the next pass: {exc!r}")
        self._pass = spec
        if spec is None:
            return []  # the last pass's counts stay: the final status reports them
        self._items_done = 0
        self._chunks_done = 0
        self._todo = ChunkQueue(0, set())
        self._pass_id += 1
        self._requested = spec.items
        self._n_chunks = -(-spec.items // self._chunk)
        self._progress_every = max(1, self._n_chunks // PROGRESS_STEPS)
        for worker in self._workers.values():
            worker.items_by_pass.append(0)
        recovered = self._recovered.pop(self._pass_id, {})
        refused = self._replay(spec, recovered)
        if refused is not None:
            return self._fail(refused)
        self._todo = ChunkQueue(self._n_chunks, set(recovered))
        return [BeginPass(self._pass_id, spec.params)]

    def _replay(self, spec: PassSpec, recovered: Mapping[int, Any]) -> str | None:
        """Accept the chunks of this pass that a resumed job's ledger holds, each checked
        exactly as a live worker's result is (its range, then the computation's `check`);
        why the ledger is refused, if it is."""
        for chunk in sorted(recovered):
            where = f"the ledger's record of chunk {chunk} of pass {self._pass_id}"
            if not 0 <= chunk < self._n_chunks:
                return f"{where} is refused: that pass has {self._n_chunks} chunks"
            start = chunk * self._chunk
            count = min(self._chunk, spec.items - start)
            try:
                problem = self._run.check(chunk, start, count, recovered[chunk])
                if problem is None:
                    self._run.accept(chunk, recovered[chunk])
            except Diverged as exc:
                problem = f"numerical divergence: {exc}"
            except Exception as exc:
                return f"computation error while replaying the ledger: {exc!r}"
            if problem is not None:
                return f"{where} is refused: {problem}"
            self._items_done += count
            self._items_total += count
            self._recovered_items += count
            self._chunks_done += 1
        return None

    def _on_shell_failed(self, event: ShellFailed) -> list[Instruction]:
        if self.state is JobState.CANCELLING:
            self.error = f"{self.error}; then {event.where} failed: {event.detail}"
            return []
        return self._fail(f"{event.where} failed: {event.detail}")

    def _on_cancel(self, event: CancelRequested) -> list[Instruction]:
        if not self.state.active:
            return []
        self.state = JobState.CANCELLING
        self.error = f"cancelled: {event.reason}"
        return [self._status(urgent=True), StopWorkers(event.reason)]

    def _on_stopped(self) -> list[Instruction]:
        if self.state is not JobState.CANCELLING:
            return []
        self.state = JobState.CANCELLED
        self._abandon_outstanding()
        return [self._status(urgent=True), JobEnded(self.state)]

    def _fail(self, error: str) -> list[Instruction]:
        if self.state.terminal or self.state is JobState.CANCELLING:
            return []
        self.state = JobState.FAILED
        self.error = error
        self._abandon_outstanding()
        return [self._status(urgent=True), StopWorkers(error), JobEnded(self.state)]

    def _abandon_outstanding(self) -> None:
        """The job ended with tasks outstanding: the workers drop them and no result for them
        will be accepted, so they are no longer in flight (the work was never accepted)."""
        self._outstanding.clear()
        for worker in self._workers.values():
            worker.in_flight = 0

    def _dispatch(self) -> list[Instruction]:
        """Fill ready windows in readiness order, keeping one chunk per unserved worker."""
        out: list[Instruction] = []
        if self._pass is None:
            return out
        workers, todo, unserved = self._workers, self._todo, self._never_served
        progressed = True
        while progressed:
            progressed = False
            for name in self._ready_order:
                worker = workers[name]
                if worker.in_flight >= worker.window:
                    continue
                # An unserved worker may always take one; a served one leaves one chunk for
                # each unserved worker. With fewer chunks than workers (local runs allow
                # that) holding chunks back for everyone would dispatch nothing at all.
                reserved = len(unserved) if unserved and name not in unserved else 0
                if len(todo) <= reserved:
                    continue  # the rest is held for unserved workers, who may come later
                out.append(self._send(name))
                progressed = True
        return out

    def _send(self, worker: str) -> SendTask:
        assert self._pass is not None
        chunk = self._todo.pop()
        start = chunk * self._chunk
        count = min(self._chunk, self._pass.items - start)
        task = Task(self._next_task_id, self._pass_id, start, count)
        self._next_task_id += 1
        self._outstanding[task.task_id] = _Outstanding(worker, chunk, task)
        self._workers[worker].in_flight += 1
        self._never_served.discard(worker)
        return SendTask(worker, task, self._audit_next() if self._audit else False)

    def _audit_next(self) -> bool:
        """One task in each window of about 1/`audit` tasks in dispatch order (0.1: one of
        tasks 1-10, one of 11-20, ...), at a position drawn from the seed: the rate is
        steady, the choice unpredictable to a worker."""
        seq, rate = self._audit_seq, self._audit
        self._audit_seq += 1
        window = int(seq * rate)
        if window != self._audit_window:
            self._audit_window = window
            # The window's last task, computed (a small fraction's windows are long), then
            # corrected for the rounding of the division.
            last = max(seq, math.ceil((window + 1) / rate) - 1)
            while int((last + 1) * rate) == window:
                last += 1
            while last > seq and int(last * rate) != window:
                last -= 1
            self._audit_pick = seq + self._audit_rng.randrange(last - seq + 1)
        return seq == self._audit_pick

    def _detail(self) -> dict[str, Any] | None:
        """The run's own account of its progress, for runs that give one."""
        if self._reporter is None:
            return None
        outstanding: dict[str, list[int]] = {}
        for task_id in sorted(self._outstanding):
            held = self._outstanding[task_id]
            outstanding.setdefault(held.worker, []).append(held.chunk)
        slots = sum(w.slots for w in self._workers.values() if not w.lost)
        try:
            return self._reporter.progress(outstanding, slots)
        except Exception as exc:  # an account of progress must never stop the job itself
            return {"error": f"computation error while reporting progress: {exc!r}"}

    def _status(self, *, urgent: bool) -> WriteStatus:
        spec = self._pass
        return WriteStatus(
            Progress(
                state=self.state,
                passes=self._passes,
                pass_index=self._passes_done,
                phase=spec.label if spec is not None else "done",
                requested=self._requested,
                accepted=self._items_total,
                accepted_in_pass=self._items_done,
                chunks_total=self._n_chunks,
                chunks_done=self._chunks_done,
                in_flight=len(self._outstanding),
                workers=tuple(w.account(name) for name, w in self._workers.items()),
                error=self.error,
                committed_steps=self._run.committed_steps,
                losses=tuple(self._losses),
                recovered=self._recovered_items,
                live=dict(self._live),
                detail=self._detail(),
                position=self._position() if self._position is not None else None,
            ),
            urgent,
        )
