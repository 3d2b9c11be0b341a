"""The worker process: `aner parallel worker --stdio`, a thin shell around
`protocol.WorkerConnection`.

Speaks frames on stdin/stdout and logs on stderr only; it never opens a socket. The main
thread reads stdin and feeds the connection, which checks the handshake (version,
fingerprint, slots against this machine's effective CPUs, kernels) and every later frame.
`slots` long-lived threads (the kernels release the GIL) take tasks from one queue and hand
each result, as it completes, to one writer thread (`_Output`), so that no slot waits on the
pipe; results that complete while another is being written go out together in the next
write, and the result of a very short task may wait up to a couple of milliseconds for
company (see HOLD_TASK_S). A pass's parameters are decoded once, by the
first of its tasks, and shared by the rest. Pings are answered by the reading thread at
once, whatever the slots are doing; a slot computing a long task says so itself
(`Working`, every `Hello.heartbeat_s`), so that its coordinator knows it is not stuck.

A job on file data first stages it (`_Stager`): the worker names the blocks its user cache
lacks, stores those it receives, and assembles the data set before its first task.

On end of input (its coordinator closed the pipe, vanished, or the SSH channel dropped), on
`Shutdown` or on a protocol error the worker stops: queued tasks are dropped and running
ones stop at their kernel's next sub-range boundary (a few milliseconds), so a worker never
outlives its coordinator by more than that. On Linux the worker also asks the kernel to kill
it when the process that started it ends (`PR_SET_PDEATHSIG`): a local pipe worker whose
coordinator is killed stops at once, whatever its slots are doing, as the coordinator's
slot leases are freed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import platform
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from aner_worker.blocks import BlockCache, expected_sizes
from aner_worker.kernels import KERNELS
from aner_worker.kernels.base import PRECISIONS, StagesData, Stopped, decode, encode
from aner_worker.leases import (
    GRANTED,
    Holder,
    Lease,
    LeaseError,
    LeaseTable,
    leases_enabled,
    private_dir,
)
from protocol import (
    BlockReceived,
    HelloReceived,
    Params,
    ParamsReceived,
    Phase,
    PingReceived,
    ProtocolError,
    ShutdownReceived,
    StageReceived,
    Task,
    TaskReceived,
    WorkerConnection,
    WorkerEvent,
)

log = logging.getLogger("aner.worker")

# The result of a task shorter than this, with more tasks queued behind it, may wait for the
# results that follow it, so one write (and one wake-up of the coordinator) carries several;
# no result waits longer than HOLD_MAX_S plus one task, and the coordinator's window hides
# that delay.
HOLD_TASK_S = 0.001
# The capacity asked for the worker's stdin and stdout pipes. A chunk's result of the
# 256-wide Dense model is a 680 KB frame (its float64 gradient sums), and a pass's
# parameters as large: through Linux's default 64 KiB pipe the writer thread hands a result
# over in 11 pieces, each a wake-up of the coordinator's event loop. 1 MiB (Linux's default
# pipe-max-size) takes a whole frame at once. Where it cannot be had (not a pipe, over the
# limits), the default stays: only the speed differs.
PIPE_BYTES = 1 << 20
READ_BYTES = 1 << 18  # a read of stdin: a pass's parameters in three, not eleven
HOLD_MAX_S = 0.002
GRANT_POLL_S = 0.01  # how often a granted task waiting for its slot looks again
HOLD_MAX_FRAMES = 64


def platform_identity() -> str:
    return (
        f"{platform.system()}-{platform.machine()}/"
        f"{platform.python_implementation()}-{platform.python_version()}/{sys.byteorder}"
    )


class _Refused(Exception):
    """This worker will not serve the coordinator (the Hello, or the staged data); the
    reason is logged and the process exits with status 1."""


class _Output:
    """Serialises frames from several threads onto one file descriptor, and guards the
    connection object, which is not thread-safe.

    Senders only queue a frame (made under `lock`) and wake the writer thread, which writes
    whatever is pending, joined, in one go. A slot therefore starts its next task while its
    last result is still going down the pipe: a 680 KB Dense result took a slot 1-5 ms to
    write itself (more when the coordinator was slow to read), 5 ms a step of a pipe group's
    timeline. A frame sent with `hold=True` may stay pending (see HOLD_TASK_S) until a later
    `send` or `flush`. Pending frames are bounded by the coordinator's window (a worker has
    no more results than the tasks it was sent). `close` writes what is pending and ends the
    writer; a pipe that breaks (the coordinator is gone) drops what is pending, and the
    reading thread sees end of input.
    """

    def __init__(self, fd: int, connection: WorkerConnection) -> None:
        self._fd = fd
        self.lock = threading.Lock()
        self.connection = connection
        self._pending: list[bytes] = []
        self._pending_since = 0.0
        self._wake = threading.Condition(self.lock)
        self._closing = False
        self._writer: threading.Thread | None = None  # started by the first frame to write
        self.broken = False

    def send(self, frame: bytes, *, hold: bool = False) -> None:
        """Queue `frame` (made under `lock` by the caller) and wake the writer unless held."""
        now = time.monotonic()
        with self.lock:
            self._queue(frame, now)
            waiting = now - self._pending_since
            if hold and len(self._pending) < HOLD_MAX_FRAMES and waiting < HOLD_MAX_S:
                return
            self._start_writer()
            self._wake.notify()

    def _queue(self, frame: bytes, now: float) -> None:
        if self.broken or self._closing:
            return
        if not self._pending:
            self._pending_since = now
        self._pending.append(frame)

    def _start_writer(self) -> None:
        """Under `lock`: the writer thread, if it is not running yet."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, name="aner-writer", daemon=True)
            self._writer.start()

    def flush(self) -> None:
        """Write whatever is pending now."""
        with self.lock:
            if self._pending:
                self._start_writer()
                self._wake.notify()

    def close(self) -> None:
        """Write what is pending, then end the writer (idempotent)."""
        with self.lock:
            self._closing = True
            writer = self._writer
            if writer is None and self._pending:
                self._start_writer()
                writer = self._writer
            self._wake.notify()
        if writer is not None:
            writer.join()

    def _write(self) -> None:
        while True:
            with self.lock:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if not self._pending:
                    return  # closing, and nothing is left
                frames, self._pending = self._pending, []
            data = memoryview(b"".join(frames))  # one frame: the frame itself, no copy
            try:
                while data:
                    written = os.write(self._fd, data)
                    data = data[written:]
            except OSError:
                with self.lock:
                    self.broken = True  # coordinator gone; the read loop will see EOF
                    self._pending.clear()


