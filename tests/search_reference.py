"""Independent reference (test oracle) for the pure parts of docs/contracts.md, section 12,
`aner-search/v1`: roles, pool, folds, candidates, aggregation, selection and
refit epochs.

Written from the contracts alone (docs/contracts.md, sections 1, 9 and 12: the project's
SPEC), with numpy and the standard library. It is deliberately plain: loops over rows, no
cleverness, so that it can be read against the SPEC line by line. Speed is not a goal.

Philox words come from numpy directly, exactly as docs/contracts.md, section 1's oracle says:

    numpy.random.Philox(key=seed + (stream << 64), counter=2**256 - 1).random_raw(n)

returns W[0..n-1] of stream `stream` (numpy increments the counter before it
computes a block, so counter 2**256 - 1 wraps to block 0 first).

Readings chosen where the SPEC is ambiguous are marked "AMBIGUITY" below and
listed in tests/search_reference_notes.md.
"""

import hashlib
import itertools
import math

import numpy as np

TEST_CODE = 255  # fold byte of a test row (docs/contracts.md, section 12)

ROLE_TRAIN = 0
ROLE_VALIDATION = 1
ROLE_TEST = 2


# ---------------------------------------------------------------------------
# Section 1 / 9 primitives
# ---------------------------------------------------------------------------


def philox_words(seed, stream, n):
    """W[0..n-1] of the Philox4x64-10 stream (seed, stream), via numpy's Philox."""
    if not (0 <= seed < 2**64):
        raise ValueError("seed must be in [0, 2**64)")
    if not (0 <= stream < 2**64):
        raise ValueError("stream must be in [0, 2**64)")
    bitgen = np.random.Philox(key=seed + (stream << 64), counter=2**256 - 1)
    return bitgen.random_raw(n)  # uint64 array of length n


def U(w):
    """U(w) = (w >> 11) * 2**-53, a float in [0, 1). Exact: w >> 11 < 2**53."""
    return (int(w) >> 11) * 2.0**-53


# ---------------------------------------------------------------------------
# Roles and pool (sections 9 and 12)
# ---------------------------------------------------------------------------


def role_codes(seed, n_rows, test_fraction=0.15, validation_fraction=0.15):
    """One byte per row: 0 train, 1 validation, 2 test (docs/contracts.md, section 9, stream 8).

    u = U(W8[r]); test if u < test_fraction, validation if
    u < test_fraction + validation_fraction, else train.
    """
    w8 = philox_words(seed, 8, n_rows)
    codes = np.zeros(n_rows, dtype=np.uint8)
    for r in range(n_rows):
        u = U(w8[r])
        if u < test_fraction:
            codes[r] = ROLE_TEST
        elif u < test_fraction + validation_fraction:
            codes[r] = ROLE_VALIDATION
        else:
            codes[r] = ROLE_TRAIN
    return codes


def pool_mask(seed, n_rows, test_fraction=0.15):
    """Boolean per row: True for a pool row (every row that is not a test row).

    The test rows depend on test_fraction only, so the pool is the train and
    validation rows of section 9's roles, whatever the validation fraction.
    """
    w8 = philox_words(seed, 8, n_rows)
    mask = np.zeros(n_rows, dtype=bool)
    for r in range(n_rows):
        mask[r] = not (U(w8[r]) < test_fraction)
    return mask


def pool_rows(seed, n_rows, test_fraction=0.15):
    """Pool row positions, ascending (the refit's training rows)."""
    return np.flatnonzero(pool_mask(seed, n_rows, test_fraction))


# ---------------------------------------------------------------------------
# Folds (section 12)
# ---------------------------------------------------------------------------


def _check_k(k):
    # Fold bytes are 0..K-1 with 255 reserved for test rows, so K <= 255.
    if not (2 <= k <= 255):
        raise ValueError("folds K must satisfy 2 <= K <= 255 for fold bytes")


