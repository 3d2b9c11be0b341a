"""The transport contract: raw bytes to and from one worker process, and the errors and
helpers every transport shares.
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

Endpoints, host names, user names, ports and executable paths are private (docs/contracts.md,
section 5): error messages name the worker by identity and translate native failures into generic
words; native exceptions stay reachable as `__context__` for debugging but are not printed with the
traceback.  `stderr_tail()` masks the endpoint, host and user names and the executable path.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import Literal, Protocol

from aner_coord.errors import WorkerFailure

Phase = Literal["connect", "start", "send", "receive", "close"]


STDERR_TAIL_LINES = 20


_STDERR_LINE_CHARS = 400


# How long read() waits, after an empty stdout, for the exit status that tells a worker that
# never started (exit 127/126) from one that simply said nothing.
EXIT_STATUS_WAIT = 2.0


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


class StderrTail:
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


def describe_exit(status: int | None) -> str | None:
    """Words for an exit status that means the worker program never ran."""
    if status == _EXIT_NOT_FOUND:
        return "executable not found (exit 127); check the executable path in the cluster file"
    if status == _EXIT_NOT_EXECUTABLE:
        return "executable cannot be run (exit 126); check its permissions"
    return None


def describe_os_error(exc: BaseException) -> str:
    """Generic words for an OS-level failure; strerror carries no names, the message might."""
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        return "the worker closed its input (it may have exited)"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    return f"I/O failure ({type(exc).__name__})"
