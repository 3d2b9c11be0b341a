"""The run of one Dense training job: the job machine's view of a `Training`
(`aner_worker.kernels.dense.training`), the state machine that `fit.fit_whole` also drives.

Each pass of the training becomes a pass of the job: its rows are the items, and its frozen
parameters travel as `DenseParams` (the batch's positions for a training step; for a pass
over a whole role only the role's code, from which a worker derives the rows). Chunks come
back from any workers, are checked, kept in their slots and committed in chunk order by the
training itself, so the parameters are bitwise those of `train_single` for the same chunk
and precision. The precision travels with each pass's parameters; the run declares it to the
backend (`precision`), which refuses a worker that cannot compute it.

Worker processes receive file data once per job (`staging`); local threads share it
(`aner_worker.kernels.dense.rows.share`). A teacher set is generated where it is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aner_coord.computations.base import Accounting, Diverged, PassSpec, StagePlan
from aner_coord.computations.dense.model import DenseModel, encode_model
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.dense.result import DenseResult, EpochRecord
from aner_coord.jobdir.status import JobState
from aner_worker.blocks import split
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import ArrayDataset, Dataset, TeacherDataset
from aner_worker.kernels.dense.network import check_precision
from aner_worker.kernels.dense.params import DenseParams, DenseStats
from aner_worker.kernels.dense.plan import (
    DEFAULT_TEST_FRACTION,
    DEFAULT_VALIDATION_FRACTION,
    Roles,
    assign_roles,
)
from aner_worker.kernels.dense.rows import to_bytes
from aner_worker.kernels.dense.training import (
    Divergence,
    Training,
    TrainingOptions,
    TrainingPass,
    TrainingRows,
)

MODEL_ID = "aner-dense/v1"
FRACTIONS = (DEFAULT_TEST_FRACTION, DEFAULT_VALIDATION_FRACTION)


class DenseRun:
    # Gradient sums are as large as the model: a ledger of every chunk would dwarf it (24 MB
    # for a digits job). Only committed passes are recorded; a resumed job retrains.
    durable_chunks = False

    def __init__(self, request: DenseRequest, chunk: int, dataset: Dataset) -> None:
        self._request = request
        self._chunk = chunk
        self._dataset = dataset
        self.roles: Roles = assign_roles(request.seed, dataset.n_rows, *FRACTIONS)
        options = TrainingOptions(
            seed=request.seed,
            hidden=tuple(request.hidden),
            batch=request.batch,
            epochs=request.epochs,
            optimizer="adam" if request.optimizer == "adam" else "sgd",
            lr=float(request.lr),
            patience=request.patience,
            target_accuracy=request.target_accuracy,
            chunk=chunk,
            precision=check_precision(request.precision),
        )
        rows = TrainingRows(self.roles.train, self.roles.validation, self.roles.test)
        self.training = Training(options, rows, dataset.n_features, dataset.n_classes)
        self._mean = self._std = b""
        self._stage_plan: StagePlan | None = None
        if isinstance(dataset, TeacherDataset):
            self._data_name = dataset.identity
            self._teacher: tuple[int, ...] = (dataset.n_rows, dataset.n_features, dataset.n_classes)
        else:
            assert isinstance(dataset, ArrayDataset)
            self._data_name = dense_rows.blob_digest(dataset.x, dataset.y)
            self._teacher = ()
            dense_rows.share(self._data_name, dataset)  # local threads read it in place

    @property
    def precision(self) -> str:
        """The compute precision every worker of the job must offer (`DeclaresPrecision`)."""
        return self.training.options.precision

    @property
    def sizes(self) -> list[int]:
        return self.training.sizes

    # -- passes ------------------------------------------------------------------------------
    def _params(self, spec: TrainingPass) -> DenseParams:
        # A batch travels as its positions; a whole role as its code (workers derive it).
        positions = to_bytes(spec.rows, np.dtype("<i8")) if spec.role < 0 else b""
        return DenseParams(
            spec.step,
            self._data_name,
            self._teacher,
            self._request.seed,
            FRACTIONS,
            spec.role,
            positions,
            tuple(self.sizes),
            spec.flat.tobytes() if spec.flat is not None else b"",
            self._mean,
            self._std,
            self.training.options.precision,
        )

    def next_pass(self) -> PassSpec | None:
        norm = self.training.normalisation
        if norm is not None and not self._mean:
            self._mean, self._std = to_bytes(norm.mean), to_bytes(norm.std)
        spec = self.training.next_pass()
        if spec is None:
            return None
        return PassSpec(spec.items, self._params(spec), spec.label)

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, DenseStats):
            return f"expected dense statistics, got {type(stats).__name__}"
        try:
            return self.training.check(start, count, stats)
        except Divergence as exc:
            raise Diverged(str(exc)) from None

    def accept(self, chunk: int, stats: DenseStats) -> None:
        self.training.accept(chunk, stats)

    def commit(self) -> None:
        try:
            self.training.commit()
        except Divergence as exc:
            raise Diverged(str(exc)) from None

    def same(self, a: DenseStats, b: DenseStats) -> bool:
        return a == b  # one chunk, one thread: the same bits wherever it ran

    @property
    def committed_steps(self) -> int | None:
        return self.training.committed

    # -- what the job leaves ---------------------------------------------------------------
    def staging(self) -> StagePlan | None:
        dataset = self._dataset
        if not isinstance(dataset, ArrayDataset):
            return None  # a teacher set is generated where it is used, never sent
        if self._stage_plan is None:
            blob = dense_rows.encode_blob(dataset.x, dataset.y)
            self._stage_plan = StagePlan(self._data_name, tuple(split(blob)))
        return self._stage_plan

    @property
    def model(self) -> DenseModel:
        """The best validation epoch's model (the final model of a completed run)."""
        return self._model(self.training.best_flat)

    def _model(self, flat: np.ndarray[Any, np.dtype[np.float64]]) -> DenseModel:
        norm = self.training.normalisation
        assert norm is not None
        params = self.training.parameters(flat)
        return DenseModel(
            list(self.sizes), params, norm, self._dataset.classes, self.training.options.precision
        )

    def files(self, state: JobState) -> dict[str, bytes]:
        """`model.npz`: the final (best) model of a completed run; of any other, the model
        of the last committed step, marked incomplete. Nothing before the normalisation."""
        training = self.training
        if training.normalisation is None:
            return {}
        meta: dict[str, Any] = {
            "data": self._dataset.identity,
            "seed": self._request.seed,
            "label": self._request.label,  # `predict` drops this column from a CSV that has it
            "committed_steps": training.committed,
        }
        if state is JobState.COMPLETED:
            model = self._model(training.best_flat)
            meta.update(epoch=training.best_epoch, complete=True)
        else:
            model = self._model(training.flat)
            meta.update(epoch=training.epoch, complete=False, state=state.value)
        return {"model.npz": encode_model(model, meta)}

    def result(self, accounting: Accounting) -> DenseResult:
        training = self.training
        assert training.test is not None
        request = self._request
        history = [
            EpochRecord(
                h.epoch,
                h.train_loss,
                h.validation_loss if h.validation_loss is not None else float("nan"),
                h.validation_accuracy if h.validation_accuracy is not None else float("nan"),
                h.seconds,
            )
            for h in training.history
        ]
        return DenseResult(
            model=MODEL_ID,
            data=self._dataset.identity,
            seed=request.seed,
            layer_sizes=list(self.sizes),
            optimizer=request.optimizer,
            lr=float(request.lr),
            batch=request.batch,
            epochs=request.epochs,
            patience=request.patience,
            chunk=self._chunk,
            precision=self.training.options.precision,
            target_accuracy=request.target_accuracy,
            roles=self.roles.counts(),
            roles_sha256=self.roles.sha256,
            history=history,
            best_epoch=training.best_epoch,
            test_loss=training.test[0],
            test_accuracy=training.test[1],
            time_to_target_s=training.time_to_target,
            committed_steps=training.committed,
            rows_processed=training.rows_processed,
            staging=list(accounting.staging),
            losses=list(accounting.losses),
            seconds=accounting.seconds,
            execution=accounting.execution,
            workers=list(accounting.workers),
        )
