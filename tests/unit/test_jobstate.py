"""The pure job state machine: events in, exact instructions out, no threads or I/O."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from aner_coord.computations import N_PARAMS, Fixture, MonteCarlo
from aner_coord.jobstate import (
    CancelRequested,
    JobEnded,
    JobMachine,
    JobState,
    ResultReceived,
    SendTask,
    StopWorkers,
    WorkerLost,
    WorkerReady,
    WorkersStopped,
    WriteStatus,
)
from aner_coord.plan import ChunkPlan
from protocol import FxResult, FxTask, McResult, McTask, TaskFailed

SEED = 7


def mc_machine(
    total: int = 10, chunk: int = 3, workers: tuple[str, ...] = ("a", "b")
) -> tuple[JobMachine, MonteCarlo]:
    computation = MonteCarlo(ChunkPlan(total, chunk), SEED)
    return JobMachine(computation, dict.fromkeys(workers, 1)), computation


def state_of(machine: JobMachine) -> JobState:
    """The machine's state, read through a call so that type checkers do not narrow it."""
    return machine.state


def mc(task_id: int, start: int, count: int) -> McTask:
    return McTask(task_id=task_id, seed=SEED, start=start, count=count)


def answer(task: McTask, hits: int | None = None) -> McResult:
    return McResult(task.task_id, task.start, task.count, task.count // 2 if hits is None else hits)


def failed(message: str) -> list[object]:
    return [WriteStatus(), StopWorkers(message), JobEnded(JobState.FAILED)]


# -- Monte Carlo: dispatch -----------------------------------------------------------------


def test_two_workers_dispatch_order_and_windows() -> None:
    machine, _ = mc_machine()
    assert machine.state is JobState.STARTING
    assert machine.handle(WorkerReady("a", 2)) == [
        WriteStatus(),
        SendTask("a", mc(1, 0, 3)),
        SendTask("a", mc(2, 3, 3)),
    ]
    assert state_of(machine) is JobState.RUNNING
    assert machine.handle(WorkerReady("b", 2)) == [
        SendTask("b", mc(3, 6, 3)),
        SendTask("b", mc(4, 9, 1)),  # the last chunk keeps the remainder
    ]
    assert machine.in_flight == 4
    assert machine.handle(WorkerReady("b", 2)) == []  # a repeated ready changes nothing


def test_window_is_refilled_as_results_arrive() -> None:
    machine, _ = mc_machine(total=12, chunk=2)
    assert machine.handle(WorkerReady("a", 1)) == [WriteStatus(), SendTask("a", mc(1, 0, 2))]
    assert machine.handle(WorkerReady("b", 1)) == [SendTask("b", mc(2, 2, 2))]
    assert machine.handle(ResultReceived("b", answer(mc(2, 2, 2)))) == [SendTask("b", mc(3, 4, 2))]
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 2)))) == [SendTask("a", mc(4, 6, 2))]


@pytest.mark.parametrize("window", [3, 100])
def test_every_worker_gets_a_chunk_despite_a_huge_first_window(window: int) -> None:
    machine, _ = mc_machine(workers=("a", "b", "c"))  # 4 chunks, 3 workers
    assert machine.handle(WorkerReady("a", window)) == [
        WriteStatus(),
        SendTask("a", mc(1, 0, 3)),
        SendTask("a", mc(2, 3, 3)),
    ]
    assert machine.handle(WorkerReady("b", window)) == [SendTask("b", mc(3, 6, 3))]
    assert machine.handle(WorkerReady("c", window)) == [SendTask("c", mc(4, 9, 1))]


def test_reservation_with_two_workers_and_a_huge_window() -> None:
    machine, _ = mc_machine()  # 4 chunks
    assert machine.handle(WorkerReady("a", 64)) == [
        WriteStatus(),
        SendTask("a", mc(1, 0, 3)),
        SendTask("a", mc(2, 3, 3)),
        SendTask("a", mc(3, 6, 3)),
    ]
    assert machine.handle(WorkerReady("b", 64)) == [SendTask("b", mc(4, 9, 1))]


