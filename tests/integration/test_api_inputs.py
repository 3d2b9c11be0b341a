"""The Python API refuses what the contract refuses, by every entry point alike (issue 35,
item 4): the odd X of `api_inputs` through `dense_fit`, `DenseClassifier.fit`,
`cross_validate` and `search` must give one verdict, and through `predict`, `predict_proba`
and `score` of a fit, a search, the estimator and a loaded model another (the same from
each), each the one its case expects: accepted, or refused in one line. No prediction is
ever NaN or a class by accident: a row the model cannot evaluate is refused naming its row
and column, as `aner parallel predict` refuses it.

Every training is tiny (40 rows, one epoch, one thread); the verdicts are found once, in a
module fixture, and each case's test asserts on its own."""

from __future__ import annotations

import re
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from api_inputs import (
    CASES_MIN,
    Case,
    base,
    cases,
    fit_entry_points,
    fitted,
    frame,
    labels_for,
    predict_entry_points,
    verdict,
)
from support import run_aner

from aner_coord import parallel
from aner_coord.computations.dense.model import NotEvaluable, encode_model
from aner_coord.errors import RequestError

CASES = {case.id: case for case in cases()}


@pytest.fixture(scope="module")
def verdicts() -> Iterator[dict[str, dict[str, dict[str, str]]]]:
    """Per case, per side (fit, predict), each entry point's verdict."""
    with tempfile.TemporaryDirectory(prefix="aner-api-inputs-") as tmp:
        models = fitted(str(Path(tmp) / "job"))
        sides = {"fit": fit_entry_points(), "predict": predict_entry_points(models)}
        found: dict[str, dict[str, dict[str, str]]] = {}
        for case in CASES.values():
            x, y = base()[0], labels_for(case)
            found[case.id] = {
                side: {name: _quietly(call, case.make(x), y) for name, call in points.items()}
                for side, points in sides.items()
            }
        yield found


def _quietly(call: object, x: object, y: object) -> str:
    # The estimator warns, as scikit-learn does, when only one side has feature names; the
    # other entry points take such rows by position without a word (docs/contracts.md, 9).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"X (does not )?ha(s|ve) (valid )?feature names")
        return verdict(call, x, y)  # type: ignore[arg-type]


@pytest.mark.parametrize("case_id", list(CASES))
@pytest.mark.parametrize("side", ["fit", "predict"])
def test_every_entry_point_gives_the_cases_verdict(
    case_id: str, side: str, verdicts: dict[str, dict[str, dict[str, str]]]
) -> None:
    case: Case = CASES[case_id]
    found = verdicts[case_id][side]
    assert len(set(found.values())) == 1, f"{case_id}: entry points differ: {found}"
    one = next(iter(found.values()))
    pattern = getattr(case, side)
    if pattern is None:
        assert one == "accepted", f"{case_id} ({side}): {one}"
    else:
        kind, _, message = one.partition(": ")
        assert kind in ("RequestError", "InputTypeError", "NotEvaluable"), one
        assert re.search(pattern, message), f"{case_id} ({side}): {one}"
        assert "\n" not in message


def test_the_corpus_is_large_and_covers_the_report() -> None:
    assert len(CASES) >= CASES_MIN
    # issue 35's own reproductions
    assert {"issue_35_full_row", "masked_with_a_mask", "object_text", "object_fraction"} <= set(
        CASES
    )
    assert {"object_decimal", "frame_renamed", "big_endian_f8", "non_contiguous_view"} <= set(CASES)


def test_accepted_rows_predict_as_their_float64_values_everywhere(
    verdicts: dict[str, dict[str, dict[str, str]]], tmp_path: Path
) -> None:
    # A converted X is bitwise its values in float64 (section 9), whatever the entry point.
    models = fitted(str(tmp_path / "job"))
    x = base()[0]
    for case in CASES.values():
        if case.predict is not None:
            continue
        made = case.make(x)
        if hasattr(made, "columns"):
            named = all(isinstance(c, str) for c in made.columns)
            reference = (made[["a", "b", "c", "d"]] if named else made).astype(np.float64)
            reference = reference.to_numpy()
        else:
            reference = np.asarray(made, dtype=np.float64)
        for model in (models.fit, models.search, models.loaded):
            assert np.array_equal(model.predict_proba(made), model.predict_proba(reference))


