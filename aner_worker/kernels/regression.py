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
    # Replicates (docs/contracts.md, section 16): item `k` of the pass is the whole fit of
    # `rows` rows in `steps` steps at `rate` with the seed `seeds[k]`. Empty: one pass of rows.
    seeds: tuple[int, ...] = ()
    rows: int = 0
    steps: int = 0
    rate: float = 0.0


class RegressionStats(msgspec.Struct, frozen=True, array_like=True):
    grad: tuple[float, ...]
    loss_sum: float
    correct: int
    valid: int
    # With replicates: one `whole_fit` tuple per replicate of the task's range, in order.
    fits: tuple[tuple[float, ...], ...] = ()


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

        if params.seeds:
            if start + count > len(params.seeds):
                raise ValueError(f"no replicate {start + count - 1} among {len(params.seeds)}")
            fits = tuple(
                whole_fit(seed, params.rows, params.steps, params.rate, should_stop)
                for seed in params.seeds[start : start + count]
            )
            return RegressionStats((), 0.0, 0, count, fits)
        stats = fixture_pass(params.seed, start, count, params.theta, should_stop)
        return RegressionStats(stats.grad, stats.loss_sum, stats.correct, stats.valid)


def whole_fit(
    seed: int, rows: int, steps: int, rate: float, should_stop: StopCheck | None
) -> tuple[float, ...]:
    """One whole fit of the fixture in this process, as docs/contracts.md, section 2 defines
    it: `(initial_loss, initial_accuracy, final_loss, fit_accuracy, *theta)`. The first
    step's gradient is the initial metrics pass's (both use the zero parameters)."""
    from aner_worker.kernels.fixture import fixture_pass
    from aner_worker.kernels.identities import N_PARAMS

    theta: tuple[float, ...] = (0.0,) * N_PARAMS
    stats = fixture_pass(seed, 0, rows, theta, should_stop)
    initial = (stats.loss_sum / rows, stats.correct / rows)
    for step in range(steps):
        if step:
            stats = fixture_pass(seed, 0, rows, theta, should_stop)
        theta = tuple(t - rate * g / rows for t, g in zip(theta, stats.grad, strict=True))
    final = fixture_pass(seed, 0, rows, theta, should_stop)
    return (*initial, final.loss_sum / rows, final.correct / rows, *theta)
