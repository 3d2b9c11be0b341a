"""Model search and cross-validation end to end (docs/contracts.md, section 12), as a
researcher runs them: `aner parallel search` and `cv` on local threads, a local-pipe group
and a real-sshd group (the same numbers, bit for bit); a worker killed mid-search with
--retries 1 and a coordinator killed mid-search then resumed (the same outcome, every fit
accepted once in the ledger); test rows that cannot change the selection; grouped and
stratified folds against the independent reference; the sample search file; the API."""

from __future__ import annotations

import asyncio
import csv
import json
import math
import os
import signal
import statistics
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import numpy as np
import psutil
import pytest
import search_reference as ref
from support import (
    ANER,
    SAMPLES,
    Coordinators,
    gated_pair,
    process_gone,
    result_of,
    run_aner,
    status_of,
    wait_for,
    wait_status,
    write_cluster,
    write_pipe_pair,
)

from aner_coord import parallel
from aner_coord.computations.dense.model import load_model
from aner_coord.computations.replicates import replicate_seeds
from aner_coord.errors import RequestError
from aner_coord.jobdir.ledger import Accepted, scan
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.dense.data import TeacherDataset

ROWS, FEATURES, CLASSES, SEED = 900, 8, 3, 5
SMALL = """\
data = "rows.csv"
seed = 5
folds = 3
hidden = [8]
batch = 64
epochs = 3
patience = 3
chunk = 32
[grid]
lr = [0.003, 0.01]
"""
# Twelve fits and a refit on two workers, one of them gated (`gated_pair`): the search is
# mid-way, whatever the machine's speed, until the test lets that worker compute.
LONG = """\
teacher = [6000, 16, 4]
seed = 7
folds = 4
hidden = [32]
batch = 64
epochs = 10
patience = 10
chunk = 64
[grid]
lr = [0.001, 0.003, 0.01]
"""
METRICS = ["candidate", "lr", "fold", "epochs", "best_epoch", "validation_loss",
           "validation_accuracy"]  # fmt: skip


def write_rows(path: Path, x: np.ndarray, y: np.ndarray, groups: list[str] | None = None) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        extra = ["site"] if groups is not None else []
        writer.writerow([f"f{j}" for j in range(x.shape[1])] + extra + ["label"])
        for r, (row, label) in enumerate(zip(x, y, strict=True)):
            site = [groups[r]] if groups is not None else []
            writer.writerow([repr(float(v)) for v in row] + site + [f"class-{int(label)}"])
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A search file over a small CSV: 2 candidates x 3 folds."""
    directory = tmp_path_factory.mktemp("search")
    x, y = TeacherDataset(ROWS, FEATURES, CLASSES, SEED).rows(np.arange(ROWS))
    write_rows(directory / "rows.csv", x, y)
    spec = directory / "search.toml"
    spec.write_text(SMALL)
    return spec


@pytest.fixture(scope="module")
def long_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = tmp_path_factory.mktemp("long") / "long.toml"
    spec.write_text(LONG)
    return spec


@pytest.fixture(scope="module")
def long_reference(long_spec: Path) -> list[dict[str, Any]]:
    """The undisturbed outcome of the long search, on two local threads."""
    fit = parallel.search(spec=long_spec, execution=parallel.local(2))
    return outcome(fit.result.to_dict())


def search(tmp_path: Path, spec: Path, *args: str, env: dict[str, str] | None = None) -> Path:
    job = tmp_path / f"job-{len(list(tmp_path.iterdir()))}"
    done = run_aner("parallel", "search", "--spec", str(spec), "--output", str(job), *args,
                    timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return job


def metrics(job: Path) -> list[list[str]]:
    """fits.csv without the seconds and the worker of each fit."""
    with (job / "fits.csv").open() as f:
        return [[row[name] for name in METRICS] for row in csv.DictReader(f)]


def outcome(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Everything of a result that the workers, their losses and resumes may not change."""
    fits = [{k: v for k, v in f.items() if k not in ("seconds", "worker")} for f in result["fits"]]
    refit = {k: v for k, v in result["refit"].items() if k not in ("seconds", "worker")}
    return [*fits, *result["candidates"], {"selected": result["selected"], "refit": refit}]


def accepted_chunks(job: Path) -> dict[int, list[int]]:
    entries, _ = scan((job / "ledger").read_bytes())
    chunks: dict[int, list[int]] = {}
    for entry in entries:
        record = entry.record
        if isinstance(record, Accepted):
            chunks.setdefault(record.pass_id, []).append(record.chunk)
    return chunks


