"""What a researcher would use instead of aner for a Dense fit, on aner's own rows: scikit-
learn's `MLPClassifier` (in this process) and PyTorch (its own process, `dense_torch.py`,
only where an interpreter with torch is found: torch is not a dependency).

Both get the training and test rows of aner's roles for the seed, normalised with aner's
normalisation (fitted on the training rows), the same layer sizes, batch, Adam learning
rate and epochs, no L2 penalty and one thread; their rows per second are their training
loop's alone (`fit`, or torch's loop), with the data already in memory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from aner_coord.computations.dense.single import fit_normalisation
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.plan import assign_roles

TORCH_SCRIPT = Path(__file__).resolve().with_name("dense_torch.py")
# An interpreter that has torch, when this one has not (the benchmark then runs torch there).
TORCH_PYTHON_ENV = "ANER_BENCH_TORCH_PYTHON"


@dataclass(frozen=True)
class Rows:
    """Normalised training and test rows of aner's roles, and their classes."""

    xtr: npt.NDArray[np.float64]
    ytr: npt.NDArray[np.int64]
    xte: npt.NDArray[np.float64]
    yte: npt.NDArray[np.int64]


def rows_of(dataset: Dataset, seed: int) -> Rows:
    roles = assign_roles(seed, dataset.n_rows)
    norm = fit_normalisation(dataset, roles.train, 8192)
    (xtr, ytr), (xte, yte) = dataset.rows(roles.train), dataset.rows(roles.test)
    return Rows((xtr - norm.mean) / norm.std, ytr, (xte - norm.mean) / norm.std, yte)


def sklearn_fit(rows: Rows, hidden: tuple[int, ...], batch: int, epochs: int) -> dict[str, Any]:
    """scikit-learn's `MLPClassifier(solver="adam")` in float64 on one BLAS thread."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier(
        hidden_layer_sizes=hidden, solver="adam", batch_size=batch, learning_rate_init=1e-3,
        max_iter=epochs, alpha=0.0, tol=0.0, n_iter_no_change=epochs + 1, random_state=0,
    )  # fmt: skip
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        started = time.perf_counter()
        clf.fit(rows.xtr, rows.ytr)
        seconds = time.perf_counter() - started
    return {
        "rows_per_s": clf.n_iter_ * rows.xtr.shape[0] / seconds,
        "seconds": seconds,
        "test_accuracy": float(clf.score(rows.xte, rows.yte)),
    }


def torch_python() -> str | None:
    """An interpreter with torch: $ANER_BENCH_TORCH_PYTHON, else this one if it has torch."""
    named = os.environ.get(TORCH_PYTHON_ENV)
    if named:
        return named
    return sys.executable if importlib.util.find_spec("torch") is not None else None


class TorchFits:
    """PyTorch fits of `rows`, each in a fresh process of `python` (the rows are written
    once to `work`)."""

    def __init__(self, python: str, rows: Rows, work: Path) -> None:
        self.python = python
        self.data = work / "rows.npz"
        np.savez(self.data, xtr=rows.xtr, ytr=rows.ytr, xte=rows.xte, yte=rows.yte)

    def fit(self, hidden: tuple[int, ...], batch: int, epochs: int, dtype: str) -> dict[str, Any]:
        argv = [
            self.python, str(TORCH_SCRIPT), str(self.data), "--hidden",
            ",".join(map(str, hidden)), "--batch", str(batch), "--epochs", str(epochs),
            "--dtype", dtype,
        ]  # fmt: skip
        one = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        env = {**os.environ, **one}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"torch fit failed: {done.stderr.strip()[-500:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result
