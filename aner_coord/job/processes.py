"""A configured group: one persistent `aner` worker process per record, over local pipes,
SSH or Slurm, each connection a thin shell around `protocol.CoordinatorConnection`.

Every failure becomes an event: a worker's end of file, silence, garbage or refusal is
`WorkerLost`; a task that raised is `TaskError`; anything unexpected inside the backend's
own code is `WorkerLost` with phase and detail, so no job ever waits for a chunk that will
not come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any, assert_never

import msgspec

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import StagePlan
from aner_coord.errors import WorkerFailure
from aner_coord.job.backend import Deliver
from aner_coord.job.events import ResultReceived, TaskError, WindowChanged, WorkerLost, WorkerReady
from aner_coord.job.link import (
    HANDSHAKE_TIMEOUT_S,
    LinkClosed,
    WorkerLink,
    handshake,
    require_precision,
    start,
)
from aner_coord.job.pacing import Pacer, Window
from aner_coord.job.pool import LostBetweenJobs, WorkerPool
from aner_coord.job.staging import StagingLost, stage_worker
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
from aner_coord.transports.base import Transport, TransportError
from aner_worker.kernels.base import Kernel, decode, encode
from protocol import (
    Accepted,
    Answered,
    BlocksWanted,
    CoordinatorConnection,
    DataStaged,
    Phase,
    Ponged,
    ProtocolError,
    Rejected,
    Task,
    TaskFailed,
)

log = logging.getLogger("aner.coordinator")


# A worker answers pings from its reading thread whatever its slots are doing, so a worker
# that sends nothing at all for this long (not a result, not a pong) is stalled or cut off.
# ANER_WORKER_SILENCE_S lowers it (tests) or raises it (very slow links).
DEFAULT_SILENCE_S = 30.0


LOST_CLOSE_S = 1.0  # how long a lost worker may take to exit once its stdin is closed


# A lost worker is reconnected after 0.5 s, then 1, 2, 4, ... at most 10 s between tries.
REJOIN_FIRST_S = 0.5


REJOIN_MAX_S = 10.0


MAX_REJOINS = 5  # tries per worker and job


def silence_timeout() -> float:
    try:
        return max(0.5, float(os.environ.get("ANER_WORKER_SILENCE_S", DEFAULT_SILENCE_S)))
    except ValueError:
        return DEFAULT_SILENCE_S


class _Lost(Exception):
    """A worker broke the job's contract; the message names what happened."""


