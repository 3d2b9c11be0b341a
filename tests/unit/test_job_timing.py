"""The wire's additions for scaling experiments: the machine identity in `Welcome` and the
queueing time in `Result`, both appended with defaults so an older peer's frames still
decode; and the coordinator's per-worker cost accounts built from task stamps."""

from __future__ import annotations

import time

import msgspec

from aner_coord.job.timing import ClockOffset, TaskRecord, TaskTimes, WorkerSums, costs
from aner_coord.jobdir.status import WorkerAccount, decode_status
from protocol import (
    Accepted,
    Answered,
    CoordinatorConnection,
    Ponged,
    Result,
    Task,
    Welcome,
    WorkerConnection,
)
from protocol.messages import Message

FP = "sha256:" + "0" * 64
MACHINE = {"cpu_model": "Test CPU", "logical_cpus": "4", "aner": "0.1.0"}


def _tasks(*ids: int, pass_id: int = 0) -> list[tuple[int, int, int, int, int | None]]:
    """`TaskTimes.dispatched`'s tuples: task `i` covers items [10 i, 10 i + 10)."""
    return [(i, pass_id, 10 * i, 10, 40) for i in ids]


def test_the_welcome_carries_the_workers_machine() -> None:
    coordinator = CoordinatorConnection("Atlas-02", 2, FP, ("mc",))
    worker = WorkerConnection(FP, 4, "p", {"mc"}, machine=MACHINE)
    worker.receive(coordinator.hello())
    (accepted,) = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted)
    assert accepted.welcome.machine == MACHINE


def test_older_frames_without_the_new_fields_still_decode() -> None:
    decoder = msgspec.msgpack.Decoder(Message)
    # An older worker's Welcome and Result: the same arrays, without the appended fields.
    old_welcome = msgspec.msgpack.encode(["welcome", 1, FP, "p", 4, 2])
    welcome = decoder.decode(old_welcome)
    assert isinstance(welcome, Welcome) and welcome.machine == {}
    body = msgspec.msgpack.encode([5])
    old_result = msgspec.msgpack.encode(["result", 3, 0, 10, msgspec.Raw(body), 0.25])
    result = decoder.decode(old_result)
    assert isinstance(result, Result) and result.busy_s == 0.25 and result.queued_s == 0.0


def test_a_result_reports_how_long_its_task_queued() -> None:
    coordinator = CoordinatorConnection("w", 1, FP, ("mc",))
    worker = WorkerConnection(FP, 1, "p", {"mc"})
    worker.receive(coordinator.hello())
    coordinator.receive(worker.reply())
    worker.receive(coordinator.params(1, "mc", msgspec.msgpack.encode([1])))
    task = Task(7, 1, 0, 10)
    worker.receive(coordinator.task(task))
    (answered,) = coordinator.receive(worker.result(task, msgspec.msgpack.encode([3]), 0.5, 0.125))
    assert isinstance(answered, Answered)
    assert isinstance(answered.message, Result)
    assert (answered.message.busy_s, answered.message.queued_s) == (0.5, 0.125)


def test_costs_are_sums_of_what_was_measured_and_none_otherwise() -> None:
    link = TaskTimes(link=True)
    link.start()
    link.machine("w1", MACHINE)
    t0 = time.monotonic()
    link.dispatched("w1", _tasks(1, 2), now=t0)
    assert link.received("w1", 1, 0.25, 0.0, now=t0 + 0.5) == (0.25, 0.25)
    assert link.received("w1", 2, 0.5, 0.25, now=t0 + 1.0) == (0.5, 0.25)
    idle = WorkerAccount("w2", 1, 0, 0)  # never answered: nothing measured
    w1, w2 = link.annotate([WorkerAccount("w1", 2, 20, 2), idle])
    assert w1.compute_s == 0.75
    assert w1.transfer_s is not None and w1.transfer_s >= 0
    assert w1.wait_s is not None and w1.wait_s >= 0
    assert w1.machine == MACHINE
    assert w2 == idle and w2.compute_s is None and w2.transfer_s is None
    threads = TaskTimes(link=False)
    threads.received("local-1", 1, 0.125, now=time.monotonic() + 1.0)
    (local,) = threads.annotate([WorkerAccount("local-1", 1, 10, 1)])
    assert local.compute_s == 0.125 and local.transfer_s is None  # no link: not measured


