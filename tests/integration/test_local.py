"""The Python API on local threads: exact hits, admission errors, failures and cancellation."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading

import pytest
from aner_coord.plan import MAX_CHUNKS, ChunkPlan, admit_plan
from aner_worker.tasks import execute as execute_task

from aner_coord import parallel
from aner_coord.backends import Backend, ThreadBackend
from aner_coord.computations import MonteCarlo, Task
from aner_coord.coordinator import Coordinator
from aner_coord.jobs import STREAM_ID, JobSpec, execute, prepare
from aner_coord.jobstate import JobState
from aner_coord.status import StatusSnapshot
from aner_worker.inventory import current
from aner_worker.philox import count_hits

SAMPLES = 10_000_000
SEED = 42
HITS = 7_856_672  # the reference count of SPEC section 1 for (10**7, 42)


def _effective() -> int:
    return current().effective_cpus


def _no_local_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("aner-local")]


def test_reference_count() -> None:
    result = parallel.monte_carlo(samples=SAMPLES, seed=SEED)
    assert result.hits() == HITS
    assert result.stream == STREAM_ID


@pytest.mark.parametrize("chunk", [1_000, 65_536, 999_983, 10**7])
@pytest.mark.parametrize("workers", [1, 2])
def test_hits_do_not_depend_on_workers_or_chunks(workers: int, chunk: int) -> None:
    if workers > _effective():
        pytest.fail(f"this test needs {workers} effective CPUs, the machine has {_effective()}")
    result = parallel.monte_carlo(
        samples=SAMPLES, seed=SEED, execution=parallel.local(workers=workers, chunk=chunk)
    )
    assert result.hits() == HITS
    n_chunks = -(-SAMPLES // chunk)
    assert result.workers() == workers
    assert [s.identity for s in result.shares] == [f"local-{i + 1}" for i in range(workers)]
    assert sum(s.items for s in result.shares) == SAMPLES
    assert sum(s.chunks for s in result.shares) == n_chunks
    assert all(s.slots == 1 for s in result.shares)
    assert result.execution == {
        "kind": "local",
        "workers": workers,
        "chunk": chunk,
        "automatic": False,
    }


def test_fewer_chunks_than_workers_still_completes() -> None:
    # Local runs admit fewer chunks than workers; the idle worker simply gets nothing.
    result = parallel.monte_carlo(samples=1_000, seed=SEED, execution=parallel.local(workers=2))
    assert result.hits() == count_hits(SEED, 0, 1_000)
    assert [s.chunks for s in result.shares] in ([1, 0], [0, 1])


def test_result_methods() -> None:
    result = parallel.monte_carlo(
        samples=SAMPLES, seed=SEED, execution=parallel.local(workers=1, chunk=10**6)
    )
    assert result.estimate() == 4 * HITS / SAMPLES == 3.1426688
    assert result.samples() == SAMPLES
    assert result.hits() == HITS
    assert result.workers() == 1
    assert result.seconds() > 0
    summary = result.summary()
    assert "10,000,000 samples" in summary
    assert "seed 42" in summary
    assert "7,856,672 hits" in summary
    assert "3.1426688000" in summary
    assert "1 worker(s)" in summary
    data = result.to_dict()
    assert data["hits"] == HITS and data["samples"] == SAMPLES and data["seed"] == SEED
    assert data["workers"] == [
        {"identity": "local-1", "slots": 1, "samples": SAMPLES, "chunks": 10}
    ]


def test_regression_api_smoke() -> None:
    result = parallel.regression(
        samples=1_000, steps=2, rate=0.5, seed=3, execution=parallel.local(workers=2, chunk=300)
    )
    assert result.steps == 2 and result.samples == 1_000
    assert len(result.theta) == 9
    assert result.final_loss < result.initial_loss
    assert sum(s.items for s in result.shares) == 1_000 * 4


# -- contexts and admission ----------------------------------------------------------------


def test_local_is_immutable() -> None:
    execution = parallel.local(workers=1, chunk=1_000)
    assert execution == parallel.LocalExecution(1, 1_000, automatic=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        execution.workers = 2  # type: ignore[misc]
    automatic = parallel.local()
    assert automatic.automatic is True
    assert automatic.workers == current().auto_workers
    assert automatic.chunk == 65_536


def test_more_workers_than_the_allocation_names_both_numbers() -> None:
    effective = _effective()
    with pytest.raises(parallel.AdmissionError) as info:
        parallel.local(workers=effective + 1)
    message = str(info.value)
    assert re.search(rf"\b{effective + 1} workers\b", message)
    assert re.search(rf"allocation of {effective}\b", message)
    # The fix is said in words that hold for the API and the CLI alike.
    assert f"use at most {effective} workers (--workers), or 0 for automatic" in message
    assert f"--workers {effective}" not in message


def test_more_than_256_local_workers() -> None:
    with pytest.raises(parallel.AdmissionError) as info:
        parallel.local(workers=257)
    message = str(info.value)
    assert "257 local workers exceed the limit of 256" in message
    assert f"use at most {min(_effective(), 256)} workers (--workers)" in message


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"chunk": 0}, "chunk must be positive, got 0"),
        ({"chunk": -5}, "chunk must be positive, got -5"),
        ({"workers": -1}, "workers must be 0 (automatic) or positive, got -1"),
        ({"workers": True}, "workers must be an integer, got True"),
        ({"chunk": True}, "chunk must be an integer, got True"),
        ({"workers": 1.0}, "workers must be an integer, got 1.0"),
    ],
)
def test_invalid_local_policy(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(parallel.RequestError) as info:
        parallel.local(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == words


def test_too_many_chunks_suggests_the_smallest_chunk() -> None:
    samples = 3_000_001
    with pytest.raises(parallel.AdmissionError) as info:
        parallel.monte_carlo(samples=samples, seed=1, execution=parallel.local(workers=1, chunk=1))
    message = str(info.value)
    assert "3,000,001 chunks; the limit is 1,000,000" in message
    assert "use --chunk" not in message  # a flag is not what an API caller changes
    match = re.search(r"use a chunk of at least (\d+) \(--chunk\)", message)
    assert match is not None
    smallest = int(match.group(1))
    assert smallest == 4
    assert ChunkPlan(samples, smallest).n_chunks <= MAX_CHUNKS
    assert ChunkPlan(samples, smallest - 1).n_chunks > MAX_CHUNKS


@pytest.mark.parametrize(
    ("samples", "seed", "error", "words"),
    [
        (10**10 + 1, 1, parallel.AdmissionError, "10,000,000,001; the limit is 10,000,000,000"),
        (0, 1, parallel.RequestError, "samples must be positive, got 0"),
        (-3, 1, parallel.RequestError, "samples must be positive, got -3"),
        (1_000, -1, parallel.RequestError, "seed must be in [0, 2**64), got -1"),
        (1_000, 2**64, parallel.RequestError, f"seed must be in [0, 2**64), got {2**64}"),
        (True, 1, parallel.RequestError, "samples must be an integer, got True"),
        (1_000, False, parallel.RequestError, "seed must be an integer, got False"),
        (1_000.0, 1, parallel.RequestError, "samples must be an integer, got 1000.0"),
    ],
)
def test_invalid_requests(samples: object, seed: object, error: type, words: str) -> None:
    with pytest.raises(error) as info:
        parallel.monte_carlo(samples=samples, seed=seed)  # type: ignore[arg-type]
    assert words in str(info.value)
    assert _no_local_threads() == []


def test_largest_seed_is_accepted() -> None:
    seed = 2**64 - 1
    result = parallel.monte_carlo(samples=100_000, seed=seed, execution=parallel.local(workers=1))
    assert result.hits() == count_hits(seed, 0, 100_000)


def test_works_inside_a_running_event_loop() -> None:
    async def notebook_cell() -> int:
        asyncio.get_running_loop()  # as in Jupyter: a loop is running in this thread
        return parallel.monte_carlo(samples=SAMPLES, seed=SEED).hits()

    assert asyncio.run(notebook_cell()) == HITS


# -- failure and cancellation --------------------------------------------------------------

FAIL_AT = 50_000


def _failing(task: Task) -> object:
    if task.start == FAIL_AT:
        raise ValueError("boom in the kernel")
    return execute_task(task)


class _FailingCoordinator(Coordinator):
    def _make_backend(self) -> Backend:
        return ThreadBackend(list(self.execution.worker_slots()), _failing)


def test_task_exception_fails_the_job_naming_the_worker() -> None:
    execution = parallel.local(workers=2, chunk=10_000)
    computation = MonteCarlo(ChunkPlan(1_000_000, 10_000), SEED)  # 100 chunks
    coordinator = _FailingCoordinator(computation, execution, kind="monte-carlo")
    report = asyncio.run(coordinator.run())
    assert report.state is JobState.FAILED
    assert report.error is not None
    assert re.fullmatch(
        r'worker "local-[12]" failed during task: task \d+ failed: ValueError: boom in the kernel',
        report.error,
    )
    assert isinstance(report.task_exception, ValueError)
    snapshot = report.snapshot
    assert snapshot.state == "FAILED"
    assert snapshot.error == report.error
    assert snapshot.chunks_done < 100
    assert snapshot.accepted < 1_000_000
    assert sum(w.items for w in snapshot.workers) == snapshot.accepted
    assert _no_local_threads() == []


def test_failure_stops_pending_work_at_the_failing_chunk() -> None:
    spec = JobSpec("monte-carlo", samples=1_000_000, seed=SEED)
    job = prepare(spec, execution=parallel.local(workers=1, chunk=10_000))
    assert job.output is None
    coordinator = _FailingCoordinator(job.computation, job.execution, kind=job.kind)
    report = asyncio.run(coordinator.run())
    assert report.state is JobState.FAILED
    assert report.error == (
        'worker "local-1" failed during task: task 6 failed: ValueError: boom in the kernel'
    )
    assert report.snapshot.chunks_done == 5
    assert report.snapshot.accepted == FAIL_AT


def test_cooperative_cancellation_joins_every_thread() -> None:
    requested = 2 * 10**9
    spec = JobSpec("monte-carlo", samples=requested, seed=SEED)
    job = prepare(spec, execution=parallel.local(workers=2, chunk=10**6))
    snapshots: list[StatusSnapshot] = []

    async def main() -> tuple[object, list[str]]:
        cancel = asyncio.Event()
        working = asyncio.Event()

        def observe(snapshot: StatusSnapshot) -> None:
            snapshots.append(snapshot)
            if snapshot.accepted > 0:
                working.set()

        task = asyncio.create_task(execute(job, observers=[observe], cancel=cancel))
        await asyncio.wait_for(working.wait(), 60)  # guards a hang only
        running = _no_local_threads()
        cancel.set()
        return await task, running

    outcome, running = asyncio.run(main())
    assert sorted(running) == ["aner-local-1", "aner-local-2"]
    report = outcome.report  # type: ignore[attr-defined]
    assert report.state is JobState.CANCELLED
    assert outcome.result is None  # type: ignore[attr-defined]
    assert report.error == "cancelled: cancel requested"
    final = report.snapshot
    assert final.state == "CANCELLED"
    assert 0 < final.accepted < requested
    assert final.accepted % 10**6 == 0
    assert [s.seq for s in snapshots] == sorted({s.seq for s in snapshots})
    assert [s.state for s in snapshots][-1] == "CANCELLED"
    assert "CANCELLING" in [s.state for s in snapshots]
    assert _no_local_threads() == []


def test_too_few_chunks_for_the_workers_suggests_a_smaller_chunk() -> None:
    with pytest.raises(parallel.AdmissionError) as info:
        admit_plan(total=10, chunk=5, what="samples", min_chunks=3)
    message = str(info.value)
    assert "make 2 chunk(s), fewer than the 3 configured workers" in message
    assert message.endswith("use a chunk of at most 3 (--chunk)")
    assert ChunkPlan(10, 3).n_chunks >= 3


def test_api_raises_job_failed_with_the_task_exception_as_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fault injection at the one seam the coordinator imports its task runner from.
    import aner_worker.tasks

    monkeypatch.setattr(aner_worker.tasks, "execute", _failing)
    with pytest.raises(parallel.JobFailed) as caught:
        parallel.monte_carlo(
            samples=1_000_000, seed=SEED, execution=parallel.local(workers=2, chunk=10_000)
        )
    assert re.search(
        r'worker "local-[12]" failed during task: .*boom in the kernel', str(caught.value)
    )
    assert isinstance(caught.value.__cause__, ValueError)
    assert _no_local_threads() == []
