"""The real worker process, `aner parallel worker --stdio`, driven frame by frame over pipes."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from suite_env import child_env
from support import HANG_S, TOY_SITE, reap

from aner_worker.build import build_identity
from aner_worker.contract import source_fingerprint
from aner_worker.host import host_identity
from aner_worker.inventory import current
from aner_worker.kernels import KERNELS as INSTALLED
from aner_worker.kernels.base import decode, encode
from aner_worker.kernels.fixture import fixture_pass
from aner_worker.kernels.montecarlo import McParams, McStats
from aner_worker.kernels.philox import count_hits
from aner_worker.kernels.regression import RegressionParams, RegressionStats
from aner_worker.machine import machine_identity
from aner_worker.plugins import installed_identities
from aner_worker.worker import platform_identity
from protocol import (
    MAX_QUEUED_PER_SLOT,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameEncoder,
    Hello,
    Message,
    Params,
    Ping,
    Pong,
    Refused,
    Result,
    Shutdown,
    Task,
    Welcome,
    Working,
)
from protocol.connection import plugin_digest

WAIT_S = HANG_S  # guards against a hang only
HUGE = 9_000_000_000  # samples: most of a minute of one core, within the admission limits


class Worker:
    """One worker process and the coordinator's side of its framing."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aner_coord", "parallel", "worker", "--stdio"],
            env=child_env(PYTHONPATH=TOY_SITE),  # the plugins of this process
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

    def stats(self, task_id: int, kind: type[Any]) -> Any:
        """The next message, which must be the Result of `task_id`; its decoded statistics."""
        message = self.recv()
        assert isinstance(message, Result), message
        assert message.task_id == task_id
        assert message.busy_s >= 0
        return decode(kind, message.body)


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker()
    try:
        yield w
    finally:
        reap(w.proc, timeout=WAIT_S)


KERNELS = ("monte-carlo", "regression")


def hello(slots: int = 1, fingerprint: str | None = None) -> Hello:
    fingerprint = fingerprint or source_fingerprint()
    return Hello(PROTOCOL_VERSION, "Atlas-01", slots, fingerprint, KERNELS)


def mc_params(seed: int, pass_id: int = 0) -> Params:
    return Params(pass_id, "monte-carlo", msgspec.Raw(encode(McParams(seed))))


def mc_result(task: Task, seed: int) -> tuple[int, int, int, McStats]:
    return (task.task_id, task.start, task.count, McStats(count_hits(seed, task.start, task.count)))


def as_tuple(message: Message) -> tuple[int, int, int, McStats]:
    assert isinstance(message, Result), message
    return (message.task_id, message.start, message.count, decode(McStats, message.body))


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
        machine=machine_identity(),  # what configuration revisions are made of
        precisions=("float64", "float32"),  # what a Dense job may declare
        build=build_identity(),  # what `aner parallel capabilities --cluster` shows
        # aner's own and the installed plugins' (the sample plugin, samples/asian)
        kernels=tuple(sorted(INSTALLED)),
        host=host_identity().value,  # this host, as this test process computes it
        plugins={d: f"{p.version} {plugin_digest(p)}" for d, p in installed_identities().items()},
    )


def test_monte_carlo_tasks_get_the_oracle_hits(worker: Worker) -> None:
    welcome(worker)
    seed = 2**64 - 1
    first, second = Task(7, 0, 123_456, 200_000), Task(8, 0, 0, 1)
    worker.send(mc_params(seed), first, second)
    assert as_tuple(worker.recv()) == mc_result(first, seed)
    assert as_tuple(worker.recv()) == mc_result(second, seed)


def test_a_new_pass_brings_new_parameters(worker: Worker) -> None:
    welcome(worker)
    worker.send(mc_params(1, pass_id=0), Task(1, 0, 0, 1_000))
    assert as_tuple(worker.recv()) == mc_result(Task(1, 0, 0, 1_000), 1)
    worker.send(mc_params(2, pass_id=1), Task(2, 1, 0, 1_000))
    assert as_tuple(worker.recv()) == mc_result(Task(2, 1, 0, 1_000), 2)


