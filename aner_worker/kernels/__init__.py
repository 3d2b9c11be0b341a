"""The kernels a worker can run, by name: the worker halves of the computations.

- `base`: what a kernel is (`Kernel`, `Stopped`) and how its Structs travel (`encode`,
  `decode`); `identities`: the stream and fixture identities, stated once (light);
- `montecarlo` and `philox`: the Monte Carlo estimate of pi and its numba Philox stream;
- `regression` and `fixture`: the logistic regression fixture and its numba pass;
- `dense/`: the Dense classifier (data sets, streams, the network's forward and backward,
  the training plan and optimizers);
- `search/`: model search and cross-validation, whole Dense fits each on one slot;
- `simulation/`: the simulation kit's kernel, one for each `Simulation` a plugin declares.

`KERNELS` lists every kernel by name without importing any: each computation installed
(`aner_worker.plugins`: aner's own and every plugin's, by entry point) declares its kernel by
its `module:Class` path, imported the first time it is asked for, so a worker loads only the
kernels its job names. Each kernel's coordinator half lives in `aner_coord.computations`
under the same name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from aner_worker.kernels.base import Kernel, StopCheck, Stopped, decode, encode
from aner_worker.plugins import Found, Plugin, Simulation, discover
from aner_worker.registry import LazyRegistry

__all__ = ["KERNELS", "Kernel", "StopCheck", "Stopped", "decode", "encode", "register"]


def register(kernel: Kernel) -> Kernel:
    """Register a kernel object under its name (a test's or a plug-in's). A name taken by
    another kernel, loaded or only declared, is refused: whether a built-in had been
    imported yet must not decide whether it can be replaced."""
    if kernel.name in KERNELS and type(KERNELS[kernel.name]) is not type(kernel):
        raise ValueError(f"a different kernel named {kernel.name!r} is already registered")
    KERNELS[kernel.name] = kernel
    return kernel


class InterfaceError(ImportError):
    """A plugin's kernel is not what its declaration says (docs/contracts.md, section 15)."""


def _plugin_kernel(found: Found) -> Callable[[], Kernel]:
    """What makes the kernel `found` declares, checked against the interface."""

    def make() -> Kernel:
        declaration = found.declaration
        if isinstance(declaration, Simulation):
            from aner_worker.kernels.simulation.kernel import SimulationKernel

            plugin = f"plugin {found.distribution} {found.version}"
            simulation: Kernel = SimulationKernel(found.name, declaration, plugin)  # type: ignore[assignment]
            return simulation
        module, _, attribute = declaration.kernel.partition(":")
        who = f"plugin {found.distribution} {found.version}: computation {found.name!r}"
        try:
            kernel: Kernel = getattr(importlib.import_module(module), attribute)()
        except Exception as exc:  # the plugin's code: say whose it is
            raise InterfaceError(
                f"{who}: cannot make its kernel {declaration.kernel}: {type(exc).__name__}: {exc}"
            ) from exc
        if getattr(kernel, "name", None) != found.name or not all(
            callable(getattr(kernel, method, None)) for method in ("warm_up", "run")
        ):
            raise InterfaceError(
                f"{who}: its kernel {declaration.kernel} is not a Kernel named {found.name!r} "
                "with warm_up() and run() (aner_worker.kernels.base)"
            )
        return kernel

    return make


def _declare_installed() -> None:
    for found in discover().found:
        if found.builtin and isinstance(found.declaration, Plugin):
            KERNELS.declare(found.name, found.declaration.kernel)
        else:
            KERNELS.declare(found.name, _plugin_kernel(found))


KERNELS: LazyRegistry[Kernel] = LazyRegistry("kernel", _declare_installed)
