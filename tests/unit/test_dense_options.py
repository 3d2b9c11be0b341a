"""One validator per Dense option (`aner_coord/computations/dense/options.py`, issue 26 item
1): every invalid value of every bounded option is refused alike by every path that admits
it (`dense_fit`, `cross_validate`, `search` with the option fixed or in its grid, `train`,
`cv`, `search --spec` fixed or in the grid), before any worker starts: the same words, with
the option spelled as that path spells it, a RequestError or exit 2, and no job directory.

The reproduction: `cross_validate(..., precision="float16")` was admitted and then failed
blaming worker "local-1"; `dense_fit` refused it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aner_coord import parallel
from aner_coord.cli.main import main
from aner_coord.computations.dense.options import CHECKS, check_option
from aner_coord.computations.search.request import GRID_KEYS
from aner_coord.errors import RequestError

TEACHER = (200, 3, 2)
NAME = "<option>"

# Every bounded option's invalid values (chunk: a search's rows of a chunk within each fit;
# for dense_fit and train it is the execution's chunk, refused by admission in the same words).
INVALID: list[tuple[str, Any]] = [
    ("hidden", [0]),
    ("hidden", [5000]),
    ("hidden", [1] * 17),
    ("batch", 0),
    ("batch", 2_000_000),
    ("epochs", 0),
    ("epochs", 10_001),
    ("patience", 0),
    ("optimizer", "rmsprop"),
    ("precision", "float16"),
    ("lr", 0.0),
    ("lr", -1.0),
    ("lr", math.inf),
    ("lr", math.nan),
    ("target_accuracy", 0.0),
    ("target_accuracy", 1.5),
    ("chunk", 0),
]
CASES = [pytest.param(name, value, id=f"{name}={value!r}") for name, value in INVALID]
# Options the command line refuses while parsing (argparse's `choices`): exit 2 too, naming
# the flag and the value, in argparse's words.
CHOICES = {"optimizer", "precision"}


def expected(name: str, value: Any) -> str:
    """The refusal of the one validator, with the option's spelling left out."""
    with pytest.raises(RequestError) as caught:
        check_option(name, value)
    return caught.value.render(lambda _: NAME)


def test_every_bounded_option_has_its_invalid_values_here() -> None:
    # The delimiter goes with a CSV file, not with arrays or a grid: its refusals are tested
    # with the reader (tests/unit/test_dense_data.py).
    assert {name for name, _ in INVALID} == set(CHECKS) - {"teacher", "data", "delimiter"}


# -- the API -------------------------------------------------------------------------------


def _api_error(call: Callable[..., Any], out: Path, **arguments: Any) -> str:
    with pytest.raises(RequestError) as caught:
        call(teacher=TEACHER, seed=1, execution=parallel.local(workers=1), output=out, **arguments)
    assert not out.exists()  # nothing was started or written
    return str(caught.value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_dense_fit_refuses(tmp_path: Path, name: str, value: Any) -> None:
    message = _api_error(parallel.dense_fit, tmp_path / "job", **{"epochs": 1, name: value})
    assert message.replace(f"{name}=", NAME, 1) == expected(name, value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_cross_validate_refuses(tmp_path: Path, name: str, value: Any) -> None:
    options = {"epochs": 1, "folds": 2, name: value}
    message = _api_error(parallel.cross_validate, tmp_path / "job", **options)
    assert message.replace(f"{name}=", NAME, 1) == expected(name, value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_search_refuses_a_fixed_option(tmp_path: Path, name: str, value: Any) -> None:
    grid = {"lr": [1e-3, 3e-3]} if name != "lr" else {"batch": [16, 32]}
    options = {"folds": 2, "grid": grid, name: value}
    message = _api_error(parallel.search, tmp_path / "job", **options)
    assert message.replace(f"{name}=", NAME, 1) == expected(name, value)


GRID_CASES = [case for case in CASES if case.values[0] in GRID_KEYS]


@pytest.mark.parametrize(("name", "value"), GRID_CASES)
def test_search_refuses_a_grid_value(tmp_path: Path, name: str, value: Any) -> None:
    good = {"hidden": [4], "optimizer": "sgd", "lr": 1e-2}.get(name, 4)
    message = _api_error(parallel.search, tmp_path / "job", folds=2, grid={name: [good, value]})
    assert message.replace(f"grid.{name}[1]", NAME, 1) == expected(name, value)


# -- the command line ----------------------------------------------------------------------


def _flag_value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _cli(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    try:
        code = main([*argv, "--output", str(out)])
    except SystemExit as parsing:  # argparse's own refusal
        code = parsing.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err.strip()


def _check_cli(err: str, name: str, value: Any) -> None:
    flag = "--" + name.replace("_", "-")
    if name in CHOICES:
        assert err.startswith(f"aner: error: argument {flag}: invalid choice: {value!r}"), err
        return
    assert err.removeprefix("aner: ").replace(flag, NAME, 1) == expected(name, value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_train_refuses(tmp_path: Path, name: str, value: Any, capsys: Any) -> None:
    flag = "--" + name.replace("_", "-")
    argv = ["parallel", "train", "--teacher", "200,3,2", "--seed", "1", "--workers", "1"]
    err = _cli([*argv, flag, _flag_value(value)], tmp_path / "job", capsys)
    _check_cli(err, name, value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_cv_refuses(tmp_path: Path, name: str, value: Any, capsys: Any) -> None:
    flag = "--" + name.replace("_", "-")
    argv = ["parallel", "cv", "--teacher", "200,3,2", "--seed", "1", "--folds", "2"]
    err = _cli([*argv, "--workers", "1", flag, _flag_value(value)], tmp_path / "job", capsys)
    _check_cli(err, name, value)


def _toml(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf"
    return json.dumps(value)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_a_search_file_refuses_a_fixed_option(
    tmp_path: Path, name: str, value: Any, capsys: Any
) -> None:
    spec = tmp_path / "search.toml"
    grid = "lr = [1e-3]" if name != "lr" else "batch = [16]"
    spec.write_text(f"teacher = [200, 3, 2]\nseed = 1\nfolds = 2\n{name} = {_toml(value)}\n"
                    f"[grid]\n{grid}\n")  # fmt: skip
    argv = ["parallel", "search", "--spec", str(spec), "--workers", "1"]
    err = _cli(argv, tmp_path / "job", capsys)
    assert err.removeprefix(f"aner: {spec}: ").replace(name, NAME, 1) == expected(name, value)


@pytest.mark.parametrize(("name", "value"), GRID_CASES)
def test_a_search_file_refuses_a_grid_value(
    tmp_path: Path, name: str, value: Any, capsys: Any
) -> None:
    spec = tmp_path / "search.toml"
    good = {"hidden": [4], "optimizer": "sgd", "lr": 1e-2}.get(name, 4)
    spec.write_text(f"teacher = [200, 3, 2]\nseed = 1\nfolds = 2\n"
                    f"[grid]\n{name} = [{_toml(good)}, {_toml(value)}]\n")  # fmt: skip
    argv = ["parallel", "search", "--spec", str(spec), "--workers", "1"]
    err = _cli(argv, tmp_path / "job", capsys)
    where = f"grid.{name}[1]"
    assert err.removeprefix(f"aner: {spec}: ").replace(where, NAME, 1) == expected(name, value)
