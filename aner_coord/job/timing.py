"""Where each worker's time went: one record per task, and the sums they add up to.

Every task has a `TaskRecord` (dask's per-task `startstops`): which worker, pass and range,
when it was dispatched (its frame written, or put on a local thread's queue), when a slot
started and ended it (on the worker's clock, mapped onto the coordinator's), when its
answer was received, the bytes each way, and its outcome (`OUTCOMES`). Backends stamp the
dispatch and the receipt; a worker reports per task the seconds a slot spent computing
(`busy_s`), the seconds it waited in its queue for a slot (`queued_s`) and, since the
timeline, the worker clock's reading when the slot took it (`Result.started`).

The per-worker sums that status and the result show are computed from these records
(`WorkerSums.add`, the one rule, which `aner_coord.jobdir.timeline` applies again to the
records of `timeline.jsonl`), in seconds:

- `compute_s`: the sum of `busy_s` (slot-seconds spent in the kernel);
- `transfer_s`: how long the link was carrying this worker's tasks or results: each task's
  link time (`receipt - dispatch - busy_s - queued_s`, both ways and the framing) placed
  just before its receipt, and the union of those intervals taken in receipt order, so that
  tasks in flight together count once. It is at most the job's span, and so never more
  than its wall time; local threads have no link and report None;
- `wait_s`: `slots * span - compute_s`, the slot-seconds not spent computing between the
  backend's start and the job's last result (start-up, the link, imbalance at the end).

A worker's `busy_s` and `queued_s` are its own word: each is bounded by the seconds since
the task's dispatch (no task computes longer than it has existed), and a worker's
`compute_s` by `slots * span`, so that no report can inflate the costs, the pacing or the
liveness bound built on them.

Clocks: a worker process's monotonic clock is not the coordinator's. Each Pong carries the
worker's clock; `ClockOffset` keeps the estimate of the offset from the round trip with the
smallest delay (the midpoint rule of dask's `time_delay`, NTP's filter), whose uncertainty is
half that round trip. Local threads share the coordinator's clock (offset 0, exactly).

Records stay in memory only while their task is outstanding: a finished one is added to its
worker's sums and handed to the job's timeline (`sink`), if it has one. Nothing measured is
None, never 0. Accounts are thread-safe: local slots report from their own threads.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from aner_coord.jobdir.status import WorkerAccount

# What became of a task: its result was accepted (`accepted`; `retried` for a chunk whose
# earlier task was lost), it answered a task no longer outstanding (`duplicate`, refused),
# or its worker was lost first (`lost`: no receipt).
OUTCOMES = ("accepted", "retried", "duplicate", "lost")


@dataclass(slots=True)
class TaskRecord:
    """One task, from dispatch to receipt; times on the coordinator's monotonic clock."""

    worker: str  #: the worker's public identity
    pass_id: int  #: the pass it belongs to
    task_id: int  #: its number within the job
    start: int  #: its first item within the pass
    count: int  #: its items
    dispatched: float  #: its frame written (processes) or queued (threads)
    started: float | None = None  #: a slot took it (worker clock, mapped)
    ended: float | None = None  #: the slot finished it (worker clock, mapped)
    received: float | None = None  #: its answer read by the coordinator
    busy_s: float | None = None  #: slot-seconds computing, as counted
    queued_s: float | None = None  #: seconds queued on the worker before a slot took it
    link_s: float | None = None  #: seconds on the link, both ways (None: not measured)
    bytes_out: int | None = None  #: the task's frame (None: local threads, no frame)
    bytes_in: int | None = None  #: the result's statistics (None: local threads)
    outcome: str = "accepted"  #: one of OUTCOMES
    clock_error_s: float | None = None  #: how far started/ended may be off (None: unmapped)


