"""Benchmark of ``aner-dense/v1`` pieces, standalone (not yet wired to the job machine).

Measurements, printed as one JSON document:

- ``gemm_limit``: the single-core GEMM limit at a model's own layer shapes
  (``bench/dense_limit.py``, also used by the ``dense`` benchmark of ``make bench``) next to
  the kernel's own rows/s, float64 and float32.

- ``kernel_choice``: rows/s of one chunk's forward + backward with numpy on single-threaded
  BLAS (the product kernel) against an equivalent numba kernel written with vectorisable
  inner loops, at the benchmark sizes. Decides which the product uses.
- ``digits``: the single-process loop against scikit-learn's ``MLPClassifier(solver="adam")``
  on the same training rows (normalised the same way), same architecture, batch, epochs,
  learning rate and no L2 penalty: training rows/s and test accuracy.
- ``teacher``: the teacher set at 10**6 x 64, hidden 256,256, batch 8,192: steps of the
  single-process loop with 1 and 2 threads computing the chunks, rows generated where used,
  and the same with rows generated beforehand (kernel only). Efficiency = rows/s(2) /
  (2 * rows/s(1)). Also checks that both thread counts give bitwise identical parameters.

Run: ``.venv/bin/python bench/dense_bench.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from aner_coord.computations.dense.single import fit_normalisation, train_single
from aner_worker.kernels.dense.data import Dataset, TeacherDataset, load_digits
from aner_worker.kernels.dense.network import (
    ChunkStats,
    Model,
    chunk_stats,
    flatten,
    prepare,
    single_thread_blas,
)
from aner_worker.kernels.dense.optimizers import initial_state, step
from aner_worker.kernels.dense.plan import (
    assign_roles,
    bounds,
    epoch_order,
    init_params,
    layer_sizes,
    reduce_chunks,
)
from bench.dense_limit import gemm_limit, kernel_rate

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


# ---------------------------------------------------------------------------------------
# The numba alternative, two hidden layers (both benchmark sizes have two). Loops are
# ordered so that the innermost one runs over independent outputs, which LLVM vectorises
# without fastmath; every sum still runs in index order.


@njit(nogil=True, cache=True)
def _nb_layer(h, wt, b, out, relu):  # type: ignore[no-untyped-def]
    m, a = h.shape
    nb = wt.shape[1]
    for r in range(m):
        for o in range(nb):
            out[r, o] = 0.0
        for i in range(a):
            hv = h[r, i]
            for o in range(nb):
                out[r, o] += hv * wt[i, o]
        for o in range(nb):
            v = out[r, o] + b[o]
            out[r, o] = v if (v > 0.0 or not relu) else 0.0


@njit(nogil=True, cache=True)
def _nb_back(dz, a, w, gw, gb, da):  # type: ignore[no-untyped-def]
    m, nb = dz.shape
    na = a.shape[1]
    for r in range(m):
        for o in range(nb):
            g = dz[r, o]
            gb[o] += g
            for i in range(na):
                gw[o, i] += g * a[r, i]
    if da.shape[0]:
        for r in range(m):
            for i in range(na):
                da[r, i] = 0.0
            for o in range(nb):
                g = dz[r, o]
                for i in range(na):
                    da[r, i] += g * w[o, i]
            for i in range(na):
                if a[r, i] <= 0.0:
                    da[r, i] = 0.0


@njit(nogil=True, cache=True)
def _nb_chunk(w1, b1, w2, b2, w3, b3, mean, std, x, y):  # type: ignore[no-untyped-def]
    m, d = x.shape
    h0 = np.empty((m, d))
    for r in range(m):
        for j in range(d):
            h0[r, j] = (x[r, j] - mean[j]) / std[j]
    h1 = np.empty((m, w1.shape[0]))
    h2 = np.empty((m, w2.shape[0]))
    z = np.empty((m, w3.shape[0]))
    _nb_layer(h0, w1.T.copy(), b1, h1, True)
    _nb_layer(h1, w2.T.copy(), b2, h2, True)
    _nb_layer(h2, w3.T.copy(), b3, z, False)
    loss = 0.0
    correct = 0
    k = z.shape[1]
    for r in range(m):
        mx = z[r, 0]
        arg = 0
        for c in range(1, k):
            if z[r, c] > mx:
                mx = z[r, c]
                arg = c
        zy = z[r, y[r]]
        s = 0.0
        for c in range(k):
            z[r, c] = np.exp(z[r, c] - mx)
            s += z[r, c]
        loss += mx + np.log(s) - zy
        correct += arg == y[r]
        for c in range(k):
            z[r, c] /= s
        z[r, y[r]] -= 1.0
    g3, gb3 = np.zeros_like(w3), np.zeros_like(b3)
    g2, gb2 = np.zeros_like(w2), np.zeros_like(b2)
    g1, gb1 = np.zeros_like(w1), np.zeros_like(b1)
    d2 = np.empty_like(h2)
    d1 = np.empty_like(h1)
    _nb_back(z, h2, w3, g3, gb3, d2)
    _nb_back(d2, h1, w2, g2, gb2, d1)
    _nb_back(d1, h0, w1, g1, gb1, np.empty((0, d)))
    return g1, gb1, g2, gb2, g3, gb3, loss, correct


def numba_chunk_stats(
    params: list[Floats], mean: Floats, std: Floats, x: Floats, y: Ints
) -> ChunkStats:
    out = _nb_chunk(*params, mean, std, x, y)
    return ChunkStats(flatten(list(out[:6])), float(out[6]), int(out[7]), x.shape[0])


# ---------------------------------------------------------------------------------------


def _rate(fn: Callable[[], Any], rows: int, min_seconds: float) -> float:
    fn()  # warm: compile, load caches, fault in buffers
    reps = 0
    started = time.perf_counter()
    while True:
        fn()
        reps += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return rows * reps / elapsed


def kernel_choice(quick: bool) -> list[dict[str, Any]]:
    single_thread_blas()
    rng = np.random.default_rng(7)
    out = []
    for sizes, chunk in (
        ([64, 64, 64, 10], 256),
        ([64, 256, 256, 10], 1024),
        ([64, 256, 256, 10], 8192),
    ):
        params = init_params(3, sizes)
        x = rng.normal(size=(chunk, sizes[0]))
        y = rng.integers(0, sizes[-1], size=chunk)
        mean, std = np.zeros(sizes[0]), np.ones(sizes[0])
        model = prepare(flatten(params), sizes)
        a = chunk_stats(model, mean, std, x, y)
        b = numba_chunk_stats(params, mean, std, x, y)
        seconds = 0.3 if quick else 1.5
        out.append(
            {
                "sizes": sizes,
                "chunk": chunk,
                "numpy_rows_per_s": round(
                    _rate(partial(chunk_stats, model, mean, std, x, y), chunk, seconds)
                ),
                "numba_rows_per_s": round(
                    _rate(partial(numba_chunk_stats, params, mean, std, x, y), chunk, seconds)
                ),
                "max_abs_grad_difference": float(np.max(np.abs(a.grad - b.grad))),
            }
        )
    return out


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(ordered[len(ordered) // 2], 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
    }


def digits(epochs: int, repetitions: int) -> dict[str, Any]:
    """Interleaved repetitions of both trainers, since a shared machine drifts."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    data = load_digits()
    train_single(data, seed=0, epochs=1)  # warm the kernels' caches
    roles = assign_roles(0, data.n_rows)
    ours_rate, ours_acc, sk_rate, sk_acc = [], [], [], []
    for repetition in range(repetitions):
        fit = train_single(
            data,
            seed=repetition,
            epochs=epochs,
            patience=epochs,
            batch=256,
            chunk=256,
            hidden=(64, 64),
            lr=1e-3,
        )
        ours_rate.append(fit.rows_processed / fit.seconds)
        ours_acc.append(fit.test_accuracy)
        roles = assign_roles(repetition, data.n_rows)
        norm = fit.model.normalisation
        xtr, ytr = data.rows(roles.train)
        xte, yte = data.rows(roles.test)
        xtr, xte = (xtr - norm.mean) / norm.std, (xte - norm.mean) / norm.std
        clf = MLPClassifier(
            hidden_layer_sizes=(64, 64),
            solver="adam",
            batch_size=256,
            learning_rate_init=1e-3,
            max_iter=epochs,
            alpha=0.0,
            tol=0.0,
            n_iter_no_change=epochs + 1,
            shuffle=True,
            random_state=repetition,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            started = time.perf_counter()
            clf.fit(xtr, ytr)
            sk_seconds = time.perf_counter() - started
        sk_rate.append(clf.n_iter_ * xtr.shape[0] / sk_seconds)
        sk_acc.append(float(clf.score(xte, yte)))
    defaults = train_single(data, seed=0)  # Adam, lr 1e-3, batch 256, 64,64, patience 5
    return {
        "epochs": epochs,
        "repetitions": repetitions,
        "seeds": list(range(repetitions)),
        "aner_single_process": {
            "rows_per_s": _spread(ours_rate),
            "test_accuracy": _spread(ours_acc),
            "note": "whole run: roles, normalisation, a validation pass per epoch; best "
            "validation epoch's model",
        },
        "sklearn_mlp_adam": {
            "rows_per_s": _spread(sk_rate),
            "test_accuracy": _spread(sk_acc),
            "note": "fit() only, on the same normalised training rows; alpha=0 (no L2, as "
            "aner); last epoch's model",
        },
        "aner_defaults_seed_0": {
            "epochs_run": len(defaults.history),
            # Epochs from 1, as result.json counts them (the training indexes from 0).
            "best_epoch": defaults.best_epoch + 1,
            "first_epoch_validation_accuracy_ge_0.95": next(
                (h.epoch + 1 for h in defaults.history if h.validation_accuracy >= 0.95), None
            ),
            "test_accuracy": defaults.test_accuracy,
            "seconds": round(defaults.seconds, 3),
        },
    }


def _steps(
    data: Dataset,
    sizes: list[int],
    batch: int,
    chunk: int,
    threads: int,
    steps: int,
    seed: int,
    pregenerated: dict[int, tuple[Floats, Ints]] | None,
) -> tuple[float, Floats]:
    """Run ``steps`` training steps of epoch 0; return (rows/s, flat parameters)."""
    roles = assign_roles(seed, data.n_rows)
    order = epoch_order(seed, 0, roles.train)
    norm = fit_normalisation(data, roles.train[:65536], 8192)
    flat = flatten(init_params(seed, sizes))
    state = initial_state("adam", flat.size)

    def run(params: Model, start: int, stop: int) -> ChunkStats:
        if pregenerated is not None:
            x, y = pregenerated[start]
        else:
            x, y = data.rows(order[start:stop])
        return chunk_stats(params, norm.mean, norm.std, x, y)

    batches = bounds(order.size, batch)[:steps]
    pieces = [[(b0 + c0, b0 + c1) for c0, c1 in bounds(b1 - b0, chunk)] for b0, b1 in batches]
    rows = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda _: single_thread_blas(), range(threads)))
        started = time.perf_counter()
        for (b0, b1), chunks in zip(batches, pieces, strict=True):
            params = prepare(flat, sizes)
            starts, stops = zip(*chunks, strict=True)
            results = list(pool.map(partial(run, params), starts, stops))
            totals = reduce_chunks(results, b1 - b0)
            flat, state = step(flat, totals.mean_grad(), state, 1e-3)
            rows += totals.valid
        elapsed = time.perf_counter() - started
    return rows / elapsed, flat