def test_a_worker_cannot_claim_more_compute_time_than_its_task_has_existed() -> None:
    times = TaskTimes(link=True)
    t0 = time.monotonic()
    times.dispatched("w1", _tasks(1, 2), now=t0)
    assert times.received("w1", 1, 1e6, 1e6, now=t0 + 2.0) == (2.0, 0.0)
    assert times.received("w1", 2, 0.5, 0.0, now=t0 + 2.0) == (0.5, 1.5)
    assert times.received("w1", 3, 7.0, 0.0, now=t0 + 2.0) == (7.0, None)  # never stamped
    (w1,) = times.annotate([WorkerAccount("w1", 8, 30, 3)])
    assert w1.compute_s == 9.5  # within 8 slots times the span
    (one,) = times.annotate([WorkerAccount("w1", 1, 30, 3)])
    assert one.compute_s is not None and one.compute_s < 2.5  # one slot: at most the span
    assert one.wait_s is not None and one.wait_s >= 0


def test_unmeasured_costs_are_left_out_of_status_files() -> None:
    from aner_coord.jobdir.status import encode_status

    data = (
        b'{"schema": "aner-status/2", "seq": 1, "state": "RUNNING", "kind": "monte-carlo",'
        b' "pid": 1, "created_at": 0, "updated_at": 0, "elapsed_s": 0, "requested": 10,'
        b' "passes": 1, "pass_index": 0, "phase": "p", "accepted": 0, "accepted_in_pass": 0,'
        b' "chunks_total": 1, "chunks_done": 0, "in_flight": 0, "throughput": null,'
        b' "eta_s": null, "workers": [{"identity": "w", "slots": 1, "items": 0, "chunks": 0}]}'
    )
    snapshot = decode_status(data)
    assert snapshot.workers[0].compute_s is None
    assert b"compute_s" not in encode_status(snapshot)
    measured = msgspec.structs.replace(
        snapshot, workers=[msgspec.structs.replace(snapshot.workers[0], compute_s=1.5)]
    )
    assert decode_status(encode_status(measured)).workers[0].compute_s == 1.5


def test_link_time_counts_tasks_in_flight_together_once() -> None:
    # A hundred tasks in flight at once, each answered with no compute and no queueing:
    # each one's link time is nearly the whole span, so a sum would be a hundred spans.
    times = TaskTimes(link=True)
    times.start()
    began = time.monotonic()
    times.dispatched("w1", _tasks(*range(100)))
    while time.monotonic() - began < 0.01:
        pass
    for task_id in range(100):
        times.received("w1", task_id, 0.0, 0.0)
    span = time.monotonic() - began
    (account,) = times.annotate([WorkerAccount("w1", 1, 100, 100)])
    assert account.transfer_s is not None
    assert 0.01 <= account.transfer_s <= span


def test_a_result_and_a_pong_carry_the_workers_clock_and_older_ones_decode() -> None:
    coordinator = CoordinatorConnection("w", 1, FP, ("mc",))
    worker = WorkerConnection(FP, 1, "p", {"mc"})
    worker.receive(coordinator.hello())
    coordinator.receive(worker.reply())
    worker.receive(coordinator.params(1, "mc", msgspec.msgpack.encode([1])))
    task = Task(7, 1, 0, 10)
    worker.receive(coordinator.task(task))
    frame = worker.result(task, msgspec.msgpack.encode([3]), 0.5, 0.125, 1234.5)
    (answered,) = coordinator.receive(frame)
    assert isinstance(answered, Answered) and isinstance(answered.message, Result)
    assert answered.message.started == 1234.5
    worker.receive(coordinator.ping())
    (ponged,) = coordinator.receive(worker.pong(coordinator.last_ping, 99.25))
    assert ponged == Ponged(coordinator.last_ping, 99.25)
    decoder = msgspec.msgpack.Decoder(Message)
    old = decoder.decode(msgspec.msgpack.encode(["pong", 3]))
    assert old == msgspec.convert(["pong", 3, 0.0], Message) and old.clock == 0.0


