"""Forward and backward pass of the ``aner-dense/v1`` classifier over one chunk of rows.

A chunk is computed under frozen parameters and returns sufficient statistics: the gradient
SUM over its rows (never a mean, so the coordinator can weight chunks exactly by summing),
the loss sum, the correct count and the valid count. Everything is binary64.

Bitwise determinism: one chunk is computed by one thread, and BLAS is held to one thread
(``single_thread_blas``), so its bits do not depend on which thread or worker ran it.
numpy on single-threaded OpenBLAS was measured against an equivalent numba kernel (loops
ordered so LLVM vectorises them without fastmath; ``bench/dense_bench.py``, ``kernel_choice``)
and is faster at every benchmark size: rows/s 581k vs 400k for 64-64-64-10 chunks of 256,
63k vs 41k for 64-256-256-10 chunks of 1,024 and 65k vs 30k for chunks of 8,192 (one core
of a 2-vCPU AMD EPYC VM). So the matrix products are numpy's.

Parameters are a list ``[W1, b1, ..., W(L+1), b(L+1)]`` with ``W_l`` of shape
``(fan_out, fan_in)`` (SPEC's ``W_l[o][i]``); ``flatten`` / ``unflatten`` give the single
float64 vector that travels on the wire and that the optimizer updates, in that order,
each ``W_l`` row-major.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

_blas_state = threading.local()


def single_thread_blas() -> None:
    """Hold BLAS to one thread for the calling thread (idempotent, cheap after the first).

    OpenBLAS with pthreads keeps one process-wide setting, but OpenMP-based BLAS keeps one
    per calling thread, so every thread that computes chunks calls this first.
    """
    if getattr(_blas_state, "limited", False):
        return
    threadpool_limits(limits=1, user_api="blas")
    _blas_state.limited = True


def layer_shapes(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Shapes of ``[W1, b1, ...]`` for layer sizes ``[d, h1, ..., k]``."""
    if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
        raise ValueError(f"layer sizes must be at least two positive numbers, got {list(sizes)}")
    shapes: list[tuple[int, ...]] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        shapes.append((int(fan_out), int(fan_in)))
        shapes.append((int(fan_out),))
    return shapes


def parameter_count(sizes: Sequence[int]) -> int:
    return sum(int(np.prod(s)) for s in layer_shapes(sizes))


def flatten(params: Sequence[Floats]) -> Floats:
    """One float64 vector of ``[W1, b1, ...]`` in order, each row-major."""
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in params])


def unflatten(flat: Floats, sizes: Sequence[int]) -> list[Floats]:
    """Views of ``flat`` shaped as ``[W1, b1, ...]`` for layer sizes ``sizes``."""
    shapes = layer_shapes(sizes)
    total = sum(int(np.prod(s)) for s in shapes)
    if flat.shape != (total,):
        raise ValueError(f"expected {total} parameters for sizes {list(sizes)}, got {flat.shape}")
    out: list[Floats] = []
    offset = 0
    for shape in shapes:
        n = int(np.prod(shape))
        out.append(flat[offset : offset + n].reshape(shape))
        offset += n
    return out


@dataclass(frozen=True)
class ChunkStats:
    """Sufficient statistics of one chunk under frozen parameters."""

    grad: Floats  # flat, layout of ``flatten``: the sum over the chunk's rows
    loss_sum: float
    correct: int
    valid: int


def _check(params: Sequence[Floats], mean: Floats, std: Floats, x: Floats) -> None:
    if len(params) < 2 or len(params) % 2:
        raise ValueError(f"params must be [W1, b1, ..., WL, bL], got {len(params)} arrays")
    d = params[0].shape[1]
    if x.ndim != 2 or x.shape[1] != d or mean.shape != (d,) or std.shape != (d,):
        raise ValueError(
            f"features must be (m, {d}) with mean and std ({d},), got {x.shape}, "
            f"{mean.shape} and {std.shape}"
        )


# A diverging run overflows to inf and NaN; that is reported once, by the coordinator, as a
# non-finite loss naming the epoch and step, not as numpy warnings from every worker.
# A fresh errstate per call: numpy's context object keeps the state it replaced, so one shared
# instance entered by two threads at once would restore the wrong one.
def _quiet() -> np.errstate:
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _forward(
    params: Sequence[Floats], mean: Floats, std: Floats, x: Floats
) -> tuple[list[Floats], Floats]:
    """Activations ``[x', a1, ..., aL]`` and the logits."""
    h = (x - mean) / std
    activations = [h]
    last = len(params) // 2 - 1
    for layer in range(last + 1):
        w, b = params[2 * layer], params[2 * layer + 1]
        z = h @ w.T
        z += b
        if layer == last:
            return activations, z
        # In place: z is a fresh buffer, and the backward pass needs only a > 0, which equals
        # z > 0; the derivative at exactly 0 is taken as 0.
        h = np.maximum(z, 0.0, out=z)
        activations.append(h)
    raise AssertionError("unreachable")  # pragma: no cover


