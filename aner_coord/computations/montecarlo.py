"""Monte Carlo estimate of pi (docs/contracts.md, section 1): one pass whose hits are integer sums,
so neither the chunking nor the completion order can change them."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from msgspec import Meta

from aner_coord.computations.base import Accounting, Admitted, PassSpec
from aner_coord.jobdir.results import ResultBase
from aner_coord.limits import DEFAULT_CHUNK, check_items, check_seed
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.identities import STREAM_ID
from aner_worker.kernels.montecarlo import McParams, McStats, MonteCarloKernel

_P = math.pi / 4
# A chunk's hits lie this many standard deviations from pi/4 of its samples only for a
# worker that does not compute the stream: no honest chunk of the stream comes near it.
_SIGMAS = 12


class MonteCarloRequest(ComputationRequest, frozen=True, tag="monte-carlo"):
    """Estimate pi from `samples` samples of the Philox stream of `seed` (docs/contracts.md, section
    1)."""

    samples: Annotated[int, Meta(description="number of samples (1e9, 1,000,000...)")]


class MonteCarloResult(ResultBase, frozen=True, tag="monte-carlo"):
    """The estimate of pi and exactly how it was obtained."""

    stream: str
    seed: int
    samples: int
    hits: int
    estimate: float

    @property
    def throughput(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"{self.samples:,} samples, seed {self.seed}: {self.hits:,} hits, "
            f"pi ~ {self.estimate:.10f} | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s, {self.throughput / 1e6:,.1f} M samples/s"
        )


class MonteCarlo:
    kind: ClassVar[str] = "monte-carlo"
    unit: ClassVar[str] = "samples"
    request_type: ClassVar[type[MonteCarloRequest]] = MonteCarloRequest
    kernel: ClassVar[MonteCarloKernel] = MonteCarloKernel()
    default_chunk: ClassVar[int] = DEFAULT_CHUNK
    seconds_per_item: ClassVar[float] = 1 / 150e6

    def admit(self, request: MonteCarloRequest) -> Admitted:
        check_seed(request.seed)
        samples = check_items("samples", request.samples, self.unit)
        return Admitted(
            items=samples,
            passes=1,
            identity=STREAM_ID,
            describe={"samples": samples, "seed": request.seed},
        )

    def start(self, request: MonteCarloRequest, chunk: int) -> _Run:
        return _Run(request)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return [
            f"estimate  pi ~ {float(result['estimate']):.10f}",
            f"hits      {int(result['hits']):,} of {int(result['samples']):,} samples",
        ]


class _Run:
    durable_chunks: ClassVar[bool] = True

    def __init__(self, request: MonteCarloRequest) -> None:
        self._request = request
        self._hits = 0
        self._passes_begun = 0

    def next_pass(self) -> PassSpec | None:
        if self._passes_begun:
            return None
        self._passes_begun = 1
        return PassSpec(self._request.samples, McParams(self._request.seed), "sampling")

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, McStats):
            return f"expected Monte Carlo statistics, got {type(stats).__name__}"
        if not 0 <= stats.hits <= count:
            return f"{stats.hits} hits is impossible for {count} samples"
        spread = _SIGMAS * math.sqrt(count * _P * (1 - _P)) + _SIGMAS
        if abs(stats.hits - count * _P) > spread:
            return (
                f"{stats.hits:,} hits in {count:,} samples is more than {_SIGMAS} standard "
                "deviations from pi/4: not the stream's samples"
            )
        return None

    def accept(self, chunk: int, stats: McStats) -> None:
        self._hits += stats.hits

    def commit(self) -> None:
        return None

    def same(self, a: McStats, b: McStats) -> bool:
        return bool(a.hits == b.hits)

    @property
    def committed_steps(self) -> int | None:
        return None

    def result(self, accounting: Accounting) -> MonteCarloResult:
        samples = self._request.samples
        return MonteCarloResult(
            stream=STREAM_ID,
            seed=self._request.seed,
            samples=samples,
            hits=self._hits,
            estimate=4 * self._hits / samples,
            seconds=accounting.seconds,
            execution=accounting.execution,
            workers=list(accounting.workers),
            losses=list(accounting.losses),
        )
