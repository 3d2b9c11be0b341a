"""Suspect Dense results (issue 16, item 7): features whose moments overflow are refused at
admission naming the column; a fit whose loss grew by orders of magnitude fails as
diverged; a run that used all its epochs while the validation loss still fell says so."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from aner_coord import parallel
from aner_coord.admission import admit
from aner_coord.computations.base import readable
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.dense.suspect import (
    DIVERGED_FACTOR,
    divergence,
    overflowing_feature,
    still_improving,
)
from aner_coord.errors import RequestError, cli_name
from aner_coord.requests import JobRequest, LocalExecution
from aner_worker.kernels.dense.training import EpochRecord


def epoch(e: int, train: float, validation: float | None = 1.0) -> EpochRecord:
    return EpochRecord(e, train, validation, 0.5 if validation is not None else None, 1.0)


def test_features_whose_moments_overflow_are_refused_naming_the_column(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = [
        f"{a},{b * 1e300},{c},{i % 2}" for i, (a, b, c) in enumerate(rng.uniform(-1, 1, (300, 3)))
    ]
    data = tmp_path / "big.csv"
    data.write_text("height,dose,age,label\n" + "\n".join(rows) + "\n")
    request = JobRequest(
        computation=DenseRequest(seed=1, data=str(data), epochs=1),
        execution=LocalExecution(1),
    )
    with pytest.raises(RequestError) as info:
        admit(request)
    message = info.value.render(cli_name)
    assert message.startswith(f"--data {data}: feature 'dose' (column 2 of the features) ")
    assert "overflow binary64; rescale it" in message
    # Large but harmless magnitudes pass: only an overflow is refused.
    x = rng.uniform(-1, 1, (100, 2)) * np.array([1e150, 1.0])
    assert overflowing_feature(x, np.arange(100), ["a", "b"]) is None
    x[0, 0] = 1e300
    assert overflowing_feature(x, np.arange(100), ["a", "b"]) is not None


def test_a_loss_two_orders_of_magnitude_above_a_uniform_guess_is_a_divergence() -> None:
    limit = DIVERGED_FACTOR * math.log(3)
    assert divergence([epoch(0, 1.0), epoch(1, 0.8)], None, 3) is None
    grew = divergence([epoch(0, 1.0), epoch(1, limit * 1.01)], None, 3)
    assert grew is not None and grew.startswith("the mean training loss of epoch 2 is ")
    assert grew.endswith("the fit diverged; lower --lr")
    assert "validation loss of epoch 1" in str(divergence([epoch(0, 1.0, limit * 2)], None, 3))
    assert "test loss is" in str(divergence([epoch(0, 1.0)], (limit * 2, 0.3), 3))
    assert divergence([epoch(0, 1.0)], (limit * 0.9, 0.3), 3) is None


def test_a_diverging_fit_fails_with_a_hint() -> None:
    with pytest.raises(parallel.JobFailed) as failure:
        parallel.dense_fit(
            teacher=(2000, 8, 3), seed=1, hidden=(16,), optimizer="sgd", lr=100.0, epochs=5,
            execution=parallel.local(workers=1),
        )  # fmt: skip
    assert str(failure.value).startswith("numerical divergence: the mean training loss of epoch 1")
    assert str(failure.value).endswith("the fit diverged; lower --lr")


def test_a_run_that_ends_while_still_improving_says_so() -> None:
    history = [epoch(0, 1.0, 0.9), epoch(1, 0.8, 0.7), epoch(2, 0.7, 0.6)]
    note = still_improving(history, best_epoch=2, epochs=3)
    assert note is not None and note.startswith("training reached --epochs 3 while")
    assert still_improving(history, best_epoch=1, epochs=3) is None  # the best was earlier
    assert still_improving(history[:2], best_epoch=1, epochs=3) is None  # stopped early
    fit = parallel.dense_fit(
        teacher=(3000, 8, 3), seed=1, hidden=(16,), epochs=3, execution=parallel.local(workers=1)
    )
    assert fit.best_epoch == 3  # three epochs of Adam at 1e-3 are far from done
    assert fit.notes == [still_improving(fit.history, 2, 3)]  # the training's index, from 0
    assert fit.summary().splitlines()[1] == f"note: {fit.notes[0]}"


def test_losses_print_readably() -> None:
    assert readable(0.693147) == "0.693147"
    assert readable(2.8245505215625308e298) == "2.82455e+298"
    assert readable(1e-9) == "1e-09" and readable(0.0) == "0.000000"


def test_the_still_improving_note_names_one_step_an_epoch_and_the_batch_used() -> None:
    history = [epoch(0, 1.0, 0.9), epoch(1, 0.8, 0.7), epoch(2, 0.7, 0.6)]
    one = still_improving(history, 2, 3, steps_per_epoch=1, batch=120)
    assert one is not None and "each epoch was one optimizer step (batch 120 holds" in one
    many = still_improving(history, 2, 3, steps_per_epoch=4, batch=256)
    assert many is not None and many.endswith(
        "too few epochs: more --epochs may give a better model"
    )
    # 150 rows: the batch used, recorded, is the training rows (not the option's 256).
    x = np.random.default_rng(0).normal(size=(150, 3))
    fit = parallel.dense_fit(
        x, (x[:, 0] > 0).astype(int), seed=1, hidden=(8,), epochs=3,
        execution=parallel.local(workers=1),
    )  # fmt: skip
    assert fit.batch == fit.roles["train"] < 256
    assert fit.notes == [still_improving(fit.history, 2, 3, steps_per_epoch=1, batch=fit.batch)]
    assert f"batch {fit.batch} holds every training row" in fit.notes[0]


def test_tiny_data_trains_without_a_validation_row_and_says_so() -> None:
    # 10 rows at seed 0 draw no validation row (section 9, Tiny data): no refusal; early
    # stopping watches the training loss and the final model is kept.
    x = np.random.default_rng(0).normal(size=(10, 2))
    fit = parallel.dense_fit(
        x, (x[:, 0] > 0).astype(int), seed=0, hidden=(8,), epochs=100, lr=1.0,
        test_fraction=0, execution=parallel.local(workers=1),
    )  # fmt: skip
    assert fit.roles["validation"] == 0 and fit.roles["train"] == 10
    assert fit.notes[-1].startswith("the draw of 10 rows at --validation-fraction 0.15 gave no")
    assert all(math.isnan(h.validation_loss) for h in fit.history)
    assert fit.best_epoch == len(fit.history)  # the final model
    # It stopped (the loss reached 0 at lr 1): its last 5 epochs never beat the best before.
    losses = [h.train_loss for h in fit.history]
    assert len(losses) < 100 and min(losses[-5:]) >= min(losses[:-5])
