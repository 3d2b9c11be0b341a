"""The pure job state machine: events in, exact instructions out, no threads, no I/O.

The machine runs real computations' runs (`MonteCarlo().start(...)`, `Regression().start(...)`)
wrapped in `Recorded`, which records what the machine accepted and committed. Progress is read
only from the `WriteStatus` instructions, as the shell reads it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from aner_coord.computations import Accounting, Diverged, PassSpec, Run
from aner_coord.computations.base import ONE_KIND
from aner_coord.computations.montecarlo import MonteCarlo, MonteCarloRequest
from aner_coord.computations.regression import N_PARAMS, Regression, RegressionRequest
from aner_coord.job.events import (
    AuditFailed,
    CancelRequested,
    ResultReceived,
    ShellFailed,
    TaskError,
    WindowChanged,
    WorkerLost,
    WorkerReady,
    WorkersStopped,
)
from aner_coord.job.instructions import (
    BeginPass,
    DropWorker,
    Instruction,
    JobEnded,
    Progress,
    RecordAccepted,
    RecordCommitted,
    RecordLoss,
    SendTask,
    StopWorkers,
    WriteStatus,
)
from aner_coord.job.machine import JobMachine
from aner_coord.jobdir.status import JobState, WorkerAccount, WorkerLoss
from aner_worker.kernels.montecarlo import McParams, McStats
from aner_worker.kernels.regression import RegressionParams, RegressionStats
from protocol import Task

SEED = 7
S, R, CG, F, CD = (
    JobState.STARTING,
    JobState.RUNNING,
    JobState.CANCELLING,
    JobState.FAILED,
    JobState.CANCELLED,
)


class Recorded:
    """A real run, with a record of every result the machine accepted and every commit."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.durable_chunks = run.durable_chunks
        self.accepted: list[tuple[int, Any]] = []
        self.commits = 0

    def next_pass(self) -> PassSpec | None:
        return self.run.next_pass()

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        return self.run.check(chunk, start, count, stats)

    def accept(self, chunk: int, stats: Any) -> None:
        self.accepted.append((chunk, stats))
        self.run.accept(chunk, stats)

    def commit(self) -> None:
        self.commits += 1
        self.run.commit()

    def same(self, a: Any, b: Any) -> bool:
        return self.run.same(a, b)

    @property
    def committed_steps(self) -> int | None:
        return self.run.committed_steps

    def result(self, accounting: Accounting) -> Any:
        return self.run.result(accounting)

    @property
    def hits(self) -> int:
        return sum(stats.hits for _, stats in self.accepted)


NO_ACCOUNTING = Accounting(seconds=1.0, workers=(), execution={})


def plain(out: Sequence[Instruction]) -> list[object]:
    """Instructions with each WriteStatus shown as (state, urgent): progress is checked apart."""
    return [
        ("status", i.progress.state, i.urgent) if isinstance(i, WriteStatus) else i for i in out
    ]


def status(state: JobState, urgent: bool = True) -> tuple[str, JobState, bool]:
    return ("status", state, urgent)


def progress(out: Sequence[Instruction]) -> Progress:
    """The progress of the last WriteStatus in `out`."""
    written = [i.progress for i in out if isinstance(i, WriteStatus)]
    assert written, f"no WriteStatus in {out}"
    return written[-1]


def failed(error: str) -> list[object]:
    return [status(F), StopWorkers(error), JobEnded(F)]


def task(task_id: int, start: int, count: int, pass_id: int = 0) -> Task:
    return Task(task_id, pass_id, start, count)


def mc_machine(
    total: int = 10, chunk: int = 3, workers: tuple[str, ...] = ("a", "b"), audit: float = 0.0
) -> tuple[JobMachine, Recorded]:
    run = Recorded(MonteCarlo().start(MonteCarloRequest(samples=total, seed=SEED), chunk))
    machine = JobMachine(run, dict.fromkeys(workers, 1), chunk=chunk, passes=1, audit=audit)
    return machine, run


def started(total: int = 10, chunk: int = 3, **kwargs: Any) -> tuple[JobMachine, Recorded]:
    machine, run = mc_machine(total, chunk, **kwargs)
    machine.start()
    return machine, run


def hits(count: int) -> McStats:
    """A plausible honest answer for `count` samples (the machine checks plausibility)."""
    return McStats(round(count * math.pi / 4))


def answer(worker: str, t: Task, stats: Any = None) -> ResultReceived:
    return ResultReceived(worker, t.task_id, hits(t.count) if stats is None else stats)


def accounts(p: Progress) -> dict[str, tuple[int, int, list[int]]]:
    return {w.identity: (w.items, w.chunks, w.items_by_pass) for w in p.workers}


# -- starting ------------------------------------------------------------------------------


def test_start_begins_the_first_pass_and_reports_starting() -> None:
    machine, _ = mc_machine()
    out = machine.start()
    assert plain(out) == [BeginPass(0, McParams(SEED)), status(S)]
    p = progress(out)
    assert (p.passes, p.pass_index, p.phase, p.requested) == (1, 0, "sampling", 10)
    assert (p.chunks_total, p.chunks_done, p.accepted, p.in_flight) == (4, 0, 0, 0)
    assert p.error is None and p.committed_steps is None
    assert p.workers == (WorkerAccount("a", 1, 0, 0, [0]), WorkerAccount("b", 1, 0, 0, [0]))


def test_a_machine_needs_workers() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=10, seed=1), 3)
    with pytest.raises(ValueError, match="at least one worker"):
        JobMachine(run, {}, chunk=3, passes=1)


# -- Monte Carlo: dispatch -----------------------------------------------------------------


def test_two_workers_dispatch_order_and_windows() -> None:
    machine, _ = started()
    out = machine.handle(WorkerReady("a", 2))
    assert plain(out) == [status(R), SendTask("a", task(1, 0, 3)), SendTask("a", task(2, 3, 3))]
    assert progress(out).state is R
    assert machine.handle(WorkerReady("b", 2)) == [
        SendTask("b", task(3, 6, 3)),
        SendTask("b", task(4, 9, 1)),  # the last chunk keeps the remainder
    ]
    assert machine.handle(WorkerReady("b", 2)) == []  # a repeated ready changes nothing


