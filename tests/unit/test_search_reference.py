"""Self-checks of the oracle tests/search_reference.py (docs/contracts.md, sections 1, 9, 12), on
properties and hand-worked examples: the independent reference that the product's section 12
code (`aner_coord.computations.search`) is tested against must itself be right. Written with
the reference, from the SPEC alone; it imports nothing of the product."""

import hashlib
import math
import statistics

import numpy as np
import pytest
import search_reference as ref
from hypothesis import assume, given, settings
from hypothesis import strategies as st

SEEDS = st.integers(min_value=0, max_value=2**64 - 1)
SETTINGS = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------------------
# Section 1: numpy's Philox as oracle
# ---------------------------------------------------------------------------

# Random123 kat_vectors, philox4x64 10: counter words c0..c3, key words k0 k1, output.
KAT = [
    (
        (0, 0, 0, 0),
        (0, 0),
        (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B),
    ),
    (
        (2**64 - 1,) * 4,
        (2**64 - 1,) * 2,
        (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0),
    ),
    (
        (0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89),
        (0x452821E638D01377, 0xBE5466CF34E90C6C),
        (0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6),
    ),
]


@pytest.mark.parametrize("counter, key, expected", KAT)
def test_numpy_philox_matches_random123_kat(counter, key, expected):
    # numpy increments its 256-bit counter before computing a block, so to get
    # Random123's block for counter C we start numpy at C - 1 (mod 2**256).
    # Counter word i is bits 64i..64i+63 of numpy's integer counter; key likewise.
    c = sum(word << (64 * i) for i, word in enumerate(counter))
    k = key[0] + (key[1] << 64)
    words = np.random.Philox(key=k, counter=(c - 1) % 2**256).random_raw(4)
    assert [int(w) for w in words] == list(expected)


def test_kat_zero_is_the_spec_oracle_call():
    # The SPEC's oracle with seed 0, stream 0 starts at counter (0,0,0,0), key (0,0).
    words = ref.philox_words(0, 0, 4)
    assert [int(w) for w in words] == list(KAT[0][2])
    assert format(int(words[0]), "016x") == "16554d9eca36314c"
    assert format(int(words[1]), "016x") == "db20fe9d672d0fdc"


@given(seed=SEEDS, stream=st.integers(0, 2**64 - 1), b=st.integers(0, 40))
@SETTINGS
def test_counter_b_minus_1_starts_at_block_b(seed, stream, b):
    full = ref.philox_words(seed, stream, 4 * (b + 2))
    bitgen = np.random.Philox(key=seed + (stream << 64), counter=(b - 1) % 2**256)
    assert list(bitgen.random_raw(8)) == list(full[4 * b : 4 * b + 8])


