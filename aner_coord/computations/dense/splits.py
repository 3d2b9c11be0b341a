"""Which role each row takes (docs/contracts.md, section 9, Roles), as pure functions of the seed,
the request and the data, for `train`, `cv` and `search` alike.

Three rules, one per request:
- by row (no groups, no split): section 9's own, `u = U(W8[r])`, with the request's
  fractions (`test_fraction`, `validation_fraction`, default 0.15 each);
- by group (`group` / `groups=`): every row of a group takes its group's role. A group is
  its label's text; its digest `D` is the SHA256 of the text's UTF-8 bytes, its word index
  `k = int.from_bytes(D[:8], "big") >> 1`, and `u = U(W10[k])` of stream 10 is its draw.
  The groups ordered by their draw, the first share are test, the next validation, the
  rest train, each share rounded so that no wanted role is empty (`group_shares`). The
  roles depend on the group labels and the seed alone, never on the order of the rows;
- given (`split_column` / `split=`): the user's own `train` / `validation` / `test` per row.

A request names its groups or its split either as a CSV column or, from the API, as an
array held in this process (`hold`, named `labels:sha256:...` like `arrays` names X, y).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aner_coord.computations.dense import columns
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.errors import RequestError
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.plan import (
    DEFAULT_TEST_FRACTION,
    DEFAULT_VALIDATION_FRACTION,
    PlanError,
    Roles,
    roles_of,
)
from aner_worker.kernels.dense.streams import TEST, TRAIN, VALIDATION, role_codes, words_at

GROUP_STREAM = 10  # the key W10[k] of a group's role
PREFIX = "labels:"
ROLE_NAMES = {"train": TRAIN, "validation": VALIDATION, "test": TEST}
KEPT = 8  # label arrays a process keeps for the requests that name them
Codes = npt.NDArray[np.uint8]
_SHIFT = np.uint64(11)
_held: OrderedDict[str, list[str]] = OrderedDict()


@dataclass(frozen=True)
class Rule:
    """How a request's rows get their roles: by row, by group (`groups`) or given (`given`,
    each row's role name). The fractions are None where a given split decides; the
    validation fraction is None where folds validate."""

    test_fraction: float | None
    validation_fraction: float | None
    groups: Sequence[str] | None = None
    given: Sequence[str] | None = None

    def describe(self) -> dict[str, Any]:
        """What the manifest records of the rule."""
        kind = "given" if self.given is not None else "groups" if self.groups else "rows"
        out: dict[str, Any] = {
            "split": kind,
            "test_fraction": self.test_fraction,
            "validation_fraction": self.validation_fraction,
        }
        if self.groups is not None:
            out["groups"] = len(set(self.groups))
        return out


# -- fractions ---------------------------------------------------------------------------


def _fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{{{name}}} must be a number in [0, 1), got {value!r}", name)
    if not 0 <= value < 1:
        raise RequestError(f"{{{name}}} must be in [0, 1), got {value}", name)
    return float(value)


def fractions(test: object, validation: object, *, validation_used: bool) -> tuple[float, float]:
    """The test and validation fractions (None: 0.15 each). The test fraction may be 0 (no
    held-out test: test metrics are null); the validation fraction must be positive where
    it is used (early stopping needs a validation loss); their sum is below 1."""
    t = DEFAULT_TEST_FRACTION if test is None else _fraction("test_fraction", test)
    v = DEFAULT_VALIDATION_FRACTION
    if validation is not None:
        if not validation_used:
            raise RequestError(
                "{validation_fraction} applies to train's own validation split ({folds} 1): "
                "with 2 or more folds each fold validates",
                "validation_fraction",
                "folds",
            )
        v = _fraction("validation_fraction", validation)
        if v == 0:
            raise RequestError(
                "{validation_fraction} must be positive: early stopping needs validation rows",
                "validation_fraction",
            )
    if validation_used and t + v >= 1:
        raise RequestError(
            f"{{test_fraction}} {t} and {{validation_fraction}} {v} leave no training rows: "
            "their sum must be below 1",
            "test_fraction",
            "validation_fraction",
        )
    return t, v


# -- the rules ---------------------------------------------------------------------------


def group_index(label: str) -> int:
    """The word index `k` of a group's `u`: the first 8 bytes of its digest, shifted."""
    digest = hashlib.sha256(label.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def group_codes(
    seed: int, groups: Sequence[str], test_fraction: float, validation_fraction: float
) -> Codes:
    """One role byte per row, every row taking its group's role: the groups ordered by
    their `u`, each role given its share of them (`group_shares`)."""
    labels, inverse = group_indices(groups)
    index = np.array([group_index(label) for label in labels], dtype=np.int64)
    u = (words_at(seed, GROUP_STREAM, index) >> _SHIFT).astype(np.float64) * 2.0**-53
    n_test, n_validation = group_shares(len(labels), test_fraction, validation_fraction)
    # By u, ties by the label's UTF-8 bytes: a function of the labels, never of row order.
    order = sorted(range(len(labels)), key=lambda g: (u[g], labels[g].encode("utf-8")))
    per_group = np.full(len(labels), TRAIN, dtype=np.uint8)
    per_group[order[:n_test]] = TEST
    per_group[order[n_test : n_test + n_validation]] = VALIDATION
    out: Codes = per_group[inverse]
    return out


def group_shares(
    n_groups: int, test_fraction: float, validation_fraction: float
) -> tuple[int, int]:
    """The test and validation groups of `n_groups` (docs/contracts.md, section 9, Splits and
    groups): each fraction's share rounded half up, `floor(t*G + 1/2)` test groups and
    `floor((t + v)*G + 1/2)` test and validation groups together; then each wanted role
    (test where `t > 0`, validation where `v > 0`) at least one group, and train at least
    one, taken one at a time from validation or test, whichever has more groups above its
    minimum (validation on a tie). With fewer groups than wanted roles a role stays empty:
    `check_group_count` refuses such a request."""
    minimum = {"test": int(test_fraction > 0), "validation": int(validation_fraction > 0)}
    n_test = math.floor(test_fraction * n_groups + 0.5)
    n_validation = math.floor((test_fraction + validation_fraction) * n_groups + 0.5) - n_test
    counts = {
        "test": max(n_test, minimum["test"]),
        "validation": max(n_validation, minimum["validation"]),
    }
    while n_groups - counts["test"] - counts["validation"] < 1:
        giver = max(("validation", "test"), key=lambda name: counts[name] - minimum[name])
        counts[giver] -= 1
    return counts["test"], counts["validation"]


def check_group_count(n_groups: int, test_fraction: float, validation_fraction: float) -> None:
    """RequestError, naming the count, where `n_groups` cannot give each wanted role a group."""
    wanted = ["train"]
    wanted += ["validation"] if validation_fraction > 0 else []
    wanted += ["test"] if test_fraction > 0 else []
    if n_groups < len(wanted):
        raise RequestError(
            f"{n_groups} group(s) cannot fill the {len(wanted)} roles ({', '.join(wanted)}), "
            "each at least one group: give more distinct groups"
            + (", or {test_fraction} 0 (no held-out test)" if test_fraction > 0 else ""),
            "group",
            "test_fraction",
        )


def group_indices(groups: Sequence[str]) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The distinct labels in order of appearance, and each row's index among them. (Not
    numpy's `unique` of a string array: it drops trailing NUL characters, merging groups.)"""
    first: dict[str, int] = {}
    inverse = np.fromiter(
        (first.setdefault(g, len(first)) for g in groups), dtype=np.int64, count=len(groups)
    )
    return list(first), inverse


def given_codes(values: Sequence[str], what: str, *, validation_needed: bool = True) -> Codes:
    """The role bytes of a split the user made; RequestError naming the first unknown value,
    or a role without rows that the training needs."""
    out = np.empty(len(values), dtype=np.uint8)
    for r, value in enumerate(values):
        code = ROLE_NAMES.get(value.strip().lower())
        if code is None:
            raise RequestError(
                f"{{{what}}} row {r} is {value[:40]!r}: each row must be train, validation or test",
                what,
            )
        out[r] = code
    if not np.any(out == TRAIN):
        raise RequestError(f"{{{what}}} has no train rows: mark some rows train", what)
    if validation_needed and not np.any(out == VALIDATION):
        raise RequestError(
            f"{{{what}}} has no validation rows: mark some rows validation (early stopping "
            "needs them)",
            what,
        )
    return out


def codes_of(seed: int, n_rows: int, rule: Rule, *, validation_needed: bool = True) -> Codes:
    """Every row's role byte under `rule`."""
    if rule.given is not None:
        return given_codes(rule.given, "split_column", validation_needed=validation_needed)
    assert rule.test_fraction is not None
    # Without a validation fraction (the folds validate) the pool is all training rows.
    validation = rule.validation_fraction or 0.0
    if rule.groups is not None:
        check_group_count(len(set(rule.groups)), rule.test_fraction, validation)
        return group_codes(seed, rule.groups, rule.test_fraction, validation)
    return role_codes(seed, n_rows, rule.test_fraction, validation)


# -- labels given as arrays --------------------------------------------------------------


def label_texts(values: Any, what: str, n_rows: int | None = None) -> list[str]:
    """An array of group labels or role names as the texts a CSV would hold: whole numbers
    as `3` (so that 3, 3.0 and a CSV's "3" are one group), other numbers as Python's
    `repr`, strings without surrounding blanks. A missing value is refused, and so is a
    masked array (its mask would be lost)."""
    if isinstance(values, np.ma.MaskedArray):
        raise RequestError(f"{what}= is a masked array: fill its masked cells or drop those rows")
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"{what}= must be a 1-D array ({exc})") from None
    if array.ndim != 1:
        raise RequestError(f"{what}= must be a 1-D array, got shape {array.shape}")
    if n_rows is not None and array.size != n_rows:
        raise RequestError(f"{what}= must hold one value per row of X ({n_rows}), got {array.size}")
    out: list[str] = []
    for r, value in enumerate(array.tolist()):
        if isinstance(value, float):
            if not math.isfinite(value):
                raise RequestError(f"{what}= has a missing or non-finite value at [{r}]")
            text = str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
        elif value is None:
            raise RequestError(f"{what}= has a missing value at [{r}]")
        else:
            text = str(value).strip()
        if not text:
            raise RequestError(f"{what}= has an empty value at [{r}]")
        out.append(text)
    return out


