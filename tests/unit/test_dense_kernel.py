"""The chunk kernel of aner-dense/v1 against the row-by-row reference (dense_reference).

Gradient sums, loss sums and correct counts within 1e-9; chunkings that agree (and a mean
of means that would not); the same bits whichever thread runs a chunk.
"""

from __future__ import annotations

import threading

import dense_reference as ref
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

from aner_worker.kernels.dense.network import (
    chunk_stats,
    evaluate,
    flatten,
    layer_shapes,
    parameter_count,
    predict,
    predict_proba,
    unflatten,
)

F = npt.NDArray[np.float64]
TOL = 1e-9


def _problem(
    seed: int, sizes: list[int], rows: int, scale: float = 1.0
) -> tuple[list[F], F, F, F, npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    params = [rng.normal(scale=scale, size=s) for s in layer_shapes(sizes)]
    x = rng.normal(loc=2.0, scale=3.0, size=(rows, sizes[0]))
    mean = rng.normal(size=sizes[0])
    std = rng.uniform(0.5, 4.0, size=sizes[0])
    y = rng.integers(0, sizes[-1], size=rows)
    return params, mean, std, x, y


def _reference(
    params: list[F], mean: F, std: F, x: F, y: npt.NDArray[np.int64]
) -> tuple[F, float, int]:
    weights, biases = params[0::2], params[1::2]
    gw, gb, loss, correct = ref.batch_sums(weights, biases, (x - mean) / std, y)
    grads = []
    for w, b in zip(gw, gb, strict=True):
        grads += [w.ravel(), b]
    return np.concatenate(grads), loss, correct


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=5),
    rows=st.integers(1, 60),
    scale=st.sampled_from([0.1, 1.0, 10.0]),
)
def test_chunk_stats_equal_reference(seed: int, sizes: list[int], rows: int, scale: float) -> None:
    params, mean, std, x, y = _problem(seed, sizes, rows, scale)
    y = y % sizes[-1]
    stats = chunk_stats(params, mean, std, x, y)
    grad, loss, correct = _reference(params, mean, std, x, y)
    assert stats.valid == rows
    assert stats.correct == correct
    assert abs(stats.loss_sum - loss) <= TOL * max(1.0, abs(loss))
    assert np.max(np.abs(stats.grad - grad)) <= TOL * max(1.0, float(np.max(np.abs(grad))))


def test_benchmark_shape_equals_reference() -> None:
    params, mean, std, x, y = _problem(1, [64, 64, 64, 10], 256)
    stats = chunk_stats(params, mean, std, x, y)
    grad, loss, correct = _reference(params, mean, std, x, y)
    assert np.max(np.abs(stats.grad - grad)) < TOL
    assert abs(stats.loss_sum - loss) < TOL and stats.correct == correct


def test_huge_logits_do_not_overflow() -> None:
    # Logits in the thousands: exp(z) alone overflows; logsumexp must not.
    params, mean, std, x, y = _problem(3, [4, 5, 3], 30, scale=300.0)
    stats = chunk_stats(params, mean, std, x, y)
    grad, loss, correct = _reference(params, mean, std, x, y)
    assert stats.correct == correct
    assert np.isfinite(stats.loss_sum) and loss > 1000.0
    assert abs(stats.loss_sum - loss) <= 1e-12 * loss
    assert np.all(np.isfinite(stats.grad))
    assert np.max(np.abs(stats.grad - grad)) <= 1e-12 * np.max(np.abs(grad))


def test_chunk_sums_agree_across_chunk_sizes_and_a_mean_of_means_would_not() -> None:
    params, mean, std, x, y = _problem(11, [6, 8, 4], 1000)
    totals = {}
    means_of_means = {}
    for chunk in (37, 256):
        grad = np.zeros(parameter_count([6, 8, 4]))
        chunk_means = []
        for start in range(0, 1000, chunk):
            part = chunk_stats(
                params, mean, std, x[start : start + chunk], y[start : start + chunk]
            )
            grad += part.grad
            chunk_means.append(part.grad / part.valid)
        totals[chunk] = grad / 1000
        means_of_means[chunk] = np.mean(chunk_means, axis=0)
    assert np.max(np.abs(totals[37] - totals[256])) < TOL
    # What DDP-style averaging would do with an uneven last chunk (1000 = 27 * 37 + 1).
    assert np.max(np.abs(means_of_means[37] - totals[256])) > 1e-4


def test_same_bits_from_any_thread() -> None:
    params, mean, std, x, y = _problem(5, [64, 256, 256, 10], 512)
    expected = chunk_stats(params, mean, std, x, y)
    results = []

    def work() -> None:
        for _ in range(3):
            results.append(chunk_stats(params, mean, std, x, y))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 9
    for r in results:
        assert np.array_equal(r.grad, expected.grad)
        assert r.loss_sum == expected.loss_sum and r.correct == expected.correct


