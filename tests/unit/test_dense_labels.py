"""Labels and their classes (aner_worker/kernels/dense/labels.py), as scikit-learn's
`type_of_target`: classes in the labels' own type, continuous targets and missing labels
refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aner_worker.kernels.dense.labels import (
    LabelError,
    classes_of_array,
    classes_of_texts,
    label_strings,
)

LABEL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", LABEL_DTYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_integer_and_bool_labels_keep_their_type_exactly(dtype: str, data: st.DataObject) -> None:
    labels = data.draw(hnp.arrays(dtype, st.integers(2, 50), unique=False))
    if np.unique(labels).size < 2:
        with pytest.raises(LabelError, match="at least two classes"):
            classes_of_array(labels)
        return
    classes, index = classes_of_array(labels)
    assert classes.dtype == labels.dtype
    assert classes.tolist() == sorted(set(labels.tolist()))
    assert np.array_equal(classes[index], labels)  # each row's class is its own label


def test_int64_labels_beyond_2_53_stay_distinct() -> None:
    labels = np.array([2**53, 2**53 + 1, 2**63 - 1, 2**53 + 1], dtype=np.int64)
    classes, index = classes_of_array(labels)
    assert classes.tolist() == [2**53, 2**53 + 1, 2**63 - 1]
    assert index.tolist() == [0, 1, 2, 1]


def test_whole_number_floats_stay_floats_and_text_stays_text() -> None:
    classes, _ = classes_of_array(np.array([3.0, -1.0, 3.0], dtype=np.float32))
    assert classes.dtype == np.float32 and classes.tolist() == [-1.0, 3.0]
    classes, _ = classes_of_array(np.array(["b", "a", "b"], dtype=object))
    assert classes.dtype.kind == "U" and classes.tolist() == ["a", "b"]


@pytest.mark.parametrize(
    ("labels", "position", "reason"),
    [
        (np.array([1.0, 2.0, 2.5]), 2, "Unknown label type: continuous"),
        (np.array([0.0, np.nan, 1.0]), 1, r"missing label \(NaN\)"),
        (np.array([0.0, np.inf]), 1, "not a finite number"),
        (np.array(["a", 1], dtype=object), 1, r"Mix of label input types \(string and number\)"),
        (np.array(["a", None, "b"], dtype=object), 1, "missing label"),
        (np.array([1, float("nan")], dtype=object), 1, "missing label"),
        (np.array([1 + 1j, 2j]), None, "must be numbers or text"),
        (np.array([1, 2**70], dtype=object), None, "beyond 64 bits"),
    ],
)
def test_labels_that_are_not_classes_are_refused(
    labels: np.ndarray, position: int | None, reason: str
) -> None:
    with pytest.raises(LabelError, match=reason) as caught:
        classes_of_array(labels)
    assert caught.value.position == position


def test_a_continuous_target_is_refused_whatever_its_float_type() -> None:
    rng = np.random.default_rng(1)
    for dtype in ("float16", "float32", "float64"):
        with pytest.raises(LabelError, match="Unknown label type: continuous"):
            classes_of_array((rng.integers(0, 3, 50) + 0.5).astype(dtype))


@pytest.mark.parametrize(
    ("texts", "dtype", "classes"),
    [
        (["2", "10", "-3"], np.int64, [-3, 2, 10]),
        (["9007199254740993", "9007199254740992"], np.int64, [2**53, 2**53 + 1]),
        (["1", "1.0", "2e0"], np.float64, [1.0, 2.0]),
        (["b", "a", "1"], np.str_, ["1", "a", "b"]),
        ([str(2**64), "1"], np.str_, ["1", str(2**64)]),  # beyond int64: kept as written
    ],
)
def test_csv_labels_are_integers_numbers_or_text(
    texts: list[str], dtype: type, classes: list[object]
) -> None:
    found, index = classes_of_texts(texts)
    assert found.dtype.type is dtype and found.tolist() == classes
    assert len(index) == len(texts)


@pytest.mark.parametrize(
    ("texts", "position", "reason"),
    [
        (["1", "0.5", "2"], 1, "Unknown label type: continuous"),
        (["1", "nan"], 1, r"missing label \(NaN\)"),
        (["a", "NaN"], 1, "missing label"),
        (["1", "inf"], 1, "not a finite number"),
        (["a", "a"], None, "at least two classes"),
    ],
)
def test_csv_labels_that_are_not_classes_are_refused(
    texts: list[str], position: int | None, reason: str
) -> None:
    with pytest.raises(LabelError, match=reason) as caught:
        classes_of_texts(texts)
    assert caught.value.position == position


def test_label_strings_write_each_type_as_read() -> None:
    assert label_strings(np.array([False, True])) == ["False", "True"]
    assert label_strings(np.array([2**63 - 1], dtype=np.int64)) == [str(2**63 - 1)]
    assert label_strings(np.array([2**64 - 1], dtype=np.uint64)) == [str(2**64 - 1)]
    assert label_strings(np.array([3.0, 1e20])) == ["3", "1e+20"]
