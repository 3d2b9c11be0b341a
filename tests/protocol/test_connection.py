"""The connection rules of protocol/connection.py, byte by byte and without processes: both
sides driven against each other, then each fed bytes a broken or hostile peer would send."""

from __future__ import annotations

import msgspec
import pytest

from protocol import (
    MAX_ITEMS,
    MAX_MACHINE_FIELDS,
    MAX_MACHINE_KEY_CHARS,
    MAX_MACHINE_VALUE_CHARS,
    MAX_QUEUED_PER_SLOT,
    MAX_REASON_CHARS,
    MAX_SECONDS,
    PROTOCOL_VERSION,
    Accepted,
    Answered,
    Computing,
    CoordinatorConnection,
    FrameEncoder,
    Hello,
    HelloReceived,
    LocalProtocolError,
    Params,
    ParamsReceived,
    Phase,
    Ping,
    PingReceived,
    PluginIdentity,
    Pong,
    Ponged,
    Refused,
    Rejected,
    RemoteProtocolError,
    Result,
    Shutdown,
    ShutdownReceived,
    Task,
    TaskFailed,
    TaskReceived,
    Welcome,
    WorkerConnection,
    Working,
    bounded_machine,
)
from protocol.connection import plugin_digest

FP = "sha256:" + "ab" * 32
OTHER_FP = "sha256:" + "cd" * 32
BODY = msgspec.msgpack.encode([42])


def pair(
    slots: int = 2, effective: int = 2, window: int = 4, worker_fp: str = FP
) -> tuple[CoordinatorConnection, WorkerConnection]:
    coordinator = CoordinatorConnection("w1", slots, FP, ("mc",), window=window)
    worker = WorkerConnection(worker_fp, effective, "test-platform", {"mc"})
    return coordinator, worker


def handshake(coordinator: CoordinatorConnection, worker: WorkerConnection) -> None:
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived) and hello.refusal is None
    [accepted] = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted)


def frame(message: object) -> bytes:
    return FrameEncoder("test").encode(message)  # type: ignore[arg-type]


def test_a_whole_conversation_one_byte_at_a_time() -> None:
    coordinator, worker = pair()
    seen: list[object] = []
    for byte in coordinator.hello():
        seen.extend(worker.receive(bytes([byte])))
    assert [type(e) for e in seen] == [HelloReceived]
    assert worker.phase is Phase.READY
    events: list[object] = []
    for byte in worker.reply():
        events.extend(coordinator.receive(bytes([byte])))
    assert isinstance(events[0], Accepted)
    assert events[0].welcome.platform == "test-platform"
    assert coordinator.phase is Phase.READY

    task = Task(7, 0, 100, 50)
    data = coordinator.params(0, "mc", BODY) + coordinator.task(task) + coordinator.ping()
    got: list[object] = []
    for byte in data:
        got.extend(worker.receive(bytes([byte])))
    assert [type(e) for e in got] == [ParamsReceived, TaskReceived, PingReceived]
    assert got[1] == TaskReceived(task)
    assert bytes(worker.params_for(0).body) == BODY
    assert coordinator.in_flight == 1 and worker.in_flight == 1

    answer = worker.result(task, BODY, 0.25) + worker.pong(1)
    events = coordinator.receive(answer)
    assert isinstance(events[0], Answered) and events[0].task == task
    assert isinstance(events[0].message, Result) and events[0].message.busy_s == 0.25
    assert events[1] == Ponged(1)
    assert coordinator.in_flight == 0 and worker.in_flight == 0

    assert worker.receive(coordinator.shutdown("done")) == [ShutdownReceived("done")]
    assert worker.phase is Phase.CLOSED


def test_the_worker_refuses_a_different_fingerprint_naming_both() -> None:
    coordinator, worker = pair(worker_fp=OTHER_FP)
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived)
    assert hello.refusal == f"source contract differs (coordinator {FP}, worker {OTHER_FP})"
    [rejected] = coordinator.receive(worker.reply())
    assert rejected == Rejected(f"refused by the worker: {hello.refusal}")
    assert worker.phase is Phase.CLOSED and coordinator.phase is Phase.CLOSED


def test_the_worker_refuses_more_slots_than_its_cpus() -> None:
    coordinator, worker = pair(slots=4, effective=2)
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived)
    assert hello.refusal is not None and "assigned 4 slots" in hello.refusal
    assert "effective CPU allocation is 2" in hello.refusal