def teacher(rows: int, steps: int, chunk: int, repetitions: int) -> dict[str, Any]:
    seed, batch = 5, 8192
    data = TeacherDataset(rows, 64, 10, seed)
    sizes = layer_sizes(64, (256, 256), 10)
    roles = assign_roles(seed, data.n_rows)
    order = epoch_order(seed, 0, roles.train)
    data.rows(order[:8])  # load the teacher kernel from numba's cache before timing
    started = time.perf_counter()
    pre = {}
    for b0, _ in bounds(order.size, batch)[:steps]:
        for c0, c1 in bounds(batch, chunk):
            pre[b0 + c0] = data.rows(order[b0 + c0 : b0 + c1])
    generation_rows_per_s = steps * batch / (time.perf_counter() - started)
    result: dict[str, Any] = {
        "rows": rows,
        "features": 64,
        "classes": 10,
        "hidden": [256, 256],
        "batch": batch,
        "chunk": chunk,
        "steps": steps,
        "repetitions": repetitions,
        "row_generation_rows_per_s_1_thread": round(generation_rows_per_s),
    }
    _steps(data, sizes, batch, chunk, 1, 1, seed, None)  # warm
    for label, pregen in (("generated_in_step", None), ("kernel_only", pre)):
        one, two, efficiency = [], [], []
        equal = True
        for _ in range(repetitions):
            r1, p1 = _steps(data, sizes, batch, chunk, 1, steps, seed, pregen)
            r2, p2 = _steps(data, sizes, batch, chunk, 2, steps, seed, pregen)
            one.append(r1)
            two.append(r2)
            efficiency.append(r2 / (2 * r1))
            equal = equal and bool(np.array_equal(p1, p2))
        result[label] = {
            "rows_per_s_1_thread": _spread(one),
            "rows_per_s_2_threads": _spread(two),
            "efficiency_2_threads": _spread(efficiency),
            "parameters_bitwise_equal": equal,
        }
    return result


