"""The real worker process, `aner parallel worker --stdio`, driven frame by frame over pipes."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from collections.abc import Iterator

import pytest

from aner_worker.contract import source_fingerprint
from aner_worker.inventory import current
from aner_worker.philox import count_hits
from aner_worker.worker import platform_identity
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
    Refused,
    Shutdown,
    Welcome,
)

WAIT_S = 30  # guards against a hang only; nothing here measures time


class Worker:
    """One worker process and the coordinator's side of its framing."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aner_coord", "parallel", "worker", "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.encoder = FrameEncoder("test-coordinator")
        self.decoder = FrameDecoder("worker under test")
        self.pending: list[Message] = []
        self.raw = b""  # every byte the worker wrote on stdout

    def send(self, *messages: Message) -> None:
        assert self.proc.stdin is not None
        self.write(b"".join(self.encoder.encode(m) for m in messages))

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def _read(self) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], WAIT_S)
        if not ready:
            pytest.fail(f"the worker sent nothing within {WAIT_S} s")
        data = os.read(fd, 1 << 16)
        self.raw += data
        return data

    def recv(self) -> Message:
        while not self.pending:
            data = self._read()
            if not data:
                self.decoder.close()
                pytest.fail("the worker closed stdout instead of answering")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def rest_of_stdout(self) -> list[Message]:
        """Everything after what was received, up to EOF; it must be whole frames."""
        out = list(self.pending)
        while data := self._read():
            out.extend(self.decoder.feed(data))
        self.decoder.close()
        return out

    def wait(self, timeout: float = WAIT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker()
    try:
        yield w
    finally:
        w.kill()


def hello(slots: int = 1, fingerprint: str | None = None) -> Hello:
    return Hello(PROTOCOL_VERSION, "Atlas-01", slots, fingerprint or source_fingerprint())


def welcome(worker: Worker, slots: int = 1) -> Welcome:
    worker.send(hello(slots))
    message = worker.recv()
    assert isinstance(message, Welcome), message
    return message


def test_hello_gets_welcome(worker: Worker) -> None:
    message = welcome(worker)
    assert message == Welcome(
        protocol=PROTOCOL_VERSION,
        fingerprint=source_fingerprint(),
        platform=platform_identity(),
        effective_cpus=current().effective_cpus,
        slots=1,
    )


def test_mc_task_gets_the_oracle_hits(worker: Worker) -> None:
    welcome(worker)
    seed = 2**64 - 1
    worker.send(McTask(task_id=7, seed=seed, start=123_456, count=200_000))
    worker.send(McTask(task_id=8, seed=42, start=0, count=1))
    assert worker.recv() == McResult(7, 123_456, 200_000, count_hits(seed, 123_456, 200_000))
    assert worker.recv() == McResult(8, 0, 1, count_hits(42, 0, 1))


def test_fx_task_gets_sufficient_statistics(worker: Worker) -> None:
    from aner_worker.fixture import fixture_pass

    welcome(worker)
    theta = (0.1, -0.2, 0.3, 0.0, 0.5, -0.6, 0.7, 0.8, -0.9)
    worker.send(FxTask(task_id=3, seed=5, start=10, count=1_000, theta=theta))
    result = worker.recv()
    expected = fixture_pass(5, 10, 1_000, theta)
    assert isinstance(result, FxResult)
    assert (result.task_id, result.start, result.count, result.valid) == (3, 10, 1_000, 1_000)
    assert result.grad == tuple(expected.grad)
    assert result.loss_sum == expected.loss_sum
    assert result.correct == expected.correct


def test_tasks_sent_with_the_hello_are_not_left_waiting(worker: Worker) -> None:
    # A coordinator may pipeline: Hello and the first task in one write.
    worker.send(hello(), McTask(task_id=1, seed=42, start=0, count=1_000))
    assert isinstance(worker.recv(), Welcome)
    assert worker.recv() == McResult(1, 0, 1_000, count_hits(42, 0, 1_000))


def test_wrong_fingerprint_is_refused_naming_both(worker: Worker) -> None:
    theirs = "sha256:" + "0" * 64
    worker.send(hello(fingerprint=theirs))
    message = worker.recv()
    assert isinstance(message, Refused)
    ours = source_fingerprint()
    assert message.fingerprint == ours
    assert message.protocol == PROTOCOL_VERSION
    assert theirs in message.reason and ours in message.reason
    assert message.reason == f"source contract differs (coordinator {theirs}, worker {ours})"
    assert worker.rest_of_stdout() == []
    assert worker.wait() == 1
    assert "refused" in worker.stderr()


def test_too_many_slots_is_refused(worker: Worker) -> None:
    effective = current().effective_cpus
    worker.send(hello(slots=effective + 1))
    message = worker.recv()
    assert isinstance(message, Refused)
    assert f"assigned {effective + 1} slots" in message.reason
    assert f"effective CPU allocation is {effective}" in message.reason
    assert worker.wait() == 1


def test_wrong_protocol_version_is_refused(worker: Worker) -> None:
    worker.send(Hello(PROTOCOL_VERSION + 1, "Atlas-01", 1, source_fingerprint()))
    message = worker.recv()
    assert isinstance(message, Refused)
    assert f"coordinator {PROTOCOL_VERSION + 1}, worker {PROTOCOL_VERSION}" in message.reason
    assert worker.wait() == 1


def test_closing_stdin_before_hello_exits_cleanly(worker: Worker) -> None:
    worker.close_stdin()
    assert worker.wait(timeout=5) == 0
    assert worker.rest_of_stdout() == []


def test_closing_stdin_after_work_exits_cleanly(worker: Worker) -> None:
    welcome(worker)
    worker.send(McTask(task_id=1, seed=1, start=0, count=10_000))
    assert worker.recv() == McResult(1, 0, 10_000, count_hits(1, 0, 10_000))
    worker.close_stdin()
    assert worker.wait(timeout=5) == 0
    assert worker.rest_of_stdout() == []


def test_shutdown_makes_it_exit(worker: Worker) -> None:
    welcome(worker)
    worker.send(Shutdown("job completed"))
    assert worker.wait() == 0
    assert worker.rest_of_stdout() == []


def test_shutdown_drops_queued_tasks_quietly(worker: Worker) -> None:
    welcome(worker)
    big = McTask(task_id=1, seed=3, start=0, count=50_000_000)
    queued = [McTask(task_id=i, seed=3, start=i, count=10) for i in range(2, 6)]
    worker.send(big, *queued, Shutdown("cancelled"))
    messages = worker.rest_of_stdout()
    assert worker.wait() == 0
    assert messages[0] == McResult(1, 0, big.count, count_hits(3, 0, big.count))
    for message in messages[1:]:  # a queued task may have started before Shutdown: fine
        assert isinstance(message, McResult)
        assert message.hits == count_hits(3, message.start, message.count)
    log = worker.stderr()
    assert "ERROR" not in log and "Traceback" not in log, log


def test_a_second_hello_is_a_protocol_error(worker: Worker) -> None:
    welcome(worker)
    worker.send(hello())
    assert worker.wait() == 1
    assert "unexpected Hello" in worker.stderr()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff",  # a length far over the maximum
        b"\x00\x00\x00\x00",  # an empty frame
        b"\x00\x00\x00\x03abc",  # not MessagePack
        b"\x00\x00\x00\x01\x2a",  # MessagePack, but not a message
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["oversized", "empty", "not-msgpack", "not-a-message", "http"],
)
def test_garbage_before_hello_exits_non_zero(worker: Worker, garbage: bytes) -> None:
    worker.write(garbage)
    assert worker.wait() != 0
    assert worker.rest_of_stdout() == []
    assert "protocol error from coordinator" in worker.stderr()


