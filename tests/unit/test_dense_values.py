"""Feature values as binary64 (aner_worker/kernels/dense/values.py): every dtype either
converts exactly, to the very float64 values Python's own arithmetic gives, or is refused
naming the first cell concerned."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aner_worker.kernels.dense.values import NotExact, as_float64

EXACT_DTYPES = [
    "bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
]  # fmt: skip


def expected(raw: np.ndarray) -> np.ndarray:
    """The values as Python numbers, then binary64: what "the same values" means."""
    return np.array([float(v) for v in raw.ravel().tolist()], dtype=np.float64).reshape(raw.shape)


@pytest.mark.parametrize("dtype", EXACT_DTYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_real_dtype_converts_exactly(dtype: str, data: st.DataObject) -> None:
    kind = np.dtype(dtype).kind
    elements: dict[str, Any] = {}
    if kind == "f":
        elements = {"elements": {"allow_nan": False, "allow_infinity": False}}
    elif kind in "iu" and np.dtype(dtype).itemsize == 8:
        # Integers binary64 holds: within 2**53, or multiples of the spacing beyond it.
        info = np.iinfo(dtype)
        small = st.integers(max(int(info.min), -(2**53)), min(int(info.max), 2**53))
        big = st.integers(int(info.min) >> 11, int(info.max) >> 11).map(lambda v: v << 11)
        elements = {"elements": small | big}
    raw = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=2, max_dims=2), **elements))
    out = as_float64(raw)
    assert out.dtype == np.float64 and out.shape == raw.shape
    assert np.array_equal(out, expected(raw))
    if kind in "iu":  # and back: not one integer was rounded
        assert [int(v) for v in out.ravel()] == [int(v) for v in raw.ravel().tolist()]


@pytest.mark.parametrize(
    ("raw", "cell", "reason"),
    [
        (
            np.array([[1, 2**64 - 1]], dtype=np.uint64),
            (0, 1),
            "18446744073709551615, which binary64",
        ),
        (np.array([[2**53 + 1]], dtype=np.int64), (0, 0), "9007199254740993, which binary64"),
        (np.array([[0], [2**63 - 1]], dtype=np.int64), (1, 0), "cannot hold exactly"),
        (np.array([[1.0, np.nan]]), (0, 1), r"not a finite number \(nan\)"),
        (np.array([[np.inf]], dtype=np.float16), (0, 0), r"not a finite number \(inf\)"),
        (np.array([[1, None]], dtype=object), (0, 1), "a missing value"),
        (np.array([[1, "2"]], dtype=object), (0, 1), "'2', a str, not a real number"),
        (np.array([[1, 2**60 + 1]], dtype=object), (0, 1), "cannot hold exactly"),
        (np.array([[10**400]], dtype=object), (0, 0), "beyond binary64's range"),
    ],
)
def test_a_value_binary64_cannot_hold_is_refused_naming_its_cell(
    raw: np.ndarray, cell: tuple[int, int], reason: str
) -> None:
    with pytest.raises(NotExact, match=reason) as caught:
        as_float64(raw)
    assert caught.value.cell == cell


def test_exact_integers_beyond_2_53_are_kept() -> None:
    raw = np.array([[2**53 + 2, 2**63 - 1024, -(2**63)]], dtype=np.int64)
    assert [int(v) for v in as_float64(raw)[0]] == [2**53 + 2, 2**63 - 1024, -(2**63)]
    top = np.array([[2**64 - 2048]], dtype=np.uint64)
    assert int(as_float64(top)[0, 0]) == 2**64 - 2048


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (np.array([[1 + 0j]]), "complex numbers"),
        (np.array([["1.5"]]), "text, not numbers"),
        (np.array([[b"1"]]), "bytes, not numbers"),
        (np.array([["2024-01-01"]], dtype="datetime64[D]"), "dates"),
    ],
)
def test_dtypes_that_are_not_real_numbers_are_refused_whole(raw: np.ndarray, reason: str) -> None:
    with pytest.raises(NotExact, match=reason) as caught:
        as_float64(raw)
    assert caught.value.cell is None


def test_objects_that_are_real_numbers_convert_by_their_own_rule() -> None:
    raw = np.array([[True, 3, 0.5, np.float32(0.1), np.int64(2**53 + 2)]], dtype=object)
    out = as_float64(raw)
    assert out.tolist() == [[1.0, 3.0, 0.5, float(np.float32(0.1)), float(2**53 + 2)]]


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="longdouble is binary64 here")
def test_a_wider_float_converts_only_when_binary64_holds_it() -> None:
    assert as_float64(np.array([[0.5, 3.0]], dtype=np.longdouble)).tolist() == [[0.5, 3.0]]
    third = np.longdouble(1) / np.longdouble(3)
    with pytest.raises(NotExact, match="cannot hold exactly") as caught:
        as_float64(np.array([[0.5, third]], dtype=np.longdouble))
    assert caught.value.cell == (0, 1)
