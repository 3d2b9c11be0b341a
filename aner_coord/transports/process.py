"""A local child process's stdin, stdout and stderr as a transport: the machinery that a local
pipe worker and a Slurm job step (srun, a local child) share.

A child that something else in this process reaps (`os.waitpid`, psutil's `wait()`, a
`subprocess` call reaping every child) never has its exit reported to a uvloop event loop
(libuv's own `waitpid` fails with ECHILD and it keeps waiting), and uvloop's transport then
raises ProcessLookupError when it signals the child, even from its `close()`. Such a failure
once escaped `close()` before it marked the transport closed, so that every later `close()`
of it, a session's next call among them, waited for ever. `close()` therefore never waits
on the loop's word alone (whenever a wait runs out it asks the kernel whether the child is
still ours), signals only a child that is, tolerates one that vanished meanwhile, gives up
on a child that SIGKILL has not ended within KILL_WAIT_S (stuck in the kernel; logged), and
always ends marked closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from typing import cast

from aner_coord.transports.base import (
    EXIT_STATUS_WAIT,
    StderrTail,
    TransportError,
    describe_exit,
    describe_os_error,
)

log = logging.getLogger("aner.coordinator")

KILL_WAIT_S = 10.0  # after SIGKILL, how long a child may take to be gone
# What one read of a worker's stdout may return, and the stream's buffer limit: a Dense
# result of the 256-wide model (a 680 KB frame) is one wake-up of the event loop, not
# eleven of 64 KiB (the worker widens its pipe to 1 MiB: `aner_worker.worker.PIPE_BYTES`).
READ_BYTES = 1 << 20


class StdoutChunks:
    """A child's stdout as the chunks the event loop read, handed over without copies.

    asyncio's StreamReader copies every chunk into its buffer and out of it again; a Dense
    result of the 256-wide model (680 KB) arrives as a few chunks, eight of them a teacher step
    of a 2-worker pipe group, so those two copies cost the coordinator about 1 ms a step (of
    some 8 ms of its CPU, on the cores the workers compute on). `read` returns the oldest
    chunk as the loop gave it, joined with the chunks queued behind it while they fit in `n`
    bytes. Reading pauses while more than twice `limit` bytes wait, as StreamReader's does.
    Only the methods that `SubprocessStreamProtocol` and `ProcessTransport` call exist.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self._limit = limit
        self._loop = loop
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._eof = False
        self._exception: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False

    def set_transport(self, transport: asyncio.ReadTransport) -> None:
        self._transport = transport

    def feed_data(self, data: bytes) -> None:
        if not data:
            return
        self._chunks.append(bytes(data))  # bytes already, from either loop: not copied
        self._size += len(data)
        self._wake()
        if self._transport is not None and not self._paused and self._size > 2 * self._limit:
            try:
                self._transport.pause_reading()
            except NotImplementedError:
                self._transport = None
            else:
                self._paused = True

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        self._exception = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes (`n` > 0), b"" at end of stream; waits while nothing is queued."""
        if self._exception is not None:
            raise self._exception
        while not self._chunks and not self._eof:
            if self._waiter is not None:
                raise RuntimeError("read() called while another coroutine waits for data")
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
            if self._exception is not None:
                raise self._exception
        if not self._chunks:
            return b""
        chunks = self._chunks
        first = chunks.popleft()
        if len(first) > n:
            chunks.appendleft(first[n:])
            first = first[:n]
        taken = [first]
        size = len(first)
        while chunks and size + len(chunks[0]) <= n:
            size += len(chunks[0])
            taken.append(chunks.popleft())
        self._size -= size
        if self._paused and self._size <= self._limit and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return taken[0] if len(taken) == 1 else b"".join(taken)


class _StreamProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol for a child's pipes, with stdout read as `StdoutChunks`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # (uvloop's subprocess transport does not derive from asyncio's.)
        pipe = cast(asyncio.SubprocessTransport, transport).get_pipe_transport(1)
        if pipe is not None:
            chunks = StdoutChunks(self._limit, self._loop)  # type: ignore[attr-defined]
            chunks.set_transport(pipe)  # type: ignore[arg-type]
            self.stdout = chunks  # type: ignore[assignment]


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
        stdout: object = process.stdout  # spawn()'s protocol made it
        assert isinstance(stdout, StdoutChunks)
        self._stdout = stdout
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

    async def read(self, n: int = READ_BYTES) -> bytes:
        if self._closing:
            return b""
        try:
            data = await self._stdout.read(n)
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
                    if not await self._wait(KILL_WAIT_S):
                        log.warning("worker %s still runs after SIGKILL", self.identity)
            # The worker is gone; what is left on stderr arrives at once, unless a descendant
            # still holds the pipe, which must not keep us waiting.
            await asyncio.wait([self._stderr_task], timeout=1.0)
        finally:
            try:
                self._stderr_task.cancel()
                self._signal(signal.SIGKILL)  # a no-op for a child that is gone
                # Releases the pipes too, which the streams alone would leave open (and warn
                # about) when stdout was not read to its end.
                self._close_transport()
            finally:
                self._closed.set()

    async def _wait(self, timeout: float) -> bool:
        """True once the child is gone: its exit reported, or no child of ours any more."""
        try:
            await asyncio.wait_for(self._process.wait(), timeout)
        except TimeoutError:
            return self._gone()
        return True

    def _gone(self) -> bool:
        if self._process.returncode is not None:
            return True
        try:
            pid, _ = os.waitpid(self._process.pid, os.WNOHANG)
        except ChildProcessError:
            return True  # reaped elsewhere: gone, though the loop will never say so
        return pid != 0  # 0: still running; else reaped here and now

    def _close_transport(self) -> None:
        try:
            self._transport.close()
        except ProcessLookupError:
            # uvloop's, for a child reaped elsewhere: it signals the child before closing
            # anything. Its pipes are closed here; its process handle, which the loop still
            # tracks, goes when the loop closes (with a ResourceWarning, ignored by default).
            for fd in (0, 1, 2):
                pipe = self._transport.get_pipe_transport(fd)
                if pipe is not None:
                    pipe.close()

    def _signal(self, signum: int) -> None:
        # Never a child that is gone: its pid may already name another process.
        if self._gone():
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signum)


async def spawn(
    identity: str, argv: Sequence[str], env: Mapping[str, str] | None
) -> tuple[asyncio.subprocess.Process, asyncio.SubprocessTransport]:
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: _StreamProtocol(limit=READ_BYTES, loop=loop),
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
