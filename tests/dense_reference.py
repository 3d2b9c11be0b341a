"""An independent reading of docs/contracts.md, section 9 (``aner-dense/v1``) for the tests.

Written from the SPEC text alone: words straight from ``numpy.random.Philox``, one row at a
time for the forward and backward pass, plain numpy for the rest. It imports nothing from
``aner_worker`` or ``aner_coord``, so a misreading of the SPEC in the product is not
repeated here. Slow by design; meant for small sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F = npt.NDArray[np.float64]
I = npt.NDArray[np.int64]  # noqa: E741


def words(seed: int, stream: int, n: int) -> npt.NDArray[np.uint64]:
    """``W[0 .. n-1]`` of stream ``(seed, stream)``; numpy's counter b - 1 starts at block b."""
    gen = np.random.Philox(key=seed + (stream << 64), counter=2**256 - 1)
    out: npt.NDArray[np.uint64] = gen.random_raw(n)
    return out


def u_of(w: npt.NDArray[np.uint64]) -> F:
    return (w >> np.uint64(11)).astype(np.float64) * 2.0**-53


def s_of(w: npt.NDArray[np.uint64]) -> F:
    return (w >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0


def teacher(n: int, d: int, k: int, seed: int) -> tuple[F, I]:
    """The teacher set ``aner-dataset/teacher/v1``, all rows at once."""
    x = s_of(words(seed, 3, n * d)).reshape(n, d)
    a_w = s_of(words(seed, 4, 32 * d)).reshape(32, d)
    c_w = s_of(words(seed, 5, k * 32)).reshape(k, 32)
    # Sums in index order, one multiply and one add at a time, over all rows at once.
    hidden = np.zeros((n, 32))
    for h in range(32):
        s = np.zeros(n)
        for j in range(d):
            s = s + a_w[h, j] * x[:, j]
        hidden[:, h] = np.maximum(s, 0.0)
    z = np.zeros((n, k))
    for c in range(k):
        s = np.zeros(n)
        for h in range(32):
            s = s + c_w[c, h] * hidden[:, h]
        z[:, c] = s
    y = np.argmax(z, axis=1)
    noisy = u_of(words(seed, 6, n)) < 0.05
    flipped = np.floor(u_of(words(seed, 7, n)) * k).astype(np.int64)
    return x, np.where(noisy, flipped, y).astype(np.int64)


def roles(seed: int, n: int, test: float = 0.15, validation: float = 0.15) -> npt.NDArray[np.uint8]:
    u = u_of(words(seed, 8, n))
    out = np.zeros(n, dtype=np.uint8)
    out[u < test + validation] = 1
    out[u < test] = 2
    return out


def normalisation(x_train: F) -> tuple[F, F]:
    n = x_train.shape[0]
    mean = x_train.sum(axis=0) / n
    std = np.sqrt(((x_train - mean) ** 2).sum(axis=0) / n)
    return mean, np.where(std == 0.0, 1.0, std)


def init(seed: int, sizes: list[int]) -> tuple[list[F], list[F]]:
    weights, biases = [], []
    for layer in range(1, len(sizes)):
        a, b = sizes[layer - 1], sizes[layer]
        w = np.empty((b, a))
        raw = s_of(words(seed, 16 + layer, a * b))
        for o in range(b):
            for i in range(a):
                w[o][i] = raw[o * a + i] * math.sqrt(6 / (a + b))
        weights.append(w)
        biases.append(np.zeros(b))
    return weights, biases


def epoch_order(seed: int, epoch: int, train: I) -> I:
    keys = words(seed, 2**32 + epoch, int(train.max()) + 1)[train]
    # lexsort: last key primary; ties by position.
    out: I = train[np.lexsort((train, keys))]
    return out


@dataclass
class RowResult:
    grads_w: list[F]
    grads_b: list[F]
    loss: float
    correct: bool


def _product(a: F, b: F) -> F:
    """``a @ b``, judged by its values, not by the CPU's floating-point flags: OpenBLAS's
    AVX-512 float32 kernels (seen on an Intel Xeon) may raise the "invalid" flag on finite
    inputs, now and then, and numpy then warns (an error in the suite). A real NaN or
    infinity still comes out as one, and the tests compare values."""
    with np.errstate(invalid="ignore"):
        out: F = a @ b
    return out


def row(weights: list[F], biases: list[F], x: F, y: int) -> RowResult:
    """Loss, correctness and gradient of one normalised row, by the chain rule."""
    activations = [x]
    pre = []
    h = x
    for index, (w, b) in enumerate(zip(weights, biases, strict=True)):
        z = _product(w, h) + b
        pre.append(z)
        h = z if index == len(weights) - 1 else np.where(z > 0.0, z, 0.0)
        activations.append(h)
    z = pre[-1]
    m = float(np.max(z))
    total = float(np.sum(np.exp(z - m)))
    loss = m + math.log(total) - float(z[y])
    p = np.exp(z - m) / total
    delta = p.copy()
    delta[y] -= 1.0
    grads_w: list[F] = [np.empty(0)] * len(weights)
    grads_b: list[F] = [np.empty(0)] * len(weights)
    for index in range(len(weights) - 1, -1, -1):
        grads_w[index] = np.outer(delta, activations[index])
        grads_b[index] = delta.copy()
        if index:
            delta = _product(weights[index].T, delta) * (pre[index - 1] > 0.0)
    return RowResult(grads_w, grads_b, loss, int(np.argmax(z)) == y)


def batch_sums(
    weights: list[F], biases: list[F], xn: F, y: I, precision: str = "float64"
) -> tuple[list[F], list[F], float, int]:
    """Gradient sums, loss sum and correct count over normalised rows, one row at a time.

    ``precision="float32"`` is the declared compute precision of the product (not in
    docs/contracts.md, section 9's text, which is binary64): each row's forward and backward
    pass in binary32 from the parameters rounded once to binary32, the normalised row (a
    binary64 quotient) rounded once; each row's terms are added to binary64 sums, the loss too.
    """
    if precision == "float32":
        weights = [w.astype(np.float32) for w in weights]
        biases = [b.astype(np.float32) for b in biases]
        xn = xn.astype(np.float32)
    gw = [np.zeros(w.shape) for w in weights]
    gb = [np.zeros(b.shape) for b in biases]
    loss = 0.0
    correct = 0
    for r in range(xn.shape[0]):
        result = row(weights, biases, xn[r], int(y[r]))
        for index in range(len(weights)):
            gw[index] += result.grads_w[index]
            gb[index] += result.grads_b[index]
        loss += result.loss
        correct += result.correct
    return gw, gb, loss, correct


@dataclass
class Adam:
    lr: float
    t: int = 0

    def __post_init__(self) -> None:
        self.m: dict[int, F] = {}
        self.v: dict[int, F] = {}

    def update(self, key: int, p: F, g: F) -> F:
        if key not in self.m:
            self.m[key] = np.zeros_like(p)
            self.v[key] = np.zeros_like(p)
        self.m[key] = 0.9 * self.m[key] + (1 - 0.9) * g
        self.v[key] = 0.999 * self.v[key] + (1 - 0.999) * g * g
        m_hat = self.m[key] / (1 - 0.9**self.t)
        v_hat = self.v[key] / (1 - 0.999**self.t)
        out: F = p - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        return out


@dataclass
class EpochResult:
    weights: list[F]
    biases: list[F]
    mean: F
    std: F
    validation_loss: float
    validation_accuracy: float


def train(
    x: F,
    y: I,
    k: int,
    seed: int,
    hidden: list[int],
    batch: int,
    epochs: int,
    lr: float,
    precision: str = "float64",
) -> EpochResult:
    """Adam training for ``epochs`` epochs exactly as docs/contracts.md, section 9 describes
    it, the rows computed in ``precision`` (see `batch_sums`); sums, Adam and parameters in
    binary64."""
    role = roles(seed, x.shape[0])
    train_rows = np.flatnonzero(role == 0)
    validation_rows = np.flatnonzero(role == 1)
    mean, std = normalisation(x[train_rows])
    xn = (x - mean) / std
    weights, biases = init(seed, [x.shape[1], *hidden, k])
    adam = Adam(lr)
    for epoch in range(epochs):
        order = epoch_order(seed, epoch, train_rows)
        for start in range(0, order.size, batch):
            rows = order[start : start + batch]
            gw, gb, _, _ = batch_sums(weights, biases, xn[rows], y[rows], precision)
            adam.t += 1
            for index in range(len(weights)):
                weights[index] = adam.update(2 * index, weights[index], gw[index] / rows.size)
                biases[index] = adam.update(2 * index + 1, biases[index], gb[index] / rows.size)
    _, _, loss, correct = batch_sums(
        weights, biases, xn[validation_rows], y[validation_rows], precision
    )
    return EpochResult(
        weights,
        biases,
        mean,
        std,
        loss / validation_rows.size,
        correct / validation_rows.size,
    )
