"""The Python API on local threads: exact hits, admission errors, failures and cancellation."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import msgspec
import pytest
from support import HANG_S

from aner_coord import parallel
from aner_coord.admission import Job, admit
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.montecarlo import STREAM_ID, MonteCarloRequest
from aner_coord.job import threads
from aner_coord.job.backend import Backend
from aner_coord.job.coordinator import Coordinator
from aner_coord.job.execute import execute
from aner_coord.job.threads import LOCAL_BATCH_S, LOCAL_MAX_BATCH, ThreadBackend, local_batch
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_coord.limits import MAX_CHUNKS
from aner_coord.requests import JobRequest, LocalExecution
from aner_worker.host import host_identity
from aner_worker.inventory import current
from aner_worker.kernels.dense.kernel import DenseKernel
from aner_worker.kernels.dense.params import DenseParams, DenseStats
from aner_worker.kernels.montecarlo import McParams, McStats, MonteCarloKernel
from aner_worker.kernels.philox import count_hits

SAMPLES = 10_000_000
SEED = 42
HITS = 7_856_672  # the reference count of docs/contracts.md, section 1 for (10**7, 42)


def _effective() -> int:
    return current().effective_cpus


def _no_local_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("aner-local")]


def test_reference_count() -> None:
    result = parallel.monte_carlo(samples=SAMPLES, seed=SEED)
    assert result.hits == HITS
    assert result.stream == STREAM_ID


# Why the local workers are threads (docs/contracts.md, section 3), by their number.
WHY = {1: "one worker: nothing shares its GIL", 2: "its kernel releases the GIL"}


@pytest.mark.parametrize("chunk", [1_000, 65_536, 999_983, 10**7])
@pytest.mark.parametrize("workers", [1, 2])
def test_hits_do_not_depend_on_workers_or_chunks(workers: int, chunk: int) -> None:
    if workers > _effective():
        pytest.fail(f"this test needs {workers} effective CPUs, the machine has {_effective()}")
    result = parallel.monte_carlo(
        samples=SAMPLES, seed=SEED, execution=parallel.local(workers=workers, chunk=chunk)
    )
    assert result.hits == HITS
    n_chunks = -(-SAMPLES // chunk)
    assert len(result.workers) == workers
    assert [w.identity for w in result.workers] == [f"local-{i + 1}" for i in range(workers)]
    assert sum(w.items for w in result.workers) == SAMPLES
    assert sum(w.chunks for w in result.workers) == n_chunks
    assert all(w.slots == 1 for w in result.workers)
    assert all(w.items_by_pass == [w.items] for w in result.workers)
    assert result.execution == {
        "kind": "local",
        "workers": workers,
        "chunk": chunk,
        "automatic": False,
        "backend": "threads",
        "why": WHY[workers],
    }


def test_fewer_chunks_than_workers_still_completes() -> None:
    # Local runs admit fewer chunks than workers; the idle worker simply gets nothing.
    result = parallel.monte_carlo(samples=1_000, seed=SEED, execution=parallel.local(workers=2))
    assert result.hits == count_hits(SEED, 0, 1_000)
    assert [w.chunks for w in result.workers] in ([1, 0], [0, 1])


def test_result_attributes() -> None:
    result = parallel.monte_carlo(
        samples=SAMPLES, seed=SEED, execution=parallel.local(workers=1, chunk=10**6)
    )
    assert result.estimate == 4 * HITS / SAMPLES == 3.1426688
    assert result.samples == SAMPLES
    assert result.hits == HITS
    assert result.seed == SEED
    assert len(result.workers) == 1
    assert result.seconds > 0
    summary = result.summary()
    assert "10,000,000 samples" in summary
    assert "seed 42" in summary
    assert "7,856,672 hits" in summary
    assert "3.1426688000" in summary
    assert "1 worker(s)" in summary
    data = result.to_dict()
    assert data["computation"] == "monte-carlo"
    assert data["schema"] == "aner-result/3"
    assert data["hits"] == HITS and data["samples"] == SAMPLES and data["seed"] == SEED
    (worker,) = data["workers"]
    costs = {k: worker.pop(k) for k in ("compute_s", "wait_s", "machine", "host")}
    assert worker == {
        "identity": "local-1",
        "slots": 1,
        "items": SAMPLES,
        "chunks": 10,
        "items_by_pass": [SAMPLES],
    }
    # Measured costs: threads compute and wait; they have no link, so no transfer_s at all.
    assert costs["compute_s"] > 0 and costs["wait_s"] >= 0
    assert costs["machine"]["logical_cpus"].isdigit()
    assert costs["host"] == host_identity().value  # threads report this host (issue 28)
    assert "samples_" not in repr(result)
    assert isinstance(result, msgspec.Struct)
    with pytest.raises(AttributeError):
        result.hits = 0  # type: ignore[misc]


def test_regression_api_smoke() -> None:
    result = parallel.regression(
        samples=1_000, steps=2, rate=0.5, seed=3, execution=parallel.local(workers=2, chunk=300)
    )
    assert result.steps == 2 and result.samples == 1_000
    assert result.committed_steps == 2
    assert len(result.theta) == 9
    assert result.final_loss < result.initial_loss
    assert sum(w.items for w in result.workers) == 1_000 * 4
    assert [sum(w.items_by_pass[i] for w in result.workers) for i in range(4)] == [1_000] * 4


def test_run_takes_any_computation_request() -> None:
    result = parallel.run(
        MonteCarloRequest(samples=SAMPLES, seed=SEED), execution=parallel.local(1, chunk=10**6)
    )
    assert isinstance(result, parallel.MonteCarloResult)
    assert result.hits == HITS


# -- contexts and admission ----------------------------------------------------------------


def test_local_is_immutable() -> None:
    execution = parallel.local(workers=1, chunk=1_000)
    assert execution == LocalExecution(workers=1, chunk=1_000)
    with pytest.raises(AttributeError):
        execution.workers = 2  # type: ignore[misc]
    automatic = parallel.local()
    assert automatic.workers == 0  # the automatic policy, resolved at admission
    assert automatic.chunk is None  # each computation's own default, resolved at admission
    job = admit(JobRequest(computation=MonteCarloRequest(samples=10, seed=1)))
    assert job.chunk == 65_536  # Monte Carlo's default (docs/contracts.md, section 3)
    assert job.workers.automatic is True
    assert len(job.workers.slots) == current().auto_workers


def test_more_workers_than_the_allocation_names_both_numbers() -> None:
    effective = _effective()
    with pytest.raises(parallel.AdmissionError) as info:
        parallel.local(workers=effective + 1)
    message = str(info.value)
    assert re.search(rf"\b{effective + 1} workers\b", message)
    assert re.search(rf"allocation of {effective}\b", message)
    # An API caller is told the argument to change, not a flag.
    assert f"use at most {effective} workers (workers=), or 0 for automatic" in message
    assert "--workers" not in message
    assert "--workers" in info.value.render(lambda name: f"--{name}")


def test_more_than_256_local_workers() -> None:
    with pytest.raises(parallel.AdmissionError) as info:
        parallel.local(workers=257)
    message = str(info.value)
    assert "257 local workers exceed the limit of 256" in message
    assert f"use at most {min(_effective(), 256)} workers (workers=)" in message


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"chunk": 0}, "chunk= must be positive, got 0"),
        ({"chunk": -5}, "chunk= must be positive, got -5"),
        ({"workers": -1}, "workers= must be 0 (automatic) or positive, got -1"),
        ({"workers": True}, "workers= must be an integer, got True"),
        ({"chunk": True}, "chunk= must be an integer, got True"),
        ({"workers": 1.0}, "workers= must be an integer, got 1.0"),
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
    assert "--chunk" not in message  # a flag is not what an API caller changes
    match = re.search(r"use a chunk of at least (\d+) \(chunk=\)", message)
    assert match is not None
    smallest = int(match.group(1))
    assert smallest == 4
    assert -(-samples // smallest) <= MAX_CHUNKS
    assert -(-samples // (smallest - 1)) > MAX_CHUNKS


@pytest.mark.parametrize(
    ("samples", "seed", "error", "words"),
    [
        (
            10**10 + 1,
            1,
            parallel.AdmissionError,
            "10,000,000,001 samples; the limit is 10,000,000,000",
        ),
        (0, 1, parallel.RequestError, "samples= must be positive, got 0"),
        (-3, 1, parallel.RequestError, "samples= must be positive, got -3"),
        (1_000, -1, parallel.RequestError, "seed= must be in [0, 2**64), got -1"),
        (1_000, 2**64, parallel.RequestError, f"seed= must be in [0, 2**64), got {2**64}"),
        (True, 1, parallel.RequestError, "samples= must be an integer, got True"),
        (1_000, False, parallel.RequestError, "seed= must be an integer, got False"),
        (1_000.0, 1, parallel.RequestError, "samples= must be an integer, got 1000.0"),
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
    assert result.hits == count_hits(seed, 0, 100_000)


def test_works_inside_a_running_event_loop() -> None:
    async def notebook_cell() -> int:
        asyncio.get_running_loop()  # as in Jupyter: a loop is running in this thread
        return parallel.monte_carlo(samples=SAMPLES, seed=SEED).hits

    assert asyncio.run(notebook_cell()) == HITS


# -- failure and cancellation --------------------------------------------------------------

FAIL_AT = 50_000


class FailingKernel(MonteCarloKernel):
    """The real kernel, except that the chunk starting at FAIL_AT raises."""

    def run(self, params: McParams, start: int, count: int, should_stop: Any) -> McStats:
        if start == FAIL_AT:
            raise ValueError("boom in the kernel")
        return super().run(params, start, count, should_stop)


class FailingCoordinator(Coordinator):
    def _make_backend(self) -> Backend:
        return ThreadBackend(list(self.job.workers.slots), FailingKernel())


def local_job(samples: int, workers: int, chunk: int) -> Job:
    return admit(
        JobRequest(
            computation=MonteCarloRequest(samples=samples, seed=SEED),
            execution=LocalExecution(workers=workers, chunk=chunk),
        )
    )


def test_task_exception_fails_the_job_naming_the_worker() -> None:
    job = local_job(1_000_000, workers=2, chunk=10_000)  # 100 chunks
    report = asyncio.run(FailingCoordinator(job).run())
    assert report.state is JobState.FAILED
    assert report.error is not None
    assert re.fullmatch(
        r'worker "local-[12]" failed during task: ValueError: boom in the kernel', report.error
    )
    assert isinstance(report.task_exception, ValueError)
    assert report.result is None
    snapshot = report.snapshot
    assert snapshot.state is JobState.FAILED
    assert snapshot.error == report.error
    assert snapshot.chunks_done < 100
    assert snapshot.accepted < 1_000_000
    assert sum(w.items for w in snapshot.workers) == snapshot.accepted
    assert _no_local_threads() == []


def test_failure_stops_pending_work_at_the_failing_chunk() -> None:
    job = local_job(1_000_000, workers=1, chunk=10_000)
    assert job.output is None
    report = asyncio.run(FailingCoordinator(job).run())
    assert report.state is JobState.FAILED
    assert report.error == 'worker "local-1" failed during task: ValueError: boom in the kernel'
    assert report.snapshot.chunks_done == 5
    assert report.snapshot.accepted == FAIL_AT


@pytest.mark.parametrize("chunk", [10**6, 65_536])  # batches of one, and of several
def test_cooperative_cancellation_joins_every_thread(chunk: int) -> None:
    requested = 2 * 10**9
    job = local_job(requested, workers=2, chunk=chunk)
    snapshots: list[StatusSnapshot] = []

    async def main() -> tuple[Any, list[str]]:
        cancel = asyncio.Event()
        working = asyncio.Event()

        def observe(snapshot: StatusSnapshot) -> None:
            snapshots.append(snapshot)
            if snapshot.accepted > 0:
                working.set()

        task = asyncio.create_task(execute(job, observers=[observe], cancel=cancel))
        await asyncio.wait_for(working.wait(), HANG_S)  # guards a hang only
        running = _no_local_threads()
        cancel.set()
        return await task, running

    report, running = asyncio.run(main())
    assert sorted(running) == ["aner-local-1", "aner-local-2"]
    assert report.state is JobState.CANCELLED
    assert report.result is None
    assert report.error == "cancelled: cancel requested"
    final = report.snapshot
    assert final.state is JobState.CANCELLED
    assert 0 < final.accepted < requested
    assert final.accepted % chunk == 0
    assert sum(w.items for w in final.workers) == final.accepted
    assert [s.seq for s in snapshots] == sorted({s.seq for s in snapshots})
    assert snapshots[-1].state is JobState.CANCELLED
    assert JobState.CANCELLING in [s.state for s in snapshots]
    assert _no_local_threads() == []


def test_the_same_job_executed_twice_gives_the_same_hits() -> None:
    job = local_job(1_000_000, workers=2, chunk=100_000)
    first = asyncio.run(execute(job))
    second = asyncio.run(execute(job))
    assert first.result.hits == second.result.hits == count_hits(SEED, 0, 1_000_000)


def test_api_raises_job_failed_with_the_task_exception_as_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fault injection at the seam the kernel imports its counter from, at each call.
    import aner_worker.kernels.philox

    real = aner_worker.kernels.philox.count_hits

    def failing(seed: int, start: int, count: int, should_stop: Any = None) -> int:
        if start == FAIL_AT:
            raise ValueError("boom in the kernel")
        return real(seed, start, count, should_stop)

    monkeypatch.setattr(aner_worker.kernels.philox, "count_hits", failing)
    with pytest.raises(parallel.JobFailed) as caught:
        parallel.monte_carlo(
            samples=1_000_000, seed=SEED, execution=parallel.local(workers=2, chunk=10_000)
        )
    assert re.search(
        r'worker "local-[12]" failed during task: .*boom in the kernel', str(caught.value)
    )
    assert isinstance(caught.value.__cause__, ValueError)
    assert _no_local_threads() == []


def test_a_local_batch_holds_a_few_milliseconds_of_work() -> None:
    assert local_batch(None) == 1  # unknown task time: every result at once, as a pipe does
    assert local_batch(1.0) == 1  # long tasks: balanced to the last one
    assert local_batch(LOCAL_BATCH_S / 4) == 4
    assert local_batch(1e-9) == LOCAL_MAX_BATCH


def test_local_threads_hand_over_every_event_in_order() -> None:
    """Events posted from several threads, in batches, all reach the loop, each thread's in
    the order it posted them."""
    from aner_coord.job.events import Event, ResultReceived
    from aner_coord.job.threads import Handover

    received: list[Event] = []

    async def main() -> None:
        handover = Handover(asyncio.get_running_loop(), received.append)

        def post(worker: str) -> None:
            for first in range(0, 1000, 7):
                handover.post([ResultReceived(worker, i, None) for i in range(first, first + 7)])

        threads = [threading.Thread(target=post, args=(w,)) for w in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            await asyncio.to_thread(thread.join)
        await asyncio.sleep(0)  # the last wake-up

    asyncio.run(main())
    for worker in ("a", "b"):
        ids = [e.task_id for e in received if isinstance(e, ResultReceived) and e.worker == worker]
        assert ids == list(range(1001))


# -- one slot's short lockstep tasks on the loop's thread ------------------------------------


class WhereKernel(DenseKernel):
    """The real Dense kernel, noting the thread that computed each task."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def run(self, params: DenseParams, start: int, count: int, should_stop: Any) -> DenseStats:
        self.threads.append(threading.current_thread().name)
        return super().run(params, start, count, should_stop)


