"""A computation defined only in the tests (tests/toy/toy_computation.py, installed as the
plugin `aner-toy`) runs through the real job machine, local threads and a real pipe worker
process: adding a workload is one module and its declaration, with no edit to aner. Its
fault switch injects an exception at each seam of the core, and every one must end the job
FAILED with a message naming where, never a hang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import toy_computation
from support import write_cluster
from toy_computation import ToyRequest, expected_totals

from aner_coord import parallel
from aner_coord.errors import JobFailed
from aner_coord.job.processes import ProcessBackend
from aner_coord.job.threads import ThreadBackend
from aner_coord.jobdir.status import JobState, StatusSnapshot

TOY = str(Path(toy_computation.__file__).resolve().parent)  # the plugin's site folder
ITEMS = 10_007


def toy_worker(tmp_path: Path) -> Path:
    """An `aner` executable where the toy plugin is installed (a real worker process): its
    site folder on the path, as PYTHONPATH would put it (not tests/, whose protocol/ would
    shadow the real protocol package)."""
    script = tmp_path / "aner-with-toy"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {TOY!r})\n"
        "from aner_coord.cli import main\n"
        "sys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def toy_group(tmp_path: Path, workers: int = 2) -> parallel.ClusterExecution:
    exe = str(toy_worker(tmp_path))
    records = [(f"toy-{i + 1}", "local", "-", exe, 1) for i in range(workers)]
    return parallel.cluster(write_cluster(tmp_path / "cluster", records), chunk=997)


def test_toy_on_threads_gives_the_formula_totals() -> None:
    result = parallel.run(ToyRequest(items=ITEMS, seed=0), execution=parallel.local(2, chunk=101))
    assert result.totals == expected_totals(ITEMS)
    assert sum(w.items for w in result.workers) == 2 * ITEMS  # two passes, each item once


def test_toy_on_pipe_workers_gives_the_same_totals(tmp_path: Path) -> None:
    result = parallel.run(ToyRequest(items=ITEMS, seed=0), execution=toy_group(tmp_path))
    assert result.totals == expected_totals(ITEMS)
    assert [w.identity for w in result.workers] == ["toy-1", "toy-2"]
    assert all(w.chunks > 0 for w in result.workers)


def test_toy_job_directory_records_the_result(tmp_path: Path) -> None:
    out = tmp_path / "job"
    parallel.run(ToyRequest(items=500, seed=0), execution=parallel.local(1, chunk=64), output=out)
    status = (out / "status.json").read_text()
    assert '"state": "COMPLETED"' in status
    assert '"kind": "toy"' in status
    assert str(expected_totals(500)[1]) in (out / "result.json").read_text()


@pytest.mark.parametrize(
    ("fault", "where"),
    [
        ("check", "computation error while checking a result"),
        ("accept", "computation error while accepting a result"),
        ("commit", "computation error while committing pass 0"),
        ("plan", "computation error while planning the next pass"),
        ("diverge", "numerical divergence: the toy total left the finite range in pass 0"),
    ],
)
def test_a_fault_in_the_computation_fails_the_job_naming_it(fault: str, where: str) -> None:
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=300, seed=0, fault=fault), execution=parallel.local(2, 50))
    assert where in str(failure.value)


def test_a_kernel_fault_on_a_thread_names_the_worker() -> None:
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=300, seed=0, fault="kernel"), execution=parallel.local(1))
    assert 'worker "local-1" failed during task: ArithmeticError: injected kernel fault' in str(
        failure.value
    )
    assert isinstance(failure.value.__cause__, ArithmeticError)


def test_a_kernel_fault_on_a_pipe_worker_names_the_worker(tmp_path: Path) -> None:
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=3000, seed=0, fault="kernel"), execution=toy_group(tmp_path))
    message = str(failure.value)
    assert "failed during task: ArithmeticError: injected kernel fault" in message
    assert 'worker "toy-' in message


def test_a_bug_in_a_worker_thread_fails_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: ThreadBackend, *args: object) -> None:
        raise KeyError("injected thread fault")

    monkeypatch.setattr(ThreadBackend, "_serve", broken)
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=300, seed=0), execution=parallel.local(1))
    assert 'worker "local-1" failed during run: internal error in the local worker' in str(
        failure.value
    )


def test_a_bug_in_the_process_backend_fails_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: ProcessBackend, *args: object) -> None:
        raise ZeroDivisionError("injected backend fault")

    monkeypatch.setattr(ProcessBackend, "_receive", broken)
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=3000, seed=0), execution=toy_group(tmp_path, workers=1))
    assert 'worker "toy-1" failed during run: internal error in the coordinator' in str(
        failure.value
    )
    assert "injected backend fault" in str(failure.value)


def test_a_transport_that_raises_fails_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aner_coord.job.link as link

    real = link.open_transport

    async def flaky(record: object, argv: object, **options: object) -> object:
        transport = await real(record, argv, **options)  # type: ignore[arg-type]

        async def read(n: int = 65536) -> bytes:
            raise RuntimeError("injected transport fault")

        transport.read = read  # type: ignore[method-assign]
        return transport

    monkeypatch.setattr(link, "open_transport", flaky)
    with pytest.raises(JobFailed) as failure:
        parallel.run(ToyRequest(items=3000, seed=0), execution=toy_group(tmp_path, workers=1))
    assert 'worker "toy-1" failed during handshake: internal error' in str(failure.value)
    assert "injected transport fault" in str(failure.value)


def test_an_observer_that_fails_fails_the_job_naming_it() -> None:
    import asyncio

    from aner_coord.admission import admit
    from aner_coord.job.execute import execute
    from aner_coord.requests import JobRequest, LocalExecution
    from aner_coord.runner import run_sync

    calls = []

    class Disk:
        where = "the job directory"

        def __call__(self, snapshot: StatusSnapshot) -> None:
            calls.append(snapshot)
            if snapshot.state is JobState.RUNNING:  # mid-job: the first snapshot of its work
                raise OSError(28, "No space left on device")

    job = admit(
        JobRequest(computation=ToyRequest(items=5000, seed=0), execution=LocalExecution(1, 10))
    )
    report = run_sync(execute(job, observers=[Disk()], cancel=asyncio.Event()))
    assert report.state is JobState.FAILED
    assert report.error == "the job directory failed: No space left on device"


def test_an_instruction_the_coordinator_does_not_know_fails_the_job_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The coordinator's dispatch is exhaustive (mypy checks it); anything else that reaches
    # it at run time fails the job loudly instead of being dropped.
    from aner_coord.admission import admit
    from aner_coord.job.execute import execute
    from aner_coord.job.machine import JobMachine
    from aner_coord.requests import JobRequest, LocalExecution
    from aner_coord.runner import run_sync

    class Unheard:
        pass

    real_start = JobMachine.start

    def start(self: JobMachine) -> list[object]:
        return [*real_start(self), Unheard()]

    monkeypatch.setattr(JobMachine, "start", start)
    job = admit(
        JobRequest(computation=ToyRequest(items=5000, seed=0), execution=LocalExecution(1, 10))
    )
    report = run_sync(execute(job))
    assert report.state is JobState.FAILED
    assert report.error is not None
    assert report.error.startswith("the coordinator failed: Unheard: AssertionError(")
