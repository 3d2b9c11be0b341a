"""The loops that numpy does slowly, in numba (no fastmath: IEEE-exact, the same bits as the
numpy forms they replace). The network's three:

- `relu`: ``np.maximum(z, 0.0, out=z)`` of the forward pass (numpy's NaN-propagating maximum
  runs at a third of memory speed: ~3% of a chunk of the 256-wide model);
- `relu_mask`: ``da *= (a > 0)`` without numpy's boolean temporary and its cast (2-3x
  faster on the delta arrays);
- `column_sums`: binary64 column sums of a binary32 array, row after row, which is the order
  of ``np.sum(dz, axis=0, dtype=np.float64)`` but 3-4x faster than numpy's casting reduction
  (the float32 bias gradients: ~9% of a 1,024-row chunk of the 256-wide model).

And the coordinator's, on the flat parameter vector once per chunk or step (`training`,
`optimizers`), where numpy's one-operation passes and their temporaries cost more than the
arithmetic (about 0.1 ms a step for the 256-wide model, on the critical path of a pass):

- `all_finite`: ``np.isfinite(g).all()`` without the boolean temporary;
- `accumulate`: ``total += part`` (or ``total[:] = part`` for the first chunk);
- `adam`: the whole Adam update of `optimizers.adam_step`, element by element, each element
  through exactly the operations, operands and order of the numpy form (LLVM contracts no
  multiply-add without fastmath), so the parameters and moments are the same bits.

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


@njit(nogil=True, cache=True)
def _all_finite(g):  # type: ignore[no-untyped-def]
    # x - x is 0.0 exactly for a finite x and NaN for an infinity or a NaN; an integer OR
    # (no early exit) lets LLVM vectorise it: 4x faster than a loop testing each element.
    bad = np.int64(0)
    for i in range(g.size):
        bad |= np.int64(g[i] - g[i] != 0.0)  # True for NaN (unordered)
    return bad == 0


@njit(nogil=True, cache=True)
def _accumulate(total, part, first):  # type: ignore[no-untyped-def]
    if first:
        for i in range(total.size):
            total[i] = part[i]
    else:
        for i in range(total.size):
            total[i] += part[i]


# error_model="numpy": a division by zero gives IEEE's inf or NaN instead of Python's
# ZeroDivisionError, whose check per division kept LLVM from vectorising the loop (4x).
@njit(nogil=True, cache=True, error_model="numpy")
def _adam(params, grad_sum, n, m, v, k, out_p, out_m, out_v):  # type: ignore[no-untyped-def]
    # k: beta1, 1 - beta1, beta2, 1 - beta2, 1 - beta1**t, 1 - beta2**t, lr, eps (binary64,
    # computed by the caller exactly as the numpy form computes them).
    beta1, one_b1, beta2, one_b2 = k[0], k[1], k[2], k[3]
    corr1, corr2, lr, eps = k[4], k[5], k[6], k[7]
    for i in range(params.size):
        g = grad_sum[i] / n  # StepTotals.mean_grad
        mi = m[i] * beta1 + g * one_b1
        vi = v[i] * beta2 + (g * one_b2) * g
        out_m[i] = mi
        out_v[i] = vi
        out_p[i] = params[i] - (mi / corr1) * lr / (np.sqrt(vi / corr2) + eps)


def all_finite(g: npt.NDArray[np.float64]) -> bool:
    """``bool(np.isfinite(g).all())`` for a flat binary64 array."""
    return bool(_all_finite(g))


def accumulate(total: npt.NDArray[np.float64], part: npt.NDArray[np.float64], first: bool) -> None:
    """``total[:] = part`` if `first`, else ``total += part``; flat binary64, one length."""
    _accumulate(total, part, first)


def adam(
    params: npt.NDArray[np.float64],
    grad_sum: npt.NDArray[np.float64],
    n: float,
    m: npt.NDArray[np.float64],
    v: npt.NDArray[np.float64],
    constants: npt.NDArray[np.float64],
    out: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]],
) -> None:
    """`optimizers.adam_step` on the mean gradient ``grad_sum / n`` into ``out`` (parameters,
    m, v; fresh arrays, never the inputs)."""
    _adam(params, grad_sum, n, m, v, constants, *out)


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
    one = np.ones(2)
    frozen = np.frombuffer(one.tobytes())  # read-only, as a chunk's sums arrive
    for g in (one, frozen):
        all_finite(g)
        accumulate(np.empty(2), g, True)
    adam(one, one, 2.0, one, one, np.ones(8), (np.empty(2), np.empty(2), np.empty(2)))
