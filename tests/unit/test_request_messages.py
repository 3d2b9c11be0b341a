"""A refusal is one bounded line that still says what to change (issue 25 item 9;
`aner_coord.errors.RequestError`)."""

from __future__ import annotations

import pytest

from aner_coord import parallel
from aner_coord.errors import MAX_MESSAGE_CHARS, AdmissionError, RequestError, cli_name


def test_a_huge_echoed_word_is_shown_by_its_ends_and_the_line_keeps_its_advice() -> None:
    word = "a" * 100 + "b" * 899_860 + "c" * 40
    error = RequestError(f"{{optimizer}} must be adam or sgd, got {word!r}: use adam", "optimizer")
    text = str(error)
    assert len(text) <= MAX_MESSAGE_CHARS
    assert text.startswith("optimizer= must be adam or sgd, got 'aaaa")
    assert "[... 899,863 characters ...]" in text and text.endswith("cccc': use adam")
    assert error.render(cli_name).startswith("--optimizer must be")


def test_a_refusal_longer_than_the_bound_is_cut_saying_so() -> None:
    text = str(AdmissionError("; ".join(["a short reason"] * 100)))
    assert len(text) == MAX_MESSAGE_CHARS and "characters in all]" in text
    assert "\n" not in str(RequestError("two\nlines"))


def test_the_api_refuses_a_huge_grid_value_in_a_bounded_line() -> None:
    with pytest.raises(RequestError) as refused:
        parallel.search(teacher=(1000, 4, 2), seed=1, folds=2, grid={"optimizer": ["x" * 900_000]})
    assert len(str(refused.value)) <= MAX_MESSAGE_CHARS
    assert "optimizer" in str(refused.value) and "characters ...]" in str(refused.value)
