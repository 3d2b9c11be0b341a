"""The coordinator's link to one worker process: its command line, its start and handshake,
and the events its bytes make.

Every part of the coordinator that talks to a worker (the process backend, a session's pool,
staging, the scaling probe) goes through here: `worker_argv` is the one command line that
starts a worker, `start` opens a record's transport, `handshake` says Hello and waits for
the answer, and `connect` does both; `require_precision` refuses a worker whose Welcome did
not offer the job's compute precision. A `WorkerLink` then turns what the transport reads
into `protocol.CoordinatorConnection` events; events read but not yet wanted wait in its
`pending` list, so that a caller that expects one kind of event loses none of the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aner_coord.clusterfile import BlasChoice, WorkerRecord
from aner_coord.computations.base import DeclaresPrecision
from aner_coord.errors import WorkerFailure
from aner_coord.job.liveness import frame_bound, frame_stalled, silence_timeout
from aner_coord.transports.base import Transport, TransportError
from aner_coord.transports.registry import open_transport
from aner_worker import blasenv
from protocol import Accepted, CoordinatorConnection, CoordinatorEvent, Rejected

HANDSHAKE_TIMEOUT_S = 120.0  # the first start on a host may compile the kernels
# After a Hello that could not be written, how long the worker's output may take to say why.
HELLO_FAILED_WAIT_S = 2.0


def worker_argv(record: WorkerRecord) -> list[str]:
    """The command line of `record`'s worker (docs/contracts.md, section 6: `<exec> parallel worker
    ...`), with the OpenBLAS settings it is to compute with (section 5)."""
    return [record.executable, "parallel", "worker", "--stdio", *blas_arguments(record.blas)]


def blas_arguments(choice: BlasChoice, environ: Mapping[str, str] | None = None) -> list[str]:
    """`--blas-env NAME=VALUE` for each OpenBLAS variable: this process's value (or "",
    unset), unless the record sets its own; none for a record whose worker keeps its own
    environment's (`blas=own`). Arguments, not environment variables: they reach a worker
    over SSH through a stock sshd (whose AcceptEnv refuses environment requests) as they
    reach one over pipes or srun."""
    if choice.own:
        return []
    settings = blasenv.own_settings(environ)
    settings.update(choice.values)
    return [f"--blas-env={name}={value}" for name, value in settings.items()]


class LinkClosed(Exception):
    """The worker closed its end of the link (it exited, was killed or was cut off)."""

    def __init__(self, identity: str) -> None:
        super().__init__(f'worker "{identity}" closed its connection')
        self.identity = identity


class WorkerRefused(WorkerFailure):
    """The handshake ended in `Rejected`: the worker refused the Hello, or this side refused
    its Welcome (version, source fingerprint or slots differ); the reason says which."""

    def __init__(self, identity: str, reason: str) -> None:
        super().__init__(identity, "handshake", reason)


@dataclass
class WorkerLink:
    """One worker past its handshake: the record it was started from, its transport and
    connection, the machine identity its Welcome reported, and events read but not yet
    taken."""

    record: WorkerRecord
    transport: Transport
    connection: CoordinatorConnection
    machine: dict[str, str] = field(default_factory=dict)
    pending: list[CoordinatorEvent] = field(default_factory=list)
    # The compute precisions its Welcome offered (float64 only for a worker that did not say).
    precisions: tuple[str, ...] = ("float64",)
    # Its build provenance and the kernels it offers (empty from a worker that did not say).
    build: dict[str, str] = field(default_factory=dict)
    kernels: tuple[str, ...] = ()
    # The host it runs on (docs/contracts.md, section 18); None where it did not say.
    host: str | None = None

    @property
    def identity(self) -> str:
        return self.record.identity

    async def receive(self, timeout_s: float | None = None) -> list[CoordinatorEvent]:
        """The events of one read (none when it held only part of a frame), waiting at most
        `timeout_s` for it (TimeoutError). At end of input the connection checks that no
        frame was cut short (a `ProtocolError` if one was) and `LinkClosed` is raised."""
        if timeout_s is None:
            data = await self.transport.read()
        else:
            data = await asyncio.wait_for(self.transport.read(), timeout_s)
        if not data:
            self.connection.end_of_input()
            raise LinkClosed(self.identity)
        return self.connection.receive(data)

    def take_pending(self) -> list[CoordinatorEvent]:
        """The events read earlier and not yet taken, oldest first; none remain."""
        events, self.pending = self.pending, []
        return events

    async def next_event(self) -> CoordinatorEvent:
        """The oldest event not yet taken, reading until there is one."""
        while not self.pending:
            self.pending.extend(await self.receive())
        return self.pending.pop(0)


def precision_of(run: Any) -> str | None:
    """The compute precision a run declares (`DeclaresPrecision`), None if it declares none."""
    return run.precision if isinstance(run, DeclaresPrecision) else None


def require_precision(link: WorkerLink, precision: str | None) -> None:
    """Refuse `link`'s worker for a job that declares `precision` (None: none declared) if
    its Welcome did not offer it: `WorkerRefused`, naming the worker, before any task."""
    if precision is None or precision in link.precisions:
        return
    offered = " and ".join(link.precisions) or "no precision"
    raise WorkerRefused(
        link.identity,
        f"it computes in {offered} only and the job declares {precision} "
        "(update aner there, or leave it out of the group)",
    )


async def start(record: WorkerRecord, *, env: Mapping[str, str] | None = None) -> Transport:
    """Start `record`'s worker over the transport it names."""
    return await open_transport(record, worker_argv(record), env=env)


async def handshake(
    record: WorkerRecord,
    transport: Transport,
    connection: CoordinatorConnection,
    timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> WorkerLink:
    """Say Hello on a started worker's transport and wait at most `timeout_s` for its answer
    (TimeoutError). A refusal raises `WorkerRefused`; a worker that hangs up first raises
    `WorkerFailure` in phase "handshake"."""
    link = WorkerLink(record, transport, connection)
    try:
        await transport.write(connection.hello())
    except TransportError as failed:
        # Its input is closed: it exited, or never started. Its output says which (an exit
        # status of 127 or 126, or its end of file), as it does when it is read first.
        try:
            await asyncio.wait_for(link.next_event(), HELLO_FAILED_WAIT_S)
        except LinkClosed:
            raise _closed_in_handshake(record) from None
        except TimeoutError:
            pass
        raise WorkerFailure(record.identity, "handshake", failed.detail) from None
    try:
        first = await _first_event(link, timeout_s)
    except LinkClosed:
        raise _closed_in_handshake(record) from None
    match first:
        case Accepted(welcome=welcome):
            link.machine = dict(welcome.machine)
            link.precisions = tuple(welcome.precisions)
            link.build = dict(welcome.build)
            link.kernels = tuple(welcome.kernels)
            link.host = welcome.host
            return link
        case Rejected(reason=reason):
            raise WorkerRefused(record.identity, reason)
        case _:  # a connection in its handshake yields nothing else
            raise AssertionError(f"handshake answered with {first!r}")


async def _first_event(link: WorkerLink, timeout_s: float) -> CoordinatorEvent:
    """The first event, within `timeout_s` (TimeoutError); a frame that has begun must also
    be complete within its own bound (see `aner_coord.job.liveness`), which is far shorter
    than a first start's: half a Welcome is not worth two minutes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    silence_s = silence_timeout()
    opened: float | None = None  # when a frame was first seen begun
    while not link.pending:
        now = loop.time()
        received, size = link.connection.receiving
        limit = deadline
        if received:
            opened = now if opened is None else opened
            bound = frame_bound(silence_s, size)
            if now - opened >= bound:
                detail = frame_stalled(received, size, bound)
                raise WorkerFailure(link.identity, "handshake", detail)
            limit = min(deadline, opened + bound)
        if now >= deadline:
            raise TimeoutError
        try:
            link.pending.extend(await asyncio.wait_for(link.receive(), limit - now))
        except TimeoutError:
            if loop.time() >= deadline:
                raise
    return link.pending.pop(0)


def _closed_in_handshake(record: WorkerRecord) -> WorkerFailure:
    return WorkerFailure(
        record.identity,
        "handshake",
        "the worker closed its connection before the handshake completed",
    )


async def connect(
    record: WorkerRecord,
    connection: CoordinatorConnection,
    *,
    timeout_s: float = HANDSHAKE_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> WorkerLink:
    """Start `record`'s worker and shake hands; whatever fails, the worker is not left
    running (its transport is closed before the error goes on)."""
    transport = await start(record, env=env)
    try:
        return await handshake(record, transport, connection, timeout_s)
    except BaseException:
        await transport.close(timeout=1.0)
        raise
