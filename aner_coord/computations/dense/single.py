"""``aner-dense/v1`` training in one process: the reference the distributed job must equal.

It drives the very state machine the job machine drives (`aner_worker.kernels.dense.training`)
with `fit.fit_whole`, each chunk computed exactly as a worker's task: for the same ``chunk``
the parameters are therefore bitwise those of any worker group. Used by the tests and the
benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_worker.kernels.base import Precision
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.fit import fit_whole
from aner_worker.kernels.dense.network import check_precision, flatten
from aner_worker.kernels.dense.optimizers import OptimizerName
from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS, EVALUATE, MOMENTS
from aner_worker.kernels.dense.plan import Normalisation, assign_roles, bounds, combine_moments
from aner_worker.kernels.dense.rows import chunk_statistics
from aner_worker.kernels.dense.training import (
    EpochRecord,
    Training,
    TrainingOptions,
    TrainingRows,
    evaluation_sums,
)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
_EMPTY: Floats = np.empty(0)


@dataclass(frozen=True)
class SingleFit:
    model: DenseModel  # of the best validation epoch
    best_epoch: int
    history: list[EpochRecord]
    test_loss: float
    test_accuracy: float
    committed_steps: int
    rows_processed: int  # training rows through the kernel, epochs x n_train
    roles: dict[str, int]
    roles_sha256: str
    time_to_target_s: float | None
    seconds: float
    final_params: Floats = field(repr=False)  # flat, after the last committed step


def train_single(
    dataset: Dataset,
    *,
    seed: int,
    hidden: Sequence[int] = (64, 64),
    batch: int = 256,
    epochs: int = 100,
    optimizer: OptimizerName = "adam",
    lr: float = 1e-3,
    patience: int = 5,
    chunk: int = DEFAULT_CHUNK_ROWS,
    target_accuracy: float | None = None,
    threads: int = 1,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    max_steps: int | None = None,
    precision: Precision = "float64",
) -> SingleFit:
    """Train a Dense classifier on ``dataset`` as docs/contracts.md, section 9 prescribes.

    ``threads`` local threads compute a pass's chunks; the result does not depend on it.
    ``precision``: the chunks' compute precision (float64 or float32).
    ``max_steps`` stops after that many committed steps (``final_params`` are then those of a
    job stopped there, for comparison with an interrupted distributed run).
    """
    if batch < 1 or chunk < 1 or epochs < 1 or patience < 1 or threads < 1:
        raise ValueError("batch, chunk, epochs, patience and threads must all be >= 1")
    started = time.perf_counter()
    roles = assign_roles(seed, dataset.n_rows)
    options = TrainingOptions(
        seed,
        tuple(hidden),
        batch,
        epochs,
        optimizer,
        lr,
        patience,
        target_accuracy,
        chunk,
        check_precision(precision),
    )
    rows = TrainingRows(roles.train, roles.validation, roles.test)
    training = Training(options, rows, dataset.n_features, dataset.n_classes)
    fit_whole(training, dataset, threads=threads, max_steps=max_steps, on_epoch=on_epoch)
    assert training.normalisation is not None
    test_loss, test_accuracy = training.test if training.test is not None else (np.nan, np.nan)
    model = DenseModel(
        training.sizes,
        training.parameters(training.best_flat),
        training.normalisation,
        dataset.classes,
        precision=training.options.precision,
    )
    return SingleFit(
        model=model,
        best_epoch=training.best_epoch,
        history=list(training.history),
        test_loss=test_loss,
        test_accuracy=test_accuracy,
        committed_steps=training.committed,
        rows_processed=training.rows_processed,
        roles=roles.counts(),
        roles_sha256=roles.sha256,
        time_to_target_s=training.time_to_target,
        seconds=time.perf_counter() - started,
        final_params=training.flat,
    )


def fit_normalisation(dataset: Dataset, train: Ints, chunk: int) -> Normalisation:
    """Mean and population std of the rows at `train`, by chunks combined in order."""
    parts: list[tuple[int, Floats, Floats]] = []
    for start, stop in bounds(train.size, chunk):
        stats = chunk_statistics(MOMENTS, dataset, train[start:stop], _EMPTY, (), _EMPTY, _EMPTY)
        parts.append((stats.valid, np.frombuffer(stats.sums), np.frombuffer(stats.m2)))
    return combine_moments(parts)


def evaluate_rows(
    dataset: Dataset, params: Sequence[Floats], norm: Normalisation, positions: Ints, chunk: int
) -> tuple[float, float]:
    """Mean loss and accuracy of the model `params` (`[W1, b1, ...]`) over ``positions``,
    chunk sums added in chunk order."""
    flat = flatten(params)
    sizes = [params[0].shape[1], *(w.shape[0] for w in params[::2])]
    slots = [
        chunk_statistics(EVALUATE, dataset, positions[a:b], flat, sizes, norm.mean, norm.std)
        for a, b in bounds(positions.size, chunk)
    ]
    loss_sum, correct = evaluation_sums(slots)
    return loss_sum / positions.size, correct / positions.size
