"""The coordinator's plan of ``aner-dense/v1`` training (docs/contracts.md, section 9), as pure
functions.

Everything here is a function of ``(seed, data)`` and the request alone: which rows are
train, validation and test; the normalisation fitted on training rows; the initial weights;
each epoch's order, its global batches and each batch's chunks; how a step's chunk results are
reduced; and when early stopping ends the run. No I/O, no clocks, no workers: the coordinator
and the single-process loop (``aner_coord.computations.dense.single``) share these so that every
plan agrees bitwise for the same chunk size.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.network import ChunkStats, layer_shapes
from aner_worker.kernels.dense.streams import (
    ROLE_STREAM,
    TEST,
    TRAIN,
    VALIDATION,
    role_codes,
    signed,
    words,
    words_at,
)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

DEFAULT_TEST_FRACTION = 0.15
DEFAULT_VALIDATION_FRACTION = 0.15
EPOCH_STREAM_BASE = 2**32
INIT_STREAM_BASE = 16


class PlanError(ValueError):
    """A request that cannot be planned (for example a data set too small for its roles)."""


# ---------------------------------------------------------------------------------------
# Roles


@dataclass(frozen=True)
class Roles:
    """Each row's role and the ascending positions of each role."""

    codes: npt.NDArray[np.uint8]  # one byte per row: 0 train, 1 validation, 2 test
    train: Ints
    validation: Ints
    test: Ints
    sha256: str  # of ``codes``' bytes, for the manifest

    def counts(self) -> dict[str, int]:
        return {
            "train": int(self.train.size),
            "validation": int(self.validation.size),
            "test": int(self.test.size),
        }


def assign_roles(
    seed: int,
    n_rows: int,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
) -> Roles:
    """Roles from ``u = U(W8[r])``: test below ``test_fraction``, then validation, then train.

    Training needs a step and early stopping a validation loss, so both roles must receive
    a row; the test role may be empty only where ``test_fraction`` is 0 (no held-out test).
    """
    if not (
        test_fraction >= 0.0
        and validation_fraction > 0.0
        and test_fraction + validation_fraction < 1.0
    ):
        raise PlanError(
            "the test fraction must be at least 0 and the validation fraction positive, with "
            f"a sum below 1, got {test_fraction} and {validation_fraction}"
        )
    codes = role_codes(seed, n_rows, test_fraction, validation_fraction)
    where = f"{n_rows} rows (stream {ROLE_STREAM}, seed {seed})"
    return roles_of(codes, where, test_wanted=test_fraction > 0.0)


def roles_of(
    codes: npt.NDArray[np.uint8],
    where: str,
    *,
    test_wanted: bool = True,
    validation_wanted: bool = True,
    more: str = "rows",
) -> Roles:
    """The roles whose bytes are `codes`; PlanError if training (or, where wanted, the
    validation or the test) has no row, saying which option would give it some (named as
    `{test_fraction}` and `{validation_fraction}`, for the caller to render)."""
    roles = Roles(
        codes=codes,
        train=np.flatnonzero(codes == TRAIN).astype(np.int64),
        validation=np.flatnonzero(codes == VALIDATION).astype(np.int64),
        test=np.flatnonzero(codes == TEST).astype(np.int64),
        sha256=hashlib.sha256(codes.tobytes()).hexdigest(),
    )
    wanted = {"train": True, "validation": validation_wanted, "test": test_wanted}
    empty = [name for name, count in roles.counts().items() if count == 0 and wanted[name]]
    if empty:
        remedy = {
            "train": "a smaller {test_fraction} or {validation_fraction}",
            "validation": "a larger {validation_fraction}",
            "test": "a larger {test_fraction} (or 0 for no held-out test)",
        }[empty[0]]
        raise PlanError(f"{where} leave no {empty[0]} rows: use more {more} or {remedy}")
    return roles


# ---------------------------------------------------------------------------------------
# Normalisation


@dataclass(frozen=True)
class Normalisation:
    """``x' = (x - mean) / std`` per feature, fitted on training rows only."""

    mean: Floats
    std: Floats


def combine_moments(parts: Sequence[tuple[int, Floats, Floats]]) -> Normalisation:
    """Mean and population std from per-chunk ``(count, sum, m2)``, combined in chunk order.

    ``m2`` is each chunk's sum of squared deviations about its own mean
    (``aner_worker.kernels.dense.network.moment_sums``). With ``n`` rows in all,
    ``mean = sum x / n`` and ``M2 = sum_c (m2_c + n_c (mean_c - mean)**2)``, which is
    ``sum (x - mean)**2`` exactly in real arithmetic and stable in floating point, in one
    pass over the rows instead of two. ``std = 1`` where it is 0.
    """
    if not parts:
        raise PlanError("normalisation needs at least one training row")
    n = sum(count for count, _, _ in parts)
    total = np.zeros_like(parts[0][1])
    for _, s, _ in parts:
        total = total + s
    # A feature too large for its squared deviations (a constant column at 1e200: its
    # chunks' rounded means differ by 1e184) overflows here; the caller refuses the
    # non-finite `std` naming the feature, so numpy's own warning would only be noise.
    with np.errstate(over="ignore", invalid="ignore"):
        mean = total / n
        m2 = np.zeros_like(mean)
        for count, s, part_m2 in parts:
            delta = s / count - mean
            m2 = m2 + (part_m2 + count * (delta * delta))
        std = np.sqrt(m2 / n)
    std[std == 0.0] = 1.0
    return Normalisation(mean=mean, std=std)


