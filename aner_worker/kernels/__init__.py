"""The kernels a worker can run, by name: the worker halves of the computations.

- `base`: what a kernel is (`Kernel`, `Stopped`) and how its Structs travel (`encode`,
  `decode`); `identities`: the stream and fixture identities, stated once (light);
- `montecarlo` and `philox`: the Monte Carlo estimate of pi and its numba Philox stream;
- `regression` and `fixture`: the logistic regression fixture and its numba pass;
- `dense/`: the Dense classifier (data sets, streams, the network's forward and backward,
  the training plan and optimizers);
- `search/`: model search and cross-validation, whole Dense fits each on one slot.

`KERNELS` lists every kernel by name without importing any: each is declared by its
`module:Class` path and imported the first time it is asked for, so a worker loads only the
kernels its job names. Each kernel's coordinator half lives in `aner_coord.computations`
under the same name. Adding a workload: a kernel module here, declared below.
"""

from __future__ import annotations

from aner_worker.kernels.base import Kernel, StopCheck, Stopped, decode, encode
from aner_worker.registry import LazyRegistry

__all__ = ["KERNELS", "Kernel", "StopCheck", "Stopped", "decode", "encode", "register"]

KERNELS: LazyRegistry[Kernel] = LazyRegistry("kernel")


def register(kernel: Kernel) -> Kernel:
    """Register a kernel object under its name (a test's or a plug-in's). A name taken by
    another kernel, loaded or only declared, is refused: whether a built-in had been
    imported yet must not decide whether it can be replaced."""
    if kernel.name in KERNELS and type(KERNELS[kernel.name]) is not type(kernel):
        raise ValueError(f"a different kernel named {kernel.name!r} is already registered")
    KERNELS[kernel.name] = kernel
    return kernel


KERNELS.declare("monte-carlo", "aner_worker.kernels.montecarlo:MonteCarloKernel")
KERNELS.declare("regression", "aner_worker.kernels.regression:RegressionKernel")
KERNELS.declare("dense", "aner_worker.kernels.dense.kernel:DenseKernel")
KERNELS.declare("search", "aner_worker.kernels.search.kernel:SearchKernel")
