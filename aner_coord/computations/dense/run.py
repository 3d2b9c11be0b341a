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

from typing import Any, ClassVar

import numpy as np

from aner_coord.computations.base import Accounting, Diverged, PassSpec, Segment, StagePlan
from aner_coord.computations.dense import checkpoint, splits, suspect
from aner_coord.computations.dense.model import DenseModel, encode_model
from aner_coord.computations.dense.request import MODEL_ID, DenseRequest
from aner_coord.computations.dense.result import DenseResult, EpochRecord
from aner_coord.jobdir.status import JobState, TrainingPosition
from aner_worker.blocks import split
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import ArrayDataset, Dataset, TeacherDataset
from aner_worker.kernels.dense.network import check_precision
from aner_worker.kernels.dense.params import MOMENTS, DenseParams, DenseStats
from aner_worker.kernels.dense.plan import DEFAULT_VALIDATION_FRACTION, Roles, batch_used
from aner_worker.kernels.dense.rows import to_bytes
from aner_worker.kernels.dense.streams import VALIDATION
from aner_worker.kernels.dense.training import (
    Divergence,
    Training,
    TrainingOptions,
    TrainingPass,
    TrainingRows,
)

# Audits across platforms (docs/contracts.md, section 9 lets plans on two platforms differ by
# rounding): each statistic within this fraction of its largest magnitude, by the chunks'
# precision (float32 chunks of two BLAS kernel sets differ by binary32 rounding: 2.7e-7
# measured on digits). On one platform: bitwise.
AUDIT_TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


def _deviations(a: DenseStats, b: DenseStats) -> list[tuple[str, float]]:
    """Each statistic's largest difference relative to its largest magnitude (inf for a
    length mismatch or a non-finite value)."""
    out = []
    for name, x, y in (
        ("gradient or moment sums", a.sums, b.sums),
        ("squared deviations", a.m2, b.m2),
    ):
        u, v = np.frombuffer(x, dtype="<f8"), np.frombuffer(y, dtype="<f8")
        out.append((name, _relative(u, v)))
    out.append(("the loss sum", _relative(np.array([a.loss_sum]), np.array([b.loss_sum]))))
    return out


def _relative(u: np.ndarray[Any, Any], v: np.ndarray[Any, Any]) -> float:
    if u.shape != v.shape:
        return float("inf")
    if not u.size or np.array_equal(u, v):
        return 0.0
    scale = max(float(np.max(np.abs(u))), float(np.max(np.abs(v))), np.finfo(float).tiny)
    err = float(np.max(np.abs(u - v))) / scale
    return err if np.isfinite(err) else float("inf")


def feature_names(dataset: Dataset) -> tuple[str, ...] | None:
    """The names `predict` maps columns by: a CSV's header (label left out), x0, x1, ...
    for data without names; None for a header that repeats a name (columns by position)."""
    names = dataset.feature_names
    if names is None:
        return tuple(f"x{j}" for j in range(dataset.n_features))
    return tuple(names) if len(set(names)) == len(names) == dataset.n_features else None


def features_named(dataset: Dataset) -> bool:
    """Whether the features have the user's names (a frame's columns, a CSV's header)."""
    named = isinstance(dataset, ArrayDataset) and dataset.feature_names is not None
    return named and feature_names(dataset) is not None


# The kinds of a training's passes (`PassSpec.kind`) and what a row of each costs beside a
# training row until the job has measured it: a normalisation row is only summed, and an
# evaluated row goes forward only (a third of forward and backward, about).
NORMALISATION, STEP, VALIDATION_PASS, TEST_PASS = "normalisation", "step", "validation", "test"
PRIOR_COSTS = {NORMALISATION: 0.05, STEP: 1.0, VALIDATION_PASS: 0.35, TEST_PASS: 0.35}


def training_plan(train: int, validation: int, test: int, epochs: int) -> tuple[Segment, ...]:
    """A training's planned rows in the order they run, by kind of pass: normalisation,
    each epoch's steps and validation, the test."""
    epoch = (Segment(STEP, train), Segment(VALIDATION_PASS, validation))
    tail = (Segment(TEST_PASS, test),) if test else ()
    return (Segment(NORMALISATION, train), *epoch * epochs, *tail)


