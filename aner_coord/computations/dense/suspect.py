"""When a Dense result is suspect, and what is said about it (issue 16, item 7).

- Features whose moments would overflow binary64 (magnitudes near 1e300: the squared
  deviations of the training rows exceed the largest float) are refused at admission,
  naming the column (`overflowing_feature`), so no model ever stores a non-finite `std`;
  a normalisation that is not finite all the same is a divergence (`bad_normalisation`).
  So are features that vary by so little (near 1e-300) that their squared deviations
  underflow (`underflowing_feature`): their normalisation would lose them.
- A fit diverged when the mean loss of an epoch (training or validation) or the final
  model's test loss exceeds `DIVERGED_FACTOR` times the loss of a uniform guess, `ln k`
  for `k` classes: every fit starts near that loss (small initial weights), so this is a
  loss that grew by two orders of magnitude. The job then fails (exit 3) with a hint to
  lower the learning rate (`divergence`).
- A run that used all of `--epochs` while its validation loss was still falling (the best
  epoch is the last) gets a note, printed and recorded in `result.json`
  (`still_improving`), naming the cause it can see (each epoch one step, or too few
  epochs). A search or a cross-validation gets the same note when fits of its selected
  candidate ended so (`folds_still_improving`).
- Data so small that no row drew the validation role trains on, stopping on its training
  loss; a note says so (`no_validation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.dense.plan import Normalisation
from aner_worker.kernels.dense.training import EpochRecord

DIVERGED_FACTOR = 100.0
LARGEST = float(np.finfo(np.float64).max)


def overflowing_feature(
    x: npt.NDArray[np.float64], train: npt.NDArray[np.int64], names: Sequence[str]
) -> str | None:
    """The first feature whose training rows' moments would overflow, described for the
    user, or None. Columns whose range cannot overflow are passed on their range alone;
    the others are computed as the workers compute them, over the training rows."""
    low, high = x.min(axis=0), x.max(axis=0)
    with np.errstate(all="ignore"):
        spread = (high - low) ** 2 * max(1, int(train.size))
    for j in (int(c) for c in np.flatnonzero(~(spread < LARGEST))):
        column = x[train, j]
        with np.errstate(all="ignore"):
            mean = column.sum() / column.size
            m2 = float(((column - mean) ** 2).sum())
        if not (math.isfinite(float(mean)) and math.isfinite(m2)):
            peak = float(np.max(np.abs(column)))
            return (
                f"feature {names[j]!r} (column {j + 1} of the features) reaches {peak:.3g}: "
                "its mean and standard deviation overflow binary64; rescale it"
            )
    return None


# A feature that varies over the training rows must have a standard deviation of at least
# this (its variance a normal binary64 number, not below 2**-1022); below it the squared
# deviations are subnormal or zero, and the feature would lose its digits or become
# constant (features near 1e-300).
MIN_STD = 2.0**-511
# Only a column whose range is below this can fall under MIN_STD: a standard deviation is
# at least range / sqrt(n) for n rows that span the range, and sqrt(n) < 2**111. Those few
# columns are computed as the workers compute them, on their training rows.
_SMALL_RANGE = 2.0**-400


def underflowing_feature(
    x: npt.NDArray[np.float64], train: npt.NDArray[np.int64], names: Sequence[str]
) -> str | None:
    """The first feature whose training rows vary by so little that their normalisation
    would underflow (`MIN_STD`), described for the user, or None."""
    low, high = x.min(axis=0), x.max(axis=0)
    for j in (int(c) for c in np.flatnonzero((high > low) & (high - low < _SMALL_RANGE))):
        column = x[train, j]
        if column.size == 0 or column.min() == column.max():
            continue  # constant on the training rows: its std is stored as 1
        with np.errstate(all="ignore"):
            mean = column.sum() / column.size
            std = math.sqrt(float(((column - mean) ** 2).sum()) / column.size)
        if std < MIN_STD:
            spread = float(column.max() - column.min())
            return (
                f"feature {names[j]!r} (column {j + 1} of the features) varies by only "
                f"{spread:.3g}: the squares of its deviations underflow binary64 (its standard "
                "deviation must be at least 2**-511, about 1.5e-154); rescale it"
            )
    return None


def bad_normalisation(norm: Normalisation, names: Sequence[str]) -> str | None:
    bad = ~(np.isfinite(norm.mean) & np.isfinite(norm.std))
    if not bad.any():
        return None
    j = int(np.argmax(bad))
    return f"the normalisation of feature {names[j]!r} is not finite: rescale it"


def divergence(
    history: Sequence[EpochRecord], test: tuple[float, float] | None, n_classes: int
) -> str | None:
    """Why the fit diverged (see the module docstring), or None."""
    guess = math.log(n_classes)
    limit = DIVERGED_FACTOR * guess
    reference = f"more than {DIVERGED_FACTOR:g} times a uniform guess's {guess:.3g}"
    if history:
        last = history[-1]
        for what, loss in (
            ("training", last.train_loss),
            ("validation", last.validation_loss),
        ):
            if loss is not None and loss > limit:
                return (
                    f"the mean {what} loss of epoch {last.epoch + 1} is {loss:.3g}, "
                    f"{reference}: the fit diverged; lower --lr"
                )
    if test is not None and test[0] > limit:
        return f"the test loss is {test[0]:.3g}, {reference}: the fit diverged; lower --lr"
    return None


def still_improving(
    history: Sequence[EpochRecord],
    best_epoch: int,
    epochs: int,
    *,
    steps_per_epoch: int = 2,
    batch: int | None = None,
) -> str | None:
    """The note for a run that used all its epochs with the validation loss still falling,
    naming the cause it can see: each epoch one step (the batch holds every training row,
    so `epochs` is also the count of optimizer steps), or too few epochs."""
    if len(history) < epochs or best_epoch != epochs - 1 or epochs < 2:
        return None
    if history[-1].validation_loss is None:
        return None
    head = (
        f"training reached --epochs {epochs} while the validation loss was still falling "
        "(the best epoch is the last): "
    )
    if steps_per_epoch == 1:
        rows = f"batch {batch} holds" if batch is not None else "one batch holds"
        return head + (
            f"each epoch was one optimizer step ({rows} every training row), so {epochs} "
            f"epochs made {epochs} steps: more --epochs (or a smaller --batch) may give a "
            "better model"
        )
    return head + "too few epochs: more --epochs may give a better model"


def no_validation(rows: int, fraction: float, patience: int) -> str:
    """The note for data so small that its draw gave no row the validation role
    (docs/contracts.md, section 9, Tiny data)."""
    return (
        f"the draw of {rows} rows at --validation-fraction {fraction:g} gave no validation row: "
        f"early stopping watched the training loss (--patience {patience}) and the final model "
        "is kept; more rows give a validated model"
    )


def folds_still_improving(best_epochs: Sequence[int], epochs_run: Sequence[int]) -> str | None:
    """The note for a selected candidate whose fits (their best epochs, from 0, and epochs
    run) ended at their last epoch with the validation loss still falling. Early stopping
    never ends a fit at its best epoch, so such a fit used all its epochs."""
    last = [run for best, run in zip(best_epochs, epochs_run, strict=True) if best == run - 1]
    if not last or max(last) < 2:
        return None
    return (
        f"{len(last)} of {len(best_epochs)} fit(s) of the selected candidate reached their last "
        f"epoch ({max(last)}) with the validation loss still falling: more epochs may give a "
        "better model"
    )
