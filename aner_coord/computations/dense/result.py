"""The result of `aner-dense/v1` training (`result.json`) and the API's fitted model.

`DenseResult` is what `result.json` holds (SPEC section 9, Files): the per-epoch history, test
metrics, `best_epoch`, `committed_steps`, rows per role and the accounting. The parameters
live in `model.npz`, not here. `DenseFit`, returned by `parallel.dense_fit`, pairs the result
with the model so that `fit.predict(X)` works without a job directory.
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


class EpochRecord(msgspec.Struct, frozen=True):
    epoch: int
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
    best_epoch: int
    test_loss: float
    test_accuracy: float
    time_to_target_s: float | None
    committed_steps: int
    rows_processed: int
    staging: list[StagingRecord] = msgspec.field(default_factory=list)
    precision: str = "float64"  # the chunks' compute precision (older results: float64)

    def summary(self) -> str:
        last = self.history[-1]
        return (
            f"{len(self.history)} epoch(s), {self.committed_steps} steps: best epoch "
            f"{self.best_epoch} (validation accuracy "
            f"{self.history[self.best_epoch].validation_accuracy:.4f}), test accuracy "
            f"{self.test_accuracy:.4f}, test loss {self.test_loss:.4f} | last epoch "
            f"validation loss {last.validation_loss:.4f} | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s"
        )


@dataclass(frozen=True)
class DenseFit:
    """A completed training job: its result (attributes pass through) and its model."""

    result: DenseResult
    model: DenseModel

    def predict(self, x: npt.ArrayLike) -> npt.NDArray[np.generic]:
        """Labels of raw feature rows, with the model's own normalisation."""
        return self.model.predict(np.asarray(x, dtype=np.float64))

    def predict_proba(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return self.model.predict_proba(np.asarray(x, dtype=np.float64))

    def summary(self) -> str:
        return self.result.summary()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)
