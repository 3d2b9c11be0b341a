"""The single-core GEMM limit at a model's own layer shapes, and the chunk kernel's own rate:
what `dense` (``make bench``) and ``dense_bench.py`` compare aner's Dense training with.

The limit is the rows per second that this machine's single-thread BLAS gives for the matrix
products of a training row: forward ``x @ W.T`` and weight gradients ``dz.T @ a`` at every
layer, input gradients ``dz @ W`` at all but the first, each timed alone at its exact shape
and call form.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from aner_worker.kernels.dense.network import chunk_stats, flatten, prepare, single_thread_blas
from aner_worker.kernels.dense.plan import init_params


def gemm_flops(sizes: list[int]) -> int:
    """FLOPs per row of one training row's matrix products: forward ``x @ W.T`` and weight
    gradients ``dz.T @ a`` at every layer, input gradients ``dz @ W`` at all but the first;
    2 per multiply-add."""
    pairs = list(itertools.pairwise(sizes))
    return 2 * (2 * sum(a * b for a, b in pairs) + sum(a * b for a, b in pairs[1:]))


def gemm_limit(sizes: list[int], rows: int, precision: str, rounds: int) -> dict[str, Any]:
    """Rows per second that this machine's single-thread BLAS gives for the matrix products
    of one chunk of ``rows`` rows at ``sizes`` in ``precision``: each product timed alone at
    its exact shape and call form (``W.T`` and ``dz.T`` as transposed views, ``out=``
    preallocated, as the kernel calls them), interleaved round by round, medians summed.
    Everything else a training does (softmax, bias sums, the ReLU mask, rows, the
    optimizer) is on top: the limit is what the arithmetic alone would allow."""
    single_thread_blas()
    dtype = np.dtype(precision)
    rng = np.random.default_rng(0)
    calls: dict[str, Callable[[], Any]] = {}
    for layer, (a_n, b_n) in enumerate(itertools.pairwise(sizes)):
        a = rng.normal(size=(rows, a_n)).astype(dtype)
        w = rng.normal(size=(b_n, a_n)).astype(dtype)
        dz = rng.normal(size=(rows, b_n)).astype(dtype)
        z, gw, da = np.empty((rows, b_n), dtype), np.empty((b_n, a_n), dtype), np.empty_like(a)
        calls[f"forward {layer + 1}"] = partial(np.matmul, a, w.T, out=z)
        calls[f"dW {layer + 1}"] = partial(np.matmul, dz.T, a, out=gw)
        if layer:
            calls[f"da {layer + 1}"] = partial(np.matmul, dz, w, out=da)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            reps, started = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - started) < 0.004 or reps < 3:
                call()
                reps += 1
            times[name].append(elapsed / reps)
    seconds = sum(float(np.median(t)) for t in times.values())
    return {
        "sizes": sizes,
        "rows": rows,
        "precision": precision,
        "rows_per_s": rows / seconds,
        "gflop_per_s": gemm_flops(sizes) * rows / seconds / 1e9,
        "seconds_per_chunk": {name: float(np.median(t)) for name, t in times.items()},
    }


def kernel_rate(sizes: list[int], rows: int, precision: str, seconds: float) -> float:
    """Rows per second of one chunk's forward and backward (``chunk_stats``) on this thread,
    parameters prepared once, rows already in memory."""
    single_thread_blas()
    rng = np.random.default_rng(1)
    model = prepare(flatten(init_params(3, sizes)), sizes, precision)
    x = rng.normal(size=(rows, sizes[0]))
    y = rng.integers(0, sizes[-1], size=rows)
    mean, std = np.zeros(sizes[0]), np.ones(sizes[0])
    call = partial(chunk_stats, model, mean, std, x, y)
    call()  # warm: the workspace, numba's loops
    reps, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds or reps < 3:
        call()
        reps += 1
    return rows * reps / elapsed