def test_the_worker_refuses_a_kernel_it_does_not_have() -> None:
    coordinator = CoordinatorConnection("w1", 1, FP, ("dense",))
    worker = WorkerConnection(FP, 2, "p", {"mc"})
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived) and hello.refusal is not None
    assert "no kernel dense" in hello.refusal


ASIAN = PluginIdentity(
    "aner-asian",
    "0.1.0",
    {"aner_asian/__init__.py": "sha256:aa", "aner_asian/model.py": "sha256:bb"},
)


def test_the_worker_refuses_a_plugin_that_differs_naming_the_first_file() -> None:
    # docs/contracts.md, section 15: the coordinator's plugin in its Hello, the worker's own.
    edited = PluginIdentity(
        ASIAN.distribution, ASIAN.version, {**ASIAN.files, "aner_asian/model.py": "sha256:cc"}
    )
    coordinator = CoordinatorConnection("w1", 1, FP, ("asian",), plugins=(ASIAN,))
    worker = WorkerConnection(FP, 2, "p", {"asian"}, plugins={"aner-asian": edited})
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived)
    assert hello.refusal == (
        "plugin aner-asian differs from the coordinator's: aner_asian/model.py differs "
        "(sha256:bb at the coordinator, sha256:cc on this worker)"
    )


def test_the_worker_refuses_a_plugin_it_lacks_or_of_another_version() -> None:
    coordinator = CoordinatorConnection("w1", 1, FP, ("asian",), plugins=(ASIAN,))
    [hello] = WorkerConnection(FP, 2, "p", {"asian"}).receive(coordinator.hello())
    assert isinstance(hello, HelloReceived)
    assert (
        hello.refusal
        == "this worker has no plugin aner-asian: install aner-asian 0.1.0 where it runs"
    )
    older = PluginIdentity(ASIAN.distribution, "0.0.9", ASIAN.files)
    worker = WorkerConnection(FP, 2, "p", {"asian"}, plugins={"aner-asian": older})
    [hello] = worker.receive(
        CoordinatorConnection("w1", 1, FP, ("asian",), plugins=(ASIAN,)).hello()
    )
    assert isinstance(hello, HelloReceived)
    assert hello.refusal == (
        "plugin aner-asian differs from the coordinator's: version 0.1.0 at the coordinator, "
        "0.0.9 on this worker"
    )


def test_the_same_plugin_is_welcomed_and_reported() -> None:
    coordinator = CoordinatorConnection("w1", 1, FP, ("asian",), plugins=(ASIAN,))
    worker = WorkerConnection(FP, 2, "p", {"asian"}, plugins={"aner-asian": ASIAN})
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived) and hello.refusal is None
    [accepted] = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted)
    assert accepted.welcome.plugins == {"aner-asian": f"0.1.0 {plugin_digest(ASIAN)}"}


def test_the_worker_refuses_another_protocol_version() -> None:
    worker = WorkerConnection(FP, 2, "p", {"mc"})
    [hello] = worker.receive(frame(Hello(PROTOCOL_VERSION + 1, "w1", 1, FP)))
    assert isinstance(hello, HelloReceived)
    assert hello.refusal == (
        f"protocol version differs (coordinator {PROTOCOL_VERSION + 1}, worker {PROTOCOL_VERSION})"
    )


@pytest.mark.parametrize(
    ("welcome", "reason"),
    [
        (Welcome(PROTOCOL_VERSION + 1, FP, "p", 2, 2), "protocol version differs"),
        (Welcome(PROTOCOL_VERSION, OTHER_FP, "p", 2, 2), f"worker {OTHER_FP})"),
        (Welcome(PROTOCOL_VERSION, FP, "p", 2, 1), "worker accepted 1 slots, 2 were assigned"),
    ],
)
def test_the_coordinator_rejects_a_welcome_that_does_not_match(
    welcome: Welcome, reason: str
) -> None:
    coordinator, _ = pair()
    coordinator.hello()
    [event] = coordinator.receive(frame(welcome))
    assert isinstance(event, Rejected) and reason in event.reason
    assert coordinator.phase is Phase.CLOSED


def test_a_worker_must_start_with_hello() -> None:
    worker = WorkerConnection(FP, 2, "p", {"mc"})
    with pytest.raises(RemoteProtocolError, match="expected Hello, got Task"):
        worker.receive(frame(Task(1, 0, 0, 1)))


def test_a_coordinator_must_hear_welcome_first() -> None:
    coordinator, _ = pair()
    coordinator.hello()
    with pytest.raises(RemoteProtocolError, match="expected Welcome, got Result"):
        coordinator.receive(frame(Result(1, 0, 1, msgspec.Raw(BODY))))


