"""`DenseClassifier`: Dense training (docs/contracts.md, section 9) as a scikit-learn estimator.

The constructor takes the Dense options and stores them unchanged (scikit-learn's rule, so
that `clone`, `get_params` and `GridSearchCV` work); `fit` makes one `dense_fit` job of them,
its `random_state` drawn to the job's seed as scikit-learn draws one (an integer is the seed
itself), its `workers=` or `execution=` where the job runs. The fitted attributes follow
scikit-learn's names: `classes_`, `n_features_in_`, `feature_names_in_` (fitted on a frame
whose column names are all strings, as scikit-learn's), `n_iter_`, and `fit_`, aner's own
fitted result (history, roles, accounting). A frame given to `predict` is mapped to
`feature_names_in_` by name; names missing or unknown are refused with scikit-learn's message.

scikit-learn is an optional extra: with it installed the class is a `ClassifierMixin,
BaseEstimator` (tags, `repr`, HTML display); without it the same parameters and fitted
attributes work, with `get_params` / `set_params` of its own.
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from aner_coord.errors import RequestError

if TYPE_CHECKING:
    from aner_coord.computations.dense.result import DenseFit
    from aner_coord.requests import Execution

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.exceptions import DataConversionWarning as _DataConversionWarning
    from sklearn.exceptions import NotFittedError

    class _Estimator(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
        """scikit-learn's own bases, where it is installed."""

except ImportError:  # pragma: no cover - the tests run with scikit-learn installed

    class NotFittedError(ValueError, AttributeError):  # type: ignore[no-redef]
        """As scikit-learn's: a method that needs `fit` called before it."""

    class _DataConversionWarning(UserWarning):  # type: ignore[no-redef]
        """As scikit-learn's: input of another shape than expected, converted."""

    class _Estimator:  # type: ignore[no-redef]
        """scikit-learn's parameter protocol, for an installation without it."""

        @classmethod
        def _get_param_names(cls) -> list[str]:
            signature = inspect.signature(cls.__init__)
            return sorted(name for name in signature.parameters if name != "self")

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            return {name: getattr(self, name) for name in self._get_param_names()}

        def set_params(self, **params: Any) -> Any:
            names = self._get_param_names()
            for name, value in params.items():
                if name not in names:
                    raise ValueError(
                        f"Invalid parameter {name!r} for estimator {type(self).__name__}: "
                        f"it takes {', '.join(names)}"
                    )
                setattr(self, name, value)
            return self


_SEED_LIMIT = 2**63  # as scikit-learn draws a seed from a RandomState


