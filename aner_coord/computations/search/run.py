"""The run of a model search: the pure state machine the job machine drives.

Two passes. The folds pass has one item per fit `(candidate, fold, replicate)`, in dispatch order
(longest first, `plan`); a task is a range of them and each fit runs whole on one worker
slot. When every fit is in (the barrier), the candidates are aggregated and one selected
(`aggregate`); with `refit`, the refit pass then trains the selected candidate on the whole
pool and tests it once. Results are checked against the fits they must be (identity, epoch
counts, a best epoch that is the first lowest validation loss, metrics in range), kept by
position, and only then accepted, so a fit computed twice, late or by a lost worker is
never counted twice; the ledger records each accepted task before it is acknowledged, and a
resumed run replays them. Nothing here depends on which worker computed what, or when:
the outcome is the same for any worker count, placement, completion order, loss or resume.

The worker a fit came from is the coordinator's knowledge, not the worker's claim: the job
machine hands each result over with the identity it arrived from (`received_from`), and
that is what `fits.csv` and the ledger keep. `progress` gives `status` the fits done, the
fits each worker holds, the best candidate so far and an ETA from measured fit times.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import msgspec
import numpy as np

from aner_coord.computations.base import Accounting, Diverged, PassSpec, StagePlan
from aner_coord.computations.dense import suspect
from aner_coord.computations.dense.model import DenseModel
from aner_coord.computations.dense.run import feature_names, features_named, stage_plan
from aner_coord.computations.search import aggregate, audit
from aner_coord.computations.search.files import completed_files, partial_files, warm_charts
from aner_coord.computations.search.plan import Prepared, plain
from aner_coord.computations.search.result import (
    CandidateRecord,
    FitRecord,
    RefitRecord,
    SearchResult,
)
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import ArrayDataset, TeacherDataset
from aner_worker.kernels.dense.network import parameter_count, unflatten
from aner_worker.kernels.dense.plan import Normalisation
from aner_worker.kernels.search.params import (
    REFIT,
    CandidateOptions,
    FitResult,
    SearchParams,
    SearchStats,
)

MODEL_ID = "aner-search/v1"
FOLDS, REFITTING, DONE = "folds", "refit", "done"


class SearchRun:
    durable_chunks: ClassVar[bool] = True

    def __init__(self, prepared: Prepared, chunk: int, *, test: bool = False) -> None:
        self.prepared = prepared
        self._chunk = chunk  # fits a task
        self._test = test  # each fit also tests once (`SearchParams.test`)
        dataset = prepared.dataset
        self._fits: list[FitResult | None] = [None] * len(prepared.fits)
        self._order = [(f.candidate, f.fold, f.replicate) for f in prepared.fits]
        self._position = {pair: i for i, pair in enumerate(self._order)}
        self.phase = FOLDS
        self._begun = ""  # the phase whose pass has been handed out
        self.summaries: list[aggregate.CandidateSummary] = []
        self.selected: int | None = None
        self.refit_epochs = 0
        self.refit: FitResult | None = None
        # Typed on the wire: each candidate's options, converted (and checked) once.
        self._candidates = [msgspec.convert(o, CandidateOptions) for o in prepared.options]
        self._stage_plan: StagePlan | None = None
        self._dataset = dataset
        if isinstance(dataset, TeacherDataset):
            self._data_name = dataset.identity
            self._teacher: tuple[int, ...] = (dataset.n_rows, dataset.n_features, dataset.n_classes)
        else:
            assert isinstance(dataset, ArrayDataset)
            self._data_name = dense_rows.blob_digest(dataset.x, dataset.y)
            self._teacher = ()
            dense_rows.share(self._data_name, dataset)  # local threads read it in place

    # -- passes ------------------------------------------------------------------------------
    def _params(self, order: list[tuple[int, int, int]], refit_epochs: int = 0) -> SearchParams:
        """A pass of the fits `order`; a refit's (`refit_epochs`) trains with the search's
        own seed, whatever the replicates' training seeds."""
        p = self.prepared
        replicated = bool(p.seeds) and not refit_epochs
        return SearchParams(
            self._data_name,
            self._teacher,
            p.request.seed,
            p.folds.codes.tobytes(),
            self._candidates,
            [(c, f) for c, f, _ in order],
            refit_epochs,
            seeds=list(p.seeds) if replicated else [],
            replicates=[r for _, _, r in order] if replicated else [],
            test=self._test,
        )

    def next_pass(self) -> PassSpec | None:
        if self.phase == self._begun or self.phase == DONE:
            return None
        self._begun = self.phase
        if self.phase == FOLDS:
            label = f"cross-validation: {len(self._order)} fits"
            return PassSpec(len(self._order), self._params(self._order), label)
        assert self.selected is not None
        label = f"refit of candidate {self.selected}: {self.refit_epochs} epoch(s) on the pool"
        params = self._params([(self.selected, REFIT, 0)], self.refit_epochs)
        return PassSpec(1, params, label)

    def _expected(self, position: int) -> tuple[int, int, int]:
        if self.phase == FOLDS:
            return self._order[position]
        assert self.selected is not None
        return self.selected, REFIT, 0

    def received_from(self, stats: Any, worker: str) -> Any:
        if not isinstance(stats, SearchStats):
            return stats  # `check` says what is wrong with it
        return SearchStats([msgspec.structs.replace(f, worker=worker) for f in stats.fits])

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, SearchStats):
            return f"expected search statistics, got {type(stats).__name__}"
        if len(stats.fits) != count:
            return f"{len(stats.fits)} fits reported for a range of {count}"
        for i, fit in enumerate(stats.fits):
            expected = self._expected(start + i)
            if (fit.candidate, fit.fold, fit.replicate) != expected:
                got = (fit.candidate, fit.fold, fit.replicate)
                return f"fit {got} reported where {expected} was asked for"
            problem = self._check_fit(fit)
            if problem is not None:
                return f"fit (candidate {fit.candidate}, fold {fit.fold}): {problem}"
        return None

    def _check_fit(self, fit: FitResult) -> str | None:
        epochs = self.prepared.options[fit.candidate]["epochs"]
        if fit.fold == REFIT:
            if fit.diverged:
                raise Diverged(f"the refit of candidate {fit.candidate}: {fit.diverged}")
            shapes = self._refit_shapes(fit.candidate)
            return _check_refit(fit, self.refit_epochs, shapes, self.prepared.folds.test_rows)
        return _check_validation(fit, epochs)

    def _refit_shapes(self, candidate: int) -> tuple[int, int]:
        sizes = self.prepared.sizes[candidate]
        return parameter_count(sizes), sizes[0]

    def accept(self, chunk: int, stats: SearchStats) -> None:
        if self.phase == REFITTING:
            self.refit = stats.fits[0]
            return
        start = chunk * self._chunk
        for i, fit in enumerate(stats.fits):
            self._fits[start + i] = fit

    def commit(self) -> None:
        if self.phase == REFITTING:
            self.phase = DONE
            return
        warm_charts()
        by_candidate = self.by_candidate()
        self.summaries = [aggregate.summarize(c, fits) for c, fits in enumerate(by_candidate)]
        self.selected = aggregate.select(self.summaries)
        if not self.prepared.request.refit:
            self.phase = DONE
            return
        if self.selected is None:
            raise Diverged(
                "every candidate has a fit that diverged, so none can be selected and refit: "
                "lower lr"
            )
        self.refit_epochs = aggregate.refit_epochs(
            [f.best_epoch for f in by_candidate[self.selected]]
        )
        self.phase = REFITTING

    def by_candidate(self) -> list[list[FitResult]]:
        """Every candidate's fits in fold order, and within a fold in seed order (all of them:
        after the folds' barrier)."""
        p = self.prepared
        out: list[list[FitResult]] = []
        for c in range(p.n_candidates):
            fits = [
                self._fits[self._position[(c, f, r)]]
                for f in p.folds.fitted
                for r in range(p.n_replicates)
            ]
            out.append([f for f in fits if f is not None])
        return out

    def same(self, a: SearchStats, b: SearchStats) -> bool:
        """Two computations of one task agree: every number but the seconds it took."""

        def numbers(stats: SearchStats) -> bytes:
            return msgspec.msgpack.encode(
                [msgspec.structs.replace(f, seconds=0.0, worker="") for f in stats.fits]
            )

        return numbers(a) == numbers(b)

    # -- audits across platforms (`ExplainsDifference`) ------------------------------------
    @property
    def tolerance(self) -> float:
        """`close`'s, by the fits' precision (one for every candidate)."""
        return audit.TOLERANCE[self.prepared.options[0].get("precision", "float64")]

    def close(self, worker: SearchStats, own: SearchStats) -> bool:
        return audit.close(worker, own, self.tolerance)

    def difference(self, worker: SearchStats, own: SearchStats) -> str:
        return audit.difference(worker, own)

    def deviation(self, worker: SearchStats, own: SearchStats) -> float:
        return audit.deviation(worker, own)

    @property
    def committed_steps(self) -> int | None:
        return None

    # -- progress ----------------------------------------------------------------------------
    def progress(self, outstanding: Mapping[str, Sequence[int]], slots: int) -> dict[str, Any]:
        """`status.json`'s detail: fits done of the total, what each worker holds (oldest
        first: a worker runs the first of them, one per slot), the best candidate so far
        (over its finished folds) and an ETA from the measured fit times."""
        done = [f for f in self._fits if f is not None]
        running = {
            worker: [self._label(position) for position in self._positions(chunks)]
            for worker, chunks in outstanding.items()
        }
        return {
            "phase": self.phase,
            "fits": len(self._fits),
            "done": len(done),
            "refit": self.prepared.request.refit,
            "refit_done": self.refit is not None,
            "running": running,
            "best": self._best_so_far(),
            "eta_s": self._eta(outstanding, slots),
        }

    def _positions(self, chunks: Sequence[int]) -> list[int]:
        if self.phase == REFITTING:
            return [0] if chunks else []
        total = len(self._order)
        out: list[int] = []
        for chunk in chunks:
            out.extend(range(chunk * self._chunk, min(total, (chunk + 1) * self._chunk)))
        return out

    def _label(self, position: int) -> str:
        if self.phase == REFITTING:
            return f"refit of candidate {self.selected}"
        c, f, r = self._order[position]
        seed = f" seed {self.prepared.seeds[r]}" if self.prepared.seeds else ""
        return f"candidate {c} fold {f}{seed}"

    def _best_so_far(self) -> dict[str, Any] | None:
        p = self.prepared
        best: tuple[float, int, list[FitResult]] | None = None
        for c, fits in enumerate(self.by_candidate()):
            if not fits:
                continue
            loss = aggregate.mean([f.validation_loss for f in fits])
            if math.isnan(loss):
                continue
            if best is None or loss < best[0]:
                best = (loss, c, fits)
        if best is None:
            return None
        loss, c, fits = best
        return {
            "candidate": c,
            "options": {k: plain(v) for k, v in p.candidates[c].items()},
            "folds_done": len(fits),
            "folds": len(p.folds.fitted) * p.n_replicates,
            "validation_loss": loss,
            "validation_accuracy": aggregate.mean([f.validation_accuracy for f in fits]),
        }

    def _eta(self, outstanding: Mapping[str, Sequence[int]], slots: int) -> float | None:
        """Seconds until the search ends, if the fits left take the seconds per unit of
        cost measured so far and go longest first onto the slots (a running fit counted
        whole)."""
        p = self.prepared
        finished = [(f, self._fits[i]) for i, f in enumerate(p.fits) if self._fits[i] is not None]
        cost = sum(f.cost for f, _ in finished)
        if not finished or cost <= 0 or slots < 1:
            return None
        rate = sum(r.seconds for _, r in finished if r is not None) / cost
        left = [f.cost * rate for i, f in enumerate(p.fits) if self._fits[i] is None]
        if p.request.refit and self.refit is None:
            left.append(self._refit_cost() * rate)
        return _makespan(sorted(left, reverse=True), slots)

    def _refit_cost(self) -> int:
        p = self.prepared
        c = self.selected
        if c is None:
            best = self._best_so_far()
            c = best["candidate"] if best is not None else 0
        epochs = self.refit_epochs or p.options[c]["epochs"]
        return epochs * sum(p.folds.rows) * parameter_count(p.sizes[c])

    # -- what the job leaves -----------------------------------------------------------------
    def staging(self) -> StagePlan | None:
        if self._stage_plan is None:
            self._stage_plan = stage_plan(self._data_name, self._dataset)
        return self._stage_plan

    @property
    def model(self) -> DenseModel | None:
        """The refit's model, once it is in."""
        fit = self.refit
        if fit is None or fit.diverged:
            return None
        assert self.selected is not None
        sizes = self.prepared.sizes[self.selected]
        flat = np.frombuffer(fit.params, dtype="<f8")
        params = [p.copy() for p in unflatten(flat, sizes)]
        norm = Normalisation(
            mean=np.frombuffer(fit.mean, dtype="<f8").copy(),
            std=np.frombuffer(fit.std, dtype="<f8").copy(),
        )
        return DenseModel(
            list(sizes),
            params,
            norm,
            self._dataset.classes,
            features=feature_names(self._dataset),
            named=features_named(self._dataset),
            precision=self.prepared.options[self.selected].get("precision", "float64"),
        )

    def files(self, state: JobState) -> dict[str, bytes]:
        """The tables, histories, chart and model of a completed search; of any other, the
        fits accepted so far (`fits.csv`, diagnostic only)."""
        fits = [f for group in self.by_candidate() for f in group]
        p = self.prepared
        if state is not JobState.COMPLETED:
            return partial_files(list(p.grid), p.candidates, fits, self.seed_of)
        result = self.result(Accounting(seconds=0.0, workers=(), execution={}))
        request = p.request
        return completed_files(
            result, fits, self.refit, self.model, request.label, self.seed_of, request.group
        )

    def result(self, accounting: Accounting) -> SearchResult:
        p = self.prepared
        folds = p.folds
        candidates = [_candidate_record(s, p.candidates[s.candidate]) for s in self.summaries]
        fits = [_fit_record(f, self.seed_of(f)) for fits in self.by_candidate() for f in fits]
        refit = None if self.refit is None else _refit_record(self.refit)
        fixed = {k: plain(v) for k, v in p.options[0].items() if k not in p.grid}
        notes = []
        if self.selected is not None:
            chosen = self.by_candidate()[self.selected]
            note = suspect.folds_still_improving(
                [f.best_epoch for f in chosen], [f.epochs for f in chosen]
            )
            notes = [] if note is None else [note]
        return SearchResult(
            model=MODEL_ID,
            data=self._dataset.identity,
            seed=p.request.seed,
            folds=folds.k,
            grouped=folds.grouped,
            rows_per_fold=list(folds.rows),
            test_rows=folds.test_rows,
            folds_sha256=folds.sha256,
            options=fixed,
            grid={k: [plain(v) for v in vs] for k, vs in p.grid.items()},
            chunk=p.request.chunk,
            candidates=candidates,
            fits=fits,
            selected=self.selected,
            refit=refit,
            test_loss=None if refit is None else refit.test_loss,
            test_accuracy=None if refit is None else refit.test_accuracy,
            staging=list(accounting.staging),
            losses=list(accounting.losses),
            seconds=accounting.seconds,
            execution=accounting.execution,
            workers=list(accounting.workers),
            notes=notes,
            seeds=list(p.seeds),
        )

    def seed_of(self, fit: FitResult) -> int:
        """The training seed `fit` was trained with."""
        seeds = self.prepared.seeds
        return seeds[fit.replicate] if seeds and fit.fold != REFIT else self.prepared.request.seed


