"""Which rows validate which fit (docs/contracts.md, section 12, Pool and folds), as pure functions
of the seed and the data.

- Test rows are section 9's (`dense.splits`: by row, by group, or a split the user made).
  Every other row is in the pool.
- Stratified folds (`folds = K >= 2`): for each class in class order, its pool rows ordered
  by the key `W9[r]` ascending (ties by `r`) are dealt round robin, the `j`-th to fold
  `j mod K`. Reading chosen: `j` counts that class's rows, so it starts at 0 for every
  class (the contract's sentence has one class's rows as its subject). Each class is then
  balanced within one row per fold; the totals may lean towards the low folds by up to one
  row per class.
- Grouped folds (a group column, or `groups=`): every group's pool rows go to one fold.
  Groups are placed by decreasing pool row count (test rows leave first), ties by the
  SHA256 of the group label's UTF-8 bytes compared as bytes (ascending), each in the fold
  with the fewest pool rows so far, ties to the lowest fold. There is no stratification
  then. The label is the cell's text with surrounding blanks removed, as a CSV's class
  labels are read.
- `folds = 1` is section 9's own split of the pool (by group too, with groups): its one fit
  trains on section 9's training rows and validates on its validation rows. Coded as
  folds, so that every fit is "train on the pool outside fold f, validate on fold f":
  validation rows are fold 0, training rows fold 1, and only fold 0 is fitted.

The fold bytes (one per row, in file order: the fold, 255 for a test row), their SHA256 and
the rows per fold go to the manifest. A fold without rows is refused (exit 2): its fit would
have nothing to validate on.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense.splits import group_indices
from aner_worker.kernels.dense.streams import TEST, TRAIN, VALIDATION, words
from aner_worker.kernels.search.params import TEST_FOLD

FOLD_STREAM = 9  # the key W9[r] of stratified folds
Codes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]


class FoldError(ValueError):
    """The data cannot be cut into the folds asked for; one line saying what to change."""


@dataclass(frozen=True)
class Folds:
    """Every row's fold and what the manifest records of them."""

    codes: Codes = field(repr=False)  # one byte per row: its fold, TEST_FOLD for a test row
    k: int  # the folds asked for (1: section 9's split)
    rows: list[int]  # pool rows per fold byte 0, 1, ...
    test_rows: int
    sha256: str  # of the fold bytes
    grouped: bool

    @property
    def fitted(self) -> list[int]:
        """The folds that are fitted: every fold, or fold 0 alone for section 9's split."""
        return list(range(self.k)) if self.k >= 2 else [0]

    def training_rows(self, fold: int) -> int:
        return sum(self.rows) - self.rows[fold]

    def describe(self) -> dict[str, Any]:
        return {
            "folds": self.k,
            "grouped": self.grouped,
            "rows_per_fold": list(self.rows),
            "test_rows": self.test_rows,
            "folds_sha256": self.sha256,
        }


def stratified(seed: int, y: Ints, k: int, pool_mask: npt.NDArray[np.bool_]) -> Codes:
    """Stratified fold bytes of rows whose class indices are `y` (pool rows: `pool_mask`)."""
    n = int(y.size)
    codes = np.full(n, TEST_FOLD, dtype=np.uint8)
    pool = np.flatnonzero(pool_mask).astype(np.int64)
    keys = words(seed, FOLD_STREAM, 0, n)[pool]
    classes = y[pool]
    # By class, then key, then row: each class's rows in dealing order, classes in order.
    order = np.lexsort((pool, keys, classes))
    dealt = pool[order]
    sorted_classes = classes[order]
    first = np.searchsorted(sorted_classes, sorted_classes, side="left")
    codes[dealt] = ((np.arange(dealt.size) - first) % k).astype(np.uint8)
    return codes


def group_order(labels: Sequence[str], counts: Sequence[int]) -> list[int]:
    """Indices of the groups in placement order: decreasing count, ties by the SHA256 of
    the label's UTF-8 bytes, ascending."""
    digests = [hashlib.sha256(label.encode("utf-8")).digest() for label in labels]
    return sorted(range(len(labels)), key=lambda g: (-counts[g], digests[g]))


def grouped(groups: Sequence[str], k: int, pool: npt.NDArray[np.bool_]) -> Codes:
    """Group-aware fold bytes of rows whose group labels are `groups` (pool rows: `pool`)."""
    n = len(groups)
    labels, inverse = group_indices(groups)
    counts = np.bincount(inverse[pool], minlength=len(labels))
    present = [g for g in range(len(labels)) if counts[g] > 0]
    placed = np.full(len(labels), TEST_FOLD, dtype=np.uint8)
    sizes = [(0, f) for f in range(k)]  # a heap of (pool rows so far, fold): ties lowest fold
    for i in group_order([labels[g] for g in present], [int(counts[g]) for g in present]):
        g = present[i]
        size, fold = heapq.heappop(sizes)
        placed[g] = fold
        heapq.heappush(sizes, (size + int(counts[g]), fold))
    codes = np.full(n, TEST_FOLD, dtype=np.uint8)
    codes[pool] = placed[inverse[pool]]
    return codes


def split(roles: Codes) -> Codes:
    """`folds = 1`: section 9's validation rows as fold 0, its training rows as fold 1."""
    codes = np.full(roles.size, TEST_FOLD, dtype=np.uint8)
    codes[roles == VALIDATION] = 0
    codes[roles == TRAIN] = 1
    return codes


def assign(seed: int, y: Ints, k: int, roles: Codes, groups: Sequence[str] | None = None) -> Folds:
    """The folds of a search over rows of classes `y` whose section 9 role bytes are `roles`
    (and group labels `groups`): the pool is every row that is not a test row."""
    pool = roles != TEST
    if k < 2:
        codes = split(roles)
    elif groups is not None:
        codes = grouped(groups, k, pool)
    else:
        codes = stratified(seed, y, k, pool)
    width = max(k, 2)
    rows = np.bincount(codes[codes != TEST_FOLD], minlength=width).tolist()
    folds = Folds(
        codes=codes,
        k=k,
        rows=[int(r) for r in rows[:width]],
        test_rows=int(np.count_nonzero(codes == TEST_FOLD)),
        sha256=hashlib.sha256(codes.tobytes()).hexdigest(),
        grouped=groups is not None,
    )
    _check(folds, groups, y.size)
    return folds


def _check(folds: Folds, groups: Sequence[str] | None, n_rows: int) -> None:
    pool = sum(folds.rows)
    if groups is not None and folds.k >= 2:
        codes = folds.codes
        n_groups = len({g for g, c in zip(groups, codes, strict=True) if c != TEST_FOLD})
        if n_groups < folds.k:
            raise FoldError(
                f"the pool has {n_groups} group(s), fewer than the {folds.k} folds: "
                "lower {folds} or use a column with more groups ({group})"
            )
    empty = [f for f, count in enumerate(folds.rows) if count == 0]
    if not empty:
        return
    if folds.k == 1:
        which = "validation" if empty[0] == 0 else "training"
        raise FoldError(
            f"{n_rows} rows leave train's own validation split no {which} rows: use more rows, or "
            "{folds} of 2 or more"
        )
    raise FoldError(f"fold {empty[0]} of {folds.k} has no rows ({pool} pool rows): lower {{folds}}")
