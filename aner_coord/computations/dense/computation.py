"""Dense classifier training `aner-dense/v1` (SPEC section 9): the coordinator's half.

Passes, in order:
- normalisation: the moment sums of the training rows, chunk by chunk, combined in chunk
  order (`dense_plan.combine_moments`);
- per epoch, one pass per global batch (a training step): the pass's items are the batch's
  rows, its parameters carry their positions in epoch order, the frozen model and the
  normalisation; every chunk returns its gradient sum, loss sum, correct and valid counts,
  each kept in its slot, summed in chunk order at the barrier (`dense_plan.reduce_chunks`)
  and applied by one optimizer update here (`optimizers.step`), never a partial one;
- per epoch, a validation pass (loss and accuracy of the validation rows), which drives
  early stopping and `time_to_target_s`;
- a final test pass with the best validation epoch's model.

These are exactly the functions `dense_single.train_single` calls, in the same order, so
the parameters equal its own bit for bit for the same chunk size whoever computes the
chunks. The run reads a clock only to record each epoch's seconds.

Worker processes receive file data once per job (`staging`); local threads share it
(`aner_worker.kernels.dense.rows.share`). A teacher set is generated where it is used.
"""

from __future__ import annotations

import enum
import math
import os
import time
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from aner_coord.computations.base import Accounting, Admitted, Diverged, PassSpec, StagePlan
from aner_coord.computations.dense.model import DenseModel, encode_model
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.dense.result import DenseResult, EpochRecord
from aner_coord.computations.dense.summary import summarize
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.jobdir.status import JobState
from aner_coord.limits import check_int, check_positive, check_seed
from aner_worker.blocks import split
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import (
    ArrayDataset,
    DataError,
    Dataset,
    TeacherDataset,
    open_dataset,
)
from aner_worker.kernels.dense.kernel import DenseKernel
from aner_worker.kernels.dense.network import ChunkStats, flatten, parameter_count, unflatten
from aner_worker.kernels.dense.optimizers import OptimizerName, initial_state, step
from aner_worker.kernels.dense.params import EVALUATE, MOMENTS, DenseParams, DenseStats
from aner_worker.kernels.dense.params import TRAIN as TRAIN_STEP
from aner_worker.kernels.dense.plan import (
    DEFAULT_TEST_FRACTION,
    DEFAULT_VALIDATION_FRACTION,
    EarlyStopping,
    Normalisation,
    PlanError,
    Roles,
    assign_roles,
    bounds,
    combine_moments,
    epoch_order,
    init_params,
    layer_sizes,
    reduce_chunks,
    steps_per_epoch,
)
from aner_worker.kernels.dense.rows import floats, to_bytes
from aner_worker.kernels.dense.streams import TEST, TRAIN, VALIDATION

MODEL_ID = "aner-dense/v1"

# Admission limits (SPEC section 3 asks for limits with clear errors).
MAX_FILE_BYTES = 2 << 30  # a data file, before parsing
MAX_DATA_BYTES = 4 << 30  # its features in memory, as binary64
MAX_TEACHER_ROWS = 200_000_000
MAX_LAYER = 4096  # features, hidden units or classes
MAX_HIDDEN_LAYERS = 16
MAX_PARAMS = 4_000_000  # 32 MB of binary64 per pass's frozen parameters
MAX_BATCH = 1_000_000
MAX_EPOCHS = 10_000
FRACTIONS = (DEFAULT_TEST_FRACTION, DEFAULT_VALIDATION_FRACTION)

Floats = npt.NDArray[np.float64]


class _Phase(enum.Enum):
    NORMALISE = "normalisation"
    TRAIN = "training step"
    VALIDATE = "validation"
    TEST = "test"
    DONE = "done"


# -- loading data ------------------------------------------------------------------------
_loaded: dict[tuple[Any, ...], Dataset] = {}


def _file_key(request: DenseRequest) -> tuple[Any, ...]:
    assert request.data is not None
    if request.data == "digits":
        return ("digits", request.label)
    try:
        info = os.stat(request.data)
    except OSError as exc:
        raise RequestError(
            f"{{data}}: cannot read {request.data}: {exc.strerror or exc}", "data"
        ) from None
    if info.st_size > MAX_FILE_BYTES:
        raise AdmissionError(
            f"{request.data} has {info.st_size:,} bytes; the limit is {MAX_FILE_BYTES:,}: "
            "train on a smaller file ({data})",
            "data",
        )
    return ("file", os.path.abspath(request.data), request.label, info.st_mtime_ns, info.st_size)


