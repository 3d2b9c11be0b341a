"""Forward and backward pass of the ``aner-dense/v1`` classifier over one chunk of rows.

A chunk is computed under frozen parameters and returns sufficient statistics: the gradient
SUM over its rows (never a mean, so the coordinator can weight chunks exactly by summing),
the loss sum, the correct count and the valid count, all in binary64.

**Precision.** A training declares one compute precision (`PRECISIONS`):

- ``float64``: everything in binary64.
- ``float32``: the forward and backward pass run in binary32 from a binary32 copy of the
  frozen parameters (`prepare`, once per pass, never per chunk); the normalised input is the
  binary64 quotient ``(x - mean) / std`` rounded once. What comes back is binary64: each
  weight gradient is sgemm's output widened exactly (sgemm accumulates in register blocks
  over the rows, so its error stays at the level of the binary32 forward pass, ~1e-7
  relative), each bias gradient and the loss are accumulated in binary64 from binary32 terms
  (a binary32 column sum over 8,192 rows is ~25x less accurate). The coordinator sums chunks
  and applies the optimizer in binary64 on the canonical binary64 parameters either way.

**Bits.** One chunk is computed by one thread with BLAS held to one thread
(``single_thread_blas``), so its bits depend neither on the thread nor on the worker that
ran it, in either precision. In float64 every operation is the one the first kernel of this
project used, in the same order (the same BLAS calls and transposition flags, ``out=`` does
not change the dgemm path; the same numpy reductions; division, not multiplication by a
reciprocal; ``da * 0.0`` / ``da * 1.0`` for the ReLU mask), so these kernels changed no bit
of any float64 result.

**Speed.** numpy on single-threaded OpenBLAS beat an equivalent numba kernel at every
benchmark size (``bench/dense_bench.py``, ``kernel_choice``), so the products are numpy's.
What is not a product is kept small: every intermediate array lives in a per-thread
`Workspace` (per layer sizes and precision, grown to the largest chunk seen; a smaller chunk
uses its leading rows, still C-contiguous), every numpy call writes into its destination
(``out=``; ``W.T`` and ``dz.T`` are views that BLAS transposes by flag), weight gradients are
written by the GEMM straight into their slice of the flat gradient vector, and the ReLU, its
mask and the float32 bias sums are numba loops (`loops`). The returned gradient is never a
workspace buffer.

Parameters are a list ``[W1, b1, ..., W(L+1), b(L+1)]`` with ``W_l`` of shape
``(fan_out, fan_in)`` (the contract's ``W_l[o][i]``); ``flatten`` / ``unflatten`` give the single
float64 vector that travels on the wire and that the optimizer updates, in that order,
each ``W_l`` row-major.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from aner_worker.kernels.base import PRECISIONS, Precision

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Compute = npt.NDArray[np.floating]  # float64 or float32, the model's precision

DEFAULT_PRECISION: Precision = "float64"

# Rows per forward block of `predict` / `predict_proba`, so a large file needs bounded memory.
PREDICT_BLOCK = 8192

_blas_state = threading.local()


def single_thread_blas() -> None:
    """Hold BLAS to one thread for the calling thread (idempotent, cheap after the first).

    OpenBLAS with pthreads keeps one process-wide setting, but OpenMP-based BLAS keeps one
    per calling thread, so every thread that computes chunks calls this first.
    """
    if getattr(_blas_state, "limited", False):
        return
    # Loading a numba function also loads scipy's own OpenBLAS when scipy is installed: load
    # the backward pass's numba loops first, so that the limit covers that library too.
    warm_up()
    threadpool_limits(limits=1, user_api="blas")
    _blas_state.limited = True


def check_precision(precision: str) -> Precision:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return "float32" if precision == "float32" else "float64"


# ---------------------------------------------------------------------------------------
# Layout of the flat vector


def layer_shapes(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Shapes of ``[W1, b1, ...]`` for layer sizes ``[d, h1, ..., k]``."""
    return list(_layout(tuple(int(s) for s in sizes))[0])


def parameter_count(sizes: Sequence[int]) -> int:
    return _layout(tuple(int(s) for s in sizes))[1][-1][1]


@functools.lru_cache(maxsize=64)
def _layout(
    sizes: tuple[int, ...],
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...]]:
    """Shapes and ``(start, stop)`` offsets of ``[W1, b1, ...]``, computed once per sizes.

    ``math.prod``, not ``np.prod``: the latter builds an array per call (~4 us), which made
    a layout cost ~75 us, once per task and once per step.
    """
    if len(sizes) < 2 or any(s < 1 for s in sizes):
        raise ValueError(f"layer sizes must be at least two positive numbers, got {list(sizes)}")
    shapes: list[tuple[int, ...]] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        shapes += [(fan_out, fan_in), (fan_out,)]
    offsets, at = [], 0
    for shape in shapes:
        n = math.prod(shape)
        offsets.append((at, at + n))
        at += n
    return tuple(shapes), tuple(offsets)