@dataclass(slots=True)
class WorkerSums:
    """One worker's sums over its finished records (the rule the module's doc states)."""

    compute_s: float = 0.0
    transfer_s: float = 0.0
    link_until: float = 0.0  # the end of the union of link intervals so far
    answered: int = 0
    last: float = 0.0  # the latest receipt

    def add(self, record: TaskRecord) -> None:
        """Count a received record (in receipt order)."""
        received = record.received
        if received is None or record.busy_s is None:
            return
        link_s = record.link_s
        if link_s is not None:
            begin = max(received - link_s, self.link_until)
            if received > begin:
                self.transfer_s += received - begin
            self.link_until = max(self.link_until, received)
        self.compute_s += record.busy_s
        self.answered += 1
        self.last = max(self.last, received)


@dataclass(frozen=True)
class Costs:
    """A worker's compute, transfer and wait seconds (None where not measured)."""

    compute_s: float | None
    transfer_s: float | None
    wait_s: float | None


def costs(sums: WorkerSums, slots: int, span: float, *, link: bool) -> Costs:
    """What `sums` come to for a worker of `slots` slots in a job of `span` seconds."""
    if not sums.answered:
        return Costs(None, None, None)
    compute_s = min(sums.compute_s, slots * span)
    return Costs(compute_s, sums.transfer_s if link else None, slots * span - compute_s)


@dataclass(slots=True)
class ClockOffset:
    """The best estimate of `worker clock - coordinator clock` so far."""

    offset: float | None = None
    error_s: float = math.inf  # half the round trip it came from

    def observe(self, sent: float, answered: float, worker_clock: float) -> None:
        """A round trip from `sent` to `answered` (ours) during which the worker read
        `worker_clock`: kept if its delay is the smallest yet."""
        if worker_clock <= 0.0 or answered < sent:
            return
        error_s = (answered - sent) / 2
        if error_s <= self.error_s:
            self.offset = worker_clock - (sent + error_s)
            self.error_s = error_s


@dataclass
class _Worker:
    sums: WorkerSums = field(default_factory=WorkerSums)
    machine: dict[str, str] | None = None
    host: str | None = None
    open: dict[int, TaskRecord] = field(default_factory=dict)  # outstanding, by task id
    clock: ClockOffset = field(default_factory=ClockOffset)
    rtt_s: float | None = None
    task_s: float | None = None
    window: int | None = None


Sink = Callable[[TaskRecord], None]


