"""The worker half of the logistic regression fixture (docs/contracts.md, section 2): the
"regression" kernel, its parameters and statistics. The numba pass itself is in `fixture`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from aner_worker.kernels.base import StopCheck


# -- the regression fixture (docs/contracts.md, section 2)
# ---------------------------------------------
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
        from aner_worker.kernels.fixture import warm_up

        warm_up()

    def run(
        self, params: RegressionParams, start: int, count: int, should_stop: StopCheck | None
    ) -> RegressionStats:
        from aner_worker.kernels.fixture import fixture_pass

        stats = fixture_pass(params.seed, start, count, params.theta, should_stop)
        return RegressionStats(stats.grad, stats.loss_sum, stats.correct, stats.valid)
