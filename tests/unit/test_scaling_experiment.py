"""Experiment files have limits, checked before anything of their cases is read or run:
repetitions, the number of cases, the length of names (`aner_coord.scaling.experiment`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aner_coord.errors import RequestError
from aner_coord.scaling.experiment import MAX_CASES, MAX_NAME, MAX_REPETITIONS, load_experiment

COMPUTATION = '[computation]\nkind = "monte-carlo"\nsamples = 1000\nseed = 1\n'


def case(name: str, extra: str = "") -> str:
    return f'[[case]]\nname = "{name}"\nworkers = 1\n{extra}'


def write(tmp_path: Path, top: str, cases: str) -> str:
    path = tmp_path / "experiment.toml"
    path.write_text(f"{top}\n{COMPUTATION}\n{cases}")
    return str(path)


@pytest.mark.parametrize(
    ("top", "cases", "words"),
    [
        ("repetitions = 101", case("a"), "repetitions = 101; the limit is 100"),
        (
            f"repetitions = {2**63 - 1}",
            case("a"),
            "repetitions = 9,223,372,036,854,775,807; the limit is 100",
        ),
        ("", "".join(case(f"c{i}") for i in range(101)), "101 cases; the limit is 100"),
        # Each case names a cluster file that does not exist: refused before any is read.
        (
            "",
            "".join(case(f"c{i}").replace("workers = 1", 'cluster = "nope"') for i in range(500)),
            "500 cases; the limit is 100",
        ),
        ("", case("n" * 201), "a case name of 201 characters ('nnnnnnnnnnnnnnnnn"),
        (f'name = "{"m" * (1 << 19)}"', case("a"), "a name of 524,288 characters"),
        # A file over the 1 MiB of a spec is refused before it is parsed.
        (f'name = "{"m" * (4 << 20)}"', case("a"), "over the limit of 1,048,576 bytes"),
    ],
    ids=["repetitions_101", "repetitions_2_63_minus_1", "cases_101", "cases_500_unread",
         "case_name_201", "name_512KiB", "file_4MiB"],
)  # fmt: skip
def test_an_experiment_over_a_limit_is_refused_in_one_short_line(
    tmp_path: Path, top: str, cases: str, words: str
) -> None:
    path = write(tmp_path, top, cases)
    with pytest.raises(RequestError) as caught:
        load_experiment(path)
    message = str(caught.value)
    assert message.startswith(f"experiment {path}: ")
    assert words in message
    assert len(message) < 400 and "\n" not in message


def test_an_experiment_at_every_limit_is_accepted(tmp_path: Path) -> None:
    cases = "".join(case(f"{i:03d}" + "x" * (MAX_NAME - 3)) for i in range(MAX_CASES))
    path = write(tmp_path, f'name = "{"m" * MAX_NAME}"\nrepetitions = {MAX_REPETITIONS}', cases)
    experiment = load_experiment(path)
    assert (len(experiment.cases), experiment.repetitions) == (MAX_CASES, MAX_REPETITIONS)


DENSE = (
    '[computation]\nkind = "dense"\nteacher = [200, 4, 2]\nseed = 1\nhidden = [3]\n'
    'epochs = 1\nprecision = "{precision}"\n'
)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_a_float32_experiment_over_several_chunks_is_refused_before_it_runs(
    tmp_path: Path, precision: str
) -> None:
    path = tmp_path / "dense.toml"
    cases = case("c64", "chunk = 64\n") + case("c32", "chunk = 32\n")
    path.write_text(DENSE.format(precision=precision) + cases)
    if precision == "float64":  # plans of any chunk agree within the comparison's tolerance
        assert [c.chunk for c in load_experiment(str(path)).cases] == [64, 32]
        return
    with pytest.raises(RequestError) as caught:
        load_experiment(str(path))
    assert "float32 results agree bit for bit only at one chunk" in str(caught.value)
    assert "chunks 32, 64" in str(caught.value)
    same = case("a", "chunk = 32\n") + case("b", "chunk = 32\n").replace(
        "workers = 1", "workers = 2"
    )
    path.write_text(DENSE.format(precision=precision) + same)
    assert [c.chunk for c in load_experiment(str(path)).cases] == [32, 32]


def test_a_case_whose_cluster_path_holds_a_nul_is_refused(tmp_path: Path) -> None:
    # It was an "internal error": os.lstat raised ValueError (issue 25, item 13).
    path = write(tmp_path, "", case("c").replace("workers = 1", 'cluster = "a\\u0000b"'))
    with pytest.raises(RequestError) as caught:
        load_experiment(path)
    assert str(caught.value).endswith(r"a\0b: the path holds a NUL character, which no path can")
