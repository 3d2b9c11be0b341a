"""The worker process: `aner parallel worker --stdio`.

Speaks frames on stdin/stdout and logs on stderr only. The first frame must be a `Hello`;
the worker checks the protocol version, the source-contract fingerprint and the slots it is
assigned against its own effective CPU allocation, and answers `Welcome` or `Refused`. Then
`slots` long-lived threads (the kernels release the GIL) take tasks from one queue and write
each result as it completes; results that complete while another is being written go out
together in the next write, and the result of a very short task may wait up to a couple of
milliseconds for company (see HOLD_TASK_S). It exits on end of input (its coordinator closed
the pipe, or vanished, or the SSH channel dropped), on `Shutdown`, or on a protocol error,
after finishing the tasks its slots hold and writing every pending result. It never opens a
socket.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import sys
import threading
import time

from protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    FxResult,
    FxTask,
    Hello,
    McResult,
    McTask,
    Message,
    ProtocolError,
    Refused,
    Shutdown,
    TaskFailed,
    Welcome,
)

log = logging.getLogger("aner.worker")

# A coordinator keeps at most 64 tasks per slot in flight; more is a broken peer.
MAX_QUEUED_PER_SLOT = 64
# The result of a task shorter than this, with more tasks queued behind it, may wait for the
# results that follow it, so one write (and one wake-up of the coordinator) carries several;
# no result waits longer than HOLD_MAX_S plus one task, and the coordinator's window (about
# 50 ms of work per slot) hides that delay.
HOLD_TASK_S = 0.001
HOLD_MAX_S = 0.002
HOLD_MAX_FRAMES = 64


def platform_identity() -> str:
    return (
        f"{platform.system()}-{platform.machine()}/"
        f"{platform.python_implementation()}-{platform.python_version()}/{sys.byteorder}"
    )


class _Output:
    """Serialises frames from slot threads onto one file descriptor.

    Whoever finds no write in progress becomes the writer and keeps writing until nothing is
    pending; frames that arrive meanwhile are joined into its next write. A frame sent with
    `hold=True` may stay pending (see HOLD_TASK_S) until a later `send` or `flush`.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._encoder = FrameEncoder("worker")
        self._pending: list[bytes] = []
        self._pending_since = 0.0
        self._writing = False
        self.broken = False
        self.answered = 0  # task results (or failures) handed to send()

    def send(self, message: object, *, answer: bool = False, hold: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if answer:
                self.answered += 1
            if self.broken:
                return
            pending = self._pending
            if not pending:
                self._pending_since = now
            pending.append(self._encoder.encode(message))  # type: ignore[arg-type]
            if hold and len(pending) < HOLD_MAX_FRAMES and now - self._pending_since < HOLD_MAX_S:
                return
            if self._writing:
                return
            self._writing = True
        self._drain()

    def flush(self) -> None:
        """Write whatever is pending now."""
        with self._lock:
            if self._writing or not self._pending:
                return
            self._writing = True
        self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending or self.broken:
                    self._pending.clear()
                    self._writing = False
                    return
                data = memoryview(b"".join(self._pending))
                self._pending.clear()
            try:
                while data:
                    written = os.write(self._fd, data)
                    data = data[written:]
            except OSError:
                with self._lock:
                    self.broken = True  # coordinator gone; the read loop will see EOF


def serve(stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Run the worker loop until EOF or Shutdown; return the process exit status."""
    from aner_worker.contract import source_fingerprint
    from aner_worker.inventory import current

    decoder = FrameDecoder("coordinator")
    out = _Output(stdout_fd)
    fingerprint = source_fingerprint()
    try:
        early = _first_messages(stdin_fd, decoder)
    except ProtocolError as exc:
        log.error("%s", exc)
        return 1
    if not early:
        return 0
    hello = early.pop(0)
    if not isinstance(hello, Hello):
        log.error("expected Hello, got %s", type(hello).__name__)
        return 1
    effective = current().effective_cpus
    reason = _refusal(hello, fingerprint, effective)
    if reason is not None:
        out.send(Refused(reason, PROTOCOL_VERSION, fingerprint))
        log.error("refused: %s", reason)
        return 1
    from aner_worker.tasks import execute, warm_up

    warm_up()  # compile or load the cached kernels before accepting work
    out.send(Welcome(PROTOCOL_VERSION, fingerprint, platform_identity(), effective, hello.slots))
    log.info("worker %s ready with %d slots", hello.identity, hello.slots)

    # Tasks in arrival order, numbered. On Shutdown or end of input, tasks numbered from
    # `cutoff` on (those after the ones running or about to run on every slot) are dropped:
    # nobody waits for their answers.
    tasks: queue.SimpleQueue[tuple[int, McTask | FxTask] | None] = queue.SimpleQueue()
    cutoff = [sys.maxsize]

    def slot() -> None:
        while True:
            item = tasks.get()
            if item is None or item[0] >= cutoff[0]:
                return
            task = item[1]
            began = time.monotonic()
            try:
                result: McResult | FxResult | TaskFailed = execute(task)
            except Exception as error:  # the task's failure, reported to the coordinator
                result = TaskFailed(task.task_id, f"{type(error).__name__}: {error}")
            short = time.monotonic() - began < HOLD_TASK_S
            out.send(result, answer=True, hold=short and not tasks.empty())

    threads = [
        threading.Thread(target=slot, name=f"aner-slot-{i}", daemon=True)
        for i in range(hello.slots)
    ]
    for thread in threads:
        thread.start()
    limit = hello.slots * MAX_QUEUED_PER_SLOT
    received = 0

    status = 0
    messages = early  # frames that arrived together with the Hello
    try:
        while True:
            stop = False
            for message in messages:
                if isinstance(message, McTask | FxTask):
                    if received - out.answered >= limit:
                        raise ProtocolError(
                            "coordinator", "more tasks in flight than the window allows"
                        )
                    tasks.put((received, message))
                    received += 1
                elif isinstance(message, Shutdown):
                    stop = True
                    break
                else:
                    raise ProtocolError("coordinator", f"unexpected {type(message).__name__}")
            if stop:
                break
            data = os.read(stdin_fd, 1 << 16)
            if not data:
                decoder.close()
                break
            messages = decoder.feed(data)
    except ProtocolError as exc:
        log.error("%s", exc)
        status = 1
    finally:
        cutoff[0] = out.answered + hello.slots
        for _ in threads:
            tasks.put(None)
        for thread in threads:
            thread.join()
        out.flush()  # results that were waiting for company
    return status


def _first_messages(fd: int, decoder: FrameDecoder) -> list[Message]:
    """The messages of the first read that completes any; empty at end of input."""
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            decoder.close()
            return []
        if messages := decoder.feed(data):
            return messages


def _refusal(hello: Hello, fingerprint: str, effective: int) -> str | None:
    if hello.protocol != PROTOCOL_VERSION:
        return f"protocol version differs (coordinator {hello.protocol}, worker {PROTOCOL_VERSION})"
    if hello.fingerprint != fingerprint:
        return f"source contract differs (coordinator {hello.fingerprint}, worker {fingerprint})"
    if not 1 <= hello.slots <= effective:
        return (
            f"assigned {hello.slots} slots but this worker's effective CPU allocation is "
            f"{effective}: lower its slots in the cluster file"
        )
    return None


def main() -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="aner-worker %(levelname)s %(message)s"
    )
    # Keep stray prints from corrupting the frame stream: stdout is ours alone.
    stdout_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(0, stdout_fd)
