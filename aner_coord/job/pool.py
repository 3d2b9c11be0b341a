"""A session's worker processes, kept between its jobs (see `aner_coord.session`).

A `ProcessBackend` given a `WorkerPool` takes each worker's live link (transport and
`CoordinatorConnection`, past their handshake) from the pool instead of starting the worker
again, and at the end of its job gives back every link it may: one whose worker was not lost
and has nothing outstanding, so no task of the ended job can still be running there. A link
that is not given back (lost, or with tasks in flight when a job was cancelled or failed) is
shut down as in a one-off job, and the next job starts that worker afresh.

What a connection carries from job to job, and why that is sound: the handshake (done
once; its Hello names the first job's kernel, and a worker loads any other kernel on its
first task); the ping nonces, which keep counting; nothing outstanding, which is what lets
each job number its passes and tasks from 0 again. The only per-job state a worker holds is
the parameters of its latest pass, which every job replaces with its first Params (the
backend sends them to each worker before its first task of a job, whatever the pass id).

Between jobs nobody else reads a kept worker, so the pool does: a watcher per idle link
notices end of file (the worker exited or was killed) and reaps the process. The next job
that wants the worker hears of the loss from `take()`: with `restart` it is recorded in
`losses` (for the session to report) and logged, and the worker is started again; without,
`take()` raises `LostBetweenJobs` and the job counts it as a lost worker (its `retries`
decide). A worker killed just before a call may not have been noticed yet, so `take()` first
pings it and waits for the Pong (or its end of file): one round trip per worker and call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from aner_coord.clusterfile import WorkerRecord
from aner_coord.job.link import LinkClosed, WorkerLink
from aner_coord.jobdir.status import WorkerLoss
from aner_coord.transports.base import TransportError
from protocol import Ponged, ProtocolError, RemoteProtocolError

log = logging.getLogger("aner.coordinator")

SHUTDOWN_CLOSE_S = 5.0
# How long a lost worker, or one that is going anyway, may take to exit once its stdin is
# closed, before a signal (a job's backend and a session's pool alike).
LOST_CLOSE_S = 1.0
# A kept worker answers a ping from its reading thread at once; one that does not within
# this long is counted as lost (stalled, or its link is cut) and started again.
PROBE_S = 10.0
BETWEEN_JOBS = "between calls"


class LostBetweenJobs(Exception):
    """A kept worker went away while the session was idle, and the pool may not restart it."""


@dataclass
class _Idle:
    link: WorkerLink
    watcher: asyncio.Task[None] | None = None
    lost: str | None = None  # why the worker is gone, once the watcher saw it go
    at: float = 0.0
    ponged: asyncio.Event = field(default_factory=asyncio.Event)


def _same_worker(a: WorkerRecord, b: WorkerRecord) -> bool:
    # The OpenBLAS settings too: a worker started with other ones computes other bits.
    return (a.transport, a.endpoint, a.executable, a.slots, a.slurm, a.blas) == (
        b.transport,
        b.endpoint,
        b.executable,
        b.slots,
        b.slurm,
        b.blas,
    )


@dataclass
class WorkerPool:
    """Idle links by worker identity, on one event loop (the session's)."""

    restart: bool = True
    losses: list[WorkerLoss] = field(default_factory=list)
    _idle: dict[str, _Idle] = field(default_factory=dict)
    _closed: bool = False
    _shutting: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def idle(self) -> tuple[str, ...]:
        return tuple(self._idle)

    async def take(self, record: WorkerRecord) -> WorkerLink | None:
        """The kept link of `record`'s worker, or None when it must be started afresh.
        Raises `LostBetweenJobs` for a worker lost while idle when the pool may not restart."""
        idle = self._idle.pop(record.identity, None)
        if idle is None:
            return None
        # A job may end (and cancel this) while a worker is being taken: the link then goes
        # back to the pool, or is shut down, never dropped with its process still running.
        if idle.watcher is not None:
            try:
                await self._probe(idle, idle.watcher)
            except asyncio.CancelledError:
                self._idle[record.identity] = idle  # still watched; the next job probes again
                raise
            idle.watcher.cancel()
            try:
                await asyncio.gather(idle.watcher, return_exceptions=True)
            except asyncio.CancelledError:
                self._shut_later(idle.link, "job ended")
                raise
        if idle.lost is None and _same_worker(idle.link.record, record):
            return idle.link
        await idle.link.transport.close(timeout=LOST_CLOSE_S)
        if idle.lost is None:
            return None  # the cluster file now says something else about this worker
        if not self.restart:  # the job counts the loss, and reports it if it survives it
            raise LostBetweenJobs(f"lost between calls: {idle.lost}")
        self.losses.append(WorkerLoss(record.identity, "idle", idle.lost, idle.at, BETWEEN_JOBS))
        log.warning('worker "%s" lost between calls; starting it again', record.identity)
        return None

    async def _probe(self, idle: _Idle, watcher: asyncio.Task[None]) -> None:
        """Ping a kept worker and wait for its Pong, or for the watcher to see it gone."""
        if watcher.done():
            return
        idle.ponged.clear()
        with contextlib.suppress(TransportError):  # gone: the watcher sees its end of file
            await idle.link.transport.write(idle.link.connection.ping())
        pong = asyncio.ensure_future(idle.ponged.wait())
        try:
            await asyncio.wait({pong, watcher}, timeout=PROBE_S, return_when="FIRST_COMPLETED")
        finally:
            pong.cancel()
        if not idle.ponged.is_set() and idle.lost is None:
            idle.lost = f"no answer to a ping in {PROBE_S:g} s"
            idle.at = time.time()

    def keep(self, link: WorkerLink) -> None:
        """Hold `link` until the next job takes it; shut it down if the pool has closed."""
        idle = _Idle(link)
        if self._closed:
            self._shut_later(link, "session closed")
            return
        self._idle[link.record.identity] = idle
        idle.watcher = asyncio.get_running_loop().create_task(self._watch(idle))

    async def _watch(self, idle: _Idle) -> None:
        link = idle.link
        try:
            while True:
                for event in await link.receive():
                    if not isinstance(event, Ponged):  # a Pong is all a kept worker sends
                        raise RemoteProtocolError(
                            link.connection.peer, f"sent {type(event).__name__} between jobs"
                        )
                    idle.ponged.set()
        except LinkClosed:
            idle.lost = "the worker exited or was killed"
        except TransportError as exc:
            idle.lost = exc.detail
        except ProtocolError as exc:
            idle.lost = f"protocol error: {exc.detail}"
        idle.at = time.time()
        identity = link.record.identity
        log.warning('worker "%s" lost while the session was idle: %s', identity, idle.lost)
        await link.transport.close(timeout=LOST_CLOSE_S)  # reap it now, not at the next call

    def _shut_later(self, link: WorkerLink, reason: str) -> None:
        task = asyncio.get_running_loop().create_task(_shut(link, reason))
        self._shutting.add(task)
        task.add_done_callback(self._shutting.discard)

    async def close(self) -> None:
        """Shut down every kept worker (Shutdown, then close: wait, terminate, kill)."""
        self._closed = True
        idle, self._idle = list(self._idle.values()), {}
        for item in idle:
            if item.watcher is not None:
                item.watcher.cancel()
        await asyncio.gather(
            *(item.watcher for item in idle if item.watcher is not None), return_exceptions=True
        )
        await asyncio.gather(
            *(_shut(item.link, "session closed") for item in idle),
            *self._shutting,
            return_exceptions=True,
        )


async def _shut(link: WorkerLink, reason: str) -> None:
    with contextlib.suppress(TransportError, TimeoutError, ProtocolError):
        await asyncio.wait_for(link.transport.write(link.connection.shutdown(reason)), 2.0)
    await link.transport.close(timeout=SHUTDOWN_CLOSE_S)
