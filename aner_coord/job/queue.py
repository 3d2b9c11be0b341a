"""A job's CPU slots on this host: taken from the lease table (`aner_worker.leases`) before
any local worker starts, waited for in the QUEUED state, refused at once with `--no-wait`
(docs/contracts.md, section 13).

A job needs one slot per local thread worker (`local(workers=W)`: W) and, for a worker
group, the slots of its `local` (pipe) records; SSH and Slurm workers lease on their own
hosts (`aner parallel worker --max-slots N`). The table's size is this process's effective
CPU count (`inventory()`, the scheduler's hints included).

`Slots.take_now()` tries once, before anything is made: the usual case, free slots and
nobody queued, costs one `flock` per slot and a look at the queue. A job that must wait
takes a ticket in the table's queue (`LeaseTable.ticket`), publishes a QUEUED status naming
the holders (job id, computation, pid; never a directory) each time they change, and polls
every `POLL_S`, trying for its slots only once no live ticket is older than its own: jobs
start in the order they asked, so a wide job is never overtaken by narrow ones. A holder
killed with `kill -9` loses its locks in the kernel at once, so the next job starts within
one poll. A cancel while queued ends the job CANCELLED, nothing started.

A job given `--after DIR` (`After`) waits, QUEUED, for the job in DIR to complete before
it looks for its slots, and ends FAILED, saying why, if that job fails, is cancelled or is
deleted. `Ticket` is one job's place: `Ticket.take` tries at once, `Ticket.wait` waits
(`wait_turn`), and `QueuedPublisher` writes the statuses of the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aner_coord import jobdir, posix
from aner_coord.admission import Job
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.jobdir.status import STATUS_SCHEMA, JobState, QueuedBehind, StatusSnapshot
from aner_worker.leases import Holder, Lease, LeaseError, LeaseTable, Place, leases_enabled

POLL_S = 0.1  # how often a queued job looks at the table again


def slots_needed(job: Job) -> int:
    """The slots `job` takes on this host: its local threads, or its local pipe workers'."""
    records = job.workers.records
    if records is None:
        return sum(job.workers.slots.values())
    return sum(r.slots for r in records if r.transport == "local")


def busy_line(holders: Sequence[Holder], needed: int, size: int) -> str:
    """Who holds the slots, for a person: the refusal's words and the log's."""
    names = "; ".join(h.describe() for h in holders) or "nobody any more"
    return f"{needed} of this host's {size} CPU slot(s) are not free: held by {names}"