def test_regression_task_gets_sufficient_statistics(worker: Worker) -> None:
    welcome(worker)
    theta = (0.1, -0.2, 0.3, 0.0, 0.5, -0.6, 0.7, 0.8, -0.9)
    body = msgspec.Raw(encode(RegressionParams(5, theta)))
    worker.send(Params(0, "regression", body), Task(3, 0, 10, 1_000))
    stats = worker.stats(3, RegressionStats)
    expected = fixture_pass(5, 10, 1_000, theta)
    assert stats == RegressionStats(expected.grad, expected.loss_sum, expected.correct, 1_000)


def test_a_slot_computing_a_long_task_says_so_at_the_pace_asked(worker: Worker) -> None:
    heartbeat = 0.05
    worker.send(Hello(PROTOCOL_VERSION, "Atlas-01", 1, source_fingerprint(), KERNELS, heartbeat))
    assert isinstance(worker.recv(), Welcome)
    task = Task(1, 0, 0, 100_000_000)
    worker.send(mc_params(42), task)
    words: list[Working] = []
    while isinstance(message := worker.recv(), Working):
        words.append(message)
    assert as_tuple(message) == mc_result(task, 42)
    assert isinstance(message, Result)
    # From the computing slot, between its sub-ranges: about one per period of its busy time
    # (each at least a period after the one before, so never more than that).
    assert all(w.task_id == 1 for w in words)
    assert len(words) <= message.busy_s / heartbeat + 1
    if message.busy_s > 2 * heartbeat:
        assert words, "no word from a slot busy for more than two periods"
    elapsed = [w.elapsed_s for w in words]
    assert elapsed == sorted(elapsed) and all(0 < e <= message.busy_s for e in elapsed)


def test_a_worker_not_asked_for_heartbeats_sends_none(worker: Worker) -> None:
    welcome(worker)
    task = Task(1, 0, 0, 20_000_000)
    worker.send(mc_params(42), task)
    assert as_tuple(worker.recv()) == mc_result(task, 42)


def test_tasks_sent_with_the_hello_are_not_left_waiting(worker: Worker) -> None:
    # A coordinator may pipeline: Hello, the parameters and the first task in one write.
    worker.send(hello(), mc_params(42), Task(1, 0, 0, 1_000))
    assert isinstance(worker.recv(), Welcome)
    assert as_tuple(worker.recv()) == mc_result(Task(1, 0, 0, 1_000), 42)


def is_pong(message: object, nonce: int) -> bool:
    """The Pong of Ping `nonce`, carrying the worker's clock (for the job's timeline)."""
    return isinstance(message, Pong) and message.nonce == nonce and message.clock > 0


def test_a_ping_is_answered_even_while_every_slot_computes(worker: Worker) -> None:
    welcome(worker)
    worker.send(mc_params(3), Task(1, 0, 0, HUGE), Ping(99))  # minutes of work, then a ping
    assert is_pong(worker.recv(), 99)


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
    worker.send(Hello(PROTOCOL_VERSION + 1, "Atlas-01", 1, source_fingerprint(), KERNELS))
    message = worker.recv()
    assert isinstance(message, Refused)
    assert f"coordinator {PROTOCOL_VERSION + 1}, worker {PROTOCOL_VERSION}" in message.reason
    assert worker.wait() == 1


def test_a_kernel_the_worker_lacks_is_refused(worker: Worker) -> None:
    worker.send(Hello(PROTOCOL_VERSION, "Atlas-01", 1, source_fingerprint(), ("boosting",)))
    message = worker.recv()
    assert isinstance(message, Refused)
    assert "this worker has no kernel boosting" in message.reason
    assert worker.wait() == 1


def test_closing_stdin_before_hello_exits_cleanly(worker: Worker) -> None:
    worker.close_stdin()
    assert worker.wait(timeout=5) == 0
    assert worker.rest_of_stdout() == []


def test_closing_stdin_after_work_exits_cleanly(worker: Worker) -> None:
    welcome(worker)
    worker.send(mc_params(1), Task(1, 0, 0, 10_000))
    assert as_tuple(worker.recv()) == mc_result(Task(1, 0, 0, 10_000), 1)
    worker.close_stdin()
    assert worker.wait(timeout=5) == 0
    assert worker.rest_of_stdout() == []