def _softmax_parts(z: Floats) -> tuple[Floats, Floats, Floats]:
    """``(exp(z - m), sum exp(z - m), logsumexp(z))`` per row, ``m`` the row maximum."""
    m = z.max(axis=1)
    e = np.exp(z - m[:, None])
    s = e.sum(axis=1)
    return e, s, m + np.log(s)


def chunk_stats(
    params: Sequence[Floats], mean: Floats, std: Floats, x: Floats, y: Ints
) -> ChunkStats:
    """Gradient sum, loss sum, correct and valid counts of rows ``(x, y)``.

    ``x`` holds raw features; ``(x - mean) / std`` is applied here, so the model's own
    normalisation travels with the parameters. Loss per row: ``logsumexp(z) - z[y]``.
    """
    _check(params, mean, std, x)
    single_thread_blas()
    with _quiet():
        return _chunk_stats(params, mean, std, x, y)


def _chunk_stats(
    params: Sequence[Floats], mean: Floats, std: Floats, x: Floats, y: Ints
) -> ChunkStats:
    n = x.shape[0]
    rows = np.arange(n)
    activations, z = _forward(params, mean, std, x)
    e, s, lse = _softmax_parts(z)
    loss_sum = float(np.sum(lse - z[rows, y]))
    correct = int(np.count_nonzero(np.argmax(z, axis=1) == y))
    # d loss / d z = softmax(z) - onehot(y), reusing the exp buffer.
    dz = e
    dz /= s[:, None]
    dz[rows, y] -= 1.0
    grads: list[Floats] = [np.empty(0)] * len(params)
    for layer in range(len(params) // 2 - 1, -1, -1):
        a = activations[layer]
        grads[2 * layer] = dz.T @ a
        grads[2 * layer + 1] = dz.sum(axis=0)
        if layer:
            da = dz @ params[2 * layer]
            da *= a > 0.0
            dz = da
    return ChunkStats(grad=flatten(grads), loss_sum=loss_sum, correct=correct, valid=n)


def evaluate(
    params: Sequence[Floats], mean: Floats, std: Floats, x: Floats, y: Ints
) -> tuple[float, int]:
    """Forward only: ``(loss_sum, correct)`` of rows ``(x, y)``."""
    _check(params, mean, std, x)
    single_thread_blas()
    with _quiet():
        _, z = _forward(params, mean, std, x)
        _, _, lse = _softmax_parts(z)
        loss_sum = float(np.sum(lse - z[np.arange(x.shape[0]), y]))
    return loss_sum, int(np.count_nonzero(np.argmax(z, axis=1) == y))


def predict_proba(params: Sequence[Floats], mean: Floats, std: Floats, x: Floats) -> Floats:
    """Class probabilities ``softmax(z)`` of each row of raw features ``x``."""
    _check(params, mean, std, x)
    single_thread_blas()
    with _quiet():
        _, z = _forward(params, mean, std, x)
        e, s, _ = _softmax_parts(z)
        out: Floats = e / s[:, None]
    return out


def predict(params: Sequence[Floats], mean: Floats, std: Floats, x: Floats) -> Ints:
    """Class index of each row: the first index of the largest logit."""
    _check(params, mean, std, x)
    single_thread_blas()
    with _quiet():
        _, z = _forward(params, mean, std, x)
    out: Ints = np.argmax(z, axis=1).astype(np.int64)
    return out


def moment_sums(x: Floats) -> tuple[Floats, Floats]:
    """Per-feature ``(sum, m2)`` of rows ``x``, ``m2`` about the rows' own mean.

    A chunk's share of the normalisation fit; the coordinator combines the chunks in order
    (``aner_worker.kernels.dense.plan.combine_moments``).
    """
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"moment sums need a non-empty (m, d) array, got {x.shape}")
    total: Floats = x.sum(axis=0)
    deviation = x - total / x.shape[0]
    m2: Floats = (deviation * deviation).sum(axis=0)
    return total, m2