class _Stager:
    """Staging on the worker's side: look in the block cache, store what arrives, assemble.

    Received blocks are also kept in memory until the data set is assembled, so a cache
    directory that cannot be written costs the next job a resend, never this job its data.
    """

    def __init__(self) -> None:
        self.cache = BlockCache()
        self.preferred: tuple[str, ...] = ()
        self.kernel: StagesData | None = None  # the kernel that takes the data being staged
        self.dataset = ""
        self.blocks: tuple[str, ...] = ()
        self.received: dict[str, bytes] = {}

    def expect(self, kernels: tuple[str, ...]) -> None:
        """The kernels the Hello named come first when staged data arrives: the first of them
        that reads staged data takes it (a session's later job may name another kernel, so
        the others are asked after them)."""
        self.preferred = kernels

    def _kernel(self) -> StagesData:
        names = [*self.preferred, *(n for n in KERNELS if n not in self.preferred)]
        for name in names:
            kernel = KERNELS[name]
            if isinstance(kernel, StagesData):
                return kernel
        log.error("staged data sent, but no kernel of this worker reads staged data")
        raise _Refused

    def begin(self, event: StageReceived, connection: WorkerConnection, out: _Output) -> None:
        self.kernel = self._kernel()
        self.dataset, self.blocks, self.received = event.dataset, event.blocks, {}
        if self.kernel.has_staged(event.dataset):
            missing: tuple[str, ...] = ()
        else:
            sizes = expected_sizes(event.blocks)
            unique = dict.fromkeys(event.blocks)
            missing = tuple(d for d in unique if self.cache.get(d, sizes[d]) is None)
        with out.lock:
            frame = connection.missing(missing)
        out.send(frame)
        log.info(
            "staging %s: %d of %d blocks to receive", self.dataset, len(missing), len(self.blocks)
        )
        if not missing:
            self.finish(connection, out)

    def block(self, event: BlockReceived, connection: WorkerConnection, out: _Output) -> None:
        self.received[event.digest] = event.data
        try:
            self.cache.put(event.digest, event.data)
        except OSError as exc:
            log.warning("cannot cache block %s: %s", event.digest, exc)
        if event.complete:
            self.finish(connection, out)

    def finish(self, connection: WorkerConnection, out: _Output) -> None:
        assert self.kernel is not None
        if not self.kernel.has_staged(self.dataset):
            parts = []
            sizes = expected_sizes(self.blocks)
            for digest in self.blocks:
                data = self.received.get(digest) or self.cache.get(digest, sizes[digest])
                if data is None:
                    log.error("staged block %s vanished from the cache", digest)
                    raise _Refused
                parts.append(data)
            try:
                self.kernel.stage(self.dataset, b"".join(parts))
            except ValueError as exc:
                log.error("staged data set %s is unusable: %s", self.dataset, exc)
                raise _Refused from None
        self.received = {}
        with out.lock:
            frame = connection.staged()
        out.send(frame)


