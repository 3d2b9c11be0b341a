"""The search file (`aner parallel search --spec`): every mistake is one line that names the
file and the key, before anything starts; and what a good file means."""

from __future__ import annotations

from pathlib import Path

import pytest

from aner_coord.computations.search.specfile import admitted_search_file, load_search_file
from aner_coord.errors import RequestError

GOOD = """\
teacher = [300, 4, 3]
seed = 2
folds = 3
epochs = 2
hidden = [8]
[grid]
lr = [1e-3, 3e-3]
batch = [32, 64]
"""


def write(tmp_path: Path, text: str, name: str = "search.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(RequestError) as caught:
        admitted_search_file(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    return message.removeprefix(f"{path}: ")


def test_a_good_file_keeps_the_grid_in_its_order(tmp_path: Path) -> None:
    request = admitted_search_file(str(write(tmp_path, GOOD)))
    assert list(request.grid) == ["lr", "batch"]
    assert request.teacher == (300, 4, 3) and request.hidden == (8,) and request.folds == 3


def test_a_relative_data_path_is_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", 'data = "rows.csv"\nseed = 1\n')
    assert load_search_file(str(path)).data == str(tmp_path / "sub" / "rows.csv")
    assert load_search_file(str(write(tmp_path, 'data = "digits"\nseed = 1\n'))).data == "digits"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("epoch = 3\n", "unknown key 'epoch': a search file takes seed, data, label,"),
        ('folds = "five"\n', "folds: expected an integer, got 'five'"),
        ("refit = 1\n", "refit: expected true or false, got 1"),
        ("patience = 0\n", "patience must be positive, got 0"),
        ("folds = 300\n", "folds must be 2..255, or 1 for train's own validation split; got 300"),
        ('optimizer = "rmsprop"\n', "optimizer must be adam or sgd, got 'rmsprop'"),
        ('group = "site"\n', "group needs a CSV file: the teacher set has no columns"),
        ("folds = 200\n", "fold 189 of 200 has no rows (257 pool rows): lower folds"),
    ],
)
def test_a_bad_top_level_key_is_named(tmp_path: Path, change: str, expected: str) -> None:
    text = GOOD.replace("folds = 3\n", "") if change.startswith("folds") else GOOD
    message = error_of(write(tmp_path, change + text))
    assert message.startswith(expected), message


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        ("lr = []", "grid.lr must be a non-empty list of values, got []"),
        ("lr = 0.1", "grid.lr must be a non-empty list of values, got 0.1"),
        ('lr = [0.1, "fast"]', "grid.lr[1]: expected `float`, got `str`, got 'fast'"),
        ("lr = [0.1, -1.0]", "grid.lr[1] must be positive, got -1.0"),
        ("hidden = [[8], [0]]", "grid.hidden[1] must be positive, got 0"),
        ("hidden = [[8], [5000]]", "grid.hidden[1] has a layer of 5,000 units; the limit is 4,096"),
        ("seed = [1, 2]", "the grid cannot vary 'seed': a seed is not an option to select; fit "),
        ("hidden_size = [1]", "the grid cannot vary 'hidden_size': it varies hidden, lr, "),
        ("epochs = [1, 2]", "epochs is given both at the top level and in the grid"),
    ],
)
def test_a_bad_grid_is_named(tmp_path: Path, grid: str, expected: str) -> None:
    head = GOOD[: GOOD.index("[grid]")].replace("hidden = [8]\n", "")
    message = error_of(write(tmp_path, f"{head}[grid]\n{grid}\n"))
    assert message.startswith(expected), message


def test_more_than_ten_thousand_fits_are_refused(tmp_path: Path) -> None:
    head = GOOD[: GOOD.index("[grid]")].replace("folds = 3", "folds = 4")
    lr = ", ".join(f"{i + 1}e-4" for i in range(100))
    batch = ", ".join(str(i + 1) for i in range(25))
    exactly = write(tmp_path, f"{head}[grid]\nlr = [{lr}]\nbatch = [{batch}]\n")
    assert len(admitted_search_file(str(exactly)).grid["lr"]) == 100  # 10,000 fits: admitted
    lr += ", 0.5"
    message = error_of(write(tmp_path, f"{head}[grid]\nlr = [{lr}]\nbatch = [{batch}]\n"))
    assert message == (
        "grid makes 2,525 candidates x 4 fold(s) = 10,100 fits; the limit is 10,000: "
        "fewer values or fewer folds"
    )


def test_a_data_file_that_does_not_parse_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("a,b,label\n1,2,x\n3,oops,y\n")
    message = error_of(write(tmp_path, 'data = "rows.csv"\nseed = 1\n'))
    assert message == (
        f"data: {tmp_path / 'rows.csv'}: line 3, column 2 ('b'): not a number: 'oops'"
    )
    message = error_of(write(tmp_path, 'data = "missing.csv"\nseed = 1\n'))
    assert message.startswith(f"data: cannot read {tmp_path / 'missing.csv'}")


def test_missing_keys_and_broken_toml_are_named(tmp_path: Path) -> None:
    assert error_of(write(tmp_path, "teacher = [300, 4, 3]\n")) == "missing key seed"
    assert error_of(write(tmp_path, "seed = \n")).startswith("not a TOML search file")
    message = error_of(write(tmp_path, "seed = 1\n"))
    assert message == "give either data FILE or teacher ROWS,FEATURES,CLASSES (exactly one)"
    assert error_of(tmp_path / "absent.toml").startswith("cannot read the search file")


def test_a_group_column_must_not_be_the_label(tmp_path: Path) -> None:
    (tmp_path / "g.csv").write_text("a,site\n1,x\n2,y\n")
    message = error_of(write(tmp_path, 'data = "g.csv"\nseed = 1\ngroup = "site"\n'))
    assert "the group column 'site' is also the label column" in message