class DenseClassifier(_Estimator):
    """A multi-layer perceptron classifier trained data-parallel by aner (`dense_fit`).

    Parameters are `dense_fit`'s: `hidden` (layer sizes, or one int), `batch`, `epochs`,
    `optimizer`, `lr`, `patience`, `precision`, `chunk` (rows of a chunk, None: the
    default); `random_state` (an int is the seed, a `numpy.random.RandomState` or None
    draws one, as scikit-learn does); and where it runs: `workers` (local threads, None: the
    automatic policy) or `execution` (`parallel.local(...)` or `parallel.cluster(...)`).

    `fit(X, y, groups=None)` trains on all of `X` but its validation rows, which early
    stopping needs: `validation_fraction` of the rows (or of the groups), 0.15 as in
    `dense_fit` (not `MLPClassifier`'s 0.1: aner draws each row's role, and on a few dozen
    rows 0.1 too often leaves none). `test_fraction` (default 0)
    holds out test rows too (`fit_.test_accuracy`): by default none, since the tools that
    score an estimator (`cross_val_score`, `GridSearchCV`) hold out their own test rows and
    expect `fit` to learn from every row it is given. `groups` keeps each group's rows in one
    role.
    """

    def __init__(
        self,
        hidden: int | tuple[int, ...] = (64, 64),
        *,
        batch: int = 256,
        epochs: int = 100,
        optimizer: str = "adam",
        lr: float = 1e-3,
        patience: int = 5,
        test_fraction: float = 0.0,
        validation_fraction: float = 0.15,
        precision: str = "float64",
        chunk: int | None = None,
        random_state: int | np.random.RandomState | None = None,
        workers: int | None = None,
        execution: Execution | None = None,
    ) -> None:
        self.hidden = hidden
        self.batch = batch
        self.epochs = epochs
        self.optimizer = optimizer
        self.lr = lr
        self.patience = patience
        self.test_fraction = test_fraction
        self.validation_fraction = validation_fraction
        self.precision = precision
        self.chunk = chunk
        self.random_state = random_state
        self.workers = workers
        self.execution = execution

    def fit(self, X: Any, y: Any, groups: Any = None) -> DenseClassifier:
        """Train on rows `X` (an array or a frame) with labels `y`; `groups` keeps each
        group's rows in one role."""
        from aner_coord.calls import OneOff  # what `parallel.dense_fit` calls

        X = _rows(X, "fit", fit=True)
        names = _feature_names(X)
        y = _labels(y)
        arguments: dict[str, Any] = {
            "seed": _seed(self.random_state),
            "hidden": self.hidden,
            "batch": self.batch,
            "epochs": self.epochs,
            "optimizer": self.optimizer,
            "lr": self.lr,
            "patience": self.patience,
            "test_fraction": self.test_fraction,
            "validation_fraction": self.validation_fraction,
            "precision": self.precision,
        }
        execution = self._execution()
        if execution is not None:
            arguments["execution"] = execution
        if self.chunk is not None:
            arguments["chunk"] = self.chunk
        if groups is not None:
            arguments["groups"] = groups
        fit = OneOff().dense_fit(X, y, **arguments)
        self.fit_: DenseFit = fit
        self.classes_: npt.NDArray[np.generic] = fit.model.labels
        self.n_features_in_: int = fit.model.sizes[0]
        self.n_iter_: int = len(fit.history)
        if names is not None:
            self.feature_names_in_: npt.NDArray[np.object_] = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_  # a refit on an array forgets the old names
        return self

    def predict(self, X: Any) -> npt.NDArray[np.generic]:
        """Labels of rows `X`, in the classes' own type."""
        fit, rows = self._fitted(X, "predict")
        return fit.predict(rows)

    def predict_proba(self, X: Any) -> npt.NDArray[np.float64]:
        """Class probabilities of rows `X`, a column per class of `classes_`."""
        fit, rows = self._fitted(X, "predict_proba")
        return fit.predict_proba(rows)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of `predict(X)` against `y` (weighted by `sample_weight`)."""
        predicted = self.predict(X)
        labels = np.asarray(y)
        if labels.shape != predicted.shape:
            raise ValueError(f"y has shape {labels.shape}; X gives {predicted.shape[0]} rows")
        if predicted.dtype.kind in "US":
            labels = labels.astype(np.str_)
        return float(np.average(predicted == labels, weights=sample_weight))

    def _execution(self) -> Execution | None:
        from aner_coord.admission import local

        if self.workers is None:
            return self.execution
        if self.execution is not None:
            raise RequestError("DenseClassifier takes workers= or execution=, not both")
        return local(workers=self.workers)

    def _fitted(self, X: Any, method: str) -> tuple[DenseFit, Any]:
        if not hasattr(self, "fit_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: call fit before {method}"
            )
        rows = _rows(self._by_name(X), method)
        if rows.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {rows.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )
        return self.fit_, rows

    def _by_name(self, x: Any) -> Any:
        """Rows `x` as an array with the columns of `fit`: a frame's mapped by name where both
        it and `fit`'s had names (scikit-learn's words where they do not match), else taken
        by position, with scikit-learn's warning where only one of them had names."""
        names = _feature_names(x)
        fitted: npt.NDArray[np.object_] | None = getattr(self, "feature_names_in_", None)
        kind = type(self).__name__
        if names is not None and fitted is None:
            warnings.warn(
                f"X has feature names, but {kind} was fitted without feature names",
                stacklevel=4,  # the caller of predict
            )
        elif names is None and fitted is not None:
            warnings.warn(
                f"X does not have valid feature names, but {kind} was fitted with feature names",
                stacklevel=4,
            )
        elif names is not None and fitted is not None:
            unseen, missing = _differences(names, fitted)
            if unseen or missing:
                raise ValueError(
                    "The feature names should match those that were passed during fit.\n"
                    + _listed("Feature names unseen at fit time:", unseen)
                    + _listed("Feature names seen at fit time, yet now missing:", missing)
                )
            x = x[list(fitted)]  # aner maps a frame by name, as `predict` does a CSV
        return np.asarray(x) if hasattr(x, "columns") else x