def flatten(params: Sequence[Floats]) -> Floats:
    """One float64 vector of ``[W1, b1, ...]`` in order, each row-major."""
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in params])


def unflatten(flat: Floats, sizes: Sequence[int]) -> list[Floats]:
    """Views of ``flat`` shaped as ``[W1, b1, ...]`` for layer sizes ``sizes``."""
    views: list[Floats] = _views(flat, tuple(int(s) for s in sizes))  # type: ignore[assignment]
    return views


def _views(flat: Compute, sizes: tuple[int, ...]) -> list[Compute]:
    shapes, offsets = _layout(sizes)
    total = offsets[-1][1]
    if flat.shape != (total,):
        raise ValueError(f"expected {total} parameters for sizes {list(sizes)}, got {flat.shape}")
    return [flat[a:b].reshape(shape) for (a, b), shape in zip(offsets, shapes, strict=True)]


def sizes_of(params: Sequence[Floats]) -> list[int]:
    """Layer sizes ``[d, h1, ..., k]`` of a parameter list ``[W1, b1, ...]``."""
    if len(params) < 2 or len(params) % 2:
        raise ValueError(f"params must be [W1, b1, ..., WL, bL], got {len(params)} arrays")
    if any(np.ndim(w) != 2 for w in params[0::2]):
        raise ValueError("every W of [W1, b1, ...] must be 2-D")
    sizes = [int(np.shape(params[0])[1]), *(int(np.shape(w)[0]) for w in params[0::2])]
    for index, (p, shape) in enumerate(zip(params, layer_shapes(sizes), strict=True)):
        if np.shape(p) != shape:
            raise ValueError(f"parameter {index} has shape {np.shape(p)}, expected {shape}")
    return sizes


# ---------------------------------------------------------------------------------------
# The frozen parameters of a pass, in the compute precision


@dataclass(frozen=True, eq=False)
class Model:
    """The frozen parameters of one pass in the compute precision: the flat vector and
    views of it, ``weights`` ``[W1, W2, ...]`` and ``biases`` ``[b1, b2, ...]``."""

    sizes: tuple[int, ...]
    precision: Precision
    flat: Compute
    weights: tuple[Compute, ...]
    biases: tuple[Compute, ...]

    @property
    def dtype(self) -> np.dtype[np.floating]:
        return self.flat.dtype

    @property
    def n_params(self) -> int:
        return int(self.flat.size)


def prepare(flat: Floats, sizes: Sequence[int], precision: str = DEFAULT_PRECISION) -> Model:
    """The model of a flat binary64 parameter vector: views of ``flat`` itself in float64
    (no copy), one rounded binary32 copy in float32. Meant once per pass, not per chunk."""
    chosen = check_precision(precision)
    dims = tuple(int(s) for s in sizes)
    vector = np.asarray(flat)
    if vector.dtype != np.float64:
        raise ValueError(f"parameters must be binary64, got {vector.dtype}")
    compute = vector if chosen == "float64" else vector.astype(np.float32)
    views = _views(compute, dims)
    return Model(dims, chosen, compute, tuple(views[0::2]), tuple(views[1::2]))


def as_model(params: Model | Sequence[Floats], precision: str = DEFAULT_PRECISION) -> Model:
    """A `Model` as it is, or one made from a parameter list ``[W1, b1, ...]``."""
    if isinstance(params, Model):
        return params
    return prepare(flatten(params), sizes_of(params), precision)


# ---------------------------------------------------------------------------------------
# Per-thread buffers


