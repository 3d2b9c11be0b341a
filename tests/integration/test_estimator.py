"""`parallel.DenseClassifier`, aner's Dense training as a scikit-learn estimator (issue 24,
item 6): scikit-learn's own estimator checks, `clone`, `cross_val_score`, `Pipeline` and
`GridSearchCV` on it, `random_state` as the job's seed, and scikit-learn never imported by
`import aner_coord.parallel`. Small data and one worker thread: each fit is a real job."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

from aner_coord import parallel
from aner_coord.errors import RequestError

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

SMALL = {"hidden": (8,), "epochs": 5, "batch": 32, "workers": 1}
# dense_fit's options for the fit a DenseClassifier of SMALL makes: the estimator's own
# default roles: no test rows, dense_fit's validation fraction.
FIT = {"hidden": 8, "epochs": 5, "batch": 32, "test_fraction": 0, "validation_fraction": 0.15}


def blobs(n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    return x, np.where(x[:, 0] - x[:, 1] > 0, 3, 1)


# Every check, none expected to fail: tiny data (the checks' 10 rows) trains without a
# validation row, stopping on its training loss (docs/contracts.md, section 9, Tiny data).
@parametrize_with_checks([parallel.DenseClassifier(**SMALL, random_state=0)])
def test_scikit_learns_estimator_checks(estimator: Any, check: Any) -> None:
    check(estimator)


def test_random_state_is_the_seed_and_the_fit_is_dense_fits() -> None:
    x, y = blobs()
    model = parallel.DenseClassifier(**SMALL, random_state=7).fit(x, y)
    fit = parallel.dense_fit(x, y, seed=7, **FIT)
    assert model.fit_.seed == 7 and model.n_iter_ == len(fit.history)
    assert np.array_equal(model.predict_proba(x), fit.predict_proba(x))
    assert np.array_equal(model.predict(x), fit.predict(x))
    assert model.classes_.tolist() == [1, 3] and model.n_features_in_ == 4
    assert not hasattr(model, "feature_names_in_")  # fitted on an array
    assert model.score(x, y) == fit.score(x, y)
    # A RandomState draws the seed as scikit-learn does; the same state, the same seed.
    a = parallel.DenseClassifier(**SMALL, random_state=np.random.RandomState(1)).fit(x, y)
    b = parallel.DenseClassifier(**SMALL, random_state=np.random.RandomState(1)).fit(x, y)
    assert a.fit_.seed == b.fit_.seed == np.random.RandomState(1).randint(2**63)
    # Pickled, it predicts bitwise the same.
    again = pickle.loads(pickle.dumps(model))
    assert np.array_equal(again.predict_proba(x), model.predict_proba(x))


def test_clone_cross_val_score_pipeline_and_grid_search() -> None:
    x, y = blobs()
    model = parallel.DenseClassifier(**SMALL, random_state=2)
    twin = clone(model)
    assert twin.get_params() == model.get_params() and twin is not model
    assert twin.set_params(lr=0.01).lr == 0.01
    folds = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(model, x, y, cv=folds)
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    # Each fold's score is the accuracy of a fit of that fold's rows alone.
    train, test = next(iter(folds.split(x)))
    alone = parallel.dense_fit(x[train], y[train], seed=2, **FIT)
    assert scores[0] == alone.score(x[test], y[test])
    pipe = make_pipeline(StandardScaler(), clone(model)).fit(x, y)
    assert pipe.score(x, y) > 0.5
    search = GridSearchCV(model, {"hidden": [(4,), (8,)], "lr": [1e-3, 1e-2]}, cv=2).fit(x, y)
    assert set(search.best_params_) == {"hidden", "lr"}
    assert search.cv_results_["mean_test_score"].shape == (4,)
    assert search.best_estimator_.predict(x[:5]).tolist() == search.predict(x[:5]).tolist()


def test_workers_and_execution_together_are_refused_before_anything_runs() -> None:
    x, y = blobs()
    both = parallel.DenseClassifier(workers=1, execution=parallel.local(workers=1))
    with pytest.raises(RequestError, match="workers= or execution=, not both"):
        both.fit(x, y)
    with pytest.raises(RequestError, match="random_state= must be an integer"):
        parallel.DenseClassifier(random_state="seven").fit(x, y)
    with pytest.raises(sklearn.exceptions.NotFittedError, match="call fit before predict"):
        parallel.DenseClassifier().predict(x)


def test_fit_learns_from_every_row_but_its_validation_rows_by_default() -> None:
    x, y = blobs()
    model = parallel.DenseClassifier(**SMALL, random_state=4).fit(x, y)
    assert model.test_fraction == 0 and model.validation_fraction == 0.15
    roles = model.fit_.split
    assert roles.test.size == 0 and model.fit_.test_accuracy is None
    assert roles.train.size + roles.validation.size == len(x) and roles.validation.size > 0
    same = parallel.dense_fit(x, y, seed=4, **FIT)
    assert roles.sha256 == same.split.sha256
    assert "no test rows" in model.fit_._repr_html_() and "no test rows" in repr(model.fit_)
    # The fractions are parameters like the others: GridSearchCV and clone see them.
    held_out = parallel.DenseClassifier(**SMALL, random_state=4, test_fraction=0.2)
    assert clone(held_out).get_params()["test_fraction"] == 0.2
    fit = held_out.fit(x, y).fit_
    other = parallel.dense_fit(x, y, seed=4, **{**FIT, "test_fraction": 0.2})
    assert fit.split.sha256 == other.split.sha256 and fit.test_rows.size > 0
    assert fit.test_accuracy == other.test_accuracy
    with pytest.raises(RequestError, match="test_fraction= must be in"):
        parallel.DenseClassifier(**SMALL, test_fraction=1.5).fit(x, y)


def test_fit_keeps_each_group_in_one_role() -> None:
    x, y = blobs()
    groups = np.arange(len(x)) // 6  # 40 groups of 6 rows
    model = parallel.DenseClassifier(**SMALL, random_state=5, test_fraction=0.2)
    codes = model.fit(x, y, groups=groups).fit_.split.codes
    assert all(len(set(codes[groups == g])) == 1 for g in range(40))
    assert len(set(codes)) == 3  # every role has groups
    same = parallel.dense_fit(x, y, seed=5, groups=groups, **{**FIT, "test_fraction": 0.2})
    assert np.array_equal(codes, same.split.codes)
    # Without groups the rows of a group take several roles: the groups made the difference.
    loose = parallel.DenseClassifier(**SMALL, random_state=5, test_fraction=0.2).fit(x, y)
    assert any(len(set(loose.fit_.split.codes[groups == g])) > 1 for g in range(40))


def test_group_k_fold_with_groups_routed_to_every_fit() -> None:
    x, y = blobs()
    groups = np.arange(len(x)) // 6
    model = parallel.DenseClassifier(**SMALL, random_state=6)
    folds = GroupKFold(3)
    scores = cross_val_score(model, x, y, groups=groups, cv=folds, params={"groups": groups})
    assert scores.shape == (3,)
    # Fold 0's score is a fit of its training rows with their groups, scored on its test rows.
    train, test = next(iter(folds.split(x, y, groups)))
    assert not set(groups[train]) & set(groups[test])
    alone = parallel.dense_fit(x[train], y[train], seed=6, groups=groups[train], **FIT)
    assert scores[0] == alone.score(x[test], y[test])
    codes = alone.split.codes
    assert all(len(set(codes[groups[train] == g])) == 1 for g in set(groups[train]))
    # With scikit-learn's metadata routing, GridSearchCV gives the groups to every fit too:
    # its refit on all the rows keeps each group in one role.
    with sklearn.config_context(enable_metadata_routing=True):
        routed = clone(model).set_fit_request(groups=True)
        search = GridSearchCV(routed, {"lr": [1e-3]}, cv=GroupKFold(2)).fit(x, y, groups=groups)
    codes = search.best_estimator_.fit_.split.codes
    assert codes.size == len(x) and set(codes) == {0, 1}
    assert all(len(set(codes[groups == g])) == 1 for g in range(40))


def test_feature_names_in_only_from_string_column_names() -> None:
    pandas = pytest.importorskip("pandas")
    x, y = blobs()
    frame = pandas.DataFrame(x, columns=["a", "b", "c", "d"])
    model = parallel.DenseClassifier(**SMALL, random_state=1).fit(frame, y)
    assert model.feature_names_in_.dtype == object
    assert model.feature_names_in_.tolist() == ["a", "b", "c", "d"]
    with pytest.warns(UserWarning, match="X does not have valid feature names, but Dense"):
        assert np.array_equal(model.predict(frame), model.predict(x))
    # Column names that are not strings are no feature names, as in scikit-learn...
    numbered = parallel.DenseClassifier(**SMALL, random_state=1).fit(pandas.DataFrame(x), y)
    assert not hasattr(numbered, "feature_names_in_")
    with pytest.warns(UserWarning, match="X has feature names, but DenseClassifier was fitted"):
        numbered.predict(frame)
    # ... a mix of strings and others is refused, and a refit on an array forgets the names.
    mixed = pandas.DataFrame(x, columns=["a", "b", 2, 3])
    with pytest.raises(TypeError, match="only supported if all input features have string"):
        parallel.DenseClassifier(**SMALL).fit(mixed, y)
    assert not hasattr(model.fit(x, y), "feature_names_in_")


def test_predict_maps_a_frame_by_name_and_refuses_other_names() -> None:
    pandas = pytest.importorskip("pandas")
    x, y = blobs()
    frame = pandas.DataFrame(x, columns=["a", "b", "c", "d"])
    model = parallel.DenseClassifier(**SMALL, random_state=1).fit(frame, y)
    reordered = frame[["d", "b", "a", "c"]]
    assert np.array_equal(model.predict_proba(reordered), model.predict_proba(frame))
    assert np.array_equal(model.predict(reordered), model.predict(frame))
    assert model.score(reordered, y) == model.score(frame, y)
    renamed = frame.rename(columns={"b": "beta"})
    # scikit-learn's words in one line, the same as every entry point's (`inputs`).
    message = (
        "The feature names should match those that were passed during fit. Feature names "
        "unseen at fit time: 'beta'; Feature names seen at fit time, yet now missing: 'b'"
    )
    for method in (model.predict, model.predict_proba, model.fit_.predict):
        with pytest.raises(ValueError) as refused:
            method(renamed)
        assert str(refused.value) == message
    with pytest.raises(ValueError) as refused:
        model.predict(frame[["a", "b", "c"]])
    assert str(refused.value).endswith("Feature names seen at fit time, yet now missing: 'd'")


def test_scikit_learns_column_name_check_fails_where_aner_maps_by_name() -> None:
    pytest.importorskip("pandas")
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    # Its first bad frame is the fitted one with its columns reversed, which aner maps by
    # name (README, "DenseClassifier"); everything the check asks before that holds.
    with pytest.raises(AssertionError, match=r"^predict did not raise$"):
        check_dataframe_column_names_consistency(
            "DenseClassifier", parallel.DenseClassifier(**SMALL)
        )


def test_importing_the_api_does_not_import_scikit_learn() -> None:
    code = (
        "import sys; import aner_coord.parallel as p; p.dense_fit; "
        "assert 'sklearn' not in sys.modules, 'sklearn imported'; "
        "p.DenseClassifier; assert 'sklearn' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_iris_with_every_default_scores_as_mlp_classifier_does() -> None:
    # Issue 38, item 1: the defaults fit small data; scored on the same folds as
    # scikit-learn's MLPClassifier with its own defaults (0.967 measured, aner 0.96).
    from sklearn.datasets import load_iris
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import StratifiedKFold
    from sklearn.neural_network import MLPClassifier

    x, y = load_iris(return_X_y=True)
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        theirs = cross_val_score(MLPClassifier(random_state=0), x, y, cv=folds).mean()
    ours = cross_val_score(parallel.DenseClassifier(random_state=0, workers=1), x, y, cv=folds)
    assert ours.mean() >= theirs - 0.05


def test_the_readmes_group_k_fold_pattern_gives_every_fold_a_score() -> None:
    # Issue 38, item 2: 20 groups of the digits, 15 in each fit; a per-group draw left one
    # fit without a validation group ("15 groups leave no validation rows": a NaN score).
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    g = np.arange(len(x)) % 20
    model = parallel.DenseClassifier(hidden=(8,), epochs=2, random_state=0, workers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed fit would warn and score NaN
        scores = cross_val_score(model, x, y, groups=g, cv=GroupKFold(4), params={"groups": g})
    assert scores.shape == (4,) and np.all(np.isfinite(scores)), scores