def _feature_names(x: Any) -> npt.NDArray[np.object_] | None:
    """A frame's column names as scikit-learn's `feature_names_in_` holds them: only where
    every name is a string (None for other names); a mix of strings and others is refused
    with scikit-learn's words."""
    if not hasattr(x, "columns") or len(x.columns) == 0:
        return None
    names = np.asarray(list(x.columns), dtype=object)
    types = sorted({type(name).__qualname__ for name in names})
    if len(types) > 1 and "str" in types:
        raise TypeError(
            "Feature names are only supported if all input features have string names, but "
            f"your input has {types} as feature name / column name types: convert them all "
            "to strings (X.columns = X.columns.astype(str)) or none of them"
        )
    return names if types == ["str"] else None


def _differences(
    names: npt.NDArray[np.object_], fitted: npt.NDArray[np.object_]
) -> tuple[list[str], list[str]]:
    """Names of `names` that `fit` did not see, and names `fit` saw that `names` lacks."""
    return sorted(set(names) - set(fitted)), sorted(set(fitted) - set(names))


def _listed(heading: str, names: list[str]) -> str:
    """A block of scikit-learn's message: the heading and at most five names."""
    if not names:
        return ""
    lines = [f"- {name}" for name in names[:5]] + (["- ..."] if len(names) > 5 else [])
    return "\n".join([heading, *lines]) + "\n"


def _rows(x: Any, method: str, *, fit: bool = False) -> Any:
    """`x` as `dense_fit` and the model take it, refused as scikit-learn's `check_array`
    refuses (and words it, so its estimator checks recognise the messages): a frame goes on
    as it is (its columns are mapped by name), anything else as a 2-D numeric array, an
    object array converted to float64 as scikit-learn converts one."""
    if hasattr(x, "tocsr") or hasattr(x, "toarray"):
        raise TypeError(f"{method}() takes dense rows, not a sparse matrix: give X.toarray()")
    if hasattr(x, "columns"):
        return x
    rows = np.asarray(x)
    if rows.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {method}() takes real numbers")
    if rows.ndim != 2:
        raise ValueError(
            f"Expected a 2-D array of rows x features, got shape {rows.shape}: Reshape your "
            "data with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for one row"
        )
    if rows.dtype.kind == "O":
        rows = rows.astype(np.float64)
    n, d = rows.shape
    if d == 0:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={rows.shape}) while a minimum of 1 is required."
        )
    if fit and n < 2:
        raise ValueError(
            f"Found array with {n} sample(s) (shape={rows.shape}) while a minimum of 2 is required."
        )
    if rows.dtype.kind == "f" and not np.isfinite(rows).all():
        r, c = np.argwhere(~np.isfinite(rows))[0]
        raise ValueError(
            f"Input X contains NaN or infinity: {rows[r, c]} at row {r}, column {c} "
            f"({method}() takes finite numbers)"
        )
    return rows


def _labels(y: Any) -> Any:
    """`y` as one label per row; a column vector is raveled with scikit-learn's warning."""
    if y is None:
        raise ValueError(
            "DenseClassifier requires y to be passed, but the target y is None: fit(X, y)"
        )
    labels = y if hasattr(y, "dtype") and not hasattr(y, "columns") else np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected: give y.ravel()",
            _DataConversionWarning,
            stacklevel=3,
        )
        return np.ravel(labels)
    return y


def _seed(random_state: Any) -> int:
    """The job's seed for `random_state`, as scikit-learn's `check_random_state` reads it."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    if random_state is None:
        random_state = np.random.mtrand._rand
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(_SEED_LIMIT))
    raise RequestError(
        f"random_state= must be an integer, a numpy.random.RandomState or None, "
        f"got {type(random_state).__name__}"
    )
