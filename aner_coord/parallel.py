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
from typing import Any

from aner_coord.admission import admit, cluster, local
from aner_coord.errors import AdmissionError, AnerError, JobCancelled, JobFailed, RequestError
from aner_coord.jobs import execute
from aner_coord.requests import (
    ClusterExecution,
    ComputationRequest,
    Execution,
    JobRequest,
    LocalExecution,
    MonteCarloRequest,
    RegressionRequest,
)
from aner_coord.results import MonteCarloResult, RegressionResult
from aner_coord.runner import run_sync
from aner_coord.status import JobState, WorkerAccount

__all__ = [
    "AdmissionError",
    "AnerError",
    "ClusterExecution",
    "JobCancelled",
    "JobFailed",
    "LocalExecution",
    "MonteCarloResult",
    "RegressionResult",
    "RequestError",
    "WorkerAccount",
    "cluster",
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
    report = run_sync(execute(admit(request)))
    if report.state is JobState.COMPLETED:
        return report.result
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
