"""What a search task carries and what it returns, as msgspec Structs the kernel registry
encodes (docs/contracts.md, section 12).

A pass's `SearchParams` name the data set, the seed, every row's fold byte (255 for a test
row), every candidate's training options, and the pass's fits in dispatch order: a task is
the range [start, start + count) of those fits. A fit is `(candidate, fold)`; the fold
`REFIT` trains the candidate on the whole pool for `refit_epochs` epochs without early
stopping and tests it once. Tasks never carry row data.

A task answers with one `FitResult` per fit of its range, in order. A fit's numbers are a
function of the parameters alone: bitwise the same whichever worker, slot or order ran it.
Only `seconds` (how long it took) differs, and `worker`, which the coordinator fills in
with the identity it received the result from (a worker leaves it empty).
"""

from __future__ import annotations

import msgspec

REFIT = -1  # the fold of a refit: the whole pool trains, the test rows test
TEST_FOLD = 255  # the fold byte of a test row


class CandidateOptions(msgspec.Struct, frozen=True):
    """A candidate's options of `dense.training.TrainingOptions`, all but the seed. A map on
    the wire, as the plain dicts that travelled before it were."""

    hidden: tuple[int, ...]
    batch: int
    epochs: int
    optimizer: str
    lr: float
    patience: int | None
    target_accuracy: float | None
    chunk: int
    precision: str = "float64"


class SearchParams(msgspec.Struct, frozen=True, array_like=True):
    data: str  # a staged blob's SHA256 hex, or a teacher identity
    teacher: tuple[int, ...]  # (rows, features, classes) of a teacher set, else ()
    seed: int
    folds: bytes  # one byte per row in file order: its fold, TEST_FOLD for a test row
    candidates: list[CandidateOptions]
    fits: list[tuple[int, int]]  # (candidate, fold) of each item of the pass
    refit_epochs: int = 0  # epochs of a REFIT fit
    # Replicates (docs/contracts.md, section 16): the training seed of each replicate, and
    # each fit's replicate (parallel to `fits`). Empty: one replicate, trained with `seed`.
    # `seed` alone names the data (a teacher set) and, through the fold bytes, the roles.
    seeds: list[int] = []
    replicates: list[int] = []
    # Fits of a fold that also test once on the test rows, with the model of their best
    # epoch (a `train --replicates` fit: section 9's three roles).
    test: bool = False


class FitResult(msgspec.Struct, frozen=True, array_like=True):
    candidate: int
    fold: int
    epochs: int  # epochs run (early stopping may end a fit before its last)
    best_epoch: int  # 0-based epoch of the lowest validation loss (the last, for a refit)
    validation_loss: float  # at best_epoch; NaN for a refit or a diverged fit
    validation_accuracy: float
    train_loss: list[float]  # per epoch: mean over the epoch's rows
    validation_losses: list[float]  # per epoch (empty for a refit)
    validation_accuracies: list[float]
    seconds: float
    diverged: str = ""  # why the fit left the finite range, if it did
    worker: str = ""  # who computed it: set by the coordinator, never by a worker
    # A refit's test metrics, parameters (flat binary64) and normalisation (binary64).
    test_loss: float = float("nan")
    test_accuracy: float = float("nan")
    params: bytes = b""
    mean: bytes = b""
    std: bytes = b""
    replicate: int = 0  # which of the pass's `seeds` trained it


class SearchStats(msgspec.Struct, frozen=True, array_like=True):
    fits: list[FitResult]
