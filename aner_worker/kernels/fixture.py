"""The analytic training fixture ``aner-fixture/logistic/v1`` (docs/contracts.md, section 2) as a
numba kernel.

A worker evaluates a range of rows under frozen parameters and returns the sufficient
statistics of one full-batch logistic-regression step: the nine gradient sums, the loss sum,
the number of correct predictions and the number of rows accepted. Rows are regenerated from
their global index, so no data is ever shipped.

numba's cache keys a kernel on its own source file only: the kernel here inlines
``philox_block`` from ``philox.py``, so a change there needs ``__pycache__`` cleared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from aner_worker.kernels.base import Stopped
from aner_worker.kernels.identities import N_PARAMS
from aner_worker.kernels.philox import check_range, philox_block

FEATURE_STREAM = 1
NOISE_STREAM = 2

# Teacher weights and intercept, as docs/contracts.md, section 2 fixes them.
_T0, _T1, _T2, _T3 = 1.5, -2.0, 1.0, -0.5
_T4, _T5, _T6, _T7 = 0.75, -1.25, 0.5, 2.0
_T_INTERCEPT = 0.25

_SHIFT = np.uint64(11)
_TWO_M52 = 2.0**-52
_TWO_M53 = 2.0**-53

# Rows summed into local partials before they join the running totals. Sequential
# summation over millions of rows would let rounding error grow with the chunk size; two
# levels keep the sums of different chunkings within the contract's 1e-10 of each other.
_BLOCK_ROWS = 1024


@dataclass(frozen=True)
class FixtureStats:
    """Sufficient statistics of a row range under frozen ``theta``."""

    grad: tuple[float, ...]
    loss_sum: float
    correct: int
    valid: int


@njit(inline="always", nogil=True, cache=True)
def _feature(w):  # type: ignore[no-untyped-def]
    # (w >> 11) * 2**-52 - 1.0 lies in [-1, 1) exactly; w >> 11 fits int64, and the signed
    # conversion is the cheap one.
    return np.float64(np.int64(w >> _SHIFT)) * _TWO_M52 - 1.0


@njit(inline="always", nogil=True, cache=True)
def _label(f, u):  # type: ignore[no-untyped-def]
    """The teacher's label (1.0 or 0.0) of a row with features ``f`` and noise ``u``."""
    # Left to right, exactly as the contract writes it, so every implementation agrees.
    z = _T0 * f[0] + _T1 * f[1]
    z = z + _T2 * f[2]
    z = z + _T3 * f[3]
    z = z + _T4 * f[4]
    z = z + _T5 * f[5]
    z = z + _T6 * f[6]
    z = z + _T7 * f[7]
    z = z + _T_INTERCEPT
    return 1.0 if z + 3.0 * (u - 0.5) > 0.0 else 0.0


@njit(inline="always", nogil=True, cache=True)
def _score(th, f):  # type: ignore[no-untyped-def]
    """The model's score ``s`` of a row: weights ``th[0..7]``, bias ``th[8]``."""
    s = th[0] * f[0] + th[1] * f[1]
    s = s + th[2] * f[2]
    s = s + th[3] * f[3]
    s = s + th[4] * f[4]
    s = s + th[5] * f[5]
    s = s + th[6] * f[6]
    s = s + th[7] * f[7]
    return s + th[8]


@njit(inline="always", nogil=True, cache=True)
def _add_block(seed, first, stop, th, grad, noise):  # type: ignore[no-untyped-def]
    """Adds the gradient of rows ``[first, stop)``, summed apart, to ``grad``; returns their
    ``(loss, correct, valid)`` and the noise block the last row read from."""
    feature_key = np.uint64(FEATURE_STREAM)
    noise_key = np.uint64(NOISE_STREAM)
    g0 = g1 = g2 = g3 = g4 = g5 = g6 = g7 = g8 = 0.0
    part_loss = 0.0
    correct = 0
    for r in range(first, stop):
        a = philox_block(np.uint64(2 * r), seed, feature_key)
        b = philox_block(np.uint64(2 * r + 1), seed, feature_key)
        f = (
            _feature(a[0]),
            _feature(a[1]),
            _feature(a[2]),
            _feature(a[3]),
            _feature(b[0]),
            _feature(b[1]),
            _feature(b[2]),
            _feature(b[3]),
        )
        lane = r & 3
        if lane == 0:
            noise = philox_block(np.uint64(r >> 2), seed, noise_key)
        y = _label(f, np.float64(np.int64(noise[lane] >> _SHIFT)) * _TWO_M53)
        s = _score(th, f)
        d = 1.0 / (1.0 + np.exp(-s)) - y
        g0 += d * f[0]
        g1 += d * f[1]
        g2 += d * f[2]
        g3 += d * f[3]
        g4 += d * f[4]
        g5 += d * f[5]
        g6 += d * f[6]
        g7 += d * f[7]
        g8 += d
        part_loss += max(s, 0.0) - y * s + np.log1p(np.exp(-abs(s)))
        if (s >= 0.0) == (y == 1.0):
            correct += 1
    grad[0] += g0
    grad[1] += g1
    grad[2] += g2
    grad[3] += g3
    grad[4] += g4
    grad[5] += g5
    grad[6] += g6
    grad[7] += g7
    grad[8] += g8
    return part_loss, correct, stop - first, noise