def test_a_loaded_model_whose_weights_overflow_is_refused_not_answered(tmp_path: Path) -> None:
    # issue 35: a model.npz of 1e308 weights gave NaN probabilities and class 0.
    job = tmp_path / "job"
    parallel.dense_fit(frame(), base()[1], hidden=4, output=str(job), seed=3, epochs=1)
    model = parallel.load_model(job)
    w1, _, w2, b2 = model.params
    tampered = type(model)(
        model.sizes,
        [w1, np.full(4, 1e308), np.full_like(w2, 1e308), b2],
        model.normalisation,
        model.classes,
        model.features,
    )
    path = tmp_path / "tampered.npz"
    path.write_bytes(encode_model(tampered, {"seed": 3}))
    loaded = parallel.load_model(path)
    for method in (loaded.predict, loaded.predict_proba):
        with pytest.raises(NotEvaluable, match=r"^the model's outputs for row 0 of X are not"):
            method(frame())
    # The command line refuses the same model, in its own words for its file.
    rows = tmp_path / "rows.csv"
    frame().to_csv(rows, index=False)
    target = tmp_path / "cli"
    target.mkdir()
    (target / "model.npz").write_bytes(path.read_bytes())
    done = run_aner("parallel", "predict", "--model", str(target), "--data", str(rows))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"aner: --model {target}: model.npz gives probabilities that")
    assert "row 1 of the data" in done.stderr and "parameters are out of range" in done.stderr


def test_the_command_line_names_the_row_and_column_of_an_overflowing_row(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    parallel.dense_fit(frame(), base()[1], hidden=4, output=str(job), seed=3, epochs=1)
    rows = frame()
    rows.loc[5] = 1.79e308  # normalised, it overflows where the training std is below 1
    with pytest.raises(NotEvaluable, match=r"^X\[5, \d\] \(column '\w'\) lies so far") as caught:
        parallel.load_model(job).predict(rows)
    column = "abcd"[caught.value.column]
    path = tmp_path / "rows.csv"
    rows.to_csv(path, index=False)
    done = run_aner("parallel", "predict", "--model", str(job), "--data", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"aner: --data {path}: row 6 gives probabilities that are not finite numbers: its "
        f"feature {column!r} lies so far from the training mean that its normalised value "
        "overflows binary64, beyond what this model can evaluate; nothing was written\n"
    )


def test_validation_rows_are_converted_alone_and_masks_are_never_read() -> None:
    x, y = base()
    wide = np.round(x * 10).astype(np.int64)
    wide[3, 1] = 2**53 + 1  # exact as int64; joined to a float X_val it would round
    with pytest.raises(RequestError, match=r"^X\[3, 1\] is 9007199254740993, which binary64"):
        parallel.dense_fit(wide, y, validation=(x[:8], y[:8]), hidden=4, seed=3, epochs=1)
    masked = np.ma.masked_array(y[:8], mask=np.arange(8) == 2)
    with pytest.raises(RequestError, match=r"^validation=: y_val is a masked array"):
        parallel.dense_fit(x, y, validation=(x[:8], masked), hidden=4, seed=3, epochs=1)
    with pytest.raises(RequestError, match=r"^validation=: y_val holds <U\d+, y holds int64"):
        parallel.dense_fit(x, y, validation=(x[:8], y[:8].astype(str)), hidden=4, seed=3)
    groups = np.ma.masked_array(np.arange(len(y)) // 4, mask=np.arange(len(y)) == 5)
    for call in (parallel.dense_fit, parallel.cross_validate):
        with pytest.raises(RequestError, match=r"^groups= is a masked array"):
            call(x, y, groups=groups, hidden=[4], seed=3, epochs=1)
    # A frame's X_val is taken by its names, in X's order.
    f = frame()
    by_name = parallel.dense_fit(
        f, y, validation=(f[:8][["d", "c", "b", "a"]], y[:8]), hidden=4, seed=3, epochs=1
    )
    same = parallel.dense_fit(f, y, validation=(f[:8], y[:8]), hidden=4, seed=3, epochs=1)
    assert by_name.data == same.data


def test_score_refuses_labels_it_would_count_wrong_or_leave_out() -> None:
    x, y = base()
    fit = parallel.dense_fit(x, y, hidden=4, seed=3, epochs=1)
    masked = np.ma.masked_array(y, mask=np.arange(len(y)) == 4)
    with pytest.raises(RequestError, match=r"^y= is a masked array"):
        fit.score(x, masked)
    with pytest.raises(RequestError, match=r"^Input y contains NaN or infinity: y\[6\]"):
        fit.score(x, np.where(np.arange(len(y)) == 6, np.nan, y))
    with pytest.raises(RequestError, match=r"^y= must hold one label per row of X \(40\)"):
        fit.score(x, y[:-1])
