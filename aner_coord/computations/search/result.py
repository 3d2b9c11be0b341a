"""The result of a model search (`result.json`) and the API's fitted search.

`SearchResult` is what `result.json` holds: the data and folds, each candidate's options
and aggregation, every fit's metrics (histories go to `histories.csv`), the selection, the
refit and its test metrics, and the accounting. A number the search could not give (the
standard deviation of one fit, the metrics of a diverged fit) is null, never a guess.
`SearchFit`, returned by `parallel.search` and `parallel.cross_validate`, pairs it with the
refit model (`predict(X)`) and gives the tables as records (`records()`, `candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import StagingRecord


class FitRecord(msgspec.Struct, frozen=True):
    """One fit `(candidate, fold)` of the folds, as `fits.csv` has it."""

    candidate: int
    fold: int
    epochs: int  # run (early stopping may end a fit early)
    best_epoch: int  # 0-based; the model kept had trained best_epoch + 1 epochs
    validation_loss: float | None  # at the best epoch; null if the fit diverged
    validation_accuracy: float | None
    seconds: float
    worker: str
    diverged: str | None = None


class CandidateRecord(msgspec.Struct, frozen=True):
    """One candidate: its grid values and its aggregation over folds (`candidates.csv`)."""

    candidate: int
    options: dict[str, Any]
    n: int
    validation_loss_mean: float | None
    validation_loss_std: float | None  # sample (n - 1); null for one fit
    validation_accuracy_mean: float | None
    validation_accuracy_std: float | None
    best_epoch_mean: float
    diverged: int = 0


class RefitRecord(msgspec.Struct, frozen=True):
    candidate: int
    epochs: int
    test_loss: float | None  # None: no test rows (test_fraction 0)
    test_accuracy: float | None
    seconds: float
    worker: str
    train_loss: list[float] = []


class SearchResult(ResultBase, frozen=True, tag="search"):
    model: str  # "aner-search/v1"
    data: str  # the data identity
    seed: int
    folds: int
    grouped: bool
    rows_per_fold: list[int]
    test_rows: int
    folds_sha256: str
    options: dict[str, Any]  # the options every candidate shares
    grid: dict[str, list[Any]]
    chunk: int  # rows of a chunk within each fit
    candidates: list[CandidateRecord]
    fits: list[FitRecord]  # candidate by candidate, folds in order
    selected: int | None  # null when every candidate diverged
    refit: RefitRecord | None
    test_loss: float | None
    test_accuracy: float | None
    staging: list[StagingRecord] = msgspec.field(default_factory=list)

    def summary(self) -> str:
        folds = f"{self.folds} folds" if self.folds >= 2 else "train's own validation split"
        head = f"{len(self.candidates)} candidate(s) x {folds}: "
        if self.selected is None:
            return head + "every candidate diverged; nothing selected"
        best = self.candidates[self.selected]
        text = (
            f"{head}selected candidate {self.selected} {_options(best.options)}mean validation "
            f"loss {_spread(best.validation_loss_mean, best.validation_loss_std)}, accuracy "
            f"{_spread(best.validation_accuracy_mean, best.validation_accuracy_std)}"
        )
        refit = self.refit
        if refit is not None and (refit.test_accuracy is None or refit.test_loss is None):
            text += f" | refit {refit.epochs} epoch(s): no test rows"
        elif refit is not None:
            text += (
                f" | refit {refit.epochs} epoch(s): test accuracy "
                f"{refit.test_accuracy:.4f}, test loss {refit.test_loss:.4f}"
            )
        return (
            text
            + f" | {len(self.fits)} fits, {len(self.workers)} worker(s), "
            + (f"{self.seconds:.3f} s")
        )


def _options(options: dict[str, Any]) -> str:
    if not options:
        return ""
    return "(" + ", ".join(f"{k} {format_value(v)}" for k, v in options.items()) + "): "


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _spread(mean: float | None, std: float | None) -> str:
    return _number(mean) + ("" if std is None else f" ± {std:.4f}")


def format_value(value: Any) -> str:
    """An option's value as the command line writes it: `64,64` for layer sizes."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def fit_rows(result: SearchResult) -> list[dict[str, Any]]:
    """`fits.csv` as records: candidate, its grid values, fold, epochs, best epoch,
    validation loss and accuracy, seconds, worker, and why a fit diverged."""
    options = {c.candidate: c.options for c in result.candidates}
    return [
        {
            "candidate": f.candidate,
            **options[f.candidate],
            "fold": f.fold,
            "epochs": f.epochs,
            "best_epoch": f.best_epoch,
            "validation_loss": f.validation_loss,
            "validation_accuracy": f.validation_accuracy,
            "seconds": f.seconds,
            "worker": f.worker,
            "diverged": f.diverged,
        }
        for f in result.fits
    ]


def candidate_rows(result: SearchResult) -> list[dict[str, Any]]:
    """`candidates.csv` as records: candidate, its grid values, n, means and deviations."""
    return [
        {
            "candidate": c.candidate,
            **c.options,
            "n": c.n,
            "validation_loss_mean": c.validation_loss_mean,
            "validation_loss_std": c.validation_loss_std,
            "validation_accuracy_mean": c.validation_accuracy_mean,
            "validation_accuracy_std": c.validation_accuracy_std,
            "best_epoch_mean": c.best_epoch_mean,
            "diverged": c.diverged,
            "selected": c.candidate == result.selected,
        }
        for c in result.candidates
    ]


@dataclass(frozen=True)
class SearchFit:
    """A completed search: its result (attributes pass through), the tables as records and,
    with a refit, its model."""

    result: SearchResult
    model: DenseModel | None  # the refit's; None without a refit

    def records(self) -> list[dict[str, Any]]:
        """One record per fit, as `fits.csv` has it (`pandas.DataFrame(fit.records())`)."""
        return fit_rows(self.result)

    def candidate_records(self) -> list[dict[str, Any]]:
        """One record per candidate, as `candidates.csv` has it."""
        return candidate_rows(self.result)

    def _refit(self) -> DenseModel:
        if self.model is None:
            raise ValueError("this search made no refit (refit=False): there is no model")
        return self.model

    def predict(self, x: npt.ArrayLike) -> npt.NDArray[np.generic]:
        """Labels of raw feature rows by the refit model, with its own normalisation."""
        return self._refit().predict(np.asarray(x, dtype=np.float64))

    def predict_proba(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self._refit().predict_proba(np.asarray(x, dtype=np.float64))

    def summary(self) -> str:
        return self.result.summary()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)
