"""The SSH transport: a worker on another machine, reached as OpenSSH would reach it, over
an asyncssh channel. It implements the contract in `aner_coord.transports` (the module
docstring there) and is imported only when a job has an SSH record.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shlex
import socket
import warnings
from collections.abc import Sequence
from typing import Literal

# asyncssh names DSA key classes at import, and cryptography 51 deprecates that name with a
# warning a user would see on every SSH job whatever keys they use (and the test suite, with
# warnings as errors, could not import the transport at all). Only that one warning, only
# around the import: a DSA key actually used still warns where asyncssh loads it.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated", module="asyncssh")
    import asyncssh

from aner_coord.clusterfile import parse_ssh_endpoint
from aner_coord.transports.base import (
    EXIT_STATUS_WAIT,
    StderrTail,
    Transport,
    TransportError,
    describe_exit,
    describe_os_error,
)

# asyncssh logs host names, ports and user names at INFO level; keep them out of logs a user
# may publish unless someone chose a level for this logger on purpose.
_asyncssh_logger = logging.getLogger("asyncssh")
if _asyncssh_logger.level == logging.NOTSET:
    _asyncssh_logger.setLevel(logging.WARNING)

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
        if exc.errno is not None and exc.filename is not None:
            # A file the client configuration names (an IdentityFile, a certificate): the
            # user's own, named with ~ for their home.
            named = _home_relative(os.fsdecode(exc.filename))
            return (
                f"{os.strerror(exc.errno)}: {named} (an IdentityFile or other file this "
                "worker's ~/.ssh/config names?)"
            )
        if exc.errno is not None:
            return os.strerror(exc.errno)
        return "the connection could not be opened (refused or unreachable at every address)"
    if isinstance(exc, ValueError):
        return (
            "the SSH configuration or a key could not be loaded (check ~/.ssh/config and "
            "IdentityFile for this worker)"
        )
    return f"SSH failure ({type(exc).__name__})"


def _home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


def _describe_channel_error(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.ConnectionLost | asyncssh.DisconnectError):
        return "SSH connection lost"
    if isinstance(exc, asyncssh.ChannelOpenError):
        return "the server refused to open a session channel"
    if isinstance(exc, BrokenPipeError):
        return "channel closed (the worker may have exited)"
    return describe_os_error(exc)


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
        self._tail = StderrTail(private, pid_marker=_PID_MARKER)
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
        if not await self._wait(EXIT_STATUS_WAIT):
            return
        detail = describe_exit(self._process.exit_status)
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
