"""Byte pipes to a worker process: local pipes, an SSH channel or a Slurm job step's stdio
(srun's pipes), behind one small interface; `open_transport()` picks one for a record.

A transport carries the worker's stdin and stdout as raw bytes (framing is `protocol/`'s job),
drains the worker's stderr into a short tail for diagnostics, and owns the process (and, for
SSH, the connection) until `close()` has reaped it.

Behaviour all transports share, checked by one contract suite (tests/test_transports.py):

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
import errno
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

import asyncssh

from aner_coord.clusterfile import SlurmEndpoint, WorkerRecord, parse_ssh_endpoint
from aner_coord.errors import WorkerFailure

Phase = Literal["connect", "start", "send", "receive", "close"]

STDERR_TAIL_LINES = 20
_STDERR_LINE_CHARS = 400
# How long read() waits, after an empty stdout, for the exit status that tells a worker that
# never started (exit 127/126) from one that simply said nothing.
_EXIT_STATUS_WAIT = 2.0
_EXIT_NOT_FOUND = 127
_EXIT_NOT_EXECUTABLE = 126

# asyncssh logs host names, ports and user names at INFO level; keep them out of logs a user
# may publish unless someone chose a level for this logger on purpose.
_asyncssh_logger = logging.getLogger("asyncssh")
if _asyncssh_logger.level == logging.NOTSET:
    _asyncssh_logger.setLevel(logging.WARNING)


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


# --------------------------------------------------------------------------- SSH


def _describe_connect_error(exc: BaseException, connect_timeout: float) -> str:
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return (
            "host key not trusted (add the worker's host key to ~/.ssh/known_hosts, "
            "e.g. by connecting once with ssh and checking the fingerprint)"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return (
            "authentication failed (no key was accepted: check IdentityFile, ssh-agent and the "
            "worker's authorized_keys; aner never asks for a password)"
        )
    if isinstance(exc, asyncssh.ConnectionLost):
        return "connection lost while connecting"
    if isinstance(exc, asyncssh.DisconnectError):
        return f"the SSH handshake failed ({type(exc).__name__})"
    if isinstance(exc, TimeoutError):
        return f"timed out after {connect_timeout:g} s (is the worker reachable?)"
    if isinstance(exc, socket.gaierror):
        return "name not resolved (check the endpoint or its ~/.ssh/config alias)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is sshd running there, on the configured port?)"
    if isinstance(exc, OSError):
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "host unreachable"
        if exc.errno is not None:
            return os.strerror(exc.errno)
        return "the connection could not be opened (refused or unreachable at every address)"
    if isinstance(exc, ValueError):
        return (
            "the SSH configuration or a key could not be loaded (check ~/.ssh/config and "
            "IdentityFile for this worker)"
        )
    return f"SSH failure ({type(exc).__name__})"


def _describe_channel_error(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.ConnectionLost | asyncssh.DisconnectError):
        return "SSH connection lost"
    if isinstance(exc, asyncssh.ChannelOpenError):
        return "the server refused to open a session channel"
    if isinstance(exc, BrokenPipeError):
        return "channel closed (the worker may have exited)"
    return _describe_os_error(exc)


_CHANNEL_ERRORS = (asyncssh.Error, OSError, asyncio.IncompleteReadError)

# The remote command announces its pid on stderr, then becomes the worker (same pid), so that
# close() can signal it with `kill` when sshd refuses SSH signal requests, as it does for
# root logins and OpenSSH before 7.9.  /bin/sh exits 127 or 126 when exec fails.
_PID_MARKER = b"aner-remote-pid "
_REMOTE_WRAPPER = f'echo "{_PID_MARKER.decode()}$$" >&2; exec "$@"'
_REMOTE_KILL_TIMEOUT = 5.0


def remote_command(argv: Sequence[str]) -> str:
    """The command line sshd hands to the user's shell to run `argv` as a worker."""
    return shlex.join(["/bin/sh", "-c", _REMOTE_WRAPPER, "aner-worker", *argv])


