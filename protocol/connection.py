"""The connection rules, one sans-IO object per side (in the manner of h11).

`CoordinatorConnection` and `WorkerConnection` turn bytes received into events
(`protocol.events`) and calls into bytes to send, and enforce what may happen when:

    coordinator                              worker
    hello()            -- Hello -->          receive(): HelloReceived (checked here)
    receive(): Accepted | Rejected  <-- Welcome | Refused -- reply()
    params(), task()   -- Params, Task -->   receive(): ParamsReceived, TaskReceived
    receive(): Answered <-- Result | TaskFailed -- result(), failed()
    ping()             -- Ping -->           receive(): PingReceived
    receive(): Ponged  <-- Pong --           pong()
    receive(): Computing <-- Working --      working() (if the Hello asked for heartbeats)
    shutdown()         -- Shutdown -->       receive(): ShutdownReceived

    staging (file data, once per job, after the handshake and before any task):
    stage()            -- Stage -->          receive(): StageReceived
    receive(): BlocksWanted <-- Missing --   missing()
    block()            -- Block -->          receive(): BlockReceived (digest checked here)
    receive(): DataStaged <-- Staged --      staged()

Checked here, so that every shell gets them right: the handshake comes first and only once;
protocol versions and source fingerprints must match; a worker takes no more slots than its
effective CPUs and no kernel it does not have; a task names a pass whose parameters were
sent; at most `window` tasks are in flight on the coordinator's side (the shell may
`resize()` it as its estimates change, never beyond what the worker accepts) and at most
`slots * MAX_QUEUED_PER_SLOT` are accepted on the worker's; a result names a task that is
outstanding on this connection; staging goes Stage, Missing, the blocks named missing (each
once, its SHA256 checked against its name), Staged, and no task is sent or taken while it is
in progress. Bytes that break these rules raise `RemoteProtocolError`
naming the peer; calls that would break them raise `LocalProtocolError`.

Nothing here reads or writes: the shells (`aner_worker.worker`, the coordinator's process
backend) own the pipes and threads. The objects are not thread-safe; a shell that calls
them from several threads holds one lock around them.
"""

from __future__ import annotations

import enum
import hashlib
import math
import re
from collections.abc import Collection, Mapping

import msgspec

from protocol.errors import LocalProtocolError, RemoteProtocolError, one_line
from protocol.events import (
    Accepted,
    Answered,
    BlockReceived,
    BlocksWanted,
    Computing,
    CoordinatorEvent,
    DataStaged,
    HelloReceived,
    ParamsReceived,
    PingReceived,
    Ponged,
    Rejected,
    ShutdownReceived,
    StageReceived,
    TaskReceived,
    WorkerEvent,
)
from protocol.framing import MAX_FRAME_BYTES, FrameDecoder, FrameEncoder
from protocol.messages import (
    Block,
    Hello,
    Message,
    Missing,
    Params,
    Ping,
    PluginIdentity,
    Pong,
    Refused,
    Result,
    Shutdown,
    Stage,
    Staged,
    Task,
    TaskFailed,
    Welcome,
    Working,
)
from protocol.staging import StagingProgress, check_stage, check_wanted, sha256_hex
from protocol.version import PROTOCOL_VERSION

# A coordinator keeps at most this many tasks per slot in flight; more is a broken peer.
MAX_QUEUED_PER_SLOT = 64
# No task may reach beyond the largest job the coordinator admits (docs/contracts.md, section 3).
MAX_ITEMS = 10_000_000_000
# No task computes or queues for 116 days: a timing field beyond this is garbage.
MAX_SECONDS = 1e7
# A worker's machine description (docs/contracts.md, section 10; 12 fields today) and its platform
# are a few hundred bytes; these bounds leave room for new fields and long CPU names.
MAX_MACHINE_FIELDS = 32
MAX_MACHINE_KEY_CHARS = 64
MAX_MACHINE_VALUE_CHARS = 256
MAX_PLATFORM_CHARS = 256
# A host identity (docs/contracts.md, section 18) is this many lowercase hex digits.
HOST_HEX_DIGITS = 32
_HOST = re.compile(f"[0-9a-f]{{{HOST_HEX_DIGITS}}}")
# A worker's slots say they are computing no more often than this (a frame each time).
MIN_HEARTBEAT_S = 0.05
# A refusal's or a failed task's reason is shown to people and kept in status.json.
MAX_REASON_CHARS = 2000