def test_monte_carlo_reference_value_seed_42():
    # docs/contracts.md, section 1: seed 42, 10,000,000 samples give 7,856,672 hits.
    samples = 10_000_000
    hits = 0
    chunk = 1_000_000
    bitgen = np.random.Philox(key=42, counter=2**256 - 1)
    for _ in range(samples // chunk):
        w = bitgen.random_raw(2 * chunk)
        x = (w[0::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
        y = (w[1::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
        hits += int(np.count_nonzero(x * x + y * y < 1.0))
    assert hits == 7_856_672


# ---------------------------------------------------------------------------
# Roles and pool
# ---------------------------------------------------------------------------


def _vector_u(seed, stream, n):
    w = np.random.Philox(key=seed + (stream << 64), counter=2**256 - 1).random_raw(n)
    return (w >> np.uint64(11)).astype(np.float64) * 2.0**-53


@given(seed=SEEDS, n=st.integers(0, 400), tf=st.floats(0.0, 0.5), vf=st.floats(0.0, 0.5))
@SETTINGS
def test_role_codes_match_vectorised_rule(seed, n, tf, vf):
    codes = ref.role_codes(seed, n, tf, vf)
    assert codes.dtype == np.uint8 and codes.shape == (n,)
    u = _vector_u(seed, 8, n)
    expected = np.where(u < tf, 2, np.where(u < tf + vf, 1, 0)).astype(np.uint8)
    assert np.array_equal(codes, expected)
    assert np.array_equal(ref.pool_mask(seed, n, tf), codes != 2)


def test_role_fractions_roughly_right():
    codes = ref.role_codes(7, 20000)
    frac = [np.mean(codes == v) for v in (0, 1, 2)]
    assert abs(frac[2] - 0.15) < 0.01 and abs(frac[1] - 0.15) < 0.01


@given(seed=SEEDS, n=st.integers(0, 300), vf=st.floats(0.0, 0.8))
@SETTINGS
def test_pool_is_independent_of_validation_fraction(seed, n, vf):
    roles = ref.role_codes(seed, n, 0.15, vf)
    assert np.array_equal(ref.pool_mask(seed, n), roles != 2)
    assert list(ref.pool_rows(seed, n)) == [r for r in range(n) if roles[r] != 2]


# ---------------------------------------------------------------------------
# Stratified folds
# ---------------------------------------------------------------------------

labels_strategy = st.integers(0, 400).flatmap(
    lambda n: st.lists(st.integers(0, 4), min_size=n, max_size=n)
)


@given(seed=SEEDS, labels=labels_strategy, k=st.integers(2, 10))
@SETTINGS
def test_stratified_properties(seed, labels, k):
    n = len(labels)
    codes = ref.stratified_folds(seed, labels, k)
    pool = ref.pool_mask(seed, n)
    assert codes.dtype == np.uint8 and codes.shape == (n,)
    # test rows get 255; every pool row gets exactly one fold in 0..K-1
    assert np.all(codes[~pool] == 255)
    assert np.all(codes[pool] < k)
    labels = np.array(labels, dtype=np.int64)
    for c in set(labels.tolist()):
        sizes = [int(np.sum(pool & (labels == c) & (codes == f))) for f in range(k)]
        assert sum(sizes) == int(np.sum(pool & (labels == c)))
        assert max(sizes) - min(sizes) <= 1
        # restart per class: earlier folds never have fewer rows than later ones
        assert sizes == sorted(sizes, reverse=True)


@given(seed=SEEDS, labels=labels_strategy, k=st.integers(2, 10))
@SETTINGS
def test_stratified_matches_lexsort_rule(seed, labels, k):
    # Independent formulation: sort pool rows of each class by (W9[r], r) with
    # np.lexsort, then the j-th gets fold j % k.
    n = len(labels)
    labels = np.array(labels, dtype=np.int64)
    pool = ~(_vector_u(seed, 8, n) < 0.15)
    w9 = np.random.Philox(key=seed + (9 << 64), counter=2**256 - 1).random_raw(n)
    expected = np.full(n, 255, dtype=np.uint8)
    for c in np.unique(labels):
        rows = np.flatnonzero(pool & (labels == c))
        rows = rows[np.lexsort((rows, w9[rows]))]
        expected[rows] = np.arange(len(rows)) % k
    assert np.array_equal(ref.stratified_folds(seed, labels.tolist(), k), expected)


@given(seed=SEEDS, labels=labels_strategy, k=st.integers(2, 10))
@SETTINGS
def test_stratified_alternative_global_counter(seed, labels, k):
    # The alternative reading (one counter across classes) still balances each
    # class, and balances the total fold sizes to within 1.
    n = len(labels)
    codes = ref.stratified_folds(seed, labels, k, restart_per_class=False)
    pool = ref.pool_mask(seed, n)
    sizes = [int(np.sum(codes == f)) for f in range(k)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == int(pool.sum())
    labels = np.array(labels)
    for c in set(labels.tolist()):
        per = [int(np.sum(pool & (labels == c) & (codes == f))) for f in range(k)]
        assert max(per) - min(per) <= 1


def test_stratified_first_row_of_each_class_in_fold_0():
    seed, n, k = 3, 500, 5
    labels = [r % 3 for r in range(n)]
    codes = ref.stratified_folds(seed, labels, k)
    w9 = ref.philox_words(seed, 9, n)
    pool = ref.pool_mask(seed, n)
    for c in range(3):
        rows = [r for r in range(n) if pool[r] and labels[r] == c]
        first = min(rows, key=lambda r: (int(w9[r]), r))
        assert codes[first] == 0


def test_stratified_rejects_bad_k():
    for k in (0, 1, 256):
        with pytest.raises(ValueError):
            ref.stratified_folds(1, [0, 1, 0, 1], k)


# ---------------------------------------------------------------------------
# Grouped folds
# ---------------------------------------------------------------------------

group_names = st.sampled_from(["a", "b", "c", "site-1", "site-2", "Zürich", "東京", "", " ", "10"])
groups_strategy = st.integers(0, 300).flatmap(
    lambda n: st.lists(group_names, min_size=n, max_size=n)
)


@given(seed=SEEDS, groups=groups_strategy, k=st.integers(2, 8))
@SETTINGS
def test_grouped_properties(seed, groups, k):
    n = len(groups)
    codes = ref.grouped_folds(seed, groups, k)
    pool = ref.group_pool_mask(seed, groups)
    assert codes.dtype == np.uint8 and codes.shape == (n,)
    assert np.all(codes[~pool] == 255)
    assert np.all(codes[pool] < k)
    # every group (its pool rows) lies in exactly one fold
    folds_of = {}
    for r in range(n):
        if pool[r]:
            folds_of.setdefault(groups[r], set()).add(int(codes[r]))
    assert all(len(s) == 1 for s in folds_of.values())


@given(seed=SEEDS, groups=groups_strategy, k=st.integers(2, 8))
@SETTINGS
def test_grouped_follows_greedy_rule(seed, groups, k):
    n = len(groups)
    codes = ref.grouped_folds(seed, groups, k)
    pool = ref.group_pool_mask(seed, groups)
    counts = {}
    fold_of = {}
    for r in range(n):
        if pool[r]:
            counts[groups[r]] = counts.get(groups[r], 0) + 1
            fold_of[groups[r]] = int(codes[r])
    # order: decreasing pool count, ties by sha256 digest bytes ascending
    order = sorted(counts, key=lambda g: (-counts[g], hashlib.sha256(g.encode("utf-8")).digest()))
    assert [g for g, _ in ref.grouped_order(seed, groups)] == order
    # replay: each group went to a fold with the fewest rows so far, lowest such fold
    sizes = [0] * k
    for g in order:
        smallest = min(sizes)
        assert fold_of[g] == sizes.index(smallest)
        sizes[fold_of[g]] += counts[g]
    assert sizes == ref.rows_per_fold(codes, k)
    # greedy (LPT) bound: fold sizes differ by at most the largest group
    if counts:
        assert max(sizes) - min(sizes) <= max(counts.values())


def test_grouped_hand_example():
    # No test rows (test_fraction 0) so the counts are known.
    # Pool counts: g1 -> 4, g2 -> 3, g3 -> 3, g4 -> 1.
    groups = ["g1"] * 4 + ["g2"] * 3 + ["g3"] * 3 + ["g4"]
    d2 = hashlib.sha256(b"g2").digest()
    d3 = hashlib.sha256(b"g3").digest()
    first3, second3 = ("g2", "g3") if d2 < d3 else ("g3", "g2")
    codes = ref.grouped_folds(5, groups, 2, test_fraction=0.0)
    fold = {g: int(codes[groups.index(g)]) for g in set(groups)}
    # g1 (4) -> fold 0 [4,0]; first3 (3) -> fold 1 [4,3]; second3 (3) -> fold 1 [4,6];
    # g4 (1) -> fold 0 [5,6]
    assert fold == {"g1": 0, first3: 1, second3: 1, "g4": 0}
    assert ref.rows_per_fold(codes, 2) == [5, 6]


def test_grouped_tie_uses_digest_not_label_order():
    # sha256("a") = ca97..., sha256("b") = 3e23...: digest order puts "b" first,
    # the opposite of label order, so "b" (one row, tie on count) goes to fold 0.
    assert hashlib.sha256(b"b").digest() < hashlib.sha256(b"a").digest()
    codes = ref.grouped_folds(1, ["a", "b"], 3, test_fraction=0.0)
    assert list(codes) == [1, 0]


@given(seed=SEEDS, groups=groups_strategy)
@SETTINGS
def test_a_group_is_wholly_test_or_wholly_pool(seed, groups):
    # With fewer groups than the roles need, the product refuses (naming the count), and the
    # reference's shares of test and pool may then depend on whether validation is wanted.
    assume(len(set(groups)) >= 3)
    roles = ref.group_role_codes(seed, groups)
    for g in set(groups):
        assert len({int(roles[r]) for r in range(len(groups)) if groups[r] == g}) == 1
    assert np.array_equal(ref.group_pool_mask(seed, groups), roles != 2)


@pytest.mark.parametrize("label", ["a", "site 7", "東京", "10"])
def test_a_groups_u_is_word_k_of_stream_10(label):
    # The same word another way: numpy's advance() skips whole blocks of four words.
    seed = 3
    k = int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:8], "big") >> 1
    bitgen = np.random.Philox(key=seed + (10 << 64), counter=2**256 - 1)
    bitgen.advance(k // 4)
    word = int(bitgen.random_raw(4)[k % 4])
    assert ref.group_u(seed, label) == (word >> 11) * 2.0**-53


# ---------------------------------------------------------------------------
# Fold SHA256 and fit rows
# ---------------------------------------------------------------------------


def test_fold_sha256():
    codes = np.array([0, 1, 255, 2], dtype=np.uint8)
    assert ref.fold_sha256(codes) == hashlib.sha256(b"\x00\x01\xff\x02").hexdigest()
    assert ref.fold_sha256([]) == hashlib.sha256(b"").hexdigest()


@given(seed=SEEDS, labels=labels_strategy, k=st.integers(2, 8))
@SETTINGS
def test_fit_rows_partition_the_pool(seed, labels, k):
    n = len(labels)
    codes = ref.stratified_folds(seed, labels, k)
    pool = set(ref.pool_rows(seed, n).tolist())
    seen_in_validation = []
    for f in range(k):
        train, val = ref.fit_rows(codes, f)
        assert list(train) == sorted(train) and list(val) == sorted(val)
        assert set(train).isdisjoint(val)
        assert set(train) | set(val) == pool
        assert all(codes[r] == f for r in val)
        seen_in_validation.extend(val.tolist())
    # every pool row is a validation row in exactly one fit
    assert sorted(seen_in_validation) == sorted(pool)


@given(seed=SEEDS, n=st.integers(0, 300))
@SETTINGS
def test_single_split_is_section_9_roles(seed, n):
    roles = ref.role_codes(seed, n)
    train, val = ref.single_split_rows(seed, n)
    assert list(train) == [r for r in range(n) if roles[r] == 0]
    assert list(val) == [r for r in range(n) if roles[r] == 1]
    assert set(train) | set(val) == set(ref.pool_rows(seed, n).tolist())


# ---------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------


def test_candidates_spec_example():
    grid = {"hidden": [[64], [64, 64]], "lr": [1e-3, 3e-3]}
    assert ref.candidates(grid) == [
        {"hidden": [64], "lr": 1e-3},
        {"hidden": [64], "lr": 3e-3},
        {"hidden": [64, 64], "lr": 1e-3},
        {"hidden": [64, 64], "lr": 3e-3},
    ]


def test_candidates_key_order_not_sorted():
    grid = {"lr": [1, 2], "batch": [10, 20, 30]}
    cands = ref.candidates(grid)
    assert [(c["lr"], c["batch"]) for c in cands] == [
        (1, 10),
        (1, 20),
        (1, 30),
        (2, 10),
        (2, 20),
        (2, 30),
    ]
    assert list(cands[0].keys()) == ["lr", "batch"]


def test_candidates_edge_cases():
    assert ref.candidates({}) == [{}]
    assert ref.candidates({"lr": []}) == []


@given(sizes=st.lists(st.integers(1, 4), min_size=0, max_size=5))
@SETTINGS
def test_candidates_mixed_radix(sizes):
    keys = ["hidden", "lr", "batch", "epochs", "optimizer"][: len(sizes)]
    grid = {key: [f"{key}{i}" for i in range(size)] for key, size in zip(keys, sizes, strict=False)}
    cands = ref.candidates(grid)
    assert len(cands) == math.prod(sizes)
    for c, cand in enumerate(cands):
        rest = c
        # the last key is the lowest digit
        for key, size in reversed(list(zip(keys, sizes, strict=False))):
            assert cand[key] == f"{key}{rest % size}"
            rest //= size


# ---------------------------------------------------------------------------
# Aggregation, selection, refit epochs
# ---------------------------------------------------------------------------


def _fits(table):
    # table: {candidate: [(loss, acc, best_epoch), ...per fold]}
    out = []
    for c, rows in table.items():
        for f, (loss, acc, epoch) in enumerate(rows):
            out.append(
                {
                    "candidate": c,
                    "fold": f,
                    "best_val_loss": loss,
                    "best_val_accuracy": acc,
                    "best_epoch": epoch,
                }
            )
    return out


def test_aggregate_hand_example():
    fits = _fits(
        {0: [(1.0, 0.5, 3), (2.0, 0.7, 4), (3.0, 0.6, 6)], 1: [(0.5, 0.9, 1), (0.5, 0.9, 2)]}
    )
    agg = ref.aggregate(reversed(fits))  # order of arrival does not matter
    assert [a["candidate"] for a in agg] == [0, 1]
    a0, a1 = agg
    assert a0["n"] == 3 and a0["val_loss_mean"] == 2.0 and a0["val_loss_std"] == 1.0
    assert a0["best_epoch_mean"] == pytest.approx(13 / 3)
    assert a0["val_accuracy_mean"] == pytest.approx(0.6)
    assert a0["val_accuracy_std"] == pytest.approx(0.1)
    assert a1["val_loss_std"] == 0.0 and a1["best_epoch_mean"] == 1.5
    assert ref.select(agg) == 1
    assert ref.refit_epochs(a0["best_epoch_mean"]) == 4
    assert ref.refit_epochs(a1["best_epoch_mean"]) == 2


@given(values=st.lists(st.floats(0, 10, allow_nan=False), min_size=2, max_size=10))
@SETTINGS
def test_aggregate_matches_statistics(values):
    fits = _fits({0: [(v, v / 10, i) for i, v in enumerate(values)]})
    a = ref.aggregate(fits)[0]
    assert a["n"] == len(values)
    assert a["val_loss_mean"] == pytest.approx(statistics.fmean(values), abs=1e-12)
    assert a["val_loss_std"] == pytest.approx(statistics.stdev(values), abs=1e-9)
    assert a["best_epoch_mean"] == pytest.approx((len(values) - 1) / 2)


def test_aggregate_single_fold_std_is_nan():
    a = ref.aggregate(_fits({0: [(1.0, 0.5, 2)]}))[0]
    assert a["n"] == 1 and math.isnan(a["val_loss_std"]) and math.isnan(a["val_accuracy_std"])


def test_aggregate_rejects_duplicate_fit():
    fits = _fits({0: [(1.0, 0.5, 2)]}) * 2
    with pytest.raises(ValueError):
        ref.aggregate(fits)


def test_select_ties_and_nan():
    agg = [
        {"candidate": c, "val_loss_mean": m} for c, m in enumerate([0.3, 0.2, 0.2, math.nan, 0.25])
    ]
    assert ref.select(agg) == 1
    assert ref.select(list(reversed(agg))) == 1
    assert (
        ref.select(
            [{"candidate": 0, "val_loss_mean": math.nan}, {"candidate": 1, "val_loss_mean": 5.0}]
        )
        == 1
    )
    assert (
        ref.select(
            [
                {"candidate": 2, "val_loss_mean": math.nan},
                {"candidate": 1, "val_loss_mean": math.nan},
            ]
        )
        == 1
    )


@given(means=st.lists(st.sampled_from([0.1, 0.2, 0.3]), min_size=1, max_size=20))
@SETTINGS
def test_select_is_first_minimum(means):
    agg = [{"candidate": c, "val_loss_mean": m} for c, m in enumerate(means)]
    assert ref.select(agg) == means.index(min(means))


@pytest.mark.parametrize(
    "x, expected",
    [
        (0.0, 1),
        (0.2, 1),
        (0.5, 1),
        (1.0, 1),
        (1.49, 1),
        (1.5, 2),
        (2.5, 3),
        (3.5, 4),
        (4.4999999, 4),
        (2.4999999999999996, 2),
        (0.49999999999999994, 1),
        (13 / 3, 4),
        (100.0, 100),
    ],
)
def test_refit_epochs_round_half_up(x, expected):
    assert ref.refit_epochs(x) == expected


def test_refit_epochs_differs_from_bankers_rounding():
    assert round(2.5) == 2 and ref.refit_epochs(2.5) == 3


@given(x=st.floats(0, 1e6, allow_nan=False))
@SETTINGS
def test_refit_epochs_is_floor_x_plus_half_where_exact(x):
    expected = max(1, math.floor(x + 0.5))
    # floor(x + 0.5) can differ only by binary64 rounding of x + 0.5
    assert abs(ref.refit_epochs(x) - expected) <= (0 if (x + 0.5) - 0.5 == x else 1)