class _SshTransport:
    def __init__(
        self,
        identity: str,
        connection: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        private: Sequence[str],
    ) -> None:
        self.identity = identity
        self._connection = connection
        self._process = process
        self._tail = _StderrTail(private, pid_marker=_PID_MARKER)
        self._received = 0
        self._eof_sent = False
        self._closing = False
        self._closed = asyncio.Event()
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        try:
            while chunk := await self._process.stderr.read(4096):
                self._tail.feed(chunk)
        except _CHANNEL_ERRORS:
            return

    def stderr_tail(self) -> str:
        return self._tail.text()

    async def write(self, data: bytes) -> None:
        if self._closing or self._eof_sent:
            raise TransportError(self.identity, "send", "the worker's input is already closed")
        try:
            self._process.stdin.write(data)
            await self._process.stdin.drain()
        except _CHANNEL_ERRORS as exc:
            await self._raise_if_never_started()
            raise TransportError(self.identity, "send", _describe_channel_error(exc)) from None

    async def write_eof(self) -> None:
        self._eof_sent = True
        with contextlib.suppress(*_CHANNEL_ERRORS):
            if not self._process.stdin.is_closing():
                self._process.stdin.write_eof()

    async def read(self, n: int = 65536) -> bytes:
        if self._closing:
            return b""
        try:
            data = await self._process.stdout.read(n)
        except _CHANNEL_ERRORS as exc:
            raise TransportError(self.identity, "receive", _describe_channel_error(exc)) from None
        if not data:
            await self._raise_if_never_started()
        self._received += len(data)
        return data

    async def _raise_if_never_started(self) -> None:
        # The remote shell reports a missing program only by its exit status, which comes
        # with the channel's close, shortly after the end of stdout.
        if self._received:
            return
        if not await self._wait(_EXIT_STATUS_WAIT):
            return
        detail = _describe_exit(self._process.exit_status)
        if detail is not None:
            raise TransportError(self.identity, "start", detail)

    async def _wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._process.wait_closed(), timeout)
        except TimeoutError:
            return False
        return True

    async def _signal(self, name: Literal["TERM", "KILL"]) -> None:
        with contextlib.suppress(*_CHANNEL_ERRORS):
            self._process.send_signal(name)
        pid = self._tail.pid
        if pid is None or self._process.returncode is not None:
            return
        # A second session on the same connection; harmless if the signal request worked.
        with contextlib.suppress(TimeoutError, *_CHANNEL_ERRORS):
            await asyncio.wait_for(
                self._connection.run(f"kill -s {name} {pid}", check=False),
                _REMOTE_KILL_TIMEOUT,
            )

    async def close(self, timeout: float = 5.0) -> None:
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            await self.write_eof()
            # sshd reaps the remote process and closes the channel after its exit status.
            if not await self._wait(timeout):
                await self._signal("TERM")
                if not await self._wait(timeout):
                    await self._signal("KILL")
                    await self._wait(timeout)
            await asyncio.wait([self._stderr_task], timeout=1.0)
        finally:
            self._stderr_task.cancel()
            self._process.close()
            self._connection.close()
            try:
                await asyncio.wait_for(self._connection.wait_closed(), timeout)
            except (TimeoutError, *_CHANNEL_ERRORS):
                self._connection.abort()
            self._closed.set()


async def open_ssh(
    identity: str, endpoint: str, argv: Sequence[str], *, connect_timeout: float = 15.0
) -> Transport:
    """Run `argv` on an SSH worker, as OpenSSH would reach `endpoint` for this user.

    `endpoint` is an alias of ~/.ssh/config (HostName, User, Port, IdentityFile...) or
    `[user@]host[:port]`, where an explicit user or port overrides the config.  Host keys are
    checked against the user's known_hosts, always; authentication uses keys or the agent,
    never a password or keyboard-interactive prompt.  The command (`remote_command(argv)`:
    `shlex.join` of a /bin/sh wrapper that reports the pid, then execs `argv`) runs on a
    binary channel without a terminal.
    """
    try:
        parts = parse_ssh_endpoint(endpoint)
    except ValueError:
        raise TransportError(
            identity, "connect", "the endpoint is not an alias or [user@]host[:port]"
        ) from None
    overrides: dict[str, object] = {}
    if parts.user is not None:
        overrides["username"] = parts.user
    if parts.port is not None:
        overrides["port"] = parts.port
    try:
        # config=() is what connect() passes: read ~/.ssh/config (None would skip it).
        options = await asyncssh.SSHClientConnectionOptions.construct(
            config=(),
            host=parts.host,
            password_auth=False,
            kbdint_auth=False,
            connect_timeout=connect_timeout,
            **overrides,
        )
        if options.known_hosts is None:
            raise TransportError(
                identity,
                "connect",
                "host key checking is switched off for this worker in ~/.ssh/config "
                "(UserKnownHostsFile none); aner requires a known_hosts file",
            )
        port = parts.port if parts.port is not None else ()
        connection = await asyncssh.connect(parts.host, port, options=options)
    except TransportError:
        raise
    except (asyncssh.Error, OSError, TimeoutError, ValueError) as exc:
        detail = _describe_connect_error(exc, connect_timeout)
        raise TransportError(identity, "connect", detail) from None
    try:
        process = await asyncio.wait_for(
            connection.create_process(remote_command(argv), encoding=None), connect_timeout
        )
    except BaseException as exc:
        connection.abort()
        if isinstance(exc, TimeoutError):
            detail = f"no session within {connect_timeout:g} s"
            raise TransportError(identity, "start", detail) from None
        if isinstance(exc, asyncssh.Error | OSError):
            raise TransportError(identity, "start", _describe_channel_error(exc)) from None
        raise
    # Mask what the config resolved too: the real host name and the login name.
    resolved = [str(options.config.get("Hostname", "")), str(options.username)]
    private = [endpoint, parts.host, parts.user or "", *resolved, *argv[:1]]
    return _SshTransport(identity, connection, process, private)