def train_where(inline_max_s: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """A digits training on one local slot (steps of one chunk, lockstep): the model it
    keeps, and the threads that computed its tasks."""
    monkeypatch.setattr(threads, "INLINE_MAX_S", inline_max_s)
    kernel = WhereKernel()

    class Where(Coordinator):
        def _make_backend(self) -> Backend:
            return ThreadBackend(list(self.job.workers.slots), kernel)

    job = admit(
        JobRequest(
            computation=DenseRequest(
                data="digits", seed=4, hidden=(16,), batch=256, epochs=2, patience=2
            ),
            execution=LocalExecution(workers=1, chunk=256),
        )
    )
    report = asyncio.run(Where(job).run())
    assert report.state is JobState.COMPLETED, report.error
    return report.run.training.best_flat, kernel.threads


def test_one_slots_short_lockstep_tasks_are_computed_on_the_loops_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the first round (the normalisation's chunks, on the slot's thread, which loads
    the kernel and measures a task), every round short enough (here: any, whatever this
    machine's speed) is computed on the event loop's thread, sparing two hand-overs per step,
    with the same bits as on the slot's thread; a round longer than INLINE_MAX_S (here: any)
    never holds the loop."""
    inline, where = train_where(3600.0, monkeypatch)
    first = where.count("aner-local-1")
    assert first >= 1 and where[:first] == ["aner-local-1"] * first, " ".join(where)
    assert where[first:] == [threading.current_thread().name] * (len(where) - first)
    assert len(where) - first >= 2 * 4  # the steps of two epochs at least
    threaded, where_off = train_where(0.0, monkeypatch)
    assert where_off == ["aner-local-1"] * len(where)
    assert inline.tobytes() == threaded.tobytes()
