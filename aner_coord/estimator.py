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

from aner_coord.computations.dense.inputs import accuracy, names_of
from aner_coord.computations.dense.model import DenseModel
from aner_coord.computations.dense.result import DenseFit
from aner_coord.errors import RequestError

if TYPE_CHECKING:
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

        y = _labels(y)  # X is dense_fit's to convert: one rule for every entry point
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
        assert isinstance(fit, DenseFit)  # one training: no replicates were asked for
        self.fit_: DenseFit = fit
        self.classes_: npt.NDArray[np.generic] = fit.model.labels
        self.n_features_in_: int = fit.model.sizes[0]
        self.n_iter_: int = len(fit.history)
        names = fit.model.feature_names_in
        if names is not None:
            self.feature_names_in_: npt.NDArray[np.object_] = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_  # a refit on an array forgets the old names
        return self

    def predict(self, X: Any) -> npt.NDArray[np.generic]:
        """Labels of rows `X`, in the classes' own type."""
        return self._fitted(X, "predict").predict(X)

    def predict_proba(self, X: Any) -> npt.NDArray[np.float64]:
        """Class probabilities of rows `X`, a column per class of `classes_`."""
        return self._fitted(X, "predict_proba").predict_proba(X)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of `predict(X)` against `y` (weighted by `sample_weight`)."""
        return accuracy(self.predict(X), y, sample_weight)

    def _execution(self) -> Execution | None:
        from aner_coord.admission import local

        if self.workers is None:
            return self.execution
        if self.execution is not None:
            raise RequestError("DenseClassifier takes workers= or execution=, not both")
        return local(workers=self.workers)

    def _fitted(self, X: Any, method: str) -> DenseModel:
        """The fitted model, which converts `X` as every entry point does
        (`inputs.rows_for`: a frame mapped by name where both it and `fit`'s had names),
        after scikit-learn's warning where only one of them had names."""
        if not hasattr(self, "fit_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: call fit before {method}"
            )
        names = names_of(X)
        fitted = hasattr(self, "feature_names_in_")
        kind = type(self).__name__
        if names is not None and not fitted:
            warnings.warn(
                f"X has feature names, but {kind} was fitted without feature names",
                stacklevel=3,  # the caller of predict
            )
        elif names is None and fitted:
            warnings.warn(
                f"X does not have valid feature names, but {kind} was fitted with feature names",
                stacklevel=3,
            )
        return self.fit_.model


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
