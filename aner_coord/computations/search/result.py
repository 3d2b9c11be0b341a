"""The result of a model search (`result.json`) and the API's fitted search.

`SearchResult` is what `result.json` holds: the data and folds, each candidate's options
and aggregation, every fit's metrics (histories go to `histories.csv`), the selection, the
refit and its test metrics, and the accounting. A number the search could not give (the
standard deviation of one fit, the metrics of a diverged fit) is null, never a guess.
`SearchFit`, returned by `parallel.search` and `parallel.cross_validate`, pairs it with the
refit model (`predict(X)`) and gives the tables as records (`records()`, `candidates`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_coord.computations.display import fields_table, records_table, repr_lines
from aner_coord.computations.search.summary import fits_text
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import StagingRecord


class FitRecord(msgspec.Struct, frozen=True):
    """One fit `(candidate, fold, replicate)` of the folds, as `fits.csv` has it."""

    candidate: int
    fold: int
    epochs: int  # run (early stopping may end a fit early)
    best_epoch: int  # from 1: the model kept had trained best_epoch epochs (schema 2: from 0)
    validation_loss: float | None  # at the best epoch; null if the fit diverged
    validation_accuracy: float | None
    seconds: float
    worker: str
    diverged: str | None = None
    seed: int | None = None  # its training seed (null in a result written before seeds)
    replicate: int = 0  # which of the search's `seeds` (0 without them)


class CandidateRecord(msgspec.Struct, frozen=True):
    """One candidate: its grid values and its aggregation over its fits, folds x seeds
    (`candidates.csv`)."""

    candidate: int
    options: dict[str, Any]
    n: int
    validation_loss_mean: float | None
    validation_loss_std: float | None  # sample (n - 1); null for one fit
    validation_accuracy_mean: float | None
    validation_accuracy_std: float | None
    best_epoch_mean: float  # of best_epoch, from 1 (schema 2: from 0)
    diverged: int = 0
    validation_loss_standard_error: float | None = None  # std / sqrt(n); null for one fit
    validation_accuracy_standard_error: float | None = None


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
    # What the user should know of the result: the selected candidate's fits still
    # improving at their last epoch (`dense.suspect.folds_still_improving`).
    notes: list[str] = msgspec.field(default_factory=list)
    # Each candidate's training seeds, fitted on every fold: [] for the search's `seed` alone.
    seeds: list[int] = msgspec.field(default_factory=list)

    def summary(self) -> str:
        folds = f"{self.folds} folds" if self.folds >= 2 else "train's own validation split"
        seeds = f" x {len(self.seeds)} seeds" if self.seeds else ""
        head = f"{len(self.candidates)} candidate(s) x {folds}{seeds}: "
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
        notes = "".join(f"\nnote: {note}" for note in self.notes)
        return (
            text
            + f" | {fits_text(len(self.fits), refit is not None)}, {len(self.workers)} worker(s), "
            + (f"{self.seconds:.3f} s")
            + notes
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
            "seed": f.seed,
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
            "validation_loss_standard_error": c.validation_loss_standard_error,
            "validation_accuracy_mean": c.validation_accuracy_mean,
            "validation_accuracy_std": c.validation_accuracy_std,
            "validation_accuracy_standard_error": c.validation_accuracy_standard_error,
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

    def predict(self, x: Any) -> npt.NDArray[np.generic]:
        """Labels of raw feature rows (an array by position, a frame by column name) by the
        refit model, with its own normalisation."""
        return self._refit().predict(x)

    def predict_proba(self, x: Any) -> npt.NDArray[np.float64]:
        return self._refit().predict_proba(x)

    def score(self, x: Any, y: Any) -> float:
        """Accuracy of the refit model's `predict(x)` against the labels `y`."""
        return self._refit().score(x, y)

    def summary(self) -> str:
        return self.result.summary()

    # -- scikit-learn's names, where they mean what GridSearchCV's mean -----------------
    @property
    def best_index_(self) -> int:
        """The selected candidate (the lowest mean validation loss, docs/contracts.md,
        section 12): `rank_test_loss` 1 in `cv_results_`."""
        if self.result.selected is None:
            raise ValueError("every candidate diverged: nothing was selected")
        return self.result.selected

    @property
    def best_params_(self) -> dict[str, Any]:
        """The selected candidate's grid values ({} for cross-validation of one option set)."""
        return dict(self.result.candidates[self.best_index_].options)

    @property
    def best_score_(self) -> float | None:
        """The selected candidate's mean validation accuracy over its folds."""
        return self.result.candidates[self.best_index_].validation_accuracy_mean

    @property
    def cv_results_(self) -> dict[str, Any]:
        """GridSearchCV's table, a dict of arrays (`pandas.DataFrame(fit.cv_results_)`):
        `params`, `param_<name>`, `split<k>_test_score` (each fold's validation accuracy),
        `mean_test_score`, `std_test_score` (as scikit-learn's: over folds, `n`),
        `rank_test_score`, `mean_fit_time`, `std_fit_time`, and aner's loss, by which it
        selects: `split<k>_test_loss`, `mean_test_loss`, `std_test_loss`, `rank_test_loss`."""
        return cv_results(self.result)

    def __repr__(self) -> str:
        r = self.result
        folds = f"{r.folds} folds" if r.folds >= 2 else "train's own validation split"
        seeds = f" x {len(r.seeds)} seeds" if r.seeds else ""
        head = (
            f"SearchFit({r.model}, {len(r.candidates)} candidate(s) x {folds}{seeds}, "
            f"seed {r.seed})"
        )
        tables = "records(): one per fit; candidate_records(), cv_results_: one per candidate"
        return repr_lines(head, r.summary(), (tables,))

    def _repr_html_(self) -> str:
        r = self.result
        grid = list(r.grid)
        header = ["candidate", *grid, "fits", "validation loss", "validation accuracy",
                  "best epoch (mean)", "diverged", "selected"]  # fmt: skip
        rows = [
            [c.candidate, *(format_value(c.options.get(k)) for k in grid), c.n,
             _spread(c.validation_loss_mean, c.validation_loss_std),
             _spread(c.validation_accuracy_mean, c.validation_accuracy_std),
             f"{c.best_epoch_mean:.1f}", c.diverged, "yes" if c.candidate == r.selected else ""]
            for c in r.candidates
        ]  # fmt: skip
        fields: list[tuple[str, object]] = [
            ("search", f"{r.model}, {len(r.candidates)} candidate(s), {len(r.fits)} fits"),
            ("folds", f"{r.folds}{' (grouped)' if r.grouped else ''}, test rows {r.test_rows:,}"),
            ("options", _options(r.options).removesuffix(": ") or "defaults"),
            ("seed", r.seed),
            ("selected", "none" if r.selected is None else r.selected),
            (
                "test",
                "n/a"
                if r.test_accuracy is None
                else f"accuracy {r.test_accuracy:.4f}, loss {_number(r.test_loss)}",
            ),
            ("workers", f"{len(r.workers)}, {r.seconds:.3f} s"),
            *(("note", note) for note in r.notes),
        ]
        table = records_table(header, rows, "candidate_records() has them all")
        return fields_table("Search", fields) + table

    def __getattr__(self, name: str) -> Any:
        # Only the result's fields pass through: pickle and copy look up `__setstate__` and
        # the like on an instance whose `result` is not set yet, which would recurse.
        if name.startswith("__") or name == "result":
            raise AttributeError(name)
        return getattr(self.result, name)