def test_reserved_chunk_is_not_given_away_when_the_first_worker_finishes() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 64))
    for task_id, start in ((1, 0), (2, 3), (3, 6)):
        assert machine.handle(ResultReceived("a", answer(mc(task_id, start, 3)))) == []
    assert machine.handle(WorkerReady("b", 1)) == [SendTask("b", mc(4, 9, 1))]


# -- Monte Carlo: results ------------------------------------------------------------------


def test_accepted_results_update_counts_and_the_last_one_completes() -> None:
    machine, computation = mc_machine()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=3))) == []
    assert (machine.items_done, machine.chunks_done, computation.hits) == (3, 1, 3)
    assert machine.handle(ResultReceived("b", answer(mc(4, 9, 1), hits=0))) == []
    assert machine.handle(ResultReceived("b", answer(mc(3, 6, 3), hits=2))) == []
    assert machine.accounts["b"].items == 4 and machine.accounts["b"].chunks == 2
    assert machine.handle(ResultReceived("a", answer(mc(2, 3, 3), hits=1))) == [
        WriteStatus(),
        StopWorkers("job completed"),
        JobEnded(JobState.COMPLETED),
    ]
    assert machine.state is JobState.COMPLETED
    assert computation.hits == 6
    assert machine.items_total_done == 10
    assert machine.accounts["a"].items == 6 and machine.accounts["a"].chunks == 2
    assert machine.accounts["a"].items_by_pass == [6]
    assert machine.in_flight == 0
    assert machine.error is None


def test_duplicate_result_fails_the_job_and_is_not_counted_twice() -> None:
    machine, computation = mc_machine()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=2))) == []
    out = machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=2)))
    assert machine.state is JobState.FAILED
    assert machine.error is not None
    assert out == failed(machine.error)
    assert machine.error.startswith('worker "a" failed during run: ')
    assert "task 1" in machine.error and "duplicate" in machine.error
    assert computation.hits == 2
    assert machine.items_done == 3 and machine.chunks_done == 1
    assert machine.accounts["a"].items == 3


def test_result_from_the_wrong_worker() -> None:
    machine, computation = mc_machine()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    out = machine.handle(ResultReceived("b", answer(mc(1, 0, 3))))  # task 1 is on "a"
    assert machine.state is JobState.FAILED
    assert out == failed(str(machine.error))
    assert str(machine.error).startswith('worker "b" failed during run: ')
    assert "task 1" in str(machine.error)
    assert computation.hits == 0 and machine.items_done == 0


def test_result_for_an_unknown_task() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(ResultReceived("a", McResult(99, 0, 3, 1)))
    assert out == failed(str(machine.error))
    assert 'worker "a"' in str(machine.error) and "task 99" in str(machine.error)


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (McResult(1, 1, 3, 1), "covers [1, +3) but the task was [0, +3)"),
        (McResult(1, 0, 2, 1), "covers [0, +2) but the task was [0, +3)"),
        (McResult(1, 0, 3, 4), "4 hits is impossible for 3 samples"),
        (McResult(1, 0, 3, -1), "-1 hits is impossible for 3 samples"),
    ],
    ids=["start", "count", "hits>count", "negative-hits"],
)
def test_inconsistent_result_is_rejected(result: McResult, words: str) -> None:
    machine, computation = mc_machine()
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(ResultReceived("a", result))
    assert machine.state is JobState.FAILED
    assert out == failed(str(machine.error))
    assert str(machine.error).startswith('worker "a" failed during run: inconsistent result')
    assert words in str(machine.error)
    assert computation.hits == 0 and machine.items_done == 0 and machine.chunks_done == 0


def test_fixture_result_for_a_monte_carlo_task_is_rejected() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 1))
    machine.handle(ResultReceived("a", FxResult(1, 0, 3, (0.0,) * 9, 0.0, 0, 3)))
    assert machine.state is JobState.FAILED
    assert "expected a Monte Carlo result, got FxResult" in str(machine.error)