def bounded_reason(reason: str) -> str:
    """`reason` within MAX_REASON_CHARS; a longer one is cut saying so and how long it was,
    so that whatever keeps it later (error-detail.txt) does not pass the cut for the whole."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    tail = f" [... cut on the wire: {len(reason):,} characters in all]"
    return reason[: MAX_REASON_CHARS - len(tail)] + tail


def bounded_machine(machine: Mapping[str, str]) -> dict[str, str]:
    """`machine` within the bounds a coordinator accepts: the first MAX_MACHINE_FIELDS
    fields, keys and values cut to their maximum (what a worker sends of itself)."""
    fields = list(machine.items())[:MAX_MACHINE_FIELDS]
    return {k[:MAX_MACHINE_KEY_CHARS]: v[:MAX_MACHINE_VALUE_CHARS] for k, v in fields}


def _machine_problem(welcome: Welcome) -> str | None:
    for what, machine in (("machine", welcome.machine), ("build", welcome.build)):
        if len(machine) > MAX_MACHINE_FIELDS:
            return f"{what} description of {len(machine)} fields (at most {MAX_MACHINE_FIELDS})"
        for key, value in machine.items():
            if len(key) > MAX_MACHINE_KEY_CHARS or len(value) > MAX_MACHINE_VALUE_CHARS:
                return (
                    f"{what} description field {key[:MAX_MACHINE_KEY_CHARS]!r} longer than "
                    f"{MAX_MACHINE_KEY_CHARS} characters (key) or {MAX_MACHINE_VALUE_CHARS} "
                    "(value)"
                )
    if len(welcome.kernels) > MAX_MACHINE_FIELDS or any(
        len(name) > MAX_MACHINE_KEY_CHARS for name in welcome.kernels
    ):
        return f"more than {MAX_MACHINE_FIELDS} kernels, or a kernel name too long"
    if len(welcome.platform) > MAX_PLATFORM_CHARS:
        return f"platform identity longer than {MAX_PLATFORM_CHARS} characters"
    if welcome.host is not None and _HOST.fullmatch(welcome.host) is None:
        return f"host identity {welcome.host[:40]!r} is not {HOST_HEX_DIGITS} lowercase hex digits"
    return None


def plugin_digest(plugin: PluginIdentity) -> str:
    """One SHA256 over a plugin's name, version and files in path order (its `digest`)."""
    h = hashlib.sha256(f"{plugin.distribution}\0{plugin.version}\0".encode())
    for name in sorted(plugin.files):
        h.update(f"{name}\0{plugin.files[name]}\0".encode())
    return "sha256:" + h.hexdigest()


def plugin_difference(a: PluginIdentity, b: PluginIdentity, a_is: str, b_is: str) -> str | None:
    """How plugin `a` (`a_is`: "at the coordinator") differs from `b` (`b_is`), naming the
    version or the first file in path order that differs; None when they are the same."""
    if a.version != b.version:
        return f"version {a.version[:40]} {a_is}, {b.version[:40]} {b_is}"
    for name in sorted(a.files.keys() | b.files.keys()):
        was, now = a.files.get(name), b.files.get(name)
        shown = name[:MAX_MACHINE_VALUE_CHARS]
        if was == now:
            continue
        if now is None:
            return f"{shown} is installed {a_is}, not {b_is}"
        if was is None:
            return f"{shown} is installed {b_is}, not {a_is}"
        return f"{shown} differs ({was[:80]} {a_is}, {now[:80]} {b_is})"
    return None


def _seconds(value: float) -> float:
    """A measured duration within what the coordinator accepts (NaN counts as 0)."""
    return min(value, MAX_SECONDS) if value > 0.0 else 0.0


