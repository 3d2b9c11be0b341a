"""The coordinator's plan of aner-dense/v1 against the independent reference (dense_reference).

Roles, their SHA256, normalisation on training rows only, initial weights, epoch orders,
batch and chunk bounds, the chunk-order reduction and early stopping.
"""

from __future__ import annotations

import hashlib
import itertools

import dense_reference as ref
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_coord.computations.dense.single import fit_normalisation
from aner_worker.kernels.dense.data import ArrayDataset, TeacherDataset
from aner_worker.kernels.dense.network import ChunkStats, moment_sums
from aner_worker.kernels.dense.plan import (
    EarlyStopping,
    PlanError,
    assign_roles,
    bounds,
    combine_moments,
    epoch_order,
    init_params,
    layer_sizes,
    reduce_chunks,
    stable_argsort,
    steps_per_epoch,
)
from aner_worker.kernels.dense.streams import words, words_at


@pytest.mark.parametrize(("seed", "n"), [(0, 1000), (42, 4097), (2**64 - 1, 333)])
def test_roles_equal_reference_and_hash_their_bytes(seed: int, n: int) -> None:
    roles = assign_roles(seed, n)
    expected = ref.roles(seed, n)
    assert np.array_equal(roles.codes, expected)
    assert roles.sha256 == hashlib.sha256(expected.tobytes()).hexdigest()
    assert roles.train.tolist() == np.flatnonzero(expected == 0).tolist()
    assert roles.validation.tolist() == np.flatnonzero(expected == 1).tolist()
    assert roles.test.tolist() == np.flatnonzero(expected == 2).tolist()
    assert sum(roles.counts().values()) == n


def test_roles_follow_the_fractions() -> None:
    counts = assign_roles(7, 100_000).counts()
    assert abs(counts["test"] - 15_000) < 600
    assert abs(counts["validation"] - 15_000) < 600
    custom = assign_roles(7, 100_000, test_fraction=0.1, validation_fraction=0.2).counts()
    assert abs(custom["test"] - 10_000) < 600 and abs(custom["validation"] - 20_000) < 600


def test_roles_refuse_bad_fractions_and_empty_roles() -> None:
    with pytest.raises(PlanError, match="sum below 1"):
        assign_roles(1, 100, test_fraction=0.6, validation_fraction=0.4)
    with pytest.raises(PlanError, match="leave no"):
        assign_roles(1, 2)


@settings(max_examples=40, deadline=None)
@given(first=st.integers(0, 2**40), count=st.integers(0, 23), stream=st.integers(0, 2**40))
def test_words_equal_numpy_philox(first: int, count: int, stream: int) -> None:
    seed = 12345
    block, skip = divmod(first, 4)
    gen = np.random.Philox(key=seed + (stream << 64), counter=(block - 1) % 2**256)
    expected = gen.random_raw(skip + count)[skip:]
    assert np.array_equal(words(seed, stream, first, count), expected)
    idx = np.arange(first, first + count, dtype=np.int64)[::-1].copy()
    assert np.array_equal(words_at(seed, stream, idx), expected[::-1])


@pytest.mark.parametrize("epoch", [0, 1, 17])
def test_epoch_order_equals_reference(epoch: int) -> None:
    seed = 9
    train = assign_roles(seed, 2000).train
    order = epoch_order(seed, epoch, train)
    assert order.tolist() == ref.epoch_order(seed, epoch, train).tolist()
    assert sorted(order.tolist()) == train.tolist()


def test_epoch_orders_differ_between_epochs() -> None:
    train = assign_roles(3, 500).train
    assert epoch_order(3, 0, train).tolist() != epoch_order(3, 1, train).tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=300),
    st.lists(st.integers(0, 299), max_size=20),
)
def test_stable_argsort_is_numpys_stable_sort(values: list[int], copies: list[int]) -> None:
    # Random 64-bit values rarely tie; `copies` repeats some of them, anywhere in the array.
    for i in copies:
        if values:
            values.append(values[i % len(values)])
    keys = np.array(values, dtype=np.uint64)
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


def test_stable_argsort_sees_a_tie_between_the_last_two_keys() -> None:
    # 600 distinct keys, then the largest again: only the last two sorted keys tie.
    keys = np.array([*range(600, 0, -1), 600], dtype=np.uint64)
    assert stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()


@pytest.mark.parametrize("sizes", [[64, 64, 64, 10], [5, 3], [7, 11, 2]])
def test_init_equals_reference(sizes: list[int]) -> None:
    params = init_params(21, sizes)
    weights, biases = ref.init(21, sizes)
    assert len(params) == 2 * len(weights)
    for index, (w, b) in enumerate(zip(weights, biases, strict=True)):
        assert np.array_equal(params[2 * index], w)
        assert np.array_equal(params[2 * index + 1], b)
        bound = np.sqrt(6 / (w.shape[0] + w.shape[1]))
        assert np.abs(params[2 * index]).max() <= bound