def test_window_is_refilled_as_results_arrive() -> None:
    machine, _ = started(total=12, chunk=2)
    assert plain(machine.handle(WorkerReady("a", 1))) == [status(R), SendTask("a", task(1, 0, 2))]
    assert machine.handle(WorkerReady("b", 1)) == [SendTask("b", task(2, 2, 2))]
    out = machine.handle(answer("b", task(2, 2, 2)))
    assert plain(out) == [
        RecordAccepted(0, 1, hits(2)),  # to the ledger before any status reports it
        SendTask("b", task(3, 4, 2)),
        status(R, urgent=False),
    ]
    assert progress(out).in_flight == 2 and progress(out).accepted == 2
    out = machine.handle(answer("a", task(1, 0, 2)))
    assert plain(out) == [
        RecordAccepted(0, 0, hits(2)),
        SendTask("a", task(4, 6, 2)),
        status(R, urgent=False),
    ]


@pytest.mark.parametrize("window", [3, 100])
def test_every_worker_gets_a_chunk_despite_a_huge_first_window(window: int) -> None:
    machine, _ = started(workers=("a", "b", "c"))  # 4 chunks, 3 workers
    assert plain(machine.handle(WorkerReady("a", window))) == [
        status(R),
        SendTask("a", task(1, 0, 3)),
        SendTask("a", task(2, 3, 3)),
    ]
    assert machine.handle(WorkerReady("b", window)) == [SendTask("b", task(3, 6, 3))]
    assert machine.handle(WorkerReady("c", window)) == [SendTask("c", task(4, 9, 1))]


def test_reservation_with_two_workers_and_a_huge_window() -> None:
    machine, _ = started()  # 4 chunks
    assert plain(machine.handle(WorkerReady("a", 64))) == [
        status(R),
        SendTask("a", task(1, 0, 3)),
        SendTask("a", task(2, 3, 3)),
        SendTask("a", task(3, 6, 3)),
    ]
    assert machine.handle(WorkerReady("b", 64)) == [SendTask("b", task(4, 9, 1))]


def test_reserved_chunk_is_not_given_away_when_the_first_worker_finishes() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 64))
    for task_id, start in ((1, 0), (2, 3), (3, 6)):
        out = machine.handle(answer("a", task(task_id, start, 3)))
        # Nothing sent: chunk 4 waits for b.
        assert plain(out) == [RecordAccepted(0, task_id - 1, hits(3)), status(R, urgent=False)]
    assert machine.handle(WorkerReady("b", 1)) == [SendTask("b", task(4, 9, 1))]


def test_a_window_below_one_still_takes_one_task() -> None:
    machine, _ = started()
    assert plain(machine.handle(WorkerReady("a", 0))) == [status(R), SendTask("a", task(1, 0, 3))]


def test_a_larger_window_is_filled_at_once_and_a_smaller_one_holds_back() -> None:
    machine, _ = started(total=30, chunk=3, workers=("a",))
    assert plain(machine.handle(WorkerReady("a", 2))) == [
        status(R),
        SendTask("a", task(1, 0, 3)),
        SendTask("a", task(2, 3, 3)),
    ]
    assert machine.handle(WindowChanged("a", 4)) == [
        SendTask("a", task(3, 6, 3)),
        SendTask("a", task(4, 9, 3)),
    ]
    assert machine.handle(WindowChanged("a", 2)) == []  # nothing recalled
    # With 4 in flight and a window of 2, answers send nothing until it is below 2 again.
    for task_id in (1, 2):
        out = machine.handle(answer("a", task(task_id, 3 * (task_id - 1), 3)))
        assert not [i for i in out if isinstance(i, SendTask)]
    out = machine.handle(answer("a", task(3, 6, 3)))
    assert [i for i in out if isinstance(i, SendTask)] == [SendTask("a", task(5, 12, 3))]


def test_a_window_change_for_a_worker_not_ready_or_lost_waits_for_its_ready() -> None:
    machine, _ = started(workers=("a", "b"))
    assert machine.handle(WindowChanged("b", 8)) == []
    assert plain(machine.handle(WorkerReady("b", 1))) == [status(R), SendTask("b", task(1, 0, 3))]
    assert machine.handle(WindowChanged("nobody", 3))[-1] == JobEnded(F)


def test_fewer_chunks_than_workers_dispatches_to_whoever_is_ready() -> None:
    machine, _ = started(total=2, chunk=3)  # one chunk, two workers (local runs allow it)
    out = machine.handle(WorkerReady("a", 2))
    assert plain(out) == [status(R), SendTask("a", task(1, 0, 2))]
    assert machine.handle(WorkerReady("b", 2)) == []
    assert plain(machine.handle(answer("a", task(1, 0, 2))))[-1] == JobEnded(JobState.COMPLETED)


# -- Monte Carlo: results ------------------------------------------------------------------


def test_accepted_results_update_counts_and_the_last_one_completes() -> None:
    machine, run = started()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    out = machine.handle(answer("a", task(1, 0, 3), McStats(3)))
    p = progress(out)
    assert (p.accepted, p.accepted_in_pass, p.chunks_done, p.in_flight) == (3, 3, 1, 3)
    assert run.hits == 3
    machine.handle(answer("b", task(4, 9, 1), McStats(0)))
    out = machine.handle(answer("b", task(3, 6, 3), McStats(2)))
    assert accounts(progress(out))["b"] == (4, 2, [4])
    out = machine.handle(answer("a", task(2, 3, 3), McStats(1)))
    assert plain(out) == [
        RecordAccepted(0, 1, McStats(1)),
        RecordCommitted(0),
        status(JobState.COMPLETED),
        StopWorkers("job completed"),
        JobEnded(JobState.COMPLETED),
    ]
    p = progress(out)
    assert (p.accepted, p.chunks_total, p.in_flight, p.pass_index) == (10, 4, 0, 1)
    assert p.phase == "done" and p.error is None
    assert accounts(p) == {"a": (6, 2, [6]), "b": (4, 2, [4])}
    assert run.hits == 6 and run.commits == 1
    result = run.result(NO_ACCOUNTING)
    assert (result.hits, result.samples, result.estimate) == (6, 10, 4 * 6 / 10)


def test_the_completed_status_counts_the_last_pass_chunks() -> None:
    # Found by this suite: the COMPLETED status once said 0 of N chunks done, the counters
    # having been reset for a pass that never came.
    machine, _ = started(total=6, chunk=3, workers=("a",))
    machine.handle(WorkerReady("a", 2))
    machine.handle(answer("a", task(1, 0, 3)))
    out = machine.handle(answer("a", task(2, 3, 3)))
    p = progress(out)
    assert p.state is JobState.COMPLETED
    assert (p.chunks_done, p.chunks_total, p.accepted_in_pass, p.requested) == (2, 2, 6, 6)


