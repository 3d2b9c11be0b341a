"""The result of `aner-dense/v1` training (`result.json`) and the API's fitted model.

`DenseResult` is what `result.json` holds (docs/contracts.md, section 9, Files): the per-epoch
history, test metrics, `best_epoch`, `committed_steps`, rows per role and the accounting. The
parameters live in `model.npz`, not here. `DenseFit`, returned by `parallel.dense_fit`, pairs the
result with the model so that `fit.predict(X)` works without a job directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.model import DenseModel
from aner_coord.computations.display import fields_table, repr_lines
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import StagingRecord
from aner_worker.kernels.dense.plan import Roles


class EpochRecord(msgspec.Struct, frozen=True):
    epoch: int  # from 1, as every display counts (result schema 2 counted from 0)
    train_loss: float  # mean over the epoch's rows, each under its step's parameters
    validation_loss: float
    validation_accuracy: float
    seconds: float  # from the job's start to the end of this epoch's validation


class DenseResult(ResultBase, frozen=True, tag="dense"):
    model: str  # "aner-dense/v1"
    data: str  # the data identity: SHA256 of the file's bytes, or the teacher set's
    seed: int
    layer_sizes: list[int]
    optimizer: str
    lr: float
    batch: int
    epochs: int
    patience: int
    chunk: int
    target_accuracy: float | None
    roles: dict[str, int]
    roles_sha256: str
    history: list[EpochRecord]
    best_epoch: int  # from 1: the model kept had trained best_epoch epochs
    test_loss: float | None  # None: no test rows (test_fraction 0, or a split without any)
    test_accuracy: float | None
    time_to_target_s: float | None
    committed_steps: int
    rows_processed: int
    staging: list[StagingRecord] = msgspec.field(default_factory=list)
    # What the user should know of the result (`suspect`): a run that used all its epochs
    # with the validation loss still falling.
    notes: list[str] = msgspec.field(default_factory=list)
    # Seconds spent loading the kernels before computing, which `seconds` leaves out: in
    # admission (the first Dense job of a process) and before the job's first worker was
    # ready (for worker processes also starting them and staging the data).
    load_s: float | None = None
    precision: str = "float64"  # the chunks' compute precision (older results: float64)
    # Committed steps the last resume took from a checkpoint instead of computing them (an
    # account of the run, like `seconds`: every number above is the uninterrupted run's).
    steps_recovered: int = 0

    def summary(self) -> str:
        last = self.history[-1]
        notes = "".join(f"\nnote: {note}" for note in self.notes)
        test = _test_line(self, "test ")
        return (
            f"{len(self.history)} epoch(s), {self.committed_steps} steps: best epoch "
            f"{self.best_epoch} (validation accuracy "
            f"{self.history[self.best_epoch - 1].validation_accuracy:.4f}), {test} | last epoch "
            f"validation loss {last.validation_loss:.4f} | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s{notes}"
        )


@dataclass(frozen=True)
class DenseFit:
    """A completed training job: its result (attributes pass through), its model and the
    rows of each role."""

    result: DenseResult
    model: DenseModel
    split: Roles  # each row's role (`roles` passes through: the count per role)

    @property
    def train_rows(self) -> npt.NDArray[np.int64]:
        """Positions (0-based, in data order) of the training rows."""
        return self.split.train

    @property
    def validation_rows(self) -> npt.NDArray[np.int64]:
        return self.split.validation

    @property
    def test_rows(self) -> npt.NDArray[np.int64]:
        return self.split.test

    def predict(self, x: Any) -> npt.NDArray[np.generic]:
        """Labels of raw feature rows (an array by position, a frame by column name), with
        the model's own normalisation, in the training labels' own type."""
        return self.model.predict(x)

    def predict_proba(self, x: Any) -> npt.NDArray[np.float64]:
        return self.model.predict_proba(x)

    def score(self, x: Any, y: npt.ArrayLike) -> float:
        """Accuracy of `predict(x)` against the labels `y` (as scikit-learn's `score`)."""
        return self.model.score(x, y)

    def summary(self) -> str:
        return self.result.summary()

    def __repr__(self) -> str:
        r = self.result
        head = (
            f"DenseFit({r.model}, layers {'-'.join(map(str, r.layer_sizes))}, {r.optimizer} "
            f"lr {r.lr:g}, batch {r.batch}, seed {r.seed})"
        )
        return repr_lines(head, r.summary())

    def _repr_html_(self) -> str:
        r = self.result
        best = r.history[r.best_epoch - 1]
        fields: list[tuple[str, object]] = [
            ("model", f"{r.model}, layers {'-'.join(map(str, r.layer_sizes))}, {r.precision}"),
            ("options", f"{r.optimizer} lr {r.lr:g}, batch {r.batch}, patience {r.patience}"),
            ("data", r.data),
            ("seed", r.seed),
            ("rows", ", ".join(f"{role} {n:,}" for role, n in r.roles.items())),
            ("epochs", f"{len(r.history)} run of at most {r.epochs}, {r.committed_steps} steps"),
            (
                "best epoch",
                f"{r.best_epoch}: validation loss {best.validation_loss:.4f}, "
                f"accuracy {best.validation_accuracy:.4f}",
            ),
            ("test", _test_line(r)),
            ("workers", f"{len(r.workers)}: {', '.join(w.identity for w in r.workers)}"),
            ("seconds", f"{r.seconds:.3f}"),
            *(("note", note) for note in r.notes),
        ]
        return fields_table("Dense fit", fields)

    def __getattr__(self, name: str) -> Any:
        # Only the result's fields pass through: pickle and copy look up `__setstate__` and
        # the like on an instance whose `result` is not set yet, which would recurse.
        if name.startswith("__") or name == "result":
            raise AttributeError(name)
        return getattr(self.result, name)


def _test_line(result: DenseResult, prefix: str = "") -> str:
    """The test metrics in words, or that there were no test rows (`test_fraction` 0)."""
    if result.test_accuracy is None or result.test_loss is None:
        return "no test rows"
    return f"{prefix}accuracy {result.test_accuracy:.4f}, {prefix}loss {result.test_loss:.4f}"
