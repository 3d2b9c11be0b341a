"""One ``aner-dense/v1`` training (docs/contracts.md, section 9) as a pure state machine: which pass
comes next, what a chunk's statistics may be, and what committing a pass does.

A training is a sequence of passes, each cut into chunks of ``chunk`` rows computed under
frozen parameters and committed only when every chunk is in its slot:

- normalisation: the moment sums of the training rows, combined in chunk order;
- per epoch, one pass per global batch (a training step): gradient sums of the batch's rows,
  summed in chunk order, one optimizer update in binary64;
- per epoch, a validation pass, which drives early stopping and the time to target;
- a final test pass with the best validation epoch's model.

Chunks are computed in the declared precision (`TrainingOptions.precision`, float64 or
float32); what they return, the sums in chunk order, the optimizer and the parameters kept
here are binary64 either way, so a float32 training is as reproducible as a float64 one.

Whoever computes the chunks drives it the same way: the coordinator's job machine (chunks on
any workers, `aner_coord.computations.dense`), or `fit.fit_whole` in one thread (the
reference the tests compare every plan with, and a whole fit on one worker slot). The
parameters are therefore bitwise the same for the same chunk, whoever computed the chunks.

The rows of each role are given (`TrainingRows`): section 9's roles for a training job,
a fold's training and validation rows for cross-validation (section 12), or the whole pool
with no validation for a refit, which then trains for its epochs without early stopping and
keeps its final model. The state machine reads a clock only to stamp each epoch's seconds.

Between passes its whole state is plain data (`snapshot`, a `TrainingSnapshot` of numbers
and binary64 arrays) and a fresh `Training` of the same options and rows continues exactly
where a snapshot was taken (`restore`): the coordinator keeps snapshots as checkpoints
(`aner_coord.computations.dense.checkpoint`), so a stopped training job resumes with the
bits an uninterrupted one ends with. Only the epochs' seconds (a clock) differ.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from aner_worker.kernels.base import Precision
from aner_worker.kernels.dense.loops import accumulate, all_finite
from aner_worker.kernels.dense.network import DEFAULT_PRECISION, flatten, unflatten
from aner_worker.kernels.dense.optimizers import (
    OptimizerName,
    OptimizerState,
    initial_state,
    step,
)
from aner_worker.kernels.dense.params import (
    DEFAULT_CHUNK_ROWS,
    EVALUATE,
    MOMENTS,
    TRAIN,
    DenseStats,
)
from aner_worker.kernels.dense.plan import (
    EarlyStopping,
    Normalisation,
    PlanError,
    bounds,
    combine_moments,
    epoch_order,
    init_params,
    layer_sizes,
)
from aner_worker.kernels.dense.streams import TEST, VALIDATION
from aner_worker.kernels.dense.streams import TRAIN as TRAIN_ROLE

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
_I8 = np.dtype("<i8")


class Divergence(ArithmeticError):
    """The training's numbers left the finite range; the message says where and what to do."""


@dataclass(frozen=True)
class TrainingOptions:
    """What a training is asked to do; the defaults are docs/contracts.md, section 9's."""

    seed: int
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 256
    epochs: int = 100
    optimizer: OptimizerName = "adam"
    lr: float = 1e-3
    patience: int | None = 5  # None: no early stopping (a refit)
    target_accuracy: float | None = None
    chunk: int = DEFAULT_CHUNK_ROWS
    # The precision the chunks are computed in (`network.PRECISIONS`); the reduction, the
    # optimizer and the parameters kept here are binary64 whatever it is.
    precision: Precision = DEFAULT_PRECISION


@dataclass(frozen=True)
class TrainingRows:
    """The ascending row positions of each role. `validation` may be empty (a refit: no
    validation, the final model is kept; data too small for a validation row: early
    stopping on the training loss) and so may `test` (a cross-validation fit)."""

    train: Ints
    validation: Ints
    test: Ints


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    train_loss: float  # mean over the epoch's rows, each under its step's parameters
    validation_loss: float | None  # None without validation rows
    validation_accuracy: float | None
    seconds: float  # from the start of the training to the end of this epoch