class _Serving:
    """One coordinator's conversation: the connection and its output, the queue of tasks
    with the moment each was read (so its result says how long it queued), the slot
    threads that run them, and staging."""

    def __init__(
        self, connection: WorkerConnection, out: _Output, grant: Grant | None = None
    ) -> None:
        self.connection = connection
        self.out = out
        self.grant = grant
        self.tasks: queue.SimpleQueue[tuple[Task, float] | None] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.stager = _Stager()
        # The latest pass's Params message and its decoded body: every task of a pass
        # shares one decoding (a Dense pass's frozen parameters are the size of the model).
        self._decoded: tuple[Params, Any] | None = None
        self._decoding = threading.Lock()

    def _params_of(self, params: Params, kind: type[Any]) -> Any:
        """`params.body` decoded as `kind`, once per Params message (a new pass is a new
        message, even when the coordinator reuses its pass id for another job)."""
        with self._decoding:
            last = self._decoded
            if last is None or last[0] is not params:
                last = self._decoded = (params, decode(kind, params.body))
            return last[1]

    def handle(self, events: Sequence[WorkerEvent]) -> bool:
        """Carry out what the connection saw; True once the worker should stop."""
        connection, out = self.connection, self.out
        for event in events:
            match event:
                case TaskReceived():
                    self.tasks.put((event.task, time.monotonic()))
                case StageReceived():
                    self.stager.begin(event, connection, out)
                case BlockReceived():
                    self.stager.block(event, connection, out)
                case PingReceived():
                    with out.lock:
                        frame = connection.pong(event.nonce, time.monotonic())
                    out.send(frame)
                case ParamsReceived():
                    pass  # kept by the connection for the tasks of its pass
                case HelloReceived():
                    self._answer(event)
                case ShutdownReceived():
                    return True
                case _:
                    assert_never(event)
        return False

    def _answer(self, event: HelloReceived) -> None:
        """Welcome the coordinator and start the slots, or refuse it and stop."""
        with self.out.lock:
            frame = self.connection.reply()
        if event.refusal is not None:
            self.out.send(frame)
            log.error("refused: %s", event.refusal)
            raise _Refused
        _warm_up(event.hello.kernels)
        self.stager.expect(event.hello.kernels)
        self.out.send(frame)
        log.info("worker %s ready with %d slots", event.hello.identity, event.hello.slots)
        for i in range(event.hello.slots):
            thread = threading.Thread(target=self._slot, name=f"aner-slot-{i}", daemon=True)
            self.threads.append(thread)
            thread.start()

    def _slot(self) -> None:
        tasks, out, connection, stopping = self.tasks, self.out, self.connection, self.stopping
        while True:
            item = tasks.get()
            if item is None or stopping.is_set():
                return
            task, arrived = item
            clock = _TaskClock(time.monotonic())
            with out.lock:
                params = connection.params_for(task.pass_id)
            kernel = KERNELS[params.kernel]
            check = self._stop_check(task, clock)
            try:
                with self._granted(task, check):
                    # Computing starts here, after any wait for a granted slot: that wait is
                    # queueing (`queued_s`), never compute (`busy_s`, `started`).
                    began = clock.began = time.monotonic()
                    stats = kernel.run(
                        self._params_of(params, kernel.params_type), task.start, task.count, check
                    )
                    # Measured before a grant is let go: once it is, another worker computes.
                    body = encode(stats)
                    busy = time.monotonic() - began
                with out.lock:
                    frame = connection.result(task, body, busy, began - arrived, began)
            except Stopped:
                return
            except Exception as error:  # the task's failure, reported to the coordinator
                with out.lock:
                    frame = connection.failed(task.task_id, f"{type(error).__name__}: {error}")
                busy = time.monotonic() - clock.took
            out.send(frame, hold=busy < HOLD_TASK_S and not tasks.empty())

    @contextlib.contextmanager
    def _granted(self, task: Task, check: Callable[[], bool]) -> Iterator[None]:
        """With a grant (`--max-slots`), the task computes holding one of this host's
        granted lease slots: waiting for one (saying `Working` meanwhile, as `check` does)
        until another coordinator's task lets it go. Each granted computation is logged
        with its slot and times: the worker's own record of what ran when."""
        grant = self.grant
        if grant is None:
            yield
            return
        while True:
            got = grant.table.take(1, grant.holder)
            if isinstance(got, Lease):
                break
            if check():
                raise Stopped
            time.sleep(GRANT_POLL_S)
        began = time.time()
        try:
            yield
        finally:
            got.release()
            log.info(
                "task %d computed on granted slot %d from %.6f to %.6f",
                task.task_id,
                got.slots[0],
                began,
                time.time(),
            )

    def _stop_check(self, task: Task, clock: _TaskClock) -> Callable[[], bool]:
        """What the kernel asks between its sub-ranges: whether to stop, and, where the
        coordinator asked for heartbeats, a `Working` frame once every `heartbeat_s` (from
        this computing slot, so that only a slot that gets on with its task says so): its
        seconds computing, and those it waited for a granted slot before."""
        stopping, out, connection = self.stopping, self.out, self.connection
        period = connection.heartbeat_s
        if period <= 0:
            return stopping.is_set
        due = clock.took + period

        def check() -> bool:
            nonlocal due
            now = time.monotonic()
            if now >= due:
                due = now + period
                began = clock.began
                elapsed, waiting = (
                    (0.0, now - clock.took) if began is None else (now - began, began - clock.took)
                )
                with out.lock:
                    ready = connection.phase is Phase.READY  # not after a Shutdown
                    frame = connection.working(task.task_id, elapsed, waiting) if ready else b""
                if frame:
                    out.send(frame)
            return stopping.is_set()

        return check

    def stop(self) -> None:
        """Drop queued tasks, stop running ones at their next sub-range, write what is left."""
        self.stopping.set()
        for _ in self.threads:
            self.tasks.put(None)
        for thread in self.threads:
            thread.join()
        self.out.close()


