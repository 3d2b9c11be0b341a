"""`parallel.DenseClassifier`, aner's Dense training as a scikit-learn estimator (issue 24,
item 6): scikit-learn's own estimator checks, `clone`, `cross_val_score`, `Pipeline` and
`GridSearchCV` on it, `random_state` as the job's seed, and scikit-learn never imported by
`import aner_coord.parallel`. Small data and one worker thread: each fit is a real job."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from aner_coord import parallel
from aner_coord.errors import RequestError

sklearn = pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

SMALL = {"hidden": (8,), "epochs": 5, "batch": 32, "workers": 1}

# The checks DenseClassifier does not pass, each with its reason (README, "DenseClassifier").
EXPECTED_FAILED_CHECKS = {
    "check_fit2d_1feature": "aner holds out its own validation and test rows: 10 rows leave "
    "no test row, refused before the 1-feature case is reached",
    "check_estimators_nan_inf": "aner holds out its own validation and test rows: the check's "
    "10 rows leave no test row, refused before the NaN it puts in is reached",
    "check_classifiers_regression_target": "a continuous target is refused by dense_fit's "
    "label check (issue 24, item 4), not by the estimator",
}


def blobs(n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    return x, np.where(x[:, 0] - x[:, 1] > 0, 3, 1)


@parametrize_with_checks(
    [parallel.DenseClassifier(**SMALL, random_state=0)],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_scikit_learns_estimator_checks(estimator: Any, check: Any) -> None:
    check(estimator)


def test_random_state_is_the_seed_and_the_fit_is_dense_fits() -> None:
    x, y = blobs()
    model = parallel.DenseClassifier(**SMALL, random_state=7).fit(x, y)
    fit = parallel.dense_fit(x, y, seed=7, hidden=8, epochs=5, batch=32)
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
    alone = parallel.dense_fit(x[train], y[train], seed=2, hidden=8, epochs=5, batch=32)
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


def test_feature_names_in_only_from_a_frame() -> None:
    pandas = pytest.importorskip("pandas")
    x, y = blobs()
    frame = pandas.DataFrame(x, columns=["a", "b", "c", "d"])
    model = parallel.DenseClassifier(**SMALL, random_state=1).fit(frame, y)
    assert model.feature_names_in_.tolist() == ["a", "b", "c", "d"]
    assert np.array_equal(model.predict(frame), model.predict(x))


def test_importing_the_api_does_not_import_scikit_learn() -> None:
    code = (
        "import sys; import aner_coord.parallel as p; p.dense_fit; "
        "assert 'sklearn' not in sys.modules, 'sklearn imported'; "
        "p.DenseClassifier; assert 'sklearn' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