@dataclass(frozen=True)
class TrainingPass:
    """One pass: its rows (the items, in order), what is computed over them, under which
    frozen parameters (None for the normalisation) and, for a pass over a whole role, that
    role's code (a worker that knows the roles derives the rows from it)."""

    step: str  # MOMENTS, TRAIN or EVALUATE
    rows: Ints = field(repr=False)
    flat: Floats | None = field(repr=False)
    role: int  # TRAIN_ROLE, VALIDATION, TEST, or -1 for a batch
    label: str

    @property
    def items(self) -> int:
        return int(self.rows.size)


@dataclass(frozen=True)
class TrainingSnapshot:
    """The whole state of a `Training` between two passes, as plain data: what a checkpoint
    holds. The data order of the epoch in progress is not kept: it is a function of the seed
    and the epoch (`plan.epoch_order`), derived again on restore. `history` holds one row
    per epoch, (epoch, train loss, validation loss, validation accuracy, seconds), NaN for
    a value without validation rows."""

    phase: str  # the pass that comes next (`_Phase` value)
    epoch: int
    step: int  # committed steps of the epoch in progress
    committed: int
    rows_processed: int
    epoch_loss: float  # the loss sum of the epoch's committed steps
    elapsed: float  # seconds of training before the snapshot (epochs' seconds go on from it)
    flat: Floats
    best_flat: Floats
    optimizer: str
    optimizer_t: int
    moment1: Floats
    moment2: Floats
    best_loss: float
    best_epoch: int
    since_best: int
    mean: Floats | None  # the normalisation; None before it is committed
    std: Floats | None
    history: Floats  # shape (epochs so far, 5)
    time_to_target: float | None
    test: tuple[float, float] | None


class _Phase(enum.Enum):
    NORMALISE = "normalisation"
    TRAIN = "training step"
    VALIDATE = "validation"
    TEST = "test"
    DONE = "done"


