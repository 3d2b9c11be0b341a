"""Plain-numpy reference for the sample stream (docs/contracts.md, section 1) and the fixture
(section 2).

Nothing here uses numba: the words come from ``numpy.random.Philox``, an implementation of
Philox4x64-10 written by other people, so agreement with the numba kernels is evidence that
both are right. It is vectorised and bounded in memory, but much slower than the kernels;
it is for tests and for benchmark comparisons, not for production runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

MC_STREAM = 0
FEATURE_STREAM = 1
NOISE_STREAM = 2

TEACHER = (1.5, -2.0, 1.0, -0.5, 0.75, -1.25, 0.5, 2.0)
TEACHER_INTERCEPT = 0.25

# Samples (or rows) per vectorised piece: a few tens of MiB of temporaries at most.
PIECE = 2**20
_FIXTURE_PIECE = 2**17

_TWO_M52 = 2.0**-52
_TWO_M53 = 2.0**-53

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]


def _check(seed: int, start: int, count: int) -> None:
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must satisfy 0 <= seed < 2**64, got {seed}")
    if start < 0 or count < 0:
        raise ValueError(f"start and count must be >= 0, got {start} and {count}")


def _bit_generator(seed: int, stream: int, first_word: int) -> tuple[np.random.Philox, int]:
    # numpy increments the counter before computing a block, so counter b - 1 (mod 2**256)
    # makes block b the first one produced; the key's low word is the seed, the high word
    # the stream. Returns the generator and how many leading words to discard.
    block, skip = divmod(first_word, 4)
    bit_generator = np.random.Philox(key=seed + (stream << 64), counter=(block - 1) % 2**256)
    return bit_generator, skip


def words(seed: int, stream: int, first_word: int, n: int) -> U64:
    """Words ``W[first_word .. first_word + n - 1]`` of stream ``(seed, stream)``."""
    bit_generator, skip = _bit_generator(seed, stream, first_word)
    raw: U64 = bit_generator.random_raw(skip + n)
    return raw[skip:]


def _word_pieces(seed: int, stream: int, first_word: int, n: int, piece: int) -> Iterator[U64]:
    # One generator for the whole range: random_raw continues where the last call stopped.
    bit_generator, skip = _bit_generator(seed, stream, first_word)
    bit_generator.random_raw(skip)
    done = 0
    while done < n:
        size = min(piece, n - done)
        yield bit_generator.random_raw(size)
        done += size


def _unit(w: U64) -> F64:
    # (w >> 11) * 2**-53, exact: the shifted word has 53 bits.
    return (w >> np.uint64(11)).astype(np.float64) * _TWO_M53


def oracle_hits(seed: int, start: int, count: int) -> int:
    """Hits among Monte Carlo samples ``[start, start + count)`` for ``seed``."""
    _check(seed, start, count)
    hits = 0
    for w in _word_pieces(seed, MC_STREAM, 2 * start, 2 * count, 2 * PIECE):
        x = _unit(w[0::2])
        y = _unit(w[1::2])
        hits += int(np.count_nonzero(x * x + y * y < 1.0))
    return hits


def oracle_features(seed: int, start: int, count: int) -> F64:
    """Fixture features of rows ``[start, start + count)``, shape ``(count, 8)``."""
    _check(seed, start, count)
    w = words(seed, FEATURE_STREAM, 8 * start, 8 * count).reshape(count, 8)
    features: F64 = (w >> np.uint64(11)).astype(np.float64) * _TWO_M52 - 1.0
    return features


def oracle_noise(seed: int, start: int, count: int) -> F64:
    """Label noise ``u`` of rows ``[start, start + count)``, each in ``[0, 1)``."""
    _check(seed, start, count)
    return _unit(words(seed, NOISE_STREAM, start, count))


def teacher_labels(features: F64, noise: F64) -> npt.NDArray[np.int8]:
    """Labels from features and noise: the teacher summed left to right, as the contract writes
    it."""
    z = TEACHER[0] * features[:, 0] + TEACHER[1] * features[:, 1]
    for j in range(2, 8):
        z = z + TEACHER[j] * features[:, j]
    z = z + TEACHER_INTERCEPT
    labels: npt.NDArray[np.int8] = (z + 3.0 * (noise - 0.5) > 0.0).astype(np.int8)
    return labels


def numpy_fixture_pass(
    seed: int, start: int, count: int, theta: Sequence[float] | F64
) -> tuple[F64, float, int, int]:
    """Sufficient statistics ``(G, loss_sum, correct, valid)`` of rows ``[start, start+count)``.

    The same quantities as ``aner_worker.kernels.fixture.fixture_pass``, vectorised in numpy; the
    sums are taken in a different order, so they agree within rounding, not bit for bit.
    """
    _check(seed, start, count)
    th = np.asarray(theta, dtype=np.float64)
    if th.shape != (9,):
        raise ValueError(f"theta must have 9 values, got shape {th.shape}")
    grad = np.zeros(9)
    loss_sum = 0.0
    correct = 0
    valid = 0
    for first in range(start, start + count, _FIXTURE_PIECE):
        n = min(_FIXTURE_PIECE, start + count - first)
        f = oracle_features(seed, first, n)
        y = teacher_labels(f, oracle_noise(seed, first, n)).astype(np.float64)
        s = th[0] * f[:, 0]
        for j in range(1, 8):
            s = s + th[j] * f[:, j]
        s = s + th[8]
        # exp(-s) overflows to inf for very negative s, giving p = 0 as intended.
        with np.errstate(over="ignore"):
            p = 1.0 / (1.0 + np.exp(-s))
        residual = p - y
        grad[:8] += residual @ f
        grad[8] += residual.sum()
        loss_sum += float(np.sum(np.maximum(s, 0.0) - y * s + np.log1p(np.exp(-np.abs(s)))))
        correct += int(np.count_nonzero((s >= 0.0) == (y == 1.0)))
        valid += n
    return grad, loss_sum, correct, valid