def test_nothing_may_arrive_before_our_hello() -> None:
    coordinator, _ = pair()
    with pytest.raises(RemoteProtocolError, match="before our Hello"):
        coordinator.receive(frame(Welcome(PROTOCOL_VERSION, FP, "p", 2, 2)))


def test_a_task_before_its_params_is_a_local_error_and_a_remote_one() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    with pytest.raises(LocalProtocolError, match="before its Params"):
        coordinator.task(Task(1, 0, 0, 1))
    with pytest.raises(RemoteProtocolError, match="whose parameters were never sent"):
        worker.receive(frame(Task(1, 3, 0, 1)))


def test_the_coordinator_never_overfills_the_window() -> None:
    coordinator, worker = pair(window=2)
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(1, 0, 0, 1))
    coordinator.task(Task(2, 0, 1, 1))
    with pytest.raises(LocalProtocolError, match="window of 2 tasks full"):
        coordinator.task(Task(3, 0, 2, 1))


def test_a_resized_window_grows_up_to_what_the_worker_accepts_and_shrinks() -> None:
    coordinator, worker = pair(slots=1, effective=1, window=2)
    handshake(coordinator, worker)
    assert coordinator.limit == worker.limit == MAX_QUEUED_PER_SLOT
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(1, 0, 0, 1))
    coordinator.task(Task(2, 0, 1, 1))
    coordinator.resize(3)
    coordinator.task(Task(3, 0, 2, 1))
    # Smaller than what is in flight: nothing is recalled, no further task is allowed.
    coordinator.resize(1)
    with pytest.raises(LocalProtocolError, match="window of 1 tasks full"):
        coordinator.task(Task(4, 0, 3, 1))
    for bad in (0, MAX_QUEUED_PER_SLOT + 1):
        with pytest.raises(LocalProtocolError, match=f"window of {bad} tasks outside 1..64"):
            coordinator.resize(bad)
    assert coordinator.window == 1 and coordinator.in_flight == 3


def test_the_latest_ping_nonce_is_what_its_pong_carries() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    assert coordinator.last_ping == 0
    [first] = worker.receive(coordinator.ping())
    [second] = worker.receive(coordinator.ping())
    assert (first.nonce, second.nonce, coordinator.last_ping) == (1, 2, 2)  # type: ignore[union-attr]
    assert coordinator.receive(worker.pong(2)) == [Ponged(2)]


def test_the_worker_refuses_more_tasks_than_its_slots_allow() -> None:
    coordinator, worker = pair(slots=1, effective=1)
    handshake(coordinator, worker)
    data = frame(Params(0, "mc", msgspec.Raw(BODY)))
    data += b"".join(frame(Task(i + 1, 0, i, 1)) for i in range(MAX_QUEUED_PER_SLOT))
    assert len(worker.receive(data)) == MAX_QUEUED_PER_SLOT + 1
    with pytest.raises(RemoteProtocolError, match="more than 64 tasks in flight"):
        worker.receive(frame(Task(999, 0, 0, 1)))


@pytest.mark.parametrize(
    ("start", "count"), [(-1, 5), (0, 0), (MAX_ITEMS - 1, 2), (0, MAX_ITEMS + 1)]
)
def test_the_worker_refuses_a_range_beyond_the_admission_limits(start: int, count: int) -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    worker.receive(frame(Params(0, "mc", msgspec.Raw(BODY))))
    with pytest.raises(RemoteProtocolError, match="outside the admitted limit"):
        worker.receive(frame(Task(1, 0, start, count)))


def test_params_for_an_unknown_kernel_are_refused() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    with pytest.raises(RemoteProtocolError, match="unknown kernel 'dense'"):
        worker.receive(frame(Params(0, "dense", msgspec.Raw(BODY))))


def test_a_duplicate_result_is_rejected_never_counted_twice() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    task = Task(5, 0, 0, 10)
    worker.receive(coordinator.params(0, "mc", BODY) + coordinator.task(task))
    answer = worker.result(task, BODY, 0.0)
    assert len(coordinator.receive(answer)) == 1
    with pytest.raises(RemoteProtocolError, match="task 5, which is not outstanding"):
        coordinator.receive(answer)


def test_a_result_for_another_range_is_rejected() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(5, 0, 0, 10))
    with pytest.raises(RemoteProtocolError, match=r"covers \[0, \+11\) but the task was"):
        coordinator.receive(frame(Result(5, 0, 11, msgspec.Raw(BODY))))


