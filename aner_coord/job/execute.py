"""From an admitted job to a result: the coordinator run inside an optional job directory.

`execute(job)` runs the coordinator inside `job_files`, which creates the job directory
(when the request names one) through a directory descriptor, locks it, writes the manifest
and starts the status writer, the coordinator's first observer. The run honours `aner
parallel cancel` (a `cancel-request` file) and writes `result.json` before `status.json` may
say COMPLETED. A run that could not start (up to and including its first status, which a
full disk may refuse) leaves no directory behind and fails with the one line of the write
that failed (exit 3); a job directory that can no longer be written later (full disk,
deleted) fails the job with one line (exit 3).

A new job gets its identity here: random bytes that the manifest records (with the SHA256
of `request.json`) and that every record of its ledger carries. Every accepted chunk and
committed pass goes to that ledger, made durable by the status writer's thread before each
status it writes. `resume` (see `aner_coord.job.resume`) runs an existing job directory
again from its ledger: the same files, the same identity, one more coordinator. A run
with checkpoints (`Checkpoints`, Dense) also leaves its committed state in the directory
(`aner_coord.job.checkpoints`): periodically, and as soon as it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from aner_coord import jobdir
from aner_coord.admission import Job
from aner_coord.computations.base import WritesFiles
from aner_coord.job import preflight
from aner_coord.job.checkpoints import Checkpointer, Policy, Restored
from aner_coord.job.coordinator import Coordinator, JobReport, Observer
from aner_coord.job.events import ShellFailed
from aner_coord.job.pool import WorkerPool
from aner_coord.job.queue import QueuedPublisher, Ticket, Turn
from aner_coord.jobdir import index, ledger
from aner_coord.jobdir.manifest import encode_manifest, manifest_of
from aner_coord.jobdir.results import encode_result
from aner_coord.jobdir.status import JobState
from aner_coord.jobdir.timeline import TimelineWriter, timeline_wanted
from aner_coord.requests import encode_request, with_absolute_paths

# The request as given, kept for `resume`. It names the cluster file's path, which is
# private: unlike the manifest, status and result, it is not meant to be published.
REQUEST = jobdir.REQUEST


@dataclass(frozen=True)
class Resumption:
    """An existing job directory, checked and locked by `aner_coord.job.resume`."""

    directory: jobdir.JobDir
    lock: jobdir.JobLock
    recovered: ledger.Recovered
    last_seq: int
    job_key: bytes  # the job's identity, as its manifest and ledger record it
    checkpoint: Restored | None = None  # the checkpoint the ledger vouches for, if any


@dataclass(frozen=True)
class JobFiles:
    """A job directory ready for one coordinator: locked, with its ledger open and its
    status writer started (the writer is the job's first observer)."""

    directory: jobdir.JobDir
    ledger: ledger.LedgerWriter
    writer: jobdir.StatusWriter
    checkpoints: Checkpointer
    timeline: TimelineWriter | None  # None: timelines switched off (`ANER_TIMELINE`)

    def finish(self, report: JobReport) -> None:
        """What the run leaves: the whole failure message where status.json's is cut, the
        computation's own files, then `result.json`, both before `status.json` may say
        COMPLETED."""
        if report.error_detail is not None:
            self.directory.write_bytes(jobdir.ERROR_DETAIL, report.error_detail.encode() + b"\n")
        if isinstance(report.run, WritesFiles):
            for name, data in report.run.files(report.state).items():
                self.directory.write_bytes(name, data)
        if report.state is JobState.COMPLETED:
            self.directory.write_bytes(jobdir.RESULT, encode_result(report.result))
            self.writer.commit_completed()


@contextlib.asynccontextmanager
async def job_files(
    job: Job,
    resume: Resumption | None,
    on_error: Callable[[jobdir.JobDirError], None],
    policy: Policy,
    key: bytes,
    with_timeline: bool = True,
) -> AsyncIterator[JobFiles | None]:
    """The job directory of one run, or None for a job without one: a new job's is created,
    locked and given its manifest and request; a resumed job's comes checked and locked.
    A new directory that fails before its first status (nothing ran) is removed; whatever
    happens, the last status is on disk before the lock goes."""
    if resume is not None:
        directory, lock, key = resume.directory, resume.lock, resume.job_key
    elif job.output is not None:
        directory, lock = _create(job, key)
    else:
        yield None
        return
    held: jobdir.JobLock | None = lock
    book: ledger.LedgerWriter | None = None
    writer: jobdir.StatusWriter | None = None
    timeline: TimelineWriter | None = None
    try:
        recovered = resume.recovered if resume is not None else None
        book = ledger.LedgerWriter(
            directory, key, computation=job.kind, at=time.time(), recovered=recovered
        )
        if resume is not None:
            book.append(ledger.Resumed(time.time(), os.getpid()))
        # A resumed job's coordinator appends the next segment to the same timeline.
        segment = resume.recovered.resumes if resume is not None else 0  # counts this one
        if with_timeline:
            timeline = TimelineWriter(directory, segment)
        # The ledger before each status (what it reports is durable first), the timeline
        # after it (on a nearly full disk the job's own files come first).
        writer = jobdir.StatusWriter(
            directory,
            on_error=on_error,
            before_write=book.sync,
            after_write=timeline.sync if timeline is not None else None,
        )
        restored = resume.checkpoint if resume is not None else None
        checkpoints = Checkpointer(directory, book, policy, restored=restored)
        yield JobFiles(directory, book, writer, checkpoints, timeline)
    except BaseException:
        if resume is None and held is not None and not directory.exists(jobdir.STATUS):
            # Failed before its first status (nothing ran): leave no half-made directory.
            held.release()
            held = None
            directory.remove()
        raise
    finally:
        # The last status is on disk before the lock goes: a monitor that can take the lock
        # then reads the final state.
        try:
            if writer is not None:
                await writer.aclose()
            if book is not None:
                book.close()
            if timeline is not None:
                timeline.close()
        finally:
            if held is not None:
                held.release()
            directory.close()


def _create(job: Job, key: bytes) -> tuple[jobdir.JobDir, jobdir.JobLock]:
    """A new job directory, locked, with its manifest and request, for the job of identity
    `key`; a run that could not start leaves nothing behind."""
    assert job.output is not None
    request = encode_request(with_absolute_paths(job.request))
    digest = "sha256:" + hashlib.sha256(request).hexdigest()
    manifest = encode_manifest(manifest_of(job, job_key=key, request_sha256=digest))
    directory = jobdir.JobDir.create(job.output)
    lock: jobdir.JobLock | None = None
    try:
        lock = jobdir.JobLock(directory)
        lock.acquire()
        directory.write_bytes(jobdir.MANIFEST, manifest)
        directory.write_bytes(REQUEST, request)
    except BaseException:
        if lock is not None:
            lock.release()
        directory.remove()
        raise
    return directory, lock


async def execute(
    job: Job,
    *,
    observers: Sequence[Observer] = (),
    cancel: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
    resume: Resumption | None = None,
    pool: WorkerPool | None = None,
    on_directory: Callable[[jobdir.JobDir], None] | None = None,
    wait: bool = True,
) -> JobReport:
    """Run an admitted job; with an output directory, write its files as docs/contracts.md, section
    7 says and honour `aner parallel cancel` as well as `cancel`. With `resume`, continue the job
    in that (checked, locked) directory from its ledger instead. With `pool` (a session's),
    a worker group's processes are taken from it and given back afterwards. `on_ready` is
    called once the job's first status is on disk; `on_directory` before that, with the
    job directory this run holds (a detached coordinator adopts its log through that very
    descriptor, never by path).

    The job's local CPU slots come first (`aner_coord.job.queue`), and the job it runs after
    (`--after`) before them: while another job holds them (or has not completed) this one is
    QUEUED, or, with `wait=False`, refused at once (AdmissionError, exit 2, nothing made);
    the slots are held until the run ends. Before both, a job that asks for strict bits has
    its group's kernel sets checked (`aner_coord.job.preflight`)."""
    if not preflight.wanted(job):
        return await _execute(job, observers, cancel, on_ready, resume, pool, on_directory, wait)
    # --strict-bits: the group's kernel sets are checked first; its workers wait in a pool.
    own_pool = WorkerPool() if pool is None else None
    kept = pool if pool is not None else own_pool
    assert kept is not None
    try:
        await preflight.check_kernel_sets(job, kept)
        return await _execute(job, observers, cancel, on_ready, resume, kept, on_directory, wait)
    finally:
        if own_pool is not None:
            await own_pool.close()


async def _execute(
    job: Job,
    observers: Sequence[Observer],
    cancel: asyncio.Event | None,
    on_ready: Callable[[], None] | None,
    resume: Resumption | None,
    pool: WorkerPool | None,
    on_directory: Callable[[jobdir.JobDir], None] | None,
    wait: bool,
) -> JobReport:
    cancel = cancel if cancel is not None else asyncio.Event()
    policy = Policy.from_environ()  # a bad setting is refused before anything starts
    with_timeline = timeline_wanted()
    coordinator: Coordinator | None = None
    key = resume.job_key if resume is not None else ledger.new_job_key()
    ticket = Ticket.take(job, ledger.job_id(key), wait)

    def writer_failed(error: jobdir.JobDirError) -> None:  # on the writer's thread
        if coordinator is not None:
            coordinator.deliver(ShellFailed("writing the job directory", str(error)))

    if resume is None and ticket.waiting is None:
        # A new job's workers start first (threads load the kernel, processes start and shake
        # hands) and the job directory is made meanwhile; what they report waits for startup.
        coordinator = Coordinator(job, cancel=cancel, pool=pool)
        coordinator.launch()
    try:
        async with job_files(job, resume, writer_failed, policy, key, with_timeline) as files:
            chain = _observers(files, key, observers, on_ready, on_directory)
            first_seq = resume.last_seq if resume is not None else 0
            submitted: float | None = None
            if ticket.waiting is not None:
                queue = QueuedPublisher(job, chain, first_seq)
                async with _cancel_requests(files, cancel):
                    turn = await ticket.wait(cancel, queue)
                if turn.cancelled or turn.failure is not None:
                    return _ended_while_queued(files, queue, turn)
                first_seq = queue.seq
                submitted = queue.created
            if coordinator is None:
                coordinator = _late_coordinator(
                    job,
                    resume,
                    chain,
                    files,
                    cancel=cancel,
                    pool=pool,
                    first_seq=first_seq,
                    submitted_at=submitted,
                )
            else:
                coordinator.attach(
                    chain,
                    files.ledger if files is not None else None,
                    files.checkpoints if files is not None else None,
                    files.timeline if files is not None else None,
                )
            async with _cancel_requests(files, cancel):
                report = await coordinator.run()
            if files is not None:
                failed = files.writer.first_write_failed
                if failed is not None:
                    raise failed  # the job never started: its new directory goes
                files.finish(report)
            return report
    except BaseException:
        if coordinator is not None:
            # Workers launched for a run that never began; a no-op once the run has ended.
            await coordinator.shutdown()
        raise
    finally:
        ticket.release()


def _observers(
    files: JobFiles | None,
    key: bytes,
    observers: Sequence[Observer],
    on_ready: Callable[[], None] | None,
    on_directory: Callable[[jobdir.JobDir], None] | None,
) -> list[Observer]:
    """The job's observers, its status writer first; a job directory is registered in the
    job index (`aner parallel jobs`) and handed to `on_directory` first."""
    chain: list[Observer] = [*observers]
    if on_ready is not None:
        chain.append(_Once(on_ready))
    if files is not None:
        index.register(files.directory.path, key)
        if on_directory is not None:
            on_directory(files.directory)
        chain.insert(0, files.writer)
    return chain


def _late_coordinator(
    job: Job,
    resume: Resumption | None,
    observers: list[Observer],
    files: JobFiles | None,
    *,
    cancel: asyncio.Event,
    pool: WorkerPool | None,
    first_seq: int,
    submitted_at: float | None = None,
) -> Coordinator:
    """The coordinator of a job that resumes, or that waited for its slots: made once its
    directory is ready, its statuses numbered after those already written; a new job's
    workers start now."""
    coordinator = Coordinator(
        job,
        observers=observers,
        cancel=cancel,
        ledger=files.ledger if files is not None else None,
        recovered=resume.recovered if resume is not None else None,
        first_seq=first_seq,
        pool=pool,
        checkpoint=resume.checkpoint if resume is not None else None,
        checkpoints=files.checkpoints if files is not None else None,
        timeline=files.timeline if files is not None else None,
        submitted_at=submitted_at,
    )
    if resume is None:
        coordinator.launch()
    return coordinator


def _cancel_requests(
    files: JobFiles | None, cancel: asyncio.Event
) -> contextlib.AbstractAsyncContextManager[object]:
    """`aner parallel cancel` (a `cancel-request` file) sets `cancel`, for a job with a
    directory."""
    if files is None:
        return contextlib.nullcontext()
    return jobdir.cancel_requests(files.directory, cancel)


def _ended_while_queued(files: JobFiles | None, queue: QueuedPublisher, turn: Turn) -> JobReport:
    """A job cancelled while queued (CANCELLED), or whose job to run after failed or was
    cancelled (FAILED, saying so): nothing computed."""
    snapshot = queue.ended(turn)
    report = JobReport(
        state=snapshot.state,
        error=snapshot.error,
        snapshot=snapshot,
        seconds=snapshot.elapsed_s,
    )
    if files is not None:
        files.finish(report)
    return report


class _Once:
    """Observer calling `callback()` at the first snapshot, once."""

    where = "getting the job ready"  # how its failure is named in the job's error

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._fired = False

    def __call__(self, _snapshot: object) -> None:
        if not self._fired:
            self._fired = True
            self._callback()
