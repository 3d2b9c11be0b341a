"""The fixture kernel against an independent numpy reading of docs/contracts.md, section 2.

The reference below is written from the SPEC text alone, with words taken straight from
``numpy.random.Philox``; it shares no code with the kernel or with ``aner_worker.oracle``.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from aner_worker.kernels.fixture import FixtureStats, _feature, fixture_pass, warm_up
from aner_worker.kernels.identities import FIXTURE_ID
from aner_worker.kernels.philox import RANGE_LIMIT

U64 = 2**64
TOL = 1e-10

ZERO = (0.0,) * 9
MILD = (0.3, -0.2, 0.1, 0.05, -0.4, 0.2, 0.1, 0.5, -0.1)
TEACHERISH = (1.4, -1.9, 1.1, -0.6, 0.7, -1.2, 0.45, 2.1, 0.2)
# Saturates the sigmoid: |s| reaches hundreds, exp(-s) overflows for some rows.
STEEP = (300.0, -250.0, 120.0, 80.0, -90.0, 60.0, 40.0, -700.0, 5.0)


def _raw(seed: int, stream: int, first_word: int, n: int) -> npt.NDArray[np.uint64]:
    # numpy advances its counter before each block: counter b - 1 starts at block b.
    block, skip = divmod(first_word, 4)
    generator = np.random.Philox(key=seed + (stream << 64), counter=(block - 1) % 2**256)
    words: npt.NDArray[np.uint64] = generator.random_raw(skip + n)[skip:]
    return words


def reference(
    seed: int, start: int, count: int, theta: tuple[float, ...]
) -> tuple[npt.NDArray[np.float64], float, int, int]:
    w1 = _raw(seed, 1, 8 * start, 8 * count).reshape(count, 8)
    f = (w1 >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0
    u = (_raw(seed, 2, start, count) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    t = (1.5, -2.0, 1.0, -0.5, 0.75, -1.25, 0.5, 2.0)
    z = t[0] * f[:, 0] + t[1] * f[:, 1]
    for j in range(2, 8):
        z = z + t[j] * f[:, j]
    z = z + 0.25
    y = np.where(z + 3.0 * (u - 0.5) > 0.0, 1.0, 0.0)
    s = theta[0] * f[:, 0]
    for j in range(1, 8):
        s = s + theta[j] * f[:, j]
    s = s + theta[8]
    with np.errstate(over="ignore"):
        p = 1.0 / (1.0 + np.exp(-s))
    d = p - y
    grad = np.concatenate([(d[:, None] * f).sum(axis=0), [d.sum()]])
    loss = float(np.sum(np.maximum(s, 0.0) - y * s + np.log1p(np.exp(-np.abs(s)))))
    correct = int(np.sum((s >= 0.0) == (y == 1.0)))
    return grad, loss, correct, count


def assert_close(got: FixtureStats, want: tuple[npt.NDArray[np.float64], float, int, int]) -> None:
    grad, loss, correct, valid = want
    scale = max(valid, 1)
    assert got.valid == valid
    assert got.correct == correct
    assert np.max(np.abs(np.array(got.grad) - grad)) / scale <= TOL
    assert abs(got.loss_sum - loss) / scale <= TOL


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    warm_up()


@pytest.mark.parametrize(
    "theta", [ZERO, MILD, TEACHERISH, STEEP], ids=["zero", "mild", "teacher", "steep"]
)
@pytest.mark.parametrize(
    ("seed", "start", "count"),
    [
        (0, 0, 1),
        (42, 0, 4096),
        (42, 3, 1000),
        (7, 1023, 3001),
        (U64 - 1, 5, 2049),
        (123_456_789, 2**40 + 1, 777),
        (9, RANGE_LIMIT - 700, 700),
    ],
)
def test_matches_reference(seed: int, start: int, count: int, theta: tuple[float, ...]) -> None:
    assert_close(fixture_pass(seed, start, count, theta), reference(seed, start, count, theta))


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, U64 - 1),
    start=st.one_of(st.integers(0, 10**6), st.integers(0, RANGE_LIMIT - 400)),
    count=st.integers(0, 400),
    theta=st.tuples(*[st.floats(-3.0, 3.0)] * 9),
)
def test_matches_reference_property(
    seed: int, start: int, count: int, theta: tuple[float, ...]
) -> None:
    assert_close(fixture_pass(seed, start, count, theta), reference(seed, start, count, theta))


def test_zero_theta_closed_form() -> None:
    # With theta = 0 every row has p = 1/2, loss log 2 and prediction 1 (s = 0 >= 0), so
    # the correct count is the number of positive labels and the bias gradient is
    # n/2 - positives, a sum of halves that binary64 holds exactly.
    n = 5000
    stats = fixture_pass(11, 17, n, ZERO)
    positives = stats.correct
    assert stats.grad[8] == n / 2 - positives
    assert stats.loss_sum == pytest.approx(n * np.log(2.0), rel=1e-13)
    # The labels are informative, not constant.
    assert 0.3 * n < positives < 0.7 * n


def test_empty_range() -> None:
    stats = fixture_pass(3, 100, 0, MILD)
    assert stats == FixtureStats(grad=(0.0,) * 9, loss_sum=0.0, correct=0, valid=0)


@pytest.mark.parametrize("theta", [ZERO, MILD, STEEP], ids=["zero", "mild", "steep"])
def test_uneven_chunks_sum_to_the_whole(theta: tuple[float, ...]) -> None:
    seed, start, count = 2024, 12_345, 50_000
    whole = fixture_pass(seed, start, count, theta)
    cuts = [start, start + 1, start + 4, start + 1_025, start + 17_000, start + 49_999]
    bounds = [*cuts, start + count]
    parts = [fixture_pass(seed, a, b - a, theta) for a, b in itertools.pairwise(bounds)]
    assert sum(p.valid for p in parts) == whole.valid == count
    assert sum(p.correct for p in parts) == whole.correct
    grad = np.sum([p.grad for p in parts], axis=0)
    assert np.max(np.abs(grad - np.array(whole.grad))) / count <= TOL
    assert abs(sum(p.loss_sum for p in parts) - whole.loss_sum) / count <= TOL


@njit
def _feature_of(w):  # type: ignore[no-untyped-def]
    return _feature(w)


def test_feature_range() -> None:
    assert _feature_of(np.uint64(0)) == -1.0
    assert _feature_of(np.uint64(U64 - 1)) == 1.0 - 2.0**-52
    assert _feature_of(np.uint64(1 << 63)) == 0.0
    w1 = _raw(5, 1, 0, 8 * 20_000)
    f = (w1 >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0
    assert f.min() >= -1.0
    assert f.max() < 1.0
    assert f.mean() == pytest.approx(0.0, abs=0.01)


def test_stats_are_plain_and_frozen() -> None:
    stats = fixture_pass(1, 0, 10, MILD)
    assert FIXTURE_ID == "aner-fixture/logistic/v1"
    assert len(stats.grad) == 9
    assert all(type(g) is float for g in stats.grad)
    assert type(stats.loss_sum) is float
    assert type(stats.correct) is int
    assert type(stats.valid) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.valid = 3  # type: ignore[misc]


@pytest.mark.parametrize("theta", [(0.0,) * 8, (0.0,) * 10, ((0.0,) * 9,)])
def test_rejects_wrong_theta(theta: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        fixture_pass(1, 0, 10, theta)


@pytest.mark.parametrize(
    ("seed", "start", "count"),
    [(-1, 0, 1), (U64, 0, 1), (0, -1, 1), (0, 0, -1), (0, RANGE_LIMIT, 1)],
)
def test_rejects_out_of_range(seed: int, start: int, count: int) -> None:
    with pytest.raises(ValueError):
        fixture_pass(seed, start, count, ZERO)