def _timing_problem(result: Result) -> str | None:
    for name, value in (("busy_s", result.busy_s), ("queued_s", result.queued_s)):
        if not (math.isfinite(value) and 0.0 <= value <= MAX_SECONDS):
            return (
                f"result for task {result.task_id} has {name} = {value!r}, not a number of "
                f"seconds in 0..{MAX_SECONDS:g}"
            )
    if not (math.isfinite(result.started) and result.started >= 0.0):
        return f"result for task {result.task_id} has started = {result.started!r}"
    return None


class Phase(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    READY = "READY"
    CLOSED = "CLOSED"


class _Side:
    def __init__(self, peer: str, local: str, max_frame: int) -> None:
        self.peer = peer
        self.phase = Phase.HANDSHAKE
        self._decoder = FrameDecoder(peer, max_frame)
        self._encoder = FrameEncoder(local, max_frame)

    def _encode(self, message: Message) -> bytes:
        return self._encoder.encode(message)

    @property
    def receiving(self) -> tuple[int, int | None]:
        """How far the frame being received has come: its bytes so far (0: between frames)
        and the size its header announced (None until the header is complete)."""
        return self._decoder.pending, self._decoder.announced

    def end_of_input(self) -> None:
        """The peer closed its side: leftover bytes mean it stopped inside a frame."""
        self.phase = Phase.CLOSED
        self._decoder.close()

    def _remote(self, detail: str) -> RemoteProtocolError:
        self.phase = Phase.CLOSED
        return RemoteProtocolError(self.peer, detail)


class CoordinatorConnection(_Side):
    """The coordinator's end of one worker connection."""

    def __init__(
        self,
        identity: str,
        slots: int,
        fingerprint: str,
        kernels: tuple[str, ...] = (),
        *,
        window: int | None = None,
        max_frame: int = MAX_FRAME_BYTES,
        heartbeat_s: float = 0.0,
        plugins: tuple[PluginIdentity, ...] = (),
    ) -> None:
        super().__init__(f'worker "{identity}"', "coordinator", max_frame)
        self.heartbeat_s = heartbeat_s
        self.plugins = plugins
        self.identity = identity
        self.slots = slots
        self.fingerprint = fingerprint
        self.kernels = kernels
        self.window = window if window is not None else slots
        self._said_hello = False
        self._params_sent: set[int] = set()
        self._outstanding: dict[int, Task] = {}
        self._nonce = 0
        self._staging: StagingProgress | None = None

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    @property
    def staging(self) -> bool:
        return self._staging is not None

    @property
    def last_ping(self) -> int:
        """The nonce of the latest Ping (0: none yet); its Pong carries the same."""
        return self._nonce

    @property
    def limit(self) -> int:
        """The most tasks the worker accepts in flight (its side enforces the same)."""
        return self.slots * MAX_QUEUED_PER_SLOT

    def resize(self, window: int) -> None:
        """Allow `window` tasks in flight from now on. A smaller window than the tasks now
        in flight only holds back new tasks; it never recalls any."""
        if not 1 <= window <= self.limit:
            raise LocalProtocolError(
                self.peer, f"window of {window} tasks outside 1..{self.limit} (what it accepts)"
            )
        self.window = window

    def stage(self, dataset: str, blocks: tuple[str, ...]) -> bytes:
        self._require_ready("Stage")
        if self._staging is not None:
            raise LocalProtocolError(self.peer, "Stage while another data set is being staged")
        problem = check_stage(dataset, blocks)
        if problem is not None:
            raise LocalProtocolError(self.peer, f"Stage: {problem}")
        self._staging = StagingProgress(dataset, blocks)
        return self._encode(Stage(dataset, blocks))

    def block(self, digest: str, data: bytes | memoryview) -> bytes:
        staging = self._staging
        if staging is None or staging.wanted is None:
            raise LocalProtocolError(self.peer, "Block before the worker said what it lacks")
        if digest not in staging.wanted or digest in staging.moved:
            raise LocalProtocolError(self.peer, f"block {digest} was not asked for, or was sent")
        staging.moved.add(digest)
        return self._encode(Block(digest, bytes(data)))

    def hello(self) -> bytes:
        if self._said_hello:
            raise LocalProtocolError(self.peer, "Hello sent twice")
        self._said_hello = True
        return self._encode(
            Hello(
                PROTOCOL_VERSION,
                self.identity,
                self.slots,
                self.fingerprint,
                self.kernels,
                heartbeat_s=self.heartbeat_s,
                plugins=self.plugins,
            )
        )

    def params(self, pass_id: int, kernel: str, body: bytes) -> bytes:
        self._require_ready("Params")
        # Only the latest pass matters to a worker; forget older ones.
        self._params_sent = {pass_id}
        return self._encode(Params(pass_id, kernel, msgspec.Raw(body)))

    def task(self, task: Task) -> bytes:
        self._require_ready("Task")
        if self._staging is not None:
            raise LocalProtocolError(self.peer, f"task {task.task_id} while staging data")
        if task.pass_id not in self._params_sent:
            raise LocalProtocolError(self.peer, f"task for pass {task.pass_id} before its Params")
        if len(self._outstanding) >= self.window:
            raise LocalProtocolError(
                self.peer, f"window of {self.window} tasks full: task {task.task_id} not sent"
            )
        if task.task_id in self._outstanding:
            raise LocalProtocolError(self.peer, f"task {task.task_id} is already in flight")
        self._outstanding[task.task_id] = task
        return self._encode(task)

    def ping(self) -> bytes:
        self._nonce += 1
        return self._encode(Ping(self._nonce))

    def shutdown(self, reason: str = "") -> bytes:
        self.phase = Phase.CLOSED
        return self._encode(Shutdown(reason[:200]))

    def receive(self, data: bytes) -> list[CoordinatorEvent]:
        events: list[CoordinatorEvent] = []
        for message in self._decoder.feed(data):
            events.append(self._on_message(message))
            if self.phase is Phase.CLOSED:
                break
        return events

    def _require_ready(self, what: str) -> None:
        if self.phase is not Phase.READY:
            raise LocalProtocolError(self.peer, f"{what} in phase {self.phase.value}")

    def _on_message(self, message: Message) -> CoordinatorEvent:
        if self.phase is Phase.HANDSHAKE:
            if not self._said_hello:
                raise self._remote(f"sent {type(message).__name__} before our Hello")
            return self._on_handshake(message)
        if self.phase is Phase.CLOSED:
            raise self._remote(f"sent {type(message).__name__} after the connection closed")
        if isinstance(message, Result | TaskFailed):
            return self._on_answer(message)
        if isinstance(message, Working) and self.heartbeat_s > 0:
            return self._on_working(message)
        if isinstance(message, Pong):
            if not 0 < message.nonce <= self._nonce:
                raise self._remote(f"Pong {message.nonce} answers no Ping")
            if not (math.isfinite(message.clock) and message.clock >= 0.0):
                raise self._remote(f"Pong {message.nonce} has clock = {message.clock!r}")
            return Ponged(message.nonce, message.clock)
        if isinstance(message, Missing | Staged):
            return self._on_staging(message)
        raise self._remote(f"unexpected {type(message).__name__} message")

    def _on_answer(self, message: Result | TaskFailed) -> CoordinatorEvent:
        task = self._outstanding.pop(message.task_id, None)
        if task is None:
            raise self._remote(
                f"answered task {message.task_id}, which is not outstanding on it "
                "(duplicate or unknown)"
            )
        if isinstance(message, TaskFailed):
            reason = one_line(bounded_reason(message.reason))
            if reason != message.reason:
                message = TaskFailed(message.task_id, reason)
            return Answered(message, task)
        if message.start != task.start or message.count != task.count:
            raise self._remote(
                f"result for task {task.task_id} covers [{message.start}, +{message.count}) "
                f"but the task was [{task.start}, +{task.count})"
            )
        problem = _timing_problem(message)
        if problem is not None:
            raise self._remote(problem)
        return Answered(message, task)

    def _on_working(self, message: Working) -> CoordinatorEvent:
        task = self._outstanding.get(message.task_id)
        if task is None:
            raise self._remote(f"is working on task {message.task_id}, not outstanding on it")
        for seconds in (message.elapsed_s, message.waiting_s):
            if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
                raise self._remote(
                    f"is working on task {message.task_id} for {seconds!r} s, not a "
                    f"number of seconds in 0..{MAX_SECONDS:g}"
                )
        return Computing(task, message.elapsed_s, message.waiting_s)

    def _on_staging(self, message: Missing | Staged) -> CoordinatorEvent:
        staging = self._staging
        name = type(message).__name__
        if staging is None or message.dataset != staging.dataset:
            raise self._remote(f"sent {name} for data set {message.dataset[:80]}, not being staged")
        if isinstance(message, Missing):
            if staging.wanted is not None:
                raise self._remote("sent Missing twice for one data set")
            problem = check_wanted(staging, message.blocks)
            if problem is not None:
                raise self._remote(f"Missing {problem}")
            staging.wanted = set(message.blocks)
            return BlocksWanted(message.dataset, message.blocks)
        if not staging.complete:
            raise self._remote("sent Staged before receiving every block it lacked")
        self._staging = None
        return DataStaged(message.dataset)

    def _on_handshake(self, message: Message) -> CoordinatorEvent:
        if isinstance(message, Refused):
            self.phase = Phase.CLOSED
            return Rejected(f"refused by the worker: {one_line(bounded_reason(message.reason))}")
        if not isinstance(message, Welcome):
            raise self._remote(f"expected Welcome, got {type(message).__name__}")
        problem = _machine_problem(message)
        if problem is not None:
            raise self._remote(problem)
        reason = None
        if message.protocol != PROTOCOL_VERSION:
            reason = (
                f"protocol version differs (coordinator {PROTOCOL_VERSION}, "
                f"worker {message.protocol})"
            )
        elif message.fingerprint != self.fingerprint:
            reason = (
                f"source contract differs (coordinator {self.fingerprint}, "
                f"worker {message.fingerprint})"
            )
        elif message.slots != self.slots:
            reason = f"worker accepted {message.slots} slots, {self.slots} were assigned"
        if reason is not None:
            self.phase = Phase.CLOSED
            return Rejected(reason)
        self.phase = Phase.READY
        return Accepted(message)


class WorkerConnection(_Side):
    """The worker's end of its one connection to a coordinator."""

    def __init__(
        self,
        fingerprint: str,
        effective_cpus: int,
        platform: str,
        kernels: Collection[str],
        *,
        max_frame: int = MAX_FRAME_BYTES,
        machine: dict[str, str] | None = None,
        precisions: Collection[str] = ("float64",),
        build: dict[str, str] | None = None,
        host: str | None = None,
        grant: int | None = None,
        plugins: Mapping[str, PluginIdentity] | None = None,
    ) -> None:
        super().__init__("coordinator", "worker", max_frame)
        # This worker's installed plugins, by distribution (docs/contracts.md, section 15).
        self.plugins = dict(plugins or {})
        # The slots its host's owner granted (`--max-slots`), if any: a Hello assigning more
        # is refused, naming the grant.
        self.grant = grant
        self.machine = bounded_machine(machine or {})
        self.host = host
        self.build = bounded_machine(build or {})
        self.precisions = tuple(precisions)
        self.fingerprint = fingerprint
        self.effective_cpus = effective_cpus
        self.platform = platform[:MAX_PLATFORM_CHARS]
        self.kernels = frozenset(kernels)
        self.hello_message: Hello | None = None
        self._refusal: str | None = None
        self._params: dict[int, Params] = {}
        self._accepted = 0
        self._answered = 0
        self._staging: StagingProgress | None = None

    @property
    def in_flight(self) -> int:
        """Tasks received and not yet answered."""
        return self._accepted - self._answered

    @property
    def limit(self) -> int:
        slots = self.hello_message.slots if self.hello_message else 0
        return slots * MAX_QUEUED_PER_SLOT

    def params_for(self, pass_id: int) -> Params:
        return self._params[pass_id]

    def receive(self, data: bytes) -> list[WorkerEvent]:
        events: list[WorkerEvent] = []
        for message in self._decoder.feed(data):
            events.append(self._on_message(message))
            if self.phase is Phase.CLOSED:
                break
        return events

    def reply(self) -> bytes:
        """The answer to the Hello: Welcome, or Refused (after which the connection is closed)."""
        hello = self.hello_message
        if hello is None:
            raise LocalProtocolError(self.peer, "no Hello to answer")
        if self._refusal is not None:
            self.phase = Phase.CLOSED
            return self._encode(Refused(self._refusal, PROTOCOL_VERSION, self.fingerprint))
        return self._encode(
            Welcome(
                PROTOCOL_VERSION,
                self.fingerprint,
                self.platform,
                self.effective_cpus,
                hello.slots,
                self.machine,
                self.precisions,
                self.build,
                tuple(sorted(self.kernels))[:MAX_MACHINE_FIELDS],
                self.host,
                {name: f"{p.version} {plugin_digest(p)}" for name, p in self.plugins.items()},
            )
        )

    def result(
        self,
        task: Task,
        body: bytes,
        busy_s: float,
        queued_s: float = 0.0,
        started: float = 0.0,
    ) -> bytes:
        """A task's Result; `started` is the worker's clock when a slot took it."""
        self._answered += 1
        busy_s, queued_s = _seconds(busy_s), _seconds(queued_s)
        started = started if math.isfinite(started) and started > 0.0 else 0.0
        return self._encode(
            Result(
                task.task_id, task.start, task.count, msgspec.Raw(body), busy_s, queued_s, started
            )
        )

    def failed(self, task_id: int, reason: str) -> bytes:
        self._answered += 1
        return self._encode(TaskFailed(task_id, bounded_reason(reason)))

    def pong(self, nonce: int, clock: float = 0.0) -> bytes:
        """The answer to Ping `nonce`, with the worker's monotonic clock now."""
        return self._encode(Pong(nonce, clock if math.isfinite(clock) and clock > 0 else 0.0))

    @property
    def heartbeat_s(self) -> float:
        """How often a slot computing a task says so (0: the coordinator asked for none);
        never more often than MIN_HEARTBEAT_S, whatever it asked."""
        asked = self.hello_message.heartbeat_s if self.hello_message else 0.0
        if not (math.isfinite(asked) and asked > 0):
            return 0.0
        return min(max(asked, MIN_HEARTBEAT_S), MAX_SECONDS)

    def working(self, task_id: int, elapsed_s: float, waiting_s: float = 0.0) -> bytes:
        """Task `task_id` is still being computed, for `elapsed_s` so far, after waiting
        `waiting_s` for a granted slot."""
        if self.phase is not Phase.READY or self.heartbeat_s <= 0:
            raise LocalProtocolError(self.peer, "Working to a coordinator that asked for none")
        return self._encode(Working(task_id, _seconds(elapsed_s), _seconds(waiting_s)))

    def missing(self, blocks: tuple[str, ...]) -> bytes:
        """The answer to Stage: the blocks this worker lacks (the shell looked)."""
        staging = self._staging
        if staging is None or staging.wanted is not None:
            raise LocalProtocolError(self.peer, "Missing without a Stage to answer")
        problem = check_wanted(staging, blocks)
        if problem is not None:
            raise LocalProtocolError(self.peer, f"Missing {problem}")
        staging.wanted = set(blocks)
        return self._encode(Missing(staging.dataset, blocks))

    def staged(self) -> bytes:
        """Every missing block arrived and the shell assembled the data set."""
        staging = self._staging
        if staging is None or not staging.complete:
            raise LocalProtocolError(self.peer, "Staged before every missing block arrived")
        self._staging = None
        return self._encode(Staged(staging.dataset))

    def _on_message(self, message: Message) -> WorkerEvent:
        if self.phase is Phase.HANDSHAKE:
            if not isinstance(message, Hello):
                raise self._remote(f"expected Hello, got {type(message).__name__}")
            self.hello_message = message
            self._refusal = self._judge(message)
            if self._refusal is None:
                self.phase = Phase.READY
            return HelloReceived(message, self._refusal)
        if self.phase is Phase.CLOSED:
            raise self._remote(f"sent {type(message).__name__} after the connection closed")
        if isinstance(message, Stage | Block):
            return self._on_staging(message)
        if isinstance(message, Task):
            if self._staging is not None:
                raise self._remote(f"sent task {message.task_id} before staging completed")
            if message.pass_id not in self._params:
                raise self._remote(
                    f"task {message.task_id} names pass {message.pass_id}, "
                    "whose parameters were never sent"
                )
            if self.in_flight >= self.limit:
                raise self._remote(
                    f"more than {self.limit} tasks in flight, beyond the window it may use"
                )
            if not (
                message.start >= 0
                and message.count > 0
                and message.start + message.count <= MAX_ITEMS
            ):
                raise self._remote(
                    f"task {message.task_id} range [{message.start}, +{message.count}) is "
                    f"outside the admitted limit of {MAX_ITEMS:,} items"
                )
            self._accepted += 1
            return TaskReceived(message)
        if isinstance(message, Params):
            if message.kernel not in self.kernels:
                raise self._remote(f"parameters for unknown kernel {message.kernel!r}")
            self._params = {message.pass_id: message}  # tasks of older passes are over
            return ParamsReceived(message)
        if isinstance(message, Ping):
            return PingReceived(message.nonce)
        if isinstance(message, Shutdown):
            self.phase = Phase.CLOSED
            return ShutdownReceived(message.reason)
        raise self._remote(f"unexpected {type(message).__name__} message")

    def _on_staging(self, message: Stage | Block) -> WorkerEvent:
        staging = self._staging
        if isinstance(message, Stage):
            if staging is not None:
                raise self._remote("sent Stage while another data set is being staged")
            problem = check_stage(message.dataset, message.blocks)
            if problem is not None:
                raise self._remote(f"Stage: {problem}")
            self._staging = StagingProgress(message.dataset, message.blocks)
            return StageReceived(message.dataset, message.blocks)
        digest = message.digest
        if staging is None or staging.wanted is None or digest not in staging.wanted:
            raise self._remote(f"sent block {digest[:80]}, which was not asked for")
        if digest in staging.moved:
            raise self._remote(f"sent block {digest} twice")
        if sha256_hex(message.data) != digest:
            raise self._remote(f"block {digest} does not match its SHA256 (corrupted)")
        staging.moved.add(digest)
        return BlockReceived(digest, message.data, staging.complete)

    def _judge(self, hello: Hello) -> str | None:
        if hello.protocol != PROTOCOL_VERSION:
            return (
                f"protocol version differs (coordinator {hello.protocol}, "
                f"worker {PROTOCOL_VERSION})"
            )
        if hello.fingerprint != self.fingerprint:
            return (
                f"source contract differs (coordinator {hello.fingerprint}, "
                f"worker {self.fingerprint})"
            )
        if not 1 <= hello.slots <= self.effective_cpus:
            return (
                f"assigned {hello.slots} slots but this worker's effective CPU allocation is "
                f"{self.effective_cpus}: lower its slots in the cluster file"
            )
        if self.grant is not None and hello.slots > self.grant:
            return (
                f"assigned {hello.slots} slots but this worker's grant is {self.grant} "
                f"(--max-slots {self.grant}, set on its host): lower its slots in the cluster "
                f"file to at most {self.grant}"
            )
        for theirs in hello.plugins:
            problem = self._plugin_problem(theirs)
            if problem is not None:
                return problem
        unknown = sorted(set(hello.kernels) - self.kernels)
        if unknown:
            return f"this worker has no kernel {', '.join(unknown)} (a different aner version?)"
        return None

    def _plugin_problem(self, theirs: PluginIdentity) -> str | None:
        mine = self.plugins.get(theirs.distribution)
        name = theirs.distribution[:MAX_MACHINE_KEY_CHARS]
        if mine is None:
            return (
                f"this worker has no plugin {name}: install {name} {theirs.version[:40]} "
                "where it runs"
            )
        difference = plugin_difference(theirs, mine, "at the coordinator", "on this worker")
        if difference is None:
            return None
        return f"plugin {name} differs from the coordinator's: {difference}"
