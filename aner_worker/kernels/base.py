"""What every kernel is: the `Kernel` protocol, the stop signal, and the wire encoding of
a kernel's parameters and statistics (its own msgspec Structs).

A kernel is the worker half of a computation: it takes the frozen parameters of a pass and
an item range and returns sufficient statistics. Local threads call `run` directly with
Structs; worker processes decode `Params.body` with `decode` and send `encode(stats)` back.

`run` honours `should_stop` between sub-ranges of at most a few milliseconds (raising
`Stopped`), so a worker whose coordinator has gone or cancelled stops promptly whatever the
chunk size; the sub-ranges never change the statistics' bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import msgspec

StopCheck = Callable[[], bool]

# The compute precisions this worker's kernels offer, stated in its Welcome: binary64
# always, binary32 where a kernel lets a job declare it (Dense, `kernels.dense.network`).
Precision = Literal["float64", "float32"]
PRECISIONS: tuple[Precision, ...] = ("float64", "float32")


class Stopped(Exception):
    """A kernel was asked to stop between two sub-ranges; its partial sums are discarded."""


@runtime_checkable
class StagesData(Protocol):
    """A kernel that reads file data staged to the worker once per job, before its first task
    (docs/contracts.md, section 9, Data). The worker process asks it, and knows nothing else of the
    data: whether a data set is already held, and what to do with one assembled from its blocks."""

    def has_staged(self, dataset: str) -> bool:
        """Whether `dataset` (its SHA256 hex) is already held by this process."""
        ...

    def stage(self, dataset: str, blob: bytes) -> None:
        """Check and keep the assembled data set; ValueError if it is unusable."""
        ...


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


_encoder = msgspec.msgpack.Encoder()


_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def encode(value: object) -> bytes:
    return _encoder.encode(value)


def decode(kind: type[Any], body: bytes | memoryview) -> Any:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    return decoder.decode(body)