class Workspace:
    """Every buffer a chunk needs, for up to ``capacity`` rows of one model shape and
    precision; ``[:m]`` views serve a chunk of ``m`` rows."""

    def __init__(self, sizes: tuple[int, ...], dtype: np.dtype[np.floating], capacity: int):
        self.capacity = m = capacity
        k = sizes[-1]
        # acts[0]: the normalised input; acts[l]: the ReLU output of hidden layer l.
        self.acts = [np.empty((m, s), dtype) for s in sizes[:-1]]
        # The logits; after the softmax, in place, dz of the output layer.
        self.logits = np.empty((m, k), dtype)
        # deltas[l]: dz of hidden layer l + 1 (shaped as acts[l + 1]).
        self.deltas = [np.empty((m, s), dtype) for s in sizes[1:-1]]
        wide = dtype == np.float32
        # float32: the binary64 quotient (x - mean) / std before its one rounding, and each
        # weight gradient from sgemm before its exact widening into the flat vector.
        self.quotient = np.empty((m, sizes[0])) if wide else None
        self.grad_w = (
            [np.empty((b, a), dtype) for a, b in itertools.pairwise(sizes)] if wide else []
        )
        self.row_max = np.empty(m, dtype)
        self.row_sum = np.empty(m, dtype)
        self.row_loss = np.empty(m, dtype)
        self.z_y = np.empty(m, dtype)
        self.arg = np.empty(m, np.intp)
        self.hit = np.empty(m, np.bool_)
        self.index = np.empty(m, np.intp)
        self.row_base = np.arange(m, dtype=np.intp) * k  # flat index of each row's z[r, 0]


_local = threading.local()
_KEEP_SHAPES = 2  # a worker serves one job at a time: its model, in one or two precisions
# A workspace larger than this is not kept between chunks (a huge chunk pays its allocation
# each time, as every chunk did before workspaces), so a thread holds at most about twice it.
KEEP_BYTES = 256 << 20


def _bytes_per_row(sizes: tuple[int, ...], dtype: np.dtype[np.floating]) -> int:
    activations = sum(sizes[:-1]) + sizes[-1] + sum(sizes[1:-1])
    extra = sizes[0] * 8 if dtype == np.float32 else 0  # the binary64 quotient
    return activations * dtype.itemsize + extra + 6 * 8  # and the per-row scratch


def workspace(model: Model, rows: int) -> Workspace:
    """This thread's workspace for the model's shape and precision, at least ``rows`` rows."""
    cache: dict[tuple[tuple[int, ...], str], Workspace] | None = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = {}
    key = (model.sizes, model.precision)
    found = cache.get(key)
    if found is not None and found.capacity >= rows:
        return found
    made = Workspace(model.sizes, model.dtype, max(rows, 1))
    if rows * _bytes_per_row(model.sizes, model.dtype) > KEEP_BYTES:
        return made
    if found is None and len(cache) >= _KEEP_SHAPES:
        cache.clear()
    cache[key] = made
    return made


# ---------------------------------------------------------------------------------------
# The chunk


@dataclass(frozen=True)
class ChunkStats:
    """Sufficient statistics of one chunk under frozen parameters."""

    grad: Floats  # flat, layout of ``flatten``: the sum over the chunk's rows
    loss_sum: float
    correct: int
    valid: int


def _check(model: Model, mean: Floats, std: Floats, x: Floats) -> None:
    d = model.sizes[0]
    if x.ndim != 2 or x.shape[1] != d or mean.shape != (d,) or std.shape != (d,):
        raise ValueError(
            f"features must be (m, {d}) with mean and std ({d},), got {x.shape}, "
            f"{mean.shape} and {std.shape}"
        )


def _labels(model: Model, y: Ints, m: int) -> npt.NDArray[np.intp]:
    labels = np.ascontiguousarray(y, dtype=np.intp)
    k = model.sizes[-1]
    if labels.shape != (m,) or (m and not (int(labels.min()) >= 0 and int(labels.max()) < k)):
        raise ValueError(f"labels must be {m} class indices in [0, {k})")
    return labels


# A diverging run overflows to inf and NaN; that is reported once, by the coordinator, as a
# non-finite loss naming the epoch and step, not as numpy warnings from every worker.
# A fresh errstate per call: numpy's context object keeps the state it replaced, so one shared
# instance entered by two threads at once would restore the wrong one.
def _quiet() -> np.errstate:
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _forward(
    model: Model,
    ws: Workspace,
    mean: Floats,
    std: Floats,
    x: Floats,
    fast: bool = True,
    finite: npt.NDArray[np.bool_] | None = None,
) -> Compute:
    """Fill the activations of rows ``x`` (raw features) and return their logits. ``fast``:
    the ReLU as a numba loop (`loops.relu`, the same bits as numpy's maximum). ``finite``
    (prediction's, one flag a row): cleared for a row whose normalised features or any
    layer's pre-activations hold a value that is not finite."""
    m = x.shape[0]
    h = ws.acts[0][:m]
    if ws.quotient is None:
        np.subtract(x, mean, out=h)
        np.divide(h, std, out=h)  # division, not a reciprocal's product: the same bits
    else:
        q = ws.quotient[:m]
        np.subtract(x, mean, out=q)
        np.divide(q, std, out=h, casting="same_kind")  # the binary64 quotient, rounded once
    if finite is not None:
        finite &= np.isfinite(h).all(axis=1)
    last = len(model.weights) - 1
    for layer, (w, b) in enumerate(zip(model.weights, model.biases, strict=True)):
        z = ws.logits[:m] if layer == last else ws.acts[layer + 1][:m]
        np.matmul(h, w.T, out=z)
        np.add(z, b, out=z)
        if finite is not None:
            finite &= np.isfinite(z).all(axis=1)
        if layer < last:
            # The backward pass needs only a > 0, which equals z > 0; the derivative at
            # exactly 0 is taken as 0.
            if fast:
                from aner_worker.kernels.dense.loops import relu

                relu(z)
            else:
                np.maximum(z, 0.0, out=z)
        h = z
    return h