def test_duplicate_result_fails_the_job_and_is_not_counted_twice() -> None:
    machine, run = started()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    machine.handle(answer("a", task(1, 0, 3), McStats(2)))
    out = machine.handle(answer("a", task(1, 0, 3), McStats(2)))
    error = progress(out).error
    assert error is not None
    assert plain(out) == failed(error)
    assert error.startswith('worker "a" failed during run: ')
    assert "task 1" in error and "duplicate" in error
    assert run.hits == 2 and len(run.accepted) == 1
    p = progress(out)
    assert (p.accepted, p.chunks_done) == (3, 1)
    assert accounts(p)["a"][0] == 3


def test_result_from_the_wrong_worker() -> None:
    machine, run = started()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    out = machine.handle(answer("b", task(1, 0, 3)))  # task 1 is on "a"
    error = str(progress(out).error)
    assert plain(out) == failed(error)
    assert error.startswith('worker "b" failed during run: ') and "task 1" in error
    assert run.accepted == [] and progress(out).accepted == 0


def test_result_for_an_unknown_task() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(ResultReceived("a", 99, McStats(1)))
    error = str(progress(out).error)
    assert plain(out) == failed(error)
    assert 'worker "a"' in error and "task 99" in error


@pytest.mark.parametrize(
    ("total", "stats", "words"),
    [
        (10, McStats(4), "4 hits is impossible for 3 samples"),
        (10, McStats(-1), "-1 hits is impossible for 3 samples"),
        (
            10**6,
            McStats(10**6),  # every sample a hit: a lying worker
            "1,000,000 hits in 1,000,000 samples is more than 12 standard deviations",
        ),
        (10**6, McStats(0), "0 hits in 1,000,000 samples is more than 12 standard deviations"),
        (10, RegressionStats((0.0,) * 9, 0.0, 0, 3), "expected Monte Carlo statistics"),
    ],
    ids=["hits>count", "negative-hits", "all-hits", "no-hits", "wrong-kind"],
)
def test_inconsistent_result_is_rejected(total: int, stats: Any, words: str) -> None:
    machine, run = started(total=total, chunk=total if total > 10 else 3)
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(ResultReceived("a", 1, stats))
    error = str(progress(out).error)
    assert plain(out) == failed(error)
    assert error.startswith('worker "a" failed during run: inconsistent result rejected: ')
    assert words in error
    assert run.accepted == []
    assert (progress(out).accepted, progress(out).chunks_done) == (0, 0)


def test_an_honest_chunk_passes_the_plausibility_check() -> None:
    from aner_worker.kernels.philox import count_hits

    machine, _ = started(total=10**6, chunk=10**6, workers=("a",))
    machine.handle(WorkerReady("a", 1))
    out = machine.handle(ResultReceived("a", 1, McStats(count_hits(SEED, 0, 10**6))))
    assert plain(out)[-1] == JobEnded(JobState.COMPLETED)


def test_task_error_fails_the_job_naming_worker_and_phase() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    machine.handle(WorkerReady("b", 1))
    out = machine.handle(TaskError("b", 2, "ValueError: boom"))
    error = 'worker "b" failed during task: ValueError: boom'
    assert plain(out) == failed(error)
    assert progress(out).error == error
    # After the failure nothing more is dispatched, and a second failure changes nothing.
    assert machine.handle(answer("a", task(1, 0, 3))) == []
    assert machine.handle(WorkerLost("a", "run", "gone")) == []
    assert machine.handle(WorkerReady("a", 1)) == []
    assert machine.handle(CancelRequested("late")) == []
    assert machine.handle(WorkersStopped()) == []


def test_worker_lost_fails_the_job() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    out = machine.handle(WorkerLost("b", "connect", "connection refused"))
    assert plain(out) == failed('worker "b" failed during connect: connection refused')


def test_worker_lost_before_anyone_is_ready() -> None:
    machine, _ = started()
    out = machine.handle(WorkerLost("a", "handshake", "refused by the worker"))
    assert plain(out) == failed('worker "a" failed during handshake: refused by the worker')


def test_audit_failed_names_the_worker_and_the_task() -> None:
    machine, run = started(audit=1.0)
    out = machine.handle(WorkerReady("a", 1))
    (send,) = [i for i in out if isinstance(i, SendTask)]
    assert send.audit is True
    out = machine.handle(AuditFailed("a", send.task.task_id, "it sent 3 hits, expected 2"))
    assert plain(out) == failed(
        'worker "a" failed during audit: its result for task 1 differs from the '
        "coordinator's own: it sent 3 hits, expected 2"
    )
    assert run.accepted == []


def audited(audit: float, seed: int, total: int = 40) -> list[int]:
    run = Recorded(MonteCarlo().start(MonteCarloRequest(samples=total, seed=SEED), 1))
    machine = JobMachine(run, {"a": 1}, chunk=1, passes=1, audit=audit, audit_seed=seed)
    machine.start()
    sends = [i for i in machine.handle(WorkerReady("a", total)) if isinstance(i, SendTask)]
    assert [s.task.task_id for s in sends] == list(range(1, total + 1))
    return [s.task.task_id for s in sends if s.audit]


@pytest.mark.parametrize("audit", [0.1, 0.25, 0.5, 1.0])
def test_audit_flags_one_task_in_each_window_at_a_position_the_seed_draws(audit: float) -> None:
    # A steady rate (one in every 1/audit tasks), but where in each window no worker can
    # know: the coordinator draws the seed at random (issue 25: a fixed schedule, tasks 10,
    # 20, ..., let a liar that knew it lie everywhere else).
    width = round(1 / audit)
    picks = [audited(audit, seed) for seed in range(20)]
    for flagged in picks:
        assert [(t - 1) // width for t in flagged] == list(range(40 // width))
    if width > 1:
        assert len({tuple(p) for p in picks}) > 1
        assert len({p[0] for p in picks}) > 1  # the first window's pick moves too
    assert audited(audit, 7) == audited(audit, 7)  # the machine itself stays pure
    assert audited(0.0, 7) == []


def test_shell_failure_fails_the_job_naming_where() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    out = machine.handle(ShellFailed("the job directory", "No space left on device"))
    assert plain(out) == failed("the job directory failed: No space left on device")


# -- cancellation --------------------------------------------------------------------------


def test_cancel_stops_dispatch_and_records_late_results_it_counts() -> None:
    machine, run = started(total=20, chunk=3)  # 7 chunks
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 1))
    out = machine.handle(answer("a", task(1, 0, 3), McStats(2)))
    assert plain(out) == [
        RecordAccepted(0, 0, McStats(2)),
        SendTask("a", task(4, 9, 3)),
        status(R, urgent=False),
    ]
    out = machine.handle(CancelRequested("user pressed Ctrl-C"))
    assert plain(out) == [status(CG), StopWorkers("user pressed Ctrl-C")]
    assert progress(out).error == "cancelled: user pressed Ctrl-C"
    assert machine.handle(CancelRequested("again")) == []
    # In-flight results still arrive: nothing new is sent, and what the status counts the
    # ledger holds (a resume recovers exactly what the last status reported).
    assert machine.handle(answer("b", task(3, 6, 3), McStats(3))) == [
        RecordAccepted(0, 2, McStats(3))
    ]
    assert machine.handle(answer("a", task(2, 3, 3), McStats(1))) == [
        RecordAccepted(0, 1, McStats(1))
    ]
    assert machine.handle(WorkerReady("b", 5)) == []
    assert run.hits == 6
    # A failure while cancelling does not turn the job into FAILED.
    assert machine.handle(WorkerLost("a", "run", "killed")) == []
    assert machine.handle(TaskError("a", 4, "late")) == []
    out = machine.handle(WorkersStopped())
    assert plain(out) == [status(CD), JobEnded(CD)]
    p = progress(out)
    assert p.accepted == 9 and p.chunks_done == 3
    assert p.error == "cancelled: user pressed Ctrl-C"
    assert machine.handle(WorkersStopped()) == []
    assert run.commits == 0  # a partial pass is never committed


