"""One epoch numbering everywhere a user reads it (issue 24, item 7; issue 25, item 16):
`result.json`, `model.npz`'s meta, `fits.csv`, `histories.csv`, the API and every printed
line count epochs from 1, and `status.json` counts the step in progress from 1 as its phase
and its text do. And cv and search note, as `train` does, a selected candidate still
improving at its last epoch."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import numpy as np
from support import ANER

from aner_coord import parallel
from aner_coord.computations.dense.model import load_model
from aner_coord.computations.dense.suspect import folds_still_improving

TRAIN = ["--teacher", "400,4,3", "--seed", "3", "--hidden", "8", "--epochs", "4"]


def aner(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ANER, "parallel", *argv], capture_output=True, text=True, timeout=600, check=False
    )


def test_train_counts_epochs_from_1_in_its_files_its_text_and_the_api(tmp_path: Path) -> None:
    job = tmp_path / "train"
    proc = aner("train", *TRAIN, "--workers", "1", "--output", str(job))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["schema"] == "aner-result/3"
    history = result["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    best = result["best_epoch"]
    losses = [h["validation_loss"] for h in history]
    assert 1 <= best <= 4 and losses[best - 1] == min(losses)
    assert f"best epoch {best} (" in proc.stdout
    _, meta = load_model(job / "model.npz")
    assert meta["epoch"] == best
    shown = aner("status", "--job", str(job))
    assert f"the best was epoch {best} (" in shown.stdout
    status = json.loads(aner("status", "--job", str(job), "--json").stdout)
    assert status["schema"] == "aner-status/3"
    position = status["position"]
    assert (position["epoch"], position["step"]) == (4, position["steps"])
    assert f"epoch 4 of 4, step {position['steps']} of {position['steps']}" in shown.stdout
    fit = parallel.dense_fit(
        teacher=(400, 4, 3), seed=3, hidden=8, epochs=4, execution=parallel.local(workers=1)
    )
    assert fit.best_epoch == best and [h.epoch for h in fit.history] == [1, 2, 3, 4]
    assert f"best epoch {best}" in repr(fit)


def test_a_search_counts_epochs_from_1_and_notes_a_candidate_still_improving(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "search.toml"
    spec.write_text(
        "teacher = [400, 4, 3]\nseed = 1\nfolds = 2\nepochs = 3\nhidden = [8]\n"
        "[grid]\nlr = [1e-3, 1e-2]\n"
    )
    job = tmp_path / "search"
    proc = aner("search", "--spec", str(spec), "--workers", "1", "--output", str(job))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    with (job / "fits.csv").open() as f:
        fits = list(csv.DictReader(f))
    assert [int(r["best_epoch"]) for r in fits] == [f["best_epoch"] for f in result["fits"]]
    assert all(1 <= f["best_epoch"] <= f["epochs"] == 3 for f in result["fits"])
    epochs: dict[tuple[str, str], list[int]] = {}
    with (job / "histories.csv").open() as f:
        for r in csv.DictReader(f):
            epochs.setdefault((r["candidate"], r["fold"]), []).append(int(r["epoch"]))
    assert len(epochs) == 4 + 1  # every fit, and the refit
    assert all(e == list(range(1, len(e) + 1)) for e in epochs.values())
    _, meta = load_model(job / "model.npz")
    assert meta["epoch"] == result["refit"]["epochs"]
    # Three epochs are far from done: the selected candidate's fits were still improving.
    chosen = [f for f in result["fits"] if f["candidate"] == result["selected"]]
    still = sum(1 for f in chosen if f["best_epoch"] == f["epochs"])
    assert still >= 1
    note = f"{still} of 2 fit(s) of the selected candidate reached their last epoch (3)"
    assert result["notes"] and result["notes"][0].startswith(note)
    assert f"note: {note}" in proc.stdout
    assert f"note      {note}" in aner("status", "--job", str(job)).stdout


def test_cross_validation_notes_underfitting_as_train_does() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 4))
    y = np.where(x[:, 0] > 0, 1, 0)
    cv = parallel.cross_validate(
        x, y, seed=1, folds=3, hidden=8, epochs=3, execution=parallel.local(workers=1)
    )
    assert re.match(r"\d of 3 fit\(s\) of the selected candidate reached their last", cv.notes[0])
    assert f"note: {cv.notes[0]}" in cv.summary()
    # A fit that stopped early (best epoch 2 of 7 run) is not one.
    assert folds_still_improving([1, 4], [7, 5]) is not None
    assert folds_still_improving([1, 4], [7, 5]).startswith("1 of 2 fit(s)")
    assert folds_still_improving([1, 2], [7, 8]) is None
