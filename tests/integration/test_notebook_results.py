"""Results a notebook is glad to show (issue 24, item 7): a `repr` of a few lines and an HTML
table for Dense fits, cross-validations and searches, however large the model; every result
pickles and copies and predicts bitwise the same after; `parallel.load_model` reads a job's
model back with `predict`'s checks; searches give scikit-learn's names."""

from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aner_coord import parallel
from aner_coord.computations.display import MAX_ROWS
from aner_coord.errors import RequestError

ONE = parallel.local(workers=1)
ROUND_TRIPS: list[Callable[[Any], Any]] = [
    lambda o: pickle.loads(pickle.dumps(o)),
    copy.copy,
    copy.deepcopy,
]


def blobs(n: int = 300, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, np.where(x[:, 0] + x[:, 1] > 0, "yes", "no")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fit") / "job"


@pytest.fixture(scope="module")
def fit(job: Path) -> Any:
    x, y = blobs()
    # 64,64 hidden: a repr that printed the parameters would run to tens of thousands.
    return parallel.dense_fit(x, y, seed=4, hidden=(64, 64), epochs=4, output=job, execution=ONE)


@pytest.fixture(scope="module")
def searched() -> Any:
    x, y = blobs(seed=1)
    grid = {"hidden": [[4], [8]], "lr": [1e-3, 1e-2]}
    return parallel.search(x, y, seed=2, epochs=3, folds=3, grid=grid, execution=ONE)


@pytest.fixture(scope="module")
def cv() -> Any:
    x, y = blobs(seed=2)
    return parallel.cross_validate(x, y, seed=3, hidden=8, epochs=3, folds=2, execution=ONE)


def test_a_fit_shows_a_few_lines_and_a_table(fit: Any) -> None:
    text = repr(fit)
    assert len(text.splitlines()) <= 4 and len(text) < 1000
    assert text.startswith("DenseFit(aner-dense/v1, layers 6-64-64-2, adam lr 0.001")
    assert f"test accuracy {fit.test_accuracy:.4f}" in text
    page = fit._repr_html_()
    assert page.startswith("<table>") and page.count("<tr>") >= 10
    assert f"accuracy {fit.test_accuracy:.4f}, loss {fit.test_loss:.4f}" in page
    assert "<th style='text-align:left'>best epoch</th>" in page


def test_a_search_and_a_cross_validation_show_a_few_lines_and_a_table(
    searched: Any, cv: Any
) -> None:
    for result, candidates in ((searched, 4), (cv, 1)):
        text = repr(result)
        assert text.startswith("SearchFit(aner-search/v1, ")
        assert len(text.splitlines()) <= 4 and len(text) < 1000
        page = result._repr_html_()
        assert page.count("<tr>") == 7 + len(result.notes) + 1 + candidates  # fields, header, rows
    assert "<td>8</td><td>0.01</td>" in searched._repr_html_()  # the grid values, by name


@pytest.mark.parametrize(
    ("make", "title"),
    [
        (lambda: parallel.monte_carlo(samples=100_000, seed=1, execution=ONE), "Monte Carlo"),
        (lambda: parallel.regression(samples=10_000, steps=3, rate=0.5, seed=1, execution=ONE),
         "Logistic regression"),
        (lambda: parallel.monte_carlo(samples=10_000, seed=1, replicates=60, execution=ONE),
         "Replicates"),
    ],
    ids=["monte-carlo", "regression", "replicates"],
)  # fmt: skip
def test_every_other_result_shows_five_lines_at_most_and_a_table(make: Any, title: str) -> None:
    # Issue 38, item 4: a Monte Carlo result's repr ran to 1,631 characters and had no table.
    result = make()
    text = repr(result)
    assert len(text.splitlines()) <= 5 and len(text) < 1000, text
    assert text.startswith(type(result).__name__ + "(")
    assert result.summary().split("\n")[0] in text
    page = result._repr_html_()
    assert page.startswith("<table>") and f"<b>{title}" in page
    if title == "Replicates":  # one row per replicate, the first MAX_ROWS shown
        assert page.count("<tr>") == 3 + 1 + MAX_ROWS and "and 10 more: per_replicate" in page


def test_a_long_summary_gives_way_in_the_repr_and_says_so() -> None:
    from aner_coord.computations.display import repr_lines

    text = repr_lines("Head()", "\n".join(f"line {i}" for i in range(9)), ("tail",))
    assert text.splitlines() == [
        "Head()", "  line 0", "  line 1", "  ... 7 more line(s): summary()", "  tail"
    ]  # fmt: skip


def test_a_long_table_shows_its_first_rows_and_says_how_many_more(searched: Any) -> None:
    from aner_coord.computations.display import records_table

    page = records_table(["candidate"], [[i] for i in range(MAX_ROWS + 7)], "see records()")
    assert page.count("<tr>") == 1 + MAX_ROWS and "and 7 more: see records()" in page


@pytest.mark.parametrize("trip", ROUND_TRIPS, ids=["pickle", "copy", "deepcopy"])
def test_results_pickle_and_copy_and_predict_bitwise_the_same(
    trip: Callable[[Any], Any], fit: Any, searched: Any, cv: Any
) -> None:
    x, _ = blobs(seed=9)
    for result in (fit, searched, cv):
        again = trip(result)
        assert again.result == result.result
        assert np.array_equal(again.predict_proba(x), result.predict_proba(x))
        assert np.array_equal(again.predict(x), result.predict(x))
    assert np.array_equal(trip(fit).test_rows, fit.test_rows)


def test_load_model_reads_a_job_directory_or_its_model_file(
    fit: Any, job: Path, tmp_path: Path
) -> None:
    x, _ = blobs(seed=9)
    for where in (job, job / "model.npz", str(job)):
        model = parallel.load_model(where)
        assert np.array_equal(model.predict_proba(x), fit.predict_proba(x))
        assert np.array_equal(model.predict(x), fit.predict(x))
        assert model.labels.tolist() == ["no", "yes"]
        assert repr(model) == "DenseModel(layers 6-64-64-2, classes [no, yes], float64)"
    tampered = tmp_path / "model.npz"
    tampered.write_bytes((job / "model.npz").read_bytes()[:-40])
    with pytest.raises(RequestError, match=r"^path=: .*model.npz"):
        parallel.load_model(tampered)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RequestError, match=r"no model\.npz"):
        parallel.load_model(tmp_path / "empty")
    with pytest.raises(RequestError, match=r"not a job directory or a model\.npz file"):
        parallel.load_model(tmp_path / "absent")


