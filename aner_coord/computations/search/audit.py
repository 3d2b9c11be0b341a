"""How an audited search task's fits compare with the coordinator's own (`--audit`).

On one platform a fit's numbers are bitwise the same whoever computes them (`SearchRun.same`,
every number but the seconds). Across platforms (another BLAS kernel set, CPU or numpy) a
whole training rounds differently at every step, so `close` holds each numeric field within
the fits' precision's `TOLERANCE` of its largest magnitude, while the fits' identities,
epoch counts, best epochs and divergences must be equal. `difference` says how they differ
in a bounded line: never the numbers themselves (a refit's are the whole model).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aner_worker.kernels.search.params import FitResult, SearchStats

# A fit is a whole training of many steps, not one chunk's sums: rounding that differs at
# every step may grow along the way, so the tolerance is wider than a Dense chunk's, by the
# fits' precision. Measured between two OpenBLAS kernel sets (Haswell, Sandybridge) on a
# digits search of 15 epochs, a refit's parameters: 1.2e-15 in float64, 8.8e-7 in float32.
TOLERANCE = {"float64": 1e-6, "float32": 1e-3}
# Fits named in a difference, at most (the rest are counted).
_SHOWN = 3

_DISCRETE = ("candidate", "fold", "epochs", "best_epoch", "diverged")
_SCALARS = ("validation_loss", "validation_accuracy", "test_loss", "test_accuracy")
_LISTS = ("train_loss", "validation_losses", "validation_accuracies")
_BYTES = ("params", "mean", "std")


def _relative(u: np.ndarray[Any, Any], v: np.ndarray[Any, Any]) -> float:
    if u.shape != v.shape:
        return float("inf")
    if not u.size or np.array_equal(u, v, equal_nan=True):
        return 0.0
    if not np.array_equal(np.isnan(u), np.isnan(v)):
        return float("inf")
    u, v = u[~np.isnan(u)], v[~np.isnan(v)]
    scale = max(float(np.max(np.abs(u))), float(np.max(np.abs(v))), np.finfo(float).tiny)
    err = float(np.max(np.abs(u - v))) / scale
    return err if np.isfinite(err) else float("inf")


def _fit_deviations(a: FitResult, b: FitResult) -> list[tuple[str, float]]:
    """Each field that differs, with its deviation relative to its magnitude (inf for a
    discrete field or a length)."""
    out: list[tuple[str, float]] = [
        (name, float("inf")) for name in _DISCRETE if getattr(a, name) != getattr(b, name)
    ]
    arrays = [(n, np.array([getattr(a, n)]), np.array([getattr(b, n)])) for n in _SCALARS]
    arrays += [(n, np.array(getattr(a, n), float), np.array(getattr(b, n), float)) for n in _LISTS]
    arrays += [
        (n, np.frombuffer(getattr(a, n), "<f8"), np.frombuffer(getattr(b, n), "<f8"))
        for n in _BYTES
        if len(getattr(a, n)) % 8 == 0 and len(getattr(b, n)) % 8 == 0
    ]
    out += [(n, _relative(u, v)) for n, u, v in arrays]
    out += [(n, float("inf")) for n in _BYTES if len(getattr(a, n)) != len(getattr(b, n))]
    return [(n, err) for n, err in out if err]


def close(worker: SearchStats, own: SearchStats, tolerance: float) -> bool:
    if len(worker.fits) != len(own.fits):
        return False
    return all(
        err <= tolerance
        for a, b in zip(worker.fits, own.fits, strict=True)
        for _, err in _fit_deviations(a, b)
    )


def deviation(worker: SearchStats, own: SearchStats) -> float:
    """The largest deviation of any field of any fit (inf for a discrete field, a length,
    or a fit count that differs); 0.0 where every number is the same."""
    if len(worker.fits) != len(own.fits):
        return float("inf")
    return max(
        (
            err
            for a, b in zip(worker.fits, own.fits, strict=True)
            for _, err in _fit_deviations(a, b)
        ),
        default=0.0,
    )


def difference(worker: SearchStats, own: SearchStats) -> str:
    """How a worker's fits differ from the coordinator's, in one bounded line."""
    if len(worker.fits) != len(own.fits):
        return f"{len(worker.fits)} fits where the coordinator computes {len(own.fits)}"
    parts = []
    for a, b in zip(worker.fits, own.fits, strict=True):
        deviations = _fit_deviations(a, b)
        if deviations:
            fields = ", ".join(
                f"{name} {'differs' if err == float('inf') else f'off by {err:.3g}'}"
                for name, err in deviations[:4]
            )
            more = f" and {len(deviations) - 4} more fields" if len(deviations) > 4 else ""
            parts.append(f"fit (candidate {b.candidate}, fold {b.fold}): {fields}{more}")
    shown = "; ".join(parts[:_SHOWN])
    if len(parts) > _SHOWN:
        shown += f"; and {len(parts) - _SHOWN} more fits"
    return shown or "the same values in other bits"