def _makespan(durations: Sequence[float], slots: int) -> float:
    """The end of the last of `durations` (longest first) on `slots` free slots."""
    ends = [0.0] * slots
    for duration in durations:
        heapq.heapreplace(ends, ends[0] + duration)
    return max(ends)


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def _fit_record(fit: FitResult, seed: int) -> FitRecord:
    return FitRecord(
        candidate=fit.candidate,
        fold=fit.fold,
        epochs=fit.epochs,
        best_epoch=fit.best_epoch + 1,  # the user's count, from 1 (the worker's from 0)
        validation_loss=_finite(fit.validation_loss),
        validation_accuracy=_finite(fit.validation_accuracy),
        seconds=fit.seconds,
        worker=fit.worker,
        diverged=fit.diverged or None,
        seed=seed,
        replicate=fit.replicate,
    )


def _candidate_record(s: aggregate.CandidateSummary, options: dict[str, Any]) -> CandidateRecord:
    return CandidateRecord(
        candidate=s.candidate,
        options={k: plain(v) for k, v in options.items()},
        n=s.n,
        validation_loss_mean=_finite(s.validation_loss_mean),
        validation_loss_std=_finite(s.validation_loss_std),
        validation_accuracy_mean=_finite(s.validation_accuracy_mean),
        validation_accuracy_std=_finite(s.validation_accuracy_std),
        best_epoch_mean=s.best_epoch_mean + 1.0,  # counted from 1, as the result counts
        diverged=s.diverged,
        validation_loss_standard_error=_finite(s.validation_loss_standard_error),
        validation_accuracy_standard_error=_finite(s.validation_accuracy_standard_error),
    )


