"""A configured group: one persistent `aner` worker process per record, over local pipes,
SSH or Slurm, each connection a thin shell around `protocol.CoordinatorConnection`.

Every failure becomes an event: a worker's end of file, garbage or refusal is `WorkerLost`;
a task that raised is `TaskError`; anything unexpected inside the backend's own code is
`WorkerLost` with phase and detail, so no job ever waits for a chunk that will not come.

Liveness (see `aner_coord.job.liveness`): each worker in its run phase has a watchdog task
that pings it every third of the silence bound and judges its clocks: complete frames, an
open frame's age, the time since its last result (or a slot's word that it is computing)
while it has tasks, a write in progress.
The reader only reads and stamps; no read carries a timeout of its own, and no write to one
worker holds up another's reader (a flush finds a write in progress and leaves its frames
to it). A worker the watchdog declares lost is dropped exactly as one whose pipe closed:
its reader is cancelled, its transport closed, its chunks requeued under `--retries`.

A loss is named by what the worker was doing (connect, handshake, staging, run), whichever
side notices first: a failed write defers to the reader, whose end of file says "closed its
connection", and is reported on its own only if the reader has not spoken by the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, assert_never

import msgspec

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import StagePlan
from aner_coord.errors import WorkerFailure
from aner_coord.job.backend import BackendPlan, Deliver
from aner_coord.job.events import ResultReceived, TaskError, WindowChanged, WorkerLost, WorkerReady
from aner_coord.job.link import LinkClosed, WorkerLink, handshake, require_precision, start
from aner_coord.job.liveness import (
    Liveness,
    frame_bound,
    handshake_timeout,
    heartbeat_interval,
    result_floor,
    silence_timeout,
)
from aner_coord.job.pacing import Pacer, Window
from aner_coord.job.pool import LOST_CLOSE_S, LostBetweenJobs, WorkerPool
from aner_coord.job.staging import StagingLost, stage_worker
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
from aner_coord.transports.base import Transport, TransportError
from aner_worker.kernels.base import Kernel, decode, encode
from protocol import (
    Accepted,
    Answered,
    BlocksWanted,
    Computing,
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

# A lost worker is reconnected after 0.5 s, then 1, 2, 4, ... at most 10 s between tries,
# at most MAX_REJOINS times per job.
REJOIN_FIRST_S = 0.5
REJOIN_MAX_S = 10.0
MAX_REJOINS = 5

# What a transport's own phase becomes in a loss's message: a failed read or write is named
# by what the worker was doing then, so that one loss reads the same whichever side saw it.
_TRANSPORT_PHASES = frozenset({"send", "receive", "close"})


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
        self._result_floor_s = result_floor()
        self._handshake_s = handshake_timeout()
        self._liveness: dict[str, Liveness] = {}
        # A connection attempt's number: what an earlier attempt's reader or watchdog still
        # reports after its worker was dropped is ignored.
        self._generation: dict[str, int] = {r.identity: 0 for r in self._records}
        self._servers: dict[str, asyncio.Task[None]] = {}
        self._flushers: set[asyncio.Task[None]] = set()
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
        generation = self._generation[identity]
        server = asyncio.current_task()
        if server is not None:
            self._servers[identity] = server
        self._phases[identity] = "connect"
        try:
            link = await self._take(record)
            if link is None:  # not a session's worker kept from its previous job
                link = await self._connect(record)
                if link is None:
                    return  # the job stopped while the worker was starting
            await self._run(link, deliver, generation)
        except asyncio.CancelledError:
            raise
        except (_Lost, StagingLost) as exc:
            self._lost(identity, self._phases[identity], str(exc), generation)
        except LostBetweenJobs as exc:
            self._lost(identity, "idle", str(exc), generation)
        except WorkerFailure as exc:  # the transport's, or a refused handshake
            phase = self._phases[identity] if exc.phase in _TRANSPORT_PHASES else exc.phase
            self._lost(identity, phase, exc.detail, generation)
        except ProtocolError as exc:
            self._lost(
                identity, self._phases[identity], f"protocol error: {exc.detail}", generation
            )
        except TimeoutError:
            self._lost(identity, self._phases[identity], "no answer in time", generation)
        except Exception as exc:  # a bug here must fail the job, not leave it waiting
            log.exception("worker %s", identity)
            self._lost(
                identity,
                self._phases[identity],
                f"internal error in the coordinator: {exc!r}",
                generation,
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
            identity,
            record.slots,
            self._fingerprint,
            (self._kernel.name,),
            heartbeat_s=heartbeat_interval(self._result_floor_s),
        )
        self._connections[identity] = connection
        return await handshake(record, transport, connection, self._handshake_s)

    async def _run(self, link: WorkerLink, deliver: Deliver, generation: int) -> None:
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
        self.timing.machine(identity, link.machine, link.host)
        if self._stage is not None:  # staging: a separate step, see aner_coord.job.staging
            self._phases[identity] = "staging"
            bound = self._handshake_s + frame_bound(self._silence_s, self._stage.size)
            async with asyncio.timeout(bound):
                self.staging.append(await stage_worker(link, self._stage, self._handshake_s))
        watch = Liveness(self._silence_s, self._result_floor_s, heard=time.monotonic())
        watch.read(watch.heard, 0, *link.connection.receiving)  # a frame begun already
        self._liveness[identity] = watch
        # Write more once the worker holds no more than the low-water mark.
        self._low_water[identity] = pacer.window.low_water
        self._phases[identity] = "run"
        self._rejoining.discard(identity)
        self._publish_window(identity)
        # The first ping measures the round trip; the first tasks go with it.
        self._send_ping(identity)
        deliver(WorkerReady(identity, pacer.window.size))
        watchdog = asyncio.create_task(self._watchdog(identity, generation))
        try:
            await self._flush(identity, force=True)
            await self._receive(link, deliver)
        finally:
            watchdog.cancel()

    async def _receive(self, link: WorkerLink, deliver: Deliver) -> None:
        identity = link.identity
        stats_type = self._kernel.stats_type
        on_wire = self._on_wire
        pacer = self._pacers[identity]
        watch = self._liveness[identity]
        connection = link.connection
        events = link.take_pending()
        now = time.monotonic()
        while True:
            for event in events:
                match event:
                    case Answered(message=message):
                        on_wire[identity] -= 1
                        watch.progress = now
                        if isinstance(message, TaskFailed):
                            deliver(TaskError(identity, message.task_id, message.reason))
                            continue
                        try:
                            stats = decode(stats_type, message.body)
                        except msgspec.DecodeError as exc:
                            raise _Lost(f"protocol error: malformed statistics: {exc}") from None
                        busy_s, link_s = self.timing.received(
                            identity, message.task_id, message.busy_s, message.queued_s, now
                        )
                        deliver(ResultReceived(identity, message.task_id, stats))
                        self._resize(identity, pacer.answered(busy_s, link_s))
                    case Computing():
                        watch.progress = now  # a slot says it gets on with a long task
                    case Ponged(nonce=nonce):
                        sent = self._pings[identity].pop(nonce, None)
                        if sent is not None and not math.isnan(sent):
                            self._resize(identity, pacer.round_trip(now - sent))
                    case Accepted() | Rejected() | BlocksWanted() | DataStaged():
                        pass  # the handshake's and staging's, over before the first task
                    case _:
                        assert_never(event)
            await self._flush_all(identity)
            try:
                events = await link.receive()
            except LinkClosed:
                if self._stopping:
                    return
                raise _Lost("the worker closed its connection (it exited or was killed)") from None
            now = time.monotonic()
            watch.read(now, len(events), *connection.receiving)

    async def _watchdog(self, identity: str, generation: int) -> None:
        """Judge the worker's liveness and ping it, every third of the silence bound. It
        never waits on a write itself, so a worker that stopped reading is still judged."""
        watch = self._liveness[identity]
        pacer = self._pacers[identity]
        while True:
            await asyncio.sleep(self._silence_s / 3)
            if self._stopping or self._generation[identity] != generation:
                return
            problem = watch.verdict(
                time.monotonic(),
                self._on_wire[identity],
                pacer.task_estimate,
                pacer.task_s is not None,
            )
            if problem is not None:
                self._lost(identity, self._phases[identity], problem, generation)
                return
            self._send_ping(identity)
            self._flush_soon(identity, force=True)

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

    def _lost(self, identity: str, phase: str, detail: str, generation: int | None = None) -> None:
        if generation is not None and generation != self._generation[identity]:
            return  # an earlier connection of a worker since dropped: already accounted for
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
        self._generation[worker] += 1
        self._outgoing[worker].clear()
        transport = self._transports.pop(worker, None)
        self._connections.pop(worker, None)
        self._links.pop(worker, None)
        self._liveness.pop(worker, None)
        server = self._servers.pop(worker, None)
        if server is not None and server is not asyncio.current_task():
            server.cancel()  # its reader (and watchdog) stop now, not at their next byte
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
        self._generation[identity] += 1
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
        """Flush, each from a task of its own, every worker due a write (after the
        coordinator handed the machine a result outside a reader, as an audit does)."""
        if self._stopping:
            return
        for identity, frames in self._outgoing.items():
            if frames and self._on_wire[identity] <= self._low_water[identity]:
                self._flush_soon(identity)

    async def _flush_all(self, reader: str) -> None:
        """Flush every worker due a write: the reader's own inline, the others from a task
        of their own, so that no reader waits on another worker's input."""
        for identity, frames in self._outgoing.items():
            if frames and self._on_wire[identity] <= self._low_water[identity]:
                if identity == reader:
                    await self._flush(identity)
                else:
                    self._flush_soon(identity)

    def _flush_soon(self, identity: str, *, force: bool = False) -> None:
        if self._write_locks[identity].locked():
            return  # the write in progress writes these frames too
        flusher = asyncio.create_task(self._flush(identity, force=force))
        self._flushers.add(flusher)
        flusher.add_done_callback(self._flushers.discard)

    async def _flush(self, identity: str, *, force: bool = False) -> None:
        """Write the worker's buffered frames (tasks once its tasks on the wire are down to
        the low-water mark; anything with `force`). A write already in progress keeps
        writing what accumulates meanwhile, so no caller ever waits behind it."""
        lock = self._write_locks[identity]
        if lock.locked():
            return
        async with lock:
            while True:
                frames = self._outgoing[identity]
                transport = self._transports.get(identity)
                if not frames or transport is None:
                    return
                if not force and self._on_wire[identity] > self._low_water[identity]:
                    return
                await self._write(identity, transport, frames)

    async def _write(self, identity: str, transport: Transport, frames: list[bytes]) -> None:
        data = b"".join(frames)
        gave_work = self._on_wire[identity] == 0 and self._buffered_tasks[identity] > 0
        self._on_wire[identity] += self._buffered_tasks[identity]
        self._buffered_tasks[identity] = 0
        frames.clear()
        task_ids, self._unstamped[identity] = self._unstamped[identity], []
        now = time.monotonic()
        self.timing.dispatched(identity, task_ids, now)
        pings = self._pings[identity]
        for nonce, sent in pings.items():
            if math.isnan(sent):
                pings[nonce] = now
        watch = self._liveness.get(identity)
        if watch is None:  # not watched (dropped meanwhile): nothing waits on this write
            with contextlib.suppress(TransportError):
                await transport.write(data)
            return
        watch.writing(now, len(data))
        try:
            await transport.write(data)
        except TransportError as exc:
            # Its input is closed: it exited or was killed. Reading its output normally says
            # so first; the watchdog reports this if the reader has not by its next tick.
            watch.write_failed = exc.detail
        end = time.monotonic()
        watch.written(end)
        if gave_work:
            watch.progress = end  # the result clock starts once its tasks are out

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
        for task in [*self._tasks, *self._flushers]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._flushers, return_exceptions=True)
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


class Processes:
    """The "processes" backend (`backend.BACKENDS`): a group's worker processes, one per
    record, checked against this installation's source fingerprint."""

    def make(self, plan: BackendPlan) -> ProcessBackend:
        from aner_worker.contract import source_fingerprint

        assert plan.records is not None
        return ProcessBackend(
            plan.records,
            source_fingerprint(),
            plan.kernel,
            seconds_per_task=plan.seconds_per_task,
            stage=plan.stage,
            pool=plan.pool,
            precision=plan.precision,
        )
