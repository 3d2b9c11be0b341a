"""The pure parts of model search (docs/contracts.md, section 12) against the independent reference
tests/search_reference.py, written from the SPEC alone: the pool, stratified and grouped
folds, section 9's split as folds, candidates, aggregation, selection and refit epochs; and
the dispatch order. The product computes with aner's numba Philox streams and numpy, the
reference with numpy's Philox and loops, so agreement is a real check."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import search_reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_coord.computations.dense import splits
from aner_coord.computations.search import aggregate, folds, grid, plan
from aner_worker.kernels.dense.streams import TEST, role_codes
from aner_worker.kernels.search.params import FitResult

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
SETTINGS = settings(max_examples=40, deadline=None)
labels_of = st.integers(0, 300).flatmap(
    lambda n: st.lists(st.integers(0, 4), min_size=n, max_size=n)
)
groups_of = st.integers(0, 300).flatmap(
    lambda n: st.lists(
        st.sampled_from(["a", "b", "c", "site 1", "ß", "10", "x" * 30]), min_size=n, max_size=n
    )
)


def roles(seed: int, n: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Section 9's role bytes by row, default fractions."""
    return role_codes(seed, n, 0.15, 0.15)


@given(seed=SEEDS, n=st.integers(0, 400))
@SETTINGS
def test_the_pool_is_every_row_but_section_9_test_rows(seed: int, n: int) -> None:
    assert np.array_equal(roles(seed, n) != TEST, ref.pool_mask(seed, n))
    assert np.array_equal(folds.split(roles(seed, n)) != 255, ref.pool_mask(seed, n))


@given(seed=SEEDS, groups=groups_of)
@SETTINGS
def test_group_roles_are_the_references(seed: int, groups: list[str]) -> None:
    made = splits.group_codes(seed, groups, 0.15, 0.15)
    assert np.array_equal(made, ref.group_role_codes(seed, groups))
    tenth = splits.group_codes(seed, groups, 0.1, 0.3)
    assert np.array_equal(tenth, ref.group_role_codes(seed, groups, 0.1, 0.3))


@given(seed=SEEDS, labels=labels_of, k=st.integers(2, 12))
@SETTINGS
def test_stratified_folds_are_the_reference_folds(seed: int, labels: list[int], k: int) -> None:
    y = np.array(labels, dtype=np.int64)
    codes = folds.stratified(seed, y, k, roles(seed, len(labels)) != TEST)
    assert np.array_equal(codes, ref.stratified_folds(seed, labels, k))
    # Every class within one row per fold, every pool row in exactly one fold.
    pool = codes != 255
    assert np.array_equal(pool, ref.pool_mask(seed, len(labels)))
    for c in set(labels):
        sizes = [int(np.sum(pool & (y == c) & (codes == f))) for f in range(k)]
        assert max(sizes) - min(sizes) <= 1


@given(seed=SEEDS, groups=groups_of, k=st.integers(2, 6))
@SETTINGS
def test_grouped_folds_are_the_reference_folds(seed: int, groups: list[str], k: int) -> None:
    codes = folds.grouped(groups, k, splits.group_codes(seed, groups, 0.15, 0.0) != TEST)
    assert np.array_equal(codes, ref.grouped_folds(seed, groups, k))
    # Every group's pool rows in exactly one fold.
    by_group: dict[str, set[int]] = {}
    for g, c in zip(groups, codes, strict=True):
        if c != 255:
            by_group.setdefault(g, set()).add(int(c))
    assert all(len(found) == 1 for found in by_group.values())


@given(seed=SEEDS, n=st.integers(0, 400))
@SETTINGS
def test_one_fold_is_section_9s_split(seed: int, n: int) -> None:
    codes = folds.split(roles(seed, n))
    train, validation = ref.single_split_rows(seed, n)
    assert list(np.flatnonzero(codes == 0)) == list(validation)
    assert list(np.flatnonzero(codes == 1)) == list(train)
    assert np.array_equal(codes == 255, ~ref.pool_mask(seed, n))


def test_assign_records_what_the_manifest_needs() -> None:
    y = np.arange(600, dtype=np.int64) % 3
    made = folds.assign(7, y, 4, roles(7, 600))
    expected = ref.stratified_folds(7, y.tolist(), 4)
    assert made.sha256 == ref.fold_sha256(expected)
    assert made.rows == ref.rows_per_fold(expected, 4)
    assert made.test_rows == int(np.sum(expected == 255))
    assert made.fitted == [0, 1, 2, 3]
    assert made.training_rows(1) == sum(made.rows) - made.rows[1]
    one = folds.assign(7, y, 1, roles(7, 600))
    assert one.fitted == [0] and one.rows == [
        int(np.sum(one.codes == 0)),
        int(np.sum(one.codes == 1)),
    ]


