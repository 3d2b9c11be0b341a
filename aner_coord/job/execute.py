"""From an admitted job to a result: the coordinator run inside an optional job directory.

`execute(job)` creates the job directory (when the request names one) through a directory
descriptor, locks it, writes the manifest, runs the coordinator with the status writer as
an observer, honours `aner parallel cancel` (a `cancel-request` file), and writes
`result.json` before `status.json` may say COMPLETED. A run that could not start leaves no
directory behind; a job directory that can no longer be written (full disk, deleted) fails
the job with one line (exit 3).

Every accepted chunk and committed pass goes to the job's ledger, made durable by the
status writer's thread before each status it writes. `resume` (see `aner_coord.job.resume`)
runs an existing job directory again from its ledger: the same files, one more coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aner_coord import jobdir
from aner_coord.admission import Job
from aner_coord.computations.base import WritesFiles
from aner_coord.job.coordinator import Coordinator, JobReport, Observer
from aner_coord.job.events import ShellFailed
from aner_coord.job.pool import WorkerPool
from aner_coord.jobdir import ledger
from aner_coord.jobdir.manifest import encode_manifest, manifest_of
from aner_coord.jobdir.results import encode_result
from aner_coord.jobdir.status import JobState
from aner_coord.requests import encode_request, with_absolute_paths

# The request as given, kept for `resume`. It names the cluster file's path, which is
# private: unlike the manifest, status and result, it is not meant to be published.
REQUEST = "request.json"


@dataclass(frozen=True)
class Resumption:
    """An existing job directory, checked and locked by `aner_coord.job.resume`."""

    directory: jobdir.JobDir
    lock: jobdir.JobLock
    recovered: ledger.Recovered
    last_seq: int


async def execute(
    job: Job,
    *,
    observers: Sequence[Observer] = (),
    cancel: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
    resume: Resumption | None = None,
    pool: WorkerPool | None = None,
) -> JobReport:
    """Run an admitted job; with an output directory, write its files as SPEC section 7 says
    and honour `aner parallel cancel` as well as `cancel`. With `resume`, continue the job
    in that (checked, locked) directory from its ledger instead. With `pool` (a session's),
    a worker group's processes are taken from it and given back afterwards."""
    observers = list(observers)
    cancel = cancel if cancel is not None else asyncio.Event()
    directory: jobdir.JobDir | None = None
    lock: jobdir.JobLock | None = None
    writer: jobdir.StatusWriter | None = None
    coordinator: Coordinator | None = None

    def writer_failed(error: jobdir.JobDirError) -> None:  # on the writer's thread
        if coordinator is not None:
            coordinator.deliver(ShellFailed("writing the job directory", str(error)))

    book: ledger.LedgerWriter | None = None
    recovered: ledger.Recovered | None = None
    first_seq = 0
    if resume is None:
        # A new job's workers start first (threads load the kernel, processes start and shake
        # hands) and the job directory is made meanwhile; what they report waits for startup.
        coordinator = Coordinator(job, cancel=cancel, pool=pool)
        coordinator.launch()
    try:
        if resume is not None:
            directory, lock = resume.directory, resume.lock
            recovered, first_seq = resume.recovered, resume.last_seq
        elif job.output is not None:
            directory = jobdir.JobDir.create(job.output)
            try:
                lock = jobdir.JobLock(directory)
                lock.acquire()
                directory.write_bytes(jobdir.MANIFEST, encode_manifest(manifest_of(job)))
                directory.write_bytes(REQUEST, encode_request(with_absolute_paths(job.request)))
            except BaseException:
                if lock is not None:
                    lock.release()
                directory.remove()  # a run that could not start leaves nothing behind
                raise
        if directory is not None:
            book = ledger.LedgerWriter(directory)
            if resume is not None:
                book.append(ledger.Resumed(time.time(), os.getpid()))
            writer = jobdir.StatusWriter(directory, on_error=writer_failed, before_write=book.sync)
            observers.insert(0, writer)
    except BaseException:
        if coordinator is not None:
            await coordinator.shutdown()  # the launched workers
        raise
    try:
        if on_ready is not None:
            observers.append(_once(on_ready))
        if coordinator is None:
            coordinator = Coordinator(
                job,
                observers=observers,
                cancel=cancel,
                ledger=book,
                recovered=recovered,
                first_seq=first_seq,
                pool=pool,
            )
        else:
            coordinator.attach(observers, book)
        async with (
            jobdir.cancel_requests(directory, cancel)
            if directory is not None
            else contextlib.nullcontext()
        ):
            report = await coordinator.run()
        if directory is not None and isinstance(report.run, WritesFiles):
            for name, data in report.run.files(report.state).items():  # before result.json
                directory.write_bytes(name, data)
        if directory is not None and report.state is JobState.COMPLETED:
            directory.write_bytes(jobdir.RESULT, encode_result(report.result))
            assert writer is not None
            writer.commit_completed()
        return report
    except BaseException:
        if coordinator is not None:
            # Workers launched for a run that never began; a no-op once the run has ended.
            await coordinator.shutdown()
        if directory is not None and resume is None and not directory.exists(jobdir.STATUS):
            # Failed before its first status (nothing ran): leave no half-made directory.
            if lock is not None:
                lock.release()
                lock = None
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
        finally:
            if lock is not None:
                lock.release()
            if directory is not None:
                directory.close()


def _once(callback: Callable[[], None]) -> Observer:
    fired = False

    def observer(_snapshot: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            callback()

    return observer