# --------------------------------------------------------------------------- Slurm job steps

# How long a slurm worker may wait for Slurm to start its job step (a queued allocation, or a
# step waiting for the resources of the current one) before the worker is given up, in
# seconds.  The environment variable overrides the default; tests lower it.
SLURM_START_TIMEOUT_ENV = "ANER_SLURM_START_TIMEOUT"
SLURM_START_TIMEOUT_S = 60.0
# squeue is asked whether the step runs after 50 ms, then at doubling intervals up to 2 s:
# a step that starts at once costs one or two queries, a queued one little load on slurmctld.
_SQUEUE_FIRST_POLL = 0.05
_SQUEUE_MAX_POLL = 2.0
_SQUEUE_TIMEOUT = 10.0
_SLURM_WORD = re.compile(r"[A-Za-z][A-Za-z_]*", re.ASCII)
_STEP_RETRY = re.compile(r"step creation temporarily disabled, retrying \(([A-Za-z ]{1,80})\)")
# slurmstepd's words when it could not execute the worker program.
_EXECVE_FAILED = "execve():"


def slurm_start_timeout(env: Mapping[str, str] | None = None) -> float:
    """The start timeout from $ANER_SLURM_START_TIMEOUT, else SLURM_START_TIMEOUT_S."""
    text = (os.environ if env is None else env).get(SLURM_START_TIMEOUT_ENV, "").strip()
    if not text:
        return SLURM_START_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise ValueError(
            f"{SLURM_START_TIMEOUT_ENV} must be a positive number of seconds, got {text[:20]!r}"
        )
    return value


def srun_command(
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    job_name: str,
    job_id: str | None,
    srun: str = "srun",
) -> list[str]:
    """srun's argument vector for one worker step; every value is a separate argument."""
    command = [
        srun,
        "--unbuffered",  # without it srun forwards output line by line and frames stall
        "--ntasks=1",
        "--nodes=1",
        f"--cpus-per-task={slots}",
        f"--job-name={job_name}",
    ]
    if job_id is not None:
        command.append(f"--jobid={job_id}")
    return [*command, *endpoint.srun_options(), "--", *argv]