def test_task_failed_fails_the_job_naming_worker_and_phase() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 1))
    machine.handle(WorkerReady("b", 1))
    out = machine.handle(ResultReceived("b", TaskFailed(2, "ValueError: boom")))
    assert machine.state is JobState.FAILED
    error = 'worker "b" failed during task: task 2 failed: ValueError: boom'
    assert machine.error == error
    assert out == [WriteStatus(), StopWorkers(error), JobEnded(JobState.FAILED)]
    # After the failure, nothing more is dispatched and a second failure changes nothing.
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3)))) == []
    assert machine.handle(WorkerLost("a", "run", "gone")) == []
    assert machine.handle(WorkerReady("a", 1)) == []
    assert machine.error == error


def test_worker_lost_fails_the_job() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 1))
    out = machine.handle(WorkerLost("b", "connect", "connection refused"))
    error = 'worker "b" failed during connect: connection refused'
    assert out == [WriteStatus(), StopWorkers(error), JobEnded(JobState.FAILED)]
    assert machine.state is JobState.FAILED and machine.error == error


def test_worker_lost_before_anyone_is_ready() -> None:
    machine, _ = mc_machine()
    out = machine.handle(WorkerLost("a", "handshake", "refused by the worker"))
    assert out[-1] == JobEnded(JobState.FAILED)
    assert machine.state is JobState.FAILED


def test_cancel_stops_dispatch_and_counts_late_results_as_diagnostics() -> None:
    machine, computation = mc_machine(total=20, chunk=3)  # 7 chunks
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 1))
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=2))) == [
        SendTask("a", mc(4, 9, 3))
    ]
    assert machine.handle(CancelRequested("user pressed Ctrl-C")) == [
        WriteStatus(),
        StopWorkers("user pressed Ctrl-C"),
    ]
    assert machine.state is JobState.CANCELLING
    assert machine.handle(CancelRequested("again")) == []
    # In-flight results still arrive: counted for diagnostics, but nothing new is sent.
    assert machine.handle(ResultReceived("b", answer(mc(3, 6, 3), hits=3))) == []
    assert machine.handle(ResultReceived("a", answer(mc(2, 3, 3), hits=1))) == []
    assert machine.handle(WorkerReady("b", 5)) == []
    assert computation.hits == 6 and machine.items_done == 9
    assert machine.state is JobState.CANCELLING
    # A failure while cancelling does not turn the job into FAILED.
    assert machine.handle(WorkerLost("a", "run", "killed")) == []
    assert machine.handle(WorkersStopped()) == [WriteStatus(), JobEnded(JobState.CANCELLED)]
    assert state_of(machine) is JobState.CANCELLED
    assert machine.handle(WorkersStopped()) == []
    assert machine.error == "cancelled: user pressed Ctrl-C"


def test_cancel_before_any_worker_is_ready() -> None:
    machine, _ = mc_machine()
    assert machine.handle(CancelRequested("shutdown")) == [WriteStatus(), StopWorkers("shutdown")]
    assert machine.handle(WorkerReady("a", 4)) == []
    assert machine.handle(WorkersStopped()) == [WriteStatus(), JobEnded(JobState.CANCELLED)]


def test_workers_stopped_outside_cancelling_is_ignored() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 1))
    assert machine.handle(WorkersStopped()) == []
    assert machine.state is JobState.RUNNING


def test_single_worker_runs_every_chunk() -> None:
    machine, computation = mc_machine(total=10, chunk=3, workers=("solo",))
    out = machine.handle(WorkerReady("solo", 1))
    sent = 0
    while machine.state is JobState.RUNNING:
        tasks = [i.task for i in out if isinstance(i, SendTask)]
        assert len(tasks) == 1
        sent += 1
        out = machine.handle(ResultReceived("solo", answer(tasks[0], hits=1)))  # type: ignore[arg-type]
    assert sent == 4
    assert computation.hits == 4
    assert machine.state is JobState.COMPLETED