def test_a_failed_task_is_an_answer() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    task = Task(5, 0, 0, 10)
    coordinator.task(task)
    [event] = coordinator.receive(worker.failed(5, "ValueError: boom"))
    assert event == Answered(TaskFailed(5, "ValueError: boom"), task)


def test_a_slot_says_it_is_computing_only_when_asked_and_only_for_its_tasks() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)  # a Hello without heartbeats: the worker may send none
    assert worker.heartbeat_s == 0.0
    with pytest.raises(LocalProtocolError, match="Working to a coordinator that asked for none"):
        worker.working(5, 1.0)
    with pytest.raises(RemoteProtocolError, match="unexpected Working message"):
        coordinator.receive(frame(Working(5, 1.0)))

    coordinator = CoordinatorConnection("w1", 2, FP, ("mc",), window=4, heartbeat_s=0.5)
    worker = WorkerConnection(FP, 2, "test-platform", {"mc"})
    handshake(coordinator, worker)
    assert worker.heartbeat_s == 0.5
    task = Task(5, 0, 0, 10)
    worker.receive(coordinator.params(0, "mc", BODY) + coordinator.task(task))
    assert coordinator.receive(worker.working(5, 12.5)) == [Computing(task, 12.5)]
    assert coordinator.in_flight == 1  # still owed: a word is not an answer
    for elapsed in (float("nan"), -1.0, 1e300):
        c2 = CoordinatorConnection("w1", 2, FP, ("mc",), window=4, heartbeat_s=0.5)
        w2 = WorkerConnection(FP, 2, "test-platform", {"mc"})
        handshake(c2, w2)
        c2.params(0, "mc", BODY)
        c2.task(task)
        with pytest.raises(RemoteProtocolError, match="is working on task 5 for"):
            c2.receive(frame(Working(5, elapsed)))
    coordinator.receive(worker.result(task, BODY, 0.0))
    with pytest.raises(RemoteProtocolError, match="working on task 5, not outstanding"):
        coordinator.receive(worker.working(5, 13.0))


def test_a_worker_asked_for_heartbeats_too_often_sends_them_at_its_own_pace() -> None:
    for asked, used in ((1e-9, 0.05), (float("nan"), 0.0), (-1.0, 0.0), (2.0, 2.0)):
        coordinator = CoordinatorConnection("w1", 2, FP, ("mc",), heartbeat_s=asked)
        worker = WorkerConnection(FP, 2, "test-platform", {"mc"})
        handshake(coordinator, worker)
        assert worker.heartbeat_s == used


def test_a_pong_that_answers_no_ping_is_a_protocol_error() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    with pytest.raises(RemoteProtocolError, match="Pong 3 answers no Ping"):
        coordinator.receive(frame(Pong(3)))
    _, worker = pair()
    with pytest.raises(RemoteProtocolError, match="expected Hello, got Ping"):
        worker.receive(frame(Ping(1)))


def test_end_of_input_inside_a_frame_is_an_error() -> None:
    coordinator, worker = pair()
    data = coordinator.hello()
    worker.receive(data[:-3])
    with pytest.raises(RemoteProtocolError, match="stream ended inside a frame"):
        worker.end_of_input()


def test_nothing_is_accepted_after_shutdown() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    assert worker.receive(frame(Shutdown("bye"))) == [ShutdownReceived("bye")]
    with pytest.raises(RemoteProtocolError, match="after the connection closed"):
        worker.receive(frame(Ping(1)))


def test_a_refused_worker_closes() -> None:
    coordinator, _ = pair()
    coordinator.hello()
    [event] = coordinator.receive(frame(Refused("busy", PROTOCOL_VERSION, FP)))
    assert event == Rejected("refused by the worker: busy")
    with pytest.raises(LocalProtocolError, match="Params in phase CLOSED"):
        coordinator.params(0, "mc", BODY)


def test_hello_names_the_kernels_the_job_needs() -> None:
    coordinator, worker = pair()
    [hello] = worker.receive(coordinator.hello())
    assert isinstance(hello, HelloReceived)
    assert hello.hello == Hello(PROTOCOL_VERSION, "w1", 2, FP, ("mc",))
    with pytest.raises(LocalProtocolError, match="Hello sent twice"):
        coordinator.hello()