def _refit_record(fit: FitResult) -> RefitRecord:
    return RefitRecord(
        candidate=fit.candidate,
        epochs=fit.epochs,
        test_loss=None if math.isnan(fit.test_loss) else fit.test_loss,
        test_accuracy=None if math.isnan(fit.test_accuracy) else fit.test_accuracy,
        seconds=fit.seconds,
        worker=fit.worker,
        train_loss=list(fit.train_loss),
    )


def _check_validation(fit: FitResult, epochs: int) -> str | None:
    """A fold's fit: its history, best epoch and metrics agree with each other."""
    if not 0 <= fit.epochs <= epochs or len(fit.train_loss) != fit.epochs:
        return f"{fit.epochs} epochs with {len(fit.train_loss)} losses; at most {epochs} asked"
    if fit.diverged:
        if not (math.isnan(fit.validation_loss) and math.isnan(fit.validation_accuracy)):
            return "a diverged fit with metrics"
        return None
    if not all(math.isfinite(v) for v in fit.train_loss):
        return "a training loss that is not finite in a fit that did not diverge"
    losses, accuracies = fit.validation_losses, fit.validation_accuracies
    if fit.epochs < 1 or len(losses) != fit.epochs or len(accuracies) != fit.epochs:
        return f"{len(losses)} validation losses for {fit.epochs} epochs"
    if not all(math.isfinite(v) and v >= 0 for v in losses):
        return "a validation loss that is negative or not finite"
    if not all(0 <= a <= 1 for a in accuracies):
        return "a validation accuracy outside [0, 1]"
    first_lowest = min(range(len(losses)), key=lambda e: (losses[e], e))
    if fit.best_epoch != first_lowest:
        return f"best epoch {fit.best_epoch}, but the lowest validation loss is at {first_lowest}"
    if (fit.validation_loss, fit.validation_accuracy) != (
        losses[first_lowest],
        accuracies[first_lowest],
    ):
        return "best metrics that are not those of the best epoch"
    return None


