"""Splits that are the user's, and groups that govern every role (issue 24, item 5;
docs/contracts.md, sections 9 and 12), end to end with real `aner` processes and workers:
grouped wine data whose groups never straddle the test and the pool (the reproduction: 18
of 30 did), `train --group` and `groups=` placed alike on 1 and 2 local workers and a pipe
group, the fractions as options (0 for no test), and a split the user made, from the
command line and the API. Expected roles and folds come from the independent references."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import dense_reference
import numpy as np
import pytest
import search_reference as ref
from support import result_of, run_aner, write_pipe_pair

from aner_coord import parallel
from aner_coord.errors import RequestError

pytest.importorskip("sklearn")
SMALL = {"seed": 1, "epochs": 2, "hidden": 8}
SMALL_FLAGS = ["--seed", "1", "--epochs", "2", "--hidden", "8", "--quiet"]


class Wine:
    """scikit-learn's wine data with a site column of 30 groups (a function of the row)."""

    def __init__(self, root: Path) -> None:
        from sklearn.datasets import load_wine

        data = load_wine()
        self.x: np.ndarray[Any, Any] = data.data
        self.y: np.ndarray[Any, Any] = data.target
        self.site = [f"s{(r * 7) % 30}" for r in range(self.y.size)]
        self.csv = root / "wine_groups.csv"
        with self.csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*data.feature_names, "site", "label"])
            for r in range(self.y.size):
                writer.writerow([*map(repr, self.x[r].tolist()), self.site[r], int(self.y[r])])


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Wine:
    return Wine(tmp_path_factory.mktemp("wine"))


def described(job: Path) -> dict[str, Any]:
    """What the manifest records of the request (roles, folds, the split rule)."""
    out: dict[str, Any] = json.loads((job / "run-manifest.json").read_text())["request"]
    return out


def params(job: Path) -> list[np.ndarray[Any, Any]]:
    with np.load(job / "model.npz", allow_pickle=False) as archive:
        return [archive[name] for name in sorted(archive.files) if name[0] in "Wb"]


def straddling(groups: list[str], test: np.ndarray[Any, Any]) -> int:
    """Groups with rows both in the test and outside it."""
    return sum(len({bool(test[r]) for r, g in enumerate(groups) if g == name}) > 1
               for name in set(groups))  # fmt: skip


