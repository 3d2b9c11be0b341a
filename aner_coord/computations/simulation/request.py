"""The request type a `Simulation`'s declaration implies (docs/contracts.md, section 15): the
computation's name as its tag, `samples`, `seed`, `replicates`, and `params`, a Struct of the
declared parameters, each a float (or an int) bounded by its `Meta(ge=, le=)`.

`params_of` turns what a user gave (`--param NAME=VALUE` text, or `params={...}` in the API)
into that Struct, or one line naming the simulation and what to change. Light: no numpy.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, cast

import msgspec
from msgspec import Meta

from aner_coord.errors import RequestError
from aner_coord.requests import ComputationRequest, SampleReplicates
from aner_worker.plugins.declaration import Param, Simulation


class SimulationRequest(ComputationRequest, frozen=True):
    """What every simulation's request has; each simulation's type adds its `params`."""

    samples: Annotated[int, Meta(description="samples (1e6, 1,000,000...)")]
    replicates: SampleReplicates = 1


def _annotation(param: Param) -> Any:
    meta = Meta(ge=param.ge, le=param.le, description=param.description or param.name)
    if param.kind == "int":
        whole = Meta(ge=int(param.ge), le=int(param.le), description=meta.description)
        return Annotated[int, whole]
    return Annotated[float, meta]


def _default(param: Param) -> float | int:
    return int(param.default) if param.kind == "int" else float(param.default)


@functools.cache
def _types(name: str, simulation: Simulation) -> tuple[type[Any], type[SimulationRequest]]:
    params = msgspec.defstruct(
        f"{name}-params",
        [(p.name, _annotation(p), _default(p)) for p in simulation.params],
        frozen=True,
        forbid_unknown_fields=True,
        kw_only=True,
    )
    request = msgspec.defstruct(
        f"{name}-request",
        [("params", params, msgspec.field(default_factory=params))],
        bases=(SimulationRequest,),
        tag=name,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )
    return params, cast(type[SimulationRequest], request)


def request_type(name: str, simulation: Simulation) -> type[SimulationRequest]:
    """The request type of simulation `name` (the same type for one declaration)."""
    return _types(name, simulation)[1]


def params_type(name: str, simulation: Simulation) -> type[Any]:
    return _types(name, simulation)[0]


def _range(param: Param) -> str:
    lo, hi = (int(param.ge), int(param.le)) if param.kind == "int" else (param.ge, param.le)
    return f"{'a whole number' if param.kind == 'int' else 'a number'} in [{lo}, {hi}]"


def params_of(
    name: str, simulation: Simulation, given: dict[str, Any], *, text: bool, label: str = ""
) -> Any:
    """The parameters Struct of `given` (`text`: values as typed on a command line), or a
    RequestError naming the simulation (as `label`, if given), the parameter and its range."""
    label = label or name
    declared = {p.name: p for p in simulation.params}
    for key in given:
        if key not in declared:
            names = ", ".join(declared) or "none"
            raise RequestError(f"{label} has no parameter {key!r} (its parameters: {names})")
    kind = params_type(name, simulation)
    for key, value in given.items():
        param = declared[key]
        try:
            msgspec.convert({key: value}, kind, strict=not text)
        except msgspec.ValidationError:
            raise RequestError(
                f"{label}: parameter {key} = {value if text else repr(value)} is not "
                f"{_range(param)}: give one within it"
            ) from None
    return msgspec.convert(given, kind, strict=not text)


def check_params(
    name: str, simulation: Simulation, params: Any, label: str = ""
) -> tuple[float, ...]:
    """The values of a request's `params` (however it was made: a Struct's constructor
    checks no bounds), in declared order, or a RequestError as `params_of` gives."""
    given = msgspec.to_builtins(params)
    if not isinstance(given, dict):
        raise RequestError(f"{label or name}: params must map parameter names to numbers")
    checked = params_of(name, simulation, given, text=False, label=label)
    return tuple(float(getattr(checked, p.name)) for p in simulation.params)
