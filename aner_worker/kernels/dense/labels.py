"""Labels and their classes (docs/contracts.md, section 9, Data), checked as scikit-learn's
`type_of_target` checks a classifier's target.

Classes are the sorted distinct labels, in the labels' own type, and a row's class index
is its label's position among them:

- an array's labels keep their dtype exactly: bool, every integer width (int64 beyond
  2**53 included), floats that are whole numbers, text;
- an object array is read as text when every label is a `str`, as numbers when every
  label is a real number (numpy then picks the type), and refused when it mixes the two;
- a CSV's labels are integers (int64) when every label is written as one that fits, else
  numbers (float64) when every label parses as one, else text;
- floats that are not whole numbers are a continuous target, not classes: refused, as
  scikit-learn says, "Unknown label type: continuous"; so is a missing label (NaN, None,
  `pd.NA`, an empty CSV cell) and an infinite one.

A refusal is a `LabelError` that names the label's position; callers say where that is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Classes = npt.NDArray[Any]  # bool, integers, floats or str: the labels' own type

CONTINUOUS = (
    "Unknown label type: continuous (a measurement, not classes): aner trains classifiers, "
    "which need discrete labels (integers, whole numbers or names)"
)
MIXED = "Mix of label input types (string and number): give every label as text or as a number"
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


class LabelError(ValueError):
    """Labels that cannot be classes: why, and the position (0-based) of the first one
    concerned (None when it concerns them all)."""

    def __init__(self, reason: str, position: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position


def classes_of_array(labels: npt.NDArray[Any]) -> tuple[Classes, Ints]:
    """The sorted classes of a 1-D array of labels, in their own type, and each label's
    class index."""
    kind = labels.dtype.kind
    if kind == "O":
        return classes_of_array(_from_objects(labels))
    if kind == "S":
        labels = labels.astype(np.str_)
    elif kind == "f":
        _check_floats(labels)
    elif kind not in "biuU":
        raise LabelError(f"labels must be numbers or text, not {labels.dtype}")
    return _unique(labels)


def classes_of_texts(texts: Sequence[str]) -> tuple[Classes, Ints]:
    """The sorted classes of a CSV's label cells (blanks around them removed)."""
    numbers: list[float] = []
    for position, text in enumerate(texts):
        try:
            value = float(text)
        except ValueError:
            if not text:
                raise LabelError("is a missing label", position) from None
            break
        if value != value:
            raise LabelError(f"is {text[:20]!r}, a missing label (NaN)", position)
        numbers.append(value)
    if len(numbers) < len(texts):
        for position, text in enumerate(texts):  # text labels, but none missing
            if not text or text.lower() in ("nan", "+nan", "-nan"):
                raise LabelError(f"is {text!r}, a missing label", position)
        return _unique(np.array(texts, dtype=np.str_))
    if all(_INTEGER.fullmatch(text) for text in texts):
        integers = [int(text) for text in texts]
        if min(integers) >= -(2**63) and max(integers) < 2**63:
            return _unique(np.array(integers, dtype=np.int64))
        return _unique(np.array(texts, dtype=np.str_))  # beyond int64: kept as written
    values = np.array(numbers, dtype=np.float64)
    _check_floats(values)
    return _unique(values)


def _check_floats(labels: npt.NDArray[Any]) -> None:
    finite = np.isfinite(labels)
    if not finite.all():
        position = int(np.argmin(finite))
        value = labels[position]
        what = "a missing label (NaN)" if value != value else "not a finite number"
        raise LabelError(f"is {float(value)!r}, {what}", position)
    whole = labels == np.floor(labels)
    if not whole.all():
        position = int(np.argmin(whole))
        raise LabelError(f"{CONTINUOUS}; the first is {float(labels[position])!r}", position)


def _from_objects(labels: npt.NDArray[Any]) -> npt.NDArray[Any]:
    texts = numbers = 0
    for position, value in enumerate(labels):
        if isinstance(value, str):
            texts += 1
        elif isinstance(value, bool | int | float | np.bool_ | np.integer | np.floating):
            numbers += 1
            if value != value:
                raise LabelError("is a missing label (NaN)", position)
        elif value is None or type(value).__name__ == "NAType":
            raise LabelError("is a missing label", position)
        else:
            raise LabelError(f"is a {type(value).__name__}, not a number or text", position)
        if texts and numbers:
            raise LabelError(MIXED, position)
    if texts:
        return np.array(labels.tolist(), dtype=np.str_)
    out = np.array(labels.tolist())
    if out.dtype.kind == "O":
        raise LabelError("holds integers beyond 64 bits: give them as text")
    return out


def _unique(labels: npt.NDArray[Any]) -> tuple[Classes, Ints]:
    classes, index = np.unique(labels, return_inverse=True)
    if classes.size < 2:
        raise LabelError(f"needs at least two classes, found {classes.size}")
    return classes, index.astype(np.int64).reshape(-1)


def label_strings(classes: Classes) -> list[str]:
    """Each class as a user would write it: `3` for an integer (or the float 3.0), `True`
    for a bool, text unchanged. For prediction output, where the label, not the class
    index, is what a user reads."""
    kind = classes.dtype.kind
    if kind in "iu":
        return [str(int(v)) for v in classes]
    if kind == "f":
        return [
            str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))
            for v in classes
        ]
    return [str(v) for v in classes]
