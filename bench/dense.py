"""dense: `aner-dense/v1` training through the product (`parallel.dense_fit`), side by side.

- digits (1,797 x 64, 10 classes), Adam, lr 1e-3, batch 256, hidden 64,64, fixed epochs:
  one local worker against scikit-learn's `MLPClassifier(solver="adam")` in one process on
  the same training rows, normalised the same way, no L2 penalty. Rows per second (aner: the
  whole job, normalisation and a validation pass per epoch included; scikit-learn: `fit`
  only) and test accuracy. Goal: one worker at least as fast, accuracy in the same band.
- the teacher set, 10**6 x 64, 10 classes, hidden 256,256, batch 8,192, two epochs: one
  local worker,
  every core as local workers, and a 2-worker local-pipe group, same chunk (their parameters
  must be bitwise equal); training rows per second, efficiency (speedup / workers; goal
  >= 0.8 on two cores), time to a validation-accuracy target, and per committed step of the
  whole job its wall time against the compute time on its critical path (the busiest worker's
  kernel seconds, as the job's own task stamps measured them), the rest being transfer,
  coordination and barrier wait.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aner_coord import parallel
from bench.calls import write_cluster
from bench.runner import Benchmark, goal, interleave, note, ratio, scratch_dir, secs, table

SEED = 5
GOAL_DIGITS = 1.0
GOAL_EFFICIENCY = 0.8


@dataclass(frozen=True)
class Sizes:
    digits_epochs: int
    digits_reps: int
    teacher_rows: int
    teacher_epochs: int
    teacher_reps: int
    chunk: int
    target: float


def _n_all() -> int:
    from aner_worker.inventory import current

    return int(current().auto_workers)


# -- digits ----------------------------------------------------------------------------------


def aner_digits(epochs: int) -> dict[str, Any]:
    fit = parallel.dense_fit(
        data="digits", seed=0, epochs=epochs, patience=epochs,
        execution=parallel.local(workers=1, chunk=256),
    )  # fmt: skip
    return {
        "rows_per_s": fit.rows_processed / fit.seconds,
        "test_accuracy": fit.test_accuracy,
        "seconds": fit.seconds,
    }


def sklearn_digits(epochs: int) -> dict[str, Any]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    from aner_coord.computations.dense.single import fit_normalisation
    from aner_worker.kernels.dense.data import load_digits
    from aner_worker.kernels.dense.plan import assign_roles

    data = load_digits()
    roles = assign_roles(0, data.n_rows)
    norm = fit_normalisation(data, roles.train, 256)
    (xtr, ytr), (xte, yte) = data.rows(roles.train), data.rows(roles.test)
    xtr, xte = (xtr - norm.mean) / norm.std, (xte - norm.mean) / norm.std
    clf = MLPClassifier(
        hidden_layer_sizes=(64, 64), solver="adam", batch_size=256, learning_rate_init=1e-3,
        max_iter=epochs, alpha=0.0, tol=0.0, n_iter_no_change=epochs + 1, random_state=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        started = time.perf_counter()
        clf.fit(xtr, ytr)
        seconds = time.perf_counter() - started
    return {
        "rows_per_s": clf.n_iter_ * xtr.shape[0] / seconds,
        "test_accuracy": float(clf.score(xte, yte)),
        "seconds": seconds,
    }


def digits(sizes: Sizes) -> dict[str, Any]:
    aner_digits(2)  # kernels loaded before timing
    runs = interleave(
        {
            "aner, local(workers=1)": lambda: aner_digits(sizes.digits_epochs),
            "scikit-learn MLPClassifier": lambda: sklearn_digits(sizes.digits_epochs),
        },
        sizes.digits_reps,
    )
    out: dict[str, Any] = {"epochs": sizes.digits_epochs, "runs": {}}
    rows = []
    for name, series in runs.items():
        rates = [v["rows_per_s"] for v in series.values]
        accs = [v["test_accuracy"] for v in series.values]
        out["runs"][name] = {"rows_per_s": rates, "test_accuracy": accs}
        rows.append(
            (name, f"{np.median(rates):,.0f}", f"{min(rates):,.0f}:{max(rates):,.0f}",
             f"{np.median(accs):.4f}", len(rates))
        )  # fmt: skip
    print(f"  digits, {sizes.digits_epochs} epochs, batch 256, hidden 64,64, Adam lr 1e-3")
    table(("trainer", "rows/s", "min:max", "test accuracy", "runs"), rows)
    ours = float(np.median(out["runs"]["aner, local(workers=1)"]["rows_per_s"]))
    theirs = float(np.median(out["runs"]["scikit-learn MLPClassifier"]["rows_per_s"]))
    out["aner_vs_sklearn"] = ours / theirs
    return out


# -- teacher ---------------------------------------------------------------------------------


def teacher_fit(sizes: Sizes, execution: Any) -> Any:
    return parallel.dense_fit(
        teacher=(sizes.teacher_rows, 64, 10), seed=SEED, hidden=(256, 256), batch=8192,
        epochs=sizes.teacher_epochs, patience=sizes.teacher_epochs,
        target_accuracy=sizes.target, execution=execution,
    )  # fmt: skip


def teacher(sizes: Sizes, work: Path) -> dict[str, Any]:
    n_all = _n_all()
    group = write_cluster(work / "pipes", [("p1", "local", "-", 1), ("p2", "local", "-", 1)])
    one, every, pipes = "local(workers=1)", f"local(workers={n_all})", "2-worker pipe group"
    executions = {
        one: parallel.local(workers=1, chunk=sizes.chunk),
        every: parallel.local(workers=n_all, chunk=sizes.chunk),
        pipes: parallel.cluster(group, chunk=sizes.chunk),
    }
    runs = interleave(
        {name: (lambda e=e: teacher_fit(sizes, e)) for name, e in executions.items()},
        sizes.teacher_reps,
    )
    out: dict[str, Any] = {
        "rows": sizes.teacher_rows, "features": 64, "classes": 10, "hidden": [256, 256],
        "batch": 8192, "chunk": sizes.chunk, "epochs": sizes.teacher_epochs,
        "target_accuracy": sizes.target, "runs": {},
    }  # fmt: skip
    rows, steps_rows = [], []
    rates: dict[str, float] = {}
    for name, series in runs.items():
        fits = series.values
        rate = float(np.median([f.rows_processed / f.seconds for f in fits]))
        rates[name] = rate
        # Per committed step of the whole job (its evaluation passes included on both sides):
        # the wall time, and the kernel seconds of the busiest worker, which bound it below.
        step_wall = float(np.median([f.seconds / f.committed_steps for f in fits]))
        compute = float(np.median([_critical_compute_s(f) / f.committed_steps for f in fits]))
        targets = [f.time_to_target_s for f in fits]
        out["runs"][name] = {
            "rows_per_s": [f.rows_processed / f.seconds for f in fits],
            "seconds": [f.seconds for f in fits],
            "time_to_target_s": targets,
            "validation_accuracy": [f.history[-1].validation_accuracy for f in fits],
            "test_accuracy": fits[-1].test_accuracy,
            "step_wall_s": step_wall,
            "step_compute_s": compute,
            "step_transfer_and_wait_s": step_wall - compute,
            "staging": [list(map(str, f.staging)) for f in fits[-1:]],
        }
        reached = [t for t in targets if t is not None]
        rows.append(
            (name, f"{rate:,.0f}", secs(series.median), series.span(),
             secs(float(np.median(reached))) if reached else "not reached",
             f"{fits[-1].history[-1].validation_accuracy:.4f}")
        )  # fmt: skip
        steps_rows.append((name, secs(step_wall), secs(compute), secs(step_wall - compute)))
    flats = {name: _flat(series.values[-1]) for name, series in runs.items()}
    equal = all(np.array_equal(flats[one], f) for f in flats.values())
    efficiency = rates[every] / (n_all * rates[one])
    out.update(
        parameters_bitwise_equal=equal,
        efficiency_all_cores=efficiency,
        pipes_vs_threads=rates[pipes] / rates[every] if n_all == 2 else None,
        goal_min_efficiency=GOAL_EFFICIENCY,
    )
    print(
        f"  teacher {sizes.teacher_rows:,} x 64, 10 classes, hidden 256,256, batch 8,192, "
        f"chunk {sizes.chunk:,}, {sizes.teacher_epochs} epoch(s), target validation accuracy "
        f"{sizes.target}"
    )
    table(
        ("execution", "train rows/s", "median", "min:max s", "time to target", "val accuracy"),
        rows,
    )
    table(
        ("per committed step", "wall", "compute (critical path)", "transfer + coordination + wait"),
        steps_rows,
    )
    print(
        f"  efficiency on {n_all} cores {ratio(efficiency)}; parameters bitwise equal across "
        f"the three: {equal}"
    )
    return out


def _critical_compute_s(fit: Any) -> float:
    """Kernel seconds of the busiest worker: per slot, so a 2-slot worker counts half."""
    return float(max((w.compute_s or 0.0) / w.slots for w in fit.workers))


def _flat(fit: Any) -> np.ndarray:
    from aner_worker.kernels.dense.network import flatten

    return flatten(fit.model.params)


def run(sizes: Sizes) -> dict[str, Any]:
    out: dict[str, Any] = {"digits": digits(sizes)}
    out["teacher"] = teacher(sizes, scratch_dir("aner-bench-dense-"))
    fast = out["digits"]["aner_vs_sklearn"] >= GOAL_DIGITS
    scales = out["teacher"]["efficiency_all_cores"] >= GOAL_EFFICIENCY
    out["goal_met"] = fast and scales
    note("aner's rows/s is the whole job's; scikit-learn's is fit() alone")
    goal(f"digits: one worker >= scikit-learn ({ratio(out['digits']['aner_vs_sklearn'])})", fast)
    efficiency = ratio(out["teacher"]["efficiency_all_cores"])
    goal(f"teacher: efficiency >= {GOAL_EFFICIENCY} ({efficiency})", scales)
    return out


BENCHMARK = Benchmark(
    title="Dense training: digits vs scikit-learn, teacher 10**6 x 64 across executions",
    full=Sizes(100, 3, 1_000_000, 2, 2, 1024, 0.5),
    quick=Sizes(10, 1, 100_000, 2, 1, 1024, 0.4),
    run=run,
)