@dataclass
class Slots:
    """The lease of one job: what it needs, who it is, the table it takes from, and its
    place in the table's queue once it has had to wait."""

    table: LeaseTable
    needed: int
    holder: Holder
    place: Place | None = None

    @classmethod
    def for_job(cls, job: Job, job_id: str) -> Slots | None:
        """The job's lease to take, or None when it needs none (no local worker, leases
        switched off with ANER_LEASES=off, a system without flock). A table that cannot be
        used refuses the job (exit 2), naming its directory."""
        needed = slots_needed(job)
        if needed == 0 or not leases_enabled() or posix.missing() is not None:
            return None
        from aner_worker.inventory import current

        try:
            table = LeaseTable(current().effective_cpus)
        except LeaseError as exc:
            raise RequestError(f"{exc} (or ANER_LEASES=off to run without leases)") from None
        directory = str(job.output.absolute()) if job.output is not None else ""
        holder = Holder(os.getpid(), job_id, job.kind, needed, directory)
        return cls(table, needed, holder)

    def take_now(self, queue: bool = True) -> Lease | list[Holder]:
        """The slots, if free and it is this job's turn (no live ticket older than its
        own, or none at all before it has one); else whom it waits for, after taking a
        ticket where it has none (unless `queue` is false)."""
        try:
            return self._take(queue)
        except LeaseError as exc:
            raise RequestError(str(exc)) from None

    def _take(self, queue: bool) -> Lease | list[Holder]:
        waiting = self.table.queue()
        mine = self.place.number if self.place is not None else None
        ahead = [h for n, h in waiting if mine is None or n < mine]
        if not ahead:
            got = self.table.take(self.needed, self.holder)
            if isinstance(got, Lease):
                self.leave_queue()
                return got
        else:
            got = self._busy()
        if queue and self.place is None:
            self.place = self.table.ticket(self.holder)
        return got or ahead

    def _busy(self) -> list[Holder]:
        """Who holds slots now (read, not taken: it is not this job's turn)."""
        seen: dict[tuple[int, str], Holder] = {}
        for _, h in self.table.holders():
            if h is not None:
                seen.setdefault((h.pid, h.job), h)
        return list(seen.values())

    def leave_queue(self) -> None:
        if self.place is not None:
            self.place.release()
            self.place = None

    def take_or_refuse(self, wait: bool) -> Lease | list[Holder]:
        """The slots now, or their holders to wait for; with `wait` false, busy slots (or
        jobs queued before it) refuse the job (`refusal`)."""
        got = self.take_now(queue=wait)
        if isinstance(got, list) and not wait:
            raise self.refusal(got)
        return got

    def refusal(self, holders: Sequence[Holder]) -> AdmissionError:
        """`--no-wait`: the one line that names the holders."""
        return AdmissionError(
            busy_line(holders, self.needed, self.table.size)
            + ": wait for them, or run without --no-wait to queue"
        )


@dataclass(frozen=True)
class After:
    """The job this one runs after (`--after DIR`): it starts once that job is COMPLETED,
    and fails, saying why, once it is FAILED or CANCELLED, or its directory is gone. A job
    whose coordinator is offline is waited for (it may be resumed)."""

    path: Path
    job: str  # its id, from its manifest

    @classmethod
    def for_job(cls, job: Job) -> After | None:
        if job.request.after is None:
            return None
        path = Path(job.request.after).expanduser()
        try:
            manifest = jobdir.read_json(path, jobdir.MANIFEST)
        except OSError:
            raise RequestError(f"there is no job directory at {path} to run after") from None
        ident = manifest.get("job") if isinstance(manifest, dict) else None
        return cls(path, str(ident)[:12] if isinstance(ident, str) else "")

    def look(self) -> bool | str | Holder:
        """True once it completed; why this job fails once it cannot; else who it waits
        for."""
        try:
            status = jobdir.read_status(self.path)
        except FileNotFoundError:
            if not self.path.exists():
                return f"the job it was to run after, {self.path}, was deleted: it did not start"
            return Holder(0, self.job, "job", 0)  # not started yet
        except (OSError, jobdir.JobFileError) as exc:
            return f"the job it was to run after cannot be read ({exc}): it did not start"
        if status.state is JobState.COMPLETED:
            return True
        if status.terminal:
            return (
                f"the job it was to run after, {self.path}, ended {status.state.value}: "
                "it did not start"
            )
        return Holder(status.pid, self.job, status.kind, 0)


@dataclass(frozen=True)
class Turn:
    """How a queued job's wait ended: its lease (None without leases), or cancelled, or
    failed with the reason."""

    lease: Lease | None = None
    cancelled: bool = False
    failure: str | None = None


async def wait_turn(
    slots: Slots | None,
    after: After | None,
    holders: list[Holder],
    cancel: asyncio.Event,
    publish: QueuedPublisher,
) -> Turn:
    """Wait, QUEUED, for the job to run after (if any) and then for the slots (if any);
    publish a QUEUED status at the start and whenever who it waits for changes; poll every
    POLL_S; end at once on `cancel`."""
    published: list[Holder] | None = None
    while True:
        if cancel.is_set():
            return Turn(cancelled=True)
        seen = after.look() if after is not None else True
        if isinstance(seen, str):
            return Turn(failure=seen)
        if isinstance(seen, Holder):
            holders = [seen]
        elif slots is not None and (published is not None or after is not None):
            # (a job without `after` comes here because its slots were just found taken)
            got = slots.take_now()
            if isinstance(got, Lease):
                return Turn(lease=got)
            holders = got
        elif slots is None:
            return Turn()
        if holders != published:
            publish.queued(holders)
            published = holders
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cancel.wait(), POLL_S)


