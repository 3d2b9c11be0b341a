"""Whole fits of a model search on one worker slot (docs/contracts.md, section 12).

A fit `(c, f)` is section 9's training (`dense.training.Training`) with candidate `c`'s
options and the search's seed, its roles taken from the fold bytes: training rows are the
pool rows outside fold `f`, validation rows are fold `f`, and there are no test rows, so
the training ends after its epochs (or early stopping) with its best validation epoch. A
refit (`f = REFIT`) trains on the whole pool, with no validation rows (so no early stopping:
it keeps its final model), for the search's refit epochs, then tests once on the test rows.
A pass with `test` also tests each fold's fit once on the test rows, with its best epoch's
model: section 9's three roles (`train --replicates`). A fit trains with its replicate's
seed (`params.seeds`), or the search's.

`dense.fit.fit_whole` drives the training here, each chunk computed exactly as a Dense
worker computes it, so a fit's numbers depend on its parameters alone, never on the worker,
the slot or the order. A fit whose numbers leave the finite range is a result, not a
failure: it reports `diverged` and NaN metrics, and the coordinator never selects it.

A stop request (the coordinator cancelled, or is gone) is honoured before every chunk: the
data set is read through `_Stopping`, whose rows raise `Stopped` once asked to stop.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

import msgspec
import numpy as np
import numpy.typing as npt

from aner_worker.kernels.base import StopCheck, Stopped
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.fit import fit_whole
from aner_worker.kernels.dense.rows import dataset_named
from aner_worker.kernels.dense.training import (
    Divergence,
    Training,
    TrainingOptions,
    TrainingRows,
)
from aner_worker.kernels.search.params import (
    REFIT,
    TEST_FOLD,
    CandidateOptions,
    FitResult,
    SearchParams,
    SearchStats,
)

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
_NONE: Ints = np.empty(0, dtype=np.int64)
NAN = float("nan")


class _Stopping(Dataset):
    """A data set that refuses to give rows once its fit is asked to stop."""

    def __init__(self, inner: Dataset, should_stop: StopCheck) -> None:
        self._inner = inner
        self._should_stop = should_stop
        self.identity = inner.identity
        self.n_rows = inner.n_rows
        self.n_features = inner.n_features
        self.classes = inner.classes

    def rows(self, positions: Ints) -> tuple[Floats, Ints]:
        if self._should_stop():
            raise Stopped("stopped between two chunks of a fit")
        return self._inner.rows(positions)


def run_fits(
    params: SearchParams, start: int, count: int, should_stop: StopCheck | None
) -> SearchStats:
    """The fits [start, start + count) of the pass, in order."""
    if not 0 <= start < start + count <= len(params.fits):
        raise IndexError(f"fits [{start}, +{count}) outside the pass's {len(params.fits)}")
    dataset = dataset_named(params.data, params.teacher, params.seed)
    codes = np.frombuffer(params.folds, dtype=np.uint8)
    if codes.size != dataset.n_rows:
        raise ValueError(f"{codes.size} fold bytes for a data set of {dataset.n_rows} rows")
    source = dataset if should_stop is None else _Stopping(dataset, should_stop)
    if params.replicates and len(params.replicates) != len(params.fits):
        raise ValueError(f"{len(params.replicates)} replicates for {len(params.fits)} fits")
    out = []
    for i in range(start, start + count):
        if should_stop is not None and should_stop():
            raise Stopped("stopped before a fit")
        candidate, fold = params.fits[i]
        replicate = params.replicates[i] if params.replicates else 0
        out.append(run_fit(source, codes, params, candidate, fold, replicate))
    return SearchStats(out)


def seed_of(params: SearchParams, replicate: int) -> int:
    """The training seed of `replicate`: its own, or the search's when the pass has none."""
    return params.seeds[replicate] if params.seeds else params.seed


def options_of(candidate: CandidateOptions, seed: int) -> TrainingOptions:
    """A candidate's training options as its parameters carry them."""
    return TrainingOptions(seed=seed, **msgspec.structs.asdict(candidate))


def fit_rows(codes: npt.NDArray[np.uint8], fold: int, test: bool = False) -> TrainingRows:
    """The roles of a fit: fold `fold` validates, the rest of the pool trains (and with
    `test` the test rows test); a refit trains on the whole pool and tests on the test rows."""
    pool = codes != TEST_FOLD
    if fold == REFIT:
        return TrainingRows(_positions(pool), _NONE, _positions(~pool))
    tested = _positions(~pool) if test else _NONE
    return TrainingRows(_positions(pool & (codes != fold)), _positions(codes == fold), tested)


def _positions(mask: npt.NDArray[np.bool_]) -> Ints:
    out: Ints = np.flatnonzero(mask).astype(np.int64)
    return out


def run_fit(
    dataset: Dataset,
    codes: npt.NDArray[np.uint8],
    params: SearchParams,
    candidate: int,
    fold: int,
    replicate: int = 0,
) -> FitResult:
    options = options_of(params.candidates[candidate], seed_of(params, replicate))
    if fold == REFIT:
        options = replace(options, epochs=params.refit_epochs, patience=None)
    began = time.perf_counter()
    rows = fit_rows(codes, fold, params.test)
    training = Training(options, rows, dataset.n_features, dataset.n_classes)
    diverged = ""
    try:
        fit_whole(training, dataset)
    except Divergence as exc:
        diverged = str(exc)
    seconds = time.perf_counter() - began
    history = training.history
    best = training.best_epoch
    loss = accuracy = NAN
    if not diverged and fold != REFIT:
        loss = _number(history[best].validation_loss)
        accuracy = _number(history[best].validation_accuracy)
    result = FitResult(
        candidate=candidate,
        fold=fold,
        epochs=len(history),
        best_epoch=best,
        validation_loss=loss,
        validation_accuracy=accuracy,
        train_loss=[h.train_loss for h in history],
        validation_losses=_numbers(h.validation_loss for h in history),
        validation_accuracies=_numbers(h.validation_accuracy for h in history),
        seconds=seconds,
        diverged=diverged,
        replicate=replicate,
    )
    if diverged:
        return result
    if fold != REFIT:
        if not params.test or training.test is None:
            return result
        test_loss, test_accuracy = training.test
        return msgspec.structs.replace(
            result, test_loss=float(test_loss), test_accuracy=float(test_accuracy)
        )
    norm = training.normalisation
    assert norm is not None
    test = training.test or (NAN, NAN)  # no test rows (test_fraction 0): no test metrics
    return _with_refit(result, training.best_flat, norm.mean, norm.std, test)


def _with_refit(
    result: FitResult, flat: Floats, mean: Floats, std: Floats, test: tuple[float, float]
) -> FitResult:
    return msgspec.structs.replace(
        result,
        test_loss=float(test[0]),
        test_accuracy=float(test[1]),
        params=_bytes(flat),
        mean=_bytes(mean),
        std=_bytes(std),
    )


def _bytes(array: Floats) -> bytes:
    return np.ascontiguousarray(array, dtype="<f8").tobytes()


def _number(value: float | None) -> float:
    return NAN if value is None else float(value)


def _numbers(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None]
