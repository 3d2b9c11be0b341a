"""The worker half of the Monte Carlo estimate of pi (docs/contracts.md, section 1): the
"monte-carlo" kernel, its parameters and statistics. The numba stream itself is in `philox`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from aner_worker.kernels.base import StopCheck


# -- Monte Carlo (docs/contracts.md, section 1)
# --------------------------------------------------------
class McParams(msgspec.Struct, frozen=True, array_like=True):
    seed: int
    # Replicates (docs/contracts.md, section 16): item `i` of the pass is sample
    # `i % samples` of the stream of `seeds[i // samples]`. Empty: one stream, `seed`'s.
    seeds: tuple[int, ...] = ()
    samples: int = 0


class McStats(msgspec.Struct, frozen=True, array_like=True):
    hits: int
    # With replicates: the hits of each replicate the task's range meets, in order.
    split: tuple[int, ...] = ()


class MonteCarloKernel:
    name: ClassVar[str] = "monte-carlo"
    params_type: ClassVar[type[Any]] = McParams
    stats_type: ClassVar[type[Any]] = McStats

    def warm_up(self) -> None:
        from aner_worker.kernels.philox import warm_up

        warm_up()

    def run(
        self, params: McParams, start: int, count: int, should_stop: StopCheck | None
    ) -> McStats:
        from aner_worker.kernels.philox import count_hits

        if not params.seeds:
            return McStats(count_hits(params.seed, start, count, should_stop))
        split = []
        for replicate, first, n in replicate_segments(params.samples, start, count):
            if replicate >= len(params.seeds):
                raise ValueError(f"no replicate {replicate} among {len(params.seeds)}")
            split.append(count_hits(params.seeds[replicate], first, n, should_stop))
        return McStats(sum(split), tuple(split))


def replicate_segments(samples: int, start: int, count: int) -> list[tuple[int, int, int]]:
    """Items [start, start + count) of a replicated pass as (replicate, first sample, count)
    segments, in order; `samples` per replicate."""
    if samples <= 0:
        raise ValueError(f"samples per replicate must be positive, got {samples}")
    out = []
    i, end = start, start + count
    while i < end:
        replicate, first = divmod(i, samples)
        n = min(samples - first, end - i)
        out.append((replicate, first, n))
        i += n
    return out