# --------------------------------------------------------------------------- exactness


@pytest.fixture(scope="module")
def on_one_worker(small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return search(tmp_path_factory.mktemp("one"), small, "--workers", "1")


WHERE = {  # the command line of each placement, and the workers it names
    "two local worker processes": (("--workers", "2"), {"local-1", "local-2"}),
    "two local threads": (("--workers", "2", "--backend", "threads"), {"local-1", "local-2"}),
    "a pipe pair": ((), {"w1", "w2"}),
}


@pytest.mark.parametrize("where", list(WHERE))
def test_a_search_is_bitwise_the_same_on_any_workers(
    small: Path, on_one_worker: Path, tmp_path: Path, where: str
) -> None:
    args, names = WHERE[where]
    if where == "a pipe pair":
        args = ("--cluster", str(write_pipe_pair(tmp_path / "c")))
    job = search(tmp_path, small, *args)
    assert metrics(job) == metrics(on_one_worker)
    assert len(metrics(job)) == 6 and {row[0] for row in metrics(job)} == {"0", "1"}
    assert (job / "candidates.csv").read_bytes() == (on_one_worker / "candidates.csv").read_bytes()
    assert (job / "model.npz").read_bytes() == (on_one_worker / "model.npz").read_bytes()
    assert (job / "histories.csv").read_bytes() == (on_one_worker / "histories.csv").read_bytes()
    result = result_of(job)
    assert outcome(result) == outcome(result_of(on_one_worker))
    assert {f["worker"] for f in result["fits"]} <= names
    # Worker processes, local or not, are sent the rows; threads read them here.
    assert not result["staging"] if where == "two local threads" else result["staging"]


def test_local_search_fits_run_on_worker_processes_and_say_why(
    small: Path, on_one_worker: Path, tmp_path: Path
) -> None:
    job = search(tmp_path, small, "--workers", "2")
    why = "local: 2 worker processes (search fits hold the GIL)"
    assert status_of(job).plan == why
    execution = json.loads((job / "run-manifest.json").read_text())["plan"]
    assert (execution["kind"], execution["backend"]) == ("local", "processes")
    assert execution["why"] == "search fits hold the GIL"
    shown = run_aner("parallel", "status", "--job", str(job))
    assert f"plan      {why}" in shown.stdout.splitlines(), shown.stdout
    # One worker stays a thread: nothing shares its GIL.
    assert status_of(on_one_worker).plan == "local: 1 thread (one worker: nothing shares its GIL)"


@pytest.mark.ssh
def test_a_search_on_an_ssh_group_is_bitwise_the_same(
    small: Path, on_one_worker: Path, tmp_path: Path, sshd: Any
) -> None:
    cluster = write_cluster(
        tmp_path / "c", [("s1", "ssh", sshd.alias, ANER, 1), ("s2", "ssh", sshd.alias, ANER, 1)]
    )
    job = search(tmp_path, small, "--cluster", str(cluster), env=sshd.env)
    assert metrics(job) == metrics(on_one_worker)
    assert (job / "model.npz").read_bytes() == (on_one_worker / "model.npz").read_bytes()
    assert {f["worker"] for f in result_of(job)["fits"]} <= {"s1", "s2"}


def test_the_job_directory_holds_the_tables_the_model_and_the_chart(on_one_worker: Path) -> None:
    job = on_one_worker
    result = result_of(job)
    with (job / "candidates.csv").open() as f:
        candidates = list(csv.DictReader(f))
    assert [c["lr"] for c in candidates] == ["0.003", "0.01"]
    selected = result["selected"]
    assert [c["selected"] for c in candidates] == ["1" if i == selected else "0" for i in (0, 1)]
    losses = [float(c["validation_loss_mean"]) for c in candidates]
    assert selected == losses.index(min(losses))
    with (job / "fits.csv").open() as f:
        fits = [row for row in csv.DictReader(f) if row["candidate"] == str(selected)]
    mean = 0.0
    for row in fits:
        mean += float(row["validation_loss"])
    assert mean / 3 == losses[selected]  # summed in fold order, bit for bit
    best = [int(row["best_epoch"]) for row in fits]
    assert result["refit"]["epochs"] == max(1, (2 * sum(best) + 3) // 6)
    _model, meta = load_model(job / "model.npz")
    assert meta["search"]["candidate"] == selected and meta["complete"]
    assert (job / "candidates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = json.loads((job / "run-manifest.json").read_text())
    assert result["folds_sha256"] in json.dumps(manifest)  # the fold bytes, recorded


# --------------------------------------------------------------------------- durability


def workers_of(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in children if "worker" in " ".join(p.cmdline())]


def background(job: Path, spec: Path, *args: str) -> int:
    done = run_aner("parallel", "search", "--spec", str(spec), "--output", str(job),
                    "--background", *args)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return status_of(job).pid


def fits_done(job: Path, at_least: int) -> Any:
    """A snapshot of the running search with `at_least` fits done and "w2" (gated, see
    `gated_pair`) holding one: the search cannot end meanwhile, however fast the fits."""
    return wait_status(
        job,
        lambda s: (
            s.state is JobState.RUNNING
            and s.detail is not None
            and s.detail["done"] >= at_least
            and bool(s.detail["running"].get("w2"))
        ),
        240,
        f"{at_least} fits done and w2 holding a fit",
    )


def gated_worker(coordinator: int) -> psutil.Process:
    """The gated worker "w2" of `coordinator`: the one started through its grant wrapper."""
    return next(p for p in workers_of(coordinator) if "--max-slots" in p.cmdline())


def test_a_worker_killed_mid_search_is_survived_with_the_same_outcome(
    long_spec: Path, long_reference: list[dict[str, Any]], tmp_path: Path,
    coordinators: Coordinators,
) -> None:  # fmt: skip
    with gated_pair(tmp_path / "c") as (cluster, gate):
        job = tmp_path / "job"
        pid = coordinators.add(
            background(job, long_spec, "--cluster", str(cluster), "--retries", "1")
        )
        seen = fits_done(job, 2)
        gated_worker(pid).kill()  # holding a fit it never began
        # Opened at once: with --retries the coordinator starts w2 again, and the new one
        # must compute what it is given.
        gate.open()
        final = wait_status(job, lambda s: s.state.terminal, 240, "the search to end")
    assert final.state is JobState.COMPLETED, final.error
    assert seen.detail is not None and seen.detail["done"] < 12
    result = result_of(job)
    assert outcome(result) == long_reference
    assert [loss["identity"] for loss in result["losses"]] == ["w2"]
    chunks = accepted_chunks(job)
    assert sorted(chunks[0]) == list(range(12)) and chunks[1] == [0]  # each fit once


def test_a_coordinator_killed_mid_search_resumes_to_the_same_outcome(
    long_spec: Path, long_reference: list[dict[str, Any]], tmp_path: Path,
    coordinators: Coordinators,
) -> None:  # fmt: skip
    with gated_pair(tmp_path / "c") as (cluster, _gate):
        job = tmp_path / "job"
        pid = coordinators.add(background(job, long_spec, "--cluster", str(cluster)))
        seen = fits_done(job, 3)
        # The ETA is the search's own, from the fits' measured seconds, counting down since.
        assert seen.detail is not None and seen.detail["eta_s"] is not None
        assert seen.eta_s is not None and seen.eta_s <= seen.detail["eta_s"]
        shown = run_aner("parallel", "status", "--job", str(job))
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: process_gone(pid), 30, "the coordinator to die")
    # What status showed of the running search: fits done, who holds which, the best so far.
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("fits      ") and "of 13 done" in line for line in lines)
    assert any(line.startswith("running   w2") and "candidate" in line for line in lines)
    assert any(line.startswith("best      candidate") for line in lines), shown.stdout
    assert any(line.startswith("eta       0:") for line in lines), shown.stdout
    before = accepted_chunks(job).get(0, [])
    assert 3 <= len(before) < 12
    resumed = run_aner("parallel", "resume", "--job", str(job), timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    result = result_of(job)
    assert outcome(result) == long_reference
    chunks = accepted_chunks(job)
    assert sorted(chunks[0]) == list(range(12)) and chunks[1] == [0]  # each fit once
    final = status_of(job)
    assert final.resumes == 1 and final.recovered == len(before)


# Fits of seconds each, so that both local worker processes are mid-fit when the test acts.
SLOW_FITS = """\
teacher = [20000, 16, 4]
seed = 7
folds = 4
hidden = [64]
batch = 64
epochs = 60
patience = 60
chunk = 64
refit = false
[grid]
lr = [0.001, 0.003]
"""


def both_fitting(job: Path) -> Any:
    return wait_status(
        job,
        lambda s: (
            s.state is JobState.RUNNING
            and s.detail is not None
            and all(s.detail["running"].get(w) for w in ("local-1", "local-2"))
        ),
        240,
        "both local worker processes holding a fit",
    )


def test_a_killed_coordinator_leaves_no_local_worker_process_behind(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    spec = tmp_path / "slow.toml"
    spec.write_text(SLOW_FITS)
    job = tmp_path / "job"
    pid = coordinators.add(background(job, spec, "--workers", "2"))
    both_fitting(job)
    workers = workers_of(pid)
    assert len(workers) == 2, workers
    os.kill(pid, signal.SIGKILL)
    # Their stdin ends with the coordinator: each stops at its fit's next chunk and exits.
    _gone, alive = psutil.wait_procs(workers, timeout=120)
    assert alive == []


@pytest.mark.slow
def test_a_local_worker_process_killed_mid_search_is_survived_and_cancel_stops_the_rest(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    spec = tmp_path / "slow.toml"
    spec.write_text(SLOW_FITS)
    job = tmp_path / "job"
    pid = coordinators.add(background(job, spec, "--workers", "2", "--retries", "1"))
    both_fitting(job)
    workers_of(pid)[0].kill()
    # The lost worker's fit goes to the other, and the coordinator starts a new one.
    seen = wait_status(job, lambda s: len(s.losses) == 1 and len(workers_of(pid)) == 2, 240,
                       "the loss counted and a new local worker process started")  # fmt: skip
    assert seen.state is JobState.RUNNING and seen.losses[0].identity in {"local-1", "local-2"}
    workers = workers_of(pid)
    cancelled = run_aner("parallel", "cancel", "--job", str(job))
    assert cancelled.returncode == 4 and "CANCELLED" in cancelled.stdout, cancelled.stderr
    assert status_of(job).state is JobState.CANCELLED
    assert psutil.wait_procs(workers, timeout=120)[1] == []


# --------------------------------------------------------------------------- test rows


def test_test_rows_never_change_the_selection(tmp_path: Path) -> None:
    x, y = TeacherDataset(ROWS, FEATURES, CLASSES, SEED).rows(np.arange(ROWS))
    test = np.flatnonzero(~ref.pool_mask(SEED, ROWS))
    shuffled = y.copy()
    shuffled[test] = np.random.default_rng(1).permutation(y[test])
    assert np.sum(shuffled != y) > 10
    options: dict[str, Any] = dict(
        seed=SEED, folds=3, hidden=(8,), batch=64, epochs=3, patience=3, chunk=32,
        grid={"lr": [0.003, 0.01]}, execution=parallel.local(2),
    )  # fmt: skip
    a = parallel.search(data=write_rows(tmp_path / "a.csv", x, y), **options)
    b = parallel.search(data=write_rows(tmp_path / "b.csv", x, shuffled), **options)
    assert a.data != b.data
    strip = ("seconds", "worker")
    assert [{k: v for k, v in r.items() if k not in strip} for r in a.records()] == [
        {k: v for k, v in r.items() if k not in strip} for r in b.records()
    ]
    assert a.candidate_records() == b.candidate_records() and a.selected == b.selected
    assert a.folds_sha256 == b.folds_sha256 and a.refit.epochs == b.refit.epochs
    assert a.refit.train_loss == b.refit.train_loss  # the refit never saw a test row
    assert a.model is not None and b.model is not None
    for p, q in zip(a.model.params, b.model.params, strict=True):
        assert np.array_equal(p, q)
    assert (a.test_accuracy, a.test_loss) != (b.test_accuracy, b.test_loss)


# --------------------------------------------------------------------------- cv


def test_cv_with_a_group_column_puts_every_group_in_one_fold(tmp_path: Path) -> None:
    x, y = TeacherDataset(ROWS, FEATURES, CLASSES, SEED).rows(np.arange(ROWS))
    sites = [f"site {(r * 7) % 11}" for r in range(ROWS)]
    data = write_rows(tmp_path / "sites.csv", x, y, sites)
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "cv", "--data", str(data), "--label", "label", "--group", "site",
        "--folds", "4", "--seed", str(SEED), "--hidden", "8", "--epochs", "2", "--batch", "64",
        "--chunk", "32", "--workers", "2", "--output", str(job), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = ref.grouped_folds(SEED, sites, 4)
    result = result_of(job)
    assert result["grouped"] and result["folds"] == 4 and result["chunk"] == 32
    assert result["folds_sha256"] == ref.fold_sha256(expected)
    assert result["rows_per_fold"] == ref.rows_per_fold(expected, 4)
    assert [(f["candidate"], f["fold"]) for f in result["fits"]] == [(0, f) for f in range(4)]
    model, _meta = load_model(job / "model.npz")
    assert model.sizes[0] == FEATURES  # the group column is not a feature
    features = tmp_path / "features.csv"
    with features.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"f{j}" for j in range(FEATURES)])
        writer.writerows([[repr(float(v)) for v in row] for row in x[:5]])
    predicted = run_aner("parallel", "predict", "--model", str(job), "--data", str(features))
    assert predicted.returncode == 0, predicted.stderr
    assert len(predicted.stdout.splitlines()) == 6


def test_cv_stratifies_and_takes_the_train_options(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "cv", "--teacher", f"{ROWS},{FEATURES},{CLASSES}", "--folds", "3",
        "--seed", str(SEED), "--hidden", "8", "--epochs", "2", "--lr", "0.01",
        "--optimizer", "sgd", "--no-refit", "--output", str(job), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = TeacherDataset(ROWS, FEATURES, CLASSES, SEED).rows(np.arange(ROWS))[1]
    expected = ref.stratified_folds(SEED, labels.tolist(), 3)
    result = result_of(job)
    assert result["folds_sha256"] == ref.fold_sha256(expected)
    assert result["options"]["optimizer"] == "sgd" and result["options"]["lr"] == 0.01
    assert result["chunk"] == 128 and result["refit"] is None and result["test_loss"] is None
    assert not (job / "model.npz").exists()
    assert "1 candidate(s) x 3 folds" in done.stdout


# --------------------------------------------------------------------------- the command line


def test_a_bad_search_file_is_one_line_and_starts_nothing(small: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(SMALL.replace("epochs = 3", "epochs = 3\nepoch = 4"))
    job = tmp_path / "job"
    done = run_aner("parallel", "search", "--spec", str(bad), "--output", str(job))
    assert done.returncode == 2
    assert done.stderr.startswith(f"aner: {bad}: unknown key 'epoch'")
    assert len(done.stderr.strip().splitlines()) == 1 and not job.exists()
    chunked = run_aner("parallel", "search", "--spec", str(small), "--chunk", "3",
                       "--output", str(job))  # fmt: skip
    assert chunked.returncode == 2 and "--chunk: a search hands out whole fits" in chunked.stderr
    folds = run_aner("parallel", "cv", "--teacher", "100,3,2", "--seed", "1", "--folds", "256",
                     "--output", str(job))  # fmt: skip
    assert folds.returncode == 2 and "--folds must be 2..255" in folds.stderr
    assert not job.exists()


def test_the_sample_search_file_runs(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner("parallel", "search", "--spec", str(SAMPLES / "search.toml"), "--output",
                    str(job), "--workers", "2", timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = result_of(job)
    assert len(result["candidates"]) == 4 and len(result["fits"]) == 12
    assert result["test_accuracy"] > 0.8  # the digits, refit on the pool
    shown = run_aner("parallel", "status", "--job", str(job))
    assert "selected  candidate" in shown.stdout and "test      accuracy" in shown.stdout


# --------------------------------------------------------------------------- the API


def test_the_api_cross_validates_searches_and_predicts_in_sessions_and_async() -> None:
    teacher = (600, 6, 3)
    cv = parallel.cross_validate(teacher=teacher, seed=2, folds=3, hidden=(8,), epochs=2,
                                 chunk=32, execution=parallel.local(2))  # fmt: skip
    assert [r["fold"] for r in cv.records()] == [0, 1, 2] and cv.selected == 0
    x = TeacherDataset(*teacher, 2).rows(np.arange(10))[0]
    assert cv.predict(x).shape == (10,) and cv.predict_proba(x).shape == (10, 3)
    with parallel.session(parallel.local(2)) as s:
        again = s.cross_validate(teacher=teacher, seed=2, folds=3, hidden=(8,), epochs=2,
                                 chunk=32)  # fmt: skip
    assert [r["validation_loss"] for r in again.records()] == [
        r["validation_loss"] for r in cv.records()
    ]
    found = asyncio.run(
        parallel.search_async(teacher=teacher, seed=2, folds=3, hidden=(8,), chunk=32,
                              grid={"epochs": [1, 2]}, execution=parallel.local(2))
    )  # fmt: skip
    assert [c["epochs"] for c in found.candidate_records()] == [1, 2]
    assert (
        found.candidate_records()[1]["validation_loss_mean"]
        == cv.candidate_records()[0]["validation_loss_mean"]
    )  # candidate 1 of the search is the cross-validated configuration
    with pytest.raises(parallel.RequestError, match="hidden is given both"):
        parallel.search(teacher=teacher, seed=2, hidden=(8,), grid={"hidden": [[4]]})
    with pytest.raises(parallel.RequestError, match=r"cross_validate\(\) has no argument grid="):
        parallel.cross_validate(teacher=teacher, seed=2, grid={"lr": [0.1]})


def test_a_local_session_keeps_its_worker_processes_warm_across_searches() -> None:
    grid = {"teacher": (600, 6, 3), "seed": 2, "folds": 3, "hidden": (8,), "epochs": 2,
            "chunk": 32, "grid": {"lr": [0.003, 0.01]}}  # fmt: skip
    threads = parallel.search(**grid, execution=parallel.local(2, backend="threads"))
    with parallel.session(parallel.local(2)) as s:
        first = s.search(**grid)
        pids = {p.pid for p in psutil.Process().children() if "worker" in " ".join(p.cmdline())}
        second = s.search(**grid)
        kept = {p.pid for p in psutil.Process().children() if "worker" in " ".join(p.cmdline())}
    assert len(pids) == 2 and kept == pids  # the same two processes for both calls
    assert [r["validation_loss"] for r in first.records()] == [
        r["validation_loss"] for r in threads.records()
    ]
    assert second.records() == [{**r, "seconds": ANY, "worker": ANY} for r in first.records()]
    assert not any(psutil.pid_exists(p) for p in pids)  # the session reaped them on closing


# --------------------------------------------------------------------------- seeds


def test_seeds_fit_every_candidate_on_every_fold_and_select_by_the_mean_over_all(
    tmp_path: Path,
) -> None:
    options: dict[str, Any] = dict(
        teacher=(400, 6, 3), seed=SEED, folds=2, hidden=(8,), epochs=2, chunk=32,
        grid={"lr": [0.003, 0.03]}, execution=parallel.local(2),
    )  # fmt: skip
    seeded = parallel.search(seeds=[SEED, 12, 13], output=tmp_path / "job", **options)
    records = seeded.records()
    assert len(records) == 2 * 2 * 3
    assert sorted({(r["candidate"], r["fold"], r["seed"]) for r in records}) == [
        (c, f, s) for c in (0, 1) for f in (0, 1) for s in (5, 12, 13)
    ]
    # The aggregation, computed independently from the per-fit records (fits.csv).
    with (tmp_path / "job" / "fits.csv").open() as f:
        rows = list(csv.DictReader(f))
    with (tmp_path / "job" / "candidates.csv").open() as f:
        table = list(csv.DictReader(f))
    means = []
    for c in (0, 1):
        for metric in ("validation_loss", "validation_accuracy"):
            values = [float(r[metric]) for r in rows if r["candidate"] == str(c)]
            std = statistics.stdev(values)
            row = table[c]
            assert row["n"] == "6"
            assert math.isclose(float(row[f"{metric}_mean"]), statistics.fmean(values),
                                rel_tol=1e-14)  # fmt: skip
            assert math.isclose(float(row[f"{metric}_std"]), std, rel_tol=1e-12)
            assert math.isclose(float(row[f"{metric}_standard_error"]), std / math.sqrt(6),
                                rel_tol=1e-12)  # fmt: skip
            if metric == "validation_loss":
                means.append(statistics.fmean(values))
    assert seeded.selected == means.index(min(means))
    assert seeded.seeds == [SEED, 12, 13]
    assert len([k for k in seeded.cv_results_ if k.startswith("split") and "score" in k]) == 6
    # A fit of the search's own seed is the fit a search without seeds makes, bit for bit;
    # the refit trains with the search's seed either way.
    plain = parallel.search(**options)
    strip = ("seconds", "worker")
    own = [{k: v for k, v in r.items() if k not in strip} for r in records if r["seed"] == SEED]
    assert own == [{k: v for k, v in r.items() if k not in strip} for r in plain.records()]
    if seeded.selected == plain.selected:
        assert seeded.refit.train_loss[0] == plain.refit.train_loss[0]
    # replicates = N derives the seeds by the contract's rule.
    derived = parallel.search(replicates=2, refit=False, **options)
    assert derived.seeds == list(replicate_seeds(SEED, 2))
    with pytest.raises(RequestError, match="give seeds= or replicates=, not both"):
        parallel.search(seeds=[1, 2], replicates=2, **options)
    with pytest.raises(RequestError, match="names seed 2 twice"):
        parallel.search(seeds=[2, 2], **options)
