"""The kernel registry and its wire encoding, and stopping between sub-ranges: a kernel asked
to stop raises `Stopped` at a boundary, and one that is never stopped returns bitwise the
statistics of a single uninterrupted call."""

from __future__ import annotations

import msgspec
import pytest

from aner_worker import kernels
from aner_worker.kernels import KERNELS
from aner_worker.kernels.base import Stopped, decode, encode
from aner_worker.kernels.fixture import SUB_ROWS, fixture_pass
from aner_worker.kernels.montecarlo import McParams, McStats
from aner_worker.kernels.philox import SUB_SAMPLES, count_hits
from aner_worker.kernels.regression import RegressionParams, RegressionStats

THETA = (0.5, -0.25, 0.125, 1.0, -1.0, 0.0, 0.75, -0.5, 0.1)


def never() -> bool:
    return False


class StopAfter:
    """A stop check that says stop on its `n`-th call, counting the calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def test_builtin_kernels_are_registered_by_their_kind_names() -> None:
    assert set(KERNELS) >= {"monte-carlo", "regression"}
    assert "fixture" not in KERNELS
    assert KERNELS["monte-carlo"].params_type is McParams
    assert KERNELS["monte-carlo"].stats_type is McStats
    assert KERNELS["regression"].params_type is RegressionParams
    assert KERNELS["regression"].stats_type is RegressionStats


def test_registering_a_different_kernel_under_a_taken_name_is_refused() -> None:
    class Impostor:
        name = "monte-carlo"
        params_type = McParams
        stats_type = McStats

        def warm_up(self) -> None: ...

        def run(self, params: McParams, start: int, count: int, should_stop: object) -> McStats:
            return McStats(count)  # every sample a hit

    with pytest.raises(ValueError, match="a different kernel named 'monte-carlo'"):
        kernels.register(Impostor())  # type: ignore[arg-type]
    assert type(KERNELS["monte-carlo"]).__name__ == "MonteCarloKernel"
    # The same kernel again is harmless (a module imported twice).
    kernels.register(KERNELS["monte-carlo"])


@pytest.mark.parametrize(
    "value",
    [
        McParams(2**64 - 1),
        McStats(7_856_672),
        RegressionParams(3, THETA),
        RegressionStats(THETA, 12.5, 400, 512),
    ],
    ids=type,
)
def test_params_and_stats_round_trip(value: msgspec.Struct) -> None:
    assert decode(type(value), encode(value)) == value


def test_decoding_the_wrong_struct_is_an_error() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(McStats, encode(RegressionStats(THETA, 1.0, 1, 1)))


def test_monte_carlo_kernel_equals_count_hits() -> None:
    kernel = KERNELS["monte-carlo"]
    assert kernel.run(McParams(42), 0, 10_000_000, None) == McStats(7_856_672)
    assert kernel.run(McParams(42), 123, 4_567, never) == McStats(count_hits(42, 123, 4_567))


def test_regression_kernel_equals_fixture_pass() -> None:
    stats = KERNELS["regression"].run(RegressionParams(5, THETA), 10, 3_000, None)
    direct = fixture_pass(5, 10, 3_000, THETA)
    assert stats == RegressionStats(direct.grad, direct.loss_sum, direct.correct, direct.valid)


def test_count_hits_in_sub_ranges_is_bitwise_one_call() -> None:
    count = 2 * SUB_SAMPLES + 12_345  # three sub-ranges, the last uneven
    assert count_hits(9, 77, count, never) == count_hits(9, 77, count)


def test_fixture_in_sub_ranges_is_bitwise_one_call() -> None:
    count = 3 * SUB_ROWS + 17
    split = fixture_pass(11, 5, count, THETA, never)
    whole = fixture_pass(11, 5, count, THETA)
    assert split == whole  # bitwise: the same floats, not merely close


def test_count_hits_stops_at_a_sub_range_boundary() -> None:
    stop = StopAfter(2)
    with pytest.raises(Stopped, match=f"stopped at sample {2 * SUB_SAMPLES} of"):
        count_hits(1, 0, 10 * SUB_SAMPLES, stop)
    assert stop.calls == 2  # asked once per boundary, and no further work after a yes


def test_fixture_stops_at_a_sub_range_boundary() -> None:
    stop = StopAfter(1)
    with pytest.raises(Stopped, match=f"stopped at row {SUB_ROWS} of"):
        fixture_pass(1, 0, 4 * SUB_ROWS, THETA, stop)
    assert stop.calls == 1


def test_a_range_within_one_sub_range_never_asks() -> None:
    stop = StopAfter(1)
    assert count_hits(1, 0, SUB_SAMPLES, stop) == count_hits(1, 0, SUB_SAMPLES)
    assert fixture_pass(1, 0, SUB_ROWS, THETA, stop) == fixture_pass(1, 0, SUB_ROWS, THETA)
    assert stop.calls == 0


def test_kernels_pass_should_stop_through() -> None:
    with pytest.raises(Stopped):
        KERNELS["monte-carlo"].run(McParams(1), 0, 3 * SUB_SAMPLES, StopAfter(1))
    with pytest.raises(Stopped):
        KERNELS["regression"].run(RegressionParams(1, THETA), 0, 3 * SUB_ROWS, StopAfter(1))
