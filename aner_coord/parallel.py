"""The Python API: `from aner_coord import parallel`.

    from aner_coord import parallel
    result = parallel.monte_carlo(samples=10**8, seed=42, execution=parallel.local(workers=2))
    print(result.hits, result.estimate)
    print(result.summary())

Calls are synchronous for the caller (they also work inside a running event loop, as in
Jupyter). Errors: `RequestError`/`AdmissionError` for an invalid request (nothing ran; the
message names the argument to change, as `workers=`), `JobFailed` for a failed job (its
message says where: the worker and phase, a divergence, the job directory), `JobCancelled`
if it was cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aner_coord.admission import admit, cluster, local
from aner_coord.errors import AdmissionError, AnerError, JobCancelled, JobFailed, RequestError
from aner_coord.jobs import execute
from aner_coord.requests import (
    ClusterExecution,
    ComputationRequest,
    DenseRequest,
    Execution,
    JobRequest,
    LocalExecution,
    MonteCarloRequest,
    RegressionRequest,
)
from aner_coord.results import MonteCarloResult, RegressionResult
from aner_coord.runner import run_sync
from aner_coord.status import JobState, WorkerAccount

if TYPE_CHECKING:
    from aner_coord.dense_result import DenseFit, DenseResult

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
    "WorkerAccount",
    "cluster",
    "dense_fit",
    "inventory",
    "local",
    "monte_carlo",
    "regression",
    "run",
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
    request = JobRequest(
        computation=computation,
        execution=execution if execution is not None else LocalExecution(),
        output=None if output is None else os.fspath(output),
        audit=audit,
        retries=retries,
    )
    return _outcome(run_sync(execute(admit(request)))).result


def _outcome(report: Any) -> Any:
    if report.state is JobState.COMPLETED:
        return report
    if report.state is JobState.CANCELLED:
        raise JobCancelled(report.error or "cancelled")
    raise JobFailed(report.error or "job failed") from report.task_exception


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
    from aner_coord.dense_result import DenseFit

    request = DenseRequest(
        seed=seed,
        data=None if data is None else (data if data == "digits" else os.fspath(data)),
        label=label,
        teacher=None if teacher is None else (teacher[0], teacher[1], teacher[2]),
        hidden=tuple(hidden),
        batch=batch,
        epochs=epochs,
        optimizer=optimizer,
        lr=lr,
        patience=patience,
        target_accuracy=target_accuracy,
    )
    job_request = JobRequest(
        computation=request,
        execution=execution if execution is not None else LocalExecution(chunk=DENSE_CHUNK),
        output=None if output is None else os.fspath(output),
        retries=retries,
    )
    report = _outcome(run_sync(execute(admit(job_request))))
    return DenseFit(report.result, report.run.model)