@njit(nogil=True, cache=True)
def _fixture_kernel(seed, start, count, theta, grad, loss_sum):  # type: ignore[no-untyped-def]
    """Adds rows ``[start, start + count)`` to the running sums ``grad[9]`` (in place) and
    ``loss_sum``; returns ``(loss_sum, correct, valid)``.

    Continuing given sums, block by block, lets a caller cut a chunk into sub-ranges that
    are multiples of ``_BLOCK_ROWS`` and still get bitwise the sums of one call.

    Row ``r`` takes its features from blocks ``2r`` and ``2r + 1`` of stream 1 and its noise
    from word ``r % 4`` of block ``r // 4`` of stream 2. All arithmetic is binary64 without
    fastmath, so no multiply-add is fused and the labels are exact.
    """
    th = (
        theta[0],
        theta[1],
        theta[2],
        theta[3],
        theta[4],
        theta[5],
        theta[6],
        theta[7],
        theta[8],
    )
    correct = 0
    valid = 0
    end = start + count
    noise = philox_block(np.uint64(start >> 2), seed, np.uint64(NOISE_STREAM))
    first = start
    while first < end:
        stop = min(first + _BLOCK_ROWS, end)
        part_loss, part_correct, part_valid, noise = _add_block(seed, first, stop, th, grad, noise)
        loss_sum += part_loss
        correct += part_correct
        valid += part_valid
        first = stop
    return loss_sum, correct, valid


# Rows per uninterrupted kernel call when a caller may ask to stop (a multiple of
# _BLOCK_ROWS, so the sums are bitwise those of one call): about 3 ms of one core.
SUB_ROWS = 64 * _BLOCK_ROWS


def fixture_pass(
    seed: int,
    start: int,
    count: int,
    theta: Sequence[float],
    should_stop: Callable[[], bool] | None = None,
) -> FixtureStats:
    """Fixture statistics of rows ``[start, start + count)`` under frozen ``theta``.

    ``theta`` holds nine numbers: eight feature weights, then the bias. Validation is that
    of ``count_hits`` plus the length of ``theta``. Releases the GIL while it runs. With
    ``should_stop``, the range is computed in sub-ranges of SUB_ROWS and ``Stopped`` is
    raised at the first boundary where it returns True.
    """
    check_range(seed, start, count)
    # Always a fresh writable C-contiguous copy, so one kernel specialisation serves all calls.
    th = np.array(theta, dtype=np.float64)
    if th.shape != (N_PARAMS,):
        raise ValueError(f"theta must hold {N_PARAMS} numbers, got shape {th.shape}")
    grad = np.zeros(N_PARAMS)
    loss_sum = 0.0
    correct = valid = 0
    key = np.uint64(int(seed))
    step = count if should_stop is None else SUB_ROWS
    first, end = start, start + count
    while True:
        n = min(step, end - first)
        loss_sum, c, v = _fixture_kernel(
            key, np.int64(first), np.int64(n), th, grad, np.float64(loss_sum)
        )
        correct += c
        valid += v
        first += n
        if first >= end:
            break
        if should_stop is not None and should_stop():
            raise Stopped(f"stopped at row {first} of [{start}, {end})")
    return FixtureStats(
        grad=tuple(float(g) for g in grad),
        loss_sum=float(loss_sum),
        correct=int(correct),
        valid=int(valid),
    )


def warm_up() -> None:
    """Compile or load from cache the fixture kernel now, not during the first task."""
    fixture_pass(1, 3, 6, [0.0] * N_PARAMS)
