"""`Training.snapshot` / `restore`: a training stopped after any committed pass and continued
from its snapshot in a fresh `Training` ends with the bits of the uninterrupted one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aner_worker.kernels.dense.data import TeacherDataset
from aner_worker.kernels.dense.fit import fit_whole
from aner_worker.kernels.dense.network import prepare
from aner_worker.kernels.dense.plan import assign_roles, bounds
from aner_worker.kernels.dense.rows import Frozen, statistics
from aner_worker.kernels.dense.training import Training, TrainingOptions, TrainingRows

DATA = TeacherDataset(600, 6, 3, seed=5)
EMPTY: np.ndarray = np.empty(0)


def _training(**options: object) -> Training:
    roles = assign_roles(3, DATA.n_rows, 0.2, 0.2)
    rows = TrainingRows(roles.train, roles.validation, roles.test)
    opts = TrainingOptions(seed=3, hidden=(8,), batch=64, epochs=4, chunk=32, patience=2)
    opts = dataclasses.replace(opts, **options)  # type: ignore[arg-type]
    return Training(opts, rows, DATA.n_features, DATA.n_classes)


def _same(a: Training, b: Training) -> None:
    assert a.done and b.done
    assert np.array_equal(a.flat, b.flat) and np.array_equal(a.best_flat, b.best_flat)
    assert a.test == b.test and a.best_epoch == b.best_epoch
    assert (a.committed, a.rows_processed) == (b.committed, b.rows_processed)
    fields = [(h.epoch, h.train_loss, h.validation_loss, h.validation_accuracy) for h in a.history]
    assert fields == [
        (h.epoch, h.train_loss, h.validation_loss, h.validation_accuracy) for h in b.history
    ]


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("stop_after", [0, 3, 7, 13])
def test_restored_training_ends_with_the_same_bits(optimizer: str, stop_after: int) -> None:
    whole = fit_whole(_training(optimizer=optimizer), DATA)
    first = fit_whole(_training(optimizer=optimizer), DATA, max_steps=stop_after)
    assert first.committed == stop_after and not first.done
    snap = first.snapshot()
    fit_whole(first, DATA)  # the snapshot is a copy: going on changes nothing in it
    resumed = _training(optimizer=optimizer)
    resumed.restore(snap)
    assert resumed.committed == stop_after
    _same(whole, fit_whole(resumed, DATA))


def _drive(t: Training, passes: int | None = None) -> Training:
    """Commit `passes` passes of `t` (all of them: None), each chunk computed here."""
    done = 0
    while (passes is None or done < passes) and (spec := t.next_pass()) is not None:
        norm = t.normalisation
        mean, std = (norm.mean, norm.std) if norm is not None else (EMPTY, EMPTY)
        flat = prepare(spec.flat, t.sizes, t.options.precision) if spec.flat is not None else None
        frozen = Frozen(flat, mean, std)
        for index, (c0, c1) in enumerate(bounds(spec.items, t.options.chunk)):
            t.accept(index, statistics(spec.step, DATA, spec.rows[c0:c1], frozen))
        t.commit()
        done += 1
    return t


def test_every_pass_boundary_resumes_exactly() -> None:
    """Normalisation, steps, validation and test passes: a snapshot after any of them."""
    whole = _drive(_training())
    total = 1 + whole.committed + len(whole.history) + 1
    for passes in range(total):
        snap = _drive(_training(), passes).snapshot()
        resumed = _training()
        resumed.restore(snap)
        _same(whole, _drive(resumed))


def test_a_snapshot_of_another_training_is_refused_naming_what() -> None:
    snap = fit_whole(_training(), DATA, max_steps=2).snapshot()
    other = _training(hidden=(9,))
    with pytest.raises(ValueError, match="parameter shapes"):
        other.restore(snap)
    with pytest.raises(ValueError, match="optimizer"):
        _training(optimizer="sgd").restore(snap)
    bad = dataclasses.replace(snap, epoch=99)
    with pytest.raises(ValueError, match="epoch 99"):
        _training().restore(bad)