@dataclass
class _TaskClock:
    """A task on a slot: when the slot took it, and when it began computing it (after any
    wait for a granted slot; None until then)."""

    took: float
    began: float | None = None


@dataclass(frozen=True)
class Grant:
    """The slots this worker's host granted (`--max-slots N`): the first N slots of the
    host's grant table (`granted/` beside the lease table's `slots/`, shared by every
    granted worker of this user on this host), and how this worker signs the slot it holds."""

    table: LeaseTable
    holder: Holder

    @classmethod
    def of(cls, max_slots: int | None) -> Grant | None:
        """None without a grant, or with leases switched off (ANER_LEASES=off): the handshake
        still refuses more than the grant. A table that cannot be used stops the worker
        (LeaseError, one line naming its directory)."""
        if max_slots is None or not leases_enabled():
            return None
        table = LeaseTable(max_slots, private_dir(GRANTED))
        return cls(table, Holder(os.getpid(), kind="worker", slots=1))


def serve(stdin_fd: int = 0, stdout_fd: int = 1, max_slots: int | None = None) -> int:
    """Run the worker loop until EOF or Shutdown; return the process exit status."""
    from aner_worker.build import build_identity
    from aner_worker.contract import source_fingerprint
    from aner_worker.host import host_identity
    from aner_worker.inventory import current
    from aner_worker.machine import machine_identity
    from aner_worker.plugins import installed_identities

    connection = WorkerConnection(
        source_fingerprint(),
        current().effective_cpus,
        platform_identity(),
        KERNELS,
        machine=machine_identity(),
        precisions=PRECISIONS,
        build=build_identity(),
        host=host_identity().value,
        grant=max_slots,
        plugins=installed_identities(),
    )
    out = _Output(stdout_fd, connection)
    serving = _Serving(connection, out, Grant.of(max_slots))
    status = 0
    try:
        while True:
            data = os.read(stdin_fd, READ_BYTES)
            if not data:
                with out.lock:
                    connection.end_of_input()
                break
            with out.lock:
                events = connection.receive(data)
            if serving.handle(events):
                break
    except ProtocolError as exc:
        log.error("%s", exc)
        status = 1
    except _Refused:
        status = 1
    finally:
        serving.stop()
    return status


def _warm_up(kernels: tuple[str, ...]) -> None:
    """Load (or compile) the kernels the job names before accepting work; all of them for
    a coordinator that names none."""
    for name in kernels or tuple(KERNELS):
        KERNELS[name].warm_up()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends (the thread that started it: a
    coordinator's event loop lives as long as its workers). Elsewhere, or where prctl is
    refused, end of input alone stops the worker."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the signal was asked for
        os._exit(0)


def main(max_slots: int | None = None) -> int:
    # An interrupt is for the coordinator, which cancels and stops its workers in order: a
    # terminal's Ctrl-C or a Jupyter kernel interrupt reaches the whole process group, and a
    # session's workers must outlive a cancelled call. End of input still stops a worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="aner-worker %(levelname)s %(message)s"
    )
    # Keep stray prints from corrupting the frame stream: stdout is ours alone.
    stdout_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for fd in (0, stdout_fd):
        widen_pipe(fd)
    try:
        return serve(0, stdout_fd, max_slots)
    except LeaseError as exc:
        log.error("%s", exc)
        return 2


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> None:
    """Ask for a pipe capacity of `size` bytes on `fd` (Linux); nothing where it is not a
    pipe, or the system refuses (EPERM above /proc/sys/fs/pipe-max-size or the user's pipe
    pages, EINVAL, EBADF), or the platform has no F_SETPIPE_SZ."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setter is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, setter, size)