def test_a_machine_needs_workers() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        JobMachine(MonteCarlo(ChunkPlan(10, 3), 1), {})


# -- the fixture: passes, barrier, ordered reduction ---------------------------------------

N_ROWS = 5
FX_CHUNK = 2  # chunks [0,2) [2,4) [4,5): the last one is uneven
STEPS = 2
RATE = 0.5

GradFn = Callable[[FxTask], tuple[float, ...]]


def fake_grad(task: FxTask) -> tuple[float, ...]:
    """Sums that depend on the range and the frozen theta, chosen so that float order shows:
    (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1."""
    base = {0: 0.1, 2: 0.2, 4: 0.3}[task.start]
    return tuple(base * (j + 1) + 0.25 * task.theta[j] for j in range(N_PARAMS))


def fx_result(task: FxTask) -> FxResult:
    return FxResult(
        task_id=task.task_id,
        start=task.start,
        count=task.count,
        grad=fake_grad(task),
        loss_sum={0: 1.1, 2: 2.2, 4: 0.7}[task.start] * task.count,
        correct=task.count - 1,
        valid=task.count,
    )


def fx_machine() -> tuple[JobMachine, Fixture]:
    fixture = Fixture(ChunkPlan(N_ROWS, FX_CHUNK), seed=SEED, steps=STEPS, rate=RATE)
    return JobMachine(fixture, {"a": 1, "b": 1}), fixture


def reference_theta(steps: int) -> tuple[float, ...]:
    """The update of SPEC section 2 written out: chunk-order sums, divided by all rows."""
    theta = (0.0,) * N_PARAMS
    for _ in range(steps):
        ranges = [(0, 2), (2, 2), (4, 1)]
        grads = [fake_grad(FxTask(0, SEED, s, c, theta)) for s, c in ranges]
        total = [((0.0 + grads[0][j]) + grads[1][j]) + grads[2][j] for j in range(N_PARAMS)]
        theta = tuple(t - RATE * g / N_ROWS for t, g in zip(theta, total, strict=True))
    return theta


def tasks_of(out: Sequence[object]) -> list[FxTask]:
    tasks = [i.task for i in out if isinstance(i, SendTask)]
    assert all(isinstance(t, FxTask) for t in tasks)
    return tasks  # type: ignore[return-value]


def run_fixture(reverse: bool) -> tuple[JobMachine, Fixture, list[list[FxTask]]]:
    """Run the whole fixture with windows big enough for a pass, completing each pass's
    chunks in chunk order or in reverse; return the tasks sent per pass."""
    machine, fixture = fx_machine()
    out = machine.handle(WorkerReady("a", 8)) + machine.handle(WorkerReady("b", 8))
    per_pass: list[list[FxTask]] = []
    while machine.state is JobState.RUNNING:
        tasks = tasks_of(out)
        assert [t.start for t in tasks] == [0, 2, 4]  # one whole pass, and nothing more
        per_pass.append(tasks)
        owners = {i.task.task_id: i.worker for i in out if isinstance(i, SendTask)}
        out = []
        for task in reversed(tasks) if reverse else tasks:
            out = machine.handle(ResultReceived(owners[task.task_id], fx_result(task)))
    return machine, fixture, per_pass


def test_fixture_makes_steps_plus_two_passes() -> None:
    machine, fixture, per_pass = run_fixture(reverse=False)
    assert machine.state is JobState.COMPLETED
    assert len(per_pass) == STEPS + 2 == machine.passes
    assert fixture.committed_steps == STEPS
    assert machine.items_total_done == N_ROWS * (STEPS + 2)
    # Pass 0: "a" is ready first and takes all but the chunk held for "b"; later passes
    # deal chunks round robin over the ready workers: a gets [0,2) and [4,5), b [2,4).
    assert machine.accounts["a"].items_by_pass == [4, 3, 3, 3]
    assert machine.accounts["b"].items_by_pass == [1, 2, 2, 2]


