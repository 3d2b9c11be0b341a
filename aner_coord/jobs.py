"""From an admitted job to a result: the coordinator run inside an optional job directory.

`execute(job)` creates the job directory (when the request names one), locks it, writes the
manifest, runs the coordinator with the status writer as an observer, honours `aner
parallel cancel` (a `cancel-request` file), and writes `result.json` before `status.json`
may say COMPLETED.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from aner_coord import jobdir
from aner_coord.admission import Job
from aner_coord.computations.base import WritesFiles
from aner_coord.coordinator import Coordinator, JobReport, Observer
from aner_coord.manifest import encode_manifest, manifest_of
from aner_coord.results import encode_result
from aner_coord.status import JobState


async def execute(
    job: Job,
    *,
    observers: Sequence[Observer] = (),
    cancel: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> JobReport:
    """Run an admitted job; with an output directory, write its files as SPEC section 7 says
    and honour `aner parallel cancel` as well as `cancel`."""
    observers = list(observers)
    cancel = cancel if cancel is not None else asyncio.Event()
    lock: jobdir.JobLock | None = None
    writer: jobdir.StatusWriter | None = None
    out = job.output
    if out is not None:
        jobdir.create_job_dir(out)
        lock = jobdir.JobLock(out)
        lock.acquire()
        jobdir.write_atomic(out / jobdir.MANIFEST, encode_manifest(manifest_of(job)))
        writer = jobdir.StatusWriter(out)
        observers.insert(0, writer)
    try:
        if on_ready is not None:
            observers.append(_once(on_ready))
        coordinator = Coordinator(job, observers=observers, cancel=cancel)
        async with (
            jobdir.cancel_requests(out, cancel) if out is not None else contextlib.nullcontext()
        ):
            report = await coordinator.run()
        if out is not None and isinstance(report.run, WritesFiles):
            report.run.write_files(out, report.state)  # a model, say, before result.json
        if out is not None and report.state is JobState.COMPLETED:
            jobdir.write_atomic(out / jobdir.RESULT, encode_result(report.result))
            assert writer is not None
            writer.commit_completed()
        return report
    finally:
        if lock is not None:
            lock.release()


def _once(callback: Callable[[], None]) -> Observer:
    fired = False

    def observer(_snapshot: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            callback()

    return observer