def hold(texts: list[str]) -> str:
    """Keep `texts` for the request that names them; their name."""
    digest = hashlib.sha256(f"aner-labels/v1 {len(texts)}\n".encode())
    digest.update(json.dumps(texts).encode())
    name = PREFIX + "sha256:" + digest.hexdigest()
    _held[name] = texts
    _held.move_to_end(name)
    while len(_held) > KEPT:
        _held.popitem(last=False)
    return name


def is_held(name: str | None) -> bool:
    return name is not None and name.startswith(PREFIX)


def held(name: str, what: str) -> list[str]:
    found = _held.get(name)
    if found is None:
        raise RequestError(
            f"{{{what}}} {name[:80]}: labels that this process does not hold (an earlier "
            "session's): give the array again",
            what,
        )
    return found


# -- a request's rule --------------------------------------------------------------------


def rule_of(
    test_fraction: object,
    validation_fraction: object,
    groups: Sequence[str] | None,
    given: Sequence[str] | None,
    *,
    validation_used: bool = True,
) -> Rule:
    """The rule of a request. A split the user made decides every role, so it takes no
    fractions and no groups; groups take the fractions (a group's role is drawn)."""
    if given is not None:
        for name, value in (
            ("group", groups),
            ("test_fraction", test_fraction),
            ("validation_fraction", validation_fraction),
        ):
            if value is not None:
                raise RequestError(
                    f"{{split_column}} decides every row's role: give it without {{{name}}}",
                    "split_column",
                    name,
                )
        return Rule(None, None, None, given)
    t, v = fractions(test_fraction, validation_fraction, validation_used=validation_used)
    return Rule(t, v if validation_used else None, groups, None)


