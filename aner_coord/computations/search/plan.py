"""Which fits a search makes, in which order they are handed out, and the admitted search
(`Prepared`) that a run starts from.

The fits of a search are `(c, f)` for every candidate `c` and every fitted fold `f` (every
fold, or fold 0 alone for section 9's split): at most `MAX_FITS` of them (the refit is not
counted). They go out longest first, so that the group finishes together: by decreasing
estimated cost, `epochs x training rows x parameters` (the epochs asked for: early stopping
can only shorten a fit), ties by candidate then fold. The job machine hands out a pass's
items in order, so item `i` of the folds pass is `order[i]`, and the mapping back to
`(candidate, fold)` travels with the pass's parameters.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aner_coord.computations.dense.splits import Rule
from aner_coord.computations.search.folds import Folds
from aner_coord.computations.search.request import SearchRequest
from aner_worker.kernels.dense.data import Dataset
from aner_worker.kernels.dense.training import TrainingOptions

MAX_FITS = 10_000
# The options a fit's training takes, all but the seed: each candidate carries these.
TRAINING_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingOptions) if f.name != "seed")


@dataclass(frozen=True)
class Fit:
    candidate: int
    fold: int
    cost: int  # epochs x training rows x parameters


def fits_in_order(folds: Folds, epochs: Sequence[int], parameters: Sequence[int]) -> list[Fit]:
    """Every fit, longest first; `epochs[c]` and `parameters[c]` are candidate `c`'s."""
    fits = [
        Fit(c, f, epochs[c] * folds.training_rows(f) * parameters[c])
        for c in range(len(epochs))
        for f in folds.fitted
    ]
    return sorted(fits, key=lambda fit: (-fit.cost, fit.candidate, fit.fold))


@dataclass(frozen=True)
class Prepared:
    """An admitted search: its data, folds, candidates and fits in dispatch order."""

    request: SearchRequest
    dataset: Dataset
    folds: Folds
    grid: dict[str, list[Any]]  # checked, typed
    candidates: list[dict[str, Any]]  # each candidate's grid values
    options: list[dict[str, Any]]  # each candidate's training options (all but the seed)
    sizes: list[list[int]]  # each candidate's layer sizes
    fits: list[Fit]  # dispatch order: longest first
    rule: Rule  # how rows got their roles (`dense.splits`)

    @property
    def n_candidates(self) -> int:
        return len(self.candidates)

    def describe(self) -> dict[str, Any]:
        r = self.request
        source = (
            {"teacher": list(r.teacher)}
            if r.teacher is not None
            else {
                "file": os.path.basename(r.data or ""),
                "label": r.label,
                "group": r.group,
                "split_column": r.split_column,
            }
        )
        fixed = {
            k: plain(getattr(r, k)) for k in TRAINING_FIELDS if hasattr(r, k) and k not in self.grid
        }
        return {
            "data": self.dataset.identity,
            **source,
            "seed": r.seed,
            **self.rule.describe(),
            **self.folds.describe(),
            "options": fixed,
            "grid": {k: [plain(v) for v in vs] for k, vs in self.grid.items()},
            "candidates": self.n_candidates,
            "fits": len(self.fits),
            "refit": r.refit,
        }


def plain(value: Any) -> Any:
    """A value as JSON and msgpack keep it: a tuple as a list."""
    return list(value) if isinstance(value, tuple) else value
