"""The chunk kernel of aner-dense/v1 against the row-by-row reference (dense_reference).

Gradient sums, loss sums and correct counts within 1e-9; chunkings that agree (and a mean
of means that would not); the same bits whichever thread runs a chunk. In float64, the
bits of the plain numpy kernel exactly; in float32, the float32 reference within a stated
tolerance, with bias and loss sums taken in binary64.
"""

from __future__ import annotations

import itertools
import threading

import dense_reference as ref
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info

from aner_worker.kernels.dense.network import (
    PRECISIONS,
    chunk_stats,
    evaluate,
    flatten,
    layer_shapes,
    parameter_count,
    predict,
    predict_proba,
    prepare,
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

    def shifted(a: F) -> F:
        buffer = np.empty(a.size + offset)
        view = buffer[offset:].reshape(a.shape)
        view[...] = a
        return view

    sizes = [64, 256, 256, 10]
    for precision in PRECISIONS:
        expected = chunk_stats(prepare(flatten(params), sizes, precision), mean, std, x, y)
        flat = shifted(flatten(params))
        assert flat.ctypes.data % 16 == 8  # odd offsets leave 16-byte alignment
        moved = chunk_stats(prepare(flat, sizes, precision), mean, std, shifted(x), y)
        assert np.array_equal(moved.grad, expected.grad)
        assert moved.loss_sum == expected.loss_sum and moved.correct == expected.correct
    moved = chunk_stats([shifted(p) for p in params], mean, std, shifted(x), y)
    expected = chunk_stats(params, mean, std, x, y)
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


# -- the kernels near the BLAS limit change no float64 bit -----------------------------------


def _plain_chunk_stats(
    params: list[F], mean: F, std: F, x: F, y: npt.NDArray[np.int64]
) -> tuple[F, float, int]:
    """The first kernel of this project, verbatim in its arithmetic: fresh arrays, numpy's
    ``a > 0`` mask, ``np.concatenate``. The workspace kernel must give its bits exactly."""
    rows = np.arange(x.shape[0])
    h = (x - mean) / std
    acts = [h]
    last = len(params) // 2 - 1
    for layer in range(last + 1):
        z = h @ params[2 * layer].T
        z += params[2 * layer + 1]
        if layer < last:
            h = np.maximum(z, 0.0, out=z)
            acts.append(h)
    m = z.max(axis=1)
    e = np.exp(z - m[:, None])
    s = e.sum(axis=1)
    loss = float(np.sum(m + np.log(s) - z[rows, y]))
    correct = int(np.count_nonzero(np.argmax(z, axis=1) == y))
    dz = e
    dz /= s[:, None]
    dz[rows, y] -= 1.0
    grads: list[F] = [np.empty(0)] * len(params)
    for layer in range(last, -1, -1):
        grads[2 * layer] = dz.T @ acts[layer]
        grads[2 * layer + 1] = dz.sum(axis=0)
        if layer:
            da = dz @ params[2 * layer]
            da *= acts[layer] > 0.0
            dz = da
    return flatten(grads), loss, correct


@pytest.mark.parametrize(
    ("sizes", "rows"),
    [([64, 64, 64, 10], 256), ([64, 256, 256, 10], 1024), ([5, 7, 3], 1), ([3, 4], 37)],
)
def test_float64_bits_are_those_of_the_plain_kernel(sizes: list[int], rows: int) -> None:
    params, mean, std, x, y = _problem(21, sizes, rows, scale=0.3)
    model = prepare(flatten(params), sizes)
    # A float32 chunk and a larger chunk first: neither may leave a trace in the buffers.
    chunk_stats(prepare(flatten(params), sizes, "float32"), mean, std, x, y)
    big = _problem(22, sizes, rows + 50, scale=0.3)
    chunk_stats(model, big[1], big[2], big[3], big[4])
    for part in (slice(0, rows), slice(0, rows // 2 + 1)):
        stats = chunk_stats(model, mean, std, x[part], y[part])
        grad, loss, correct = _plain_chunk_stats(params, mean, std, x[part], y[part])
        assert np.array_equal(stats.grad, grad)
        assert stats.loss_sum == loss and stats.correct == correct
        assert evaluate(model, mean, std, x[part], y[part]) == (loss, correct)


def test_results_are_never_the_threads_buffers() -> None:
    params, mean, std, x, y = _problem(6, [6, 9, 4], 50)
    model = prepare(flatten(params), [6, 9, 4])
    first = chunk_stats(model, mean, std, x, y)
    kept = first.grad.copy()
    second = chunk_stats(model, mean, std, x[:20], y[:20])
    assert np.array_equal(first.grad, kept) and not np.shares_memory(first.grad, second.grad)
    out = np.full(model.n_params, np.nan)
    third = chunk_stats(model, mean, std, x, y, out=out)
    assert third.grad is out and np.array_equal(out, kept)
    with pytest.raises(ValueError, match="contiguous binary64 vector"):
        chunk_stats(model, mean, std, x, y, out=np.empty(model.n_params, np.float32))
    with pytest.raises(ValueError, match=r"labels must be 50 class indices in \[0, 4\)"):
        chunk_stats(model, mean, std, x, np.full(50, 4))


def test_prepare_views_float64_and_rounds_float32_once() -> None:
    sizes = [3, 2, 4]
    flat = np.linspace(-1.0, 1.0, parameter_count(sizes))
    model = prepare(flat, sizes)
    assert model.precision == "float64" and np.shares_memory(model.flat, flat)
    assert np.shares_memory(model.weights[1], flat) and model.weights[1].shape == (4, 2)
    low = prepare(flat, sizes, "float32")
    assert low.flat.dtype == np.float32 and np.array_equal(low.flat, flat.astype(np.float32))
    assert not np.shares_memory(low.flat, flat)
    with pytest.raises(ValueError, match="precision must be one of float64, float32, got 'f16'"):
        prepare(flat, sizes, "f16")
    with pytest.raises(ValueError, match="binary64"):
        prepare(flat.astype(np.float32), sizes, "float32")


def test_the_precision_lists_agree() -> None:
    from aner_coord.computations.dense.request import PRECISIONS as REQUESTED
    from aner_worker.kernels.base import PRECISIONS as OFFERED

    assert PRECISIONS == REQUESTED == OFFERED == ("float64", "float32")


# -- float32 ----------------------------------------------------------------------------------


def _abs_terms(params: list[F], mean: F, std: F, x: F, y: npt.NDArray[np.int64]) -> F:
    """Per parameter, the sum over rows of |that row's term| (in float32): the scale that
    the rounding error of a sum of those terms is relative to."""
    w32 = [w.astype(np.float32) for w in params[0::2]]
    b32 = [b.astype(np.float32) for b in params[1::2]]
    xn = ((x - mean) / std).astype(np.float32)
    total = np.zeros(parameter_count([params[0].shape[1], *(w.shape[0] for w in w32)]))
    for r in range(x.shape[0]):
        result = ref.row(w32, b32, xn[r], int(y[r]))
        parts = []
        for gw, gb in zip(result.grads_w, result.grads_b, strict=True):
            parts += [np.abs(gw).ravel(), np.abs(gb)]
        total += np.concatenate(parts)
    return total


def _with_layer_floor(terms: F, sizes: list[int]) -> F:
    """`terms` plus, for each parameter, the mean of its layer's terms: a row's term is
    `delta * activation`, and where `delta` itself comes from a cancelling sum (a one-unit
    bottleneck, a softmax near its target) its binary32 error is relative to the layer's
    scale, not to the small term it cancelled down to."""
    floor = np.zeros_like(terms)
    start = 0
    for a, b in itertools.pairwise(sizes):
        n = a * b + b
        floor[start : start + n] = terms[start : start + n].mean()
        start += n
    out: F = terms + floor
    return out


# Tolerance of a float32 chunk against the float32 reference (each row's pass in binary32 from
# the same rounded inputs, terms summed in binary64): 1e-4 of the sum of |row terms|, per
# parameter. Both sides round every product and sum of a row to binary32 (eps 6e-8) but in a
# different order (BLAS blocking against one row at a time) and sgemm sums the weight terms in
# binary32 blocks: a row term's error grows with the layers, their widths and the logits'
# size, here up to 5 layers of 9 units with logits in the hundreds. Relative to the sum of
# |terms| alone, hypothesis found 1.7e-4 (layers 8, 9, 1, 9: a one-unit bottleneck whose
# delta cancels); relative to that sum plus its layer's mean term (`_with_layer_floor`), at
# most 6.3e-7 over 600 random problems including that one. A fault (parameters not rounded
# once, a row or a layer missing, a term of the wrong row) is of the order of the terms.
F32_CHUNK = 1e-4


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=5),
    rows=st.integers(1, 60),
    scale=st.sampled_from([0.1, 1.0]),
)
@example(seed=7, sizes=[8, 9, 1, 9], rows=7, scale=1.0)  # a bottleneck whose delta cancels
def test_float32_chunk_agrees_with_the_float32_reference(
    seed: int, sizes: list[int], rows: int, scale: float
) -> None:
    params, mean, std, x, y = _problem(seed, sizes, rows, scale)
    y = y % sizes[-1]
    stats = chunk_stats(prepare(flatten(params), sizes, "float32"), mean, std, x, y)
    gw, gb, loss, _ = ref.batch_sums(params[0::2], params[1::2], (x - mean) / std, y, "float32")
    grad = np.concatenate([a for w, b in zip(gw, gb, strict=True) for a in (w.ravel(), b)])
    bound = F32_CHUNK * _with_layer_floor(_abs_terms(params, mean, std, x, y), sizes)
    assert np.all(np.abs(stats.grad - grad) <= bound)
    assert abs(stats.loss_sum - loss) <= 1e-6 * max(1.0, abs(loss))
    assert stats.valid == rows
    exact = chunk_stats(params, mean, std, x, y)
    assert abs(stats.correct - exact.correct) <= 1  # a near tie may round the other way


def test_float32_bias_and_loss_sums_are_binary64_sums() -> None:
    # With every weight zero, each row's logits are the output bias, so there are only k
    # distinct rows: their terms come from one-row chunks (a one-row sum is the term itself,
    # widened exactly). 100,000 of them summed in binary64 are exact (24-bit terms, 17-bit
    # counts), so the chunk's bias gradient and loss must equal the counts times the terms
    # exactly; a binary32 running sum would be off by ~1e-3 relative.
    sizes = [2, 3, 3]
    flat = np.zeros(parameter_count(sizes))
    flat[-3:] = [0.1, -0.7, 0.35]  # b2
    model = prepare(flat, sizes, "float32")
    mean, std = np.zeros(2), np.ones(2)
    n = 100_000
    y = np.random.default_rng(1).integers(0, 3, size=n)
    x = np.ones((n, 2))
    stats = chunk_stats(model, mean, std, x, y)
    terms = [chunk_stats(model, mean, std, x[:1], np.array([c])) for c in range(3)]
    counts = np.bincount(y, minlength=3)
    expected = sum(int(c) * t.grad[-3:] for c, t in zip(counts, terms, strict=True))
    assert np.array_equal(stats.grad[-3:], expected)
    assert stats.loss_sum == sum(int(c) * t.loss_sum for c, t in zip(counts, terms, strict=True))
    naive = np.zeros(3, np.float32)
    for c, t in zip(counts, terms, strict=True):
        for _ in range(int(c) // 1000):  # a binary32 sum, in blocks of 1,000 (fast enough)
            naive += np.float32(1000) * t.grad[-3:].astype(np.float32)
    assert not np.array_equal(naive.astype(np.float64), expected)


def test_float32_same_bits_from_any_thread_and_any_earlier_chunk() -> None:
    params, mean, std, x, y = _problem(5, [64, 256, 256, 10], 512, scale=0.1)
    model = prepare(flatten(params), [64, 256, 256, 10], "float32")
    expected = chunk_stats(model, mean, std, x, y)
    results = []

    def work(rows: int) -> None:
        chunk_stats(model, mean, std, x[:rows], y[:rows])  # leaves its own numbers behind
        results.append(chunk_stats(model, mean, std, x, y))

    threads = [threading.Thread(target=work, args=(r,)) for r in (3, 511, 512)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    for r in results:
        assert np.array_equal(r.grad, expected.grad)
        assert r.loss_sum == expected.loss_sum and r.correct == expected.correct
    # It is a float32 computation: not the float64 bits, but close to them.
    exact = chunk_stats(params, mean, std, x, y)
    assert not np.array_equal(expected.grad, exact.grad)
    rel = np.linalg.norm(expected.grad - exact.grad) / np.linalg.norm(exact.grad)
    assert rel < 1e-5


def test_float32_predictions_are_computed_in_float32() -> None:
    params, mean, std, x, _ = _problem(8, [5, 7, 4], 80)
    low = predict_proba(params, mean, std, x, "float32")
    assert np.array_equal(low.astype(np.float32).astype(np.float64), low)
    assert np.max(np.abs(low - predict_proba(params, mean, std, x))) < 1e-5
    assert np.array_equal(predict(params, mean, std, x, "float32"), np.argmax(low, axis=1))


@pytest.mark.parametrize("shape", [(1, 1), (3, 10), (1024, 256), (37, 7)])
def test_the_numba_loops_are_numpys_sums_maximum_and_mask(shape: tuple[int, int]) -> None:
    from aner_worker.kernels.dense.loops import column_sums, relu, relu_mask

    rng = np.random.default_rng(shape[0])
    dz = (rng.normal(size=shape) * 10.0 ** rng.integers(-8, 8, size=shape)).astype(np.float32)
    out = np.empty(shape[1])
    column_sums(dz, out)
    assert np.array_equal(out, np.sum(dz, axis=0, dtype=np.float64))
    for dtype in (np.float64, np.float32):
        a = rng.normal(size=shape).astype(dtype)
        a.flat[:3] = [0.0, -0.0, np.nan][: a.size]
        da = rng.normal(size=shape).astype(dtype)
        da.flat[-2:] = [-0.0, np.inf][-da.size :]
        with np.errstate(invalid="ignore"):  # inf * 0 is NaN, as the mask must make it
            expected = da * (a > 0.0)
        relu_mask(da, a)
        assert np.array_equal(da, expected, equal_nan=True)
        assert np.array_equal(np.signbit(da), np.signbit(expected))
        z = rng.normal(size=shape).astype(dtype)
        z.flat[:5] = [-0.0, 0.0, np.nan, -np.nan, -np.inf][: z.size]
        z.flat[-1:] = 5e-324 if dtype == np.float64 else 1e-45  # the smallest subnormal
        expected = np.maximum(z, 0.0)
        relu(z)
        assert np.array_equal(z.view(np.uint8), expected.view(np.uint8))  # NaN payloads too


def test_a_thread_keeps_its_buffers_but_not_huge_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from aner_worker.kernels.dense import network

    params, mean, std, x, y = _problem(9, [6, 9, 4], 400)
    model = prepare(flatten(params), [6, 9, 4])
    assert network.workspace(model, 100) is network.workspace(model, 50)
    grown = network.workspace(model, 300)
    assert grown.capacity == 300 and network.workspace(model, 10) is grown
    monkeypatch.setattr(network, "KEEP_BYTES", 1000)  # this model's 400 rows take more
    assert network.workspace(model, 400) is not network.workspace(model, 400)
    expected = chunk_stats(params, mean, std, x, y)  # fresh buffers, the same bits
    monkeypatch.undo()
    again = chunk_stats(model, mean, std, x, y)
    assert np.array_equal(expected.grad, again.grad) and expected.loss_sum == again.loss_sum