def load_dataset(request: DenseRequest) -> Dataset:
    """The request's data set, parsed once per file version and kept for the job's run."""
    try:
        if request.teacher is not None:
            rows, features, classes = request.teacher
            if rows > MAX_TEACHER_ROWS:
                raise AdmissionError(
                    f"{{teacher}} asks for {rows:,} rows; the limit is {MAX_TEACHER_ROWS:,}",
                    "teacher",
                )
            return TeacherDataset(rows, features, classes, request.seed)
        key = _file_key(request)
        found = _loaded.get(key)
        if found is None:
            assert request.data is not None
            found = open_dataset(request.data, request.label)
            _loaded.clear()  # one data set at a time: a parsed file may be large
            _loaded[key] = found
        return found
    except DataError as exc:
        raise RequestError(str(exc)) from None


def _check_hidden(hidden: object) -> tuple[int, ...]:
    if not isinstance(hidden, tuple | list):
        raise RequestError(f"{{hidden}} must be a list of layer sizes, got {hidden!r}", "hidden")
    if len(hidden) > MAX_HIDDEN_LAYERS:
        raise AdmissionError(
            f"{{hidden}} has {len(hidden)} layers; the limit is {MAX_HIDDEN_LAYERS}", "hidden"
        )
    sizes = tuple(check_positive("hidden", h) for h in hidden)
    if any(h > MAX_LAYER for h in sizes):
        raise AdmissionError(
            f"{{hidden}} has a layer of {max(sizes):,} units; the limit is {MAX_LAYER:,}", "hidden"
        )
    return sizes


