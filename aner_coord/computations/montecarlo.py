"""Monte Carlo estimate of pi (docs/contracts.md, section 1): one pass whose hits are integer sums,
so neither the chunking nor the completion order can change them."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from msgspec import Meta

from aner_coord.computations.base import Accounting, Admitted, PassSpec
from aner_coord.computations.display import repr_lines, result_table
from aner_coord.computations.replicates import (
    WHOLE_REPLICATE,
    ReplicatesResult,
    check_replicates,
    replicate_seeds,
    replicates_files,
    replicates_result,
)
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import JobState
from aner_coord.limits import DEFAULT_CHUNK, check_items, check_seed
from aner_coord.requests import ComputationRequest, SampleReplicates
from aner_worker.kernels.identities import STREAM_ID
from aner_worker.kernels.montecarlo import (
    McParams,
    McStats,
    MonteCarloKernel,
    replicate_segments,
)

_P = math.pi / 4
# A chunk's hits lie this many standard deviations from pi/4 of its samples only for a
# worker that does not compute the stream: no honest chunk of the stream comes near it.
_SIGMAS = 12
# The field a replicates summary and chart show.
_HEADLINE = ("estimate",)


class MonteCarloRequest(ComputationRequest, frozen=True, tag="monte-carlo"):
    """Estimate pi from `samples` samples of the Philox stream of `seed` (docs/contracts.md, section
    1)."""

    samples: Annotated[int, Meta(description="number of samples (1e9, 1,000,000...)")]
    replicates: SampleReplicates = 1


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

    def __repr__(self) -> str:
        head = f"MonteCarloResult({self.stream}, seed {self.seed}, {self.samples:,} samples)"
        return repr_lines(head, self.summary(), ("to_dict(): every field, the accounting",))

    def _repr_html_(self) -> str:
        names = ("stream", "seed", "samples", "hits", "estimate", "seconds")
        return result_table("Monte Carlo estimate of pi", self, names, self.summary())


def _plausible(hits: int, count: int) -> str | None:
    if not 0 <= hits <= count:
        return f"{hits} hits is impossible for {count} samples"
    spread = _SIGMAS * math.sqrt(count * _P * (1 - _P)) + _SIGMAS
    if abs(hits - count * _P) > spread:
        return (
            f"{hits:,} hits in {count:,} samples is more than {_SIGMAS} standard "
            "deviations from pi/4: not the stream's samples"
        )
    return None


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
        replicates = check_replicates(request.replicates)
        if replicates == 1:
            return Admitted(
                items=samples,
                passes=1,
                identity=STREAM_ID,
                describe={"samples": samples, "seed": request.seed},
            )
        check_items("samples", samples * replicates, f"{self.unit} in all replicates")
        return Admitted(
            items=samples * replicates,
            passes=1,
            identity=STREAM_ID,
            describe={"samples": samples, "seed": request.seed, "replicates": replicates},
            chunk=samples if samples <= WHOLE_REPLICATE else None,
        )

    def start(self, request: MonteCarloRequest, chunk: int) -> _Run | ReplicatesRun:
        if request.replicates > 1:
            return ReplicatesRun(request, chunk)
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
        if stats.split:
            return "replicate hits from a job without replicates"
        return _plausible(stats.hits, count)

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


class ReplicatesRun:
    """One pass over `replicates * samples` items: item `i` is sample `i % samples` of
    replicate `i // samples`, whose seed is `replicate_seed(seed, i // samples)`. A task
    returns the hits of each replicate its range meets, so tasks and ledger records hold
    whole replicates when the chunk is `samples` (the default up to WHOLE_REPLICATE)."""

    durable_chunks: ClassVar[bool] = True

    def __init__(self, request: MonteCarloRequest, chunk: int) -> None:
        self._request = request
        self._chunk = chunk
        self._seeds = replicate_seeds(request.seed, request.replicates)
        self._hits = [0] * request.replicates
        self._passes_begun = 0

    def next_pass(self) -> PassSpec | None:
        if self._passes_begun:
            return None
        self._passes_begun = 1
        request = self._request
        params = McParams(request.seed, self._seeds, request.samples)
        return PassSpec(request.samples * request.replicates, params, "replicates")

    def _segments(self, start: int, count: int) -> list[tuple[int, int, int]]:
        return replicate_segments(self._request.samples, start, count)

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, McStats):
            return f"expected Monte Carlo statistics, got {type(stats).__name__}"
        segments = self._segments(start, count)
        if len(stats.split) != len(segments) or sum(stats.split) != stats.hits:
            return (
                f"{len(stats.split)} replicate counts summing to {sum(stats.split):,} for a "
                f"range over {len(segments)} replicates with {stats.hits:,} hits"
            )
        for (replicate, _, n), hits in zip(segments, stats.split, strict=True):
            problem = _plausible(hits, n)
            if problem is not None:
                return f"replicate {replicate}: {problem}"
        return None

    def accept(self, chunk: int, stats: McStats) -> None:
        # Chunks are `self._chunk` items from the pass's start (the last keeps the remainder).
        total = self._request.samples * self._request.replicates
        start = chunk * self._chunk
        segments = self._segments(start, min(self._chunk, total - start))
        for (replicate, _, _), hits in zip(segments, stats.split, strict=True):
            self._hits[replicate] += hits

    def commit(self) -> None:
        return None

    def same(self, a: McStats, b: McStats) -> bool:
        return bool(a.hits == b.hits and a.split == b.split)

    @property
    def committed_steps(self) -> int | None:
        return None

    def rows(self) -> list[dict[str, Any]]:
        samples = self._request.samples
        return [
            {"replicate": k, "seed": seed, "hits": hits, "estimate": 4 * hits / samples}
            for k, (seed, hits) in enumerate(zip(self._seeds, self._hits, strict=True))
        ]

    def result(self, accounting: Accounting) -> ReplicatesResult:
        request = self._request
        total = request.samples * request.replicates
        hits = sum(self._hits)
        p = hits / total
        pooled = {
            "samples": total,
            "hits": hits,
            "estimate": 4 * p,
            "standard_error": 4 * math.sqrt(p * (1 - p) / total),
        }
        options = {"samples": request.samples}
        return replicates_result(
            "monte-carlo", STREAM_ID, request.seed, options, self.rows(), _HEADLINE,
            accounting, pooled,
        )  # fmt: skip

    def files(self, state: JobState) -> dict[str, bytes]:
        """`replicates.csv` and `replicates.png` of a completed job."""
        if state is not JobState.COMPLETED:
            return {}
        rows = self.rows()
        title = (
            f"Monte Carlo estimates of pi: {len(rows)} replicates of "
            f"{self._request.samples:,} samples"
        )
        return replicates_files(rows, _HEADLINE, title, {"estimate": ("pi", math.pi)})