class DenseRun:
    # Gradient sums are as large as the model: a ledger of every chunk would dwarf it (24 MB
    # for a digits job). Only committed passes are recorded; what a resumed job keeps is its
    # last checkpoint (`Checkpoints`: the state after a committed pass), never a chunk.
    durable_chunks: ClassVar[bool] = False

    def __init__(
        self,
        request: DenseRequest,
        chunk: int,
        dataset: Dataset,
        roles: tuple[splits.Rule, Roles] | None = None,
    ) -> None:
        """`roles`: the rule and roles admission gave `dataset`'s rows for this request, if
        it kept them (else they are assigned again, as `splits.roles_for` does)."""
        self._request = request
        self._chunk = chunk
        self._dataset = dataset
        self.rule, self.roles = roles if roles is not None else splits.roles_for(request, dataset)
        # Workers derive a role's rows from the seed and these fractions under the per-row
        # rule; under groups or a given split each role pass carries its rows.
        self._fractions = (
            self.rule.test_fraction or 0.0,
            self.rule.validation_fraction or DEFAULT_VALIDATION_FRACTION,
        )
        self._derived = self.rule.groups is None and self.rule.given is None
        options = TrainingOptions(
            seed=request.seed,
            hidden=tuple(request.hidden),
            batch=batch_used(request.batch, int(self.roles.train.size)),
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
        self.steps_recovered = 0  # committed steps restored from a checkpoint
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
        # A batch travels as its positions; a whole role as its code where workers derive
        # it, else as its positions too.
        sent = spec.role < 0 or not self._derived
        positions = to_bytes(spec.rows, np.dtype("<i8")) if sent else b""
        return DenseParams(
            spec.step,
            self._data_name,
            self._teacher,
            self._request.seed,
            self._fractions,
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
        return PassSpec(spec.items, self._params(spec), self._label(spec), self._kind(spec))

    @staticmethod
    def _kind(spec: TrainingPass) -> str:
        if spec.step == MOMENTS:
            return NORMALISATION
        if spec.role < 0:
            return STEP
        return VALIDATION_PASS if spec.role == VALIDATION else TEST_PASS

    def _label(self, spec: TrainingPass) -> str:
        """The pass in its user's terms, epochs and steps counted from 1 (as the job files
        count them; the training indexes from 0, as docs/contracts.md, section 9 does)."""
        training = self.training
        epoch = f"epoch {training.epoch + 1} of {training.options.epochs}"
        if spec.step == MOMENTS:
            return "normalisation (training rows)"
        if spec.role < 0:
            return f"{epoch}, step {training.step + 1} of {training.steps_per_epoch}"
        if spec.role == VALIDATION:
            return f"validation after {epoch}"
        return f"test of the best model (epoch {training.best_epoch + 1})"

    def position(self) -> TrainingPosition | None:
        """Epoch e of E and step s of S, both from 1, the step in progress as the phase
        names it (the last while its epoch is validated), with the latest validation
        accuracy; None while normalising."""
        training = self.training
        if training.normalisation is None:
            return None
        last = training.history[-1].validation_accuracy if training.history else None
        return TrainingPosition(
            epoch=training.epoch + 1,
            epochs=training.options.epochs,
            step=min(training.step + 1, training.steps_per_epoch),
            steps=training.steps_per_epoch,
            validation_accuracy=last,
        )

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
        training = self.training
        normalising = training.normalisation is None
        try:
            training.commit()
        except Divergence as exc:
            raise Diverged(str(exc)) from None
        norm = training.normalisation
        if normalising and norm is not None:
            names = feature_names(self._dataset) or [str(j) for j in range(norm.mean.size)]
            problem = suspect.bad_normalisation(norm, names)
        else:
            problem = suspect.divergence(training.history, training.test, self._n_classes)
        if problem is not None:
            raise Diverged(problem)

    @property
    def _n_classes(self) -> int:
        return self.sizes[-1]

    @property
    def tolerance(self) -> float:
        """`close`'s, across platforms."""
        return AUDIT_TOLERANCE[self.precision]

    def same(self, a: DenseStats, b: DenseStats) -> bool:
        return a == b  # one chunk, one thread: the same bits on one platform

    def close(self, worker: DenseStats, own: DenseStats) -> bool:
        """Agreement across platforms (another CPU, OS or numpy may round a sum of products
        differently): equal counts, and each statistic within `tolerance` of its
        largest magnitude. A worker on this platform must agree bitwise (`same`)."""
        if (worker.valid, worker.correct) != (own.valid, own.correct):
            return False
        tolerance = self.tolerance
        return all(err <= tolerance for _, err in _deviations(worker, own))

    def deviation(self, worker: DenseStats, own: DenseStats) -> float:
        if (worker.valid, worker.correct) != (own.valid, own.correct):
            return float("inf")
        return max(err for _, err in _deviations(worker, own))

    def difference(self, worker: DenseStats, own: DenseStats) -> str:
        """How a worker's chunk statistics differ from the coordinator's, in one short line."""
        parts = []
        if worker.valid != own.valid or worker.correct != own.correct:
            parts.append(
                f"{worker.valid} valid and {worker.correct} correct rows where the coordinator "
                f"counts {own.valid} and {own.correct}"
            )
        for name, err in _deviations(worker, own):
            if err:
                parts.append(f"{name} off by {err:.3g} of its magnitude")
        return "; ".join(parts) or "the same values in other bits"

    @property
    def committed_steps(self) -> int | None:
        return self.training.committed

    # -- checkpoints (`Checkpoints`) -----------------------------------------------------------
    def checkpoint(self) -> bytes:
        """The training's state after its last committed pass (`checkpoint` module)."""
        return checkpoint.encode(self.training.snapshot())

    def checkpoint_limit(self) -> int:
        return checkpoint.limit(self.training)

    def restore(self, data: bytes) -> None:
        """Continue from checkpoint bytes `data` (before the first pass); ValueError naming
        what does not fit this request."""
        snap = checkpoint.decode(data, self.training)
        if not checkpoint.finite(snap):
            raise ValueError("its parameters or optimizer state are not finite")
        self.training.restore(snap)
        self.steps_recovered = self.training.committed

    # -- what the job leaves ---------------------------------------------------------------
    def staging(self) -> StagePlan | None:
        if self._stage_plan is None:
            self._stage_plan = stage_plan(self._data_name, self._dataset)
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
            list(self.sizes),
            params,
            norm,
            self._dataset.classes,
            features=feature_names(self._dataset),
            named=features_named(self._dataset),
            precision=self.training.options.precision,
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
            meta.update(epoch=training.best_epoch + 1, complete=True)
        else:
            model = self._model(training.flat)
            meta.update(epoch=training.epoch + 1, complete=False, state=state.value)
        return {"model.npz": encode_model(model, meta)}

    def result(self, accounting: Accounting) -> DenseResult:
        training = self.training
        request = self._request
        test = training.test or (None, None)  # no test rows: a null test (test_fraction 0)
        batch = training.options.batch
        note = suspect.still_improving(
            training.history,
            training.best_epoch,
            request.epochs,
            steps_per_epoch=training.steps_per_epoch,
            batch=batch,
        )
        notes = [note] if note is not None else []
        if not self.roles.validation.size:
            fraction = self.rule.validation_fraction or DEFAULT_VALIDATION_FRACTION
            notes.append(suspect.no_validation(self.roles.codes.size, fraction, request.patience))
        history = [
            EpochRecord(
                h.epoch + 1,  # the user's count, from 1 (the training indexes from 0)
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
            batch=batch,
            epochs=request.epochs,
            patience=request.patience,
            chunk=self._chunk,
            precision=self.training.options.precision,
            target_accuracy=request.target_accuracy,
            roles=self.roles.counts(),
            roles_sha256=self.roles.sha256,
            history=history,
            best_epoch=training.best_epoch + 1,
            test_loss=test[0],
            test_accuracy=test[1],
            time_to_target_s=training.time_to_target,
            notes=notes,
            committed_steps=training.committed,
            rows_processed=training.rows_processed,
            steps_recovered=self.steps_recovered,
            staging=list(accounting.staging),
            losses=list(accounting.losses),
            # the job's compute: without the time before its first worker was ready
            seconds=round(accounting.seconds - (accounting.ready_s or 0.0), 6),
            load_s=round(accounting.load_s + (accounting.ready_s or 0.0), 6),
            execution=accounting.execution,
            workers=list(accounting.workers),
        )


def stage_plan(name: str, dataset: Dataset) -> StagePlan | None:
    """The blocks that stage `dataset` to worker processes under `name` (its blob digest),
    for a Dense training and a search alike; None for a teacher set, which is generated
    where it is used and never sent."""
    if not isinstance(dataset, ArrayDataset):
        return None
    blob = dense_rows.encode_blob(dataset.x, dataset.y)
    return StagePlan(name, tuple(split(blob)))
