"""The kernels a worker can run, by name, and the wire encoding of their parameters and
statistics.

A kernel is the worker half of a computation: it takes the frozen parameters of a pass and
an item range and returns sufficient statistics, as msgspec Structs of its own. Local
threads call `run` directly with Structs; worker processes decode `Params.body` with
`decode_params` and send `encode(stats)` back. The coordinator half of each computation
lives in `aner_coord.computations` and names its kernel.

`run` honours `should_stop` between sub-ranges of at most a few milliseconds (raising
`Stopped`), so a worker whose coordinator has gone or cancelled stops promptly whatever the
chunk size; the sub-ranges never change the statistics' bits.

`KERNELS` lists every kernel by name without importing any: a kernel in a module of its own
(`dense_task`) is declared here by its `module:Class` path and imported the first time it is
asked for, so a worker loads only the kernels its job names.

Adding a workload: a Kernel here or in a module of its own declared below, and its
coordinator half registered in `aner_coord.computations`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import msgspec

from aner_worker.registry import LazyRegistry

__all__ = [
    "KERNELS",
    "Kernel",
    "McParams",
    "McStats",
    "RegressionParams",
    "RegressionStats",
    "Stopped",
    "decode",
    "encode",
    "register",
]

StopCheck = Callable[[], bool]


class Stopped(Exception):
    """A kernel was asked to stop between two sub-ranges; its partial sums are discarded."""


class Kernel(Protocol):
    name: ClassVar[str]
    params_type: ClassVar[type[Any]]
    stats_type: ClassVar[type[Any]]

    def warm_up(self) -> None:
        """Load (or compile, the first time) the kernel before the first real task."""
        ...

    def run(self, params: Any, start: int, count: int, should_stop: StopCheck | None) -> Any:
        """Statistics of items [start, start + count) under `params`."""
        ...


KERNELS: LazyRegistry[Kernel] = LazyRegistry("kernel")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def register(kernel: Kernel) -> Kernel:
    if KERNELS.loaded(kernel.name) and type(KERNELS[kernel.name]) is not type(kernel):
        raise ValueError(f"a different kernel named {kernel.name!r} is already registered")
    KERNELS[kernel.name] = kernel
    return kernel


def encode(value: object) -> bytes:
    return _encoder.encode(value)


def decode(kind: type[Any], body: bytes | memoryview) -> Any:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    return decoder.decode(body)


# -- Monte Carlo (SPEC section 1) --------------------------------------------------------
class McParams(msgspec.Struct, frozen=True, array_like=True):
    seed: int


class McStats(msgspec.Struct, frozen=True, array_like=True):
    hits: int


class MonteCarloKernel:
    name: ClassVar[str] = "monte-carlo"
    params_type: ClassVar[type[Any]] = McParams
    stats_type: ClassVar[type[Any]] = McStats

    def warm_up(self) -> None:
        from aner_worker.philox import warm_up

        warm_up()

    def run(
        self, params: McParams, start: int, count: int, should_stop: StopCheck | None
    ) -> McStats:
        from aner_worker.philox import count_hits

        return McStats(count_hits(params.seed, start, count, should_stop))


# -- the regression fixture (SPEC section 2) ---------------------------------------------
class RegressionParams(msgspec.Struct, frozen=True, array_like=True):
    seed: int
    theta: tuple[float, ...]


class RegressionStats(msgspec.Struct, frozen=True, array_like=True):
    grad: tuple[float, ...]
    loss_sum: float
    correct: int
    valid: int


class RegressionKernel:
    name: ClassVar[str] = "regression"
    params_type: ClassVar[type[Any]] = RegressionParams
    stats_type: ClassVar[type[Any]] = RegressionStats

    def warm_up(self) -> None:
        from aner_worker.fixture import warm_up

        warm_up()

    def run(
        self, params: RegressionParams, start: int, count: int, should_stop: StopCheck | None
    ) -> RegressionStats:
        from aner_worker.fixture import fixture_pass

        stats = fixture_pass(params.seed, start, count, params.theta, should_stop)
        return RegressionStats(stats.grad, stats.loss_sum, stats.correct, stats.valid)


register(MonteCarloKernel())
register(RegressionKernel())
# The Dense classifier's kernel lives in its own module, imported when first asked for.
KERNELS.declare("dense", "aner_worker.dense_task:DenseKernel")
