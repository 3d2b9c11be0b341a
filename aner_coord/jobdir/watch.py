"""Watching a job directory: `watch_job_dir` for monitors (watchfiles, imported only here),
and `cancel_requests`, through which a running coordinator notices the `cancel-request`
file that `aner parallel cancel` writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Collection

from aner_coord.jobdir.directory import CANCEL_REQUEST, JobDir, PathLike, opened

log = logging.getLogger("aner.jobdir")


WATCH_TICK_MS = 1000


CANCEL_POLL_S = 0.1  # how often a running coordinator looks for `cancel-request`


async def watch_job_dir(
    job: JobDir | PathLike, names: Collection[str], stop: asyncio.Event
) -> AsyncGenerator[None, None]:
    """Yield whenever one of `names` in the job directory changes, and at least every
    WATCH_TICK_MS, until `stop` is set or the directory is deleted.

    The tick lets callers re-check what they care about (a file's presence, the lock) even
    when no event comes: a change made before the watch was set up, or a lock released by a
    killed process. Without inotify (limits reached, odd filesystems) it degrades to polling
    on the same tick rather than failing. Given a JobDir, the watch follows that directory
    (through /proc/self/fd) even if it is renamed.
    """
    from watchfiles import awatch

    def relevant(_change: object, path: str) -> bool:
        return os.path.basename(path) in names

    where = job.watch_path if isinstance(job, JobDir) else str(job)
    try:
        changes = awatch(
            where,
            watch_filter=relevant,
            step=50,
            rust_timeout=WATCH_TICK_MS,
            yield_on_timeout=True,
            stop_event=stop,
            recursive=False,
        )
        async with contextlib.aclosing(changes):
            async for _ in changes:
                yield
                if isinstance(job, JobDir) and job.gone():
                    return
        return
    except (OSError, RuntimeError) as exc:
        if isinstance(job, JobDir) and job.gone():
            return
        log.warning("cannot watch the job directory (%s); polling instead", exc)
    while not stop.is_set():
        yield
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WATCH_TICK_MS / 1000)


@contextlib.asynccontextmanager
async def cancel_requests(job: JobDir | PathLike, cancel: asyncio.Event) -> AsyncIterator[None]:
    """While the body runs, `cancel-request` appearing in the job directory sets `cancel`.
    A deleted directory ends the watch quietly: the status writer reports that.

    It looks every CANCEL_POLL_S (one `fstatat` on the directory's descriptor) rather than
    through `watch_job_dir`: importing and starting watchfiles would cost a short job more
    than a lifetime of polls, and a tenth of a second is prompt for a cancel."""
    stop = asyncio.Event()

    async def watch(directory: JobDir) -> None:
        while not stop.is_set():
            if directory.exists(CANCEL_REQUEST):
                log.info("cancel requested through %s", CANCEL_REQUEST)
                cancel.set()
                return
            if directory.gone():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CANCEL_POLL_S)

    with opened(job) as directory:
        watcher = asyncio.create_task(watch(directory))
        try:
            yield
        finally:
            stop.set()
            await watcher