def test_cancel_before_any_worker_is_ready() -> None:
    machine, _ = started()
    assert plain(machine.handle(CancelRequested("shutdown"))) == [
        status(CG),
        StopWorkers("shutdown"),
    ]
    assert machine.handle(WorkerReady("a", 4)) == []
    assert plain(machine.handle(WorkersStopped())) == [status(CD), JobEnded(CD)]


def test_shell_failure_while_cancelling_is_recorded_and_the_stop_goes_on() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    machine.handle(CancelRequested("user"))
    assert machine.handle(ShellFailed("the status writer", "disk full")) == []
    out = machine.handle(WorkersStopped())
    assert plain(out) == [status(CD), JobEnded(CD)]
    assert progress(out).error == "cancelled: user; then the status writer failed: disk full"


def test_workers_stopped_outside_cancelling_is_ignored() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    assert machine.handle(WorkersStopped()) == []
    assert machine.handle(WorkerReady("b", 1)) == [SendTask("b", task(2, 3, 3))]  # still running


def test_single_worker_runs_every_chunk() -> None:
    machine, run = started(total=10, chunk=3, workers=("solo",))
    out = machine.handle(WorkerReady("solo", 1))
    sent = 0
    while not isinstance(out[-1], JobEnded):
        tasks = [i.task for i in out if isinstance(i, SendTask)]
        assert len(tasks) == 1
        sent += 1
        out = machine.handle(answer("solo", tasks[0], McStats(1)))
    assert sent == 4
    assert run.hits == 4
    assert out[-1] == JobEnded(JobState.COMPLETED)


# -- after the end: late results, abandoned tasks -----------------------------------------


def test_results_after_failure_are_ignored() -> None:
    machine, run = started()
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    machine.handle(answer("a", task(1, 0, 3), McStats(2)))
    out = machine.handle(WorkerLost("b", "run", "connection reset"))
    before = progress(out)
    assert before.in_flight == 0  # the outstanding tasks were abandoned
    assert [w.items for w in before.workers] == [3, 0]
    # Task 2 was outstanding on "a" when the job failed: its result is not counted.
    assert machine.handle(answer("a", task(2, 3, 3), McStats(1))) == []
    assert machine.handle(TaskError("a", 2, "late")) == []
    assert run.hits == 2 and len(run.accepted) == 1


def test_results_after_completion_are_ignored() -> None:
    machine, run = started(total=6, chunk=3)
    machine.handle(WorkerReady("a", 2))
    machine.handle(WorkerReady("b", 2))
    machine.handle(answer("a", task(1, 0, 3), McStats(1)))
    out = machine.handle(answer("b", task(2, 3, 3), McStats(1)))
    assert out[-1] == JobEnded(JobState.COMPLETED)
    assert machine.handle(answer("b", task(2, 3, 3), McStats(1))) == []
    assert machine.handle(ResultReceived("a", 99, McStats(1))) == []
    assert machine.handle(WorkerLost("a", "run", "exited")) == []
    assert machine.handle(CancelRequested("late")) == []
    assert run.hits == 2 and run.commits == 1


def test_workers_stopped_abandons_outstanding_tasks() -> None:
    machine, run = started(total=20, chunk=3)  # 7 chunks
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(WorkerReady("b", 2))
    assert len([i for i in out if isinstance(i, SendTask)]) == 2
    machine.handle(CancelRequested("user"))
    # One result still arrives while cancelling: counted, and so recorded.
    assert machine.handle(answer("b", task(3, 6, 3), McStats(3))) == [
        RecordAccepted(0, 2, McStats(3))
    ]
    out = machine.handle(WorkersStopped())
    p = progress(out)
    # The tasks the workers dropped were never accepted: nothing is in flight any more.
    assert p.in_flight == 0 and p.accepted == 3
    assert accounts(p) == {"a": (0, 0, [0]), "b": (3, 1, [3])}
    # A dropped task's result that still trickles in is ignored.
    assert machine.handle(answer("a", task(1, 0, 3))) == []
    assert run.hits == 3


# -- computation errors --------------------------------------------------------------------


class Faulty(Recorded):
    """A Monte Carlo run that raises `error` from the method named `where`."""

    def __init__(self, where: str, error: Exception) -> None:
        super().__init__(MonteCarlo().start(MonteCarloRequest(samples=6, seed=SEED), 3))
        self.where = where
        self.error = error

    def _maybe(self, where: str) -> None:
        if where == self.where:
            raise self.error

    def next_pass(self) -> PassSpec | None:
        if self.commits:  # the next pass is planned after the first commit
            self._maybe("plan")
        return super().next_pass()

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        self._maybe("check")
        return super().check(chunk, start, count, stats)

    def accept(self, chunk: int, stats: Any) -> None:
        self._maybe("accept")
        super().accept(chunk, stats)

    def commit(self) -> None:
        self._maybe("commit")
        super().commit()