def test_garbage_after_welcome_exits_non_zero(worker: Worker) -> None:
    welcome(worker)
    worker.write(b"\x00\x00\x00\x02\xc1\xc1")
    assert worker.wait() == 1
    assert worker.rest_of_stdout() == []
    assert "malformed message" in worker.stderr()


def test_truncated_frame_then_eof_exits_non_zero(worker: Worker) -> None:
    welcome(worker)
    frame = worker.encoder.encode(McTask(task_id=1, seed=1, start=0, count=10))
    worker.write(frame[:-3])
    worker.close_stdin()
    assert worker.wait() == 1
    assert worker.rest_of_stdout() == []
    assert "stream ended inside a frame" in worker.stderr()


def test_stdout_carries_frames_only(worker: Worker) -> None:
    welcome(worker)
    worker.send(
        McTask(task_id=1, seed=3, start=0, count=5_000),
        McTask(task_id=2, seed=3, start=5_000, count=5_000),
    )
    messages = [worker.recv(), worker.recv()]
    worker.send(Shutdown())
    messages += worker.rest_of_stdout()
    assert worker.wait() == 0
    assert sorted(m.task_id for m in messages if isinstance(m, McResult)) == [1, 2]
    assert len(messages) == 2
    # Re-decode every byte the worker wrote: whole frames, nothing else.
    again = FrameDecoder("stdout")
    decoded = list(again.feed(worker.raw))
    again.close()
    assert len(decoded) == 3 and isinstance(decoded[0], Welcome)
    log = worker.stderr()
    assert "aner-worker INFO worker Atlas-01 ready with 1 slots" in log


def test_worker_exits_when_killed_mid_task(worker: Worker) -> None:
    welcome(worker)
    worker.send(McTask(task_id=1, seed=3, start=0, count=2**40))  # minutes of work
    worker.proc.terminate()
    assert worker.wait() == -15
