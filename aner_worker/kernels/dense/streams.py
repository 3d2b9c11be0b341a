"""Philox words of ``aner-dense/v1`` (docs/contracts.md, section 9): role codes, epoch keys, raw
words.

Every random quantity of Dense training (teacher rows, roles, epoch orders, initial weights)
is word ``k`` of a Philox4x64-10 stream ``(seed, stream)`` of docs/contracts.md, section 1, mapped
by ``U(w) = (w >> 11) * 2**-53`` or ``S(w) = (w >> 11) * 2**-52 - 1.0``. Both maps are exact in
binary64 (``w >> 11 < 2**53``, a power-of-two scale, and a subtraction whose result is a
multiple of ``2**-52`` in ``[-1, 1)``), so numpy applied to these words gives the same bits as
the kernels do.

The coordinator imports this module for roles and epoch orders; it holds no state.
numba's cache keys a kernel on its own source file only: the kernels here inline
``philox_block`` from ``philox.py``, so a change there needs ``__pycache__`` cleared.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from aner_worker.kernels.identities import SEED_LIMIT
from aner_worker.kernels.philox import philox_block

ROLE_STREAM = 8
TRAIN, VALIDATION, TEST = 0, 1, 2

_SHIFT = np.uint64(11)
_TWO_M52 = 2.0**-52
_TWO_M53 = 2.0**-53


def unit(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """``U(w) = (w >> 11) * 2**-53`` in ``[0, 1)``, exact."""
    out: npt.NDArray[np.float64] = (words >> _SHIFT).astype(np.float64) * _TWO_M53
    return out


def signed(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """``S(w) = (w >> 11) * 2**-52 - 1.0`` in ``[-1, 1)``, exact."""
    out: npt.NDArray[np.float64] = (words >> _SHIFT).astype(np.float64) * _TWO_M52 - 1.0
    return out


@njit(nogil=True, cache=True)
def _words_range(seed, stream, first, out):  # type: ignore[no-untyped-def]
    # One block serves four consecutive words; `first` need not be a multiple of four.
    k = first
    i = 0
    n = out.size
    while i < n:
        w = philox_block(np.uint64(k >> 2), seed, stream)
        lane = k & 3
        while lane < 4 and i < n:
            out[i] = w[lane]
            lane += 1
            i += 1
            k += 1


@njit(nogil=True, cache=True)
def _words_at(seed, stream, indices, out):  # type: ignore[no-untyped-def]
    for i in range(indices.size):
        k = indices[i]
        w = philox_block(np.uint64(k >> 2), seed, stream)
        out[i] = w[k & 3]


@njit(nogil=True, cache=True)
def _role_codes(seed, stream, test_fraction, test_plus_validation, out):  # type: ignore[no-untyped-def]
    n = out.size
    r = 0
    while r < n:
        w = philox_block(np.uint64(r >> 2), seed, stream)
        lane = 0
        while lane < 4 and r < n:
            u = np.float64(np.int64(w[lane] >> _SHIFT)) * _TWO_M53
            if u < test_fraction:
                out[r] = 2
            elif u < test_plus_validation:
                out[r] = 1
            else:
                out[r] = 0
            lane += 1
            r += 1


def _check_seed(seed: int, stream: int) -> None:
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must satisfy 0 <= seed < 2**64, got {seed}")
    if not 0 <= stream < SEED_LIMIT:
        raise ValueError(f"stream must satisfy 0 <= stream < 2**64, got {stream}")


def words(seed: int, stream: int, first: int, count: int) -> npt.NDArray[np.uint64]:
    """Words ``W[first .. first + count - 1]`` of stream ``(seed, stream)``."""
    _check_seed(seed, stream)
    if first < 0 or count < 0:
        raise ValueError(f"first and count must be >= 0, got {first} and {count}")
    out = np.empty(count, dtype=np.uint64)
    _words_range(np.uint64(seed), np.uint64(stream), np.int64(first), out)
    return out


def words_at(seed: int, stream: int, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Words ``W[k]`` of stream ``(seed, stream)`` for every ``k`` of ``indices`` (>= 0)."""
    _check_seed(seed, stream)
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    if idx.size and int(idx.min()) < 0:
        raise ValueError("word indices must be >= 0")
    out = np.empty(idx.size, dtype=np.uint64)
    _words_at(np.uint64(seed), np.uint64(stream), idx, out)
    return out


def role_codes(
    seed: int, n_rows: int, test_fraction: float, validation_fraction: float
) -> npt.NDArray[np.uint8]:
    """One byte per row: 0 train, 1 validation, 2 test, from ``u = U(W8[r])``.

    Test if ``u < test_fraction``, validation if ``u < test_fraction + validation_fraction``
    (that sum taken once in binary64), else train. Computed without materialising the words,
    so 10**8 rows cost 100 MB, not 900.
    """
    _check_seed(seed, ROLE_STREAM)
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    out = np.empty(n_rows, dtype=np.uint8)
    _role_codes(
        np.uint64(seed),
        np.uint64(ROLE_STREAM),
        float(test_fraction),
        float(test_fraction) + float(validation_fraction),
        out,
    )
    return out


def warm_up() -> None:
    """Compile or load from cache the word kernels now, not during the first task."""
    words(1, 1, 3, 6)
    words_at(1, 1, np.arange(3, dtype=np.int64))
    role_codes(1, 5, 0.15, 0.15)
