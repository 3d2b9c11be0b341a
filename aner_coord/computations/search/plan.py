"""Which fits a search makes, in which order they are handed out, and the admitted search
(`Prepared`) that a run starts from.

The fits of a search are `(c, f, r)` for every candidate `c`, every fitted fold `f` (every
fold, or fold 0 alone for section 9's split) and every replicate `r` of the training seeds
(`training_seeds`: one, the search's own, unless `seeds` or `replicates` say more): at most
`MAX_FITS` of them (the refit is not counted). They go out longest first, so that the group
finishes together: by decreasing estimated cost, `epochs x training rows x parameters` (the
epochs asked for: early stopping can only shorten a fit), ties by candidate, fold, then
replicate. The job machine hands out a pass's items in order, so item `i` of the folds pass
is `order[i]`, and the mapping back to `(candidate, fold, replicate)` travels with the pass's
parameters.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aner_coord.computations.dense.splits import Rule
from aner_coord.computations.replicates import check_replicates, replicate_seeds
from aner_coord.computations.search.folds import Folds
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import RequestError
from aner_coord.limits import check_seed
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
    replicate: int = 0  # which training seed


def training_seeds(seed: int, seeds: Sequence[int] | None, replicates: int) -> tuple[int, ...]:
    """The training seeds of a search's replicates: `seeds` as given, or `replicates`
    seeds derived from `seed` (docs/contracts.md, section 16); () for the search's own
    seed alone (one replicate, as a search without either computes)."""
    n = check_replicates(replicates)
    if seeds is not None and n != 1:
        raise RequestError("give {seeds} or {replicates}, not both", "seeds", "replicates")
    if seeds is None:
        return replicate_seeds(seed, n) if n > 1 else ()
    if not seeds:
        raise RequestError("{seeds} must name at least one seed", "seeds")
    out = tuple(check_seed(s, "seeds") for s in seeds)
    twice = next((s for i, s in enumerate(out) if s in out[:i]), None)
    if twice is not None:
        raise RequestError(
            f"{{seeds}} names seed {twice} twice: the same fit would count twice", "seeds"
        )
    return out


def fits_in_order(
    folds: Folds, epochs: Sequence[int], parameters: Sequence[int], replicates: int = 1
) -> list[Fit]:
    """Every fit, longest first; `epochs[c]` and `parameters[c]` are candidate `c`'s."""
    fits = [
        Fit(c, f, epochs[c] * folds.training_rows(f) * parameters[c], r)
        for c in range(len(epochs))
        for f in folds.fitted
        for r in range(replicates)
    ]
    return sorted(fits, key=lambda fit: (-fit.cost, fit.candidate, fit.fold, fit.replicate))


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
    seeds: tuple[int, ...] = ()  # the replicates' training seeds; (): the search's seed

    @property
    def n_replicates(self) -> int:
        return max(1, len(self.seeds))

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
            **({"seeds": list(self.seeds)} if self.seeds else {}),
        }


def plain(value: Any) -> Any:
    """A value as JSON and msgpack keep it: a tuple as a list."""
    return list(value) if isinstance(value, tuple) else value
