"""From fits to a selection (docs/contracts.md, section 12, Aggregation), as pure functions.

Per candidate, over its fits in fold order (and within a fold in seed order, when the search
has several training seeds): the mean, the sample standard deviation (`n - 1`; undefined,
NaN, for one fit) and the standard error `std / sqrt(n)` of the best validation loss and
accuracy, and the mean best epoch. Sums run left to right in that order and are divided by
`n` once, so that equal inputs give equal means bit for bit, whatever order the fits
finished in.

- The best validation accuracy of a fit is its accuracy at its best (lowest loss) epoch.
- A fit that diverged has NaN metrics, so its candidate's means are NaN, and a NaN mean is
  worse than any number: such a candidate is never selected. With every candidate NaN
  there is no selection.
- The selected candidate has the lowest mean validation loss, ties to the lowest index.
  Test rows take no part: they are in no fold.
- Refit epochs: a fit's best epoch is section 9's 0-based epoch index, so the best model of
  that fit had trained `best_epoch + 1` epochs. The refit trains for the mean of those
  counts rounded half up (2.5 gives 3, not Python's 2), at least 1, computed from the
  integers exactly: `(2 S + n) // (2 n)` with `S` the sum of the counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aner_worker.kernels.search.params import FitResult


@dataclass(frozen=True)
class CandidateSummary:
    candidate: int
    n: int  # fits (folds x seeds) aggregated
    validation_loss_mean: float
    validation_loss_std: float  # NaN for one fit
    validation_accuracy_mean: float
    validation_accuracy_std: float
    best_epoch_mean: float
    diverged: int  # fits that diverged
    validation_loss_standard_error: float  # std / sqrt(n); NaN for one fit
    validation_accuracy_standard_error: float


def mean(values: Sequence[float]) -> float:
    total = 0.0
    for value in values:
        total += value
    return total / len(values)


def sample_std(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = mean(values)
    total = 0.0
    for value in values:
        total += (value - m) ** 2
    return math.sqrt(total / (len(values) - 1))


def summarize(candidate: int, fits: Sequence[FitResult]) -> CandidateSummary:
    """`fits` are one candidate's, in fold order (then seed order)."""
    losses = [f.validation_loss for f in fits]
    accuracies = [f.validation_accuracy for f in fits]
    loss_std, accuracy_std = sample_std(losses), sample_std(accuracies)
    root = math.sqrt(len(fits))
    return CandidateSummary(
        candidate=candidate,
        n=len(fits),
        validation_loss_mean=mean(losses),
        validation_loss_std=loss_std,
        validation_accuracy_mean=mean(accuracies),
        validation_accuracy_std=accuracy_std,
        best_epoch_mean=mean([float(f.best_epoch) for f in fits]),
        diverged=sum(1 for f in fits if f.diverged),
        validation_loss_standard_error=loss_std / root,
        validation_accuracy_standard_error=accuracy_std / root,
    )


def select(summaries: Sequence[CandidateSummary]) -> int | None:
    """The selected candidate's index; None if every mean validation loss is NaN."""
    best: CandidateSummary | None = None
    for s in summaries:
        loss = s.validation_loss_mean
        if math.isnan(loss):
            continue
        if best is None or loss < best.validation_loss_mean:
            best = s  # in index order, so a tie keeps the lower index
    return None if best is None else best.candidate


def refit_epochs(best_epochs: Sequence[int]) -> int:
    """Epochs of the refit: the mean of `best_epoch + 1` rounded half up, at least 1."""
    n = len(best_epochs)
    total = sum(epoch + 1 for epoch in best_epochs)
    return max(1, (2 * total + n) // (2 * n))