def test_a_fold_without_rows_or_too_few_groups_is_refused() -> None:
    y = np.zeros(6, dtype=np.int64)
    with pytest.raises(folds.FoldError, match=r"has no rows .* lower \{folds\}"):
        folds.assign(1, y, 20, roles(1, 6))
    two = ["a", "b"] * 200
    with pytest.raises(folds.FoldError, match=r"2 group\(s\), fewer than the 3 folds"):
        folds.assign(1, np.zeros(400, dtype=np.int64), 3, roles(1, 400) * 0, two)


def test_candidates_are_the_reference_product_in_key_order() -> None:
    spec = {"lr": [1e-3, 3e-3, 1e-2], "hidden": [(64,), (64, 64)], "batch": [32, 64]}
    assert grid.candidates(spec) == ref.candidates(spec)
    assert grid.candidates(spec)[1] == {"lr": 1e-3, "hidden": (64,), "batch": 64}
    assert grid.count(spec) == 12
    assert grid.candidates({}) == [{}] and grid.count({}) == 1


def _fit(candidate: int, fold: int, loss: float, accuracy: float, best: int) -> FitResult:
    diverged = "diverged" if math.isnan(loss) else ""
    return FitResult(candidate, fold, best + 1, best, loss, accuracy, [], [], [], 0.0, diverged)


finite = st.floats(0.0, 5.0, allow_nan=False)


@given(
    fits=st.lists(
        st.lists(
            st.tuples(finite | st.just(math.nan), st.floats(0, 1), st.integers(0, 50)),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=5,
    )
)
@SETTINGS
def test_aggregation_and_selection_are_the_references(fits: list[list[Any]]) -> None:
    k = min(len(f) for f in fits)
    results = [[_fit(c, f, *fits[c][f]) for f in range(k)] for c in range(len(fits))]
    mine = [aggregate.summarize(c, r) for c, r in enumerate(results)]
    theirs = ref.aggregate(
        {
            "candidate": r.candidate,
            "fold": r.fold,
            "best_val_loss": r.validation_loss,
            "best_val_accuracy": r.validation_accuracy,
            "best_epoch": r.best_epoch,
        }
        for group in results
        for r in group
    )
    for a, b in zip(mine, theirs, strict=True):
        for name, other in (("validation_loss_mean", "val_loss_mean"),
                            ("validation_loss_std", "val_loss_std"),
                            ("validation_accuracy_mean", "val_accuracy_mean"),
                            ("validation_accuracy_std", "val_accuracy_std"),
                            ("best_epoch_mean", "best_epoch_mean")):  # fmt: skip
            x, y = getattr(a, name), b[other]
            assert (math.isnan(x) and math.isnan(y)) or x == y, name  # bit for bit
        assert a.n == b["n"] == k
    chosen = aggregate.select(mine)
    if all(math.isnan(s.validation_loss_mean) for s in mine):
        assert chosen is None  # reading chosen here: nothing is selected (see aggregate)
    else:
        assert chosen == ref.select(theirs)


def test_selection_ties_go_to_the_lowest_index() -> None:
    same = [aggregate.summarize(c, [_fit(c, 0, 0.5, 0.9, 3)]) for c in range(3)]
    assert aggregate.select(same) == 0
    nan_first = [aggregate.summarize(0, [_fit(0, 0, math.nan, math.nan, 0)]), same[1]]
    assert aggregate.select(nan_first) == 1


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=255))
@SETTINGS
def test_refit_epochs_are_the_rounded_mean_epoch_count(best_epochs: list[int]) -> None:
    # A best epoch is 0-based: its model trained best_epoch + 1 epochs.
    counts = [e + 1 for e in best_epochs]
    expected = ref.refit_epochs(ref._mean(counts))
    assert aggregate.refit_epochs(best_epochs) == expected


def test_refit_epochs_round_half_up() -> None:
    assert aggregate.refit_epochs([1, 2]) == 3  # counts 2 and 3: mean 2.5 gives 3, not 2
    assert aggregate.refit_epochs([0, 0, 1]) == 1  # mean 1.33
    assert aggregate.refit_epochs([0]) == 1


def test_fits_go_out_longest_first_each_once() -> None:
    made = folds.assign(3, np.arange(900, dtype=np.int64) % 2, 3, roles(3, 900))
    order = plan.fits_in_order(made, [10, 30], [500, 100])
    assert sorted((f.candidate, f.fold) for f in order) == [
        (c, f) for c in (0, 1) for f in range(3)
    ]
    costs = [f.cost for f in order]
    assert costs == sorted(costs, reverse=True)
    assert order[0].cost == 10 * made.training_rows(order[0].fold) * 500
    for f in order:
        epochs, params = (10, 500) if f.candidate == 0 else (30, 100)
        assert f.cost == epochs * made.training_rows(f.fold) * params
