"""Byte pipes to a worker process: local pipes, an SSH channel or a Slurm job step's stdio
(srun's pipes), behind one small interface; `open_transport()` picks one for a record. The
SSH and Slurm transports live in `transports_ssh` and `transports_slurm`, imported only by a
job that has such a record.

A transport carries the worker's stdin and stdout as raw bytes (framing is `protocol/`'s job),
drains the worker's stderr into a short tail for diagnostics, and owns the process (and, for
SSH, the connection) until `close()` has reaped it.

Behaviour all transports share, checked by one contract suite (tests/contract/test_transports.py):

- `read()` returns b"" once the worker's stdout has ended, for whatever reason: the worker
  exited after its stdin was closed, it crashed, or it was killed.  Only a broken transport
  (a lost SSH connection, an OS error on the pipe) raises `TransportError(phase="receive")`.
- A worker that could not be started raises `TransportError(phase="start")`: locally from
  `open_pipe()` itself; over SSH, where only the remote shell knows, from the first `read()`
  or `write()` that finds the worker gone with exit status 127 or 126 and no output at all;
  under Slurm from `open_slurm()` when the step does not start in time, and from the first
  `read()` or `write()` when slurmstepd could not execute the program.
- `write()` to a worker that has gone raises `TransportError(phase="send")`.
- `close()` never raises: it closes stdin, waits, terminates, waits, kills and waits again,
  then releases pipes, channel and connection.  It is idempotent, and after it `read()`
  returns b"".  Over SSH, terminate and kill are an SSH signal request and, since sshd
  refuses those for root logins, `kill` run in a second session on the pid the remote
  wrapper reported.  Under Slurm they go to srun, which on SIGTERM cancels its step.

Endpoints, host names, user names, ports and executable paths are private (SPEC section 5):
error messages name the worker by identity and translate native failures into generic words;
native exceptions stay reachable as `__context__` for debugging but are not printed with the
traceback.  `stderr_tail()` masks the endpoint, host and user names and the executable path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from aner_coord.clusterfile import SlurmEndpoint, WorkerRecord
from aner_coord.errors import WorkerFailure

Phase = Literal["connect", "start", "send", "receive", "close"]

STDERR_TAIL_LINES = 20
_STDERR_LINE_CHARS = 400
# How long read() waits, after an empty stdout, for the exit status that tells a worker that
# never started (exit 127/126) from one that simply said nothing.
_EXIT_STATUS_WAIT = 2.0
_EXIT_NOT_FOUND = 127
_EXIT_NOT_EXECUTABLE = 126


class TransportError(WorkerFailure):
    """A worker's transport failed; the message names the worker by identity only."""

    phase: Phase

    def __init__(self, identity: str, phase: Phase, detail: str) -> None:
        super().__init__(identity, phase, detail)


class Transport(Protocol):
    """Raw bytes to and from one worker process; see the module docstring for the contract."""

    identity: str

    async def write(self, data: bytes) -> None:
        """Send bytes to the worker's stdin, waiting while its buffer is full."""
        ...

    async def write_eof(self) -> None:
        """Close the worker's stdin; the worker sees end of file after the bytes sent."""
        ...

    async def read(self, n: int = 65536) -> bytes:
        """Up to `n` bytes of the worker's stdout, or b"" when it has ended."""
        ...

    async def close(self, timeout: float = 5.0) -> None:
        """Stop the worker and release everything; never raises, safe to call twice."""
        ...

    def stderr_tail(self) -> str:
        """The last lines the worker wrote to stderr, endpoint and executable masked."""
        ...


class _StderrTail:
    """The last lines of a byte stream, kept while it is drained so the writer never blocks."""

    def __init__(self, private: Sequence[str], pid_marker: bytes | None = None) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._partial = b""
        # Longest first, so a path is masked before a shorter string inside it.
        self._private = sorted({p for p in private if len(p) >= 3}, key=len, reverse=True)
        self._pid_marker = pid_marker
        self.pid: int | None = None

    def feed(self, data: bytes) -> None:
        *complete, self._partial = (self._partial + data).split(b"\n")
        for line in complete:
            if self._pid_marker is not None and line.startswith(self._pid_marker):
                self._take_pid(line.removeprefix(self._pid_marker))
            else:
                self._lines.append(self._decode(line))
        if len(self._partial) > 4 * _STDERR_LINE_CHARS:
            self._lines.append(self._decode(self._partial))
            self._partial = b""

    def _take_pid(self, text: bytes) -> None:
        self._pid_marker = None
        if text.isdigit() and len(text) < 12:
            self.pid = int(text)

    def _decode(self, line: bytes) -> str:
        text = line.rstrip(b"\r").decode("utf-8", "replace")
        if len(text) > _STDERR_LINE_CHARS:
            text = text[:_STDERR_LINE_CHARS] + "..."
        return text

    def text(self) -> str:
        lines = list(self._lines)
        if self._partial:
            lines = [*lines[1 - STDERR_TAIL_LINES :], self._decode(self._partial)]
        text = "\n".join(lines)
        for secret in self._private:
            text = text.replace(secret, "<private>")
        return text


def _describe_exit(status: int | None) -> str | None:
    """Words for an exit status that means the worker program never ran."""
    if status == _EXIT_NOT_FOUND:
        return "executable not found (exit 127); check the executable path in the cluster file"
    if status == _EXIT_NOT_EXECUTABLE:
        return "executable cannot be run (exit 126); check its permissions"
    return None