@pytest.mark.parametrize(
    ("busy", "queued", "shown"),
    [
        (float("inf"), 0.0, "busy_s = inf"),
        (float("nan"), 0.0, "busy_s = nan"),
        (-0.5, 0.0, "busy_s = -0.5"),
        (1e300, 0.0, "busy_s = 1e+300"),
        (0.5, float("-inf"), "queued_s = -inf"),
        (0.5, 2e7, "queued_s = 20000000.0"),
    ],
)
def test_a_result_with_impossible_timings_is_a_protocol_error(
    busy: float, queued: float, shown: str
) -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(5, 0, 0, 10))
    with pytest.raises(RemoteProtocolError) as error:
        coordinator.receive(frame(Result(5, 0, 10, msgspec.Raw(BODY), busy, queued)))
    assert error.value.detail == (
        f"result for task 5 has {shown}, not a number of seconds in 0..1e+07"
    )


@pytest.mark.parametrize("started", [-1.0, float("nan"), float("inf")])
def test_a_result_or_pong_with_an_impossible_clock_is_a_protocol_error(started: float) -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(5, 0, 0, 10))
    with pytest.raises(RemoteProtocolError, match=f"result for task 5 has started = {started}"):
        coordinator.receive(frame(Result(5, 0, 10, msgspec.Raw(BODY), 0.5, 0.0, started)))
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.ping()
    with pytest.raises(RemoteProtocolError, match=f"Pong 1 has clock = {started}"):
        coordinator.receive(frame(Pong(1, started)))


def test_a_worker_reports_its_own_timings_within_the_bounds() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    worker.receive(coordinator.params(0, "mc", BODY))
    for task_id, busy in ((1, float("nan")), (2, -1.0), (3, 1e9)):
        task = Task(task_id, 0, 0, 10)
        worker.receive(coordinator.task(task))
        [event] = coordinator.receive(worker.result(task, BODY, busy, busy))
        assert isinstance(event, Answered) and isinstance(event.message, Result)
        assert 0.0 <= event.message.busy_s <= MAX_SECONDS
        assert event.message.busy_s == event.message.queued_s


@pytest.mark.parametrize(
    ("machine", "problem"),
    [
        ({f"k{i}": "v" for i in range(MAX_MACHINE_FIELDS + 1)}, "of 33 fields (at most 32)"),
        ({"cpu_model": "x" * (MAX_MACHINE_VALUE_CHARS + 1)}, "field 'cpu_model' longer than"),
        ({"k" * (MAX_MACHINE_KEY_CHARS + 1): "v"}, "field '" + "k" * 64 + "' longer than"),
    ],
)
def test_an_oversized_machine_description_is_a_protocol_error(
    machine: dict[str, str], problem: str
) -> None:
    coordinator, _ = pair()
    coordinator.hello()
    welcome = Welcome(PROTOCOL_VERSION, FP, "p", 2, 2, machine)
    with pytest.raises(RemoteProtocolError) as error:
        coordinator.receive(frame(welcome))
    assert error.value.detail.startswith(f"machine description {problem}")
    assert len(str(error.value)) < 300
    assert coordinator.phase is Phase.CLOSED


def test_a_worker_bounds_its_own_machine_description() -> None:
    machine = {f"field{i}": "x" * 1000 for i in range(100)}
    coordinator = CoordinatorConnection("w1", 2, FP, ("mc",))
    worker = WorkerConnection(FP, 2, "p" * 1000, {"mc"}, machine=machine)
    worker.receive(coordinator.hello())
    [accepted] = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted)
    assert accepted.welcome.machine == bounded_machine(machine)
    assert len(accepted.welcome.machine) == MAX_MACHINE_FIELDS
    assert all(len(v) == MAX_MACHINE_VALUE_CHARS for v in accepted.welcome.machine.values())


def test_a_welcome_carries_the_build_and_kernels_and_an_older_one_decodes_without() -> None:
    coordinator = CoordinatorConnection("w1", 2, FP, ())
    worker = WorkerConnection(FP, 2, "p", {"mc", "dense"}, build={"blas": "openblas 0.3"})
    worker.receive(coordinator.hello())
    [accepted] = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted)
    assert accepted.welcome.build == {"blas": "openblas 0.3"}
    assert accepted.welcome.kernels == ("dense", "mc")
    # A worker older than the report sends the first seven fields only.
    older = msgspec.msgpack.encode(["welcome", PROTOCOL_VERSION, FP, "p", 2, 2, {}, ["float64"]])
    decoded = msgspec.msgpack.decode(older, type=Welcome)
    assert (decoded.build, decoded.kernels, decoded.host) == ({}, (), None)


