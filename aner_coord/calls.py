"""Every call of the Python API, written once, for one-off jobs and sessions alike.

A call is built from its arguments as a `Call`: the admitted job, and how the job's report
becomes the call's result. Two drivers carry any call out, so each call is written once and
has both forms (as dask writes each `Client` method once and bridges it with
`SyncMethodMixin`):

- `synchronous`: the caller's thread waits; an interrupt (Ctrl-C, a notebook's kernel
  interrupt) cancels the job gracefully and the call raises `JobCancelled` chained from it;
- `awaitable`: the job is awaited without blocking the caller's loop; cancelling the awaiting
  task cancels the job, waits for it to stop, then re-raises the CancelledError, as asyncio's
  convention asks (`awaited`).

Both also take `progress=` (`aner_coord.handle`: checked by `check_progress`, drained by a
`Reporter` thread off the coordinator's loop), and `Calls.submit` starts any call by name
and returns its `JobHandle` (`_start`: the job runs on without the caller).

`Calls` holds the calls; how a job runs is its subclasses' business (`OneOff` for
`parallel`'s functions, `aner_coord.session.Session` on kept workers). A computation's options
are those of its request type, declared once there: a call converts its keyword arguments
with `request_of`, which names a wrong value as the caller wrote it (`epochs=`). A call's
signature is derived from its request type (`aner_coord.arguments.takes`) and checked before
anything else: an argument it does not take, or a missing one, is refused in one line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypedDict, TypeVar

import msgspec

from aner_coord.admission import Job, admit
from aner_coord.arguments import ArgumentError, missing_options, refuse_others, takes
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.montecarlo import MonteCarloRequest, MonteCarloResult
from aner_coord.computations.regression import RegressionRequest, RegressionResult
from aner_coord.computations.replicates import ReplicatesResult
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import JobCancelled, JobFailed, RequestError
from aner_coord.handle import JobHandle, ProgressCallback, Relay, Reporter, check_progress
from aner_coord.job.coordinator import JobReport, Observer
from aner_coord.job.execute import execute
from aner_coord.jobdir.status import JobState
from aner_coord.requests import ComputationRequest, Execution, JobRequest, LocalExecution
from aner_coord.runner import run_in_thread, run_interruptible

if TYPE_CHECKING:
    from aner_coord.computations.dense.result import DenseFit
    from aner_coord.computations.search.result import SearchFit

R = TypeVar("R")
P = ParamSpec("P")
C = TypeVar("C", bound="Calls")


class Placement(TypedDict, total=False):
    """Where and how a call's job runs; the same for every computation."""

    execution: Execution  # local(...) or cluster(...); the caller's own if omitted
    # a job directory (docs/contracts.md, section 7) that must not exist
    output: str | os.PathLike[str]
    audit: float  # the fraction of chunks the coordinator recomputes itself
    retries: int  # lost workers the job survives (docs/contracts.md, section 11)
    task_timeout: float  # seconds a task may compute (docs/contracts.md, section 6)
    chunk: int  # items a task, instead of the execution's (or the computation's default)
    # a function given status snapshots as the job runs, or True for a progress bar
    # (`aner_coord.handle`); taken by the drivers, never by the job
    progress: ProgressCallback | bool


PLACEMENT: tuple[str, ...] = tuple(Placement.__annotations__)
# Arrays a Dense call takes besides X and y, each row's (`_array_options`): not request fields.
# Cross-validation and search take the first two (their folds validate).
ROW_ARRAYS = ("groups", "split", "validation")
FOLD_ARRAYS = ROW_ARRAYS[:2]
# An argument a call does not take for a reason its caller should read (not a misspelling,
# for which `refuse_others` suggests a name): the call, the argument and why.
_FOLDS_VALIDATE = (
    "its folds validate (each fit on one fold of X, y); to validate on rows of your own, "
    "append them to X, y and give split= (each row's role: train, validation or test) with "
    "folds=1, or train once with dense_fit(validation=...)"
)
NOT_TAKEN: dict[str, dict[str, str]] = {
    "cross_validate": {"validation": _FOLDS_VALIDATE},
    "search": {"validation": _FOLDS_VALIDATE},
}