class _SlurmTransport(_PipeTransport):
    """srun's stdio, which carries its step's task's stdio, as a pipe transport.

    srun ends when its task ends, so end of file and srun's exit are a lost worker like any
    other.  SIGTERM makes srun cancel its step (or revoke a queued allocation) and wait for
    it, so `close()`'s escalation also ends the process on the node.
    """

    def __init__(
        self,
        identity: str,
        process: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        private: Sequence[str],
        *,
        job_name: str,
        job_id: str | None,
        env: Mapping[str, str] | None,
    ) -> None:
        super().__init__(identity, process, transport, private)
        self._job_name = job_name
        self._job_id = job_id
        self._env = env
        self._started = False

    async def wait_started(self, timeout: float) -> None:
        """Return once Slurm lists the step, or srun has ended (read() then reports it).

        Raises TransportError(phase="start") with Slurm's state and reason when the step has
        not started within `timeout` seconds; srun is then stopped, which withdraws the
        request.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interval = _SQUEUE_FIRST_POLL
        while True:
            listed = await self._step_listed()
            if listed is None or listed:
                # Listed, or squeue cannot tell: from here the handshake's timeout applies.
                self._started = True
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if await self._wait(min(interval, remaining)):
                return
            interval = min(2 * interval, _SQUEUE_MAX_POLL)
        reason = await self._pending_reason()
        await self.close()
        raise TransportError(
            self.identity,
            "start",
            f"Slurm did not start its job step within {timeout:g} s ({reason}); "
            f"check the record's partition and limits, or raise {SLURM_START_TIMEOUT_ENV}",
        )

    async def _step_listed(self) -> bool | None:
        # squeue ignores --name for steps, so the step name is matched here, among our own
        # steps (of the allocation, when in one) rather than every step of the cluster.
        jobs = () if self._job_id is None else (f"--jobs={self._job_id}",)
        listed = await self._squeue("--steps", f"--user={os.getuid()}", *jobs, "--format=%j %i")
        if listed is None:
            return None
        return any(line.split()[:1] == [self._job_name] for line in listed.splitlines())

    async def _pending_reason(self) -> str:
        if self._job_id is not None:
            state = await self._squeue(f"--jobs={self._job_id}", "--format=%T")
            words = _SLURM_WORD.findall(state or "")
            shown = words[0] if words else "unknown"
            # srun says why it keeps retrying: "step creation temporarily disabled, retrying
            # (Requested nodes are busy)".
            said = _STEP_RETRY.findall(self._tail.text())
            why = f": {said[-1]}" if said else ""
            return f"the step waits for resources of allocation {self._job_id}, state {shown}{why}"
        queued = await self._squeue(f"--name={self._job_name}", "--format=%T %r")
        words = _SLURM_WORD.findall(queued or "")
        if not words:
            return "its job is not in the queue"
        # Only Slurm's state and reason words: a reason's details may name nodes.
        reason = words[1] if len(words) > 1 else "unknown"
        return f"job {words[0]}, reason {reason}"

    async def _squeue(self, *args: str) -> str | None:
        """squeue's output for these filters, or None when squeue could not answer."""
        try:
            process = await asyncio.create_subprocess_exec(
                "squeue",
                "--noheader",
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=None if self._env is None else dict(self._env),
            )
        except OSError:
            return None
        try:
            out, _ = await asyncio.wait_for(process.communicate(), _SQUEUE_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return None
        return out.decode("ascii", "replace") if process.returncode == 0 else None

    async def _raise_if_never_started(self) -> None:
        # srun exits 2 when slurmstepd cannot execute the worker, and says why on stderr.
        if self._received:
            return
        if not await self._wait(_EXIT_STATUS_WAIT):
            return
        await asyncio.wait([self._stderr_task], timeout=1.0)
        for line in self._tail.text().splitlines():
            if _EXECVE_FAILED in line:
                if line.endswith("No such file or directory"):
                    detail = "executable not found on the Slurm node; check the executable path"
                elif line.endswith("Permission denied"):
                    detail = "executable cannot be run on the Slurm node; check its permissions"
                else:
                    detail = "the Slurm node could not execute the worker program"
                raise TransportError(self.identity, "start", detail)

    async def close(self, timeout: float = 5.0) -> None:
        if not self._started and not self._closing and self._process.returncode is None:
            # Nothing runs yet, so nothing can read end of input: withdraw the request now.
            self._signal(signal.SIGTERM)
        await super().close(timeout)


async def open_slurm(
    identity: str,
    endpoint: SlurmEndpoint,
    slots: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    start_timeout: float | None = None,
) -> Transport:
    """Run `argv` as one Slurm job step with `slots` CPUs, speaking on srun's stdio.

    Within an allocation ($SLURM_JOB_ID set) the step is a new step of it, otherwise srun
    asks for an allocation of its own.  Returns once Slurm lists the step (see
    `_SlurmTransport.wait_started`); the start timeout is `start_timeout`, else
    $ANER_SLURM_START_TIMEOUT, else SLURM_START_TIMEOUT_S.
    """
    environ = os.environ if env is None else env
    try:
        timeout = slurm_start_timeout(environ) if start_timeout is None else start_timeout
    except ValueError as exc:
        raise TransportError(identity, "start", str(exc)) from None
    srun = shutil.which("srun", path=environ.get("PATH"))
    if srun is None:
        raise TransportError(
            identity,
            "start",
            "srun not found on PATH (run the coordinator where Slurm's commands are installed)",
        )
    job_id = environ.get("SLURM_JOB_ID") or None
    if job_id is not None and not job_id.isdigit():
        raise TransportError(identity, "start", "SLURM_JOB_ID is not a job number")
    job_name = f"aner-{identity}-{secrets.token_hex(4)}"
    command = srun_command(endpoint, slots, argv, job_name=job_name, job_id=job_id, srun=srun)
    process, subprocess_transport = await _spawn(identity, command, env)
    transport = _SlurmTransport(
        identity,
        process,
        subprocess_transport,
        private=[*endpoint.values(), *argv[:1]],
        job_name=job_name,
        job_id=job_id,
        env=env,
    )
    try:
        await transport.wait_started(timeout)
    except BaseException:
        await transport.close()
        raise
    return transport


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
