"""A search's fits and its run, without workers: the "search" kernel's fits against the
single-process Dense training, and the run the job machine drives (checks, selection, the
refit, progress, files), also through the pure job machine itself."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import msgspec
import numpy as np
import pytest

from aner_coord.computations.base import Accounting, Diverged
from aner_coord.computations.dense.single import evaluate_rows, fit_normalisation, train_single
from aner_coord.computations.search.computation import Search, prepare
from aner_coord.computations.search.folds import split
from aner_coord.computations.search.request import SearchRequest
from aner_coord.computations.search.run import SearchRun
from aner_coord.job.events import ResultReceived, WorkerReady
from aner_coord.job.instructions import BeginPass, RecordAccepted, SendTask, WriteStatus
from aner_coord.job.machine import JobMachine
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.base import Stopped
from aner_worker.kernels.dense.data import TeacherDataset
from aner_worker.kernels.dense.network import unflatten
from aner_worker.kernels.dense.streams import role_codes
from aner_worker.kernels.search.kernel import SearchKernel
from aner_worker.kernels.search.params import REFIT, CandidateOptions, SearchParams, SearchStats

ROWS, FEATURES, CLASSES, SEED = 600, 6, 3, 4
KERNEL = SearchKernel()
OPTIONS = {"hidden": [8], "batch": 64, "epochs": 4, "optimizer": "adam", "lr": 0.01,
           "patience": 2, "target_accuracy": None, "chunk": 32}  # fmt: skip
TEACHER = TeacherDataset(ROWS, FEATURES, CLASSES, SEED)


def params(codes: np.ndarray, fits: list[tuple[int, int]], **kwargs: Any) -> SearchParams:
    return SearchParams(
        TEACHER.identity, (ROWS, FEATURES, CLASSES), SEED, codes.tobytes(),
        [msgspec.convert(dict(OPTIONS, **kwargs), CandidateOptions)], fits, 3,
    )  # fmt: skip


def test_a_fit_on_section_9s_split_is_section_9s_training() -> None:
    codes = split(role_codes(SEED, ROWS, 0.15, 0.15))
    [fit] = KERNEL.run(params(codes, [(0, 0)]), 0, 1, None).fits
    single = train_single(TEACHER, seed=SEED, hidden=(8,), batch=64, epochs=4, lr=0.01,
                          patience=2, chunk=32)  # fmt: skip
    assert fit.epochs == len(single.history)
    assert fit.best_epoch == single.best_epoch
    assert fit.validation_losses == [h.validation_loss for h in single.history]  # bit for bit
    assert fit.train_loss == [h.train_loss for h in single.history]
    assert fit.validation_loss == single.history[single.best_epoch].validation_loss
    assert fit.validation_accuracy == single.history[single.best_epoch].validation_accuracy
    assert fit.diverged == "" and fit.worker == "" and fit.params == b""


def test_a_refit_trains_on_the_pool_and_tests_once() -> None:
    codes = split(role_codes(SEED, ROWS, 0.15, 0.15))
    [fit] = KERNEL.run(params(codes, [(0, REFIT)]), 0, 1, None).fits
    assert fit.epochs == 3 and fit.best_epoch == 2 and fit.validation_losses == []
    assert math.isnan(fit.validation_loss)
    pool = np.flatnonzero(codes != 255).astype(np.int64)
    test = np.flatnonzero(codes == 255).astype(np.int64)
    norm = fit_normalisation(TEACHER, pool, 32)
    assert np.frombuffer(fit.mean).tolist() == norm.mean.tolist()
    assert np.frombuffer(fit.std).tolist() == norm.std.tolist()
    flat = np.frombuffer(fit.params)
    assert flat.size == (FEATURES + 1) * 8 + (8 + 1) * CLASSES
    parts = unflatten(flat, [FEATURES, 8, CLASSES])
    # The test metrics are those of the final model on the test rows, bit for bit.
    assert (fit.test_loss, fit.test_accuracy) == evaluate_rows(TEACHER, parts, norm, test, 32)


def test_a_fit_is_the_same_whenever_it_runs_and_stops_when_asked() -> None:
    codes = split(role_codes(SEED, ROWS, 0.15, 0.15))
    a = KERNEL.run(params(codes, [(0, 0)]), 0, 1, None)
    b = KERNEL.run(params(codes, [(0, 0)]), 0, 1, lambda: False)
    assert msgspec.structs.replace(a.fits[0], seconds=0) == msgspec.structs.replace(
        b.fits[0], seconds=0
    )
    calls = iter(range(1000))
    with pytest.raises(Stopped):  # asked to stop after a few chunks: within the fit
        KERNEL.run(params(codes, [(0, 0)]), 0, 1, lambda: next(calls) > 5)


def test_a_diverging_fit_is_a_result_with_no_metrics() -> None:
    codes = split(role_codes(SEED, ROWS, 0.15, 0.15))
    [fit] = KERNEL.run(params(codes, [(0, 0)], lr=1e12, optimizer="sgd"), 0, 1, None).fits
    assert "lower --lr" in fit.diverged
    assert math.isnan(fit.validation_loss) and math.isnan(fit.validation_accuracy)


# -- the run -------------------------------------------------------------------------------

REQUEST = SearchRequest(
    seed=SEED, teacher=(ROWS, FEATURES, CLASSES), hidden=(8,), batch=64, epochs=4,
    patience=2, chunk=32, folds=3, grid={"lr": [0.001, 0.01]},
)  # fmt: skip


def drive(run: SearchRun) -> None:
    """Every pass of `run` computed here, one fit a task, last fit first."""
    while (spec := run.next_pass()) is not None:
        for item in reversed(range(spec.items)):
            stats = run.received_from(KERNEL.run(spec.params, item, 1, None), f"w{item % 2}")
            assert run.check(item, item, 1, stats) is None
            run.accept(item, stats)
        run.commit()


def test_the_run_selects_by_mean_validation_loss_and_refits() -> None:
    run = Search().start(REQUEST, 1)
    drive(run)
    assert len(run.summaries) == 2
    losses = [s.validation_loss_mean for s in run.summaries]
    assert run.selected == int(np.argmin(losses))
    best_epochs = [f.best_epoch for f in run.by_candidate()[run.selected]]
    assert run.refit_epochs == max(1, math.floor(sum(e + 1 for e in best_epochs) / 3 + 0.5))
    assert run.refit is not None and run.refit.epochs == run.refit_epochs
    result = run.result(Accounting(seconds=1.0, workers=(), execution={}))
    assert result.selected == run.selected and result.test_loss == run.refit.test_loss
    assert [(f.candidate, f.fold) for f in result.fits] == [
        (c, f) for c in (0, 1) for f in (0, 1, 2)
    ]
    assert {f.worker for f in result.fits} == {"w0", "w1"}
    files = run.files(JobState.COMPLETED)
    assert {"fits.csv", "candidates.csv", "histories.csv", "model.npz"} <= set(files)
    rows = list(csv.DictReader(io.StringIO(files["candidates.csv"].decode())))
    assert [r["selected"] for r in rows] == ["1" if c == run.selected else "0" for c in (0, 1)]
    assert float(rows[0]["validation_loss_mean"]) == losses[0]
    model = run.model
    assert model is not None and model.predict(np.zeros((2, FEATURES))).shape == (2,)


def test_fits_are_checked_against_what_was_asked() -> None:
    run = Search().start(REQUEST, 1)
    spec = run.next_pass()
    assert spec is not None and spec.items == 6
    good: SearchStats = KERNEL.run(spec.params, 0, 1, None)
    fit = good.fits[0]
    assert run.check(0, 0, 2, good) == "1 fits reported for a range of 2"
    assert "was asked for" in (run.check(1, 1, 1, good) or "")  # another item's fit
    assert "expected search statistics" in (run.check(0, 0, 1, object()) or "")

    def bad(**change: Any) -> str | None:
        return run.check(0, 0, 1, SearchStats([msgspec.structs.replace(fit, **change)]))

    assert "best epoch" in (bad(best_epoch=(fit.best_epoch + 1) % fit.epochs) or "")
    assert "not those of the best epoch" in (bad(validation_accuracy=0.123456) or "")
    assert "outside [0, 1]" in (bad(validation_accuracies=[2.0] * fit.epochs) or "")
    assert "epochs" in (bad(epochs=99) or "")
    assert "a diverged fit with metrics" in (bad(diverged="boom") or "")


def test_a_diverged_refit_fails_the_search_and_so_does_every_candidate_diverging() -> None:
    run = Search().start(REQUEST, 1)
    drive_folds = run.next_pass()
    assert drive_folds is not None
    for item in range(drive_folds.items):
        stats = KERNEL.run(drive_folds.params, item, 1, None)
        fit = msgspec.structs.replace(stats.fits[0], diverged="loss inf", validation_loss=math.nan,
                                      validation_accuracy=math.nan)  # fmt: skip
        run.accept(item, SearchStats([fit]))
    with pytest.raises(Diverged, match="every candidate has a fit that diverged"):
        run.commit()
    other = Search().start(REQUEST, 1)
    drive_one = other.next_pass()
    assert drive_one is not None
    for item in range(drive_one.items):
        other.accept(item, KERNEL.run(drive_one.params, item, 1, None))
    other.commit()
    refit = other.next_pass()
    assert refit is not None and refit.items == 1
    [fit] = KERNEL.run(refit.params, 0, 1, None).fits
    with pytest.raises(Diverged, match="the refit of candidate"):
        other.check(0, 0, 1, SearchStats([msgspec.structs.replace(fit, diverged="nan loss")]))


def test_the_same_result_twice_agrees_but_its_seconds() -> None:
    run = Search().start(REQUEST, 1)
    spec = run.next_pass()
    assert spec is not None
    a, b = (KERNEL.run(spec.params, 0, 1, None) for _ in range(2))
    assert run.same(run.received_from(a, "w1"), b)
    other = msgspec.structs.replace(b.fits[0], best_epoch=b.fits[0].best_epoch + 1)
    assert not run.same(a, SearchStats([other]))


def test_progress_names_what_each_worker_holds_and_the_best_so_far() -> None:
    run = Search().start(REQUEST, 1)
    spec = run.next_pass()
    assert spec is not None
    assert run.progress({}, 2)["eta_s"] is None  # nothing measured yet
    first = run.received_from(KERNEL.run(spec.params, 0, 1, None), "w1")
    run.accept(0, first)
    detail = run.progress({"w1": [1, 3], "w2": [2]}, 2)
    order = run.prepared.fits
    label = f"candidate {order[1].candidate} fold {order[1].fold}"
    assert detail["running"]["w1"][0] == label and len(detail["running"]["w1"]) == 2
    assert detail["done"] == 1 and detail["fits"] == 6 and detail["phase"] == "folds"
    fit = first.fits[0]
    assert detail["best"]["candidate"] == fit.candidate
    assert detail["best"]["validation_loss"] == fit.validation_loss
    assert detail["best"]["folds_done"] == 1 and detail["best"]["folds"] == 3
    assert detail["eta_s"] is not None and detail["eta_s"] > 0


def test_the_job_machine_ledgers_each_fit_with_the_worker_it_came_from() -> None:
    run = Search().start(REQUEST, 1)
    machine = JobMachine(run, {"a": 1, "b": 1}, chunk=1, passes=1)
    out = machine.start()
    assert isinstance(out[0], BeginPass)
    pending = [*machine.handle(WorkerReady("a", 2)), *machine.handle(WorkerReady("b", 2))]
    params: dict[int, Any] = {0: out[0].params}
    accepted: dict[int, list[tuple[int, str]]] = {}
    details = []
    while pending:
        instruction = pending.pop(0)
        if isinstance(instruction, BeginPass):
            params[instruction.pass_id] = instruction.params
        elif isinstance(instruction, RecordAccepted):
            accepted.setdefault(instruction.pass_id, []).append(
                (instruction.chunk, instruction.stats.fits[0].worker)
            )
        elif isinstance(instruction, WriteStatus) and instruction.progress.detail:
            details.append(instruction.progress.detail)
        elif isinstance(instruction, SendTask):
            task = instruction.task
            stats = KERNEL.run(params[task.pass_id], task.start, task.count, None)
            pending += machine.handle(ResultReceived(instruction.worker, task.task_id, stats))
    assert machine.state is JobState.COMPLETED
    assert sorted(c for c, _ in accepted[0]) == list(range(6))  # each fit once
    assert {w for _, w in accepted[0]} == {"a", "b"} and len(accepted[1]) == 1
    assert any(d["running"] for d in details) and details[-1]["refit_done"]
    assert run.refit is not None and run.refit.worker in ("a", "b")


def test_admission_counts_every_fit_and_the_refit() -> None:
    admitted = Search().admit(REQUEST)
    assert admitted.items == 7 and admitted.passes == 1
    assert admitted.describe["fits"] == 6 and admitted.describe["candidates"] == 2
    assert admitted.describe["rows_per_fold"] == prepare(REQUEST).folds.rows


def test_a_candidate_travels_as_a_typed_struct_of_the_training_options() -> None:
    # Typed on the wire (issue 26, item 6): every option of a training but its seed, no more.
    import dataclasses

    from aner_worker.kernels.dense.training import TrainingOptions

    fields = [f.name for f in dataclasses.fields(TrainingOptions) if f.name != "seed"]
    assert list(CandidateOptions.__struct_fields__) == fields
    sent = msgspec.msgpack.encode(msgspec.convert(dict(OPTIONS), CandidateOptions))
    assert msgspec.msgpack.decode(sent, type=CandidateOptions).hidden == (8,)
