"""The Python API: `import aner.parallel` (or `from aner_coord import parallel`, the same
module: `aner.parallel is aner_coord.parallel`).

    import aner.parallel as parallel
    result = parallel.monte_carlo(samples=10**8, seed=42, execution=parallel.local(workers=2))
    print(result.hits, result.estimate)
    print(result.summary())

Calls are synchronous for the caller (they also work inside a running event loop, as in
Jupyter); an interrupt (Ctrl-C, a kernel interrupt) cancels the job gracefully and raises
`JobCancelled` chained from it (`__cause__` is the KeyboardInterrupt): within a second no
coordinator thread, worker thread or worker process of the call is still computing. Async
callers await `run_async`, `monte_carlo_async`, `regression_async`, `dense_fit_async`,
`cross_validate_async` or `search_async`, which never block their loop; cancelling the
awaiting task cancels the job, waits until it has stopped, and raises the task's
`asyncio.CancelledError`, as asyncio's convention asks.

Model search and cross-validation (docs/contracts.md, section 12) run independent Dense fits, each
whole on one worker slot, and give the same numbers whatever the workers:

    cv = parallel.cross_validate(data="digits", folds=5, seed=1, hidden=(64,), epochs=30)
    best = parallel.search(data="digits", seed=1, folds=5, epochs=30,
                           grid={"hidden": [[32], [64, 64]], "lr": [1e-3, 3e-3]})
    best.records()            # one record per fit, as fits.csv
    best.predict(X)           # the refit model of the selected candidate

Sessions start a group's workers once and keep them across calls (`aner_coord.session`):

    with parallel.session(parallel.cluster("cluster.txt")) as s:
        a = s.monte_carlo(samples=10**8, seed=1)          # starts the workers
        b = s.monte_carlo(samples=10**8, seed=2)          # the same processes, warm
        c = await s.monte_carlo_async(samples=10**8, seed=3)  # from async code

Each call is its own job (accounting, optional `output=` directory, the same result as a
one-off call); the workers end on leaving `with`, on garbage collection and at interpreter
exit; a worker lost between calls is started again and reported in the next call's
`result.losses` (or, with `restart=False`, counted as that call's lost worker).

Every call takes `progress=` (a function given status snapshots, or True for a progress bar
in a terminal or a notebook), and `submit` starts any call without waiting for it
(`aner_coord.handle`):

    handle = parallel.submit(parallel.dense_fit, data="digits", seed=1, progress=True)
    for snapshot in handle.watch():       # or `async for`; handle.status() is the latest
        ...
    fit = handle.result()                 # handle.cancel() cancels gracefully

Errors: `RequestError`/`AdmissionError` for an invalid request (nothing ran; the message
names the argument to change, as `workers=`; an argument a call does not take, or a missing
one, is refused by name too), `JobFailed` for a failed job (its message says
where: the worker and phase, a divergence, the job directory), `JobCancelled` if it was
cancelled.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from aner_coord.admission import cluster, local
from aner_coord.arguments import checked
from aner_coord.calls import OneOff
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.montecarlo import MonteCarloRequest, MonteCarloResult
from aner_coord.computations.regression import RegressionRequest, RegressionResult
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import AdmissionError, AnerError, JobCancelled, JobFailed, RequestError
from aner_coord.handle import JobHandle
from aner_coord.jobdir.status import WorkerAccount
from aner_coord.requests import ClusterExecution, LocalExecution
from aner_coord.session import Session, session

if TYPE_CHECKING:
    from aner_coord.computations.dense.model import DenseModel
    from aner_coord.computations.dense.result import DenseFit, DenseResult
    from aner_coord.computations.search.result import SearchFit, SearchResult
    from aner_coord.estimator import DenseClassifier

__all__ = [
    "AdmissionError",
    "AnerError",
    "ClusterExecution",
    "DenseClassifier",
    "DenseFit",
    "DenseModel",
    "DenseRequest",
    "DenseResult",
    "JobCancelled",
    "JobFailed",
    "JobHandle",
    "LocalExecution",
    "MonteCarloRequest",
    "MonteCarloResult",
    "RegressionRequest",
    "RegressionResult",
    "RequestError",
    "SearchFit",
    "SearchRequest",
    "SearchResult",
    "Session",
    "WorkerAccount",
    "capabilities",
    "cluster",
    "cross_validate",
    "cross_validate_async",
    "dense_fit",
    "dense_fit_async",
    "inventory",
    "load_model",
    "local",
    "monte_carlo",
    "monte_carlo_async",
    "regression",
    "regression_async",
    "run",
    "run_async",
    "search",
    "search_async",
    "session",
    "submit",
]


@checked
def inventory() -> dict[str, Any]:
    """The local CPU allocation as docs/contracts.md, section 4 describes it (JSON-ready),
    with how local workers of each kernel run (`local_execution`, section 3)."""
    from aner_coord.localplan import choices_dict
    from aner_worker.inventory import current

    inv = current()
    return {**inv.to_dict(), "local_execution": choices_dict(inv.auto_workers)}


@checked
def capabilities(cluster: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """What this build can do and where it came from (JSON-ready; docs/contracts.md,
    section 17); with `cluster`, each worker's own report from its
    handshake."""
    from aner_coord.capabilities import capabilities as report

    return report(None if cluster is None else os.fspath(cluster))


@checked
def load_model(path: str | os.PathLike[str], *, allow_incomplete: bool = False) -> DenseModel:
    """The model of a completed Dense job: its job directory, or a `model.npz` path, read
    with `aner parallel predict`'s checks (a tampered or foreign file is a RequestError).
    The model gives `predict(X)`, `predict_proba(X)` and `classes`; `allow_incomplete` takes
    the last model of a failed or cancelled job."""
    from aner_coord.computations.dense.saved import read_model

    return read_model(os.fspath(path), "path=", allow_incomplete=allow_incomplete)


# Each call is written once, in `aner_coord.calls`; these are a one-off caller's.
_one_off = OneOff()
run = _one_off.run
run_async = _one_off.run_async
monte_carlo = _one_off.monte_carlo
monte_carlo_async = _one_off.monte_carlo_async
regression = _one_off.regression
regression_async = _one_off.regression_async
dense_fit = _one_off.dense_fit
dense_fit_async = _one_off.dense_fit_async
cross_validate = _one_off.cross_validate
cross_validate_async = _one_off.cross_validate_async
search = _one_off.search
search_async = _one_off.search_async
submit = _one_off.submit


def __getattr__(name: str) -> Any:
    # The Dense and search result types import numpy: only when asked for.
    if name in ("DenseFit", "DenseResult"):
        from aner_coord.computations.dense import result

        return getattr(result, name)
    if name == "DenseModel":
        from aner_coord.computations.dense.model import DenseModel

        return DenseModel
    if name == "DenseClassifier":  # scikit-learn's bases too, where it is installed
        from aner_coord.estimator import DenseClassifier

        return DenseClassifier
    if name in ("SearchFit", "SearchResult"):
        from aner_coord.computations.search import result as search_result

        return getattr(search_result, name)
    raise AttributeError(name)
