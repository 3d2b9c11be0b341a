"""Backends execute the machine's instructions on real workers and feed back what happened.

`ThreadBackend`: local execution, one thread per worker running the nogil kernels in-process.
`ProcessBackend`: a configured group, one persistent `aner` worker process per record, over
local pipes or SSH, speaking framed messages. Both offer `start / send / request_stop /
wait_stopped / close`; the `Driver` serialises events into the pure job machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations import Task
from aner_coord.jobstate import (
    Event,
    JobEnded,
    JobMachine,
    ResultReceived,
    SendTask,
    StopWorkers,
    WorkerLost,
    WorkerReady,
    WriteStatus,
)
from aner_coord.transports import Transport, TransportError, open_transport
from protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    FxResult,
    Hello,
    McResult,
    Message,
    ProtocolError,
    Refused,
    Shutdown,
    TaskFailed,
    Welcome,
)

log = logging.getLogger("aner.coordinator")

HANDSHAKE_TIMEOUT_S = 120.0  # the first start on a host may compile the kernels


class Backend(Protocol):
    def start(self, driver: Driver) -> None: ...
    def send(self, worker: str, task: Task) -> None: ...
    def request_stop(self, reason: str) -> None: ...
    async def wait_stopped(self) -> None: ...
    async def close(self) -> None: ...


class Driver:
    """Feeds events to the machine under one lock and carries out its instructions."""

    def __init__(self, machine: JobMachine, backend: Backend, loop: asyncio.AbstractEventLoop):
        self.machine = machine
        self.backend = backend
        self._loop = loop
        self._lock = threading.Lock()
        self.changed = asyncio.Event()
        self.ended = asyncio.Event()
        self.task_exception: BaseException | None = None

    def handle(self, event: Event) -> None:
        with self._lock:
            instructions = self.machine.handle(event)
            notify = False
            for instruction in instructions:
                if isinstance(instruction, SendTask):
                    self.backend.send(instruction.worker, instruction.task)
                elif isinstance(instruction, StopWorkers):
                    self.backend.request_stop(instruction.reason)
                    notify = True
                elif isinstance(instruction, WriteStatus | JobEnded):
                    notify = True
        if notify:
            self._notify(self.machine.state.terminal)

    def _notify(self, ended: bool) -> None:
        def wake() -> None:
            self.changed.set()
            if ended:
                self.ended.set()

        if _on_loop_thread(self._loop):
            wake()
        else:
            self._loop.call_soon_threadsafe(wake)

    def locked(self) -> threading.Lock:
        return self._lock


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class ThreadBackend:
    """Local workers: a fixed set of threads, each with its own bounded task queue."""

    def __init__(self, names: Sequence[str], execute: Callable[[Task], object]) -> None:
        self._names = list(names)
        self._execute = execute
        self._queues: dict[str, queue.SimpleQueue[Task | None]] = {
            name: queue.SimpleQueue() for name in self._names
        }
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def start(self, driver: Driver) -> None:
        for name in self._names:
            thread = threading.Thread(
                target=self._run, args=(name, driver), name=f"aner-{name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _run(self, name: str, driver: Driver) -> None:
        tasks = self._queues[name]
        driver.handle(WorkerReady(name, window=1))
        while not self._stop.is_set():
            task = tasks.get()
            if task is None or self._stop.is_set():
                return
            try:
                result = self._execute(task)
            except Exception as exc:  # a task's failure is the job's failure, named
                driver.task_exception = exc
                failed = TaskFailed(task.task_id, f"{type(exc).__name__}: {exc}")
                driver.handle(ResultReceived(name, failed))
                return
            driver.handle(ResultReceived(name, result))  # type: ignore[arg-type]

    def send(self, worker: str, task: Task) -> None:
        self._queues[worker].put(task)

    def request_stop(self, reason: str) -> None:
        self._stop.set()
        for tasks in self._queues.values():
            tasks.put(None)

    async def wait_stopped(self) -> None:
        for thread in self._threads:
            await asyncio.to_thread(thread.join)

    async def close(self) -> None:
        self.request_stop("closing")
        await self.wait_stopped()


def window_for(slots: int, seconds_per_task: float) -> int:
    """Tasks to keep in flight on a worker: its slots, plus ~50 ms of queued work per slot
    so that a link's round trip stays hidden behind computation (at least 2, at most 64)."""
    per_slot = max(2, min(64, int(0.05 / max(seconds_per_task, 1e-6)) + 1))
    return slots * per_slot


