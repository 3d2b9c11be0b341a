"""The network's three loops that numpy does slowly, in numba (no fastmath: IEEE-exact, the
same bits as the numpy forms they replace):

- `relu`: ``np.maximum(z, 0.0, out=z)`` of the forward pass (numpy's NaN-propagating maximum
  runs at a third of memory speed: ~3% of a chunk of the 256-wide model);
- `relu_mask`: ``da *= (a > 0)`` without numpy's boolean temporary and its cast (2-3x
  faster on the delta arrays);
- `column_sums`: binary64 column sums of a binary32 array, row after row, which is the order
  of ``np.sum(dz, axis=0, dtype=np.float64)`` but 3-4x faster than numpy's casting reduction
  (the float32 bias gradients: ~9% of a 1,024-row chunk of the 256-wide model).

Kept apart from `network` so that importing the model (``predict`` on the coordinator) does
not import numba; a chunk imports it when it first runs (``predict`` keeps numpy's maximum).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit


@njit(nogil=True, cache=True)
def _relu(z):  # type: ignore[no-untyped-def]
    # np.maximum(z, 0.0): z where z > 0, z itself where it is NaN (numpy propagates it, sign
    # and payload), else +0.0 (also for -0.0, as numpy returns).
    f = z.reshape(-1)
    for i in range(f.size):
        v = f[i]
        if not v > 0.0 and v == v:
            f[i] = 0.0


@njit(nogil=True, cache=True)
def _relu_mask(da, a):  # type: ignore[no-untyped-def]
    # Multiply by 0.0 where the unit is off, as numpy's `da * False` does (so -0.0, inf and
    # NaN come out exactly as there), and leave the element where it is on (`da * 1.0`).
    # Both arrays are C-contiguous of one shape.
    d = da.reshape(-1)
    x = a.reshape(-1)
    for i in range(d.size):
        if not x[i] > 0.0:
            d[i] = d[i] * 0.0


@njit(nogil=True, cache=True)
def _column_sums(dz, out):  # type: ignore[no-untyped-def]
    # numpy's axis-0 reduction of a C-contiguous array: the first row, then each next row
    # added to the running sums (widened exactly to binary64 first).
    m, k = dz.shape
    for c in range(k):
        out[c] = np.float64(dz[0, c])
    for r in range(1, m):
        for c in range(k):
            out[c] += np.float64(dz[r, c])


def relu(z: npt.NDArray[np.floating]) -> None:
    """``np.maximum(z, 0.0, out=z)``; ``z`` C-contiguous."""
    _relu(z)


def relu_mask(da: npt.NDArray[np.floating], a: npt.NDArray[np.floating]) -> None:
    """``da *= (a > 0)`` in place; ``da`` and ``a`` are C-contiguous of one shape and dtype."""
    _relu_mask(da, a)


def column_sums(dz: npt.NDArray[np.float32], out: npt.NDArray[np.float64]) -> None:
    """``out[c] = sum_r dz[r, c]`` in binary64, rows in order; ``dz`` C-contiguous, m >= 1."""
    _column_sums(dz, out)


def warm_up() -> None:
    """Compile (or load from numba's cache) every signature now, not in the first chunk."""
    for dtype in (np.float64, np.float32):
        relu(np.ones((2, 2), dtype))
        relu_mask(np.ones((2, 2), dtype), np.ones((2, 2), dtype))
    column_sums(np.ones((2, 2), np.float32), np.empty(2))