@dataclass
class Ticket:
    """A job's place on this host: its slots and the job it runs after, the lease once it
    holds one, and whom it must wait for first (None: nobody, it may start now)."""

    slots: Slots | None
    after: After | None
    lease: Lease | None
    waiting: list[Holder] | None

    @classmethod
    def take(cls, job: Job, job_id: str, wait: bool) -> Ticket:
        """Try now, before anything is made: the slots if free, else whom to wait for; with
        `wait` false, busy slots refuse the job (exit 2)."""
        slots = Slots.for_job(job, job_id)
        after = After.for_job(job)
        if after is not None:
            if not wait:
                raise RequestError("--after waits for another job: give it without --no-wait")
            return cls(slots, after, None, [])
        got = slots.take_or_refuse(wait) if slots is not None else None
        if isinstance(got, list):
            return cls(slots, None, None, got)
        return cls(slots, None, got, None)

    async def wait(self, cancel: asyncio.Event, publish: QueuedPublisher) -> Turn:
        try:
            turn = await wait_turn(self.slots, self.after, self.waiting or [], cancel, publish)
        finally:
            if self.slots is not None:
                self.slots.leave_queue()  # started, cancelled or failed: out of the queue
        self.lease = turn.lease
        return turn

    def release(self) -> None:
        if self.slots is not None:
            self.slots.leave_queue()
        if self.lease is not None:
            self.lease.release()


class QueuedPublisher:
    """The snapshots of a job while it waits: QUEUED, then CANCELLED if it never started.
    Their `seq` numbers come first; the coordinator continues from `seq`."""

    def __init__(
        self,
        job: Job,
        observers: Sequence[Callable[[StatusSnapshot], None]],
        first_seq: int = 0,
    ) -> None:
        self.job = job
        self.observers = observers
        self.seq = first_seq
        self.created = time.time()
        self.started = time.monotonic()

    def queued(self, holders: Sequence[Holder]) -> StatusSnapshot:
        behind = [QueuedBehind(h.job, h.kind, h.pid, h.slots) for h in holders]
        return self._publish(JobState.QUEUED, behind)

    def ended(self, turn: Turn) -> StatusSnapshot:
        """The last status of a job that never started: CANCELLED, or FAILED saying why."""
        if turn.failure is not None:
            return self._publish(JobState.FAILED, [], turn.failure)
        return self._publish(JobState.CANCELLED, [])

    def _publish(
        self, state: JobState, behind: list[QueuedBehind], error: str | None = None
    ) -> StatusSnapshot:
        self.seq += 1
        admitted = self.job.admitted
        snapshot = StatusSnapshot(
            schema=STATUS_SCHEMA,
            seq=self.seq,
            state=state,
            kind=self.job.kind,
            pid=os.getpid(),
            created_at=self.created,
            submitted_at=self.created,
            updated_at=time.time(),
            elapsed_s=round(time.monotonic() - self.started, 6),
            requested=admitted.items,
            passes=admitted.passes,
            pass_index=0,
            phase="queued" if state is JobState.QUEUED else "ended while queued",
            accepted=0,
            accepted_in_pass=0,
            chunks_total=0,
            chunks_done=0,
            in_flight=0,
            throughput=None,
            eta_s=None,
            workers=[],
            error=error,
            unit=self.job.computation.unit,
            work=admitted.planned_work,
            work_upper_bound=admitted.upper_bound,
            notes=list(self.job.notes),
            plan=self.job.plan_line,
            queued_behind=behind,
        )
        for observer in self.observers:
            observer(snapshot)
        return snapshot