def stratified_folds(seed, labels, k, test_fraction=0.15, restart_per_class=True):
    """Stratified fold bytes, one per row in file order (255 for a test row).

    docs/contracts.md, section 12: "for each class in class order, its pool rows ordered by the key
    W9[r] ascending (ties by r) are dealt round robin, the j-th to fold j mod K".

    labels: class index per row (ints 0..C-1), for every row including test rows.

    AMBIGUITY (counter): the sentence's subject is one class's ordered pool rows,
    so j counts within that class and restarts at 0 for each class: the first
    row of every class goes to fold 0. That is what restart_per_class=True (the
    default, the literal reading) does. The alternative reading, one counter that
    keeps running across classes in class order (restart_per_class=False), gives
    the same per-class balance but better balanced total fold sizes; it is kept
    only so that the alternative can be checked if the SPEC is changed.

    AMBIGUITY (j's base): j is taken 0-based (the first row of a class is the
    0-th, to fold 0). A 1-based j would send the first row to fold 1.
    """
    _check_k(k)
    labels = [int(x) for x in labels]
    n_rows = len(labels)
    for x in labels:
        if x < 0:
            raise ValueError("labels must be class indices >= 0")
    in_pool = pool_mask(seed, n_rows, test_fraction)
    w9 = philox_words(seed, 9, n_rows)

    codes = np.full(n_rows, TEST_CODE, dtype=np.uint8)
    classes = sorted(set(labels))  # class order; a class with no pool rows adds nothing
    j_global = 0
    for c in classes:
        rows = [r for r in range(n_rows) if in_pool[r] and labels[r] == c]
        rows.sort(key=lambda r: (int(w9[r]), r))  # key W9[r] ascending, ties by r
        for j, r in enumerate(rows):
            if restart_per_class:
                codes[r] = j % k
            else:
                codes[r] = j_global % k
                j_global += 1
    return codes


def group_label_digest(label):
    """SHA256 digest (bytes) of the group label's UTF-8 bytes."""
    return hashlib.sha256(str(label).encode("utf-8")).digest()


