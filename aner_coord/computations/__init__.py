"""The registry of computations, by kind. Adding a workload: an installed distribution
whose entry point in the group "aner.computations" declares both halves (docs/contracts.md,
section 15; aner's own are declared so in its `pyproject.toml`), or a test's `register()`
call with an instance.

- `base`: what a computation is (`Computation`, `Admitted`, the pass and accounting types);
- `montecarlo`, `regression`: the two built-in computations of one module each;
  `replicates`: the seeds of replicates and the aggregation rule over them;
- `dense/`: Dense classifier training; `search/`: model search and cross-validation;
- `display`: how a fitted result shows itself in a notebook (a short repr, an HTML table);
- `plugins`: an installed plugin's halves, checked against the interface, and the request
  type a simulation's declaration implies; `simulation/`: the simulation kit's coordinator
  half; `named`: a computation's request made from its name and options (`aner parallel
  run --computation NAME`, `parallel.run(NAME, ...)`), by one check.

Every computation installed (aner's own and each plugin's, `aner_worker.plugins`) is
declared by kind, request type and `module:Class` path and imported when a job first needs
one: `status`, `cancel` and a Monte Carlo run never import the Dense computation (numpy, and
numba through its data streams). `summarize` shows a
completed job's result, and `progress_lines` a running job's own account of its progress
(`status.json`'s detail), from light modules only.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from aner_coord.computations.base import (
    Accounting,
    Admitted,
    Computation,
    Diverged,
    PassSpec,
    Run,
)
from aner_coord.computations.plugins import declared_request, plugin_computation
from aner_coord.errors import RequestError
from aner_coord.requests import ComputationRequest
from aner_worker.plugins import Found, Plugin, discover
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
    "declare_found",
    "declare_result",
    "plugin_of",
    "problems",
    "progress_lines",
    "register",
    "request_type_of",
    "request_types",
    "summarize",
]


def _declare_installed() -> None:
    for found in discover().found:
        declare_found(found)


COMPUTATIONS: LazyRegistry[Computation] = LazyRegistry("computation", _declare_installed)
# Declared (not yet imported) computations: the kind of each request type, and where the
# lines that `status` shows of a result come from when that is not the computation itself.
_KINDS: dict[type[ComputationRequest], str] = {}
_SUMMARIES: dict[str, str] = {}
_PROGRESS: dict[str, str] = {}
# The contract identity of each declared kind (docs/contracts.md), for the capability report.
_CONTRACTS: dict[str, str] = {}
# The plugins left out here (a request type that cannot be had), beside discovery's.
_PROBLEMS: list[str] = []


def register(computation: Computation) -> Computation:
    COMPUTATIONS[computation.kind] = computation
    request_types.cache_clear()
    return computation


def declare(
    kind: str,
    request_type: type[ComputationRequest],
    path: str | Callable[[], Computation],
    summary: str | None = None,
    progress: str | None = None,
    contract: str | None = None,
) -> None:
    """`kind` is computed by `path` (`module:Class`, or a function that makes it), made
    when a job first needs it;
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


def declare_found(found: Found) -> None:
    """Declare the computation an installed distribution declares (aner's own included); a
    plugin whose request type cannot be had is left out, its problem kept (`problems`)."""
    declaration = found.declaration
    request = declared_request(found)
    if isinstance(request, str):
        _PROBLEMS.append(request)
        return
    if found.builtin and isinstance(declaration, Plugin):
        path: str | Callable[[], Computation] = declaration.computation
    else:
        path = plugin_computation(found)
    summary = declaration.summary if isinstance(declaration, Plugin) else None
    progress = declaration.progress if isinstance(declaration, Plugin) else None
    declare(found.name, request, path, summary, progress, declaration.contract)


def problems() -> list[str]:
    """One line for each installed plugin left out, naming its distribution and why."""
    COMPUTATIONS.ensure_declared()
    return [*discover().problems, *_PROBLEMS]


def plugin_of(kind: str) -> Found | None:
    """The installed plugin that declares `kind` (None: aner's own, or none)."""
    found = discover().get(kind)
    return None if found is None or found.builtin else found


def declare_result(tag: str, summary: str) -> None:
    """A result tagged `tag` that is not its computation's kind (a computation's replicates)
    is shown by `summary` (`module:function`)."""
    _SUMMARIES[tag] = summary


def computation_for(request: ComputationRequest) -> Computation:
    COMPUTATIONS.ensure_declared()
    kind = _KINDS.get(type(request))
    if kind is not None and kind in COMPUTATIONS:
        return COMPUTATIONS[kind]
    for name in COMPUTATIONS:
        if COMPUTATIONS.loaded(name) and type(request) is COMPUTATIONS[name].request_type:
            return COMPUTATIONS[name]
    raise RequestError(f"no computation is registered for {type(request).__name__}")


def contract_of(kind: str) -> str | None:
    """The contract identity `kind` was declared with (None for one registered without)."""
    COMPUTATIONS.ensure_declared()
    return _CONTRACTS.get(kind)


def request_type_of(kind: str) -> type[ComputationRequest]:
    """The request type of `kind`, without importing its computation."""
    COMPUTATIONS.ensure_declared()
    if COMPUTATIONS.loaded(kind):
        return COMPUTATIONS[kind].request_type
    return next(t for t, k in _KINDS.items() if k == kind)


@functools.cache
def request_types() -> Any:
    """The tagged union of every registered request type (for decoding spec files)."""
    COMPUTATIONS.ensure_declared()
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
    COMPUTATIONS.ensure_declared()
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
    COMPUTATIONS.ensure_declared()
    path = _PROGRESS.get(kind)
    if path is None or not detail:
        return []
    if "error" in detail:
        return [f"detail    {detail['error']}"]
    module, _, function = path.partition(":")
    lines: list[str] = getattr(importlib.import_module(module), function)(detail, slots)
    return lines


declare_result("replicates", "aner_coord.computations.replicates:summarize")
declare_result("simulation", "aner_coord.computations.simulation.result:summarize")