@pytest.mark.parametrize(
    ("where", "error", "message"),
    [
        ("check", KeyError("k"), "computation error while checking a result: KeyError('k')"),
        ("accept", ValueError("v"), "computation error while accepting a result: ValueError('v')"),
        ("commit", RuntimeError("r"), "computation error while committing sampling: "),
        ("plan", RuntimeError("p"), "computation error while planning the next pass: "),
        ("commit", Diverged("it blew up"), "numerical divergence: it blew up"),
        ("check", Diverged("nan"), "numerical divergence: nan"),
    ],
)
def test_a_computation_error_fails_the_job_naming_it(
    where: str, error: Exception, message: str
) -> None:
    run = Faulty(where, error)
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1)
    machine.start()
    machine.handle(WorkerReady("a", 2))
    machine.handle(answer("a", task(1, 0, 3)))
    out = machine.handle(answer("a", task(2, 3, 3)))
    if where in ("check", "accept"):
        # The first result already failed the job; the second is ignored.
        assert out == []
        return
    error_text = str(progress(out).error)
    # The last result was recorded (and, before a planning error, the pass committed).
    records: list[object] = [RecordAccepted(0, 1, hits(3))]
    if where == "plan":
        records.append(RecordCommitted(0))
    assert plain(out) == [*records, *failed(error_text)]
    assert error_text.startswith(message)


def test_a_computation_error_on_the_first_result() -> None:
    run = Faulty("accept", ValueError("v"))
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1)
    machine.start()
    machine.handle(WorkerReady("a", 2))
    out = machine.handle(answer("a", task(1, 0, 3)))
    assert plain(out) == failed("computation error while accepting a result: ValueError('v')")


def test_a_run_that_cannot_plan_its_first_pass_fails_at_start() -> None:
    class NoPlan(Recorded):
        def next_pass(self) -> PassSpec | None:
            raise OSError("no plan")

    run = NoPlan(MonteCarlo().start(MonteCarloRequest(samples=6, seed=SEED), 3))
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1)
    out = machine.start()
    error = "computation error while planning the next pass: OSError('no plan')"
    # The failure and nothing after it: the job ended before it started.
    assert plain(out) == failed(error)
    assert machine.handle(WorkerReady("a", 1)) == []


# -- the regression fixture: passes, barrier, ordered reduction ---------------------------

N_ROWS = 5
FX_CHUNK = 2  # chunks [0,2) [2,4) [4,5): the last one is uneven
STEPS = 2
RATE = 0.5
BASE = {0: 0.1, 2: 0.2, 4: 0.3}
LOSS = {0: 1.1, 2: 2.2, 4: 0.7}


def fake_grad(start: int, theta: tuple[float, ...]) -> tuple[float, ...]:
    """Sums that depend on the range and the frozen theta, chosen so that float order shows:
    (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1. Each stays below the rows it sums over."""
    return tuple(BASE[start] * (j + 1) / N_PARAMS + 0.25 * theta[j] for j in range(N_PARAMS))


def fx_stats(t: Task, theta: tuple[float, ...]) -> RegressionStats:
    return RegressionStats(
        grad=fake_grad(t.start, theta),
        loss_sum=LOSS[t.start] * t.count,
        correct=t.count - 1,
        valid=t.count,
    )


class Fixture:
    """A regression machine and the theta of the pass in progress (from BeginPass)."""

    def __init__(self, rows: int = N_ROWS, chunk: int = FX_CHUNK) -> None:
        request = RegressionRequest(samples=rows, steps=STEPS, rate=RATE, seed=SEED)
        self.run = Recorded(Regression().start(request, chunk))
        self.machine = JobMachine(self.run, {"a": 1, "b": 1}, chunk=chunk, passes=STEPS + 2)
        self.thetas: list[tuple[float, ...]] = []
        self.last: Progress | None = None

    def feed(self, out: list[Instruction]) -> list[Instruction]:
        for i in out:
            if isinstance(i, BeginPass):
                assert isinstance(i.params, RegressionParams) and i.params.seed == SEED
                assert i.pass_id == len(self.thetas)
                self.thetas.append(i.params.theta)
            if isinstance(i, WriteStatus):
                self.last = i.progress
        return out

    def start(self) -> list[Instruction]:
        return self.feed(self.machine.start())

    def handle(self, event: Any) -> list[Instruction]:
        return self.feed(self.machine.handle(event))

    def answer(self, worker: str, t: Task) -> list[Instruction]:
        return self.handle(ResultReceived(worker, t.task_id, fx_stats(t, self.thetas[t.pass_id])))

    @property
    def theta(self) -> tuple[float, ...]:
        theta: tuple[float, ...] = self.run.run.theta  # type: ignore[attr-defined]
        return theta


def reference_theta(steps: int) -> tuple[float, ...]:
    """The update of docs/contracts.md, section 2 written out: chunk-order sums, divided by
    all rows."""
    theta = (0.0,) * N_PARAMS
    for _ in range(steps):
        grads = [fake_grad(s, theta) for s in (0, 2, 4)]
        total = [((0.0 + grads[0][j]) + grads[1][j]) + grads[2][j] for j in range(N_PARAMS)]
        theta = tuple(t - RATE * g / N_ROWS for t, g in zip(theta, total, strict=True))
    return theta


def sends(out: Sequence[Instruction]) -> list[SendTask]:
    return [i for i in out if isinstance(i, SendTask)]


def run_fixture(reverse: bool) -> tuple[Fixture, list[list[Task]]]:
    """Run the whole fixture with windows big enough for a pass, completing each pass's
    chunks in chunk order or in reverse; return the tasks sent per pass."""
    fx = Fixture()
    fx.start()
    out = fx.handle(WorkerReady("a", 8)) + fx.handle(WorkerReady("b", 8))
    per_pass: list[list[Task]] = []
    while not (out and isinstance(out[-1], JobEnded)):
        sent = sends(out)
        assert [s.task.start for s in sent] == [0, 2, 4]  # one whole pass, and nothing more
        assert {s.task.pass_id for s in sent} == {len(per_pass)}
        per_pass.append([s.task for s in sent])
        out = []
        for s in reversed(sent) if reverse else sent:
            out = fx.answer(s.worker, s.task)
    assert out[-1] == JobEnded(JobState.COMPLETED)
    return fx, per_pass


def test_fixture_makes_steps_plus_two_passes() -> None:
    fx, per_pass = run_fixture(reverse=False)
    assert len(per_pass) == STEPS + 2
    assert fx.run.commits == STEPS + 2
    assert fx.run.committed_steps == STEPS
    p = fx.last
    assert p is not None
    assert (p.passes, p.pass_index, p.accepted, p.committed_steps) == (
        STEPS + 2, STEPS + 2, N_ROWS * (STEPS + 2), STEPS,
    )  # fmt: skip
    # Pass 0: "a" is ready first and takes all but the chunk held for "b"; later passes
    # deal chunks round robin over the ready workers: a gets [0,2) and [4,5), b [2,4).
    assert accounts(p)["a"][2] == [4, 3, 3, 3]
    assert accounts(p)["b"][2] == [1, 2, 2, 2]