def group_u(seed, label):
    """A group's u (docs/contracts.md, section 9, Splits and groups; an extension of the
    SPEC): D = SHA256(label's UTF-8 bytes), k = the first 8 bytes of D, big-endian, shifted
    right by one, and u = U(W10[k]) of stream 10. numpy's counter b - 1 starts at block b."""
    k = int.from_bytes(group_label_digest(label)[:8], "big") >> 1
    bitgen = np.random.Philox(key=seed + (10 << 64), counter=(k // 4 - 1) % 2**256)
    return U(bitgen.random_raw(4)[k % 4])


def group_role_codes(seed, groups, test_fraction=0.15, validation_fraction=0.15):
    """One byte per row, every row taking its group's role (docs/contracts.md, section 9,
    Splits and groups): the distinct groups sorted by (u, label bytes); the first
    round(t * G) test, then up to round((t + v) * G) validation, rounded half up; then
    each wanted role (train; test if t > 0; validation if v > 0) at least one group, taken
    one at a time from validation or test, whichever has more groups above its minimum
    (validation on a tie)."""
    labels = []
    for label in groups:
        if str(label) not in labels:
            labels.append(str(label))
    n = len(labels)
    ranked = sorted(labels, key=lambda label: (group_u(seed, label), label.encode("utf-8")))
    test_min = 1 if test_fraction > 0 else 0
    validation_min = 1 if validation_fraction > 0 else 0
    n_test = int(np.floor(test_fraction * n + 0.5))
    n_validation = int(np.floor((test_fraction + validation_fraction) * n + 0.5)) - n_test
    n_test = max(n_test, test_min)
    n_validation = max(n_validation, validation_min)
    while n - n_test - n_validation < 1:
        if n_validation - validation_min >= n_test - test_min:
            n_validation -= 1
        else:
            n_test -= 1
    role_of = {}
    for i, label in enumerate(ranked):
        if i < n_test:
            role_of[label] = ROLE_TEST
        elif i < n_test + n_validation:
            role_of[label] = ROLE_VALIDATION
        else:
            role_of[label] = ROLE_TRAIN
    return np.array([role_of[str(label)] for label in groups], dtype=np.uint8)


def group_pool_mask(seed, groups, test_fraction=0.15):
    """With groups, the pool is every row of a group that is not a test group."""
    return group_role_codes(seed, groups, test_fraction, 0.0) != ROLE_TEST


def grouped_order(seed, groups, test_fraction=0.15):
    """Groups in placement order with their pool row counts: list of (label, count).

    Decreasing pool row count; ties by SHA256 of the label's UTF-8 bytes, the
    digests compared as bytes, ascending. Groups with no pool row are left out
    (they have nothing to place and cannot change any fold's size).
    """
    n_rows = len(groups)
    in_pool = group_pool_mask(seed, groups, test_fraction)
    counts = {}
    for r in range(n_rows):
        if in_pool[r]:
            label = str(groups[r])
            counts[label] = counts.get(label, 0) + 1
    order = sorted(counts.items(), key=lambda item: (-item[1], group_label_digest(item[0])))
    return order


def grouped_folds(seed, groups, k, test_fraction=0.15):
    """Group-aware fold bytes, one per row in file order (255 for a test row).

    groups: group label (a string) per row, for every row including test rows.
    Test rows (whole test groups: group_role_codes) leave first; a group's count
    is its number of pool rows. Groups in grouped_order() are each placed whole
    in the fold with the fewest (pool) rows so far, ties to the lowest fold index.
    """
    _check_k(k)
    n_rows = len(groups)
    in_pool = group_pool_mask(seed, groups, test_fraction)

    fold_of_group = {}
    fold_sizes = [0] * k
    for label, count in grouped_order(seed, groups, test_fraction):
        best = 0
        for f in range(1, k):
            if fold_sizes[f] < fold_sizes[best]:  # strict: ties stay on the lowest fold
                best = f
        fold_of_group[label] = best
        fold_sizes[best] += count

    codes = np.full(n_rows, TEST_CODE, dtype=np.uint8)
    for r in range(n_rows):
        if in_pool[r]:
            codes[r] = fold_of_group[str(groups[r])]
    return codes


def fold_sha256(codes):
    """SHA256 hex digest of the fold bytes (one byte per row, file order)."""
    return hashlib.sha256(np.asarray(codes, dtype=np.uint8).tobytes()).hexdigest()


def rows_per_fold(codes, k):
    """Number of rows in each fold 0..K-1 (test rows, byte 255, not counted)."""
    codes = np.asarray(codes, dtype=np.uint8)
    return [int(np.count_nonzero(codes == f)) for f in range(k)]


# ---------------------------------------------------------------------------
# A fit's rows
# ---------------------------------------------------------------------------


def fit_rows(fold_codes, f):
    """(training positions, validation positions) of fit (c, f), both ascending.

    Training rows: pool rows outside fold f. Validation rows: fold f.
    """
    codes = np.asarray(fold_codes, dtype=np.uint8)
    train = [r for r in range(len(codes)) if codes[r] != TEST_CODE and codes[r] != f]
    validation = [r for r in range(len(codes)) if codes[r] == f]
    return np.array(train, dtype=np.int64), np.array(validation, dtype=np.int64)


def single_split_rows(seed, n_rows, test_fraction=0.15, validation_fraction=0.15):
    """folds = 1: section 9's own split of the pool, (train, validation) ascending."""
    roles = role_codes(seed, n_rows, test_fraction, validation_fraction)
    train = [r for r in range(n_rows) if roles[r] == ROLE_TRAIN]
    validation = [r for r in range(n_rows) if roles[r] == ROLE_VALIDATION]
    return np.array(train, dtype=np.int64), np.array(validation, dtype=np.int64)


# ---------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------


def candidates(grid):
    """Cartesian product of the grid's lists, in the grid's key order, last key fastest.

    Candidate c is the c-th element. An empty grid gives one candidate, {}; a key
    with an empty list gives no candidates (the product is empty).
    """
    keys = list(grid.keys())
    value_lists = [list(grid[key]) for key in keys]
    result = []
    # itertools.product advances its rightmost iterable on every step: last key fastest.
    for values in itertools.product(*value_lists):
        result.append(dict(zip(keys, values, strict=True)))
    return result


# ---------------------------------------------------------------------------
# Aggregation, selection, refit epochs
# ---------------------------------------------------------------------------


def _mean(xs):
    """Mean summed left to right in the given order (fold order), then / n."""
    total = 0.0
    for x in xs:
        total += float(x)
    return total / len(xs)


def _sample_std(xs):
    """Sample standard deviation, sqrt(sum (x - mean)**2 / (n - 1)); NaN when n < 2."""
    n = len(xs)
    if n < 2:
        return math.nan
    m = _mean(xs)
    total = 0.0
    for x in xs:
        total += (float(x) - m) ** 2
    return math.sqrt(total / (n - 1))


def aggregate(fits):
    """Per-candidate statistics over folds.

    fits: iterable of dicts with keys "candidate", "fold", "best_val_loss",
    "best_val_accuracy", "best_epoch" (one per fit (c, f); order irrelevant).

    Returns a list, ascending by candidate index, of dicts:
    candidate, n, val_loss_mean, val_loss_std, val_accuracy_mean,
    val_accuracy_std, best_epoch_mean. Values are summed in fold order.
    std uses n - 1 and is NaN for a single fit (folds = 1).
    """
    by_candidate = {}
    for fit in fits:
        c = int(fit["candidate"])
        f = int(fit["fold"])
        per_fold = by_candidate.setdefault(c, {})
        if f in per_fold:
            raise ValueError(f"duplicate fit (candidate {c}, fold {f})")
        per_fold[f] = fit

    result = []
    for c in sorted(by_candidate):
        per_fold = by_candidate[c]
        ordered = [per_fold[f] for f in sorted(per_fold)]
        losses = [fit["best_val_loss"] for fit in ordered]
        accuracies = [fit["best_val_accuracy"] for fit in ordered]
        epochs = [fit["best_epoch"] for fit in ordered]
        result.append(
            {
                "candidate": c,
                "n": len(ordered),
                "val_loss_mean": _mean(losses),
                "val_loss_std": _sample_std(losses),
                "val_accuracy_mean": _mean(accuracies),
                "val_accuracy_std": _sample_std(accuracies),
                "best_epoch_mean": _mean(epochs),
            }
        )
    return result


def select(aggregated):
    """Index of the selected candidate: lowest mean validation loss, ties lowest index.

    A NaN mean (a diverged fit) is treated as worse than any number; if every
    mean is NaN the lowest index is chosen. (The SPEC does not say; see
    tests/search_reference_notes.md.)
    """
    best = None
    for entry in aggregated:
        c = entry["candidate"]
        loss = entry["val_loss_mean"]
        if best is None:
            best = (c, loss)
            continue
        best_c, best_loss = best
        if math.isnan(loss):
            better = math.isnan(best_loss) and c < best_c
        elif math.isnan(best_loss):
            better = True
        else:
            better = loss < best_loss or (loss == best_loss and c < best_c)
        if better:
            best = (c, loss)
    if best is None:
        raise ValueError("no candidates to select from")
    return best[0]


def refit_epochs(mean_best_epoch):
    """Refit epoch count: the mean best epoch rounded half up, at least 1.

    ROUNDING CHOICE (flagged): round half up, i.e. floor(x + 0.5), NOT Python's
    round(), which rounds half to even (round(2.5) == 2). So 2.5 -> 3, 3.5 -> 4.
    It is computed as floor(x) plus one when x - floor(x) >= 0.5; that is exact
    for every float (x - floor(x) is exact) and equals floor(x + 0.5) except at
    float artefacts such as x = 0.49999999999999994, where x + 0.5 rounds up to
    1.0 in binary64.

    The argument is used as given. Whether best epochs are 0-based epoch indices
    (section 9 numbers epochs from 0) or 1-based counts changes the result by
    one: see tests/search_reference_notes.md.
    """
    x = float(mean_best_epoch)
    if math.isnan(x):
        raise ValueError("mean best epoch is NaN")
    whole = math.floor(x)
    if x - whole >= 0.5:
        whole += 1
    return max(1, int(whole))
