"""Dense training end to end (docs/contracts.md, section 9): `aner parallel train` and
`predict` as a researcher runs them, on local threads, a local-pipe group and a real-sshd
group, against the single-process reference `train_single`; staging and its cache; a
worker killed mid-step; cancel. Sizes are tiny: every figure asserted is a count, a file or
a bit pattern."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from suite_env import child_env
from support import (
    ANER,
    SAMPLES,
    finish,
    result_of,
    run_aner,
    spawned,
    status_of,
    wait_for,
    wait_status,
    write_cluster,
    write_pipe_pair,
)

from aner_coord.computations.dense.model import load_model
from aner_coord.computations.dense.single import train_single
from aner_coord.jobdir.ledger import scan
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import TeacherDataset, load_csv, load_digits
from aner_worker.kernels.dense.network import flatten
from aner_worker.kernels.dense.plan import assign_roles

# A small CSV from the teacher set: 1,200 rows, 8 features, 3 classes.
ROWS, FEATURES, CLASSES, SEED = 1200, 8, 3, 5
SMALL = ["--hidden", "8", "--batch", "64", "--epochs", "2", "--patience", "2", "--lr", "0.01"]
SMALL_CHUNK = 16


def write_csv(path: Path, x: np.ndarray, y: np.ndarray, name: str = "f") -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"{name}{j}" for j in range(x.shape[1])] + ["label"])
        for row, label in zip(x, y, strict=True):
            writer.writerow([repr(float(v)) for v in row] + [int(label)])
    return path


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    x, y = TeacherDataset(ROWS, FEATURES, CLASSES, SEED).rows(np.arange(ROWS))
    return write_csv(tmp_path_factory.mktemp("data") / "small.csv", x, y)


@pytest.fixture(scope="module")
def small_reference(small_csv: Path) -> Any:
    return train_single(
        load_csv(small_csv), seed=SEED, hidden=(8,), batch=64, epochs=2, patience=2,
        lr=0.01, chunk=SMALL_CHUNK,
    )  # fmt: skip


def train(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, name: str = "job"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    job = tmp_path / f"{name}-{time.monotonic_ns()}"
    proc = run_aner("parallel", "train", *args, "--output", str(job), timeout=240, env=env)
    return proc, job


def params_of(job: Path) -> tuple[np.ndarray, dict[str, Any]]:
    model, meta = load_model(job / "model.npz")
    return flatten(model.params), meta


# -- digits with the defaults, run once ---------------------------------------------------


@pytest.fixture(scope="module")
def digits_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc, job = train(tmp_path_factory.mktemp("digits"), "--data", "digits", "--seed", "0")
    assert proc.returncode == 0, proc.stderr
    return job


def test_digits_with_the_defaults_reaches_095(digits_job: Path) -> None:
    result = result_of(digits_job)
    assert result["test_accuracy"] >= 0.95
    assert result["computation"] == "dense" and result["layer_sizes"] == [64, 64, 64, 10]
    assert (result["optimizer"], result["lr"], result["batch"]) == ("adam", 0.001, 256)
    n_train = result["roles"]["train"]
    assert sum(result["roles"].values()) == 1797
    # Every epoch ran every training row exactly once.
    assert result["rows_processed"] == len(result["history"]) * n_train
    steps = -(-n_train // 256)
    assert result["committed_steps"] == len(result["history"]) * steps
    best = result["best_epoch"]
    losses = [h["validation_loss"] for h in result["history"]]
    assert losses[best - 1] == min(losses)  # epochs count from 1
    assert [h["epoch"] for h in result["history"]] == list(range(1, len(losses) + 1))
    # Early stopping: it stopped 5 epochs after the best, or ran out of epochs.
    assert len(losses) in (best + 5, 100)
    _, meta = load_model(digits_job / "model.npz")
    assert meta["epoch"] == best and meta["complete"] is True
    assert meta["data"] == result["data"] == load_digits().identity
    assert (digits_job / "model.npz").stat().st_mode & 0o777 == 0o600
    # The ledger holds the committed steps, not every chunk's gradient sums (which would be
    # as large as the model, many times over).
    records, _ = scan((digits_job / "ledger").read_bytes())
    assert {type(e.record).__name__ for e in records} == {"Opened", "Committed"}
    assert (digits_job / "ledger").stat().st_size < 100 * len(records)


def test_predict_on_the_test_rows_reproduces_the_test_accuracy(
    digits_job: Path, tmp_path: Path
) -> None:
    data = load_digits()
    test = assign_roles(0, data.n_rows).test
    x, y = data.rows(test)
    rows = write_csv(tmp_path / "test.csv", x, data.classes[y], "pixel_")  # digits' names
    out = tmp_path / "predictions.csv"
    done = run_aner(
        "parallel", "predict", "--model", str(digits_job), "--data", str(rows),
        "--output", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with out.open() as f:
        table = list(csv.reader(f))
    assert table[0] == ["predicted"] + [f"p_{d}" for d in range(10)]
    predicted = np.array([int(r[0]) for r in table[1:]])
    proba = np.array([[float(v) for v in r[1:]] for r in table[1:]])
    assert predicted.size == test.size
    assert np.mean(predicted == data.classes[y]) == result_of(digits_job)["test_accuracy"]
    assert np.allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.array_equal(np.argmax(proba, axis=1), predicted)


def test_predict_refuses_a_bad_value_naming_line_and_column(
    digits_job: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.csv"
    header = ",".join(f"pixel_{i}" for i in range(64))
    bad.write_text(header + "\n" + "1," * 10 + "x" + ",0" * 53 + "\n")
    done = run_aner("parallel", "predict", "--model", str(digits_job), "--data", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "line 2, column 11 ('pixel_10')" in done.stderr


# -- the same parameters whoever computes them ---------------------------------------------


def test_threads_and_a_pipe_group_equal_train_single_bitwise(
    tmp_path: Path, small_csv: Path, small_reference: Any
) -> None:
    expected = flatten(small_reference.model.params)
    group = write_pipe_pair(tmp_path / "c")
    env = child_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    common = ["--data", str(small_csv), "--seed", str(SEED), *SMALL, "--chunk", "16"]
    runs = {
        "1 thread": train(tmp_path, *common, "--workers", "1"),
        "2 threads": train(tmp_path, *common, "--workers", "2"),
        "pipe group": train(tmp_path, *common, "--cluster", str(group), env=env),
    }
    histories = []
    for what, (proc, job) in runs.items():
        assert proc.returncode == 0, f"{what}: {proc.stderr}"
        flat, _ = params_of(job)
        assert np.array_equal(flat, expected), what
        result = result_of(job)
        histories.append(result["history"])
        assert result["test_accuracy"] == small_reference.test_accuracy, what
        assert result["best_epoch"] == small_reference.best_epoch + 1, what  # from 1
        assert result["rows_processed"] == 2 * small_reference.roles["train"], what
    for history in histories[1:]:
        assert [h["validation_loss"] for h in history] == [
            h["validation_loss"] for h in histories[0]
        ]
    workers = {w["identity"]: w for w in result_of(runs["pipe group"][1])["workers"]}
    assert set(workers) == {"w1", "w2"} and all(w["chunks"] > 0 for w in workers.values())


def test_float32_threads_a_pipe_group_and_fit_whole_are_bitwise_equal_and_say_so(
    tmp_path: Path, small_csv: Path
) -> None:
    reference = train_single(
        load_csv(small_csv), seed=SEED, hidden=(8,), batch=64, epochs=2, patience=2,
        lr=0.01, chunk=SMALL_CHUNK, precision="float32",
    )  # fmt: skip
    expected = flatten(reference.model.params)
    group = write_pipe_pair(tmp_path / "c")
    env = child_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    common = ["--data", str(small_csv), "--seed", str(SEED), *SMALL, "--chunk", "16"]
    common += ["--precision", "float32"]
    runs = {
        "2 threads": train(tmp_path, *common, "--workers", "2"),
        "pipe group": train(tmp_path, *common, "--cluster", str(group), env=env),
    }
    for what, (proc, job) in runs.items():
        assert proc.returncode == 0, f"{what}: {proc.stderr}"
        flat, meta = params_of(job)
        assert np.array_equal(flat, expected), what
        assert meta["precision"] == "float32", what
        result = result_of(job)
        assert result["precision"] == "float32", what
        assert result["test_accuracy"] == reference.test_accuracy, what
        manifest = json.loads((job / "run-manifest.json").read_text())
        assert manifest["request"]["precision"] == "float32", what
    # The float64 job of the same plan is another computation, close to this one.
    exact = flatten(train_single(
        load_csv(small_csv), seed=SEED, hidden=(8,), batch=64, epochs=2, patience=2,
        lr=0.01, chunk=SMALL_CHUNK,
    ).model.params)  # fmt: skip
    assert not np.array_equal(exact, expected)
    assert np.max(np.abs(exact - expected)) < 1e-4
    # predict computes in the model's precision: the float32 probabilities, bit for bit.
    job = runs["2 threads"][1]
    x, _ = load_csv(small_csv).rows(np.arange(50))
    rows = write_csv(tmp_path / "rows.csv", x, np.zeros(50, dtype=np.int64))
    out = tmp_path / "predictions.csv"
    done = run_aner(
        "parallel", "predict", "--model", str(job), "--data", str(rows), "--output", str(out)
    )
    assert done.returncode == 0, done.stderr
    with out.open() as f:
        table = list(csv.reader(f))[1:]
    proba = np.array([[float(v) for v in r[1:]] for r in table])
    assert np.array_equal(proba, reference.model.predict_proba(x))
    assert np.array_equal(proba, proba.astype(np.float32).astype(np.float64))


def test_a_group_member_that_cannot_compute_float32_is_refused_naming_it(
    tmp_path: Path, small_csv: Path
) -> None:
    # A worker from before the choice: a real handshake that states no precision (so float64
    # only), then it would serve; the job must refuse it before giving it any task.
    script = tmp_path / "older-aner"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, time\n"
        "from aner_worker.contract import source_fingerprint\n"
        "from aner_worker.kernels import KERNELS\n"
        "from protocol import WorkerConnection\n"
        "conn = WorkerConnection(source_fingerprint(), 2, 'older', KERNELS)\n"
        "events = []\n"
        "while not events:\n"
        "    events = conn.receive(os.read(0, 65536))\n"
        "os.write(1, conn.reply())\n"
        "while os.read(0, 65536):\n"
        "    pass\n"
    )
    script.chmod(0o755)
    group = write_cluster(
        tmp_path / "c", [("w1", "local", "-", ANER, 1), ("older-1", "local", "-", str(script), 1)]
    )
    common = ["--data", str(small_csv), "--seed", str(SEED), *SMALL, "--chunk", "16"]
    proc, job = train(tmp_path, *common, "--precision", "float32", "--cluster", str(group))
    assert proc.returncode == 3, proc.stderr
    assert (
        'worker "older-1" failed during handshake: it computes in float64 only and the job '
        "declares float32 (update aner there, or leave it out of the group)"
    ) in proc.stderr
    assert not (job / "result.json").exists()
    workers = {w.identity: w for w in status_of(job).workers}
    assert workers["older-1"].items == 0


def test_an_ssh_group_equals_train_single_bitwise(
    tmp_path: Path,
    small_csv: Path,
    small_reference: Any,
    sshd: Any,
) -> None:
    group = write_cluster(
        tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, 1), ("w2", "local", "-", ANER, 1)]
    )
    proc, job = train(
        tmp_path, "--data", str(small_csv), "--seed", str(SEED), *SMALL, "--chunk", "16",
        "--cluster", str(group), env=sshd.env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    flat, _ = params_of(job)
    assert np.array_equal(flat, flatten(small_reference.model.params))
    staging = {s["identity"]: s for s in result_of(job)["staging"]}
    assert set(staging) == {"peer-1", "w2"}
    text = "\n".join(p.read_text(errors="replace") for p in job.iterdir() if p.suffix == ".json")
    assert sshd.alias not in text and "127.0.0.1" not in text


def test_chunk_sizes_agree_within_1e_9_after_an_epoch() -> None:
    from aner_coord import parallel

    fits = [
        parallel.dense_fit(
            teacher=(2000, 10, 4), seed=3, hidden=(16, 16), batch=256, epochs=1,
            execution=parallel.local(workers=2, chunk=chunk),
        )
        for chunk in (37, 256)
    ]  # fmt: skip
    a, b = (flatten(f.model.params) for f in fits)
    assert np.max(np.abs(a - b)) < 1e-9
    start = flatten(
        train_single(
            TeacherDataset(2000, 10, 4, 3), seed=3, hidden=(16, 16), max_steps=0
        ).model.params
    )
    assert np.max(np.abs(a - start)) > 1e-3  # training moved far beyond the tolerance
    assert fits[0].rows_processed == fits[0].roles["train"]
    x, _ = TeacherDataset(2000, 10, 4, 3).rows(np.arange(20))
    assert np.array_equal(fits[0].predict(x), fits[0].model.predict(x))


def test_the_awaitable_form_trains_the_same_model_and_leaves_the_loop_free() -> None:
    import asyncio

    from aner_coord import parallel

    arguments: dict[str, Any] = dict(
        teacher=(2000, 10, 4), seed=3, hidden=(16,), batch=256, epochs=2,
        execution=parallel.local(workers=2, chunk=64),
    )  # fmt: skip

    async def main() -> tuple[Any, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        fit = await parallel.dense_fit_async(**arguments)
        ticking.cancel()
        return fit, ticks

    fit, ticks = asyncio.run(main())
    reference = train_single(
        TeacherDataset(2000, 10, 4, 3), seed=3, hidden=(16,), batch=256, epochs=2, chunk=64
    )
    assert np.array_equal(flatten(fit.model.params), flatten(reference.model.params))
    assert fit.committed_steps == reference.committed_steps
    assert ticks > 0  # the caller's loop turned while the job ran on it


def test_normalisation_is_fitted_on_training_rows_only(tmp_path: Path, small_csv: Path) -> None:
    from aner_coord import parallel

    job = tmp_path / "job"
    parallel.dense_fit(
        data=small_csv, seed=SEED, hidden=(8,), batch=64, epochs=1, output=job,
        execution=parallel.local(workers=2, chunk=SMALL_CHUNK),
    )  # fmt: skip
    model, _ = load_model(job / "model.npz")
    data = load_csv(small_csv)
    train_rows = data.x[assign_roles(SEED, ROWS).train]
    assert np.allclose(model.normalisation.mean, train_rows.mean(axis=0), rtol=0, atol=1e-14)
    assert np.allclose(model.normalisation.std, train_rows.std(axis=0), rtol=0, atol=1e-14)
    assert not np.allclose(model.normalisation.mean, data.x.mean(axis=0), rtol=0, atol=1e-6)


# -- staging -------------------------------------------------------------------------------


def test_a_second_job_on_the_same_csv_stages_nothing(tmp_path: Path, small_csv: Path) -> None:
    cache = tmp_path / "cache"
    env = child_env(XDG_CACHE_HOME=str(cache))
    group = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    args = ["--data", str(small_csv), "--seed", str(SEED), "--hidden", "4", "--epochs", "1"]
    first, job1 = train(tmp_path, *args, "--cluster", str(group), env=env)
    second, job2 = train(tmp_path, *args, "--cluster", str(group), env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    data = load_csv(small_csv)
    blob = len(dense_rows.encode_blob(data.x, data.y))
    [cold] = result_of(job1)["staging"]
    [cached] = result_of(job2)["staging"]
    assert (cold["identity"], cold["state"], cold["bytes"]) == ("w1", "cold", blob)
    assert (cached["state"], cached["bytes"], cached["blocks"]) == ("cached", 0, 0)
    assert [s.state for s in status_of(job2).staging] == ["cached"]
    blocks = cache / "aner" / "blocks"
    assert blocks.stat().st_mode & 0o777 == 0o700
    assert (blocks.parent.stat().st_mode & 0o777) == 0o700
    assert [p.stat().st_mode & 0o777 for p in blocks.iterdir()] == [0o600]


def test_a_teacher_set_is_never_sent(tmp_path: Path) -> None:
    group = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    proc, job = train(
        tmp_path, "--teacher", "600,5,3", "--seed", "2", "--hidden", "4", "--epochs", "1",
        "--cluster", str(group),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = result_of(job)
    assert result["staging"] == []
    reference = train_single(TeacherDataset(600, 5, 3, 2), seed=2, hidden=(4,), epochs=1)
    assert np.array_equal(params_of(job)[0], flatten(reference.model.params))


# -- failure and cancellation ----------------------------------------------------------------

LONG = ["--teacher", "40000,16,4", "--hidden", "32", "--batch", "512", "--epochs", "1000",
        "--patience", "1000", "--chunk", "64", "--seed", "9"]  # fmt: skip


def long_reference(steps: int) -> Any:
    """train_single stopped after `steps` committed steps, with the LONG plan."""
    return train_single(
        TeacherDataset(40000, 16, 4, 9), seed=9, hidden=(32,), batch=512, epochs=1000,
        patience=1000, chunk=64, max_steps=steps,
    )  # fmt: skip


def test_a_worker_killed_mid_step_leaves_the_last_committed_model(tmp_path: Path) -> None:
    group = write_pipe_pair(tmp_path / "c")
    job = tmp_path / "job"
    argv = [ANER, "parallel", "train", *LONG, "--cluster", str(group), "--output", str(job)]
    with spawned(argv) as proc:
        wait_status(job, lambda s: (s.committed_steps or 0) >= 3, 120, "three committed steps")
        coordinator = psutil.Process(proc.pid)
        workers = [p for p in coordinator.children() if "worker" in " ".join(p.cmdline())]
        assert len(workers) == 2
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        code, _, err = finish(proc, 60)
    assert code == 3, err
    assert 'worker "w1"' in err or 'worker "w2"' in err
    status = status_of(job)
    assert status.state is JobState.FAILED and not (job / "result.json").exists()
    committed = status.committed_steps
    assert committed is not None and committed >= 3
    flat, meta = params_of(job)
    assert (meta["committed_steps"], meta["complete"]) == (committed, False)
    assert np.array_equal(flat, long_reference(committed).final_params)


def test_with_retries_a_killed_worker_changes_no_bit(tmp_path: Path) -> None:
    group = write_pipe_pair(tmp_path / "c")
    job = tmp_path / "job"
    # 30 epochs of 55 steps (several seconds of training): the kill lands well before the end.
    # A single short epoch once finished before the first status snapshot was written.
    plan = ["--teacher", "40000,16,4", "--hidden", "32", "--batch", "512", "--epochs", "30",
            "--patience", "1000", "--chunk", "64", "--seed", "9"]  # fmt: skip
    argv = [ANER, "parallel", "train", *plan, "--retries", "1", "--cluster", str(group),
            "--output", str(job)]  # fmt: skip
    with spawned(argv) as proc:
        seen = wait_status(
            job,
            lambda s: s.state is JobState.RUNNING and (s.committed_steps or 0) >= 3,
            120,
            "three committed steps",
        )
        killed_after = seen.committed_steps
        coordinator = psutil.Process(proc.pid)
        workers = [p for p in coordinator.children() if "worker" in " ".join(p.cmdline())]
        workers[0].send_signal(signal.SIGKILL)
        code, _, err = finish(proc, 120)
    assert code == 0, err
    reference = train_single(
        TeacherDataset(40000, 16, 4, 9), seed=9, hidden=(32,), batch=512, epochs=30,
        patience=1000, chunk=64,
    )  # fmt: skip
    assert killed_after is not None and killed_after < reference.committed_steps == 1650
    result = result_of(job)
    [loss] = result["losses"]
    assert loss["identity"] in ("w1", "w2")
    assert np.array_equal(params_of(job)[0], flatten(reference.model.params))
    assert result["committed_steps"] == 1650
    assert result["rows_processed"] == reference.roles["train"] * 30


def test_background_training_shows_epochs_and_cancels_at_a_committed_step(
    tmp_path: Path, coordinators: Any
) -> None:
    job = tmp_path / "job"
    done = run_aner("parallel", "train", *LONG, "--workers", "1", "--output", str(job),
                    "--background")  # fmt: skip
    assert done.returncode == 0, done.stderr
    coordinators.add(status_of(job).pid)
    wait_status(job, lambda s: (s.committed_steps or 0) >= 2, 120, "two committed steps")
    with spawned([ANER, "parallel", "status", "--job", str(job), "--watch"]) as watch:
        shown = run_aner("parallel", "status", "--job", str(job))
        assert shown.returncode == 0
        step = r"epoch \d+ of 1000, step \d+ of 55"
        assert re.search(rf"\(({step}|validation after epoch \d+ of 1000)\)", shown.stdout)
        assert re.search(rf"training  {step}(, validation accuracy 0\.\d{{4}})?\n", shown.stdout)
        cancel = run_aner("parallel", "cancel", "--job", str(job))
        assert cancel.returncode in (0, 4), cancel.stderr
        code, out, _ = finish(watch, 60)
    assert code == 4
    assert "epoch" in out
    status = wait_for(
        lambda: (s := status_of(job)).state is JobState.CANCELLED and s, 60, "CANCELLED"
    )
    flat, meta = params_of(job)
    assert meta["committed_steps"] == status.committed_steps and meta["complete"] is False
    assert np.array_equal(flat, long_reference(status.committed_steps).final_params)
    # The incomplete model is refused by predict unless asked for explicitly.
    rows = tmp_path / "rows.csv"
    rows.write_text(",".join(f"x{j}" for j in range(16)) + "\n" + ",".join(["0.5"] * 16) + "\n")
    refused = run_aner("parallel", "predict", "--model", str(job), "--data", str(rows))
    assert refused.returncode == 2
    assert refused.stderr == (
        f"aner: --model {job}: model.npz is the incomplete model of a CANCELLED job (after "
        f"{status.committed_steps} committed steps): give --allow-incomplete to use it\n"
    )
    allowed = run_aner(
        "parallel", "predict", "--model", str(job), "--data", str(rows), "--allow-incomplete"
    )
    assert allowed.returncode == 0 and allowed.stdout.startswith("predicted,p_0,"), allowed.stderr


def test_a_diverging_fit_fails_naming_the_epoch_and_step() -> None:
    from aner_coord import parallel

    with pytest.raises(parallel.JobFailed, match=r"divergence: .* at epoch 1, step [1-9]"):
        parallel.dense_fit(
            teacher=(600, 5, 3), seed=1, hidden=(4,), optimizer="sgd", lr=1e300,
            execution=parallel.local(workers=1, chunk=64),
        )  # fmt: skip


# -- bad requests: one line, exit 2 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--teacher", "100,x,3"], "--teacher: expected N,N,N"),
        (["--teacher", "600,5,3", "--data", "digits"], "give either --data FILE or --teacher"),
    ],
)
def test_a_bad_train_request_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc, job = train(tmp_path, *args, "--seed", "1")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.strip().count("\n") == 0
    assert not job.exists()


def test_a_bad_csv_value_is_named_by_line_and_column(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,b,label\n1,2,0\n3,oops,1\n")
    proc, _ = train(tmp_path, "--data", str(data), "--seed", "1")
    assert proc.returncode == 2
    assert "line 3, column 2 ('b'): not a number: 'oops'" in proc.stderr


def test_the_dense_sample_trains_on_digits_and_on_a_csv(tmp_path: Path, small_csv: Path) -> None:
    sample = [sys.executable, str(SAMPLES / "dense_digits.py"), "--epochs", "3", "--workers", "1"]
    done = subprocess.run(
        [*sample, "--csv", str(small_csv)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "== digits" in done.stdout and f"== {small_csv}" in done.stdout
    assert len(re.findall(r"test accuracy 0\.\d{4} on \d+ rows", done.stdout)) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("x,label\n1,a\n")
    done = subprocess.run([*sample, "--csv", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"dense_digits: {bad}: needs at least two classes, found 1"
    ]


def test_predict_drops_the_label_column_the_model_was_trained_with(tmp_path: Path) -> None:
    from aner_coord import parallel
    from aner_coord.cli.dense import predict

    x, y = TeacherDataset(600, 4, 3, 2).rows(np.arange(600))
    data = tmp_path / "d.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["species", "a", "b", "c", "d"])
        for row, label in zip(x, y, strict=True):
            writer.writerow([f"s{label}", *(repr(float(v)) for v in row)])
    fit = parallel.dense_fit(
        data=data, label="species", seed=2, hidden=(4,), epochs=2, output=tmp_path / "job",
        execution=parallel.local(workers=1, chunk=64),
    )  # fmt: skip
    out = tmp_path / "p.csv"
    assert predict(str(tmp_path / "job"), str(data), str(out)) == 0
    with out.open() as f:
        table = list(csv.reader(f))
    assert table[0] == ["predicted", "p_s0", "p_s1", "p_s2"]
    assert [r[0] for r in table[1:]] == list(fit.predict(x))


@pytest.mark.parametrize("value", ["1e200", "1e300"])
def test_a_constant_feature_too_large_to_square_fails_in_one_line_without_a_raw_warning(
    tmp_path: Path, value: str
) -> None:
    # Issue 25 item 16: numpy's "overflow encountered in multiply" came first.
    data = tmp_path / "rows.csv"
    rows = [f"{(r % 17) / 17},{value},{r % 2}" for r in range(300)]
    data.write_text("a,b,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "job"
    proc = run_aner(
        "parallel", "train", "--data", str(data), "--seed", "1", "--epochs", "1",
        "--workers", "1", "--output", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        f"aner: job failed (job directory {out}): numerical divergence: the moments of "
        "feature 2 of 2 are not finite in the normalisation pass: rescale it (in the result of "
        'worker "local-1" for task 1)'
    ], proc.stderr