class ProcessBackend:
    """A configured group: one persistent worker process per record."""

    def __init__(
        self,
        records: Sequence[WorkerRecord],
        fingerprint: str,
        kernel: Kernel,
        seconds_per_task: float,
        stage: StagePlan | None = None,
        pool: WorkerPool | None = None,
        precision: str | None = None,
    ) -> None:
        self._records = list(records)
        self._precision = precision  # the job's compute precision, which each worker must offer
        self._pool = pool  # a session's kept workers: taken at the start, given back at the end
        self._links: dict[str, WorkerLink] = {}  # past their handshake
        self._phases: dict[str, str] = {}  # what each worker is doing, for a loss's message
        self._params_sent: dict[str, int] = {}  # the pass whose Params each worker holds
        self._stage = stage  # file data each worker must hold before its first task
        self.staging: list[StagingRecord] = []
        self._fingerprint = fingerprint
        self._kernel = kernel
        self._seconds_per_task = seconds_per_task
        self._silence_s = silence_timeout()
        self._transports: dict[str, Transport] = {}
        self._connections: dict[str, CoordinatorConnection] = {}
        self._params: tuple[int, bytes] | None = None
        self._outgoing: dict[str, list[bytes]] = {r.identity: [] for r in self._records}
        # Tasks written to each worker and not yet answered, and how low that may fall before
        # buffered tasks are written: batching task frames saves both processes wake-ups.
        self._on_wire: dict[str, int] = {r.identity: 0 for r in self._records}
        self._buffered_tasks: dict[str, int] = {r.identity: 0 for r in self._records}
        self._low_water: dict[str, int] = {r.identity: 0 for r in self._records}
        # Each worker's window follows its measured round trip and task time (see
        # aner_coord.job.pacing); pings in flight by nonce, with the time they were written.
        self._pacers: dict[str, Pacer] = {}
        self._pings: dict[str, dict[int, float]] = {r.identity: {} for r in self._records}
        self._write_locks = {r.identity: asyncio.Lock() for r in self._records}
        self._tasks: list[asyncio.Task[None]] = []
        self._lost_workers: set[str] = set()
        self._rejoins: dict[str, int] = {r.identity: 0 for r in self._records}
        self._rejoining: set[str] = set()  # reconnecting, not yet ready again
        self._stopping = False
        self._stopped = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._deliver: Deliver | None = None
        self.task_exception: BaseException | None = None
        self.timing = TaskTimes(link=True)
        self._unstamped: dict[str, list[int]] = {r.identity: [] for r in self._records}

    def start(self, deliver: Deliver) -> None:
        self._deliver = deliver
        self.timing.start()
        for record in self._records:
            self._tasks.append(asyncio.create_task(self._serve(record, deliver)))

    async def _serve(self, record: WorkerRecord, deliver: Deliver) -> None:
        identity = record.identity
        self._phases[identity] = "connect"
        try:
            link = await self._take(record)
            if link is None:  # not a session's worker kept from its previous job
                link = await self._connect(record)
                if link is None:
                    return  # the job stopped while the worker was starting
            await self._run(link, deliver)
        except asyncio.CancelledError:
            raise
        except (_Lost, StagingLost) as exc:
            self._lost(identity, self._phases[identity], str(exc))
        except LostBetweenJobs as exc:
            self._lost(identity, "idle", str(exc))
        except WorkerFailure as exc:  # the transport's, or a refused handshake
            self._lost(identity, exc.phase, exc.detail)
        except ProtocolError as exc:
            self._lost(identity, self._phases[identity], f"protocol error: {exc.detail}")
        except TimeoutError:
            self._lost(identity, self._phases[identity], "no answer in time")
        except Exception as exc:  # a bug here must fail the job, not leave it waiting
            log.exception("worker %s", identity)
            self._lost(
                identity,
                self._phases[identity],
                f"internal error in the coordinator: {exc!r}",
            )

    async def _take(self, record: WorkerRecord) -> WorkerLink | None:
        # Only the first connection of a job may reuse a kept worker; a rejoin starts anew.
        if self._pool is None or self._rejoins[record.identity]:
            return None
        return await self._pool.take(record)

    async def _connect(self, record: WorkerRecord) -> WorkerLink | None:
        """Start the worker and shake hands; None when the job stopped meanwhile. Its
        transport and connection are known from the start, so a stop can shut it down."""
        identity = record.identity
        transport = await start(record)
        self._transports[identity] = transport
        if self._stopping:
            return None
        self._phases[identity] = "handshake"
        connection = CoordinatorConnection(
            identity, record.slots, self._fingerprint, (self._kernel.name,)
        )
        self._connections[identity] = connection
        return await handshake(record, transport, connection, HANDSHAKE_TIMEOUT_S)

    async def _run(self, link: WorkerLink, deliver: Deliver) -> None:
        """Pace, stage and serve a worker past its handshake until its job stops."""
        identity = link.identity
        self._transports[identity] = link.transport
        self._connections[identity] = link.connection
        self._links[identity] = link
        require_precision(link, self._precision)  # a kept worker too, before any task
        # Each job paces afresh: its chunks, and so its task time, are its own.
        pacer = Pacer(link.record.slots, self._seconds_per_task, link.connection.limit)
        link.connection.resize(pacer.window.size)
        self._pacers[identity] = pacer
        self.timing.machine(identity, link.machine)
        if self._stage is not None:  # staging: a separate step, see aner_coord.job.staging
            self._phases[identity] = "staging"
            self.staging.append(await stage_worker(link, self._stage, HANDSHAKE_TIMEOUT_S))
        # Write more once the worker holds no more than the low-water mark.
        self._low_water[identity] = pacer.window.low_water
        self._phases[identity] = "run"
        self._rejoining.discard(identity)
        self._publish_window(identity)
        # The first ping measures the round trip; the first tasks go with it.
        self._send_ping(identity)
        deliver(WorkerReady(identity, pacer.window.size))
        await self._flush(identity, force=True)
        pinger = asyncio.create_task(self._ping(identity))
        try:
            await self._receive(link, deliver)
        finally:
            pinger.cancel()

    async def _receive(self, link: WorkerLink, deliver: Deliver) -> None:
        identity = link.identity
        stats_type = self._kernel.stats_type
        on_wire = self._on_wire
        pacer = self._pacers[identity]
        events = link.take_pending()
        while True:
            for event in events:
                match event:
                    case Answered(message=message):
                        on_wire[identity] -= 1
                        if isinstance(message, TaskFailed):
                            deliver(TaskError(identity, message.task_id, message.reason))
                            continue
                        try:
                            stats = decode(stats_type, message.body)
                        except msgspec.DecodeError as exc:
                            raise _Lost(f"protocol error: malformed statistics: {exc}") from None
                        link_s = self.timing.received(
                            identity, message.task_id, message.busy_s, message.queued_s
                        )
                        deliver(ResultReceived(identity, message.task_id, stats))
                        self._resize(identity, pacer.answered(message.busy_s, link_s))
                    case Ponged(nonce=nonce):
                        sent = self._pings[identity].pop(nonce, None)
                        if sent is not None and not math.isnan(sent):
                            self._resize(identity, pacer.round_trip(time.monotonic() - sent))
                    case Accepted() | Rejected() | BlocksWanted() | DataStaged():
                        pass  # the handshake's and staging's, over before the first task
                    case _:
                        assert_never(event)
            await self._flush_all()
            try:
                events = await link.receive(self._silence_s)
            except TimeoutError:
                raise _Lost(
                    f"sent nothing for {self._silence_s:g} s, not even an answer to a ping "
                    "(stalled, or its link is cut)"
                ) from None
            except LinkClosed:
                if self._stopping:
                    return
                raise _Lost("the worker closed its connection (it exited or was killed)") from None

    async def _ping(self, identity: str) -> None:
        """Keep the worker talking: a ping a third of the silence timeout after each."""
        while not self._stopping:
            await asyncio.sleep(self._silence_s / 3)
            self._send_ping(identity)
            await self._flush(identity, force=True)

    def _send_ping(self, identity: str) -> None:
        """Queue a Ping; its Pong gives a round trip, stamped from the write (see _flush)."""
        connection = self._connections.get(identity)
        if connection is None:  # dropped meanwhile
            return
        self._outgoing[identity].append(connection.ping())
        self._pings[identity][connection.last_ping] = math.nan  # stamped when written

    def _resize(self, identity: str, window: Window | None) -> None:
        """Apply a new window from the worker's pacer: the connection allows it before the
        job machine fills it, and a smaller one reaches the machine before the connection."""
        self._publish_window(identity)  # the estimates, whether or not the window moves
        connection = self._connections.get(identity)
        if window is None or connection is None or self._deliver is None:
            return
        self._low_water[identity] = window.low_water
        if window.size >= connection.window:
            connection.resize(window.size)
            self._deliver(WindowChanged(identity, window.size))
        else:
            self._deliver(WindowChanged(identity, window.size))
            connection.resize(window.size)

    def _publish_window(self, identity: str) -> None:
        pacer = self._pacers[identity]
        self.timing.paced(identity, pacer.rtt_s, pacer.task_s, pacer.window.size)

    def _lost(self, identity: str, phase: str, detail: str) -> None:
        if identity in self._lost_workers:
            return
        self._lost_workers.add(identity)
        if identity in self._rejoining:
            # A reconnection that failed: the job already counted this loss; try again later.
            self._rejoining.discard(identity)
            if self._rejoins[identity] < MAX_REJOINS and not self._stopping:
                record = next(r for r in self._records if r.identity == identity)
                self._tasks.append(asyncio.get_running_loop().create_task(self._rejoin(record)))
            return
        if not self._stopping and self._deliver is not None:
            self._deliver(WorkerLost(identity, phase, detail, at=time.time()))

    def drop(self, worker: str) -> None:
        """The job goes on without `worker`: stop it now, whatever it still sends, then try
        to reconnect it after a back-off (the job's retries bound how often it may be lost)."""
        self._lost_workers.add(worker)
        self._outgoing[worker].clear()
        transport = self._transports.pop(worker, None)
        self._connections.pop(worker, None)
        self._links.pop(worker, None)
        loop = asyncio.get_running_loop()
        if transport is not None:
            self._tasks.append(loop.create_task(transport.close(timeout=LOST_CLOSE_S)))
        record = next(r for r in self._records if r.identity == worker)
        self._tasks.append(loop.create_task(self._rejoin(record)))

    async def _rejoin(self, record: WorkerRecord) -> None:
        identity = record.identity
        self._rejoins[identity] += 1
        await asyncio.sleep(min(REJOIN_MAX_S, REJOIN_FIRST_S * 2 ** (self._rejoins[identity] - 1)))
        if self._stopping or self._deliver is None:
            return
        log.info("reconnecting worker %s", identity)
        self._rejoining.add(identity)
        self._lost_workers.discard(identity)
        self._on_wire[identity] = 0
        self._buffered_tasks[identity] = 0
        self._outgoing[identity] = []
        self._pings[identity] = {}
        self._params_sent.pop(identity, None)
        await self._serve(record, self._deliver)

    def begin_pass(self, pass_id: int, params: Any) -> None:
        self._params = (pass_id, encode(params))

    def send(self, worker: str, task: Task) -> None:
        connection = self._connections[worker]
        frames = self._outgoing[worker]
        # Asked of this job, not of the connection: a kept worker holds the Params of its
        # previous job's pass, whose id this job may use again.
        if self._params_sent.get(worker) != task.pass_id:
            assert self._params is not None and self._params[0] == task.pass_id
            frames.append(connection.params(task.pass_id, self._kernel.name, self._params[1]))
            self._params_sent[worker] = task.pass_id
        frames.append(connection.task(task))
        self._buffered_tasks[worker] += 1
        self._unstamped[worker].append(task.task_id)

    def flush_soon(self) -> None:
        if not self._stopping:
            task = asyncio.get_running_loop().create_task(self._flush_all())
            self._tasks.append(task)
            task.add_done_callback(self._tasks.remove)

    async def _flush_all(self) -> None:
        for identity, frames in self._outgoing.items():
            if frames and self._on_wire[identity] <= self._low_water[identity]:
                await self._flush(identity)

    async def _flush(self, identity: str, *, force: bool = False) -> None:
        frames = self._outgoing[identity]
        transport = self._transports.get(identity)
        if not frames or transport is None:
            return
        if not force and self._on_wire[identity] > self._low_water[identity]:
            return
        data = b"".join(frames)
        self._on_wire[identity] += self._buffered_tasks[identity]
        self._buffered_tasks[identity] = 0
        frames.clear()
        task_ids, self._unstamped[identity] = self._unstamped[identity], []
        async with self._write_locks[identity]:
            self.timing.dispatched(identity, task_ids)
            pings = self._pings[identity]
            for nonce, sent in pings.items():
                if math.isnan(sent):
                    pings[nonce] = time.monotonic()
            try:
                await transport.write(data)
            except TransportError as exc:
                self._lost(identity, "send", exc.detail)

    def request_stop(self, reason: str) -> None:
        if not self._stopping:
            self._stopping = True
            self._closer = asyncio.get_running_loop().create_task(self._shutdown(reason))

    async def _shutdown(self, reason: str) -> None:
        kept = self._keepable()
        for link in kept:
            del self._transports[link.record.identity]
        for identity, transport in list(self._transports.items()):
            self._outgoing[identity].clear()
            connection = self._connections.get(identity)
            if connection is None:
                continue
            # It is going away anyway; close() below reaps it whatever this write does.
            with contextlib.suppress(TransportError, TimeoutError):
                await asyncio.wait_for(transport.write(connection.shutdown(reason)), 2.0)
        # A lost worker gets no grace: it has already broken its side of the conversation.
        await asyncio.gather(
            *(
                transport.close(timeout=LOST_CLOSE_S if identity in self._lost_workers else 5.0)
                for identity, transport in self._transports.items()
            ),
            return_exceptions=True,
        )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Only now, with this job's readers gone, may the pool read the kept workers.
        for link in kept:
            assert self._pool is not None
            self._pool.keep(link)
        self._stopped.set()

    def _keepable(self) -> list[WorkerLink]:
        """The links a session may keep: ready, not lost, with nothing sent and unanswered
        (a task still outstanding may still be computing, so that worker is shut down)."""
        if self._pool is None:
            return []
        kept: list[WorkerLink] = []
        for identity, transport in self._transports.items():
            connection = self._connections.get(identity)
            link = self._links.get(identity)
            if (
                connection is None
                or link is None
                or link.transport is not transport
                or identity in self._lost_workers
                or identity in self._rejoining
                or connection.phase is not Phase.READY
                or connection.in_flight
                or connection.staging
            ):
                continue
            kept.append(link)
        return kept

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def close(self) -> None:
        if not self._stopping:
            self.request_stop("closing")
        if self._closer is not None:
            await self._closer