def columns_named(data: str | None, group: str | None, split: str | None) -> dict[str, str]:
    """The CSV columns that a request's `group` and `split_column` name (what to column). An
    array given from the API is no column, and goes with arrays X, y only."""
    out: dict[str, str] = {}
    for what, value in (("group", group), ("split_column", split)):
        if value is None:
            continue
        if is_held(value):
            if data is None or not data.startswith("array:"):
                raise RequestError(
                    f"{{{what}}} as an array goes with arrays X and y; with a file name its column",
                    what,
                )
            continue
        if data is None:
            raise RequestError(f"{{{what}}} needs a CSV file: the teacher set has no columns", what)
        if data.startswith("array:"):
            raise RequestError(
                f"{{{what}}} needs a CSV file: arrays have no named columns (give the values "
                "as an array)",
                what,
            )
        if data == "digits" or data.lower().endswith(".npz"):
            raise RequestError(
                f"{{{what}}} needs a CSV file: {os.path.basename(data)} has no named columns",
                what,
            )
        out[what] = value
    return out


def texts_of(
    columns: dict[str, list[str]], group: str | None, split: str | None, n_rows: int
) -> tuple[list[str] | None, list[str] | None]:
    """Each row's group and role texts, from the CSV's columns or held arrays."""
    found: list[list[str] | None] = []
    for what, value in (("group", group), ("split_column", split)):
        if value is None:
            found.append(None)
            continue
        texts = held(value, what) if is_held(value) else columns[what]
        if len(texts) != n_rows:
            raise RequestError(
                f"{{{what}}} has {len(texts)} values for {n_rows} rows: one per row", what
            )
        found.append(texts)
    return found[0], found[1]


def roles_for(
    request: DenseRequest, dataset: Dataset, *, validation_used: bool = True
) -> tuple[Rule, Roles]:
    """The rule and the roles of `request`'s rows (`dataset`, as `load_dataset` read it);
    RequestError naming the option to change. `validation_used` is False for a search of 2
    or more folds, whose folds validate."""
    groups, given = texts_of(
        columns.texts(dataset), request.group, request.split_column, dataset.n_rows
    )
    rule = rule_of(
        request.test_fraction,
        request.validation_fraction,
        groups,
        given,
        validation_used=validation_used,
    )
    codes = codes_of(request.seed, dataset.n_rows, rule, validation_needed=validation_used)
    where = f"{len(set(groups))} groups" if groups is not None else f"{dataset.n_rows} rows"
    test_wanted = rule.test_fraction is not None and rule.test_fraction > 0
    try:
        roles = roles_of(
            codes,
            where,
            test_wanted=test_wanted,
            # Rows drawn one by one may leave the validation role empty on tiny data: the
            # training then stops on its training loss (docs/contracts.md, section 9, Tiny
            # data). Groups and a given split must fill it.
            validation_wanted=validation_used and (groups is not None or given is not None),
            more="groups" if groups is not None else "rows",
        )
    except PlanError as exc:
        raise RequestError(str(exc), "test_fraction", "validation_fraction") from None
    return rule, roles