class TaskTimes:
    """The task records of one execution, and the costs they add up to per worker."""

    def __init__(self, *, link: bool) -> None:
        self._link = link  # False: local threads, where no transfer exists to measure
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._started = time.monotonic()
        self._last = self._started
        self._lost_ranges: set[tuple[int, int]] = set()  # (pass, start) of lost tasks
        self.sink: Sink | None = None  # where finished records go (the job's timeline)

    @property
    def link(self) -> bool:
        """Whether tasks cross a link (worker processes) or not (local threads)."""
        return self._link

    @property
    def started(self) -> float:
        """When the backend started: the span of `wait_s` counts from here."""
        return self._started

    def start(self) -> None:
        with self._lock:
            self._started = self._last = time.monotonic()

    def _worker(self, identity: str) -> _Worker:
        worker = self._workers.get(identity)
        if worker is None:
            worker = self._workers[identity] = _Worker()
        return worker

    def machine(self, identity: str, machine: dict[str, str], host: str | None = None) -> None:
        """Record the machine identity and the host (docs/contracts.md, section 18)
        that `identity` reported."""
        with self._lock:
            worker = self._worker(identity)
            worker.machine = dict(machine) if machine else None
            worker.host = host

    def machine_of(self, identity: str) -> dict[str, str] | None:
        """The machine identity `identity` reported, if any."""
        with self._lock:
            worker = self._workers.get(identity)
            return None if worker is None or worker.machine is None else dict(worker.machine)

    def clock(self, identity: str, sent: float, answered: float, worker_clock: float) -> None:
        """A Pong: a round trip and the worker's clock reading within it."""
        with self._lock:
            self._worker(identity).clock.observe(sent, answered, worker_clock)

    def dispatched(
        self,
        identity: str,
        tasks: Iterable[tuple[int, int, int, int, int | None]],
        now: float | None = None,
    ) -> None:
        """Open a record per `(task_id, pass_id, start, count, frame bytes)`, dispatched now."""
        now = time.monotonic() if now is None else now
        with self._lock:
            open_ = self._worker(identity).open
            for task_id, pass_id, start, count, size in tasks:
                open_[task_id] = TaskRecord(
                    identity, pass_id, task_id, start, count, now, bytes_out=size
                )

    def received(
        self,
        identity: str,
        task_id: int,
        busy_s: float,
        queued_s: float | None = None,
        now: float | None = None,
        *,
        started: float | None = None,
        size: int | None = None,
    ) -> tuple[float, float | None]:
        """Close a task's record with its answer: its compute seconds as counted (bounded by
        its age) and its seconds on the link (None where not measured). `started` is the
        worker's clock when a slot took it (None or 0: not said; local threads give the
        coordinator's own)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            worker = self._worker(identity)
            record = worker.open.pop(task_id, None)
            if record is None:  # not outstanding: refused by the job machine, kept here
                record = TaskRecord(identity, -1, task_id, -1, 0, now, outcome="duplicate")
            else:
                age = max(0.0, now - record.dispatched)
                busy_s = min(busy_s, age)
                if queued_s is not None and self._link:
                    record.link_s = max(0.0, age - busy_s - min(queued_s, age))
                if (record.pass_id, record.start) in self._lost_ranges:
                    record.outcome = "retried"
            record.received = now
            record.busy_s = busy_s
            record.queued_s = queued_s
            record.bytes_in = size
            self._place(worker, record, started)
            worker.sums.add(record)
            self._last = max(self._last, now)
            if self.sink is not None:
                self.sink(record)
        return busy_s, record.link_s

    def _place(self, worker: _Worker, record: TaskRecord, started: float | None) -> None:
        """The record's start and end on the coordinator's clock, where they are known."""
        assert record.busy_s is not None
        if not self._link:
            if started is not None:
                record.started, record.ended = started, started + record.busy_s
                record.clock_error_s = 0.0
            return
        offset = worker.clock.offset
        if started and offset is not None:
            record.started = started - offset
            record.ended = record.started + record.busy_s
            record.clock_error_s = worker.clock.error_s

    def lost(self, identity: str, now: float | None = None) -> None:
        """`identity` was dropped: its outstanding tasks are lost (their chunks go back to
        the queue, and a later task of the same range is `retried`)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            worker = self._workers.get(identity)
            if worker is None:
                return
            records, worker.open = list(worker.open.values()), {}
            for record in records:
                record.outcome = "lost"
                self._lost_ranges.add((record.pass_id, record.start))
                if self.sink is not None:
                    self.sink(record)

    def paced(self, identity: str, rtt_s: float | None, task_s: float | None, window: int) -> None:
        """Record a worker's latest estimates and window (see `aner_coord.job.pacing`)."""
        with self._lock:
            worker = self._worker(identity)
            worker.rtt_s, worker.task_s, worker.window = rtt_s, task_s, window

    def annotate(self, accounts: Iterable[WorkerAccount]) -> list[WorkerAccount]:
        """`accounts` with each worker's measured costs, machine and host filled in."""
        with self._lock:
            span = self._last - self._started
            out = []
            for account in accounts:
                worker = self._workers.get(account.identity)
                if worker is None:
                    out.append(account)
                    continue
                cost = costs(worker.sums, account.slots, span, link=self._link)
                out.append(
                    msgspec.structs.replace(
                        account,
                        compute_s=_round(cost.compute_s),
                        transfer_s=_round(cost.transfer_s),
                        wait_s=_round(cost.wait_s),
                        machine=worker.machine,
                        rtt_s=_round(worker.rtt_s),
                        task_s=_round(worker.task_s),
                        window=worker.window,
                        host=worker.host,
                    )
                )
            return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
