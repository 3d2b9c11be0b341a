"""Retries and recovery in the pure job machine: events in, instructions out, no network."""

from __future__ import annotations

import math

from aner_coord.computations.montecarlo import MonteCarlo, MonteCarloRequest
from aner_coord.job.events import ResultReceived, WorkerLost, WorkerReady
from aner_coord.job.instructions import (
    BeginPass,
    DropWorker,
    JobEnded,
    RecordAccepted,
    RecordCommitted,
    RecordLoss,
    SendTask,
    WriteStatus,
)
from aner_coord.job.machine import JobMachine
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.montecarlo import McStats

CHUNK = 1000


def machine(samples: int, workers: int, **kwargs: object) -> JobMachine:
    run = MonteCarlo().start(MonteCarloRequest(samples=samples, seed=1), CHUNK)
    names = {f"w{i + 1}": 1 for i in range(workers)}
    return JobMachine(run, names, chunk=CHUNK, passes=1, **kwargs)  # type: ignore[arg-type]


def plausible(count: int) -> McStats:
    return McStats(round(count * math.pi / 4))


def sends(instructions: list[object]) -> list[tuple[str, int]]:
    return [(i.worker, i.task.start // CHUNK) for i in instructions if isinstance(i, SendTask)]


def answer(m: JobMachine, instruction: SendTask) -> list[object]:
    task = instruction.task
    return m.handle(ResultReceived(instruction.worker, task.task_id, plausible(task.count)))


def test_a_lost_workers_chunks_go_to_the_front_and_its_late_results_count_for_nothing() -> None:
    m = machine(6000, 2, retries=1)
    m.start()
    first = m.handle(WorkerReady("w1", window=2))
    second = m.handle(WorkerReady("w2", window=2))
    assert sends(first) + sends(second) == [("w1", 0), ("w1", 1), ("w2", 2), ("w2", 3)]
    lost_tasks = [i for i in first if isinstance(i, SendTask)]
    out = m.handle(WorkerLost("w1", "run", "killed", at=12.5))
    assert isinstance(out[0], RecordLoss) and out[0].loss.identity == "w1"
    assert out[0].loss.at == 12.5 and out[0].loss.during == "sampling"
    assert out[1] == DropWorker("w1", "lost during run: killed")
    assert isinstance(out[2], WriteStatus) and out[2].urgent
    assert out[2].progress.losses[0].detail == "killed"
    # w2's window is full: nothing is sent until it answers, then chunks 0 and 1 come first.
    assert sends(out) == []
    w2_tasks = [i for i in second if isinstance(i, SendTask)]
    after = answer(m, w2_tasks[0])
    assert isinstance(after[0], RecordAccepted) and after[0].chunk == 2
    assert sends(after) == [("w2", 0)]
    # A late result from the lost worker is ignored: not counted, not a failure.
    assert answer(m, lost_tasks[0]) == []
    pending = [w2_tasks[1], *[i for i in after if isinstance(i, SendTask)]]
    accepted: list[int] = [2]
    while pending:
        instruction = pending.pop(0)
        out = answer(m, instruction)
        accepted += [i.chunk for i in out if isinstance(i, RecordAccepted)]
        pending += [i for i in out if isinstance(i, SendTask)]
    assert sorted(accepted) == list(range(6))  # each chunk exactly once
    assert m.state is JobState.COMPLETED
    assert isinstance(out[-1], JobEnded)


def test_without_retries_a_lost_worker_fails_the_job() -> None:
    m = machine(6000, 2)
    m.start()
    m.handle(WorkerReady("w1", window=2))
    out = m.handle(WorkerLost("w1", "run", "killed"))
    assert m.state is JobState.FAILED
    assert m.error == 'worker "w1" failed during run: killed'
    assert out[-1] == JobEnded(JobState.FAILED)


def test_retries_end_when_no_worker_is_left() -> None:
    m = machine(6000, 2, retries=5)
    m.start()
    m.handle(WorkerReady("w1", window=2))
    m.handle(WorkerReady("w2", window=2))
    m.handle(WorkerLost("w1", "run", "killed"))
    assert m.state is JobState.RUNNING
    m.handle(WorkerLost("w2", "connect", "unreachable"))
    assert m.state is JobState.FAILED
    assert m.error == 'worker "w2" failed during connect: unreachable'


def test_losses_beyond_the_retries_fail_the_job() -> None:
    m = machine(6000, 3, retries=1)
    m.start()
    for name in ("w1", "w2", "w3"):
        m.handle(WorkerReady(name, window=1))
    m.handle(WorkerLost("w1", "run", "killed"))
    m.handle(WorkerLost("w2", "run", "killed"))
    assert m.state is JobState.FAILED


def test_recovered_chunks_are_replayed_and_only_the_rest_dispatched() -> None:
    m = machine(5500, 1, recovered={0: {0: plausible(1000), 3: plausible(1000)}})
    start = m.start()
    assert isinstance(start[0], BeginPass)
    status = start[-1]
    assert isinstance(status, WriteStatus) and status.progress.recovered == 2000
    out = m.handle(WorkerReady("w1", window=10))
    assert sends(out) == [("w1", 1), ("w1", 2), ("w1", 4), ("w1", 5)]
    tasks = [i for i in out if isinstance(i, SendTask)]
    for task in tasks:
        out = answer(m, task)
    assert m.state is JobState.COMPLETED
    assert any(isinstance(i, RecordCommitted) for i in out)


def test_a_pass_the_ledger_holds_whole_is_committed_at_start() -> None:
    chunks = {c: plausible(1000) for c in range(3)}
    m = machine(3000, 1, recovered={0: chunks})
    out = m.start()
    assert m.state is JobState.COMPLETED
    assert RecordCommitted(0) in out
    assert isinstance(out[-1], JobEnded)
    [final] = [i for i in out if isinstance(i, WriteStatus)]
    assert final.progress.state is JobState.COMPLETED and final.progress.accepted == 3000


def test_an_event_for_an_unknown_worker_fails_the_job_instead_of_raising() -> None:
    m = machine(3000, 1)
    m.start()
    out = m.handle(WorkerReady("nobody", window=1))
    assert m.state is JobState.FAILED
    assert m.error == "the shell reported an event for unknown worker 'nobody'"
    assert out[-1] == JobEnded(JobState.FAILED)