def test_shutdown_makes_it_exit(worker: Worker) -> None:
    welcome(worker)
    worker.send(Shutdown("job completed"))
    assert worker.wait() == 0
    assert worker.rest_of_stdout() == []


def test_shutdown_stops_running_and_queued_tasks_quietly(worker: Worker) -> None:
    welcome(worker)
    big = Task(1, 0, 0, HUGE)  # minutes of work, stopped at a kernel boundary
    queued = [Task(i, 0, i, 10) for i in range(2, 6)]
    worker.send(mc_params(3), big, *queued)
    worker.send(Ping(1))
    assert is_pong(worker.recv(), 1)  # the big task is under way
    started = time.monotonic()
    worker.send(Shutdown("cancelled"))
    messages = worker.rest_of_stdout()
    assert worker.wait() == 0
    assert time.monotonic() - started < 5  # a kernel boundary, not the end of the task
    for message in messages:  # a queued task may have finished before Shutdown: fine
        assert as_tuple(message) == mc_result(Task(message.task_id, 0, message.start, 10), 3)  # type: ignore[union-attr]
        assert message.task_id != 1  # type: ignore[union-attr]
    log = worker.stderr()
    assert "ERROR" not in log and "Traceback" not in log, log


def test_end_of_input_mid_task_stops_at_a_kernel_boundary(worker: Worker) -> None:
    welcome(worker)
    worker.send(mc_params(3), Task(1, 0, 0, HUGE), Ping(1))
    assert is_pong(worker.recv(), 1)
    started = time.monotonic()
    worker.close_stdin()  # the coordinator is gone
    assert worker.wait(timeout=5) == 0
    assert time.monotonic() - started < 5
    assert worker.rest_of_stdout() == []


def test_a_task_before_its_parameters_is_a_protocol_error(worker: Worker) -> None:
    welcome(worker)
    worker.send(Task(1, 0, 0, 10))
    assert worker.wait() == 1
    assert "whose parameters were never sent" in worker.stderr()
    assert worker.rest_of_stdout() == []


def test_parameters_for_an_unknown_kernel_are_a_protocol_error(worker: Worker) -> None:
    welcome(worker)
    worker.send(Params(0, "boosting", msgspec.Raw(encode(McParams(1)))))
    assert worker.wait() == 1
    assert "parameters for unknown kernel 'boosting'" in worker.stderr()


def test_more_tasks_than_the_window_is_a_protocol_error(worker: Worker) -> None:
    welcome(worker)
    limit = MAX_QUEUED_PER_SLOT  # one slot
    tasks = [Task(i, 0, 0, HUGE) for i in range(1, limit + 2)]
    worker.send(mc_params(1), *tasks)
    assert worker.wait() == 1
    assert f"more than {limit} tasks in flight" in worker.stderr()


@pytest.mark.parametrize(("start", "count"), [(0, 10_000_000_001), (10_000_000_000, 1), (0, 0)])
def test_a_task_beyond_the_admission_limits_is_refused(
    worker: Worker, start: int, count: int
) -> None:
    welcome(worker)
    worker.send(mc_params(1), Task(1, 0, start, count))
    assert worker.wait() == 1
    assert "outside the admitted limit of 10,000,000,000 items" in worker.stderr()
    assert worker.rest_of_stdout() == []


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
    frame = worker.encoder.encode(Task(1, 0, 0, 10))
    worker.write(frame[:-3])
    worker.close_stdin()
    assert worker.wait() == 1
    assert worker.rest_of_stdout() == []
    assert "stream ended inside a frame" in worker.stderr()


def test_stdout_carries_frames_only(worker: Worker) -> None:
    welcome(worker)
    worker.send(mc_params(3), Task(1, 0, 0, 5_000), Task(2, 0, 5_000, 5_000))
    messages = [worker.recv(), worker.recv()]
    worker.send(Shutdown())
    messages += worker.rest_of_stdout()
    assert worker.wait() == 0
    assert sorted(m.task_id for m in messages if isinstance(m, Result)) == [1, 2]
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
    worker.send(mc_params(3), Task(1, 0, 0, HUGE))  # minutes of work
    worker.proc.terminate()
    assert worker.wait() == -15
