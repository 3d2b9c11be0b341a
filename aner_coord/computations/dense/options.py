"""Every Dense option's check and limit, written once (docs/contracts.md, section 9).

`check_option(name, value)` is the one validator of each bounded option: `train`,
`dense_fit` and spec files (`computation.Dense.admit`) call it for every option, and a search
calls it for its fixed options and for each value of its grid (`search.grid`), so that an
option is refused alike, with the same words, whichever path admits it. A message names
its option as `{name}`, rendered by whoever reports it (`lr=`, `--lr`, `grid.lr[1]`).

Light: no numpy, so a request type and a model file's reader may import the limits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aner_coord.errors import AdmissionError, RequestError
from aner_coord.limits import check_int, check_positive, check_positive_number
from aner_worker.kernels.base import PRECISIONS
from aner_worker.kernels.dense.params import OPTIMIZERS

# Admission limits (docs/contracts.md, section 3 asks for limits with clear errors).
MAX_TEACHER_ROWS = 200_000_000
MAX_LAYER = 4096  # features, hidden units or classes
MAX_HIDDEN_LAYERS = 16
MAX_PARAMS = 4_000_000  # 32 MB of binary64 per pass's frozen parameters
MAX_BATCH = 1_000_000
MAX_EPOCHS = 10_000


def check_hidden(hidden: object) -> tuple[int, ...]:
    """Hidden layer sizes within the limits."""
    if not isinstance(hidden, tuple | list):
        raise RequestError(f"{{hidden}} must be a list of layer sizes, got {hidden!r}", "hidden")
    if len(hidden) > MAX_HIDDEN_LAYERS:
        raise AdmissionError(
            f"{{hidden}} has {len(hidden)} layers; the limit is {MAX_HIDDEN_LAYERS}", "hidden"
        )
    sizes = tuple(check_positive("hidden", h) for h in hidden)
    if any(h > MAX_LAYER for h in sizes):
        raise AdmissionError(
            f"{{hidden}} has a layer of {max(sizes):,} units; the limit is {MAX_LAYER:,}", "hidden"
        )
    return sizes


def _bounded(name: str, limit: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        number = check_positive(name, value)
        if number > limit:
            raise AdmissionError(f"{{{name}}} is {number:,}; the limit is {limit:,}", name)
        return number

    return check


def _positive(name: str) -> Callable[[object], int]:
    return lambda value: check_positive(name, value)


def _one_of(name: str, choices: tuple[str, ...]) -> Callable[[object], str]:
    def check(value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            raise RequestError(f"{{{name}}} must be {' or '.join(choices)}, got {value!r}", name)
        return value

    return check


def check_target_accuracy(value: object) -> float | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1
    ):
        raise RequestError(
            f"{{target_accuracy}} must be in (0, 1], got {value!r}", "target_accuracy"
        )
    return value


def check_delimiter(value: object) -> str | None:
    """A CSV delimiter: one character that cannot be part of a number or a quoted cell, or
    `tab` (a tab is awkward to type)."""
    if value is None:
        return None
    if value == "tab":
        return "\t"
    if not isinstance(value, str) or len(value) != 1 or value in '"\r\n' or value.isalnum():
        raise RequestError(
            f"{{delimiter}} must be one character such as , ; | or the word tab (not a letter, "
            f"digit, quote or line break), got {value!r}",
            "delimiter",
        )
    if value in ".-+":
        raise RequestError(f"{{delimiter}} {value!r} is part of numbers: give another", "delimiter")
    return value


def check_teacher(value: object) -> tuple[int, int, int]:
    if not isinstance(value, tuple | list) or len(value) != 3:
        raise RequestError("{teacher} must be ROWS,FEATURES,CLASSES", "teacher")
    rows, features, classes = (check_int("teacher", v) for v in value)
    if rows > MAX_TEACHER_ROWS:
        raise AdmissionError(
            f"{{teacher}} asks for {rows:,} rows; the limit is {MAX_TEACHER_ROWS:,}", "teacher"
        )
    return rows, features, classes


def check_path(name: str) -> Callable[[object], str | None]:
    """A path the user names: text without a NUL, which no file name can hold."""

    def check(value: object) -> str | None:
        if isinstance(value, str) and "\0" in value:
            raise RequestError(f"{{{name}}} holds a NUL character, which no path can", name)
        return None if value is None else str(value)

    return check


# The check of every bounded option, by name. A name missing here is a programming error
# (KeyError), never an option passed through unchecked.
CHECKS: dict[str, Callable[[Any], Any]] = {
    "hidden": check_hidden,
    "batch": _bounded("batch", MAX_BATCH),
    "epochs": _bounded("epochs", MAX_EPOCHS),
    "patience": _positive("patience"),
    "chunk": _positive("chunk"),
    "optimizer": _one_of("optimizer", OPTIMIZERS),
    "precision": _one_of("precision", PRECISIONS),
    "lr": lambda value: check_positive_number("lr", value),
    "target_accuracy": check_target_accuracy,
    "teacher": check_teacher,
    "delimiter": check_delimiter,
    "data": check_path("data"),
}


def check_option(name: str, value: Any) -> Any:
    """`value` of option `name` as admission takes it (RequestError naming `{name}`)."""
    return CHECKS[name](value)
