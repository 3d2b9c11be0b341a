"""A third computation that exists only in the tests, installed as a plugin of the general
interface is (docs/contracts.md, section 15): the distribution `aner-toy` in this folder
(`aner_toy-1.0.dist-info`, whose entry point names `toy_plugin:TOY`), found by discovery on
`sys.path` (pyproject.toml's pytest `pythonpath`; a toy worker process puts this folder on
its own). It proves that a workload is one module and its declaration, with no edit to
aner, and lets tests inject a fault at each seam of the job core.

`toy` sums squares over two passes: pass 0 sums `i*i` over items [0, n); pass 1 sums
`(i + shift)**2` where `shift` is pass 0's total modulo 1000, so pass 1 needs pass 0's
committed result (a real barrier). Integers, so any plan gives exactly the same totals, and
an independent formula gives the expected ones.

`fault` names where to raise: "kernel" (the task fails on the worker), "check", "accept",
"commit" or "plan" (the coordinator half raises), "diverge" (the commit reports a
numerical divergence).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from aner_coord.computations import Accounting, Admitted, Diverged, PassSpec
from aner_coord.jobdir.status import WorkerAccount
from aner_coord.limits import check_positive
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.base import Stopped

SHIFT_MODULUS = 1000


class ToyParams(msgspec.Struct, frozen=True, array_like=True):
    shift: int
    fault: str


class ToyStats(msgspec.Struct, frozen=True, array_like=True):
    total: int


class ToyKernel:
    name: ClassVar[str] = "toy"
    params_type: ClassVar[type[Any]] = ToyParams
    stats_type: ClassVar[type[Any]] = ToyStats

    def warm_up(self) -> None:
        return None

    def run(self, params: ToyParams, start: int, count: int, should_stop: Any) -> ToyStats:
        if params.fault == "kernel":
            raise ArithmeticError("injected kernel fault")
        if should_stop is not None and should_stop():
            raise Stopped("stopped before the first item")
        return ToyStats(sum_squares(start + params.shift, count))


def sum_squares(first: int, count: int) -> int:
    """sum of i*i for i in [first, first + count), by formula."""

    def upto(n: int) -> int:  # sum of i*i for i in [0, n)
        return (n - 1) * n * (2 * n - 1) // 6

    return upto(first + count) - upto(first)


class ToyRequest(ComputationRequest, frozen=True, tag="toy"):
    items: int
    fault: str = ""


class ToyResult(msgspec.Struct, frozen=True, kw_only=True, tag_field="computation", tag="toy"):
    items: int
    totals: list[int]
    seconds: float
    workers: list[WorkerAccount]

    def summary(self) -> str:
        return f"toy over {self.items} items: totals {self.totals}"


class Toy:
    kind: ClassVar[str] = "toy"
    unit: ClassVar[str] = "items"
    request_type: ClassVar[type[ToyRequest]] = ToyRequest
    kernel: ClassVar[ToyKernel] = ToyKernel()
    seconds_per_item: ClassVar[float] = 1e-7
    default_chunk: ClassVar[int] = 100

    def admit(self, request: ToyRequest) -> Admitted:
        items = check_positive("items", request.items)
        return Admitted(items=items, passes=2, identity="aner-test/toy/v1", describe={})

    def start(self, request: ToyRequest, chunk: int) -> _ToyRun:
        return _ToyRun(request)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return [f"totals    {result['totals']}"]


class _ToyRun:
    durable_chunks: ClassVar[bool] = True

    def __init__(self, request: ToyRequest) -> None:
        self._request = request
        self._totals: list[int] = []
        self._current = 0
        self._pass = -1

    def next_pass(self) -> PassSpec | None:
        if self._request.fault == "plan" and self._pass == 0:
            raise RuntimeError("injected planning fault")
        if self._pass >= 1:
            return None
        self._pass += 1
        self._current = 0
        shift = self._totals[0] % SHIFT_MODULUS if self._totals else 0
        return PassSpec(
            self._request.items, ToyParams(shift, self._request.fault), f"pass {self._pass}"
        )

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if self._request.fault == "check":
            raise RuntimeError("injected check fault")
        if not isinstance(stats, ToyStats) or stats.total < 0:
            return f"not a toy result: {stats!r}"
        return None

    def accept(self, chunk: int, stats: ToyStats) -> None:
        if self._request.fault == "accept":
            raise RuntimeError("injected accept fault")
        self._current += stats.total

    def commit(self) -> None:
        if self._request.fault == "commit":
            raise RuntimeError("injected commit fault")
        if self._request.fault == "diverge":
            raise Diverged(f"the toy total left the finite range in pass {self._pass}")
        self._totals.append(self._current)

    def same(self, a: ToyStats, b: ToyStats) -> bool:
        return a.total == b.total

    @property
    def committed_steps(self) -> int | None:
        return None

    def result(self, accounting: Accounting) -> ToyResult:
        return ToyResult(
            items=self._request.items,
            totals=self._totals,
            seconds=accounting.seconds,
            workers=list(accounting.workers),
        )


def expected_totals(items: int) -> list[int]:
    first = sum_squares(0, items)
    return [first, sum_squares(first % SHIFT_MODULUS, items)]
