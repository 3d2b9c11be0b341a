"""The registry of computations, by kind. Adding a workload: its kernel in `aner_worker`
(declared in, or registered with, `aner_worker.kernels`), its coordinator half implementing
`base.Computation`, and one `declare()` here (or a `register()` call with an instance).

- `base`: what a computation is (`Computation`, `Admitted`, the pass and accounting types);
- `montecarlo`, `regression`: the two built-in computations of one module each;
  `replicates`: the seeds of replicates and the aggregation rule over them;
- `dense/`: Dense classifier training; `search/`: model search and cross-validation;
- `display`: how a fitted result shows itself in a notebook (a short repr, an HTML table).

The built-in computations are declared by kind, request type and `module:Class` path and
imported when a job first needs one: `status`, `cancel` and a Monte Carlo run never import
the Dense computation (numpy, and numba through its data streams). `summarize` shows a
completed job's result, and `progress_lines` a running job's own account of its progress
(`status.json`'s detail), from light modules only.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from aner_coord.computations.base import (
    Accounting,
    Admitted,
    Computation,
    Diverged,
    PassSpec,
    Run,
)
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.computations.regression import RegressionRequest
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import RequestError
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.identities import FIXTURE_ID, STREAM_ID
from aner_worker.registry import LazyRegistry

__all__ = [
    "COMPUTATIONS",
    "Accounting",
    "Admitted",
    "Computation",
    "Diverged",
    "PassSpec",
    "Run",
    "computation_for",
    "contract_of",
    "declare",
    "declare_result",
    "progress_lines",
    "register",
    "request_type_of",
    "request_types",
    "summarize",
]

COMPUTATIONS: LazyRegistry[Computation] = LazyRegistry("computation")
# Declared (not yet imported) computations: the kind of each request type, and where the
# lines that `status` shows of a result come from when that is not the computation itself.
_KINDS: dict[type[ComputationRequest], str] = {}
_SUMMARIES: dict[str, str] = {}
_PROGRESS: dict[str, str] = {}
# The contract identity of each declared kind (docs/contracts.md), for the capability report.
_CONTRACTS: dict[str, str] = {}


def register(computation: Computation) -> Computation:
    COMPUTATIONS[computation.kind] = computation
    request_types.cache_clear()
    return computation


def declare(
    kind: str,
    request_type: type[ComputationRequest],
    path: str,
    summary: str | None = None,
    progress: str | None = None,
    contract: str | None = None,
) -> None:
    """`kind` is computed by `path` (`module:Class`), imported when a job first needs it;
    `summary` (`module:function`) renders its results without importing it, `progress`
    (`module:function`) the detail of its running jobs' status, and `contract` is the
    identity of what it computes (docs/contracts.md)."""
    COMPUTATIONS.declare(kind, path)
    _KINDS[request_type] = kind
    if contract is not None:
        _CONTRACTS[kind] = contract
    if summary is not None:
        _SUMMARIES[kind] = summary
    if progress is not None:
        _PROGRESS[kind] = progress
    request_types.cache_clear()


def declare_result(tag: str, summary: str) -> None:
    """A result tagged `tag` that is not its computation's kind (a computation's replicates)
    is shown by `summary` (`module:function`)."""
    _SUMMARIES[tag] = summary


def computation_for(request: ComputationRequest) -> Computation:
    kind = _KINDS.get(type(request))
    if kind is not None and kind in COMPUTATIONS:
        return COMPUTATIONS[kind]
    for name in COMPUTATIONS:
        if COMPUTATIONS.loaded(name) and type(request) is COMPUTATIONS[name].request_type:
            return COMPUTATIONS[name]
    raise RequestError(f"no computation is registered for {type(request).__name__}")


def contract_of(kind: str) -> str | None:
    """The contract identity `kind` was declared with (None for one registered without)."""
    return _CONTRACTS.get(kind)


def request_type_of(kind: str) -> type[ComputationRequest]:
    """The request type of `kind`, without importing its computation."""
    if COMPUTATIONS.loaded(kind):
        return COMPUTATIONS[kind].request_type
    return next(t for t, k in _KINDS.items() if k == kind)


@functools.cache
def request_types() -> Any:
    """The tagged union of every registered request type (for decoding spec files)."""
    declared = {kind: t for t, kind in _KINDS.items()}
    types = tuple(
        declared[kind] if not COMPUTATIONS.loaded(kind) else COMPUTATIONS[kind].request_type
        for kind in COMPUTATIONS
    )
    union: Any = types[0]
    for kind in types[1:]:
        union = union | kind
    return union


def summarize(kind: str, result: dict[str, Any]) -> list[str] | None:
    """The lines `status` shows of a completed `kind` job's result; None for an unknown kind."""
    path = _SUMMARIES.get(kind)
    if path is not None and not COMPUTATIONS.loaded(kind):
        module, _, function = path.partition(":")
        lines: list[str] = getattr(importlib.import_module(module), function)(result)
        return lines
    if kind not in COMPUTATIONS:
        return None
    return COMPUTATIONS[kind].summarize(result)


def progress_lines(kind: str, detail: dict[str, Any] | None, slots: dict[str, int]) -> list[str]:
    """The lines `status` shows of a running `kind` job's own account of its progress
    (`slots`: each worker's); none for a computation that gives none."""
    path = _PROGRESS.get(kind)
    if path is None or not detail:
        return []
    if "error" in detail:
        return [f"detail    {detail['error']}"]
    module, _, function = path.partition(":")
    lines: list[str] = getattr(importlib.import_module(module), function)(detail, slots)
    return lines


declare(
    "monte-carlo",
    MonteCarloRequest,
    "aner_coord.computations.montecarlo:MonteCarlo",
    contract=STREAM_ID,
)
declare(
    "regression",
    RegressionRequest,
    "aner_coord.computations.regression:Regression",
    contract=FIXTURE_ID,
)
declare_result("replicates", "aner_coord.computations.replicates:summarize")
declare(
    "dense",
    DenseRequest,
    "aner_coord.computations.search.replicates:DenseTraining",
    summary="aner_coord.computations.dense.summary:summarize",
    contract="aner-dense/v1",
)
declare(
    "search",
    SearchRequest,
    "aner_coord.computations.search.computation:Search",
    summary="aner_coord.computations.search.summary:summarize",
    progress="aner_coord.computations.search.summary:progress",
    contract="aner-search/v1",
)