def _check_refit(
    fit: FitResult, epochs: int, shapes: tuple[int, int], test_rows: int
) -> str | None:
    n_params, n_features = shapes
    if fit.epochs != epochs or len(fit.train_loss) != epochs or fit.best_epoch != epochs - 1:
        return f"{fit.epochs} epochs (best {fit.best_epoch}) where {epochs} were asked for"
    if len(fit.params) != 8 * n_params:
        return f"{len(fit.params) // 8} parameters, expected {n_params}"
    if len(fit.mean) != 8 * n_features or len(fit.std) != 8 * n_features:
        return f"a normalisation of the wrong length (expected {n_features} features)"
    for name in ("params", "mean", "std"):
        if not np.isfinite(np.frombuffer(getattr(fit, name), dtype="<f8")).all():
            return f"non-finite {'parameters' if name == 'params' else 'normalisation ' + name}"
    if not all(math.isfinite(v) for v in fit.train_loss):
        return "a training loss that is not finite"
    if not test_rows:  # no held-out test: no test metrics
        if not (math.isnan(fit.test_loss) and math.isnan(fit.test_accuracy)):
            return f"test loss {fit.test_loss} and accuracy {fit.test_accuracy} without test rows"
        return None
    if not (math.isfinite(fit.test_loss) and fit.test_loss >= 0 and 0 <= fit.test_accuracy <= 1):
        return f"test loss {fit.test_loss} and accuracy {fit.test_accuracy}"
    return None