@pytest.mark.parametrize(
    "host",
    ["A" * 32, "a" * 31, "a" * 33, "3d1219c7-c4c5-404a-aa1f-6d2a48adfda4", "g" * 32, ""],
)
def test_a_host_identity_not_in_its_format_is_a_protocol_error(host: str) -> None:
    coordinator, _ = pair()
    coordinator.hello()
    with pytest.raises(RemoteProtocolError) as error:
        coordinator.receive(frame(Welcome(PROTOCOL_VERSION, FP, "p", 2, 2, host=host)))
    assert "is not 32 lowercase hex digits" in error.value.detail
    assert coordinator.phase is Phase.CLOSED


def test_a_welcome_carries_the_host_identity() -> None:
    coordinator = CoordinatorConnection("w1", 2, FP, ())
    worker = WorkerConnection(FP, 2, "p", {"mc"}, host="0123456789abcdef" * 2)
    worker.receive(coordinator.hello())
    [accepted] = coordinator.receive(worker.reply())
    assert isinstance(accepted, Accepted) and accepted.welcome.host == "0123456789abcdef" * 2


def test_an_oversized_build_description_is_a_protocol_error() -> None:
    coordinator, _ = pair()
    coordinator.hello()
    build = {"blas": "x" * (MAX_MACHINE_VALUE_CHARS + 1)}
    welcome = Welcome(PROTOCOL_VERSION, FP, "p", 2, 2, {}, ("float64",), build)
    with pytest.raises(RemoteProtocolError) as error:
        coordinator.receive(frame(welcome))
    assert error.value.detail.startswith("build description field 'blas' longer than")
    assert coordinator.phase is Phase.CLOSED


def test_long_reasons_are_cut_to_a_line_a_person_can_read() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    task = Task(5, 0, 0, 10)
    coordinator.task(task)
    [event] = coordinator.receive(frame(TaskFailed(5, "x" * 10_000_000)))
    assert isinstance(event, Answered) and isinstance(event.message, TaskFailed)
    # Cut saying so (issue 36: a 100,000-character reason reached error-detail.txt as its
    # first 2,000 characters, under a message saying that file held the whole text).
    cut = " [... cut on the wire: 10,000,000 characters in all]"
    reason = event.message.reason
    assert len(reason) == MAX_REASON_CHARS and reason == "x" * (MAX_REASON_CHARS - len(cut)) + cut
    refusing, _ = pair()
    refusing.hello()
    [rejected] = refusing.receive(frame(Refused("y" * 10_000_000, PROTOCOL_VERSION, FP)))
    assert isinstance(rejected, Rejected)
    assert rejected.reason == "refused by the worker: " + "y" * (MAX_REASON_CHARS - len(cut)) + cut


def test_a_worker_cuts_its_own_long_reason_saying_how_long_it_was() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(5, 0, 0, 10))
    [event] = coordinator.receive(worker.failed(5, "z" * 100_000))
    assert isinstance(event, Answered) and isinstance(event.message, TaskFailed)
    assert event.message.reason.endswith("z [... cut on the wire: 100,000 characters in all]")
    assert len(event.message.reason) == MAX_REASON_CHARS


def test_the_frame_in_progress_is_visible_for_its_deadline() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    assert coordinator.receiving == (0, None)
    coordinator.receive(b"\x01\x00")
    assert coordinator.receiving == (2, None)  # the header is not even complete
    coordinator.receive(b"\x00\x00" + b"\x00" * 100)
    assert coordinator.receiving == (104, 16 << 20)


def test_what_a_worker_says_stays_on_one_line() -> None:
    coordinator, worker = pair()
    handshake(coordinator, worker)
    coordinator.params(0, "mc", BODY)
    coordinator.task(Task(5, 0, 0, 10))
    [event] = coordinator.receive(frame(TaskFailed(5, "bad\nline\x1b[31m red")))
    assert isinstance(event, Answered) and isinstance(event.message, TaskFailed)
    assert event.message.reason == "bad\\nline\\x1b[31m red"
    refusing, _ = pair()
    refusing.hello()
    [rejected] = refusing.receive(frame(Refused("no\r\nway", PROTOCOL_VERSION, FP)))
    assert (
        isinstance(rejected, Rejected) and rejected.reason == "refused by the worker: no\\r\\nway"
    )
    error = RemoteProtocolError('worker "w1"', "Invalid value 're\nult'")
    assert str(error) == "protocol error from worker \"w1\": Invalid value 're\\nult'"