def refuse_not_taken(call: str, kwargs: dict[str, Any]) -> None:
    """Refuse an argument that `call` (or its awaitable form) does not take, saying why."""
    for name, why in NOT_TAKEN.get(call.removesuffix("_async"), {}).items():
        if name in kwargs:
            raise ArgumentError(f"{call}() takes no {name}=: {why}")


@dataclass(frozen=True)
class Call(Generic[R]):
    """A call ready to run: its admitted job, and how the job's report becomes the result
    (`finish(report, interrupt)`, with the interrupt that cancelled it, if one did)."""

    job: Job
    finish: Callable[[JobReport, BaseException | None], R]


def outcome(report: JobReport, interrupt: BaseException | None = None) -> Any:
    """The result of a completed job; a cancelled or failed one raises, saying why."""
    if report.state is JobState.COMPLETED:
        return report.result
    if report.state is JobState.CANCELLED:
        # An interrupt (Ctrl-C, a notebook's kernel interrupt) cancelled it: chained, so a
        # notebook shows why, and nothing of the job runs on.
        raise JobCancelled(report.error or "cancelled") from interrupt
    raise JobFailed(report.error or "job failed", report.error_detail) from report.task_exception


def synchronous(
    build: Callable[Concatenate[C, P], Call[R]], signature: inspect.Signature
) -> Callable[Concatenate[C, P], R]:
    """The blocking form of a call taking `signature`: check its arguments, build it, wait for
    its job, finish it."""
    name = build.__name__.lstrip("_")

    @functools.wraps(build)
    def call(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        refuse_not_taken(name, kwargs)
        refuse_others(name, signature, (self, *args), kwargs)
        progress = check_progress(kwargs.pop("progress", None), name)
        reporter = Reporter(progress) if progress is not None else None
        with _admitting(reporter, name):
            ready = build(self, *args, **kwargs)
        try:
            report, interrupt = self._wait(ready.job, _observers(reporter))
        finally:
            if reporter is not None:
                reporter.close()  # the final snapshot given before the call returns
        return ready.finish(report, interrupt)

    call.__name__ = call.__qualname__ = name
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


def awaitable(
    build: Callable[Concatenate[C, P], Call[R]], signature: inspect.Signature
) -> Callable[Concatenate[C, P], Coroutine[Any, Any, R]]:
    """The awaitable form of a call taking `signature`: check its arguments, build it, await
    its job, finish it."""
    name = build.__name__.lstrip("_") + "_async"

    @functools.wraps(build)
    async def call(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        refuse_not_taken(name, kwargs)
        refuse_others(name, signature, (self, *args), kwargs)
        progress = check_progress(kwargs.pop("progress", None), name)
        reporter = Reporter(progress) if progress is not None else None
        with _admitting(reporter, name):
            ready = build(self, *args, **kwargs)
        try:
            report = await self._wait_async(ready.job, _observers(reporter))
        finally:
            if reporter is not None:
                await asyncio.to_thread(reporter.close)
        return ready.finish(report, None)

    call.__name__ = call.__qualname__ = name
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


def _admitting(reporter: Reporter | None, name: str) -> contextlib.AbstractContextManager[None]:
    """The call's admission, shown as a phase by its display (`Reporter.admitting`)."""
    return reporter.admitting(name) if reporter is not None else contextlib.nullcontext()


def _observers(reporter: Reporter | None) -> tuple[Observer, ...]:
    return (reporter.relay,) if reporter is not None else ()


# What each call takes: its request type's options, and where its job runs. A search's own
# `chunk` is the rows of a chunk within each fit; cross-validation has no grid.
# `run(NAME, ...)`: a named computation's options (computations.named) and its `params`.
NAMED = ("samples", "seed", "replicates", "params")
RUN = takes(None, required=("computation",), keywords=NAMED, placement=PLACEMENT)
MONTE_CARLO = takes(MonteCarloRequest, placement=PLACEMENT)
REGRESSION = takes(RegressionRequest, placement=PLACEMENT)
DENSE_FIT = takes(DenseRequest, positional=("X", "y"), keywords=ROW_ARRAYS, placement=PLACEMENT)
CROSS_VALIDATE = takes(
    SearchRequest,
    positional=("X", "y"),
    keywords=FOLD_ARRAYS,
    placement=PLACEMENT,
    leave_out=("grid",),
)
SEARCH = takes(
    SearchRequest,
    positional=("X", "y", "spec"),
    keywords=FOLD_ARRAYS,
    placement=PLACEMENT,
    file_instead=True,
)


class Calls:
    """The calls of the API. Subclasses say how a job runs (`_wait`, `_wait_async`) and may
    add to every result (`_finish`)."""

    execution: Execution = LocalExecution()

    # -- how a job runs: the subclasses' ---------------------------------------------------
    def _wait(
        self, job: Job, observers: Sequence[Observer] = ()
    ) -> tuple[JobReport, KeyboardInterrupt | None]:
        """Run `job` to its end from a blocking caller, publishing its snapshots to
        `observers`; an interrupt cancels it gracefully and is handed back, to be chained."""
        raise NotImplementedError

    async def _wait_async(self, job: Job, observers: Sequence[Observer] = ()) -> JobReport:
        """Run `job` to its end for an awaiting caller, never blocking its loop."""
        raise NotImplementedError

    def _start(
        self, job: Job, observers: Sequence[Observer]
    ) -> tuple[concurrent.futures.Future[JobReport], Callable[[], None]]:
        """Start `job` running on without the caller: its report to come, and a function
        that cancels it gracefully from any thread."""
        raise NotImplementedError

    # -- a call started, held by a handle ----------------------------------------------------
    def submit(
        self, call: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> JobHandle[Any]:
        """Start `call` (a call of this API, as `parallel.dense_fit`, or its name) with these
        arguments, checked as the call checks them, and return at once: a `JobHandle` whose
        `status()`, `watch()`, `result()` and `cancel()` follow the job (`aner_coord.handle`)."""
        name = call if isinstance(call, str) else getattr(call, "__name__", repr(call))
        if name not in SUBMITTED:
            known = ", ".join(SUBMITTED)
            raise ArgumentError(f"submit() takes a call of the API ({known}), got {name!r}")
        build, signature = SUBMITTED[name]
        refuse_others(name, signature, (self, *args), kwargs)
        progress = check_progress(kwargs.pop("progress", None), name)
        ready = build(self, *args, **kwargs)
        relay = Relay()
        reporter = Reporter(progress) if progress is not None else None
        observers: tuple[Observer, ...] = (relay, *_observers(reporter))
        future, cancel = self._start(ready.job, observers)
        return JobHandle(future, ready.finish, cancel, relay, reporter)

    def _finish(self, report: JobReport, interrupt: BaseException | None) -> Any:
        return outcome(report, interrupt)

    def _job(self, computation: ComputationRequest, placement: Placement) -> Job:
        """Admit `computation` where `placement` says (RequestError: nothing started)."""
        execution = placement.get("execution") or self.execution
        chunk = placement.get("chunk")
        if chunk is not None:
            execution = msgspec.structs.replace(execution, chunk=plain(chunk))
        output = placement.get("output")
        return admit(
            JobRequest(
                computation=computation,
                execution=execution,
                output=None if output is None else os.fspath(output),
                audit=plain(placement.get("audit", 0.0)),
                retries=plain(placement.get("retries", 0)),
                task_timeout=plain(placement.get("task_timeout")),
            )
        )

    # -- the calls, each written once ----------------------------------------------------
    def _run(self, /, computation: ComputationRequest | str, **arguments: Any) -> Call[Any]:
        """Run any registered computation's request and return its result. `output` makes a
        job directory (docs/contracts.md, section 7), `audit` recomputes that fraction of the chunks
        on the coordinator, `retries` lost workers are survived (docs/contracts.md, section 11),
        `chunk` items go to a task.

        Or name an installed computation (a plugin's, docs/contracts.md, section 15) with
        `samples`, `seed`, `replicates` and `params`: `run("asian", samples=10**6, seed=1,
        params={"sigma": 0.3}, replicates=4)`; `params` are a simulation's declared
        parameters (another computation's request fields), checked against their ranges
        before any worker starts."""
        placement, given = split_placement(arguments)
        options = {k: plain(v) for k, v in given.items() if v is not None}
        if isinstance(computation, str):
            from aner_coord.computations.named import named_request

            params = options.pop("params", {})
            if not isinstance(params, dict):
                raise ArgumentError(
                    f"run() takes params= as a dict of names to values, got {params!r}"
                )
            request = named_request(computation, options, params, text=False)
        elif options:
            raise ArgumentError(
                f"run() takes no {sorted(options)[0]}= with a request: the request holds its "
                "options (or name the computation: run(NAME, ...))"
            )
        elif not isinstance(computation, ComputationRequest):
            raise ArgumentError(
                "run() takes a computation's request or an installed computation's name, got "
                f"{type(computation).__name__}"
            )
        else:
            request = computation
        return Call(self._job(request, placement), self._finish)

    def _monte_carlo(self, /, **arguments: Any) -> Call[MonteCarloResult | ReplicatesResult]:
        """Estimate pi from `samples` Philox samples of `seed` (docs/contracts.md, section 1); the
        hits depend on nothing else. `replicates` > 1 runs that many independent estimates
        with seeds derived from `seed` and returns their aggregate (docs/contracts.md,
        section 16)."""
        placement, options = split_placement(arguments)
        request = request_of(MonteCarloRequest, options)
        return Call(self._job(request, placement), self._finish)

    def _regression(self, /, **arguments: Any) -> Call[RegressionResult | ReplicatesResult]:
        """Fit the logistic-regression fixture of docs/contracts.md, section 2 with full-batch
        steps of `rate`: `samples` rows, `steps` steps, the rows of `seed`; `replicates` > 1
        fits that many, with seeds derived from `seed`, each whole on one slot, and returns
        their aggregate."""
        placement, options = split_placement(arguments)
        request = request_of(RegressionRequest, options)
        return Call(self._job(request, placement), self._finish)

    def _dense_fit(
        self, X: Any = None, y: Any = None, /, **arguments: Any
    ) -> Call[DenseFit | ReplicatesResult]:
        """Train a Dense classifier (docs/contracts.md, section 9) on arrays `X` (rows x features)
        and `y` (a label per row: numbers or strings), on `data` (a CSV or NPZ file, or "digits") or
        on the procedural `teacher` set (rows, features, classes), with the options of
        `DenseRequest` (`hidden=64` is one layer of 64). The result carries the per-epoch
        history, test metrics, `best_epoch`, `time_to_target_s`, per-worker accounting, the
        row indices of each role (`train_rows`, `validation_rows`, `test_rows`),
        `predict(X)` (labels in the classes' own type), `predict_proba(X)` and
        `score(X, y)`; `seconds` leaves out loading the kernels, which `load_s` reports.
        Arrays are identified by the SHA256 of a canonical encoding (`array:sha256:...`)
        and staged to worker processes like file data; with `output`, the job directory
        records that identity but not the arrays (such a job cannot be resumed from the
        command line). `replicates` > 1 trains that many, each a whole fit with a seed
        derived from `seed` on the same data and roles, and returns their aggregate
        (docs/contracts.md, section 16)."""
        from aner_coord.computations.dense.result import DenseFit

        placement, options = split_placement(arguments)
        options = _dense_options(X, y, options)
        job = self._job(request_of(DenseRequest, options), placement)

        def finish(
            report: JobReport, interrupt: BaseException | None
        ) -> DenseFit | ReplicatesResult:
            result = self._finish(report, interrupt)
            if isinstance(result, ReplicatesResult):  # `replicates` > 1: the aggregate
                return result
            run = report.run
            return DenseFit(result, run.model, run.roles)

        return Call(job, finish)

    def _cross_validate(self, X: Any = None, y: Any = None, /, **arguments: Any) -> Call[SearchFit]:
        """K-fold cross-validation (docs/contracts.md, section 12) of one Dense configuration:
        the options of `dense_fit`, plus `folds` (2..255, default 5; 1 for train's own
        validation split), `group` (a CSV column: every group's rows in one fold) and `refit`
        (default True), on arrays `X`, `y` as `dense_fit` takes them or on `data`. `chunk`
        is the rows of a chunk within each fit. The result has every fold's best validation
        loss and accuracy, best epoch and seconds (`records()`), their mean and sample
        standard deviation, and with the refit its test metrics and `predict(X)`."""
        options = _dense_options(X, y, arguments, "cross_validate")
        return self._search_call(options, None, "cross_validate")

    def _search(
        self,
        X: Any = None,
        y: Any = None,
        /,
        spec: str | os.PathLike[str] | None = None,
        **arguments: Any,
    ) -> Call[SearchFit]:
        """A model search (docs/contracts.md, section 12): the candidates of `grid` (lists of
        `hidden`, `lr`, `batch`, `epochs`, `optimizer`, `patience`, `chunk`; the last key varies
        fastest), each cross-validated over `folds`, the best refit on the pool and tested
        once; every other option as `cross_validate`, fixed for every candidate. Or `spec`,
        a search file as `aner parallel search --spec` takes. `seeds` (a list) or `replicates`
        fit every candidate with each training seed on each fold, selected by the mean over
        them all (docs/contracts.md, section 12). The result gives the fits and candidates as
        records, the selection, the test metrics and `predict(X)`."""
        return self._search_call(_array_options(X, y, arguments, "search"), spec, "search")

    def _search_call(
        self, arguments: dict[str, Any], spec: str | os.PathLike[str] | None, call: str
    ) -> Call[SearchFit]:
        from aner_coord.computations.search.result import SearchFit

        placement, options = split_placement(arguments)
        if "chunk" in placement:  # a search's chunk is the rows of a chunk within each fit
            options["chunk"] = placement.pop("chunk")
        if spec is not None:
            from aner_coord.computations.search.specfile import admitted_search_file

            if options:
                raise RequestError(
                    f"{call}() with spec= takes no {sorted(options)[0]}=: the file describes "
                    "the whole search"
                )
            request = admitted_search_file(os.fspath(spec))
        else:
            from aner_coord.computations.search.grid import check_conflicts

            missing_options(call, SearchRequest, options, "spec")
            check_conflicts(set(options) - {"grid"}, options.get("grid") or {})
            data = options.get("data")
            if data is not None and data != "digits" and not is_array_data(data):
                options["data"] = os.path.abspath(os.fspath(data))  # a resumed job finds it
            request = request_of(SearchRequest, options)
        job = self._job(request, placement)

        def finish(report: JobReport, interrupt: BaseException | None) -> SearchFit:
            return SearchFit(self._finish(report, interrupt), report.run.model)

        return Call(job, finish)

    run = synchronous(_run, RUN)
    run_async = awaitable(_run, RUN)
    monte_carlo = synchronous(_monte_carlo, MONTE_CARLO)
    monte_carlo_async = awaitable(_monte_carlo, MONTE_CARLO)
    regression = synchronous(_regression, REGRESSION)
    regression_async = awaitable(_regression, REGRESSION)
    dense_fit = synchronous(_dense_fit, DENSE_FIT)
    dense_fit_async = awaitable(_dense_fit, DENSE_FIT)
    cross_validate = synchronous(_cross_validate, CROSS_VALIDATE)
    cross_validate_async = awaitable(_cross_validate, CROSS_VALIDATE)
    search = synchronous(_search, SEARCH)
    search_async = awaitable(_search, SEARCH)


# The calls `submit` starts, by name: how each is built, and the arguments it takes.
SUBMITTED: dict[str, tuple[Callable[..., Call[Any]], inspect.Signature]] = {
    "run": (Calls._run, RUN),
    "monte_carlo": (Calls._monte_carlo, MONTE_CARLO),
    "regression": (Calls._regression, REGRESSION),
    "dense_fit": (Calls._dense_fit, DENSE_FIT),
    "cross_validate": (Calls._cross_validate, CROSS_VALIDATE),
    "search": (Calls._search, SEARCH),
}


class OneOff(Calls):
    """`parallel`'s functions: each call's job starts its own workers and ends them."""

    def _wait(
        self, job: Job, observers: Sequence[Observer] = ()
    ) -> tuple[JobReport, KeyboardInterrupt | None]:
        return run_interruptible(lambda cancel: execute(job, cancel=cancel, observers=observers))

    async def _wait_async(self, job: Job, observers: Sequence[Observer] = ()) -> JobReport:
        cancel = asyncio.Event()
        running = asyncio.ensure_future(execute(job, cancel=cancel, observers=observers))
        return await awaited(running, cancel.set)

    def _start(
        self, job: Job, observers: Sequence[Observer]
    ) -> tuple[concurrent.futures.Future[JobReport], Callable[[], None]]:
        return run_in_thread(lambda cancel: execute(job, cancel=cancel, observers=observers))


async def awaited(job: asyncio.Future[JobReport], cancel: Callable[[], None]) -> JobReport:
    """The report of a running `job` for an awaiting task. Cancelling that task cancels the
    job gracefully (`cancel()`) and waits until it has stopped, its workers with it, before
    the CancelledError goes on. A further cancellation meanwhile (a timeout and a task
    group both cancelling the task) waits too: the stop takes moments, and giving up on it
    would leave the job computing behind the caller's back."""
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        cancel()
        while not job.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([job])
        if not job.cancelled():
            job.exception()  # retrieved: what the caller gets is the CancelledError
        raise


# -- options from a request type -------------------------------------------------------------


def _dense_options(
    x: Any, y: Any, options: dict[str, Any], call: str = "dense_fit"
) -> dict[str, Any]:
    """A Dense call's options with arrays `X`, `y` registered as its data (`data=` names
    them) and `hidden=64` read as one layer."""
    options = _array_options(x, y, options, call)
    hidden = plain(options.get("hidden"))
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        options["hidden"] = [hidden]
    return options


def _array_options(x: Any, y: Any, options: dict[str, Any], call: str) -> dict[str, Any]:
    """A call's options with arrays `X`, `y` (positional or keywords) registered as its
    data, which `data=` then names; `groups=` and `split=` (arrays, one value a row, or a
    CSV column's name) become `group` and `split_column`, and `validation=(X_val, y_val)`
    (dense_fit) appends its rows as validation rows."""
    options = dict(options)
    x = options.pop("X", x)
    y = options.pop("y", y)
    sides: dict[str, Any] = {n: options.pop(n) for n in ("groups", "split") if n in options}
    for field, name in (("group", "groups"), ("split_column", "split")):
        if options.get(field) is not None and not isinstance(options[field], str):
            if name in sides:
                raise RequestError(f"{call}() takes {field}= or {name}=: give one")
            sides[name] = options.pop(field)  # an array where a column's name would be
    validation = options.pop("validation", None)  # dense_fit's alone: its signature says so
    if x is None and y is None:
        if validation is not None:
            raise RequestError(f"{call}() takes validation=(X_val, y_val) with arrays X and y")
        return _side_columns(options, sides, call)
    if x is None or y is None:
        raise RequestError(f"{call}() takes arrays as X and y together: give both")
    if options.get("data") is not None or options.get("teacher") is not None:
        raise RequestError(f"{call}() takes X and y, data= or teacher=: give exactly one")
    from aner_coord.computations.dense import splits
    from aner_coord.computations.dense.arrays import held, register
    from aner_worker.kernels.dense.data import MAX_DATA_BYTES

    n_rows = held(register(x, y, limit_bytes=MAX_DATA_BYTES)).n_rows
    roles = None
    if "split" in sides and not isinstance(sides["split"], str):
        roles = splits.label_texts(sides.pop("split"), "split", n_rows)
    if validation is not None:
        x, y, extra = _appended(x, y, validation, call)
        roles = (roles or ["train"] * n_rows) + ["validation"] * extra
    options["data"] = register(x, y, limit_bytes=MAX_DATA_BYTES)
    if roles is not None:
        options["split_column"] = splits.hold(roles)
    if "groups" in sides and not isinstance(sides["groups"], str):
        if validation is not None:
            raise RequestError(
                f"{call}() takes validation= or groups=: a split you made decides every role"
            )
        texts = splits.label_texts(sides.pop("groups"), "groups", n_rows)
        if options.get("group") is not None:
            raise RequestError(f"{call}() takes group= (a column) or groups=: give one")
        options["group"] = splits.hold(texts)
    return _side_columns(options, sides, call)


def _side_columns(options: dict[str, Any], sides: dict[str, Any], call: str) -> dict[str, Any]:
    """`groups=` and `split=` given as a CSV column's name: `group` and `split_column`."""
    for name, field in (("groups", "group"), ("split", "split_column")):
        if name not in sides:
            continue
        if not isinstance(sides[name], str):
            raise RequestError(f"{call}() takes {name}= as an array together with arrays X and y")
        if options.get(field) is not None:
            raise RequestError(f"{call}() takes {field}= or {name}=: give one")
        options[field] = sides[name]
    return options


def _appended(x: Any, y: Any, validation: Any, call: str) -> tuple[Any, Any, int]:
    """X and y with `validation`'s rows after theirs, and how many rows it added. Each X is
    converted by itself (`inputs.feature_rows`), so that joining them changes no value (an
    int64 X beside a float X_val is not rounded); a frame's X_val is mapped to X's column
    names."""
    import numpy as np

    from aner_coord.computations.dense.inputs import Rows, feature_rows, name_mismatch
    from aner_worker.kernels.dense.data import MAX_DATA_BYTES

    if not isinstance(validation, tuple | list) or len(validation) != 2:
        raise RequestError(f"{call}() takes validation= as a pair (X_val, y_val)")
    x_val, y_val = validation
    if isinstance(y_val, np.ma.MaskedArray):
        raise RequestError(
            "validation=: y_val is a masked array: drop the rows of its masked labels"
        )
    first = feature_rows(x, "X", limit_bytes=MAX_DATA_BYTES)
    second = feature_rows(x_val, "X_val", limit_bytes=MAX_DATA_BYTES)
    values = second.values
    if first.names is not None and second.names is not None:
        mismatch = name_mismatch(second.names, first.names)
        if mismatch is not None:
            raise RequestError(f"validation=: {mismatch}")
        values = values[:, [second.names.index(name) for name in first.names]]
    if values.shape[1] != first.values.shape[1]:
        raise RequestError(
            f"validation=: X_val must have X's {first.values.shape[1]} columns, got shape "
            f"{values.shape}"
        )
    together = Rows(np.concatenate([first.values, values]), first.names)
    labels, labels_val = np.asarray(y).reshape(-1), np.asarray(y_val).reshape(-1)
    if labels.dtype.kind != labels_val.dtype.kind:  # joined, one would change type
        raise RequestError(
            f"validation=: y_val holds {labels_val.dtype}, y holds {labels.dtype}: give labels "
            "of one type"
        )
    extra = values.shape[0]
    if labels_val.size != extra:
        raise RequestError("validation=: X_val and y_val must have one label per row, and rows")
    return together, np.concatenate([labels, labels_val]), extra


def is_array_data(data: Any) -> bool:
    """Whether a request's `data` names in-memory arrays (without importing numpy)."""
    return isinstance(data, str) and data.startswith("array:")


def split_placement(arguments: dict[str, Any]) -> tuple[Placement, dict[str, Any]]:
    """A call's keyword arguments: where it runs, and the computation's options."""
    placement = {k: v for k, v in arguments.items() if k in PLACEMENT}
    options = {k: v for k, v in arguments.items() if k not in PLACEMENT}
    return Placement(**placement), options  # type: ignore[typeddict-item]


def plain(value: Any) -> Any:
    """A numpy scalar or array as the Python value it holds (np.int64(5) -> 5), a path as
    its string: what a request's fields take."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "dtype") and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):  # a search's grid: lists of numpy values are lists of values
        return {k: plain(v) for k, v in value.items()}
    return value


def request_of(kind: type[Any], options: dict[str, Any]) -> Any:
    """A `kind` request from a call's options (its signature, checked, took no others). A
    value of the wrong type is a RequestError naming it as the caller wrote it (`epochs=`)."""
    values = {k: plain(v) for k, v in options.items()}
    try:
        return msgspec.convert(values, kind)
    except msgspec.ValidationError as exc:
        raise RequestError(_argument_error(exc, values)) from None


# How a type that msgspec names is said to a person.
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "array": "a list"}


def _argument_error(exc: msgspec.ValidationError, values: dict[str, Any]) -> str:
    """msgspec says "Expected `int`, got `bool` - at `$.samples`"; say "samples= must be an
    integer, got True" instead."""
    text = str(exc)
    message, at, where = text.partition(" - at `$.")
    if not at:
        return text
    name = where.rstrip("`").split("[")[0].split(".")[0]
    expected = message.removeprefix("Expected `").split("`")[0]
    words = " or ".join(_TYPE_WORDS.get(w.strip(), w.strip()) for w in expected.split("|"))
    if message.startswith("Expected `") and name in values and "[" not in where:
        return f"{name}= must be {words}, got {values[name]!r}"
    return f"{name}=: {message[0].lower()}{message[1:]}"