def _check_lr(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{{lr}} must be a finite number, got {value!r}", "lr")
    if value <= 0:
        raise RequestError(f"{{lr}} must be positive, got {value}", "lr")
    return float(value)


class Dense:
    kind: ClassVar[str] = "dense"
    unit: ClassVar[str] = "rows"
    request_type: ClassVar[type[DenseRequest]] = DenseRequest
    kernel: ClassVar[DenseKernel] = DenseKernel()
    seconds_per_item: ClassVar[float] = 2e-6

    def admit(self, request: DenseRequest) -> Admitted:
        seed = check_seed(request.seed)
        if (request.data is None) == (request.teacher is None):
            raise RequestError(
                "give either {data} FILE or {teacher} ROWS,FEATURES,CLASSES (exactly one)",
                "data",
                "teacher",
            )
        hidden = _check_hidden(request.hidden)
        batch = check_positive("batch", request.batch)
        if batch > MAX_BATCH:
            raise AdmissionError(f"{{batch}} is {batch:,}; the limit is {MAX_BATCH:,}", "batch")
        epochs = check_positive("epochs", request.epochs)
        if epochs > MAX_EPOCHS:
            raise AdmissionError(f"{{epochs}} is {epochs}; the limit is {MAX_EPOCHS}", "epochs")
        check_positive("patience", request.patience)
        if request.optimizer not in ("adam", "sgd"):
            raise RequestError(
                f"{{optimizer}} must be adam or sgd, got {request.optimizer!r}", "optimizer"
            )
        lr = _check_lr(request.lr)
        target = request.target_accuracy
        if target is not None and (
            isinstance(target, bool) or not isinstance(target, int | float) or not 0 < target <= 1
        ):
            raise RequestError(
                f"{{target_accuracy}} must be in (0, 1], got {target!r}", "target_accuracy"
            )
        if request.teacher is not None:
            if len(request.teacher) != 3:
                raise RequestError("{teacher} must be ROWS,FEATURES,CLASSES", "teacher")
            for value in request.teacher:
                check_int("teacher", value)
        dataset = load_dataset(request)
        if isinstance(dataset, ArrayDataset):
            in_memory = dataset.n_rows * dataset.n_features * 8
            if in_memory > MAX_DATA_BYTES:
                raise AdmissionError(
                    f"{request.data}: {dataset.n_rows:,} x {dataset.n_features:,} features "
                    f"take {in_memory:,} bytes; the limit is {MAX_DATA_BYTES:,} ({{data}})",
                    "data",
                )
        for what, size in (("features", dataset.n_features), ("classes", dataset.n_classes)):
            if size > MAX_LAYER:
                raise AdmissionError(f"the data has {size:,} {what}; the limit is {MAX_LAYER:,}")
        sizes = layer_sizes(dataset.n_features, hidden, dataset.n_classes)
        n_params = parameter_count(sizes)
        if n_params > MAX_PARAMS:
            raise AdmissionError(
                f"layer sizes {sizes} make {n_params:,} parameters; the limit is "
                f"{MAX_PARAMS:,}: use smaller {{hidden}} layers",
                "hidden",
            )
        try:
            roles = assign_roles(seed, dataset.n_rows, *FRACTIONS)
        except PlanError as exc:
            raise RequestError(str(exc)) from None
        n_train = int(roles.train.size)
        steps = steps_per_epoch(n_train, batch)
        source = (
            {"teacher": list(request.teacher)}
            if request.teacher is not None
            else {"file": os.path.basename(request.data or ""), "label": request.label}
        )
        return Admitted(
            items=min(batch, n_train),
            passes=1 + epochs * (steps + 1) + 1,
            identity=MODEL_ID,
            describe={
                "data": dataset.identity,
                **source,
                "seed": seed,
                "layer_sizes": sizes,
                "parameters": n_params,
                "batch": batch,
                "epochs": epochs,
                "steps_per_epoch": steps,
                "optimizer": request.optimizer,
                "lr": lr,
                "patience": request.patience,
                "target_accuracy": target,
                "roles": roles.counts(),
                "roles_sha256": roles.sha256,
            },
        )

    def start(self, request: DenseRequest, chunk: int) -> DenseRun:
        return DenseRun(request, chunk, load_dataset(request))

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return summarize(result)


class DenseRun:
    # Gradient sums are as large as the model: a ledger of every chunk would dwarf it (24 MB
    # for a digits job). Only committed passes are recorded; a resumed job retrains.
    durable_chunks = False

    def __init__(self, request: DenseRequest, chunk: int, dataset: Dataset) -> None:
        self._request = request
        self._chunk = chunk
        self._dataset = dataset
        self._seed = request.seed
        self._lr = float(request.lr)
        self._epochs = request.epochs
        self._batch = request.batch
        self._started = time.perf_counter()
        self.roles: Roles = assign_roles(self._seed, dataset.n_rows, *FRACTIONS)
        self._n_train = int(self.roles.train.size)
        self._bounds = bounds(self._n_train, self._batch)
        self.sizes = layer_sizes(dataset.n_features, request.hidden, dataset.n_classes)
        optimizer: OptimizerName = "adam" if request.optimizer == "adam" else "sgd"
        self.flat: Floats = flatten(init_params(self._seed, self.sizes))
        self._opt = initial_state(optimizer, self.flat.size)
        self._best_flat: Floats = self.flat.copy()
        self._stopping = EarlyStopping(request.patience)
        self.normalisation: Normalisation | None = None
        self._mean = self._std = b""
        self.history: list[EpochRecord] = []
        self._time_to_target: float | None = None
        self._committed = 0
        self._rows = 0
        self._epoch = 0
        self._step = 0
        self._epoch_loss = 0.0
        self._order = self.roles.train
        self._phase = _Phase.NORMALISE  # of the pass in progress (or next, before it)
        self._slots: list[DenseStats | None] = []
        self._test: tuple[float, float] | None = None
        self._stage_plan: StagePlan | None = None
        if isinstance(dataset, TeacherDataset):
            self._data_name = dataset.identity
            self._teacher: tuple[int, ...] = (dataset.n_rows, dataset.n_features, dataset.n_classes)
        else:
            assert isinstance(dataset, ArrayDataset)
            self._data_name = dense_rows.blob_digest(dataset.x, dataset.y)
            self._teacher = ()
            dense_rows.share(self._data_name, dataset)  # local threads read it in place

    # -- passes ------------------------------------------------------------------------------
    def _params(self, kind: str, role: int, positions: bytes = b"", flat: bytes = b"") -> Any:
        return DenseParams(
            kind,
            self._data_name,
            self._teacher,
            self._seed,
            FRACTIONS,
            role,
            positions,
            tuple(self.sizes),
            flat,
            self._mean,
            self._std,
        )

    def next_pass(self) -> PassSpec | None:
        phase = self._phase
        if phase is _Phase.DONE:
            return None
        if phase is _Phase.NORMALISE:
            items = self._n_train
            params = self._params(MOMENTS, TRAIN)
            label = "normalisation (training rows)"
        elif phase is _Phase.TRAIN:
            b0, b1 = self._bounds[self._step]
            items = b1 - b0
            positions = to_bytes(self._order[b0:b1], np.dtype("<i8"))
            params = self._params(TRAIN_STEP, -1, positions, self.flat.tobytes())
            label = f"epoch {self._epoch} step {self._step + 1}/{len(self._bounds)}"
            if self.history:
                label += f", validation accuracy {self.history[-1].validation_accuracy:.4f}"
        elif phase is _Phase.VALIDATE:
            items = int(self.roles.validation.size)
            params = self._params(EVALUATE, VALIDATION, flat=self.flat.tobytes())
            label = f"validation after epoch {self._epoch}"
        else:
            items = int(self.roles.test.size)
            params = self._params(EVALUATE, TEST, flat=self._best_flat.tobytes())
            label = f"test of the best model (epoch {self._stopping.best_epoch})"
        self._slots = [None] * len(bounds(items, self._chunk))
        return PassSpec(items, params, label)

    def _where(self) -> str:
        return f"epoch {self._epoch}, step {self._step}"

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, DenseStats):
            return f"expected dense statistics, got {type(stats).__name__}"
        if stats.valid != count:
            return f"{stats.valid} valid rows reported for a range of {count}"
        phase = self._phase
        if phase is _Phase.NORMALISE:
            width = 8 * self.sizes[0]
            if len(stats.sums) != width or len(stats.m2) != width:
                return "moment sums of the wrong length"
            return None
        if not math.isfinite(stats.loss_sum):
            where = self._where() if phase is _Phase.TRAIN else f"the {phase.value} pass"
            raise Diverged(f"loss {stats.loss_sum} at {where}: lower --lr")
        if not 0 <= stats.correct <= count:
            return f"{stats.correct} correct predictions is impossible for {count} rows"
        if stats.loss_sum < 0:
            return f"negative loss sum {stats.loss_sum}"
        if phase is _Phase.TRAIN:
            if len(stats.sums) != 8 * self.flat.size:
                return f"{len(stats.sums) // 8} gradient sums, expected {self.flat.size}"
            if not np.isfinite(floats(stats.sums)).all():
                raise Diverged(f"non-finite gradient at {self._where()}: lower --lr")
        return None

    def accept(self, chunk: int, stats: DenseStats) -> None:
        self._slots[chunk] = stats

    def _accepted(self) -> list[DenseStats]:
        slots = [s for s in self._slots if s is not None]
        assert len(slots) == len(self._slots), "commit before every chunk was accepted"
        return slots

    def commit(self) -> None:
        slots = self._accepted()
        phase = self._phase
        if phase is _Phase.NORMALISE:
            parts = [(s.valid, floats(s.sums), floats(s.m2)) for s in slots]
            self.normalisation = combine_moments(parts)
            self._mean = to_bytes(self.normalisation.mean)
            self._std = to_bytes(self.normalisation.std)
            self._begin_epoch(0)
        elif phase is _Phase.TRAIN:
            self._commit_step(slots)
        elif phase is _Phase.VALIDATE:
            self._commit_validation(slots)
        elif phase is _Phase.TEST:
            loss, correct = _evaluation(slots)
            n = int(self.roles.test.size)
            self._test = (loss / n, correct / n)
            self._phase = _Phase.DONE

    def _begin_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._step = 0
        self._epoch_loss = 0.0
        self._order = epoch_order(self._seed, epoch, self.roles.train)
        self._phase = _Phase.TRAIN

    def _commit_step(self, slots: list[DenseStats]) -> None:
        b0, b1 = self._bounds[self._step]
        results = [ChunkStats(floats(s.sums), s.loss_sum, s.correct, s.valid) for s in slots]
        totals = reduce_chunks(results, b1 - b0)
        if not (math.isfinite(totals.loss_sum) and np.isfinite(totals.grad_sum).all()):
            raise Diverged(f"loss {totals.loss_sum} at {self._where()}: lower --lr")
        self.flat, self._opt = step(self.flat, totals.mean_grad(), self._opt, self._lr)
        self._committed += 1
        self._rows += totals.valid
        self._epoch_loss += totals.loss_sum
        self._step += 1
        if self._step == len(self._bounds):
            self._phase = _Phase.VALIDATE

    def _commit_validation(self, slots: list[DenseStats]) -> None:
        loss_sum, correct = _evaluation(slots)
        n = int(self.roles.validation.size)
        loss, accuracy = loss_sum / n, correct / n
        if not math.isfinite(loss):
            raise Diverged(f"validation loss {loss} after epoch {self._epoch}: lower --lr")
        record = EpochRecord(
            self._epoch,
            self._epoch_loss / self._n_train,
            loss,
            accuracy,
            round(time.perf_counter() - self._started, 6),
        )
        self.history.append(record)
        target = self._request.target_accuracy
        if self._time_to_target is None and target is not None and accuracy >= target:
            self._time_to_target = record.seconds
        self._stopping = self._stopping.observe(self._epoch, loss)
        if self._stopping.improved:
            self._best_flat = self.flat.copy()
        if self._stopping.stop or self._epoch + 1 == self._epochs:
            self._phase = _Phase.TEST
        else:
            self._begin_epoch(self._epoch + 1)

    def same(self, a: DenseStats, b: DenseStats) -> bool:
        return a == b  # one chunk, one thread: the same bits wherever it ran

    @property
    def committed_steps(self) -> int | None:
        return self._committed

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
        assert self.normalisation is not None
        return self._model(self._best_flat)

    def _model(self, flat: Floats) -> DenseModel:
        assert self.normalisation is not None
        params = [p.copy() for p in unflatten(flat, self.sizes)]
        return DenseModel(list(self.sizes), params, self.normalisation, self._dataset.classes)

    def files(self, state: JobState) -> dict[str, bytes]:
        """`model.npz`: the final (best) model of a completed run; of any other, the model
        of the last committed step, marked incomplete. Nothing before the normalisation."""
        if self.normalisation is None:
            return {}
        meta: dict[str, Any] = {
            "data": self._dataset.identity,
            "seed": self._seed,
            "label": self._request.label,  # `predict` drops this column from a CSV that has it
            "committed_steps": self._committed,
        }
        if state is JobState.COMPLETED:
            model = self._model(self._best_flat)
            meta.update(epoch=self._stopping.best_epoch, complete=True)
        else:
            model = self._model(self.flat)
            meta.update(epoch=self._epoch, complete=False, state=state.value)
        return {"model.npz": encode_model(model, meta)}

    def result(self, accounting: Accounting) -> DenseResult:
        assert self._test is not None
        request = self._request
        return DenseResult(
            model=MODEL_ID,
            data=self._dataset.identity,
            seed=self._seed,
            layer_sizes=list(self.sizes),
            optimizer=request.optimizer,
            lr=self._lr,
            batch=self._batch,
            epochs=self._epochs,
            patience=request.patience,
            chunk=self._chunk,
            target_accuracy=request.target_accuracy,
            roles=self.roles.counts(),
            roles_sha256=self.roles.sha256,
            history=list(self.history),
            best_epoch=self._stopping.best_epoch,
            test_loss=self._test[0],
            test_accuracy=self._test[1],
            time_to_target_s=self._time_to_target,
            committed_steps=self._committed,
            rows_processed=self._rows,
            staging=list(accounting.staging),
            losses=list(accounting.losses),
            seconds=accounting.seconds,
            execution=accounting.execution,
            workers=list(accounting.workers),
        )


def _evaluation(slots: list[DenseStats]) -> tuple[float, int]:
    """Loss and correct sums in chunk order, as `dense_single.evaluate_rows` adds them."""
    loss_sum = 0.0
    correct = 0
    for s in slots:
        loss_sum += s.loss_sum
        correct += s.correct
    return loss_sum, correct