def test_theta_of_each_pass_is_the_committed_update() -> None:
    fx, _ = run_fixture(reverse=False)
    zero = (0.0,) * N_PARAMS
    assert fx.thetas == [zero, zero, reference_theta(1), reference_theta(2)]
    assert fx.theta == reference_theta(2)
    assert reference_theta(1) != zero and reference_theta(2) != reference_theta(1)


def test_reduction_is_in_chunk_order_whatever_completes_first() -> None:
    forward, _ = run_fixture(reverse=False)
    backward, _ = run_fixture(reverse=True)
    assert forward.theta == backward.theta == reference_theta(STEPS)  # bitwise
    a, b = forward.run.result(NO_ACCOUNTING), backward.run.result(NO_ACCOUNTING)
    assert (a.initial_loss, a.final_loss, a.theta) == (b.initial_loss, b.final_loss, b.theta)
    # The choice of sums makes order visible: a reversed reduction would differ.
    grads = [fake_grad(s, (0.0,) * N_PARAMS) for s in (0, 2, 4)]
    forward_sums = [((0.0 + grads[0][j]) + grads[1][j]) + grads[2][j] for j in range(N_PARAMS)]
    reverse_sums = [((0.0 + grads[2][j]) + grads[1][j]) + grads[0][j] for j in range(N_PARAMS)]
    assert forward_sums != reverse_sums


def test_uneven_last_chunk_is_weighted_by_rows_not_chunks() -> None:
    fx, _ = run_fixture(reverse=False)
    result = fx.run.result(NO_ACCOUNTING)
    loss_sum = (1.1 * 2 + 2.2 * 2) + 0.7 * 1
    assert result.initial_loss == loss_sum / N_ROWS
    assert result.initial_loss != (1.1 + 2.2 + 0.7) / 3  # not a mean of chunk means
    assert result.initial_accuracy == (1 + 1 + 0) / N_ROWS
    assert result.committed_steps == STEPS and result.steps == STEPS
    g0 = ((0.0 + 0.1 / N_PARAMS) + 0.2 / N_PARAMS) + 0.3 / N_PARAMS
    assert reference_theta(1)[0] == 0.0 - RATE * g0 / N_ROWS


def test_barrier_no_task_of_the_next_pass_before_the_pass_is_accepted() -> None:
    fx = Fixture()
    assert plain(fx.start()) == [BeginPass(0, RegressionParams(SEED, (0.0,) * 9)), status(S)]
    assert plain(fx.handle(WorkerReady("a", 1))) == [status(R), SendTask("a", task(1, 0, 2))]
    assert fx.handle(WorkerReady("b", 1)) == [SendTask("b", task(2, 2, 2))]
    assert fx.handle(WorkerReady("a", 1)) == []  # already ready: nothing changes
    zero = (0.0,) * N_PARAMS
    out = fx.answer("a", task(1, 0, 2))
    assert plain(out) == [
        RecordAccepted(0, 0, fx_stats(task(1, 0, 2), zero)),
        SendTask("a", task(3, 4, 1)),
        status(R, urgent=False),
    ]
    # "a" has a free slot once task 3 is back, but pass 0 still waits for task 2 on "b".
    out = fx.answer("a", task(3, 4, 1))
    assert plain(out) == [RecordAccepted(0, 2, fx_stats(task(3, 4, 1), zero)), status(R, False)]
    assert (progress(out).pass_index, progress(out).chunks_done) == (0, 2)
    assert fx.run.commits == 0
    out = fx.answer("b", task(2, 2, 2))
    theta = zero  # step 1 computes its gradient at the initial parameters
    assert plain(out) == [
        RecordAccepted(0, 1, fx_stats(task(2, 2, 2), zero)),
        RecordCommitted(0),  # the barrier: committed before the next pass begins
        BeginPass(1, RegressionParams(SEED, theta)),
        SendTask("a", task(4, 0, 2, pass_id=1)),
        SendTask("b", task(5, 2, 2, pass_id=1)),
        # After the sends (the workers compute while the shell publishes), and not urgent:
        # a new pass is progress, published within the shell's interval.
        status(R, urgent=False),
    ]
    p = progress(out)
    assert (p.pass_index, p.chunks_done, p.phase, p.committed_steps) == (1, 0, "step 1 of 2", 0)
    assert fx.run.commits == 1


def test_cancel_mid_step_keeps_the_last_committed_theta() -> None:
    fx = Fixture()
    fx.start()
    out = fx.handle(WorkerReady("a", 8)) + fx.handle(WorkerReady("b", 8))
    for _ in range(2):  # initial metrics and step 1
        sent = sends(out)
        out = []
        for s in sent:
            out = fx.answer(s.worker, s.task)
    assert fx.run.committed_steps == 1
    committed = fx.theta
    assert committed == reference_theta(1)
    step2 = sends(out)
    assert fx.thetas[-1] == committed and {s.task.pass_id for s in step2} == {2}
    # Two of step 2's three chunks arrive, one before and one after the cancel request.
    first = step2[0].task
    assert plain(fx.answer(step2[0].worker, first)) == [
        RecordAccepted(2, first.start // FX_CHUNK, fx_stats(first, committed)),
        status(R, urgent=False),
    ]
    assert plain(fx.handle(CancelRequested("user"))) == [status(CG), StopWorkers("user")]
    # Recorded (a resume takes them), never committed: not even the whole pass.
    for s in (step2[2], step2[1]):
        assert [type(i) for i in fx.answer(s.worker, s.task)] == [RecordAccepted]
    out = fx.handle(WorkersStopped())
    assert plain(out) == [status(CD), JobEnded(CD)]
    assert fx.run.committed_steps == 1
    assert fx.theta == committed
    assert progress(out).pass_index == 2
    assert progress(out).committed_steps == 1


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"valid": 1}, "1 valid rows reported for a range of 2"),
        ({"correct": 3}, "3 correct predictions is impossible for 2 rows"),
        ({"correct": -1}, "-1 correct predictions is impossible for 2 rows"),
        ({"grad": (0.0,) * 8}, "8 gradient sums, expected 9"),
        ({"loss_sum": -1.0}, "negative loss sum -1.0"),
        ({"grad": (3.0,) + (0.0,) * 8}, "a gradient sum exceeds the 2 rows it sums over"),
    ],
    ids=["valid", "correct", "negative-correct", "grad-length", "negative-loss", "grad-bound"],
)
def test_inconsistent_fixture_result_is_rejected(change: dict[str, object], words: str) -> None:
    fx = Fixture()
    fx.start()
    fx.handle(WorkerReady("a", 1))
    good = fx_stats(task(1, 0, 2), (0.0,) * N_PARAMS)
    fields = {f: getattr(good, f) for f in good.__struct_fields__}
    out = fx.handle(ResultReceived("a", 1, RegressionStats(**{**fields, **change})))
    error = str(progress(out).error)
    assert plain(out) == failed(error)
    assert error.startswith('worker "a" failed during run: inconsistent result rejected: ')
    assert words in error
    assert fx.run.accepted == []


