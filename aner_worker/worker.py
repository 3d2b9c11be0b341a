"""The worker process: `aner parallel worker --stdio`.

Speaks frames on stdin/stdout and logs on stderr only. The first frame must be a `Hello`;
the worker checks the protocol version, the source-contract fingerprint and the slots it is
assigned against its own effective CPU allocation, and answers `Welcome` or `Refused`. Then it
runs up to `slots` tasks at once on a fixed thread pool (the kernels release the GIL) and
writes each result as it completes. It exits on end of input (its coordinator closed the
pipe, or vanished, or the SSH channel dropped), on `Shutdown`, or on a protocol error. It
never opens a socket.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from protocol import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    FxResult,
    FxTask,
    Hello,
    McResult,
    McTask,
    ProtocolError,
    Refused,
    Shutdown,
    TaskFailed,
    Welcome,
)

log = logging.getLogger("aner.worker")

# A coordinator keeps at most 64 tasks per slot in flight; more is a broken peer.
MAX_QUEUED_PER_SLOT = 64


def platform_identity() -> str:
    return (
        f"{platform.system()}-{platform.machine()}/"
        f"{platform.python_implementation()}-{platform.python_version()}/{sys.byteorder}"
    )


class _Output:
    """Serialises frames from pool threads onto one file descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._encoder = FrameEncoder("worker")
        self.broken = False

    def send(self, message: object) -> None:
        with self._lock:
            if self.broken:
                return
            data = memoryview(self._encoder.encode(message))  # type: ignore[arg-type]
            try:
                while data:
                    written = os.write(self._fd, data)
                    data = data[written:]
            except OSError:
                self.broken = True  # coordinator gone; the read loop will see EOF


def serve(stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Run the worker loop until EOF or Shutdown; return the process exit status."""
    from aner_worker.contract import source_fingerprint
    from aner_worker.inventory import current

    decoder = FrameDecoder("coordinator")
    out = _Output(stdout_fd)
    fingerprint = source_fingerprint()
    try:
        hello = _first_message(stdin_fd, decoder)
    except ProtocolError as exc:
        log.error("%s", exc)
        return 1
    if hello is None:
        return 0
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

    pool = ThreadPoolExecutor(max_workers=hello.slots, thread_name_prefix="aner-slot")
    queued = threading.Semaphore(hello.slots * MAX_QUEUED_PER_SLOT)

    def finished(task: McTask | FxTask, future: Future[McResult | FxResult]) -> None:
        queued.release()
        if future.cancelled():
            return  # dropped by Shutdown: nobody waits for its answer
        error = future.exception()
        if error is None:
            out.send(future.result())
        else:
            out.send(TaskFailed(task.task_id, f"{type(error).__name__}: {error}"))

    def run(task: McTask | FxTask) -> None:
        if not queued.acquire(blocking=False):
            raise ProtocolError("coordinator", "more tasks in flight than the window allows")
        future = pool.submit(execute, task)
        future.add_done_callback(lambda f: finished(task, f))

    status = 0
    data = b""  # frames that arrived together with the Hello already sit in the decoder
    try:
        while True:
            stop = False
            for message in decoder.feed(data):
                if isinstance(message, McTask | FxTask):
                    run(message)
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
    except ProtocolError as exc:
        log.error("%s", exc)
        status = 1
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return status


def _first_message(fd: int, decoder: FrameDecoder) -> object | None:
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            decoder.close()
            return None
        for message in decoder.feed(data):
            return message


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