def test_layer_sizes_and_bounds() -> None:
    assert layer_sizes(64, (64, 64), 10) == [64, 64, 64, 10]
    with pytest.raises(PlanError):
        layer_sizes(4, (0,), 2)
    assert bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert bounds(8, 4) == [(0, 4), (4, 8)]
    assert bounds(0, 4) == []
    assert steps_per_epoch(1232, 256) == 5 and steps_per_epoch(1024, 256) == 4


def test_normalisation_is_fitted_on_training_rows_only() -> None:
    seed, n, d = 4, 3000, 6
    x, y = ref.teacher(n, d, 3, seed)
    # Shift the held-out rows so a fit that used them would be visibly wrong.
    roles = assign_roles(seed, n)
    x[roles.test] += 100.0
    x[:, 2] = 5.0  # a constant feature: std 0 becomes 1
    data = ArrayDataset(x, y, np.arange(3.0), "mem")
    expected_mean, expected_std = ref.normalisation(x[ref.roles(seed, n) == 0])
    for chunk in (37, 256, 5000):
        norm = fit_normalisation(data, roles.train, chunk)
        assert np.allclose(norm.mean, expected_mean, rtol=0, atol=1e-12)
        assert np.allclose(norm.std, expected_std, rtol=0, atol=1e-12)
        assert norm.std[2] == 1.0
    all_rows_mean = x.mean(axis=0)
    assert np.abs(all_rows_mean - expected_mean).max() > 1.0


@settings(max_examples=50, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 199), max_size=6, unique=True),
    scale=st.sampled_from([1e-3, 1.0, 1e6]),
)
def test_moment_combination_is_independent_of_chunking(cuts: list[int], scale: float) -> None:
    x = np.random.default_rng(5).normal(loc=3.0 * scale, scale=scale, size=(200, 4))
    edges = [0, *sorted(cuts), 200]
    parts = []
    for a, b in itertools.pairwise(edges):
        total, m2 = moment_sums(x[a:b])
        parts.append((b - a, total, m2))
    norm = combine_moments(parts)
    mean, std = ref.normalisation(x)
    assert np.allclose(norm.mean, mean, rtol=1e-13, atol=0)
    assert np.allclose(norm.std, std, rtol=1e-11, atol=0)


def test_reduce_chunks_sums_in_order_and_checks_the_count() -> None:
    parts = [
        ChunkStats(np.array([1.0, 2.0]), 0.5, 3, 4),
        ChunkStats(np.array([0.25, -1.0]), 1.5, 1, 2),
    ]
    totals = reduce_chunks(parts, 6)
    assert totals.grad_sum.tolist() == [1.25, 1.0]
    assert (totals.loss_sum, totals.correct, totals.valid) == (2.0, 4, 6)
    assert totals.mean_grad().tolist() == [1.25 / 6, 1.0 / 6]
    assert parts[0].grad.tolist() == [1.0, 2.0]  # the slots are not modified
    with pytest.raises(PlanError, match="accepted 6 rows, the batch has 7"):
        reduce_chunks(parts, 7)


def test_early_stopping_needs_a_strictly_lower_loss() -> None:
    stopping = EarlyStopping(patience=2)
    trace = []
    for epoch, loss in enumerate([1.0, 0.8, 0.8, 0.9, 0.7, 0.75, 0.71]):
        stopping = stopping.observe(epoch, loss)
        trace.append((stopping.best_epoch, stopping.improved, stopping.stop))
    assert trace == [
        (0, True, False),
        (1, True, False),
        (1, False, False),  # equal is not lower
        (1, False, True),
        (4, True, False),
        (4, False, False),
        (4, False, True),
    ]


def test_teacher_roles_and_normalisation_agree_with_reference_end_to_end() -> None:
    seed, n, d = 8, 1500, 5
    data = TeacherDataset(n, d, 4, seed)
    roles = assign_roles(seed, n)
    norm = fit_normalisation(data, roles.train, 100)
    x, _ = ref.teacher(n, d, 4, seed)
    mean, std = ref.normalisation(x[ref.roles(seed, n) == 0])
    assert np.allclose(norm.mean, mean, rtol=0, atol=1e-13)
    assert np.allclose(norm.std, std, rtol=0, atol=1e-13)


def test_epoch_order_breaks_key_ties_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64-bit keys practically never tie, so force ties: keys reduced to three values.
    import aner_worker.kernels.dense.plan as plan

    real = plan.words_at
    monkeypatch.setattr(
        plan, "words_at", lambda seed, stream, idx: real(seed, stream, idx) % np.uint64(3)
    )
    # Enough rows that an unstable sort (numpy's introsort) would scramble equal keys.
    train = assign_roles(1, 3000).train
    keys = real(1, 2**32, train) % np.uint64(3)
    order = plan.epoch_order(1, 0, train)
    expected = sorted(zip(keys.tolist(), train.tolist(), strict=True))
    assert order.tolist() == [r for _, r in expected]