@pytest.mark.parametrize(
    "change",
    [{"loss_sum": float("nan")}, {"grad": (float("inf"),) + (0.0,) * 8}],
    ids=["nan-loss", "inf-grad"],
)
def test_non_finite_statistics_are_a_divergence_naming_the_worker(
    change: dict[str, object],
) -> None:
    # A divergence (the request's fault: "lower --rate"), and the worker that sent the
    # numbers is named (issue 25: a faulty worker's NaN would look the same).
    fx = Fixture()
    fx.start()
    fx.handle(WorkerReady("a", 1))
    good = fx_stats(task(1, 0, 2), (0.0,) * N_PARAMS)
    fields = {f: getattr(good, f) for f in good.__struct_fields__}
    out = fx.handle(ResultReceived("a", 1, RegressionStats(**{**fields, **change})))
    error = str(progress(out).error)
    assert plain(out) == failed(error)
    assert error.startswith("numerical divergence: non-finite loss or gradient in initial metrics")
    assert "lower --rate" in error
    assert error.endswith('(in the result of worker "a" for task 1)')


def test_parameters_leaving_the_finite_range_name_the_step() -> None:
    request = RegressionRequest(samples=N_ROWS, steps=STEPS, rate=1e308, seed=SEED)
    run = Recorded(Regression().start(request, N_ROWS))
    machine = JobMachine(run, {"a": 1}, chunk=N_ROWS, passes=STEPS + 2)
    machine.start()
    machine.handle(WorkerReady("a", 1))
    big = RegressionStats((-5.0,) * N_PARAMS, 1.0, 0, N_ROWS)
    machine.handle(ResultReceived("a", 1, big))  # initial metrics: committed
    out = machine.handle(ResultReceived("a", 2, big))  # step 1: theta = 1e308 * 5 / 5 * 5...
    error = str(progress(out).error)
    assert plain(out) == [RecordAccepted(1, 0, big), *failed(error)]  # accepted, not committed
    assert error == (
        "numerical divergence: the parameters left the finite range at step 1 of 2: "
        "the fit diverged; lower --rate"
    )


def test_items_by_pass_has_an_entry_per_started_pass_for_every_worker() -> None:
    # One chunk, two workers (local runs allow that): each pass is done by one of them, so
    # in every pass the other worker accepts nothing, and still has an entry for it.
    fx = Fixture(chunk=N_ROWS)
    out = fx.start()
    assert [w.items_by_pass for w in progress(out).workers] == [[0], [0]]
    out = fx.handle(WorkerReady("a", 1)) + fx.handle(WorkerReady("b", 1))
    passes_seen = 0
    while not isinstance(out[-1], JobEnded):
        passes_seen += 1
        assert fx.last is not None
        assert [len(w.items_by_pass) for w in fx.last.workers] == [passes_seen] * 2
        (item,) = sends(out)
        out = fx.answer(item.worker, item.task)
    assert out[-1] == JobEnded(JobState.COMPLETED)
    # Pass 1 goes to "b", the worker that was still unserved; later passes to "a" again.
    p = progress(out)
    assert accounts(p)["a"][2] == [N_ROWS, 0, N_ROWS, N_ROWS]
    assert accounts(p)["b"][2] == [0, N_ROWS, 0, 0]


def test_items_by_pass_of_a_cancelled_fixture_covers_the_interrupted_pass() -> None:
    fx = Fixture()
    fx.start()
    out = fx.handle(WorkerReady("a", 8)) + fx.handle(WorkerReady("b", 8))
    for s in sends(out):
        fx.answer(s.worker, s.task)
    assert fx.last is not None and fx.last.pass_index == 1  # pass 1 started, nothing accepted
    fx.handle(CancelRequested("user"))
    out = fx.handle(WorkersStopped())
    assert accounts(progress(out))["a"][2] == [4, 0]
    assert accounts(progress(out))["b"][2] == [1, 0]


def test_two_runs_of_one_request_share_no_state() -> None:
    """Per-run state is built fresh: running a request twice never doubles its counts."""
    request = MonteCarloRequest(samples=6, seed=SEED)
    results = []
    for _ in range(2):
        run = MonteCarlo().start(request, 3)
        machine = JobMachine(run, {"a": 1}, chunk=3, passes=1)
        machine.start()
        machine.handle(WorkerReady("a", 2))
        machine.handle(ResultReceived("a", 1, McStats(2)))
        machine.handle(ResultReceived("a", 2, McStats(3)))
        results.append(run.result(NO_ACCOUNTING).hits)
    assert results == [5, 5]


# -- retries: a lost worker survived (docs/contracts.md, section 11) ----------------------


def test_a_lost_worker_is_survived_with_retries_and_its_chunks_recomputed() -> None:
    run = Recorded(MonteCarlo().start(MonteCarloRequest(samples=10, seed=SEED), 3))
    machine = JobMachine(run, {"a": 1, "b": 1}, chunk=3, passes=1, retries=1)
    machine.start()
    machine.handle(WorkerReady("a", 2))  # chunks 0 and 1
    assert machine.handle(WorkerReady("b", 2)) == [
        SendTask("b", task(3, 6, 3)),
        SendTask("b", task(4, 9, 1)),
    ]
    machine.handle(answer("a", task(1, 0, 3)))
    out = machine.handle(WorkerLost("b", "run", "connection reset", at=5.0))
    loss = WorkerLoss("b", "run", "connection reset", 5.0, "sampling")
    assert plain(out) == [
        RecordLoss(loss),
        DropWorker("b", "lost during run: connection reset"),
        status(R),
        SendTask("a", task(5, 6, 3)),  # b's chunks go back to the front, in chunk order
    ]
    assert progress(out).losses == (loss,)
    # Whatever the dropped worker still says is ignored, never counted.
    assert machine.handle(answer("b", task(3, 6, 3))) == []
    assert machine.handle(TaskError("b", 4, "late")) == []
    assert machine.handle(WorkerLost("b", "run", "again")) == []
    out = machine.handle(answer("a", task(2, 3, 3)))
    assert plain(out)[1] == SendTask("a", task(6, 9, 1))
    machine.handle(answer("a", task(5, 6, 3)))
    out = machine.handle(answer("a", task(6, 9, 1)))
    assert out[-1] == JobEnded(JobState.COMPLETED)
    # Each chunk accepted exactly once: the result is the undisturbed run's.
    assert sorted(chunk for chunk, _ in run.accepted) == [0, 1, 2, 3]
    assert accounts(progress(out)) == {"a": (10, 4, [10]), "b": (0, 0, [0])}