def test_a_search_gives_scikit_learns_names(searched: Any) -> None:
    r = searched.result
    assert searched.best_index_ == r.selected
    assert searched.best_params_ == r.candidates[r.selected].options
    assert searched.best_score_ == r.candidates[r.selected].validation_accuracy_mean
    table = searched.cv_results_
    assert table["params"] == [c.options for c in r.candidates]
    assert all(len(v) == 4 for v in table.values())  # one row per candidate: a DataFrame
    assert table["param_lr"].tolist() == [1e-3, 1e-2, 1e-3, 1e-2]
    assert table["rank_test_loss"].tolist().index(1) == r.selected
    for f in r.fits:
        assert table[f"split{f.fold}_test_score"][f.candidate] == f.validation_accuracy
        assert table[f"split{f.fold}_test_loss"][f.candidate] == f.validation_loss
    scores = np.array([[table[f"split{k}_test_score"][c] for k in range(3)] for c in range(4)])
    assert np.array_equal(table["std_test_score"], scores.std(axis=1))  # scikit-learn's: n
    best = np.argsort(-table["mean_test_score"], kind="stable")[0]
    assert table["rank_test_score"][best] == 1


def test_the_candidates_chart_names_candidates_by_their_options(searched: Any, cv: Any) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from aner_coord.computations.search.files import chart_figure

    figure = chart_figure(searched.result)
    ax = figure.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["hidden 4\nlr 0.001", "hidden 4\nlr 0.01", "hidden 8\nlr 0.001",
                      "hidden 8\nlr 0.01"]  # fmt: skip
    (span,) = ax.patches  # the selected candidate, a candidate wide
    left, right = ax.get_xlim()
    assert left < -0.4 and right > len(labels) - 0.6  # room beside every candidate's span
    assert span.get_x() == pytest.approx(searched.selected - 0.4)
    plt.close(figure)
    # One candidate (cross-validation): named by its model's options, nothing shaded.
    figure = chart_figure(cv.result)
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "hidden 8\nbatch 256\nepochs 3\noptimizer adam\nlr 0.001"
    ]
    assert len(ax.patches) == 0 and "of one candidate" in ax.get_title()
    plt.close(figure)


def test_the_docs_embed_images_that_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name}: {target}"