def cv_results(result: SearchResult) -> dict[str, Any]:
    """`SearchFit.cv_results_`: GridSearchCV's `cv_results_` of this search (see there)."""
    candidates = result.candidates
    by_candidate: dict[int, list[FitRecord]] = {c.candidate: [] for c in candidates}
    for f in result.fits:
        by_candidate[f.candidate].append(f)
    splits = max((len(fits) for fits in by_candidate.values()), default=0)
    # With several seeds, split `r * K + k` is fold `k` of seed `r` (RepeatedKFold's order).
    folds = max(1, splits // max(1, len(result.seeds)))

    def per_fold(value: Callable[[FitRecord], float | None]) -> npt.NDArray[np.float64]:
        table = np.full((len(candidates), splits), np.nan)
        for i, c in enumerate(candidates):
            for f in by_candidate[c.candidate]:
                v = value(f)
                table[i, f.replicate * folds + f.fold] = np.nan if v is None else v
        return table

    table: dict[str, Any] = {"params": [dict(c.options) for c in candidates]}
    for name in result.grid:
        values = np.empty(len(candidates), dtype=object)
        values[:] = [c.options.get(name) for c in candidates]
        table[f"param_{name}"] = values
    seconds = per_fold(lambda f: f.seconds)
    table["mean_fit_time"] = seconds.mean(axis=1)
    table["std_fit_time"] = seconds.std(axis=1)
    _metric(
        table,
        "score",
        per_fold(lambda f: f.validation_accuracy),
        [c.validation_accuracy_mean for c in candidates],
        best_high=True,
    )
    _metric(
        table,
        "loss",
        per_fold(lambda f: f.validation_loss),
        [c.validation_loss_mean for c in candidates],
        best_high=False,
    )
    return table


def _metric(
    table: dict[str, Any],
    metric: str,
    scores: npt.NDArray[np.float64],
    means: list[float | None],
    *,
    best_high: bool,
) -> None:
    for k in range(scores.shape[1]):
        table[f"split{k}_test_{metric}"] = scores[:, k]
    # The aggregation's own means, so that rank_test_loss 1 is the selection, bit for bit.
    mean = np.array([np.nan if m is None else m for m in means])
    table[f"mean_test_{metric}"] = mean
    table[f"std_test_{metric}"] = scores.std(axis=1)
    table[f"rank_test_{metric}"] = _ranks(mean, best_high)


def _ranks(values: npt.NDArray[np.float64], best_high: bool) -> npt.NDArray[np.int32]:
    """Ranks as scikit-learn gives them (1 the best, ties share the lowest rank, NaN last);
    for a loss, the lowest is the best and ties go to the lower index as selection does."""
    key = np.where(np.isnan(values), np.inf, -values if best_high else values)
    ranks = np.empty(len(values), dtype=np.int32)
    for i, v in enumerate(key):
        ranks[i] = 1 + int(np.sum(key < v)) + (0 if best_high else int(np.sum(key[:i] == v)))
    return ranks
