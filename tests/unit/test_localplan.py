"""How local workers run (`aner_coord/localplan.py`, docs/contracts.md, section 3): declared per
kernel, decided at admission, reported by the manifest's plan, `status` and `inventory`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from suite_env import child_env
from support import TOY_SITE

from aner_coord import parallel
from aner_coord.admission import Job, admit
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import RequestError
from aner_coord.localplan import PROCESSES
from aner_coord.requests import ComputationRequest, JobRequest, LocalBackend, LocalExecution
from aner_worker.kernels import KERNELS

SEARCH = SearchRequest(teacher=(300, 4, 2), seed=1, folds=2, hidden=(4,), epochs=1)
PI = MonteCarloRequest(samples=10**6, seed=1)


def job(computation: ComputationRequest, workers: int, backend: LocalBackend = "auto") -> Job:
    execution = LocalExecution(workers=workers, backend=backend)
    return admit(JobRequest(computation=computation, execution=execution))


def test_search_fits_on_two_local_workers_run_on_worker_processes() -> None:
    admitted = job(SEARCH, 2)
    records = admitted.workers.records
    assert records is not None
    assert [(r.identity, r.transport, r.slots) for r in records] == [
        ("local-1", "local", 1),
        ("local-2", "local", 1),
    ]
    assert admitted.describe_execution()["backend"] == "processes"
    assert admitted.plan_line == "local: 2 worker processes (search fits hold the GIL)"


@pytest.mark.parametrize(
    ("computation", "workers", "backend", "line"),
    [
        (PI, 2, "auto", "local: 2 threads (its kernel releases the GIL)"),
        (SEARCH, 1, "auto", "local: 1 thread (one worker: nothing shares its GIL)"),
        (SEARCH, 2, "threads", "local: 2 threads (asked for)"),
        (PI, 2, "processes", "local: 2 worker processes (asked for)"),
    ],
)
def test_the_other_plans(
    computation: ComputationRequest, workers: int, backend: LocalBackend, line: str
) -> None:
    admitted = job(computation, workers, backend)
    assert admitted.plan_line == line
    threads = admitted.workers.records is None
    assert threads == line.split()[2].startswith("thread")


def test_every_declared_kernel_is_one_the_worker_has() -> None:
    assert set(PROCESSES) <= set(KERNELS)


def test_a_backend_that_is_not_one_is_refused_in_one_line() -> None:
    with pytest.raises(RequestError, match=r"backend= must be one of auto, threads, processes"):
        parallel.local(workers=2, backend="gpu")  # type: ignore[arg-type]


def test_inventory_reports_each_kernels_choice() -> None:
    report = parallel.inventory()["local_execution"]
    assert report["workers"] == parallel.inventory()["auto_workers"]
    expected = "processes" if report["workers"] > 1 else "threads"
    assert report["kernels"]["search"]["backend"] == expected
    assert report["kernels"]["monte-carlo"]["backend"] == "threads"
    done = subprocess.run(
        [sys.executable, "-m", "aner_coord", "parallel", "inventory", "--json"],
        env=child_env(PYTHONPATH=TOY_SITE),  # the plugins of this process, the toy's too
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["local_execution"] == report