def _describe_os_error(exc: BaseException) -> str:
    """Generic words for an OS-level failure; strerror carries no names, the message might."""
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        return "the worker closed its input (it may have exited)"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    return f"I/O failure ({type(exc).__name__})"


# --------------------------------------------------------------------------- local pipes


class _PipeTransport:
    def __init__(
        self,
        identity: str,
        process: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        private: Sequence[str],
    ) -> None:
        self.identity = identity
        self._process = process
        self._transport = transport
        self._tail = _StderrTail(private)
        self._received = 0
        self._eof_sent = False
        self._closing = False
        self._closed = asyncio.Event()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        try:
            while chunk := await stream.read(4096):
                self._tail.feed(chunk)
        except (OSError, ValueError):
            return

    def stderr_tail(self) -> str:
        return self._tail.text()

    async def write(self, data: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        if self._closing or self._eof_sent:
            raise TransportError(self.identity, "send", "the worker's input is already closed")
        try:
            if stdin.is_closing():  # asyncio noticed that the worker closed its end
                raise BrokenPipeError
            stdin.write(data)
            await stdin.drain()
        except OSError as exc:
            await self._raise_if_never_started()
            raise TransportError(self.identity, "send", _describe_os_error(exc)) from None

    async def write_eof(self) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        self._eof_sent = True
        if not stdin.is_closing():
            stdin.close()

    async def read(self, n: int = 65536) -> bytes:
        stdout = self._process.stdout
        assert stdout is not None
        if self._closing:
            return b""
        try:
            data = await stdout.read(n)
        except (OSError, ValueError) as exc:
            raise TransportError(self.identity, "receive", _describe_os_error(exc)) from None
        if not data:
            await self._raise_if_never_started()
        self._received += len(data)
        return data

    async def _raise_if_never_started(self) -> None:
        # asyncio starts the program directly, so 127/126 come from a wrapper such as a shell.
        if self._received:
            return
        try:
            status = await asyncio.wait_for(self._process.wait(), _EXIT_STATUS_WAIT)
        except TimeoutError:
            return
        detail = _describe_exit(status)
        if detail is not None:
            raise TransportError(self.identity, "start", detail)

    async def close(self, timeout: float = 5.0) -> None:
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            await self.write_eof()
            if not await self._wait(timeout):
                self._signal(signal.SIGTERM)
                if not await self._wait(timeout):
                    self._signal(signal.SIGKILL)
                    await self._process.wait()
            # The worker is gone; what is left on stderr arrives at once, unless a descendant
            # still holds the pipe, which must not keep us waiting.
            await asyncio.wait([self._stderr_task], timeout=1.0)
        finally:
            self._stderr_task.cancel()
            if self._process.returncode is None:
                self._signal(signal.SIGKILL)
            # Releases the pipes too, which the streams alone would leave open (and warn about)
            # when stdout was not read to its end.
            self._transport.close()
            self._closed.set()

    async def _wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._process.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signum)


async def _spawn(
    identity: str, argv: Sequence[str], env: Mapping[str, str] | None
) -> tuple[asyncio.subprocess.Process, asyncio.SubprocessTransport]:
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: asyncio.subprocess.SubprocessStreamProtocol(limit=2**16, loop=loop),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            close_fds=True,
            env=None if env is None else dict(env),
        )
    except FileNotFoundError:
        raise TransportError(
            identity, "start", "executable not found; check the executable path"
        ) from None
    except PermissionError:
        raise TransportError(
            identity, "start", "executable cannot be run (permission denied); check its mode"
        ) from None
    except OSError as exc:
        raise TransportError(identity, "start", _describe_os_error(exc)) from None
    return asyncio.subprocess.Process(transport, protocol, loop), transport


async def open_pipe(
    identity: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Transport:
    """Start `argv` as a local worker with its stdin, stdout and stderr on private pipes.

    `close_fds=True`: the worker inherits no descriptor but its three pipes.  The worker stays
    in our process group rather than a new session, so a signal to the group (Ctrl-C in a
    terminal, or stopping a detached coordinator's session) reaches the workers too and none
    outlives the coordinator by accident; `close()` remains the orderly way to stop one.
    """
    process, transport = await _spawn(identity, argv, env)
    return _PipeTransport(identity, process, transport, private=[argv[0]] if argv else [])


async def open_ssh(
    identity: str, endpoint: str, argv: Sequence[str], *, connect_timeout: float = 15.0
) -> Transport:
    """Run `argv` on an SSH worker (see `aner_coord.transports_ssh`, which alone imports
    asyncssh: a job without SSH records never loads it)."""
    from aner_coord.transports_ssh import open_ssh as open_over_ssh

    return await open_over_ssh(identity, endpoint, argv, connect_timeout=connect_timeout)


async def open_slurm(
    identity: str,
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    start_timeout: float | None = None,
) -> Transport:
    """Run `argv` as a Slurm job step (see `aner_coord.transports_slurm`)."""
    from aner_coord.transports_slurm import open_slurm as open_step

    return await open_step(identity, endpoint, slots, argv, env=env, start_timeout=start_timeout)


async def open_transport(
    record: WorkerRecord, argv: Sequence[str], *, env: Mapping[str, str] | None = None
) -> Transport:
    """Start the worker of one cluster-file record over the transport it names."""
    if record.transport == "local":
        return await open_pipe(record.identity, argv, env=env)
    if record.transport == "ssh":
        return await open_ssh(record.identity, record.endpoint, argv)
    endpoint = record.slurm if record.slurm is not None else SlurmEndpoint()
    return await open_slurm(record.identity, endpoint, record.slots, argv, env=env)
