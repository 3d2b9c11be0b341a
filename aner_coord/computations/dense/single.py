"""``aner-dense/v1`` training in one process: the reference the distributed job must equal.

It runs SPEC section 9 end to end with the same plan functions (``dense_plan``), kernel
(``aner_worker.kernels.dense.network``) and optimizer (``optimizers``) that the coordinator and its
workers use: each step's chunks are computed under frozen parameters (by ``threads`` local
threads, one chunk per thread at a time), kept in their slots, summed in chunk order and
applied by one optimizer update. For the same ``chunk`` the parameters are therefore bitwise
those of any worker group. Used by the tests and ``bench/dense_bench.py``; the job machine
will drive the same functions from its own loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.network import (
    ChunkStats,
    chunk_stats,
    evaluate,
    flatten,
    moment_sums,
    unflatten,
)
from aner_worker.kernels.dense.optimizers import OptimizerName, initial_state, step
from aner_worker.kernels.dense.plan import (
    EarlyStopping,
    Normalisation,
    Roles,
    assign_roles,
    bounds,
    combine_moments,
    epoch_order,
    init_params,
    layer_sizes,
    reduce_chunks,
)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


class DivergenceError(ArithmeticError):
    """A non-finite training loss: the run stops, naming where."""

    def __init__(self, epoch: int, step: int, loss: float) -> None:
        super().__init__(f"numerical divergence: loss {loss} at epoch {epoch}, step {step}")
        self.epoch, self.step = epoch, step


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    train_loss: float  # mean over the epoch's steps' rows, each under that step's parameters
    validation_loss: float
    validation_accuracy: float
    seconds: float  # since the start of the run, at the end of this epoch


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


def fit_normalisation(dataset: Dataset, train: Ints, chunk: int) -> Normalisation:
    """Mean and population std of the training rows, by chunks combined in order."""
    parts: list[tuple[int, Floats, Floats]] = []
    for start, stop in bounds(train.size, chunk):
        x, _ = dataset.rows(train[start:stop])
        total, m2 = moment_sums(x)
        parts.append((stop - start, total, m2))
    return combine_moments(parts)


def evaluate_rows(
    dataset: Dataset, params: Sequence[Floats], norm: Normalisation, positions: Ints, chunk: int
) -> tuple[float, float]:
    """Mean loss and accuracy over ``positions``, chunk sums added in chunk order."""
    loss_sum = 0.0
    correct = 0
    for start, stop in bounds(positions.size, chunk):
        x, y = dataset.rows(positions[start:stop])
        part_loss, part_correct = evaluate(params, norm.mean, norm.std, x, y)
        loss_sum += part_loss
        correct += part_correct
    return loss_sum / positions.size, correct / positions.size


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
    chunk: int = 256,
    target_accuracy: float | None = None,
    threads: int = 1,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    max_steps: int | None = None,
) -> SingleFit:
    """Train a Dense classifier on ``dataset`` as SPEC section 9 prescribes.

    ``threads`` local threads compute a step's chunks; the result does not depend on it.
    ``max_steps`` stops after that many committed steps (``final_params`` are then those of a
    job stopped there, for comparison with an interrupted distributed run).
    """
    if batch < 1 or chunk < 1 or epochs < 1 or patience < 1 or threads < 1:
        raise ValueError("batch, chunk, epochs, patience and threads must all be >= 1")
    started = time.perf_counter()
    roles: Roles = assign_roles(seed, dataset.n_rows)
    norm = fit_normalisation(dataset, roles.train, chunk)
    sizes = layer_sizes(dataset.n_features, hidden, dataset.n_classes)
    flat = flatten(init_params(seed, sizes))
    state = initial_state(optimizer, flat.size)
    stopping = EarlyStopping(patience)
    best_flat = flat.copy()
    history: list[EpochRecord] = []
    time_to_target: float | None = None
    committed = 0
    rows_processed = 0
    n_train = roles.train.size

    def run_chunk(params: list[Floats], positions: Ints) -> ChunkStats:
        x, y = dataset.rows(positions)
        return chunk_stats(params, norm.mean, norm.std, x, y)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for epoch in range(epochs):
            order = epoch_order(seed, epoch, roles.train)
            epoch_loss = 0.0
            for step_index, (b0, b1) in enumerate(bounds(n_train, batch)):
                params = unflatten(flat, sizes)
                pieces = [order[b0 + c0 : b0 + c1] for c0, c1 in bounds(b1 - b0, chunk)]
                # map() returns results in submission order: each chunk lands in its slot.
                # One thread needs no hand-off; the bits are the same either way.
                if threads == 1:
                    results = [run_chunk(params, p) for p in pieces]
                else:
                    results = list(pool.map(run_chunk, [params] * len(pieces), pieces))
                totals = reduce_chunks(results, b1 - b0)
                if not (math.isfinite(totals.loss_sum) and np.isfinite(totals.grad_sum).all()):
                    raise DivergenceError(epoch, step_index, totals.loss_sum)
                flat, state = step(flat, totals.mean_grad(), state, lr)
                committed += 1
                rows_processed += totals.valid
                epoch_loss += totals.loss_sum
                if committed == max_steps:
                    break
            if committed == max_steps:
                break
            val_loss, val_acc = evaluate_rows(
                dataset, unflatten(flat, sizes), norm, roles.validation, chunk
            )
            if not math.isfinite(val_loss):
                raise DivergenceError(epoch, step_index, val_loss)
            record = EpochRecord(
                epoch, epoch_loss / n_train, val_loss, val_acc, time.perf_counter() - started
            )
            history.append(record)
            if on_epoch is not None:
                on_epoch(record)
            if (
                time_to_target is None
                and target_accuracy is not None
                and val_acc >= target_accuracy
            ):
                time_to_target = record.seconds
            stopping = stopping.observe(epoch, val_loss)
            if stopping.improved:
                best_flat = flat.copy()
            if stopping.stop:
                break
    best = unflatten(best_flat, sizes)
    test_loss, test_acc = evaluate_rows(dataset, best, norm, roles.test, chunk)
    return SingleFit(
        model=DenseModel(sizes, best, norm, dataset.classes),
        best_epoch=stopping.best_epoch,
        history=history,
        test_loss=test_loss,
        test_accuracy=test_acc,
        committed_steps=committed,
        rows_processed=rows_processed,
        roles=roles.counts(),
        roles_sha256=roles.sha256,
        time_to_target_s=time_to_target,
        seconds=time.perf_counter() - started,
        final_params=flat,
    )