def test_grouped_cv_keeps_each_group_wholly_in_the_test_or_the_pool(
    wine: Wine, tmp_path: Path
) -> None:
    # The reproduction: the per-row test rows split 18 of the 30 sites.
    assert straddling(wine.site, ~ref.pool_mask(1, wine.y.size)) > 10
    expected = ref.grouped_folds(1, wine.site, 3)
    assert straddling(wine.site, expected == 255) == 0
    job = tmp_path / "cv"
    done = run_aner(
        "parallel", "cv", "--data", str(wine.csv), "--label", "label", "--group", "site",
        "--folds", "3", *SMALL_FLAGS, "--output", str(job), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    request = described(job)
    assert request["folds_sha256"] == ref.fold_sha256(expected)
    assert request["test_rows"] == int(np.sum(expected == 255)) > 0
    assert (request["split"], request["groups"], request["test_fraction"]) == ("groups", 30, 0.15)
    assert request["validation_fraction"] is None  # the folds validate
    # The API: `group=` an array (refused before), on a pipe group: the same folds, and
    # every fit's numbers bitwise those of the local run.
    pipes = parallel.cluster(write_pipe_pair(tmp_path / "cluster"))
    api = parallel.cross_validate(
        wine.x, wine.y, group=wine.site, folds=3, output=tmp_path / "api", execution=pipes,
        **SMALL,
    )  # fmt: skip
    assert described(tmp_path / "api")["folds_sha256"] == request["folds_sha256"]
    assert api.result.test_rows == request["test_rows"]
    numbers = ("fold", "validation_loss", "validation_accuracy", "best_epoch")
    local = [tuple(f[k] for k in numbers) for f in result_of(job)["fits"]]
    assert [tuple(f[k] for k in numbers) for f in api.records()] == local
    assert result_of(job)["test_loss"] == api.test_loss


def test_train_groups_take_one_role_each_wherever_the_fit_runs(wine: Wine, tmp_path: Path) -> None:
    # 21 training groups of 30 hold 125 rows: chunks of 64, so that two workers share a step.
    roles = ref.group_role_codes(1, wine.site)
    job = tmp_path / "train"
    done = run_aner(
        "parallel", "train", "--data", str(wine.csv), "--label", "label", "--group", "site",
        *SMALL_FLAGS, "--chunk", "64", "--output", str(job), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    request = described(job)
    assert request["roles_sha256"] == ref.fold_sha256(roles)  # the SHA256 of the role bytes
    assert request["roles"] == {
        name: int(np.sum(roles == code))
        for code, name in enumerate(("train", "validation", "test"))
    }
    assert params(job)[0].shape[1] == 13  # the site column is not a feature
    pipes = parallel.cluster(write_pipe_pair(tmp_path / "cluster"))
    placements = [parallel.local(workers=1), parallel.local(workers=2), pipes]
    for n, execution in enumerate(placements):
        fit = parallel.dense_fit(
            wine.x, wine.y, groups=wine.site, execution=execution, chunk=64,
            output=tmp_path / f"api{n}", **SMALL,
        )  # fmt: skip
        for code, rows in enumerate((fit.train_rows, fit.validation_rows, fit.test_rows)):
            assert np.array_equal(rows, np.flatnonzero(roles == code))
        for a, b in zip(params(job), params(tmp_path / f"api{n}"), strict=True):
            assert np.array_equal(a, b)  # bitwise, on 1 and 2 workers and a pipe group


def test_the_fractions_are_options_and_zero_means_no_test(wine: Wine, tmp_path: Path) -> None:
    fit = parallel.dense_fit(
        wine.x, wine.y, test_fraction=0, validation_fraction=0.25, output=tmp_path / "job",
        **SMALL,
    )  # fmt: skip
    expected = dense_reference.roles(1, wine.y.size, 0.0, 0.25)
    assert np.array_equal(fit.validation_rows, np.flatnonzero(expected == 1))
    assert fit.test_rows.size == 0 and fit.test_accuracy is None and fit.test_loss is None
    assert "no test rows" in fit.summary()
    result = result_of(tmp_path / "job")
    assert (result["test_loss"], result["test_accuracy"]) == (None, None)
    request = described(tmp_path / "job")
    assert (request["test_fraction"], request["validation_fraction"]) == (0.0, 0.25)
    shown = run_aner("parallel", "status", "--job", str(tmp_path / "job"))
    assert shown.returncode == 0 and "no test rows" in shown.stdout
    # A cross-validation without a held-out test: the refit has no test metrics.
    cv = parallel.cross_validate(
        wine.x, wine.y, groups=wine.site, test_fraction=0, folds=2, **SMALL
    )
    assert cv.result.test_rows == 0 and sum(cv.result.rows_per_fold) == wine.y.size
    assert cv.test_accuracy is None and cv.result.refit.test_loss is None
    assert "no test rows" in cv.summary()


def test_a_split_you_made_is_taken_as_it_is(wine: Wine, tmp_path: Path) -> None:
    # The reproduction: 112 rows a user had split off for training became 86 / 17 / 9.
    x, y = wine.x, wine.y
    own = parallel.dense_fit(x[:112], y[:112], validation=(x[112:142], y[112:142]), **SMALL)
    assert own.roles == {"train": 112, "validation": 30, "test": 0}
    assert np.array_equal(own.train_rows, np.arange(112)) and own.test_accuracy is None
    split = ["train"] * 112 + ["validation"] * 30 + ["test"] * 36
    fit = parallel.dense_fit(x, y, split=split, output=tmp_path / "api", **SMALL)
    assert np.array_equal(fit.test_rows, np.arange(142, 178))
    assert described(tmp_path / "api")["split"] == "given"
    # The command line's --split-column: that column is not a feature; the same model.
    data = tmp_path / "split.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*(f"f{j}" for j in range(13)), "role", "label"])
        for r in range(y.size):
            writer.writerow([*map(repr, x[r].tolist()), split[r], int(y[r])])
    job = tmp_path / "cli"
    done = run_aner(
        "parallel", "train", "--data", str(data), "--label", "label", "--split-column",
        "role", *SMALL_FLAGS, "--output", str(job), timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert result_of(job)["roles"] == {"train": 112, "validation": 30, "test": 36}
    for a, b in zip(params(job), params(tmp_path / "api"), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--split-column", "site", "--test-fraction", "0.2"],
         "--split-column decides every row's role: give it without --test-fraction"),
        (["--split-column", "site"], "--split-column row 0 is 's0': each row must be train,"),
        (["--group", "site", "--test-fraction", "1"], "--test-fraction must be in [0, 1), got 1.0"),
        (["--group", "nowhere"], "no column named 'nowhere' in the header"),
    ],
)  # fmt: skip
def test_a_bad_split_is_one_line_and_nothing_starts(
    wine: Wine, tmp_path: Path, flags: list[str], message: str
) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "train", "--data", str(wine.csv), "--label", "label", *flags,
        *SMALL_FLAGS, "--output", str(job),
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not job.exists()


def test_the_remedy_names_flags_that_exist(tmp_path: Path) -> None:
    done = run_aner("parallel", "train", "--teacher", "5,5,3", *SMALL_FLAGS,
                    "--output", str(tmp_path / "job"))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "5 rows leave no" in done.stderr and "--test-fraction" in done.stderr
    cv = run_aner(
        "parallel", "cv", "--teacher", "300,4,2", "--folds", "3", "--validation-fraction",
        "0.2", *SMALL_FLAGS, "--output", str(tmp_path / "cv"),
    )  # fmt: skip
    assert cv.returncode == 2 and "--validation-fraction applies to train's own" in cv.stderr


def test_the_api_refuses_a_bad_split_naming_the_argument(wine: Wine) -> None:
    x, y = wine.x, wine.y
    calls = [
        (lambda: parallel.dense_fit(x, y, split=["train"] * 5, seed=1), "split= must hold one"),
        (lambda: parallel.dense_fit(x, y, groups=wine.site[:-1], seed=1), "groups= must hold"),
        (lambda: parallel.dense_fit(x, y, groups=wine.site, validation=(x, y), seed=1),
         "takes validation= or groups="),
        (lambda: parallel.cross_validate(x, y, validation=(x, y), seed=1),
         "cross_validate() takes no validation=: its folds validate"),
        (lambda: parallel.dense_fit(x, y, split=["train"] * 178, test_fraction=0.1, seed=1),
         "split_column= decides every row's role: give it without test_fraction="),
        (lambda: parallel.dense_fit(data=str(wine.csv), groups=wine.site, seed=1),
         "as an array together with arrays X and y"),
    ]  # fmt: skip
    for call, message in calls:
        with pytest.raises(RequestError) as info:
            call()
        assert message in str(info.value)