def test_evaluate_predict_and_probabilities() -> None:
    params, mean, std, x, y = _problem(8, [5, 7, 4], 80)
    stats = chunk_stats(params, mean, std, x, y)
    assert evaluate(params, mean, std, x, y) == (stats.loss_sum, stats.correct)
    proba = predict_proba(params, mean, std, x)
    assert np.allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    # Reference probabilities from the per-row softmax.
    weights, biases = params[0::2], params[1::2]
    for r in range(5):
        h = (x[r] - mean) / std
        for index, (w, b) in enumerate(zip(weights, biases, strict=True)):
            h = w @ h + b
            if index < len(weights) - 1:
                h = np.maximum(h, 0.0)
        expected = np.exp(h - h.max()) / np.exp(h - h.max()).sum()
        assert np.allclose(proba[r], expected, rtol=0, atol=1e-15)
    assert (predict(params, mean, std, x) == np.argmax(proba, axis=1)).all()


def test_ties_predict_the_first_class() -> None:
    sizes = [3, 4, 5]
    params = [np.zeros(s) for s in layer_shapes(sizes)]
    x = np.ones((4, 3))
    assert predict(params, np.zeros(3), np.ones(3), x).tolist() == [0, 0, 0, 0]
    loss, correct = evaluate(params, np.zeros(3), np.ones(3), x, np.array([0, 1, 0, 4]))
    assert correct == 2
    assert loss == pytest.approx(4 * np.log(5.0), abs=1e-12)


def test_flatten_roundtrip_and_shape_errors() -> None:
    sizes = [3, 2, 4]
    assert layer_shapes(sizes) == [(2, 3), (2,), (4, 2), (4,)]
    assert parameter_count(sizes) == 6 + 2 + 8 + 4
    flat = np.arange(20.0)
    params = unflatten(flat, sizes)
    assert params[0].tolist() == [[0, 1, 2], [3, 4, 5]] and params[3].tolist() == [16, 17, 18, 19]
    assert np.array_equal(flatten(params), flat)
    with pytest.raises(ValueError, match="expected 20 parameters"):
        unflatten(np.zeros(19), sizes)
    with pytest.raises(ValueError, match="features must be"):
        chunk_stats(params, np.zeros(3), np.ones(3), np.zeros((2, 4)), np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="layer sizes"):
        layer_shapes([3])


def test_blas_is_held_to_one_thread() -> None:
    params, mean, std, x, y = _problem(2, [4, 3, 2], 10)
    chunk_stats(params, mean, std, x, y)
    blas = [info for info in threadpool_info() if info["user_api"] == "blas"]
    assert blas, "numpy's BLAS should be visible to threadpoolctl"
    assert all(info["num_threads"] == 1 for info in blas)


@pytest.mark.parametrize("offset", [1, 3, 5])
def test_same_bits_whatever_the_buffer_alignment(offset: int) -> None:
    # Workers decode rows and parameters into buffers at arbitrary 8-byte offsets; OpenBLAS
    # packs its operands, so the bits must not depend on where the arrays start.
    params, mean, std, x, y = _problem(4, [64, 256, 256, 10], 300, scale=0.1)
    expected = chunk_stats(params, mean, std, x, y)

    def shifted(a: F) -> F:
        buffer = np.empty(a.size + offset)
        view = buffer[offset:].reshape(a.shape)
        view[...] = a
        return view

    moved = chunk_stats([shifted(p) for p in params], mean, std, shifted(x), y)
    assert shifted(x).ctypes.data % 16 == 8  # odd offsets leave 16-byte alignment
    assert np.array_equal(moved.grad, expected.grad)
    assert moved.loss_sum == expected.loss_sum and moved.correct == expected.correct


@settings(max_examples=40, deadline=None)
@given(chunk=st.integers(1, 300), rows=st.integers(1, 300))
def test_any_chunking_sums_to_the_whole(chunk: int, rows: int) -> None:
    params, mean, std, x, y = _problem(17, [5, 6, 3], rows)
    whole = chunk_stats(params, mean, std, x, y)
    grad = np.zeros_like(whole.grad)
    loss, correct, valid = 0.0, 0, 0
    for start in range(0, rows, chunk):
        part = chunk_stats(params, mean, std, x[start : start + chunk], y[start : start + chunk])
        grad += part.grad
        loss += part.loss_sum
        correct += part.correct
        valid += part.valid
    assert valid == rows and correct == whole.correct
    assert abs(loss - whole.loss_sum) < TOL
    assert np.max(np.abs(grad - whole.grad)) < TOL