def _softmax_loss(ws: Workspace, z: Compute, y: npt.NDArray[np.intp]) -> tuple[float, int]:
    """Loss sum and correct count of logits ``z``, leaving ``softmax(z) - onehot(y)`` (the
    output layer's dz) in ``z``. Loss per row ``(m + log s) - z[y]``, ``m`` the row maximum
    and ``s = sum exp(z - m)``; in float32 each row's loss is summed in binary64."""
    m = z.shape[0]
    row_max, row_sum, loss = ws.row_max[:m], ws.row_sum[:m], ws.row_loss[:m]
    index, z_y = ws.index[:m], ws.z_y[:m]
    np.max(z, axis=1, out=row_max)
    np.argmax(z, axis=1, out=ws.arg[:m])
    correct = int(np.count_nonzero(np.equal(ws.arg[:m], y, out=ws.hit[:m])))
    np.add(ws.row_base[:m], y, out=index)
    flat = z.reshape(-1)
    np.take(flat, index, out=z_y)
    np.subtract(z, row_max[:, None], out=z)
    np.exp(z, out=z)
    np.sum(z, axis=1, out=row_sum)
    np.log(row_sum, out=loss)
    np.add(row_max, loss, out=loss)
    np.subtract(loss, z_y, out=loss)
    loss_sum = float(np.sum(loss, dtype=np.float64))
    np.divide(z, row_sum[:, None], out=z)
    flat[index] -= 1.0
    return loss_sum, correct


def _backward(model: Model, ws: Workspace, dz: Compute, grad: Floats) -> None:
    """Write the gradient sums of the chunk into ``grad`` (binary64, flat), last layer first."""
    from aner_worker.kernels.dense.loops import column_sums, relu_mask

    m = dz.shape[0]
    _, offsets = _layout(model.sizes)
    for layer in range(len(model.weights) - 1, -1, -1):
        a = ws.acts[layer][:m]
        (w0, w1), (b0, b1) = offsets[2 * layer], offsets[2 * layer + 1]
        gw = grad[w0:w1].reshape(model.weights[layer].shape)  # a view into the flat vector
        if ws.grad_w:
            staged = ws.grad_w[layer]
            np.matmul(dz.T, a, out=staged)  # sgemm
            np.copyto(gw, staged)  # exact widening
            if m:  # np.sum(dz, axis=0, dtype=np.float64), the same order, 3-4x faster
                column_sums(dz, grad[b0:b1])
            else:
                grad[b0:b1] = 0.0
        else:
            np.matmul(dz.T, a, out=gw)  # dgemm straight into the flat vector
            np.sum(dz, axis=0, out=grad[b0:b1])
        if layer:
            da = ws.deltas[layer - 1][:m]
            np.matmul(dz, model.weights[layer], out=da)
            relu_mask(da, a)
            dz = da


def chunk_stats(
    params: Model | Sequence[Floats],
    mean: Floats,
    std: Floats,
    x: Floats,
    y: Ints,
    *,
    out: Floats | None = None,
) -> ChunkStats:
    """Gradient sum, loss sum, correct and valid counts of rows ``(x, y)``.

    ``x`` holds raw features; ``(x - mean) / std`` is applied here, so the model's own
    normalisation travels with the parameters. Loss per row: ``logsumexp(z) - z[y]``.
    ``params``: a prepared `Model` (its precision is the compute precision) or a float64
    list ``[W1, b1, ...]``. ``out``: a contiguous binary64 vector to hold the gradient;
    a fresh one otherwise.
    """
    model = as_model(params)
    _check(model, mean, std, x)
    m = x.shape[0]
    labels = _labels(model, y, m)
    if out is None:
        out = np.empty(model.n_params)
    elif out.shape != (model.n_params,) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous binary64 vector of {model.n_params}")
    single_thread_blas()
    ws = workspace(model, m)
    with _quiet():
        z = _forward(model, ws, mean, std, x)
        loss_sum, correct = _softmax_loss(ws, z, labels)
        _backward(model, ws, z, out)
    return ChunkStats(grad=out, loss_sum=loss_sum, correct=correct, valid=m)


