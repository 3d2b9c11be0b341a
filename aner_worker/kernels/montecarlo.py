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


class McStats(msgspec.Struct, frozen=True, array_like=True):
    hits: int


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

        return McStats(count_hits(params.seed, start, count, should_stop))
