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

Records that start processes on this host take slot leases like local threads do: a local
pipe record's slots are the job's before it starts (`aner_coord.job.queue`); an SSH or Slurm
worker whose handshake names this host (its host identity is this coordinator's) takes its
slots from the same table before its first task (`_lease_here`), waiting at most the
handshake bound, and holds them until it is dropped or the job ends. Slots that this job's
own workers on this host could never all hold (more than the table's) lose that worker at
once, saying so.

A loss is named by what the worker was doing (connect, handshake, staging, run), whichever
side notices first: a failed write defers to the reader, whose end of file says "closed its
connection", and is reported on its own only if the reader has not spoken by the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec

from aner_coord import posix
from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import StagePlan
from aner_coord.errors import WorkerFailure
from aner_coord.job.backend import BackendPlan, Deliver
from aner_coord.job.events import ResultReceived, TaskError, WindowChanged, WorkerLost, WorkerReady
from aner_coord.job.link import LinkClosed, WorkerLink, handshake, require_precision, start
from aner_coord.job.liveness import (
    Deadline,
    Liveness,
    frame_bound,
    handshake_timeout,
    heartbeat_interval,
    result_floor,
    silence_timeout,
)
from aner_coord.job.pacing import Pacer, Window
from aner_coord.job.pool import LOST_CLOSE_S, LostBetweenJobs, WorkerPool
from aner_coord.job.queue import POLL_S, busy_line
from aner_coord.job.staging import StagingLost, stage_worker
from aner_coord.job.timing import TaskTimes
from aner_coord.jobdir.status import StagingRecord
from aner_coord.transports.base import Transport, TransportError
from aner_worker.kernels.base import Kernel, decode, encode
from aner_worker.leases import Holder, Lease, LeaseError, LeaseTable, leases_enabled
from aner_worker.plugins import identities
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


# A task written to a worker, not yet stamped as dispatched: (task id, pass, start, count,
# frame bytes), as `TaskTimes.dispatched` takes it.
_Unstamped = tuple[int, int, int, int, int]


@dataclass(eq=False)
class _Peer:
    """One worker of the group as the backend knows it (dask's `WorkerState`): what a
    connection attempt holds is reset on a rejoin (`reset`); its record, lock and count
    of rejoins are the job's."""

    record: WorkerRecord  #: its cluster-file record
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  #: one write at a time
    #: A connection attempt's number: what an earlier attempt's reader or watchdog still
    #: reports after its worker was dropped is ignored.
    generation: int = 0
    rejoins: int = 0  #: reconnections so far (at most MAX_REJOINS)
    phase: str = "connect"  #: what it is doing, for a loss's message
    link: WorkerLink | None = None  #: past its handshake
    transport: Transport | None = None  #: known from its start, so a stop can close it
    connection: CoordinatorConnection | None = None
    pacer: Pacer | None = None  #: its window, from its round trip and task time
    liveness: Liveness | None = None  #: its clocks, judged by the watchdog
    server: asyncio.Task[None] | None = None  #: the task that reads it
    lost: bool = False  #: dropped (or its loss reported) and not rejoined
    rejoining: bool = False  #: reconnecting, not yet ready again
    params_sent: int | None = None  #: the pass whose Params it holds (this job's)
    outgoing: list[bytes] = field(default_factory=list)  #: frames to write
    #: Tasks written and not yet answered, tasks buffered, and how low the first may fall
    #: before buffered tasks are written: batching frames saves both processes wake-ups.
    on_wire: int = 0
    buffered_tasks: int = 0
    low_water: int = 0
    pings: dict[int, float] = field(default_factory=dict)  #: nonce -> written (NaN: not yet)
    lease: Lease | None = None  #: its slots on this host (an SSH or Slurm worker here)
    unstamped: list[_Unstamped] = field(default_factory=list)  #: tasks buffered, not stamped

    @property
    def identity(self) -> str:
        return self.record.identity

    def reset(self) -> None:
        """A new connection attempt: nothing of the last one's traffic is outstanding."""
        self.generation += 1
        self.rejoining = True
        self.lost = False
        self.on_wire = self.buffered_tasks = 0
        self.outgoing = []
        self.pings = {}
        self.params_sent = None
        self.unstamped = []


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
        task_timeout: float | None = None,
        uneven_tasks: bool = False,
    ) -> None:
        self._records = list(records)
        self._precision = precision  # the job's compute precision, which each worker must offer
        self._pool = pool  # a session's kept workers: taken at the start, given back at the end
        self._peers = {r.identity: _Peer(r) for r in self._records}
        self._stage = stage  # file data each worker must hold before its first task
        self.staging: list[StagingRecord] = []
        self._fingerprint = fingerprint
        self._kernel = kernel
        self._seconds_per_task = seconds_per_task
        self._silence_s = silence_timeout()
        self._result_floor_s = result_floor()
        self._handshake_s = handshake_timeout()
        # Slots of this host the job leased before it started: its local pipe records'.
        self._local_slots = sum(r.slots for r in self._records if r.transport == "local")
        self._task_timeout = task_timeout
        self._deadline = Deadline(task_timeout, self._result_floor_s, uneven_tasks)
        # The slowest compute seconds per item of the job's tasks so far, on any worker
        # (their busy_s as counted: never more than the task's age on our clock).
        self._per_item_s: float | None = None
        self._flushers: set[asyncio.Task[None]] = set()
        self._params: tuple[int, bytes] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._deliver: Deliver | None = None
        self.task_exception: BaseException | None = None
        self.timing = TaskTimes(link=True)

    def start(self, deliver: Deliver) -> None:
        self._deliver = deliver
        self.timing.start()
        for record in self._records:
            self._tasks.append(asyncio.create_task(self._serve(record, deliver)))

    async def _serve(self, record: WorkerRecord, deliver: Deliver) -> None:
        peer = self._peers[record.identity]
        generation = peer.generation
        peer.server = asyncio.current_task()
        peer.phase = "connect"
        try:
            link = await self._take(peer)
            if link is None:  # not a session's worker kept from its previous job
                link = await self._connect(peer)
                if link is None:
                    return  # the job stopped while the worker was starting
            await self._run(peer, link, deliver, generation)
        except asyncio.CancelledError:
            raise
        except (_Lost, StagingLost) as exc:
            self._lost(peer, peer.phase, str(exc), generation)
        except LostBetweenJobs as exc:
            self._lost(peer, "idle", str(exc), generation)
        except WorkerFailure as exc:  # the transport's, or a refused handshake
            phase = peer.phase if exc.phase in _TRANSPORT_PHASES else exc.phase
            self._lost(peer, phase, exc.detail, generation)
        except ProtocolError as exc:
            self._lost(peer, peer.phase, f"protocol error: {exc.detail}", generation)
        except TimeoutError:
            self._lost(peer, peer.phase, "no answer in time", generation)
        except Exception as exc:  # a bug here must fail the job, not leave it waiting
            log.exception("worker %s", record.identity)
            self._lost(peer, peer.phase, f"internal error in the coordinator: {exc!r}", generation)

    async def _take(self, peer: _Peer) -> WorkerLink | None:
        # Only the first connection of a job may reuse a kept worker; a rejoin starts anew.
        if self._pool is None or peer.rejoins:
            return None
        return await self._pool.take(peer.record)

    async def _connect(self, peer: _Peer) -> WorkerLink | None:
        """Start the worker and shake hands; None when the job stopped meanwhile. Its
        transport and connection are known from the start, so a stop can shut it down."""
        record = peer.record
        peer.transport = await start(record)
        if self._stopping:
            return None
        peer.phase = "handshake"
        connection = CoordinatorConnection(
            record.identity,
            record.slots,
            self._fingerprint,
            (self._kernel.name,),
            heartbeat_s=heartbeat_interval(
                min(self._result_floor_s, self._task_timeout or math.inf)
            ),
            plugins=identities((self._kernel.name,)),
        )
        peer.connection = connection
        return await handshake(record, peer.transport, connection, self._handshake_s)

    async def _run(self, peer: _Peer, link: WorkerLink, deliver: Deliver, generation: int) -> None:
        """Pace, stage and serve a worker past its handshake until its job stops."""
        identity = link.identity
        peer.transport, peer.connection, peer.link = link.transport, link.connection, link
        require_precision(link, self._precision)  # a kept worker too, before any task
        # Each job paces afresh: its chunks, and so its task time, are its own.
        pacer = Pacer(link.record.slots, self._seconds_per_task, link.connection.limit)
        link.connection.resize(pacer.window.size)
        peer.pacer = pacer
        self.timing.machine(identity, link.machine, link.host)
        if link.record.transport != "local" and link.host is not None:
            peer.phase = "lease"
            if not await self._lease_here(peer, link.host):
                return  # the job stopped meanwhile
        if self._stage is not None:  # staging: a separate step, see aner_coord.job.staging
            peer.phase = "staging"
            bound = self._handshake_s + frame_bound(self._silence_s, self._stage.size)
            async with asyncio.timeout(bound):
                self.staging.append(await stage_worker(link, self._stage, self._handshake_s))
        watch = Liveness(
            self._silence_s,
            self._result_floor_s,
            heard=time.monotonic(),
            task_timeout_s=self._task_timeout,
        )
        watch.read(watch.heard, 0, *link.connection.receiving)  # a frame begun already
        peer.liveness = watch
        # Write more once the worker holds no more than the low-water mark.
        peer.low_water = pacer.window.low_water
        peer.phase = "run"
        peer.rejoining = False
        self._publish_window(peer)
        # The first ping measures the round trip; the first tasks go with it.
        self._send_ping(peer)
        deliver(WorkerReady(identity, pacer.window.size))
        watchdog = asyncio.create_task(self._watchdog(peer, generation))
        try:
            await self._flush(peer, force=True)
            await self._receive(peer, link, deliver)
        finally:
            watchdog.cancel()

    async def _receive(self, peer: _Peer, link: WorkerLink, deliver: Deliver) -> None:
        identity = link.identity
        stats_type = self._kernel.stats_type
        pacer, watch, timing = peer.pacer, peer.liveness, self.timing
        assert pacer is not None and watch is not None
        connection = link.connection
        events = link.take_pending()
        now = time.monotonic()
        while True:
            for event in events:
                match event:
                    case Answered(message=message, task=task):
                        peer.on_wire -= 1
                        watch.progress = now
                        watch.answered(task.task_id)
                        if isinstance(message, TaskFailed):
                            deliver(TaskError(identity, message.task_id, message.reason))
                            continue
                        try:
                            stats = decode(stats_type, message.body)
                        except msgspec.DecodeError as exc:
                            raise _Lost(f"protocol error: malformed statistics: {exc}") from None
                        busy_s, link_s = timing.received(
                            identity,
                            message.task_id,
                            message.busy_s,
                            message.queued_s,
                            now,
                            started=message.started,
                            size=len(message.body),
                        )
                        if task.count > 0:
                            self._measured(busy_s / task.count)
                        deliver(ResultReceived(identity, message.task_id, stats))
                        self._resize(peer, pacer.answered(busy_s, link_s))
                    case Computing(task=task, elapsed_s=elapsed_s, waiting_s=waiting_s):
                        # A slot says it gets on with a long task: believed up to its deadline.
                        problem = watch.working(
                            now, task.task_id, task.count, elapsed_s, waiting_s
                        ) or watch.overdue(now, self._task_deadline, self._deadline.rule)
                        if problem is not None:
                            raise _Lost(problem)
                    case Ponged(nonce=nonce, clock=clock):
                        sent = peer.pings.pop(nonce, None)
                        if sent is not None and not math.isnan(sent):
                            timing.clock(identity, sent, now, clock)
                            self._resize(peer, pacer.round_trip(now - sent))
                    case Accepted() | Rejected() | BlocksWanted() | DataStaged():
                        pass  # the handshake's and staging's, over before the first task
                    case _:
                        assert_never(event)
            await self._flush_all(peer)
            try:
                events = await link.receive()
            except LinkClosed:
                if self._stopping:
                    return
                raise _Lost("the worker closed its connection (it exited or was killed)") from None
            now = time.monotonic()
            watch.read(now, len(events), *connection.receiving)

    async def _watchdog(self, peer: _Peer, generation: int) -> None:
        """Judge the worker's liveness and ping it, every third of the silence bound. It
        never waits on a write itself, so a worker that stopped reading is still judged."""
        watch, pacer = peer.liveness, peer.pacer
        assert watch is not None and pacer is not None
        while True:
            await asyncio.sleep(self._silence_s / 3)
            if self._stopping or peer.generation != generation:
                return
            now = time.monotonic()
            problem = watch.overdue(now, self._task_deadline, self._deadline.rule) or watch.verdict(
                now, peer.on_wire, pacer.task_estimate, pacer.task_s is not None
            )
            if problem is not None:
                self._lost(peer, peer.phase, problem, generation)
                return
            self._send_ping(peer)
            self._flush_soon(peer, force=True)

    async def _lease_here(self, peer: _Peer, host: str) -> bool:
        """An SSH or Slurm worker on this very host takes its slots from this host's lease
        table, as a local pipe worker's coordinator does; False if the job stopped first."""
        table = self._here_table(host)
        if table is None:
            return True
        slots = peer.record.slots
        own = self._local_slots + sum(
            len(p.lease.slots) for p in self._peers.values() if p.lease is not None and p.lease.held
        )
        if own + slots > table.size:
            raise _Lost(
                f"runs on this host (its host identity is this coordinator's), where this "
                f"job's workers would take {own + slots} CPU slots of its {table.size}: lower "
                "their slots, or run local threads (docs/contracts.md, section 13)"
            )
        holder = Holder(os.getpid(), kind=f"worker {peer.identity} on this host", slots=slots)
        give_up = time.monotonic() + self._handshake_s
        while True:
            try:
                got = table.take(slots, holder)
            except LeaseError as exc:
                raise _Lost(str(exc)) from None
            if isinstance(got, Lease):
                peer.lease = got
                return True
            if time.monotonic() > give_up:
                raise _Lost(
                    f"runs on this host (its host identity is this coordinator's) and waited "
                    f"{self._handshake_s:g} s for {busy_line(got, slots, table.size)}"
                )
            await asyncio.sleep(POLL_S)
            if self._stopping:
                return False

    def _here_table(self, host: str) -> LeaseTable | None:
        """This host's lease table, if `host` is this host and leases are on."""
        if not leases_enabled() or posix.missing() is not None:
            return None
        from aner_worker.host import host_identity

        if host != host_identity().value:
            return None
        from aner_worker.inventory import current

        try:
            return LeaseTable(current().effective_cpus)
        except LeaseError as exc:
            raise _Lost(str(exc)) from None

    def _measured(self, per_item_s: float) -> None:
        if self._per_item_s is None or per_item_s > self._per_item_s:
            self._per_item_s = per_item_s

    def _task_deadline(self, count: int) -> float:
        """Seconds a task of `count` items may compute (`Deadline.of`)."""
        return self._deadline.of(count, self._per_item_s, self._seconds_per_task)

    def _send_ping(self, peer: _Peer) -> None:
        """Queue a Ping; its Pong gives a round trip, stamped from the write (see _flush)."""
        connection = peer.connection
        if connection is None:  # dropped meanwhile
            return
        peer.outgoing.append(connection.ping())
        peer.pings[connection.last_ping] = math.nan  # stamped when written

    def _resize(self, peer: _Peer, window: Window | None) -> None:
        """Apply a new window from the worker's pacer: the connection allows it before the
        job machine fills it, and a smaller one reaches the machine before the connection."""
        self._publish_window(peer)  # the estimates, whether or not the window moves
        connection = peer.connection
        if window is None or connection is None or self._deliver is None:
            return
        peer.low_water = window.low_water
        if window.size >= connection.window:
            connection.resize(window.size)
            self._deliver(WindowChanged(peer.identity, window.size))
        else:
            self._deliver(WindowChanged(peer.identity, window.size))
            connection.resize(window.size)

    def _publish_window(self, peer: _Peer) -> None:
        pacer = peer.pacer
        assert pacer is not None
        self.timing.paced(peer.identity, pacer.rtt_s, pacer.task_s, pacer.window.size)

    def _lost(self, peer: _Peer, phase: str, detail: str, generation: int | None = None) -> None:
        if generation is not None and generation != peer.generation:
            return  # an earlier connection of a worker since dropped: already accounted for
        if peer.lost:
            return
        peer.lost = True
        if peer.rejoining:
            # A reconnection that failed: the job already counted this loss; try again later.
            peer.rejoining = False
            if peer.rejoins < MAX_REJOINS and not self._stopping:
                self._tasks.append(asyncio.get_running_loop().create_task(self._rejoin(peer)))
            return
        if not self._stopping and self._deliver is not None:
            self._deliver(WorkerLost(peer.identity, phase, detail, at=time.time()))

    def drop(self, worker: str) -> None:
        """The job goes on without `worker`: stop it now, whatever it still sends, then try
        to reconnect it after a back-off (the job's retries bound how often it may be lost)."""
        peer = self._peers[worker]
        peer.lost = True
        peer.generation += 1
        peer.outgoing.clear()
        self.timing.lost(worker)
        transport, peer.transport = peer.transport, None
        peer.connection = peer.link = peer.liveness = None
        lease, peer.lease = peer.lease, None
        if lease is not None:
            lease.release()  # its slots on this host: a rejoin takes them again
        server, peer.server = peer.server, None
        if server is not None and server is not asyncio.current_task():
            server.cancel()  # its reader (and watchdog) stop now, not at their next byte
        loop = asyncio.get_running_loop()
        if transport is not None:
            self._tasks.append(loop.create_task(transport.close(timeout=LOST_CLOSE_S)))
        self._tasks.append(loop.create_task(self._rejoin(peer)))

    async def _rejoin(self, peer: _Peer) -> None:
        peer.rejoins += 1
        await asyncio.sleep(min(REJOIN_MAX_S, REJOIN_FIRST_S * 2 ** (peer.rejoins - 1)))
        if self._stopping or self._deliver is None:
            return
        log.info("reconnecting worker %s", peer.identity)
        peer.reset()
        await self._serve(peer.record, self._deliver)

    def begin_pass(self, pass_id: int, params: Any) -> None:
        self._params = (pass_id, encode(params))

    def send(self, worker: str, task: Task) -> None:
        peer = self._peers[worker]
        connection = peer.connection
        assert connection is not None
        frames = peer.outgoing
        # Asked of this job, not of the connection: a kept worker holds the Params of its
        # previous job's pass, whose id this job may use again.
        if peer.params_sent != task.pass_id:
            assert self._params is not None and self._params[0] == task.pass_id
            frames.append(connection.params(task.pass_id, self._kernel.name, self._params[1]))
            peer.params_sent = task.pass_id
        frame = connection.task(task)
        frames.append(frame)
        peer.buffered_tasks += 1
        peer.unstamped.append((task.task_id, task.pass_id, task.start, task.count, len(frame)))

    def flush_soon(self) -> None:
        """Flush, each from a task of its own, every worker due a write (after the
        coordinator handed the machine a result outside a reader, as an audit does)."""
        if self._stopping:
            return
        for peer in self._peers.values():
            if peer.outgoing and peer.on_wire <= peer.low_water:
                self._flush_soon(peer)

    async def _flush_all(self, reader: _Peer) -> None:
        """Flush every worker due a write: the reader's own inline, the others from a task
        of their own, so that no reader waits on another worker's input."""
        for peer in self._peers.values():
            if peer.outgoing and peer.on_wire <= peer.low_water:
                if peer is reader:
                    await self._flush(peer)
                else:
                    self._flush_soon(peer)

    def _flush_soon(self, peer: _Peer, *, force: bool = False) -> None:
        if peer.write_lock.locked():
            return  # the write in progress writes these frames too
        flusher = asyncio.create_task(self._flush(peer, force=force))
        self._flushers.add(flusher)
        flusher.add_done_callback(self._flushers.discard)

    async def _flush(self, peer: _Peer, *, force: bool = False) -> None:
        """Write the worker's buffered frames (tasks once its tasks on the wire are down to
        the low-water mark; anything with `force`). A write already in progress keeps
        writing what accumulates meanwhile, so no caller ever waits behind it."""
        lock = peer.write_lock
        if lock.locked():
            return
        async with lock:
            while True:
                frames = peer.outgoing
                transport = peer.transport
                if not frames or transport is None:
                    return
                if not force and peer.on_wire > peer.low_water:
                    return
                await self._write(peer, transport, frames)

    async def _write(self, peer: _Peer, transport: Transport, frames: list[bytes]) -> None:
        data = b"".join(frames)
        gave_work = peer.on_wire == 0 and peer.buffered_tasks > 0
        peer.on_wire += peer.buffered_tasks
        peer.buffered_tasks = 0
        frames.clear()
        tasks, peer.unstamped = peer.unstamped, []
        now = time.monotonic()
        self.timing.dispatched(peer.identity, tasks, now)
        pings = peer.pings
        for nonce, sent in pings.items():
            if math.isnan(sent):
                pings[nonce] = now
        watch = peer.liveness
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
        closing = {
            peer.identity: (peer, peer.transport)
            for peer in self._peers.values()
            if peer.transport is not None
            and all(link.transport is not peer.transport for link in kept)
        }
        for peer, transport in closing.values():
            peer.outgoing.clear()
            connection = peer.connection
            if connection is None:
                continue
            # It is going away anyway; close() below reaps it whatever this write does.
            with contextlib.suppress(TransportError, TimeoutError):
                await asyncio.wait_for(transport.write(connection.shutdown(reason)), 2.0)
        # A lost worker gets no grace: it has already broken its side of the conversation.
        await asyncio.gather(
            *(
                transport.close(timeout=LOST_CLOSE_S if peer.lost else 5.0)
                for peer, transport in closing.values()
            ),
            return_exceptions=True,
        )
        for task in [*self._tasks, *self._flushers]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._flushers, return_exceptions=True)
        for peer in self._peers.values():
            lease, peer.lease = peer.lease, None
            if lease is not None:
                lease.release()
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
        for peer in self._peers.values():
            connection, link = peer.connection, peer.link
            if (
                peer.transport is None
                or connection is None
                or link is None
                or link.transport is not peer.transport
                or peer.lost
                or peer.rejoining
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
            task_timeout=plan.task_timeout,
            uneven_tasks=plan.uneven_tasks,
        )