def test_theta_of_each_pass_is_the_committed_update() -> None:
    _, fixture, per_pass = run_fixture(reverse=False)
    zero = (0.0,) * N_PARAMS
    assert [t.theta for t in per_pass[0]] == [zero] * 3  # initial metrics
    assert [t.theta for t in per_pass[1]] == [zero] * 3  # step 1 uses the start
    assert [t.theta for t in per_pass[2]] == [reference_theta(1)] * 3
    assert [t.theta for t in per_pass[3]] == [reference_theta(2)] * 3  # final metrics
    assert fixture.theta == reference_theta(2)
    assert reference_theta(1) != zero and reference_theta(2) != reference_theta(1)


def test_reduction_is_in_chunk_order_whatever_completes_first() -> None:
    _, forward, _ = run_fixture(reverse=False)
    _, backward, _ = run_fixture(reverse=True)
    assert forward.theta == backward.theta == reference_theta(STEPS)  # bitwise
    assert forward.initial == backward.initial
    assert forward.final == backward.final
    # The choice of sums makes order visible: a reversed reduction would differ.
    reversed_sum = ((0.0 + 0.3) + 0.2) + 0.1
    assert reversed_sum != ((0.0 + 0.1) + 0.2) + 0.3


def test_uneven_last_chunk_is_weighted_by_rows_not_chunks() -> None:
    _, fixture, _ = run_fixture(reverse=False)
    assert fixture.initial is not None and fixture.final is not None
    loss_sum = (1.1 * 2 + 2.2 * 2) + 0.7 * 1
    assert fixture.initial.loss == loss_sum / N_ROWS
    assert fixture.initial.loss != (1.1 + 2.2 + 0.7) / 3  # not a mean of chunk means
    assert fixture.initial.accuracy == (1 + 1 + 0) / N_ROWS
    g0 = ((0.0 + 0.1) + 0.2) + 0.3
    assert reference_theta(1)[0] == 0.0 - RATE * g0 / N_ROWS


def test_barrier_no_task_of_the_next_pass_before_the_pass_is_accepted() -> None:
    machine, fixture = fx_machine()
    assert machine.handle(WorkerReady("a", 1)) == [
        WriteStatus(),
        SendTask("a", FxTask(1, SEED, 0, 2, (0.0,) * N_PARAMS)),
    ]
    assert machine.handle(WorkerReady("b", 1)) == [
        SendTask("b", FxTask(2, SEED, 2, 2, (0.0,) * N_PARAMS))
    ]
    assert machine.handle(WorkerReady("a", 1)) == []  # already ready: nothing changes
    out = machine.handle(ResultReceived("a", fx_result(FxTask(1, SEED, 0, 2, (0.0,) * 9))))
    assert out == [SendTask("a", FxTask(3, SEED, 4, 1, (0.0,) * N_PARAMS))]
    # "a" has a free slot once task 3 is back, but pass 0 still waits for task 2 on "b".
    assert machine.handle(ResultReceived("a", fx_result(FxTask(3, SEED, 4, 1, (0.0,) * 9)))) == []
    assert machine.pass_index == 0 and machine.chunks_done == 2
    out = machine.handle(ResultReceived("b", fx_result(FxTask(2, SEED, 2, 2, (0.0,) * 9))))
    assert out == [
        WriteStatus(),
        SendTask("a", FxTask(4, SEED, 0, 2, (0.0,) * N_PARAMS)),
        SendTask("b", FxTask(5, SEED, 2, 2, (0.0,) * N_PARAMS)),
    ]
    assert machine.pass_index == 1 and machine.chunks_done == 0
    assert fixture.initial is not None and fixture.committed_steps == 0