# ---------------------------------------------------------------------------------------
# Model


def layer_sizes(n_features: int, hidden: Sequence[int], n_classes: int) -> list[int]:
    """``[d, h1, ..., hL, k]``."""
    sizes = [int(n_features), *(int(h) for h in hidden), int(n_classes)]
    if any(s < 1 for s in sizes):
        raise PlanError(f"layer sizes must be positive, got {sizes}")
    return sizes


def init_params(seed: int, sizes: Sequence[int]) -> list[Floats]:
    """``[W1, b1, ...]``: ``W_l[o][i] = S(W(16+l)[o*a + i]) * sqrt(6 / (a + b))``, biases 0."""
    params: list[Floats] = []
    for index, shape in enumerate(layer_shapes(sizes)):
        if len(shape) == 1:
            params.append(np.zeros(shape))
            continue
        fan_out, fan_in = shape
        layer = index // 2 + 1
        scale = math.sqrt(6.0 / (fan_in + fan_out))
        values = signed(words(seed, INIT_STREAM_BASE + layer, 0, fan_out * fan_in)) * scale
        params.append(values.reshape(fan_out, fan_in))
    return params


# ---------------------------------------------------------------------------------------
# Epochs, batches, chunks


def epoch_order(seed: int, epoch: int, train: Ints) -> Ints:
    """Training positions ordered by ``W(2**32 + epoch)[r]`` ascending, ties by ``r``.

    ``train`` must be ascending (as ``Roles.train`` is): the stable sort then breaks ties by
    position.
    """
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    keys = words_at(seed, EPOCH_STREAM_BASE + epoch, train)
    order: Ints = train[stable_argsort(keys)]
    return order


def stable_argsort(keys: npt.NDArray[np.uint64]) -> Ints:
    """``np.argsort(keys, kind="stable")``, sooner when no two keys are equal.

    numpy's stable sort of 64-bit keys is a merge sort (69 ms for 800,000 keys on the
    development machine, on the coordinator's path between two epochs while every worker
    waits); its default sort is vectorised (18 ms). The two orders can differ only among
    equal keys, so the default sort's order is kept when the sorted keys show no tie, and
    the stable sort decides otherwise (random 64-bit words tie about once in 4*10**7 epochs
    of 10**6 rows).
    """
    order = np.argsort(keys)
    ranked = keys[order]
    if np.any(ranked[1:] == ranked[:-1]):
        order = np.argsort(keys, kind="stable")
    return order


def bounds(total: int, size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` pieces of ``size`` covering ``range(total)``, the last the remainder.

    Global batches of an epoch (``size = B``) and the chunks of a batch (``size = chunk``).
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def steps_per_epoch(n_train: int, batch: int) -> int:
    return -(-n_train // batch)


def batch_used(batch: int, n_train: int) -> int:
    """The rows of a global batch as the training uses them: the smaller of the option and
    the training rows (scikit-learn's `min(batch_size, n_samples)`). A batch larger than
    the training rows is one step of every row, the same plan and bits as that smaller
    batch; the manifest and the result record this value, not the option."""
    return max(1, min(batch, n_train))


# ---------------------------------------------------------------------------------------
# One step


@dataclass(frozen=True)
class StepTotals:
    """A step's chunk results summed in chunk order."""

    grad_sum: Floats
    loss_sum: float
    correct: int
    valid: int

    def mean_grad(self) -> Floats:
        out: Floats = self.grad_sum / self.valid
        return out


def reduce_chunks(results: Sequence[ChunkStats], batch_rows: int) -> StepTotals:
    """Sum every chunk's slot in chunk order; the valid count must equal the batch size.

    The order is fixed by the slots, not by completion, so the bits do not depend on which
    worker answered first.
    """
    if not results:
        raise PlanError("a step needs at least one chunk result")
    grad = results[0].grad.copy()
    loss = results[0].loss_sum
    correct = results[0].correct
    valid = results[0].valid
    for r in results[1:]:
        grad += r.grad
        loss += r.loss_sum
        correct += r.correct
        valid += r.valid
    if valid != batch_rows:
        raise PlanError(f"chunks accepted {valid} rows, the batch has {batch_rows}")
    return StepTotals(grad_sum=grad, loss_sum=loss, correct=correct, valid=valid)


# ---------------------------------------------------------------------------------------
# Early stopping


@dataclass(frozen=True)
class EarlyStopping:
    """Stop after ``patience`` epochs without a strictly lower validation loss."""

    patience: int
    best_loss: float = math.inf
    best_epoch: int = -1
    since_best: int = 0

    def observe(self, epoch: int, validation_loss: float) -> EarlyStopping:
        if validation_loss < self.best_loss:
            return EarlyStopping(self.patience, validation_loss, epoch, 0)
        return EarlyStopping(self.patience, self.best_loss, self.best_epoch, self.since_best + 1)

    @property
    def improved(self) -> bool:
        return self.since_best == 0 and self.best_epoch >= 0

    @property
    def stop(self) -> bool:
        return self.since_best >= self.patience
