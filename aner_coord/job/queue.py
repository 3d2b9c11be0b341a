"""A job's CPU slots on this host: taken from the lease table (`aner_worker.leases`) before
any local worker starts, waited for in the QUEUED state, refused at once with `--no-wait`
(docs/contracts.md, section 13).

A job needs one slot per local thread worker (`local(workers=W)`: W) and, for a worker
group, the slots of its `local` (pipe) records; SSH and Slurm workers lease on their own
hosts (`aner parallel worker --max-slots N`). The table's size is this process's effective
CPU count (`inventory()`, the scheduler's hints included).

`Slots.take_now()` tries once, before anything is made: the usual case, free slots, costs
one `flock` per slot. A job that must wait publishes a QUEUED status naming the holders
(job id, computation, pid; never a directory) each time they change, and polls every
`POLL_S`: a holder killed with `kill -9` loses its locks in the kernel at once, so the next
job starts within one poll. A cancel while queued ends the job CANCELLED, nothing started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aner_coord import posix
from aner_coord.admission import Job
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.jobdir.status import STATUS_SCHEMA, JobState, QueuedBehind, StatusSnapshot
from aner_worker.leases import Holder, Lease, LeaseError, LeaseTable, leases_enabled

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
    """The lease of one job: what it needs, who it is, and the table it takes from."""

    table: LeaseTable
    needed: int
    holder: Holder

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

    def take_now(self) -> Lease | list[Holder]:
        try:
            return self.table.take(self.needed, self.holder)
        except LeaseError as exc:
            raise RequestError(str(exc)) from None

    def take_or_refuse(self, wait: bool) -> Lease | list[Holder]:
        """The slots now, or their holders to wait for; with `wait` false, busy slots
        refuse the job (`refusal`)."""
        got = self.take_now()
        if isinstance(got, list) and not wait:
            raise self.refusal(got)
        return got

    def refusal(self, holders: Sequence[Holder]) -> AdmissionError:
        """`--no-wait`: the one line that names the holders."""
        return AdmissionError(
            busy_line(holders, self.needed, self.table.size)
            + ": wait for them, or run without --no-wait to queue"
        )

    async def wait(
        self,
        holders: list[Holder],
        cancel: asyncio.Event,
        publish: QueuedPublisher,
    ) -> Lease | None:
        """Poll until the slots are ours (the lease) or `cancel` is set (None); publish a
        QUEUED status at the start and whenever the holders change."""
        publish.queued(holders)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancel.wait(), POLL_S)
            if cancel.is_set():
                return None
            got = self.take_now()
            if isinstance(got, Lease):
                return got
            if got != holders:
                holders = got
                publish.queued(holders)


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

    def cancelled(self) -> StatusSnapshot:
        return self._publish(JobState.CANCELLED, [])

    def _publish(self, state: JobState, behind: list[QueuedBehind]) -> StatusSnapshot:
        self.seq += 1
        admitted = self.job.admitted
        snapshot = StatusSnapshot(
            schema=STATUS_SCHEMA,
            seq=self.seq,
            state=state,
            kind=self.job.kind,
            pid=os.getpid(),
            created_at=self.created,
            updated_at=time.time(),
            elapsed_s=round(time.monotonic() - self.started, 6),
            requested=admitted.items,
            passes=admitted.passes,
            pass_index=0,
            phase="queued" if state is JobState.QUEUED else "cancelled while queued",
            accepted=0,
            accepted_in_pass=0,
            chunks_total=0,
            chunks_done=0,
            in_flight=0,
            throughput=None,
            eta_s=None,
            workers=[],
            unit=self.job.computation.unit,
            work=admitted.planned_work,
            work_upper_bound=admitted.upper_bound,
            notes=list(self.job.notes),
            queued_behind=behind,
        )
        for observer in self.observers:
            observer(snapshot)
        return snapshot
