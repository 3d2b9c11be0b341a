"""The coordinator's side of an installed plugin (docs/contracts.md, section 15): its request
type, had without importing its computation, and the computation, made when a job first
needs it and checked against the interface, so that a plugin's mistake is one line naming
its distribution, never a traceback in aner.

A `Plugin` names its request type; a `Simulation`'s is derived from its declaration
(`simulation.request`). Nothing here imports numpy or numba.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from aner_coord.requests import ComputationRequest
from aner_worker.plugins import Found, Plugin, Simulation

# What a computation object must have (`base.Computation`).
_MEMBERS = ("kind", "unit", "request_type", "kernel", "default_chunk", "seconds_per_item",
            "admit", "start", "summarize")  # fmt: skip


def who(found: Found) -> str:
    """How messages name a plugin's computation: its distribution, version and name."""
    return f"plugin {found.distribution} {found.version}: computation {found.name!r}"


class PluginError(ImportError):
    """A plugin's half is not what its declaration says (docs/contracts.md, section 15)."""


def _imported(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def declared_request(found: Found) -> type[ComputationRequest] | str:
    """The request type of `found`'s computation, or the one line that says why there is
    none: a tagged ComputationRequest whose tag is the computation's name."""
    declaration = found.declaration
    if isinstance(declaration, Simulation):
        from aner_coord.computations.simulation.request import request_type

        return request_type(found.name, declaration)
    assert isinstance(declaration, Plugin)
    try:
        kind = _imported(declaration.request)
    except Exception as exc:  # the plugin's code: say whose it is
        return f"{who(found)}: cannot import {declaration.request}: {type(exc).__name__}: {exc}"
    if not (isinstance(kind, type) and issubclass(kind, ComputationRequest)):
        return f"{who(found)}: {declaration.request} is not a ComputationRequest subclass"
    tag = kind.__struct_config__.tag
    if tag != found.name:
        return f"{who(found)}: its request type's tag is {tag!r}, not {found.name!r}"
    return kind


def plugin_computation(found: Found) -> Callable[[], Any]:
    """What makes `found`'s computation, checked against the interface when made."""

    def make() -> Any:
        declaration = found.declaration
        if isinstance(declaration, Simulation):
            from aner_coord.computations.simulation.computation import SimulationComputation

            return SimulationComputation(found.name, found.distribution, declaration)
        assert isinstance(declaration, Plugin)
        try:
            computation = _imported(declaration.computation)()
        except Exception as exc:
            raise PluginError(
                f"{who(found)}: cannot make its computation {declaration.computation}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        missing = [m for m in _MEMBERS if not hasattr(computation, m)]
        if missing or computation.kind != found.name:
            raise PluginError(
                f"{who(found)}: {declaration.computation} is not a Computation of kind "
                f"{found.name!r}" + (f" (it lacks {', '.join(missing)})" if missing else "")
            )
        return computation

    return make
