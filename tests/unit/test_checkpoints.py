"""Checkpoints (`aner_coord.job.checkpoints`, `aner_coord.computations.dense.checkpoint`):
when one is due, that its ledger record is durable before the file is in place, which file
resume trusts, and that the format reads back only what fits the request."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest

from aner_coord import jobdir
from aner_coord.computations.dense import checkpoint
from aner_coord.errors import RequestError
from aner_coord.job.checkpoints import (
    DEFAULT_EVERY_S,
    Checkpointer,
    CheckpointError,
    Policy,
    vouched,
)
from aner_coord.jobdir import ledger
from aner_worker.kernels.dense.data import TeacherDataset
from aner_worker.kernels.dense.fit import fit_whole
from aner_worker.kernels.dense.plan import assign_roles
from aner_worker.kernels.dense.training import Training, TrainingOptions, TrainingRows

KEY = b"k" * ledger.JOB_KEY_BYTES
DATA = TeacherDataset(400, 5, 3, seed=1)


def _training(**options: object) -> Training:
    roles = assign_roles(2, DATA.n_rows, 0.2, 0.2)
    rows = TrainingRows(roles.train, roles.validation, roles.test)
    opts = TrainingOptions(seed=2, hidden=(6,), batch=32, epochs=3, chunk=16)
    opts = dataclasses.replace(opts, **options)  # type: ignore[arg-type]
    return Training(opts, rows, DATA.n_features, DATA.n_classes)


# -- the format -------------------------------------------------------------------------------


def test_the_format_reads_back_every_field_and_continues_exactly() -> None:
    whole = fit_whole(_training(), DATA)
    part = fit_whole(_training(), DATA, max_steps=9)
    data = checkpoint.encode(part.snapshot())
    assert len(data) <= checkpoint.limit(part)
    resumed = _training()
    resumed.restore(checkpoint.decode(data, resumed))
    fit_whole(resumed, DATA)
    assert np.array_equal(resumed.best_flat, whole.best_flat) and resumed.test == whole.test


def test_a_finished_training_with_its_test_metrics_reads_back() -> None:
    done = fit_whole(_training(target_accuracy=0.0), DATA)
    snap = checkpoint.decode(checkpoint.encode(done.snapshot()), _training())
    assert snap.test == done.test and snap.time_to_target == done.time_to_target
    assert snap.phase == "done" and snap.history.shape == (len(done.history), 5)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: d[:100], "not an .npz file"),
        (lambda d: b"PK\x03\x04" + b"\0" * 200, "not an .npz file"),
    ],
)
def test_bytes_that_are_not_a_checkpoint_are_refused(damage: object, says: str) -> None:
    data = checkpoint.encode(fit_whole(_training(), DATA, max_steps=2).snapshot())
    with pytest.raises(ValueError, match=says):
        checkpoint.decode(damage(data), _training())  # type: ignore[operator]


def test_a_member_larger_than_the_model_is_refused_before_it_is_read() -> None:
    big = fit_whole(_training(hidden=(64, 64)), DATA, max_steps=1)
    data = checkpoint.encode(big.snapshot())
    with pytest.raises(ValueError, match="more than this model's"):
        checkpoint.decode(data, _training())


def test_a_checkpoint_of_another_model_is_refused_by_restore() -> None:
    other = fit_whole(_training(hidden=(7,)), DATA, max_steps=1)
    target = _training()
    with pytest.raises(ValueError, match="parameter shapes"):
        target.restore(checkpoint.decode(checkpoint.encode(other.snapshot()), target))


def test_a_mistyped_array_is_refused_naming_it() -> None:
    import io

    snap = fit_whole(_training(), DATA, max_steps=1).snapshot()
    arrays = dict(np.load(io.BytesIO(checkpoint.encode(snap))))
    arrays["flat"] = arrays["flat"].astype(np.float32)
    out = io.BytesIO()
    np.savez(out, **arrays)
    with pytest.raises(ValueError, match="flat"):
        checkpoint.decode(out.getvalue(), _training())


# -- the policy -------------------------------------------------------------------------------


def test_policy_defaults_and_settings() -> None:
    assert Policy.from_environ({}) == Policy(DEFAULT_EVERY_S, None)
    assert Policy.from_environ({"ANER_CHECKPOINT_S": "0"}) == Policy(0.0, None)
    assert Policy.from_environ({"ANER_CHECKPOINT_S": "off"}) == Policy(None, None)
    got = Policy.from_environ({"ANER_CHECKPOINT_S": "60", "ANER_CHECKPOINT_STEPS": "500"})
    assert got == Policy(60.0, 500)
    for bad in ({"ANER_CHECKPOINT_S": "soon"}, {"ANER_CHECKPOINT_S": "-1"},
                {"ANER_CHECKPOINT_S": "nan"}, {"ANER_CHECKPOINT_STEPS": "0"}):  # fmt: skip
        with pytest.raises(RequestError, match="ANER_CHECKPOINT"):
            Policy.from_environ(bad)


# -- writing and trusting ---------------------------------------------------------------------


class _Run:
    """A run whose checkpoint is the bytes it is given (what the writer does with them)."""

    steps_recovered = 0
    durable_chunks = False

    def __init__(self) -> None:
        self.data = b""

    def checkpoint(self) -> bytes:
        return self.data

    def checkpoint_limit(self) -> int:
        return 1 << 20

    def restore(self, data: bytes) -> None:
        self.data = data


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def directory(tmp_path: Path) -> jobdir.JobDir:
    return jobdir.JobDir.create(tmp_path / "job")


def _read(directory: jobdir.JobDir) -> ledger.Recovered:
    return ledger.read_ledger(directory, KEY)


def test_due_by_time_or_steps_and_the_record_is_durable_before_the_file(
    directory: jobdir.JobDir,
) -> None:
    book = ledger.LedgerWriter(directory, KEY, computation="dense", at=0.0)
    clock = _Clock()
    writer = Checkpointer(directory, book, Policy(30.0, 100), clock=clock)
    run = _Run()
    run.data = b"first"
    writer.committed(run, 5, 4, 5000)  # neither 30 s nor 100 steps: not due
    assert not directory.exists(jobdir.CHECKPOINT) and writer.steps is None
    clock.now = 30.0
    writer.committed(run, 6, 5, 6000)
    assert directory.read_bytes(jobdir.CHECKPOINT) == b"first" and writer.steps == 5
    # The record reached the disk (no status written, no sync by anyone else).
    [record] = _read(directory).checkpoints
    assert (record.passes, record.steps, record.size, record.items) == (6, 5, 5, 6000)
    assert record.sha256 == hashlib.sha256(b"first").digest()
    run.data = b"second"
    writer.committed(run, 7, 104, 7000)  # 99 steps since: not due
    assert writer.written == 1
    writer.committed(run, 8, 105, 8000)  # 100 steps since
    assert writer.written == 2 and directory.read_bytes(jobdir.CHECKPOINT) == b"second"
    run.data = b"third"
    writer.committed(run, 9, 106, 9000)
    writer.final()  # a cancel keeps the last committed pass at once
    writer.final()  # and only once
    assert writer.written == 3 and [r.passes for r in _read(directory).checkpoints] == [6, 8, 9]
    book.close()


def test_resume_trusts_the_newest_file_the_ledger_vouches_for(directory: jobdir.JobDir) -> None:
    book = ledger.LedgerWriter(directory, KEY, computation="dense", at=0.0)
    writer = Checkpointer(directory, book, Policy(0.0), clock=_Clock())
    run = _Run()
    assert vouched(directory, _read(directory), 1 << 20) is None  # no file: from the start
    run.data = b"old"
    writer.committed(run, 3, 2, 3000)
    # Killed after the next record was durable but before its file was renamed into place:
    # the file is still the one before, which the ledger vouches for too.
    book.append(ledger.Checkpointed(4, 3, 3, hashlib.sha256(b"new").digest(), 0.0))
    book.sync()
    restored = vouched(directory, _read(directory), 1 << 20)
    assert restored is not None
    assert (restored.passes, restored.data, restored.items) == (3, b"old", 3000)
    directory.write_bytes(jobdir.CHECKPOINT, b"forged")
    with pytest.raises(CheckpointError, match="not a checkpoint its ledger vouches for"):
        vouched(directory, _read(directory), 1 << 20)
    directory.write_bytes(jobdir.CHECKPOINT, b"x" * 100)
    with pytest.raises(CheckpointError, match="the limit is 10"):
        vouched(directory, _read(directory), 10)
    book.close()


def test_a_run_restored_after_its_last_pass_completes_without_work() -> None:
    """A checkpoint written at the last barrier (killed before `result.json`): the resumed
    job completes at once, with the restored training's result."""
    from aner_coord.computations.dense.request import DenseRequest
    from aner_coord.computations.dense.run import DenseRun
    from aner_coord.job.instructions import JobEnded
    from aner_coord.job.machine import JobMachine
    from aner_coord.jobdir.status import JobState

    request = DenseRequest(teacher=(400, 5, 3), hidden=(6,), batch=64, epochs=2, seed=2)
    done = DenseRun(request, 32, DATA)
    fit_whole(done.training, DATA)
    assert done.training.done
    run = DenseRun(request, 32, DATA)
    run.restore(done.checkpoint())
    machine = JobMachine(run, {"w": 1}, chunk=32, passes=100, first_pass=50)
    out = machine.start()
    assert machine.state is JobState.COMPLETED and isinstance(out[-1], JobEnded)
    assert run.training.test == done.training.test and run.steps_recovered > 0
