"""A local child process's stdin, stdout and stderr as a transport: the machinery that a local
pipe worker and a Slurm job step (srun, a local child) share.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping, Sequence

from aner_coord.transports.base import (
    EXIT_STATUS_WAIT,
    StderrTail,
    TransportError,
    describe_exit,
    describe_os_error,
)


class ProcessTransport:
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
        self._tail = StderrTail(private)
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
            raise TransportError(self.identity, "send", describe_os_error(exc)) from None

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
            raise TransportError(self.identity, "receive", describe_os_error(exc)) from None
        if not data:
            await self._raise_if_never_started()
        self._received += len(data)
        return data

    async def _raise_if_never_started(self) -> None:
        # asyncio starts the program directly, so 127/126 come from a wrapper such as a shell.
        if self._received:
            return
        try:
            status = await asyncio.wait_for(self._process.wait(), EXIT_STATUS_WAIT)
        except TimeoutError:
            return
        detail = describe_exit(status)
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


async def spawn(
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
        raise TransportError(identity, "start", describe_os_error(exc)) from None
    return asyncio.subprocess.Process(transport, protocol, loop), transport
