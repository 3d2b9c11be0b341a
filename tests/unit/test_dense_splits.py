"""Which role each row takes (`aner_coord/computations/dense/splits.py`, docs/contracts.md,
sections 9 and 12; issue 24, item 5): groups that govern every role and every fold, the
fractions as options, a split the user made. Checked against the independent references
(tests/search_reference.py, tests/dense_reference.py: numpy's own Philox and loops)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dense_reference
import numpy as np
import pytest
import search_reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_coord.computations.dense import splits
from aner_coord.computations.search import folds
from aner_coord.computations.search.computation import prepare
from aner_coord.computations.search.request import SearchRequest
from aner_coord.computations.search.specfile import admitted_search_file
from aner_coord.errors import RequestError, cli_name
from aner_worker.kernels.dense.streams import TEST

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
SETTINGS = settings(max_examples=60, deadline=None)
# Random group vectors: few or many groups, each of any size, labels of any text.
group_vectors = st.lists(
    st.text(min_size=1, max_size=6).map(str.strip).filter(bool), min_size=1, max_size=40
).flatmap(lambda names: st.lists(st.sampled_from(names), min_size=1, max_size=300))


@given(seed=SEEDS, groups=group_vectors, k=st.integers(2, 6), test=st.floats(0.0, 0.5))
@SETTINGS
def test_no_group_spans_two_roles_or_two_folds(
    seed: int, groups: list[str], k: int, test: float
) -> None:
    roles = splits.group_codes(seed, groups, test, 0.2)
    assert np.array_equal(roles, ref.group_role_codes(seed, groups, test, 0.2))
    fold_bytes = folds.grouped(groups, k, roles != TEST)
    for g in set(groups):
        rows = [r for r, label in enumerate(groups) if label == g]
        assert len({int(roles[r]) for r in rows}) == 1  # one role
        assert len({int(fold_bytes[r]) for r in rows}) == 1  # one fold (or all test: 255)
    # The search's pool (folds validate: no validation share) is the reference's: whole
    # groups leave for the test.
    pool = splits.group_codes(seed, groups, test, 0.0) != TEST
    assert np.array_equal(pool, ref.group_pool_mask(seed, groups, test))


@given(seed=SEEDS, groups=group_vectors, order=st.randoms(use_true_random=False))
@SETTINGS
def test_the_roles_depend_on_the_labels_and_the_seed_not_the_row_order(
    seed: int, groups: list[str], order: Any
) -> None:
    whole = splits.group_codes(seed, groups, 0.15, 0.15)
    permutation = list(range(len(groups)))
    order.shuffle(permutation)
    again = splits.group_codes(seed, [groups[r] for r in permutation], 0.15, 0.15)
    assert np.array_equal(again, whole[permutation])


@given(
    seed=SEEDS,
    n_groups=st.integers(1, 60),
    test=st.sampled_from([0.0, 0.05, 0.15, 0.3]),
    validation=st.sampled_from([0.0, 0.01, 0.15, 0.4]),
)
@SETTINGS
def test_no_wanted_role_is_empty_when_the_groups_allow_it(
    seed: int, n_groups: int, test: float, validation: float
) -> None:
    # Issue 38, item 2: the groups ordered by their draw, each role its share, rounded so
    # that no wanted role is empty; fewer groups than wanted roles are refused naming them.
    groups = [f"g{g}" for g in range(n_groups) for _ in range(3)]
    wanted = {splits.TRAIN} | ({TEST} if test > 0 else set())
    wanted |= {splits.VALIDATION} if validation > 0 else set()
    if n_groups < len(wanted):
        with pytest.raises(RequestError, match=f"{n_groups} group\\(s\\) cannot fill the"):
            splits.check_group_count(n_groups, test, validation)
        return
    codes = splits.group_codes(seed, groups, test, validation)
    assert np.array_equal(codes, ref.group_role_codes(seed, groups, test, validation))
    per_group = codes[::3]
    assert wanted <= set(per_group.tolist()) <= wanted
    for role, fraction in ((TEST, test), (splits.VALIDATION, validation)):
        assert abs(int(np.sum(per_group == role)) - fraction * n_groups) < 2


@given(seed=SEEDS, n=st.integers(0, 500))
@SETTINGS
def test_ungrouped_data_keeps_the_per_row_rule_bit_for_bit(seed: int, n: int) -> None:
    rule = splits.rule_of(None, None, None, None)
    assert (rule.test_fraction, rule.validation_fraction) == (0.15, 0.15)
    assert np.array_equal(splits.codes_of(seed, n, rule), dense_reference.roles(seed, n))
    other = splits.rule_of(0.0, 0.4, None, None)
    assert np.array_equal(splits.codes_of(seed, n, other), dense_reference.roles(seed, n, 0.0, 0.4))


def test_array_values_are_the_texts_a_csv_holds() -> None:
    assert splits.label_texts(np.array([3, 3.0, 2.5]), "groups") == ["3", "3", "2.5"]
    assert splits.label_texts([" a ", "b"], "groups") == ["a", "b"]
    for bad, message in (
        ([1.0, float("nan")], r"groups= has a missing or non-finite value at \[1\]"),
        (["a", None], r"groups= has a missing value at \[1\]"),
        (["a", " "], r"groups= has an empty value at \[1\]"),
        ([[1, 2]], "groups= must be a 1-D array"),
    ):
        with pytest.raises(RequestError, match=message):
            splits.label_texts(bad, "groups")
    with pytest.raises(RequestError, match=r"one value per row of X \(3\), got 2"):
        splits.label_texts(["a", "b"], "groups", 3)


@pytest.mark.parametrize(
    ("test", "validation", "used", "message"),
    [
        (-0.1, None, True, "--test-fraction must be in [0, 1), got -0.1"),
        (1.0, None, True, "--test-fraction must be in [0, 1), got 1.0"),
        (True, None, True, "--test-fraction must be a number in [0, 1), got True"),
        (None, 0.0, True, "--validation-fraction must be positive"),
        (0.5, 0.5, True, "--test-fraction 0.5 and --validation-fraction 0.5 leave no training"),
        (None, 0.2, False, "--validation-fraction applies to train's own validation split"),
    ],
)
def test_a_bad_fraction_is_refused_naming_its_flag(
    test: object, validation: object, used: bool, message: str
) -> None:
    with pytest.raises(RequestError) as info:
        splits.fractions(test, validation, validation_used=used)
    assert message in info.value.render(cli_name)


def test_a_zero_test_fraction_is_allowed() -> None:
    assert splits.fractions(0, None, validation_used=True) == (0.0, 0.15)
    assert splits.fractions(0.0, 0.3, validation_used=True) == (0.0, 0.3)


def test_a_given_split_is_taken_as_it_is_and_refused_in_one_line() -> None:
    given = ["train", "Validation", " test ", "train"]
    assert splits.given_codes(given, "split_column").tolist() == [0, 1, 2, 0]
    for values, message in (
        (["train", "validation", "tset"], r"--split-column row 2 is 'tset': each row must be"),
        (["validation", "test"], "--split-column has no train rows"),
        (["train", "test"], "--split-column has no validation rows"),
    ):
        with pytest.raises(RequestError) as info:
            splits.given_codes(values, "split_column")
        assert message in info.value.render(cli_name)
    assert splits.given_codes(["train", "test"], "split_column", validation_needed=False).size
    for extra, flag in (
        ({"groups": ["a"] * 4}, "--group"),
        ({"test_fraction": 0.2}, "--test-fraction"),
        ({"validation_fraction": 0.2}, "--validation-fraction"),
    ):
        options = {"test_fraction": None, "validation_fraction": None, "groups": None} | extra
        with pytest.raises(RequestError) as info:
            splits.rule_of(
                options["test_fraction"], options["validation_fraction"], options["groups"], given
            )
        assert info.value.render(cli_name) == (
            f"--split-column decides every row's role: give it without {flag}"
        )


def test_a_search_file_takes_the_fractions_and_the_split_keys(tmp_path: Path) -> None:
    spec = tmp_path / "search.toml"
    spec.write_text("teacher = [300, 4, 3]\nseed = 2\nfolds = 1\ntest_fraction = 0.0\n"
                    "validation_fraction = 0.3\n[grid]\nlr = [1e-3]\n")  # fmt: skip
    request = admitted_search_file(str(spec))
    assert (request.test_fraction, request.validation_fraction) == (0.0, 0.3)
    described = prepare(request).describe()
    assert (described["test_rows"], described["test_fraction"]) == (0, 0.0)
    assert described["rows_per_fold"][0] == int(
        np.sum(dense_reference.roles(2, 300, 0.0, 0.3) == 1)
    )
    spec.write_text('teacher = [300, 4, 3]\nseed = 2\nsplit_column = "role"\n')
    with pytest.raises(RequestError, match="split_column needs a CSV file: the teacher set"):
        admitted_search_file(str(spec))


def test_one_fold_with_groups_is_section_9s_grouped_split(tmp_path: Path) -> None:
    # Refused before ("needs folds of 2 or more"); now train's own split, by group.
    rng = np.random.default_rng(4)
    groups = [f"g{r % 23}" for r in range(400)]
    data = tmp_path / "rows.csv"
    lines = ["a,b,site,label"]
    lines += [f"{rng.normal()!r},{rng.normal()!r},{g},{r % 2}" for r, g in enumerate(groups)]
    data.write_text("\n".join(lines) + "\n")
    request = SearchRequest(seed=3, data=str(data), label="label", group="site", folds=1)
    prepared = prepare(request)
    roles = ref.group_role_codes(3, groups)
    expected = np.where(roles == 2, 255, np.where(roles == 1, 0, 1)).astype(np.uint8)
    assert prepared.folds.sha256 == ref.fold_sha256(expected)
    assert prepared.dataset.n_features == 2  # the group column is not a feature
    assert prepared.describe()["split"] == "groups"
