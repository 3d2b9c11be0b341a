"""Feature values as binary64, exactly or not at all (docs/contracts.md, section 9, Data).

Training and prediction compute in binary64, so every input array is converted to float64
first, by one rule for the API's arrays, an NPZ's `X` and the rows `predict` is given:

- float64 is taken as it is; float16 and float32 widen exactly; bool is 0.0 and 1.0;
- integers of up to 32 bits convert exactly; int64 and uint64 only when every value is a
  binary64 number (within 2**53 in magnitude, or a multiple of the spacing beyond it);
- a wider float (`np.longdouble`) only when every value is a binary64 number;
- an object array only when every element is a real number (bool, int, float or a numpy
  scalar of one), each under the rule of its type;
- complex numbers, text, dates and anything else are refused, and so is a value that is
  not finite (NaN, infinity).

So a converted array gives bitwise the result of the same values given as float64, and a
refusal (`NotExact`) names the first cell it concerns, for the caller to say where it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]

_REFUSED_KINDS = {
    "c": "complex numbers (give the real part, X.real, if that is what you mean)",
    "U": "text, not numbers",
    "S": "bytes, not numbers",
    "M": "dates, not numbers",
    "m": "time spans, not numbers",
}


class NotExact(ValueError):
    """Values that do not convert to binary64 exactly: why, the first cell concerned (None
    when the whole array is refused for its type) and what was refused, for a caller that
    words it its own way (the API as scikit-learn does): `dtype` (the array's type),
    `element` (an object that is no real number), `missing` (None, `pd.NA`), `nan`,
    `infinity` or `inexact` (a number binary64 cannot hold)."""

    def __init__(
        self, reason: str, cell: tuple[int, ...] | None = None, kind: str = "inexact"
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cell = cell
        self.kind = kind


def as_float64(raw: npt.NDArray[Any]) -> Floats:
    """`raw` as float64 under the rule above, finite, or `NotExact`."""
    kind = raw.dtype.kind
    if kind in _REFUSED_KINDS:
        raise NotExact(f"holds {_REFUSED_KINDS[kind]}", kind="dtype")
    if kind == "O":
        out = _objects(raw)
    elif kind == "b" or (kind in "iu" and raw.dtype.itemsize <= 4):
        out = raw.astype(np.float64)
    elif kind in "iu":
        out = _wide_integers(raw)
    elif kind == "f":
        out = _floats(raw)
    else:
        raise NotExact(f"holds {raw.dtype}, not real numbers", kind="dtype")
    finite = np.isfinite(out)
    if not finite.all():
        cell = _first(~finite)
        value = float(out[cell])
        which = "nan" if value != value else "infinity"
        raise NotExact(f"is not a finite number ({value!r})", cell, which)
    return out


def _first(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _wide_integers(raw: npt.NDArray[Any]) -> Floats:
    """int64 or uint64: exact when converting back gives the same integer. A value that
    rounds up to 2**63 (2**64 unsigned) cannot be converted back; it was not exact."""
    out = raw.astype(np.float64)
    limit = 2.0**63 if raw.dtype.kind == "i" else 2.0**64
    fits = out < limit
    back = np.where(fits, out, 0.0).astype(raw.dtype)
    exact = fits & (back == raw)
    if not exact.all():
        cell = _first(~exact)
        raise NotExact(
            f"is {int(raw[cell])}, which binary64 cannot hold exactly (an integer beyond 2**53 "
            "that is not a multiple of binary64's spacing there): rescale it or give it as float64",
            cell,
        )
    return out


def _floats(raw: npt.NDArray[Any]) -> Floats:
    # float64 is taken in place (no copy of a large X); float16 and float32 widen exactly.
    out = raw.astype(np.float64, copy=False)
    if raw.dtype.itemsize <= 8:
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        exact = (out.astype(raw.dtype) == raw) | ~np.isfinite(raw)
    if not exact.all():
        cell = _first(~exact)
        raise NotExact(f"is {raw[cell]!r}, which binary64 cannot hold exactly", cell)
    return out


def _objects(raw: npt.NDArray[Any]) -> Floats:
    out = np.empty(raw.shape, dtype=np.float64)
    for cell, value in np.ndenumerate(raw):
        out[cell] = _object_value(value, cell)
    return out


def _object_value(value: Any, cell: tuple[int, ...]) -> float:
    if isinstance(value, bool | np.bool_):
        return float(value)
    if isinstance(value, int | np.integer):
        try:
            number = float(value)
        except OverflowError:  # beyond binary64's range altogether
            raise NotExact(f"is {int(value)}, beyond binary64's range", cell) from None
        if int(number) != int(value):
            raise NotExact(f"is {int(value)}, which binary64 cannot hold exactly", cell)
        return number
    if isinstance(value, float | np.floating):
        number = float(value)
        if isinstance(value, np.floating) and value.dtype.itemsize > 8 and number != value:
            raise NotExact(f"is {value!r}, which binary64 cannot hold exactly", cell)
        return number
    if value is None or type(value).__name__ == "NAType":
        raise NotExact("is a missing value", cell, "missing")
    shown = repr(value)[:40]
    raise NotExact(f"is {shown}, a {type(value).__name__}, not a real number", cell, "element")