class ProcessBackend:
    """A configured group: one persistent worker process per record, over pipes or SSH."""

    def __init__(
        self,
        records: Sequence[WorkerRecord],
        fingerprint: str,
        seconds_per_task: float,
    ) -> None:
        self._records = list(records)
        self._fingerprint = fingerprint
        self._seconds_per_task = seconds_per_task
        self._encoder = FrameEncoder("coordinator")
        self._transports: dict[str, Transport] = {}
        self._outgoing: dict[str, list[bytes]] = {r.identity: [] for r in self._records}
        # Tasks written to each worker and not yet answered, and how low that may fall before
        # buffered tasks are written: batching task frames saves both processes wake-ups.
        self._on_wire: dict[str, int] = {r.identity: 0 for r in self._records}
        self._low_water: dict[str, int] = {r.identity: 0 for r in self._records}
        self._write_locks = {r.identity: asyncio.Lock() for r in self._records}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._driver: Driver | None = None

    def start(self, driver: Driver) -> None:
        self._driver = driver
        for record in self._records:
            self._tasks.append(asyncio.create_task(self._serve(record, driver)))

    async def _serve(self, record: WorkerRecord, driver: Driver) -> None:
        phase = "connect"
        try:
            argv = [record.executable, "parallel", "worker", "--stdio"]
            transport = await open_transport(record, argv)
            self._transports[record.identity] = transport
            if self._stopping:
                return
            phase = "handshake"
            decoder = FrameDecoder(f'worker "{record.identity}"')
            await transport.write(
                self._encoder.encode(
                    Hello(PROTOCOL_VERSION, record.identity, record.slots, self._fingerprint)
                )
            )
            first, *messages = await asyncio.wait_for(
                _read_messages(transport, decoder), HANDSHAKE_TIMEOUT_S
            )
            self._check_welcome(record, first)
            window = window_for(record.slots, self._seconds_per_task)
            identity = record.identity
            # Write more once the worker holds no more than its slots plus half its queue.
            self._low_water[identity] = record.slots + (window - record.slots) // 2
            phase = "run"
            driver.handle(WorkerReady(identity, window))
            await self._flush(identity)
            handle = driver.handle
            on_wire = self._on_wire
            while True:
                for message in messages:
                    if not isinstance(message, _RESULTS):
                        raise _Lost(f"unexpected {type(message).__name__} message")
                    on_wire[identity] -= 1
                    handle(ResultReceived(identity, message))
                await self._flush_all()
                data = await transport.read()
                if not data:
                    decoder.close()
                    if self._stopping:
                        return
                    raise _Lost("the worker closed its connection (it exited or was killed)")
                messages = decoder.feed(data)
        except asyncio.CancelledError:
            raise
        except _Lost as exc:
            self._lost(driver, record.identity, phase, str(exc))
        except TransportError as exc:
            self._lost(driver, record.identity, exc.phase, exc.detail)
        except ProtocolError as exc:
            self._lost(driver, record.identity, phase, f"protocol error: {exc.detail}")
        except TimeoutError:
            self._lost(driver, record.identity, phase, "no answer in time")

    def _lost(self, driver: Driver, identity: str, phase: str, detail: str) -> None:
        if not self._stopping:
            driver.handle(WorkerLost(identity, phase, detail))

    def _check_welcome(self, record: WorkerRecord, message: object) -> None:
        if isinstance(message, Refused):
            raise _Lost(f"refused by the worker: {message.reason}")
        if not isinstance(message, Welcome):
            raise _Lost(f"expected a Welcome, got {type(message).__name__}")
        if message.protocol != PROTOCOL_VERSION:
            raise _Lost(
                f"protocol version differs (coordinator {PROTOCOL_VERSION}, "
                f"worker {message.protocol})"
            )
        if message.fingerprint != self._fingerprint:
            raise _Lost(
                f"source contract differs (coordinator {self._fingerprint}, "
                f"worker {message.fingerprint})"
            )
        if message.slots != record.slots:
            raise _Lost(f"worker accepted {message.slots} slots, {record.slots} were assigned")

    def send(self, worker: str, task: Task) -> None:
        self._outgoing[worker].append(self._encoder.encode(task))

    async def _flush_all(self) -> None:
        for identity, frames in self._outgoing.items():
            if frames and self._on_wire[identity] <= self._low_water[identity]:
                await self._flush(identity)

    async def _flush(self, identity: str) -> None:
        frames = self._outgoing[identity]
        transport = self._transports.get(identity)
        if not frames or transport is None:
            return
        data = b"".join(frames)
        self._on_wire[identity] += len(frames)
        frames.clear()
        async with self._write_locks[identity]:
            try:
                await transport.write(data)
            except TransportError as exc:
                if self._driver is not None:
                    self._lost(self._driver, identity, "send", exc.detail)

    def request_stop(self, reason: str) -> None:
        if not self._stopping:
            self._stopping = True
            self._closer = asyncio.get_running_loop().create_task(self._shutdown(reason))

    async def _shutdown(self, reason: str) -> None:
        shutdown = self._encoder.encode(Shutdown(reason[:200]))
        for identity, transport in list(self._transports.items()):
            self._outgoing[identity].clear()
            # It is going away anyway; close() below reaps it whatever this write does.
            with contextlib.suppress(TransportError, TimeoutError):
                await asyncio.wait_for(transport.write(shutdown), 2.0)
        await asyncio.gather(
            *(transport.close() for transport in self._transports.values()),
            return_exceptions=True,
        )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def close(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._closer = asyncio.get_running_loop().create_task(self._shutdown("closing"))
        if self._closer is not None:
            await self._closer


_RESULTS = (McResult, FxResult, TaskFailed)


class _Lost(Exception):
    """A worker broke the job's contract; the message names what happened."""


async def _read_messages(transport: Transport, decoder: FrameDecoder) -> list[Message]:
    """The messages of the first read that completes any."""
    while True:
        data = await transport.read()
        if not data:
            decoder.close()
            raise _Lost("the worker closed its connection before the handshake completed")
        if messages := decoder.feed(data):
            return messages
