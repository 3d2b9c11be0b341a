"""The Python API: `from aner_coord import parallel`.

    from aner_coord import parallel
    result = parallel.monte_carlo(samples=10**8, seed=42, execution=parallel.local(workers=2))
    print(result.summary())

Calls are synchronous for the caller (they also work inside a running event loop, as in
Jupyter). Errors: `RequestError`/`AdmissionError` for an invalid request (nothing ran),
`JobFailed` for a failed job (its message names the worker and phase), `JobCancelled` if
it was cancelled.
"""

from __future__ import annotations

from typing import Any

from aner_coord.contexts import ClusterExecution, Execution, LocalExecution, cluster, local
from aner_coord.errors import AdmissionError, JobCancelled, JobFailed, RequestError
from aner_coord.jobs import JobSpec, Outcome, execute, prepare
from aner_coord.jobstate import JobState
from aner_coord.results import FixtureResult, MonteCarloResult, WorkerShare
from aner_coord.runner import run_sync

__all__ = [
    "AdmissionError",
    "ClusterExecution",
    "FixtureResult",
    "JobCancelled",
    "JobFailed",
    "LocalExecution",
    "MonteCarloResult",
    "RequestError",
    "WorkerShare",
    "cluster",
    "inventory",
    "local",
    "monte_carlo",
    "regression",
]


def inventory() -> dict[str, Any]:
    """The local CPU allocation as SPEC section 4 describes it (JSON-ready)."""
    from aner_worker.inventory import current

    return current().to_dict()


def _run(spec: JobSpec, execution: Execution | None) -> Outcome:
    job = prepare(spec, execution=execution or local(chunk=spec.chunk))
    outcome = run_sync(execute(job))
    report = outcome.report
    if report.state is JobState.COMPLETED:
        return outcome
    if report.state is JobState.CANCELLED:
        raise JobCancelled(report.error or "cancelled")
    raise JobFailed(report.error or "job failed") from report.task_exception


def monte_carlo(*, samples: int, seed: int, execution: Execution | None = None) -> MonteCarloResult:
    """Estimate pi from `samples` Philox samples of `seed`; the hits depend on nothing else."""
    spec = JobSpec("monte-carlo", samples=samples, seed=seed)
    result = _run(spec, execution).result
    assert isinstance(result, MonteCarloResult)
    return result


def regression(
    *, samples: int, steps: int, rate: float, seed: int, execution: Execution | None = None
) -> FixtureResult:
    """Fit the logistic-regression fixture of SPEC section 2 with full-batch steps."""
    spec = JobSpec("regression", samples=samples, seed=seed, steps=steps, rate=rate)
    result = _run(spec, execution).result
    assert isinstance(result, FixtureResult)
    return result