def test_the_clock_offset_keeps_the_estimate_of_the_shortest_round_trip() -> None:
    clock = ClockOffset()
    clock.observe(10.0, 10.4, 110.3)  # round trip 0.4: midpoint 10.2, offset 100.1
    assert clock.offset is not None and abs(clock.offset - 100.1) < 1e-9
    assert abs(clock.error_s - 0.2) < 1e-9
    clock.observe(20.0, 20.1, 120.04)  # shorter: replaces it
    assert abs(clock.offset - 99.99) < 1e-9 and abs(clock.error_s - 0.05) < 1e-9
    clock.observe(30.0, 31.0, 500.0)  # longer: ignored however far off
    assert abs(clock.offset - 99.99) < 1e-9
    clock.observe(40.0, 40.01, 0.0)  # a worker that did not say: ignored
    assert abs(clock.error_s - 0.05) < 1e-9


def test_each_task_gets_one_record_mapped_onto_the_coordinators_clock() -> None:
    times = TaskTimes(link=True)
    records: list[TaskRecord] = []
    times.sink = records.append
    times.start()
    t0 = time.monotonic()
    times.clock("w1", t0, t0 + 0.002, 5000.0)  # the worker's clock reads 5000 at t0 + 0.001
    times.dispatched("w1", _tasks(1, 2), now=t0 + 0.01)
    busy, link_s = times.received("w1", 1, 0.5, 0.125, now=t0 + 0.7, started=5000.0 + 0.06, size=64)
    assert busy == 0.5 and link_s is not None and abs(link_s - 0.065) < 1e-9
    (record,) = records
    assert (record.worker, record.pass_id, record.task_id, record.start, record.count) == (
        "w1",
        0,
        1,
        10,
        10,
    )
    assert record.dispatched == t0 + 0.01 and record.received == t0 + 0.7
    assert record.started is not None and record.ended is not None
    assert abs(record.started - (t0 + 0.061)) < 1e-9
    assert abs(record.ended - record.started - 0.5) < 1e-12
    assert record.clock_error_s is not None and abs(record.clock_error_s - 0.001) < 1e-9
    assert (record.bytes_out, record.bytes_in, record.outcome) == (40, 64, "accepted")
    # The worker is lost with task 2 outstanding; its range is retried elsewhere.
    times.lost("w1")
    assert records[-1].task_id == 2 and records[-1].outcome == "lost"
    assert records[-1].received is None
    times.dispatched("w2", [(9, 0, 20, 10, 40)], now=t0 + 1.0)
    times.received("w2", 9, 0.25, 0.0, now=t0 + 1.5)
    assert records[-1].outcome == "retried" and records[-1].started is None  # no clock yet
    times.received("w2", 10, 0.25, 0.0, now=t0 + 1.6)  # never dispatched: refused
    assert records[-1].outcome == "duplicate"


def test_the_sums_shown_are_the_sums_of_the_records() -> None:
    times = TaskTimes(link=True)
    records: list[TaskRecord] = []
    times.sink = records.append
    times.start()
    t0 = time.monotonic()
    times.dispatched("w1", _tasks(*range(6)), now=t0)
    for i in range(6):
        times.received("w1", i, 0.1 * (i + 1), 0.01, now=t0 + 0.3 * (i + 1))
    (account,) = times.annotate([WorkerAccount("w1", 2, 60, 6)])
    sums = WorkerSums()
    for record in records:
        sums.add(record)
    span = max(r.received or 0.0 for r in records) - times.started
    cost = costs(sums, 2, span, link=True)
    assert account.compute_s == round(cost.compute_s or -1, 6)
    assert account.transfer_s == round(cost.transfer_s or -1, 6)
    assert account.wait_s == round(cost.wait_s or -1, 6)
    assert abs((account.compute_s or 0) - 2.1) < 1e-6
