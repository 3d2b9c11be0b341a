"""The Python API: `from aner_coord import parallel`.

    from aner_coord import parallel
    result = parallel.monte_carlo(samples=10**8, seed=42, execution=parallel.local(workers=2))
    print(result.hits, result.estimate)
    print(result.summary())

Calls are synchronous for the caller (they also work inside a running event loop, as in
Jupyter); an interrupt (Ctrl-C, a kernel interrupt) cancels the job gracefully and raises
`JobCancelled` chained from it (`__cause__` is the KeyboardInterrupt): within a second no
coordinator thread, worker thread or worker process of the call is still computing. Async
callers await `run_async`, `monte_carlo_async`, `regression_async` or `dense_fit_async`,
which never block their loop; cancelling the awaiting task cancels the job.

Sessions start a group's workers once and keep them across calls (`aner_coord.session`):

    with parallel.session(parallel.cluster("cluster.txt")) as s:
        a = s.monte_carlo(samples=10**8, seed=1)          # starts the workers
        b = s.monte_carlo(samples=10**8, seed=2)          # the same processes, warm
        c = await s.monte_carlo_async(samples=10**8, seed=3)  # from async code

Each call is its own job (accounting, optional `output=` directory, the same result as a
one-off call); the workers end on leaving `with`, on garbage collection and at interpreter
exit; a worker lost between calls is started again and reported in the next call's
`result.losses` (or, with `restart=False`, counted as that call's lost worker).

Errors: `RequestError`/`AdmissionError` for an invalid request (nothing ran; the message
names the argument to change, as `workers=`), `JobFailed` for a failed job (its message says
where: the worker and phase, a divergence, the job directory), `JobCancelled` if it was
cancelled.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aner_coord.admission import Job, admit, cluster, local
from aner_coord.calls import dense_request, outcome
from aner_coord.computations.montecarlo import MonteCarloRequest, MonteCarloResult
from aner_coord.computations.regression import RegressionRequest, RegressionResult
from aner_coord.errors import AdmissionError, AnerError, JobCancelled, JobFailed, RequestError
from aner_coord.job.coordinator import JobReport
from aner_coord.job.execute import execute
from aner_coord.jobdir.status import WorkerAccount
from aner_coord.requests import (
    ClusterExecution,
    ComputationRequest,
    Execution,
    JobRequest,
    LocalExecution,
)
from aner_coord.runner import run_interruptible
from aner_coord.session import Session, session

if TYPE_CHECKING:
    from aner_coord.computations.dense.result import DenseFit, DenseResult

DENSE_CHUNK = 256  # rows per task of a Dense job unless the execution says otherwise

__all__ = [
    "AdmissionError",
    "AnerError",
    "ClusterExecution",
    "DenseFit",
    "DenseResult",
    "JobCancelled",
    "JobFailed",
    "LocalExecution",
    "MonteCarloResult",
    "RegressionResult",
    "RequestError",
    "Session",
    "WorkerAccount",
    "cluster",
    "dense_fit",
    "dense_fit_async",
    "inventory",
    "local",
    "monte_carlo",
    "monte_carlo_async",
    "regression",
    "regression_async",
    "run",
    "run_async",
    "session",
]


def inventory() -> dict[str, Any]:
    """The local CPU allocation as SPEC section 4 describes it (JSON-ready)."""
    from aner_worker.inventory import current

    return current().to_dict()


def run(
    computation: ComputationRequest,
    *,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> Any:
    """Run any registered computation's request and return its result. `output` makes a job
    directory (SPEC section 7), `audit` recomputes that fraction of the chunks here, and
    `retries` lost workers are survived (SPEC section 11)."""
    job = admit(_request(computation, execution, output, audit, retries))
    report, interrupt = run_interruptible(lambda cancel: execute(job, cancel=cancel))
    return outcome(report, interrupt)


def _request(
    computation: ComputationRequest,
    execution: Execution | None,
    output: str | os.PathLike[str] | None,
    audit: float,
    retries: int,
) -> JobRequest:
    return JobRequest(
        computation=computation,
        execution=execution if execution is not None else LocalExecution(),
        output=None if output is None else os.fspath(output),
        audit=audit,
        retries=retries,
    )


async def run_async(
    computation: ComputationRequest,
    *,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> Any:
    """`run` for async callers: runs on the caller's event loop and never blocks it (the
    kernels run in threads or worker processes). Cancelling the awaiting task cancels the
    job gracefully, then re-raises the cancellation."""
    job = admit(_request(computation, execution, output, audit, retries))
    return outcome(await _await_job(job))


async def _await_job(job: Job) -> JobReport:
    """Run `job` on the caller's loop; cancelling the awaiting task cancels the job
    gracefully, waits for it to stop, then re-raises."""
    cancel = asyncio.Event()
    task = asyncio.ensure_future(execute(job, cancel=cancel))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        cancel.set()
        await task
        raise


async def monte_carlo_async(
    *,
    samples: int,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> MonteCarloResult:
    """`monte_carlo` for async callers (see `run_async`)."""
    request = MonteCarloRequest(samples=samples, seed=seed)
    result: MonteCarloResult = await run_async(
        request, execution=execution, output=output, audit=audit, retries=retries
    )
    return result


async def regression_async(
    *,
    samples: int,
    steps: int,
    rate: float,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> RegressionResult:
    """`regression` for async callers (see `run_async`)."""
    request = RegressionRequest(samples=samples, steps=steps, rate=rate, seed=seed)
    result: RegressionResult = await run_async(
        request, execution=execution, output=output, audit=audit, retries=retries
    )
    return result


def monte_carlo(
    *,
    samples: int,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> MonteCarloResult:
    """Estimate pi from `samples` Philox samples of `seed`; the hits depend on nothing else."""
    request = MonteCarloRequest(samples=samples, seed=seed)
    result: MonteCarloResult = run(
        request, execution=execution, output=output, audit=audit, retries=retries
    )
    return result


def regression(
    *,
    samples: int,
    steps: int,
    rate: float,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    audit: float = 0.0,
    retries: int = 0,
) -> RegressionResult:
    """Fit the logistic-regression fixture of SPEC section 2 with full-batch steps."""
    request = RegressionRequest(samples=samples, steps=steps, rate=rate, seed=seed)
    result: RegressionResult = run(
        request, execution=execution, output=output, audit=audit, retries=retries
    )
    return result


def dense_fit(
    *,
    data: str | os.PathLike[str] | None = None,
    label: str | None = None,
    teacher: tuple[int, int, int] | None = None,
    hidden: Sequence[int] = (64, 64),
    batch: int = 256,
    epochs: int = 100,
    optimizer: str = "adam",
    lr: float = 1e-3,
    patience: int = 5,
    target_accuracy: float | None = None,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    retries: int = 0,
) -> DenseFit:
    """Train a Dense classifier (SPEC section 9) on `data` (a CSV or NPZ file, or "digits")
    or on the procedural `teacher` set (rows, features, classes).

    The result carries the per-epoch history, test metrics, `best_epoch`,
    `time_to_target_s`, per-worker accounting and `predict(X)`. With `output`, the job
    directory also holds `model.npz`. The default execution is local threads with chunks of
    256 rows (the parameters depend on the chunk, never on the workers).
    """
    from aner_coord.computations.dense.result import DenseFit

    job = _dense_job(
        seed, data, label, teacher, hidden, batch, epochs, optimizer, lr, patience,
        target_accuracy, execution, output, retries,
    )  # fmt: skip
    report, interrupt = run_interruptible(lambda cancel: execute(job, cancel=cancel))
    return DenseFit(outcome(report, interrupt), report.run.model)


async def dense_fit_async(
    *,
    data: str | os.PathLike[str] | None = None,
    label: str | None = None,
    teacher: tuple[int, int, int] | None = None,
    hidden: Sequence[int] = (64, 64),
    batch: int = 256,
    epochs: int = 100,
    optimizer: str = "adam",
    lr: float = 1e-3,
    patience: int = 5,
    target_accuracy: float | None = None,
    seed: int,
    execution: Execution | None = None,
    output: str | os.PathLike[str] | None = None,
    retries: int = 0,
) -> DenseFit:
    """`dense_fit` for async callers (see `run_async`)."""
    from aner_coord.computations.dense.result import DenseFit

    job = _dense_job(
        seed, data, label, teacher, hidden, batch, epochs, optimizer, lr, patience,
        target_accuracy, execution, output, retries,
    )  # fmt: skip
    report = await _await_job(job)
    return DenseFit(outcome(report), report.run.model)


def _dense_job(
    seed: int,
    data: str | os.PathLike[str] | None,
    label: str | None,
    teacher: tuple[int, int, int] | None,
    hidden: Sequence[int],
    batch: int,
    epochs: int,
    optimizer: str,
    lr: float,
    patience: int,
    target_accuracy: float | None,
    execution: Execution | None,
    output: str | os.PathLike[str] | None,
    retries: int,
) -> Job:
    request = dense_request(
        seed, data, label, teacher, hidden, batch, epochs, optimizer, lr, patience,
        target_accuracy,
    )  # fmt: skip
    return admit(
        JobRequest(
            computation=request,
            execution=execution if execution is not None else LocalExecution(chunk=DENSE_CHUNK),
            output=None if output is None else os.fspath(output),
            retries=retries,
        )
    )