def test_cancel_mid_step_keeps_the_last_committed_theta() -> None:
    machine, fixture = fx_machine()
    out = machine.handle(WorkerReady("a", 8)) + machine.handle(WorkerReady("b", 8))
    for _ in range(2):  # initial metrics and step 1
        sent = [(i.worker, i.task) for i in out if isinstance(i, SendTask)]
        out = []
        for worker, task in sent:
            out = machine.handle(ResultReceived(worker, fx_result(task)))  # type: ignore[arg-type]
    assert fixture.committed_steps == 1
    committed = fixture.theta
    assert committed == reference_theta(1)
    step2 = [(i.worker, i.task) for i in out if isinstance(i, SendTask)]
    assert [t.theta for _, t in step2 if isinstance(t, FxTask)] == [committed] * 3
    # Two of step 2's three chunks arrive, one before and one after the cancel request.
    assert machine.handle(ResultReceived(*_pair(step2[0]))) == []
    assert machine.handle(CancelRequested("user")) == [WriteStatus(), StopWorkers("user")]
    assert machine.handle(ResultReceived(*_pair(step2[2]))) == []
    assert machine.handle(ResultReceived(*_pair(step2[1]))) == []  # even the whole pass
    assert machine.handle(WorkersStopped()) == [WriteStatus(), JobEnded(JobState.CANCELLED)]
    assert fixture.committed_steps == 1
    assert fixture.theta == committed
    assert fixture.final is None
    assert machine.pass_index == 2


def _pair(item: tuple[str, object]) -> tuple[str, FxResult]:
    worker, task = item
    assert isinstance(task, FxTask)
    return worker, fx_result(task)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"valid": 1}, "1 valid rows reported for a range of 2"),
        ({"correct": 3}, "3 correct predictions is impossible for 2 rows"),
        ({"grad": (0.0,) * 8}, "8 gradient sums, expected 9"),
        ({"loss_sum": float("nan")}, "non-finite gradient or loss sum"),
        ({"grad": (float("inf"),) + (0.0,) * 8}, "non-finite gradient or loss sum"),
        ({"start": 1}, "covers [1, +2) but the task was [0, +2)"),
    ],
    ids=["valid", "correct", "grad-length", "nan-loss", "inf-grad", "range"],
)
def test_inconsistent_fixture_result_is_rejected(change: dict[str, object], words: str) -> None:
    machine, fixture = fx_machine()
    machine.handle(WorkerReady("a", 1))
    good = fx_result(FxTask(1, SEED, 0, 2, (0.0,) * N_PARAMS))
    fields = {f: getattr(good, f) for f in good.__struct_fields__}
    bad = FxResult(**{**fields, **change})
    out = machine.handle(ResultReceived("a", bad))
    assert out == failed(str(machine.error))
    assert 'worker "a" failed during run: inconsistent result rejected: ' in str(machine.error)
    assert words in str(machine.error)
    assert machine.chunks_done == 0 and fixture.initial is None


# -- after the end: late results, abandoned tasks, per-pass accounting ---------------------


def _accounting(machine: JobMachine, computation: MonteCarlo) -> tuple[object, ...]:
    return (
        computation.hits,
        machine.items_done,
        machine.items_total_done,
        machine.chunks_done,
        machine.in_flight,
        [
            (a.items, a.chunks, a.in_flight, list(a.items_by_pass))
            for a in machine.accounts.values()
        ],
    )


def test_results_after_failure_are_ignored() -> None:
    machine, computation = mc_machine()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=2))) == []
    machine.handle(WorkerLost("b", "run", "connection reset"))
    assert machine.state is JobState.FAILED
    before = _accounting(machine, computation)
    # Task 2 was outstanding on "a" when the job failed: its result is not counted.
    assert machine.handle(ResultReceived("a", answer(mc(2, 3, 3), hits=1))) == []
    assert machine.handle(ResultReceived("a", TaskFailed(2, "late"))) == []
    assert _accounting(machine, computation) == before
    assert computation.hits == 2 and machine.items_total_done == 3
    assert state_of(machine) is JobState.FAILED