_PROBE = (
    "import sys, time\n"
    "from aner_worker.kernels.philox import count_hits\n"
    "count_hits(1, 0, 8)\n"
    "t = time.perf_counter(); count_hits(1, 0, 200_000_000)\n"
    "print(time.perf_counter() - t)\n"
)


def machine_scaling() -> dict[str, Any]:
    """Two processes of pure integer work against one: the machine's own 2-way ceiling.

    Separate processes, no shared data, no GIL: whatever efficiency this shows below 1.0
    is the machine's (shared physical cores, a CPU quota, thermal limits), and bounds any
    2-thread figure below.
    """
    import subprocess

    def run(copies: int) -> float:
        procs = [
            subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, text=True)
            for _ in range(copies)
        ]
        return max(float(p.communicate()[0]) for p in procs)

    run(1)
    efficiency = []
    for _ in range(3):
        one, two = run(1), run(2)
        efficiency.append(one / two)
    return {"efficiency_2_processes": _spread(efficiency), "repetitions": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke test")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    report = {
        "platform": {
            "machine": platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
        },
        "machine_scaling": machine_scaling(),
        "gemm_limit": [
            {**gemm_limit(sizes, rows, p, 3 if args.quick else 15), "kernel_rows_per_s": rate}
            for sizes, rows in (([64, 64, 64, 10], 256), ([64, 256, 256, 10], 1024))
            for p in ("float64", "float32")
            for rate in [kernel_rate(sizes, rows, p, 0.3 if args.quick else 1.5)]
        ],
        "kernel_choice": kernel_choice(args.quick),
        "digits": digits(10 if args.quick else 100, 1 if args.quick else 3),
        "teacher": teacher(10**6, 2 if args.quick else 8, 2048, 1 if args.quick else 3),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