class Training:
    """The state of one training; see the module docstring."""

    def __init__(
        self,
        options: TrainingOptions,
        rows: TrainingRows,
        n_features: int,
        n_classes: int,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.options = options
        self.rows = rows
        self._clock = clock
        self._started = clock()
        self.sizes = layer_sizes(n_features, options.hidden, n_classes)
        self.flat: Floats = flatten(init_params(options.seed, self.sizes))
        self._opt = initial_state(options.optimizer, self.flat.size)
        self.best_flat: Floats = self.flat.copy()
        self._stopping = EarlyStopping(options.patience or 0)
        self.normalisation: Normalisation | None = None
        self.history: list[EpochRecord] = []
        self.time_to_target: float | None = None
        self.committed = 0
        self.rows_processed = 0
        self.epoch = 0
        self.step = 0
        self._epoch_loss = 0.0
        self._order = rows.train
        self._bounds = bounds(int(rows.train.size), options.batch)
        self._phase = _Phase.NORMALISE  # of the pass in progress (or next, before it)
        self._slots: list[DenseStats | None] = []
        # A training step's gradient sum, added up in chunk order as the slots fill: chunk c
        # joins once chunks 0..c-1 have (the order of `plan.reduce_chunks`, so the same bits),
        # while later chunks are still being computed. One buffer, reused by every step.
        self._grad_sum: Floats = np.empty(self.flat.size)
        self._summed = 0  # leading slots of the current pass already in `_grad_sum`
        self.test: tuple[float, float] | None = None

    # -- what the driver asks ----------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def best_epoch(self) -> int:
        """The epoch of the model kept: the best validation epoch's, or the last one's
        without validation rows (-1 before any epoch)."""
        if self.rows.validation.size:
            return self._stopping.best_epoch
        return len(self.history) - 1

    @property
    def steps_per_epoch(self) -> int:
        return len(self._bounds)

    def where(self) -> str:
        # The user's count, from 1, as every printed line has it (the fields count from 0).
        return f"epoch {self.epoch + 1}, step {self.step + 1}"

    def next_pass(self) -> TrainingPass | None:
        phase = self._phase
        if phase is _Phase.DONE:
            return None
        spec = self._pass(phase)
        self._slots = [None] * len(bounds(spec.items, self.options.chunk))
        self._summed = 0
        return spec

    def _pass(self, phase: _Phase) -> TrainingPass:
        rows = self.rows
        if phase is _Phase.NORMALISE:
            label = "normalisation (training rows)"
            return TrainingPass(MOMENTS, rows.train, None, TRAIN_ROLE, label)
        if phase is _Phase.TRAIN:
            b0, b1 = self._bounds[self.step]
            label = f"epoch {self.epoch + 1} step {self.step + 1}/{len(self._bounds)}"
            last = self.history[-1].validation_accuracy if self.history else None
            if last is not None:
                label += f", validation accuracy {last:.4f}"
            return TrainingPass(TRAIN, self._order[b0:b1], self.flat, -1, label)
        if phase is _Phase.VALIDATE:
            label = f"validation after epoch {self.epoch + 1}"
            return TrainingPass(EVALUATE, rows.validation, self.flat, VALIDATION, label)
        label = f"test of the best model (epoch {self.best_epoch + 1})"
        return TrainingPass(EVALUATE, rows.test, self.best_flat, TEST, label)

    def check(self, start: int, count: int, stats: DenseStats) -> str | None:
        """None if `stats` can be a chunk of `count` rows of the current pass, else why
        not. Non-finite statistics are a property of the request: `Divergence`."""
        if stats.valid != count:
            return f"{stats.valid} valid rows reported for a range of {count}"
        phase = self._phase
        if phase is _Phase.NORMALISE:
            width = 8 * self.sizes[0]
            if len(stats.sums) != width or len(stats.m2) != width:
                return "moment sums of the wrong length"
            sums, m2 = _floats(stats.sums), _floats(stats.m2)
            if not (all_finite(sums) and all_finite(m2)):
                j = int(np.argmax(~(np.isfinite(sums) & np.isfinite(m2))))
                raise Divergence(
                    f"the moments of feature {j + 1} of {self.sizes[0]} are not finite in the "
                    "normalisation pass: rescale it"
                )
            return None
        if not math.isfinite(stats.loss_sum):
            where = self.where() if phase is _Phase.TRAIN else f"the {phase.value} pass"
            raise Divergence(f"loss {stats.loss_sum} at {where}: lower --lr")
        if not 0 <= stats.correct <= count:
            return f"{stats.correct} correct predictions is impossible for {count} rows"
        if stats.loss_sum < 0:
            return f"negative loss sum {stats.loss_sum}"
        if phase is _Phase.TRAIN:
            if len(stats.sums) != 8 * self.flat.size:
                return f"{len(stats.sums) // 8} gradient sums, expected {self.flat.size}"
            if not all_finite(_floats(stats.sums)):
                raise Divergence(f"non-finite gradient at {self.where()}: lower --lr")
        return None

    def accept(self, chunk: int, stats: DenseStats) -> None:
        slots = self._slots
        slots[chunk] = stats
        if self._phase is _Phase.TRAIN:
            while self._summed < len(slots):
                ready = slots[self._summed]
                if ready is None:
                    break
                accumulate(self._grad_sum, _floats(ready.sums), self._summed == 0)
                self._summed += 1

    def commit(self) -> None:
        """Every chunk of the current pass is in its slot: apply the pass."""
        slots = [s for s in self._slots if s is not None]
        assert len(slots) == len(self._slots), "commit before every chunk was accepted"
        phase = self._phase
        if phase is _Phase.NORMALISE:
            parts = [(s.valid, _floats(s.sums), _floats(s.m2)) for s in slots]
            self.normalisation = combine_moments(parts)
            self._begin_epoch(0)
        elif phase is _Phase.TRAIN:
            self._commit_step(slots)
        elif phase is _Phase.VALIDATE:
            loss_sum, correct = evaluation_sums(slots)
            n = int(self.rows.validation.size)
            self._end_epoch(loss_sum / n, correct / n)
        elif phase is _Phase.TEST:
            loss_sum, correct = evaluation_sums(slots)
            n = int(self.rows.test.size)
            self.test = (loss_sum / n, correct / n)
            self._phase = _Phase.DONE

    # -- transitions ---------------------------------------------------------------------------
    def _begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.step = 0
        self._epoch_loss = 0.0
        self._order = epoch_order(self.options.seed, epoch, self.rows.train)
        self._phase = _Phase.TRAIN

    def _commit_step(self, slots: Sequence[DenseStats]) -> None:
        """`plan.reduce_chunks` of the slots (the gradient already summed by `accept`, in
        chunk order), then one optimizer update on the mean gradient."""
        b0, b1 = self._bounds[self.step]
        assert self._summed == len(slots), "commit before every gradient was summed"
        loss_sum, correct, valid = 0.0, 0, 0
        for s in slots:
            loss_sum += s.loss_sum
            correct += s.correct
            valid += s.valid
        if valid != b1 - b0:
            raise PlanError(f"chunks accepted {valid} rows, the batch has {b1 - b0}")
        grad_sum = self._grad_sum
        if not (math.isfinite(loss_sum) and all_finite(grad_sum)):
            raise Divergence(f"loss {loss_sum} at {self.where()}: lower --lr")
        self.flat, self._opt = step(self.flat, grad_sum, self._opt, self.options.lr, n=valid)
        if not all_finite(self.flat):
            # (SGD's step is unbounded: a finite but huge gradient can overflow it.)
            raise Divergence(f"the parameters left the finite range at {self.where()}: lower --lr")
        self.committed += 1
        self.rows_processed += valid
        self._epoch_loss += loss_sum
        self.step += 1
        if self.step == len(self._bounds):
            if self.rows.validation.size:
                self._phase = _Phase.VALIDATE
            else:
                self._end_epoch(None, None)

    def _end_epoch(self, loss: float | None, accuracy: float | None) -> None:
        if loss is not None and not math.isfinite(loss):
            raise Divergence(f"validation loss {loss} after epoch {self.epoch + 1}: lower --lr")
        record = EpochRecord(
            self.epoch,
            self._epoch_loss / int(self.rows.train.size),
            loss,
            accuracy,
            round(self._clock() - self._started, 6),
        )
        self.history.append(record)
        target = self.options.target_accuracy
        if (
            self.time_to_target is None
            and target is not None
            and accuracy is not None
            and accuracy >= target
        ):
            self.time_to_target = record.seconds
        stop = False
        if loss is None:  # no validation: the final model is the one kept
            self.best_flat = self.flat
            if self.options.patience is not None:
                # Data too small for a validation row (docs/contracts.md, section 9, Tiny
                # data): early stopping watches the epoch's training loss, as scikit-learn's
                # does without a validation set. A refit has no patience and runs its epochs.
                self._stopping = self._stopping.observe(self.epoch, record.train_loss)
                stop = self._stopping.stop
        else:
            self._stopping = self._stopping.observe(self.epoch, loss)
            if self._stopping.improved:
                self.best_flat = self.flat.copy()
            stop = self.options.patience is not None and self._stopping.stop
        if stop or self.epoch + 1 == self.options.epochs:
            self._phase = _Phase.TEST if self.rows.test.size else _Phase.DONE
        else:
            self._begin_epoch(self.epoch + 1)

    # -- checkpoints -------------------------------------------------------------------------
    def snapshot(self) -> TrainingSnapshot:
        """The state between passes (after a commit, before the next pass's chunks), as
        copies: later passes never change a snapshot taken."""
        norm = self.normalisation
        history = np.array(
            [
                (
                    h.epoch,
                    h.train_loss,
                    math.nan if h.validation_loss is None else h.validation_loss,
                    math.nan if h.validation_accuracy is None else h.validation_accuracy,
                    h.seconds,
                )
                for h in self.history
            ],
            dtype=np.float64,
        ).reshape(len(self.history), 5)
        return TrainingSnapshot(
            phase=self._phase.value,
            epoch=self.epoch,
            step=self.step,
            committed=self.committed,
            rows_processed=self.rows_processed,
            epoch_loss=self._epoch_loss,
            elapsed=self._clock() - self._started,
            flat=self.flat.copy(),
            best_flat=self.best_flat.copy(),
            optimizer=self._opt.name,
            optimizer_t=self._opt.t,
            moment1=self._opt.m.copy(),
            moment2=self._opt.v.copy(),
            best_loss=self._stopping.best_loss,
            best_epoch=self._stopping.best_epoch,
            since_best=self._stopping.since_best,
            mean=None if norm is None else norm.mean.copy(),
            std=None if norm is None else norm.std.copy(),
            history=history,
            time_to_target=self.time_to_target,
            test=self.test,
        )

    def restore(self, snap: TrainingSnapshot) -> None:
        """Continue from `snap`, a snapshot of a training with these options and rows (a
        fresh `Training`, before its first pass). ValueError, naming what does not fit,
        for a snapshot that cannot be one of this training; nothing is changed then."""
        _check_snapshot(self, snap)
        self._phase = _Phase(snap.phase)
        self.epoch, self.step = snap.epoch, snap.step
        self.committed, self.rows_processed = snap.committed, snap.rows_processed
        self._epoch_loss = snap.epoch_loss
        self._started = self._clock() - snap.elapsed
        self.flat, self.best_flat = snap.flat.copy(), snap.best_flat.copy()
        name: OptimizerName = "adam" if snap.optimizer == "adam" else "sgd"
        self._opt = OptimizerState(name, snap.optimizer_t, snap.moment1.copy(), snap.moment2.copy())
        self._stopping = EarlyStopping(
            self._stopping.patience, snap.best_loss, snap.best_epoch, snap.since_best
        )
        if snap.mean is not None and snap.std is not None:
            self.normalisation = Normalisation(snap.mean.copy(), snap.std.copy())
            self._order = epoch_order(self.options.seed, self.epoch, self.rows.train)
        self.history = [_epoch_record(row) for row in snap.history]
        self.time_to_target = snap.time_to_target
        self.test = snap.test

    # -- what it leaves ----------------------------------------------------------------------
    def parameters(self, flat: Floats) -> list[Floats]:
        """`[W1, b1, ...]` of a flat parameter vector of this training, as copies."""
        return [p.copy() for p in unflatten(flat, self.sizes)]


def _epoch_record(row: Floats) -> EpochRecord:
    loss, accuracy = float(row[2]), float(row[3])
    return EpochRecord(
        int(row[0]),
        float(row[1]),
        None if math.isnan(loss) else loss,
        None if math.isnan(accuracy) else accuracy,
        float(row[4]),
    )


def _check_snapshot(training: Training, snap: TrainingSnapshot) -> None:
    """ValueError unless `snap` fits `training`: its phase, counts and every array's shape."""
    options = training.options
    n = training.flat.size
    moments = n if options.optimizer == "adam" else 0
    phases = {p.value for p in _Phase}
    problems = [
        (snap.phase not in phases, f"phase {snap.phase!r}"),
        (not 0 <= snap.epoch < options.epochs, f"epoch {snap.epoch} of {options.epochs}"),
        (not 0 <= snap.step <= training.steps_per_epoch, f"step {snap.step}"),
        (snap.committed < 0 or snap.rows_processed < 0, "negative counts"),
        (snap.optimizer != options.optimizer, f"optimizer {snap.optimizer!r}"),
        (snap.optimizer_t != snap.committed, f"{snap.optimizer_t} optimizer steps"),
        (snap.flat.shape != (n,) or snap.best_flat.shape != (n,), "parameter shapes"),
        (snap.moment1.shape != (moments,) or snap.moment2.shape != (moments,), "moments"),
        (snap.history.shape != (len(snap.history), 5), f"history shape {snap.history.shape}"),
        (len(snap.history) > snap.epoch + 1, f"{len(snap.history)} epochs of history"),
    ]
    width = training.sizes[0]
    if snap.mean is not None or snap.std is not None:
        shapes = [getattr(a, "shape", None) for a in (snap.mean, snap.std)]
        problems.append((shapes != [(width,), (width,)], "normalisation shapes"))
    for bad, what in problems:
        if bad:
            raise ValueError(f"the snapshot does not fit this training: {what}")


def _floats(data: bytes | memoryview) -> Floats:
    out: Floats = np.frombuffer(data, dtype="<f8")
    return out


def evaluation_sums(slots: Sequence[DenseStats]) -> tuple[float, int]:
    """Loss and correct sums of an evaluation pass, in chunk order."""
    loss_sum = 0.0
    correct = 0
    for s in slots:
        loss_sum += s.loss_sum
        correct += s.correct
    return loss_sum, correct