def test_results_after_completion_are_ignored() -> None:
    machine, computation = mc_machine(total=6, chunk=3)
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    machine.handle(ResultReceived("a", answer(mc(1, 0, 3), hits=1)))
    assert machine.handle(ResultReceived("b", answer(mc(2, 3, 3), hits=1)))[-1] == JobEnded(
        JobState.COMPLETED
    )
    before = _accounting(machine, computation)
    assert machine.handle(ResultReceived("b", answer(mc(2, 3, 3), hits=1))) == []
    assert machine.handle(ResultReceived("a", McResult(99, 0, 3, 1))) == []
    assert _accounting(machine, computation) == before
    assert state_of(machine) is JobState.COMPLETED and machine.error is None


def test_workers_stopped_abandons_outstanding_tasks() -> None:
    machine, computation = mc_machine(total=20, chunk=3)  # 7 chunks
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    assert machine.in_flight == 4
    machine.handle(CancelRequested("user"))
    # One result still arrives while cancelling and is counted as a diagnostic.
    assert machine.handle(ResultReceived("b", answer(mc(3, 6, 3), hits=3))) == []
    assert machine.items_done == 3 and machine.in_flight == 3
    assert machine.handle(WorkersStopped()) == [WriteStatus(), JobEnded(JobState.CANCELLED)]
    # The tasks the workers dropped were never accepted: nothing is in flight any more.
    assert machine.in_flight == 0
    assert [a.in_flight for a in machine.accounts.values()] == [0, 0]
    assert machine.items_done == 3 and computation.hits == 3
    # A dropped task's result that still trickles in is ignored.
    assert machine.handle(ResultReceived("a", answer(mc(1, 0, 3)))) == []
    assert machine.items_done == 3 and computation.hits == 3


def test_failure_abandons_outstanding_tasks() -> None:
    machine, _ = mc_machine()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    assert machine.in_flight == 4
    machine.handle(WorkerLost("a", "run", "killed"))
    assert state_of(machine) is JobState.FAILED
    assert machine.in_flight == 0
    assert [a.in_flight for a in machine.accounts.values()] == [0, 0]


def test_items_by_pass_has_an_entry_per_started_pass_for_every_worker() -> None:
    # One chunk, two workers (local runs allow that): each pass is done by one of them, so
    # in every pass the other worker accepts nothing, and still has an entry for it.
    fixture = Fixture(ChunkPlan(N_ROWS, N_ROWS), seed=SEED, steps=STEPS, rate=RATE)
    machine = JobMachine(fixture, {"a": 1, "b": 1})
    assert [a.items_by_pass for a in machine.accounts.values()] == [[0], [0]]
    out = machine.handle(WorkerReady("a", 1)) + machine.handle(WorkerReady("b", 1))
    passes_seen = 0
    while machine.state is JobState.RUNNING:
        passes_seen += 1
        assert [len(a.items_by_pass) for a in machine.accounts.values()] == [passes_seen] * 2
        (item,) = [i for i in out if isinstance(i, SendTask)]
        out = machine.handle(ResultReceived(*_pair((item.worker, item.task))))
    assert machine.state is JobState.COMPLETED
    # Pass 1 goes to "b", the worker that was still unserved; later passes to "a" again.
    assert machine.accounts["a"].items_by_pass == [N_ROWS, 0, N_ROWS, N_ROWS]
    assert machine.accounts["b"].items_by_pass == [0, N_ROWS, 0, 0]


def test_items_by_pass_of_a_cancelled_fixture_covers_the_interrupted_pass() -> None:
    machine, _ = fx_machine()
    out = machine.handle(WorkerReady("a", 8)) + machine.handle(WorkerReady("b", 8))
    for item in out:
        if isinstance(item, SendTask):
            machine.handle(ResultReceived(*_pair((item.worker, item.task))))
    assert machine.pass_index == 1  # pass 1 started; nothing of it accepted yet
    machine.handle(CancelRequested("user"))
    machine.handle(WorkersStopped())
    assert machine.accounts["a"].items_by_pass == [4, 0]
    assert machine.accounts["b"].items_by_pass == [1, 0]