def test_losses_beyond_the_retries_fail_the_job() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=30, seed=SEED), 3)
    machine = JobMachine(run, {"a": 1, "b": 1, "c": 1}, chunk=3, passes=1, retries=1)
    machine.start()
    for name in "abc":
        machine.handle(WorkerReady(name, 1))
    assert isinstance(machine.handle(WorkerLost("a", "run", "gone"))[0], RecordLoss)
    out = machine.handle(WorkerLost("b", "run", "gone too"))
    assert plain(out) == failed('worker "b" failed during run: gone too')


def test_the_last_worker_lost_fails_the_job_whatever_the_retries() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=10, seed=SEED), 3)
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1, retries=5)
    machine.start()
    machine.handle(WorkerReady("a", 1))
    out = machine.handle(WorkerLost("a", "run", "killed"))
    assert plain(out) == failed('worker "a" failed during run: killed')


# -- resume: chunks the ledger already holds ----------------------------------------------


def test_a_resumed_pass_dispatches_only_what_the_ledger_lacks() -> None:
    run = Recorded(MonteCarlo().start(MonteCarloRequest(samples=10, seed=SEED), 3))
    recovered = {0: {0: McStats(2), 2: McStats(3)}}
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1, recovered=recovered)
    out = machine.start()
    p = progress(out)
    assert (p.accepted, p.chunks_done, p.recovered) == (6, 2, 6)
    out = machine.handle(WorkerReady("a", 8))
    assert [i for i in out if isinstance(i, SendTask)] == [
        SendTask("a", task(1, 3, 3)),
        SendTask("a", task(2, 9, 1)),
    ]
    machine.handle(answer("a", task(1, 3, 3), McStats(1)))
    out = machine.handle(answer("a", task(2, 9, 1), McStats(1)))
    assert out[-1] == JobEnded(JobState.COMPLETED)
    assert run.hits == 2 + 3 + 1 + 1
    assert run.result(NO_ACCOUNTING).hits == 7


def test_a_job_the_ledger_holds_whole_completes_without_a_worker() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=6, seed=SEED), 3)
    recovered = {0: {0: McStats(2), 1: McStats(3)}}
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1, recovered=recovered)
    out = machine.start()
    assert JobEnded(JobState.COMPLETED) in out
    assert RecordCommitted(0) in out
    assert not [i for i in out if isinstance(i, SendTask)]
    assert run.result(NO_ACCOUNTING).hits == 5


@dataclass(frozen=True)
class LooksLikeAnEvent:
    """Not an `Event`, though it names a known worker as events do."""

    worker: str


def test_an_object_that_is_not_an_event_is_refused_loudly() -> None:
    machine, _ = started()
    machine.handle(WorkerReady("a", 1))
    machine.handle(CancelRequested("user"))
    for stranger in (object(), LooksLikeAnEvent("a")):
        with pytest.raises(AssertionError, match="unreachable"):
            machine.handle(stranger)  # type: ignore[arg-type]
    # Nothing moved: a stranger is not taken for the WorkersStopped that ends a cancel.
    assert machine.state is CG
    assert plain(machine.handle(WorkersStopped())) == [status(CD), JobEnded(CD)]


def test_an_event_for_a_worker_the_job_does_not_have_fails_it() -> None:
    machine, _ = started()
    assert plain(machine.handle(WorkerReady("z", 1))) == failed(
        "the shell reported an event for unknown worker 'z'"
    )


# -- what this coordinator did itself, by kind of pass (aner_coord.job.pace) -----------------


def test_live_counts_this_coordinators_own_items_never_the_ledgers() -> None:
    run = Recorded(MonteCarlo().start(MonteCarloRequest(samples=10, seed=SEED), 3))
    recovered = {0: {0: McStats(2), 2: McStats(3)}}
    machine = JobMachine(run, {"a": 1}, chunk=3, passes=1, recovered=recovered)
    p = progress(machine.start())
    assert (p.accepted, p.recovered, dict(p.live)) == (6, 6, {})
    machine.handle(WorkerReady("a", 8))
    p = progress(machine.handle(answer("a", task(1, 3, 3), McStats(1))))
    assert (p.accepted, p.recovered, dict(p.live)) == (9, 6, {ONE_KIND: 3})


class Kinds(Recorded):
    """A run whose passes alternate two kinds, as a training's steps and validations."""

    passes = 0

    def next_pass(self) -> PassSpec | None:
        spec = super().next_pass()
        if spec is None:
            return None
        self.passes += 1
        return dataclasses.replace(spec, kind="odd" if self.passes % 2 else "even")


def test_live_counts_a_committed_pass_by_its_kind() -> None:
    fx = Fixture()
    fx.run = Kinds(fx.run.run)
    fx.machine = JobMachine(fx.run, {"a": 1, "b": 1}, chunk=FX_CHUNK, passes=STEPS + 2)
    fx.start()
    out = fx.handle(WorkerReady("a", 8)) + fx.handle(WorkerReady("b", 8))
    seen = []
    while not (out and isinstance(out[-1], JobEnded)):
        sent = sends(out)
        for s in sent:
            out = fx.answer(s.worker, s.task)
            assert fx.last is not None
            seen.append(dict(fx.last.live))
    # A training's pass counts when it commits (its chunks are not in the ledger): pass 1
    # (odd), then 2 (even), 3, 4; all of it this coordinator's own.
    assert seen[2] == {"odd": N_ROWS} and seen[5] == {"odd": N_ROWS, "even": N_ROWS}
    assert seen[-1] == {"odd": 2 * N_ROWS, "even": 2 * N_ROWS}
    assert fx.last is not None and fx.last.accepted == N_ROWS * (STEPS + 2)
