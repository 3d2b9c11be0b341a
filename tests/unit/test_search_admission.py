"""A search and a cross-validation are admitted with the checks `train` has (issue 25 item
13): one admission path, so what `train` refuses before anything starts, `cv`,
`search --spec` and `parallel.cross_validate` refuse too, in one line (exit 2, no job
directory), and what `train` takes (numpy values) they take."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aner_coord import parallel
from aner_coord.cli.main import main
from aner_coord.errors import RequestError


def _cli(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main([*argv, "--output", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err, err
    assert not out.exists()
    return err


def _huge_csv(path: Path, magnitude: float) -> Path:
    rows = ["small,huge,label"]
    rows += [f"{i % 5},{magnitude * ((i % 7) - 3)!r},{i % 2}" for i in range(200)]
    path.write_text("\n".join(rows) + "\n")
    return path


MAGNITUDES = [1e154, 1e200, 1e300]
OVERFLOW = "feature 'huge' (column 2 of the features) reaches"


@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_cv_refuses_features_whose_moments_overflow(
    tmp_path: Path, magnitude: float, capsys: Any
) -> None:
    data = _huge_csv(tmp_path / "huge.csv", magnitude)
    argv = ["parallel", "cv", "--data", str(data), "--seed", "1", "--folds", "2", "--epochs", "1"]
    err = _cli(argv, tmp_path / "job", capsys)
    assert OVERFLOW in err and "overflow binary64; rescale it" in err, err
    # ...as train does
    argv = ["parallel", "train", "--data", str(data), "--seed", "1", "--epochs", "1"]
    assert OVERFLOW in _cli(argv, tmp_path / "job", capsys)


@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_a_search_file_and_the_api_refuse_them_too(
    tmp_path: Path, magnitude: float, capsys: Any
) -> None:
    data = _huge_csv(tmp_path / "huge.csv", magnitude)
    spec = tmp_path / "search.toml"
    spec.write_text('data = "huge.csv"\nseed = 1\nfolds = 2\nepochs = 1\n[grid]\nlr = [1e-3]\n')
    assert OVERFLOW in _cli(["parallel", "search", "--spec", str(spec)], tmp_path / "j", capsys)
    with pytest.raises(RequestError, match=re.escape(OVERFLOW)):
        parallel.cross_validate(data=str(data), seed=1, folds=2, epochs=1, output=tmp_path / "j")
    assert not (tmp_path / "j").exists()


def test_data_that_leaves_no_test_rows_is_refused_before_the_job(
    tmp_path: Path, capsys: Any
) -> None:
    spec = tmp_path / "search.toml"
    spec.write_text("teacher = [10, 2, 2]\nseed = 1\nfolds = 2\nepochs = 1\n")
    err = _cli(["parallel", "search", "--spec", str(spec)], tmp_path / "job", capsys)
    assert err.startswith(f"aner: {spec}: 10 rows leave no test rows: use more rows"), err


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("loop", "data: cannot read {dir}/loop: Too many levels of symbolic links"),
        ("a\\u0000b", "data holds a NUL character, which no path can"),
    ],
)
def test_a_search_file_whose_data_cannot_be_a_file_is_refused(
    tmp_path: Path, data: str, expected: str, capsys: Any
) -> None:
    os.symlink("loop", tmp_path / "loop")
    spec = tmp_path / "search.toml"
    spec.write_text(f'data = "{data}"\nseed = 1\nfolds = 2\n')
    err = _cli(["parallel", "search", "--spec", str(spec)], tmp_path / "job", capsys)
    assert err == f"aner: {spec}: {expected.format(dir=tmp_path)}\n"


def test_numpy_values_in_a_grid_are_the_values_they_hold(tmp_path: Path) -> None:
    # As dense_fit takes np.float64(1e-3) for lr=: a grid's lists may hold numpy scalars.
    fit = parallel.search(
        teacher=(200, 3, 2),
        seed=1,
        folds=2,
        epochs=1,
        hidden=[4],
        grid={"lr": list(np.array([1e-3, 3e-3])), "batch": list(np.array([32, 64]))},
        execution=parallel.local(workers=1),
    )
    assert [(c["lr"], c["batch"]) for c in fit.candidate_records()] == [
        (1e-3, 32),
        (1e-3, 64),
        (3e-3, 32),
        (3e-3, 64),
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--seeds", "1,2", "--replicates", "2"], "aner: give --seeds or --replicates, not both"),
        (["--seeds", "3,4,3"], "aner: --seeds names seed 3 twice: the same fit would count twice"),
        (["--replicates", "0"], "aner: --replicates must be between 1 and 10,000, got 0"),
    ],
)
def test_cv_seeds_are_refused_in_one_line(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cv = ["parallel", "cv", "--teacher", "100,3,2", "--seed", "1", "--folds", "2"]
    assert _cli([*cv, *argv], tmp_path / "job", capsys).strip() == expected


def test_train_replicates_are_refused_as_cv_refuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = ["parallel", "train", "--teacher", "100,3,2", "--seed", "1", "--replicates", "0"]
    error = _cli(train, tmp_path / "job", capsys).strip()
    assert error == "aner: --replicates must be between 1 and 10,000, got 0"
