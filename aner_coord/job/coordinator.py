"""The coordinator: runs one job's machine on a backend, publishing snapshots as it goes.

Every event reaches the machine on the event loop: backends call `deliver` from any thread
and it hops onto the loop with `call_soon_threadsafe`. The machine's instructions are the
only thing the coordinator acts on; a failure while acting on one (a backend bug, an
observer that cannot write the job directory) is fed back as a `ShellFailed` event, so the
job fails naming it instead of waiting for ever.

`launch` starts the workers (threads load the kernel, processes start and shake hands) and
may be called before the job's own set-up (job directory, manifest), so that both proceed
at once; whatever the workers report meanwhile waits until `startup` has started the machine.
`startup` starts the workers if `launch` has not, `main_loop` waits for the machine to end
(turning a cancel request into an event and publishing at least every TICK_S), `shutdown`
stops and reaps every worker within a bounded time. Observers (the job directory, a
progress display, systemd) only receive snapshots; they never steer the job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, assert_never, runtime_checkable

import msgspec

from aner_coord.admission import Job
from aner_coord.computations import Accounting, Run
from aner_coord.computations.base import (
    Checkpoints,
    ExplainsDifference,
    Segment,
    UnevenTasks,
    kernel_of,
)
from aner_coord.errors import bounded_message
from aner_coord.job.audits import TOLERANCE, AuditBook
from aner_coord.job.backend import Backend, BackendPlan, backend_for
from aner_coord.job.checkpoints import Checkpointer, Restored
from aner_coord.job.events import (
    AuditFailed,
    CancelRequested,
    Event,
    ResultReceived,
    ShellFailed,
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
from aner_coord.job.link import precision_of
from aner_coord.job.machine import JobMachine
from aner_coord.job.pace import Pace, added, prefix
from aner_coord.job.pool import WorkerPool
from aner_coord.job.staging import plan_of
from aner_coord.job.timeline import JobTimeline
from aner_coord.jobdir import ERROR_DETAIL, JobDirError, ledger
from aner_coord.jobdir.ledger import LedgerWriter, Recovered
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import (
    STATUS_SCHEMA,
    JobState,
    StatusSnapshot,
    WorkerAccount,
    WorkerLoss,
)
from aner_coord.jobdir.timeline import TimelineWriter
from aner_coord.kernelsets import BLAS_KERNELS, bits_note
from aner_worker.kernels.base import encode

Observer = Callable[[StatusSnapshot], None]


@runtime_checkable
class SaysWhere(Protocol):
    """An observer that names what it was doing, for the message of its failure
    (`StatusWriter`: "writing the job directory")."""

    where: str


log = logging.getLogger("aner.coordinator")

TICK_S = 0.2
STATUS_INTERVAL_S = 0.2  # non-urgent snapshots are published at most this often


@dataclass(frozen=True)
class JobReport:
    """How a job ended: its state, the error if any, the final snapshot and the result."""

    state: JobState
    error: str | None
    snapshot: StatusSnapshot
    seconds: float
    result: Any = None
    task_exception: BaseException | None = None
    run: Any = None  # the computation's run (what it leaves behind: `WritesFiles`)
    # The whole failure message where `error` is cut (`bounded_message`), else None.
    error_detail: str | None = None


class Coordinator:
    def __init__(
        self,
        job: Job,
        *,
        observers: Sequence[Observer] = (),
        cancel: asyncio.Event | None = None,
        ledger: LedgerWriter | None = None,
        recovered: Recovered | None = None,
        first_seq: int = 0,
        pool: WorkerPool | None = None,
        checkpoint: Restored | None = None,
        checkpoints: Checkpointer | None = None,
        timeline: TimelineWriter | None = None,
        submitted_at: float | None = None,
    ) -> None:
        """`submitted_at`: when the job was submitted, where it queued for its slots first
        (None: now, as it starts at once)."""
        self.job = job
        self._timeline_writer = timeline
        self._timeline: JobTimeline | None = None
        self._pass_id = 0  # the pass whose parameters the workers hold (for the timeline)
        self._pool = pool  # a session's kept workers (process groups only)
        self.observers = list(observers)
        self.cancel = cancel if cancel is not None else asyncio.Event()
        self._ledger = ledger
        self._resumes = recovered.resumes if recovered is not None else 0
        self._run: Run = job.computation.start(job.request.computation, job.chunk)
        self._kernel = kernel_of(job.computation, job.request.computation)
        self._checkpoints = checkpoints
        self._steps_recovered = 0
        if checkpoint is not None:
            # Checked by `resume` on a run like this one: a failure now is a bug, raised.
            assert isinstance(self._run, Checkpoints)
            self._run.restore(checkpoint.data)
            self._steps_recovered = self._run.steps_recovered
        recovered = recovered if recovered is not None else Recovered()
        self._machine = JobMachine(
            self._run,
            job.workers.slots,
            chunk=job.chunk,
            passes=job.admitted.passes,
            audit=job.request.audit,
            audit_seed=int.from_bytes(os.urandom(8), "big"),
            retries=job.request.retries,
            recovered=recovered.statistics(self._kernel.stats_type),
            losses=recovered.worker_losses(),
            first_pass=checkpoint.passes if checkpoint is not None else 0,
            first_items=checkpoint.items if checkpoint is not None else 0,
        )
        admitted = job.admitted
        self._pace = Pace(admitted.segments, admitted.prior_costs)
        self._kept: tuple[int, dict[str, int]] = (0, {})  # recovered items, by kind
        self._seq = first_seq
        self._created = time.time()
        self._submitted = submitted_at if submitted_at is not None else self._created
        self._started = time.monotonic()
        self._backend: Backend | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._progress: Progress | None = None
        self._progress_at = 0.0  # when it was made
        self._last_publish = 0.0
        self._state = JobState.STARTING
        self._error: str | None = None  # as status.json and the report show it (bounded)
        self._error_detail: str | None = None  # the whole of it, where that was cut
        self._ended = asyncio.Event()
        self._changed = asyncio.Event()
        self._params: dict[int, Any] = {}
        self._audits: dict[int, SendTask] = {}
        run = self._run
        self._audit_book = AuditBook(
            job.request.audit,
            run.tolerance if isinstance(run, ExplainsDifference) else None,
            self._machine_of,
        )
        self._audit_tasks: set[asyncio.Task[None]] = set()
        self._early: list[Event] | None = []  # events that came before the machine started
        self._ready_at: float | None = None  # seconds from the start to the first WorkerReady

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> JobReport:
        try:
            self.startup()
            await self.main_loop()
        finally:
            await self.shutdown()
        snapshot = self._final_snapshot()
        seconds = time.monotonic() - self._started
        result = None
        if self._state is JobState.COMPLETED:
            accounting = Accounting(
                seconds=seconds,
                workers=tuple(snapshot.workers),
                execution=self.job.describe_execution(),
                losses=tuple(snapshot.losses),
                staging=tuple(snapshot.staging),
                ready_s=None if self._ready_at is None else round(self._ready_at, 6),
                load_s=self.job.admitted.load_s,
            )
            try:
                result = self._run.result(accounting)
                if self.job.request.audit and isinstance(result, ResultBase):
                    audit = self._audit_book.record(snapshot.workers)
                    result = msgspec.structs.replace(result, audit=audit)
                if self._blas_decides_bits and isinstance(result, ResultBase):
                    bits = self._audit_book.bits(snapshot.workers)
                    result = msgspec.structs.replace(result, bits=bits)
            except Exception as exc:  # the last seam: a FAILED job naming it, like the others
                log.exception("building the result")
                self._state = JobState.FAILED
                self._set_error(f"computation error while building the result: {exc!r}")
                snapshot = self._final_snapshot()
        return JobReport(
            state=self._state,
            error=self._error,
            snapshot=snapshot,
            seconds=seconds,
            result=result,
            task_exception=self._backend.task_exception if self._backend else None,
            run=self._run,
            error_detail=self._error_detail,
        )

    @property
    def _error_full(self) -> str | None:
        return self._error_detail if self._error_detail is not None else self._error

    def _set_error(self, error: str | None) -> None:
        """The job's failure message, bounded for every place that shows it; the whole of a
        longer one is kept for the job directory's `error-detail.txt` (and the API's
        `JobFailed.detail`)."""
        if error is None:
            self._error = self._error_detail = None
            return
        kept_in = ERROR_DETAIL if self.job.output is not None else None
        self._error = bounded_message(error, kept_in)
        self._error_detail = error if self._error != error else None

    def _final_snapshot(self) -> StatusSnapshot:
        """Publish the job's last snapshot; an observer that fails now fails the job."""
        try:
            return self._publish_now()
        except _ObserverError as exc:
            if not self._state.terminal or self._state is JobState.COMPLETED:
                self._state = JobState.FAILED
                self._set_error(f"{exc.where} failed: {exc.detail}")
            return self._snapshot()

    def attach(
        self,
        observers: Sequence[Observer],
        ledger: LedgerWriter | None,
        checkpoints: Checkpointer | None = None,
        timeline: TimelineWriter | None = None,
    ) -> None:
        """The observers, ledger, checkpoints and timeline of a job directory made after
        `launch`."""
        self.observers = list(observers)
        self._ledger = ledger
        self._checkpoints = checkpoints
        self._timeline_writer = timeline

    def launch(self) -> None:
        """Start the workers now; the machine starts later, in `startup`."""
        self._backend = self._prepare()
        self._backend.start(self.deliver)

    def _prepare(self) -> Backend:
        self._started = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        return self._make_backend()

    def startup(self) -> None:
        launched = self._backend is not None
        if not launched:
            self._backend = self._prepare()
        assert self._backend is not None
        self._open_timeline(self._backend)
        early, self._early = self._early or [], None
        self._execute(self._machine.start())
        for event in early:
            self._handle(event)
        if not launched and not self._ended.is_set():
            # (a resumed job whose ledger holds everything needs no workers)
            self._backend.start(self.deliver)

    def _open_timeline(self, backend: Backend) -> None:
        """Start this coordinator's segment of the job's timeline, if it has one."""
        writer = self._timeline_writer
        if writer is None:
            return
        job = self.job
        timing = backend.timing
        self._timeline = JobTimeline(
            writer,
            zero=self._started,
            computation=job.kind,
            backend="processes" if timing.link else "threads",
            workers=job.workers.slots,
            backend_start=timing.started,
        )
        timing.sink = self._timeline.task

    async def main_loop(self) -> None:
        backend = self._backend
        assert backend is not None
        cancel_wait = asyncio.ensure_future(self.cancel.wait())
        try:
            while not self._ended.is_set():
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                # Wake when the next tick's snapshot is due, not TICK_S after any wake-up.
                due = max(0.0, self._last_publish + TICK_S - time.monotonic())
                await asyncio.wait(
                    {changed, cancel_wait}, timeout=due, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                if self.cancel.is_set() and self._state.active:
                    self.deliver(CancelRequested("cancel requested"))
                if self._state is JobState.CANCELLING:
                    await backend.wait_stopped()
                    self.deliver(WorkersStopped())
                # Keep elapsed time and ETA moving; an urgent snapshot that woke the loop has
                # just been published (one snapshot per wake-up, not two).
                if not self._ended.is_set() and time.monotonic() - self._last_publish >= TICK_S:
                    try:
                        self._publish()
                    except _ObserverError as exc:
                        self._handle(ShellFailed(exc.where, exc.detail))
        finally:
            cancel_wait.cancel()
            for task in self._audit_tasks:
                task.cancel()

    async def shutdown(self) -> None:
        if self._backend is not None:
            await self._backend.close()

    # -- events in, instructions out ---------------------------------------------------------
    def deliver(self, event: Event) -> None:
        """Hand `event` to the machine on the event loop, from whatever thread we are on."""
        loop = self._loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            self._handle(event)
        else:
            loop.call_soon_threadsafe(self._handle, event)

    def _handle(self, event: Event) -> None:
        if self._ready_at is None and isinstance(event, WorkerReady):
            self._ready_at = time.monotonic() - self._started
        if self._early is not None:
            self._early.append(event)
            return
        if isinstance(event, ResultReceived) and event.task_id in self._audits:
            self._start_audit(event)
            return
        timeline = self._timeline
        if timeline is not None and isinstance(event, ResultReceived):
            began = time.monotonic()
            instructions = self._machine.handle(event)
            ends_pass = any(isinstance(i, RecordCommitted) for i in instructions)
            timeline.result(began, time.monotonic(), self._pass_id, ends_pass=ends_pass)
            self._execute(instructions)
            return
        self._execute(self._machine.handle(event))

    def _execute(self, instructions: list[Instruction]) -> None:
        backend = self._backend
        assert backend is not None
        for instruction in instructions:
            try:
                self._carry_out(instruction, backend)
            except _ObserverError as exc:
                self._handle(ShellFailed(exc.where, exc.detail))
            except Exception as exc:
                log.exception("carrying out %s", type(instruction).__name__)
                self._handle(
                    ShellFailed("the coordinator", f"{type(instruction).__name__}: {exc!r}")
                )
            else:
                continue
            if self._ended.is_set():
                # The failure ended the job: the rest of this batch was meant for the job
                # as it was (a RUNNING status would overwrite FAILED), so it is dropped.
                return

    def _carry_out(self, instruction: Instruction, backend: Backend) -> None:
        """One instruction; anything that is not an `Instruction` raises (AssertionError),
        which fails the job naming it."""
        match instruction:
            case SendTask():
                if instruction.audit:
                    self._audits[instruction.task.task_id] = instruction
                backend.send(instruction.worker, instruction.task)
            case RecordAccepted():  # every chunk: matched early
                if self._ledger is not None:
                    stats = encode(instruction.stats)
                    self._ledger.append(
                        ledger.Accepted(instruction.pass_id, instruction.chunk, stats)
                    )
            case BeginPass():
                began = time.monotonic()
                self._params = {instruction.pass_id: instruction.params}
                self._pass_id = instruction.pass_id
                backend.begin_pass(instruction.pass_id, instruction.params)
                if self._timeline is not None:
                    self._timeline.phase("broadcast", began, time.monotonic(), instruction.pass_id)
            case WriteStatus():
                self._write_status(instruction)
            case RecordCommitted():
                if self._ledger is not None:
                    self._ledger.append(ledger.Committed(instruction.pass_id))
                self._checkpoint(instruction.pass_id + 1)
            case RecordLoss():
                self._record_loss(instruction.loss)
            case DropWorker():
                backend.drop(instruction.worker)
            case StopWorkers():
                backend.request_stop(instruction.reason)
            case JobEnded():
                if self._timeline is not None:
                    self._timeline.end_reduce(self._pass_id)
                self._ended.set()
                self._changed.set()
            case _:
                assert_never(instruction)

    def _write_status(self, instruction: WriteStatus) -> None:
        cancelling = instruction.progress.state is JobState.CANCELLING
        if cancelling and self._state is not JobState.CANCELLING:
            self._final_checkpoint()  # before the status that says CANCELLING
        self._progress = instruction.progress
        self._progress_at = time.monotonic()
        if instruction.progress.state is JobState.RUNNING:
            self._pace.observe(self._progress_at, instruction.progress.live)
        changed = instruction.progress.state is not self._state
        self._state = instruction.progress.state
        if instruction.progress.error != self._error_full:
            self._set_error(instruction.progress.error)
        if instruction.urgent:
            self._publish()
            if changed:  # the main loop acts on states (cancelling); a new pass is no news
                self._changed.set()
        elif time.monotonic() - self._last_publish >= STATUS_INTERVAL_S:
            self._publish()

    def _publish(self) -> None:
        """A snapshot for the observers, if the job has any: a job without (an API call
        without a job directory) builds none until its final one, not one per pass."""
        if self.observers:
            self._publish_now()
        else:
            self._last_publish = time.monotonic()  # the main loop's tick counts from here

    def _checkpoint(self, passes: int) -> None:
        """A pass barrier: the checkpointer writes the run's state if one is due."""
        run, checkpoints = self._run, self._checkpoints
        if checkpoints is None or not isinstance(run, Checkpoints):
            return
        began, written = time.monotonic(), checkpoints.written
        try:
            checkpoints.committed(
                run, passes, run.committed_steps or 0, self._machine.committed_items
            )
        except JobDirError as exc:
            raise _ObserverError("writing the checkpoint", str(exc)) from None
        if self._timeline is not None and checkpoints.written != written:
            self._timeline.phase("checkpoint", began, time.monotonic(), passes - 1)

    def _final_checkpoint(self) -> None:
        """The job is being cancelled (`aner parallel cancel`, or SIGTERM, SIGINT or SIGHUP
        to the coordinator): keep every committed step now, while the workers stop; nothing
        is committed after this. (Not on a failure: a pass may have failed halfway through
        its commit.)"""
        if self._checkpoints is None:
            return
        try:
            self._checkpoints.final()
        except JobDirError as exc:
            raise _ObserverError("writing the checkpoint", str(exc)) from None

    def _record_loss(self, loss: WorkerLoss) -> None:
        log.warning('worker "%s" lost, going on without it: %s', loss.identity, loss.detail)
        if self._ledger is not None:
            self._ledger.append(ledger.Lost(loss.identity, loss.phase, loss.detail, loss.at))

    # -- audits ------------------------------------------------------------------------------
    def _start_audit(self, event: ResultReceived) -> None:
        sent = self._audits.pop(event.task_id)
        task = asyncio.get_running_loop().create_task(self._audit(sent, event))
        self._audit_tasks.add(task)
        task.add_done_callback(self._audit_tasks.discard)

    async def _audit(self, sent: SendTask, event: ResultReceived) -> None:
        """Recompute an audited task here and pass the worker's result on only if it agrees:
        bitwise, or within the computation's stated tolerance for a worker that reported
        another platform (`ExplainsDifference.close`)."""
        task = sent.task
        kernel = self._kernel
        run = self._run
        try:
            own = await asyncio.to_thread(
                kernel.run, self._params[task.pass_id], task.start, task.count, None
            )
            agrees = run.same(event.stats, own)
            tolerant = self._audit_book.comparison(event.worker) == TOLERANCE
            if tolerant and isinstance(run, ExplainsDifference):
                self._audit_book.measured(event.worker, run.deviation(event.stats, own))
            if not agrees and isinstance(run, ExplainsDifference):
                agrees = tolerant and run.close(event.stats, own)
        except Exception as exc:
            self._handle(ShellFailed("the audit", repr(exc)))
            return
        if agrees:
            self._audit_book.agreed(event.worker)
            self._handle(event)
            if self._backend is not None:
                self._backend.flush_soon()  # what the result let the machine send
            return
        if isinstance(run, ExplainsDifference):
            detail = f"{run.difference(event.stats, own)} ({self._held_to(event.worker, run)})"
        else:
            detail = f"it sent {event.stats}, expected {own}"
        self._handle(AuditFailed(event.worker, task.task_id, detail))

    def _held_to(self, worker: str, run: ExplainsDifference) -> str:
        """What an audited worker was held to, for the failure's message."""
        fields = self._audit_book.differences(worker)
        if self._audit_book.comparison(worker) == TOLERANCE:
            return (
                f"it reported another platform ({', '.join(fields)}): held within "
                f"{run.tolerance:g} of each statistic's magnitude"
            )
        return "it reported this machine's platform: held to the same bits"

    def _machine_of(self, worker: str) -> dict[str, str] | None:
        """The machine identity `worker` reported at its handshake, if any."""
        backend = self._backend
        return backend.timing.machine_of(worker) if backend is not None else None

    # -- parts -------------------------------------------------------------------------------
    def _make_backend(self) -> Backend:
        job = self.job
        per_item = job.admitted.seconds_per_item or job.computation.seconds_per_item
        return backend_for(
            BackendPlan(
                slots=list(job.workers.slots),
                records=job.workers.records,
                kernel=self._kernel,
                seconds_per_task=per_item * job.chunk,
                stage=plan_of(self._run),
                pool=self._pool,
                precision=precision_of(self._run),
                task_timeout=job.request.task_timeout,
                uneven_tasks=isinstance(job.computation, UnevenTasks),
            )
        )

    def _snapshot(self) -> StatusSnapshot:
        progress = self._progress
        assert progress is not None
        now = time.time()
        elapsed = time.monotonic() - self._started
        done = progress.accepted
        state = self._state if self._state.terminal else progress.state
        work, upper_bound = self._work(state, done)
        live = sum(progress.live.values())  # this run's own: recovered work took no time
        throughput = live / elapsed if elapsed > 0 and live else None
        if self._kept[0] != progress.recovered:
            self._kept = (progress.recovered, prefix(self._job_plan, progress.recovered))
        kept = self._kept[1]
        finished = added(kept, progress.live)
        fraction = 1.0 if state is JobState.COMPLETED else self._pace.fraction(finished)
        eta = None if state.terminal else self._pace.eta(finished)
        own = (progress.detail or {}).get("eta_s")
        if own is not None and not state.terminal:
            # The computation's own estimate (a search's, from measured fit times), made when
            # its progress was, counts down since.
            eta = max(0.0, own - (time.monotonic() - self._progress_at))
        self._seq += 1
        return StatusSnapshot(
            schema=STATUS_SCHEMA,
            seq=self._seq,
            state=state,
            kind=self.job.kind,
            pid=os.getpid(),
            created_at=self._created,
            submitted_at=self._submitted,
            updated_at=now,
            elapsed_s=round(elapsed, 6),
            requested=self.job.admitted.items,
            passes=progress.passes,
            pass_index=progress.pass_index,
            phase=progress.phase,
            accepted=done,
            accepted_in_pass=progress.accepted_in_pass,
            chunks_total=progress.chunks_total,
            chunks_done=progress.chunks_done,
            in_flight=progress.in_flight,
            throughput=throughput,
            eta_s=eta,
            workers=(
                self._backend.timing.annotate(progress.workers)
                if self._backend is not None
                else list(progress.workers)
            ),
            error=self._error,
            committed_steps=progress.committed_steps,
            unit=self.job.admitted.unit or self.job.computation.unit,
            losses=list(progress.losses),
            resumes=self._resumes,
            recovered=progress.recovered,
            staging=[] if self._backend is None else list(self._backend.staging),
            detail=progress.detail,
            work=work,
            work_upper_bound=upper_bound,
            position=progress.position,
            notes=[*self.job.notes, *self._bits_notes(progress.workers)],
            plan=self.job.plan_line,
            steps_recovered=self._steps_recovered,
            checkpointed_steps=self._checkpoints.steps if self._checkpoints is not None else None,
            fraction_done=round(fraction, 6),
        )

    @property
    def _blas_decides_bits(self) -> bool:
        """A worker group computing what a BLAS kernel set decides (Dense, search)."""
        return self.job.workers.records is not None and self._kernel.name in BLAS_KERNELS

    def _bits_notes(self, workers: Sequence[WorkerAccount]) -> list[str]:
        """The kernel-set warning for status.json, where the group's workers differ."""
        if not self._blas_decides_bits or self._backend is None:
            return []
        timing = self._backend.timing
        note = bits_note({w.identity: timing.machine_of(w.identity) for w in workers})
        return [] if note is None else [note]

    @property
    def _job_plan(self) -> tuple[Segment, ...]:
        return self.job.admitted.segments

    def _work(self, state: JobState, done: int) -> tuple[int, bool]:
        """The items of every planned pass, and whether that is an upper bound. What a
        completed job did is its whole work (early stopping ended it sooner than planned);
        no count ever exceeds the work."""
        admitted = self.job.admitted
        if state is JobState.COMPLETED:
            return done, False
        return max(admitted.planned_work, done), admitted.upper_bound

    def _publish_now(self) -> StatusSnapshot:
        began = time.monotonic()
        try:
            return self._publish_snapshot()
        finally:
            if self._timeline is not None:
                self._timeline.phase("status", began, time.monotonic(), self._pass_id)

    def _publish_snapshot(self) -> StatusSnapshot:
        snapshot = self._snapshot()
        self._last_publish = time.monotonic()
        for observer in self.observers:
            try:
                observer(snapshot)
            except Exception as exc:
                where = (
                    observer.where if isinstance(observer, SaysWhere) else type(observer).__name__
                )
                raise _ObserverError(where, _describe(exc)) from exc
        return snapshot


class _ObserverError(Exception):
    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"{where}: {detail}")
        self.where = where
        self.detail = detail


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{name}"
    return str(exc) or type(exc).__name__
