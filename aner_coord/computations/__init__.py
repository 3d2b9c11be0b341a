"""The registry of computations, by kind. Adding a workload: its kernel in `aner_worker`
(registered with `aner_worker.kernels.register`), its coordinator half implementing
`base.Computation`, and one `register()` call."""

from __future__ import annotations

import functools
from typing import Any

from aner_coord.computations.base import (
    Accounting,
    Admitted,
    Computation,
    Diverged,
    PassSpec,
    Run,
)
from aner_coord.errors import RequestError
from aner_coord.requests import ComputationRequest

__all__ = [
    "COMPUTATIONS",
    "Accounting",
    "Admitted",
    "Computation",
    "Diverged",
    "PassSpec",
    "Run",
    "computation_for",
    "register",
    "request_types",
]

COMPUTATIONS: dict[str, Computation] = {}


def register(computation: Computation) -> Computation:
    COMPUTATIONS[computation.kind] = computation
    request_types.cache_clear()
    return computation


def computation_for(request: ComputationRequest) -> Computation:
    for computation in COMPUTATIONS.values():
        if type(request) is computation.request_type:
            return computation
    raise RequestError(f"no computation is registered for {type(request).__name__}")


@functools.cache
def request_types() -> Any:
    """The tagged union of every registered request type (for decoding spec files)."""
    types = tuple(c.request_type for c in COMPUTATIONS.values())
    union: Any = types[0]
    for kind in types[1:]:
        union = union | kind
    return union


def _register_builtins() -> None:
    from aner_coord.computations.dense import Dense
    from aner_coord.computations.montecarlo import MonteCarlo
    from aner_coord.computations.regression import Regression

    register(MonteCarlo())
    register(Regression())
    register(Dense())


_register_builtins()