def evaluate(
    params: Model | Sequence[Floats], mean: Floats, std: Floats, x: Floats, y: Ints
) -> tuple[float, int]:
    """Forward only: ``(loss_sum, correct)`` of rows ``(x, y)``."""
    model = as_model(params)
    _check(model, mean, std, x)
    labels = _labels(model, y, x.shape[0])
    single_thread_blas()
    ws = workspace(model, x.shape[0])
    with _quiet():
        return _softmax_loss(ws, _forward(model, ws, mean, std, x), labels)


class NotFinite(ValueError):
    """A row of `predict` whose computation left binary64 (or binary32): its normalised
    features, a layer's pre-activations or its logits hold a value that is not a finite
    number. The softmax of such a row is NaN and its argmax a class by accident, so no
    prediction is given for it; the caller says whose fault it is."""

    def __init__(self, row: int) -> None:
        super().__init__(f"row {row}: a value of the network's forward pass is not finite")
        self.row = row


def _logit_blocks(
    params: Model | Sequence[Floats], mean: Floats, std: Floats, x: Floats, precision: str
) -> list[Compute]:
    """The logits of rows ``x`` in blocks of at most PREDICT_BLOCK rows, each a fresh copy;
    the buffers are this call's own, not the thread's workspace (a prediction may be large
    and is done once). `NotFinite` names the first row whose forward pass left the finite
    numbers anywhere (a ReLU would hide an infinite pre-activation)."""
    model = as_model(params, precision)
    _check(model, mean, std, x)
    single_thread_blas()
    ws = Workspace(model.sizes, model.dtype, max(1, min(PREDICT_BLOCK, x.shape[0])))
    blocks = []
    with _quiet():
        for start in range(0, x.shape[0], PREDICT_BLOCK):
            part = x[start : start + PREDICT_BLOCK]
            finite = np.ones(part.shape[0], dtype=bool)
            blocks.append(_forward(model, ws, mean, std, part, fast=False, finite=finite).copy())
            if not finite.all():
                raise NotFinite(start + int(np.argmin(finite)))
    return blocks or [np.empty((0, model.sizes[-1]), model.dtype)]


def predict_proba(
    params: Model | Sequence[Floats],
    mean: Floats,
    std: Floats,
    x: Floats,
    precision: str = DEFAULT_PRECISION,
) -> Floats:
    """Class probabilities ``softmax(z)`` of each row of raw features ``x``, computed in the
    model's precision and returned in binary64; `NotFinite` for a row that cannot be."""
    out = []
    with _quiet():
        for z in _logit_blocks(params, mean, std, x, precision):
            e = np.exp(z - z.max(axis=1)[:, None])
            out.append((e / e.sum(axis=1)[:, None]).astype(np.float64))
    return np.concatenate(out)


def predict(
    params: Model | Sequence[Floats],
    mean: Floats,
    std: Floats,
    x: Floats,
    precision: str = DEFAULT_PRECISION,
) -> Ints:
    """Class index of each row: the first index of the largest logit, in the model's
    precision; `NotFinite` for a row that has none."""
    blocks = _logit_blocks(params, mean, std, x, precision)
    out: Ints = np.concatenate([np.argmax(z, axis=1) for z in blocks]).astype(np.int64)
    return out


def moment_sums(x: Floats) -> tuple[Floats, Floats]:
    """Per-feature ``(sum, m2)`` of rows ``x``, ``m2`` about the rows' own mean.

    A chunk's share of the normalisation fit; the coordinator combines the chunks in order
    (``aner_worker.kernels.dense.plan.combine_moments``).
    """
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"moment sums need a non-empty (m, d) array, got {x.shape}")
    # A feature too large to square (1e200) gives inf here, which the coordinator refuses
    # naming the feature (`combine_moments`): numpy's warning would only be noise.
    with np.errstate(over="ignore", invalid="ignore"):
        total: Floats = x.sum(axis=0)
        deviation = x - total / x.shape[0]
        m2: Floats = (deviation * deviation).sum(axis=0)
    return total, m2


def warm_up() -> None:
    """Load the backward pass's numba loops now, not during the first chunk."""
    from aner_worker.kernels.dense.loops import warm_up as warm_loops

    warm_loops()
