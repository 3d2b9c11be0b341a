"""A computation chosen by name (docs/contracts.md, section 15): `aner parallel run
--computation NAME --param NAME=VALUE` and `parallel.run(NAME, params={...})` make its request
here, by one check, so that the command line and the API refuse the same things in the same
words: an unknown name is one line listing those installed (or the reason a plugin of that
name was left out), a parameter unknown, of the wrong type or out of its declared range one
line naming the plugin and what to change, all before any worker starts.

A simulation's `params` are its declared parameters; any other computation (a plugin's
general interface, or aner's own) takes its request type's fields as `params`, so the name
alone never needs a command of its own. Light: no numpy.
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.computations import COMPUTATIONS, problems, request_type_of
from aner_coord.computations.simulation.request import SimulationRequest, params_of
from aner_coord.errors import RequestError
from aner_coord.requests import ComputationRequest
from aner_worker.plugins import Found, Simulation, discover

# The options every simulation's request has besides `params`: samples, seed, replicates.
SIMULATION_OPTIONS = tuple(f.name for f in msgspec.structs.fields(SimulationRequest))


def label_of(found: Found) -> str:
    """How a refusal names a computation: `asian (plugin aner-asian 0.1.0)`."""
    if found.builtin:
        return f"{found.name} (aner's own)"
    return f"{found.name} (plugin {found.distribution} {found.version})"


def installed() -> list[str]:
    """The names of the computations installed, aner's own first."""
    COMPUTATIONS.ensure_declared()
    return [f.name for f in discover().found if f.name in COMPUTATIONS]


def found_named(name: str) -> Found:
    """The installed computation `name`, or one line listing those there are (and, for a
    plugin of that name that was left out, why)."""
    found = discover().get(name)
    if found is not None and name in installed():
        return found
    quoted = repr(name)
    for problem in problems():
        if f"computation {quoted}:" in problem:
            raise RequestError(f"computation {quoted} is not available: {problem}")
    raise RequestError(
        f"no computation {quoted} is installed; installed: {', '.join(installed())} "
        "(`aner parallel capabilities` lists them; a plugin is a distribution installed "
        "with pip)"
    )


def named_request(
    name: str, options: dict[str, Any], params: dict[str, Any], *, text: bool
) -> ComputationRequest:
    """The request of computation `name` with `options` (samples, seed, replicates: the
    job command's own) and `params` (`text`: values as typed on a command line), or a
    RequestError naming the computation and what to change."""
    found = found_named(name)
    kind = request_type_of(name)
    declaration = found.declaration
    if isinstance(declaration, Simulation):
        checked = params_of(name, declaration, params, text=text, label=label_of(found))
        given = {**options, "params": msgspec.to_builtins(checked)}
    else:
        given = {**options, **params}
    fields = {f.name: f for f in msgspec.structs.fields(kind)}
    for key in given:
        if key not in fields:
            takes = ", ".join(f for f in fields if f != "kind")
            raise RequestError(f"{label_of(found)} has no option {key!r} (it takes: {takes})")
    missing = [f.name for f in fields.values() if f.required and f.name not in given]
    if missing:
        raise RequestError(
            f"{label_of(found)} needs " + ", ".join("{" + m + "}" for m in missing), *missing
        )
    try:
        request: ComputationRequest = msgspec.convert(given, kind, strict=not text)
    except msgspec.ValidationError as exc:
        # msgspec's "Expected `int`, got `str` - at `$.samples`", the option named as the
        # caller spells it (`samples=`, `--samples`).
        message, _, where = str(exc).partition(" - at `$.")
        field = where.rstrip("`").split(".")[0].split("[")[0]
        said = message[0].lower() + message[1:] if message else "invalid"
        if field in given:
            raise RequestError(f"{label_of(found)}: {{{field}}} {said}", field) from None
        raise RequestError(f"{label_of(found)}: {said}") from None
    return request
