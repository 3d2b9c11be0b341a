"""Model search and cross-validation `aner-search/v1` (docs/contracts.md, section 12): the
computation the registry names, admission (every option, the grid, the data and its folds, every
limit, before anything starts) and the start of a run (`run.SearchRun`).

A search's items are its fits: every `(candidate, fold)` and the refit. Admission reports
them as one pass of that many fits (`Admitted.passes = 1`) so that `status` counts fits
done of the total; the run makes two passes of the job machine (the folds, then the refit
of the selected candidate, once the folds are in), which the phase names. A task is a range
of fits (one by default): each fit runs whole on one worker slot.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import msgspec
import numpy as np

from aner_coord.computations.base import Admitted
from aner_coord.computations.dense import splits
from aner_coord.computations.dense.computation import (
    check_dataset,
    check_moments,
    check_parameters,
)
from aner_coord.computations.dense.options import check_delimiter, check_option
from aner_coord.computations.search import data as search_data
from aner_coord.computations.search import grid as grids
from aner_coord.computations.search.folds import FoldError, assign
from aner_coord.computations.search.plan import (
    MAX_FITS,
    TRAINING_FIELDS,
    Prepared,
    fits_in_order,
    plain,
    training_seeds,
)
from aner_coord.computations.search.request import GRID_KEYS, MAX_FOLDS, SearchRequest
from aner_coord.computations.search.run import MODEL_ID, SearchRun
from aner_coord.computations.search.summary import summarize
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.limits import check_int, check_seed
from aner_worker.kernels.dense.plan import layer_sizes
from aner_worker.kernels.search.kernel import SearchKernel
from aner_worker.kernels.search.params import TEST_FOLD

_prepared: dict[bytes, Prepared] = {}


def _key(request: SearchRequest) -> bytes:
    stamp: tuple[int, int] | None = None
    if request.data is not None and request.data != "digits":
        try:
            info = os.stat(request.data)
            stamp = (info.st_mtime_ns, info.st_size)
        except (OSError, ValueError):  # admission says what is wrong with the path
            stamp = None
    return msgspec.json.encode([request, stamp])


def prepare(request: SearchRequest) -> Prepared:
    """Admit `request` completely (RequestError naming the option), once per request and
    data file version: the run of an admitted job starts from the same preparation."""
    key = _key(request)
    found = _prepared.get(key)
    if found is None:
        found = _prepare(request)
        _prepared.clear()  # one search at a time: its data may be large
        _prepared[key] = found
    return found


def _prepare(request: SearchRequest) -> Prepared:
    seed, k, fixed, teacher, grid, seeds = _check_request(request)
    n_seeds = max(1, len(seeds))
    rows = search_data.load(
        request.data,
        request.label,
        teacher,
        request.group,
        seed,
        request.split_column,
        check_delimiter(request.delimiter),
    )
    dataset = rows.dataset
    check_dataset(dataset, request.data)
    rule, roles = splits.roles_for(request, dataset, validation_used=k == 1)
    try:
        folds = assign(seed, rows.labels, k, roles.codes, rule.groups)
    except FoldError as exc:
        raise RequestError(str(exc), "folds", "group") from None
    check_moments(dataset, np.flatnonzero(folds.codes != TEST_FOLD), str(request.data))
    candidates = grids.candidates(grid)
    options = [{**fixed, **values} for values in candidates]
    sizes = [layer_sizes(dataset.n_features, o["hidden"], dataset.n_classes) for o in options]
    counts = [check_parameters(s, _layers_named(grid, candidates[c])) for c, s in enumerate(sizes)]
    fits = fits_in_order(folds, [o["epochs"] for o in options], counts, n_seeds)
    options = [{name: plain(value) for name, value in o.items()} for o in options]
    return Prepared(request, dataset, folds, grid, candidates, options, sizes, fits, rule, seeds)


def precheck(request: SearchRequest) -> None:
    """`prepare`'s checks that need no rows (`Prechecks`): every option and the grid, the
    split's options, a data file's kind and size (the coordinator reads it), a teacher
    set's shape and every candidate's layers within the limits."""
    seed, k, fixed, teacher, grid, _ = _check_request(request)
    splits.rule_of(
        request.test_fraction,
        request.validation_fraction,
        None if request.group is None else [],
        None if request.split_column is None else [],
        validation_used=k == 1,
    )
    dataset = search_data.precheck(
        request.data, request.label, teacher, request.group, seed, request.split_column
    )
    if dataset is None:
        return
    check_dataset(dataset, request.data)
    for candidate in grids.candidates(grid):
        hidden = {**fixed, **candidate}["hidden"]
        sizes = layer_sizes(dataset.n_features, hidden, dataset.n_classes)
        check_parameters(sizes, _layers_named(grid, candidate))


def _check_request(
    request: SearchRequest,
) -> tuple[
    int, int, dict[str, Any], tuple[int, int, int] | None, dict[str, list[Any]], tuple[int, ...]
]:
    """The seed, the folds, the fixed options, the teacher set, the grid and the training
    seeds, each checked, within MAX_FITS: what needs no data."""
    seed = check_seed(request.seed)
    if (request.data is None) == (request.teacher is None):
        raise RequestError(
            "give either {data} FILE or {teacher} ROWS,FEATURES,CLASSES (exactly one)",
            "data",
            "teacher",
        )
    k = check_int("folds", request.folds)
    if not 1 <= k <= MAX_FOLDS:
        raise RequestError(
            f"{{folds}} must be 2..{MAX_FOLDS}, or 1 for train's own validation split; got {k}",
            "folds",
        )
    fixed = {
        name: check_option(name, getattr(request, name))
        for name in TRAINING_FIELDS
        if hasattr(request, name)
    }
    teacher = None if request.teacher is None else check_option("teacher", request.teacher)
    check_option("data", request.data)
    grid = grids.check_grid(request.grid)
    seeds = training_seeds(seed, request.seeds, request.replicates)
    n_candidates = grids.count(grid)
    n_seeds = max(1, len(seeds))
    n_fits = n_candidates * (k if k >= 2 else 1) * n_seeds
    if n_fits > MAX_FITS:
        times = f" x {n_seeds} seeds" if n_seeds > 1 else ""
        fewer = ", fewer {folds} or fewer seeds" if n_seeds > 1 else " or fewer {folds}"
        raise AdmissionError(
            f"{{grid}} makes {n_candidates:,} candidates x {max(k, 1)} fold(s){times} = "
            f"{n_fits:,} fits; the limit is {MAX_FITS:,}: fewer values{fewer}",
            "grid",
            "folds",
        )
    return seed, k, fixed, teacher, grid, seeds


def _layers_named(grid: dict[str, list[Any]], candidate: dict[str, Any]) -> str:
    """How an error names a candidate's layers: the grid value it took, or the option."""
    if "hidden" in grid:
        return f"grid.hidden[{grid['hidden'].index(candidate['hidden'])}]"
    return "{hidden}"


class Search:
    kind: ClassVar[str] = "search"
    unit: ClassVar[str] = "fits"
    request_type: ClassVar[type[SearchRequest]] = SearchRequest
    kernel: ClassVar[SearchKernel] = SearchKernel()
    # A fit takes seconds, not microseconds: one result at a time from each local thread,
    # and an in-flight window of two per slot.
    seconds_per_item: ClassVar[float] = 1.0
    default_chunk: ClassVar[int] = 1  # fits a task
    uneven_tasks: ClassVar[bool] = True  # a fit's cost is its candidate's (`UnevenTasks`)

    def admit(self, request: SearchRequest) -> Admitted:
        prepared = prepare(request)
        return Admitted(
            items=len(prepared.fits) + (1 if request.refit else 0),
            passes=1,
            identity=MODEL_ID,
            describe=prepared.describe(),
        )

    def precheck(self, request: SearchRequest) -> None:
        precheck(request)

    def start(self, request: SearchRequest, chunk: int) -> SearchRun:
        return SearchRun(prepare(request), chunk)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return summarize(result)


__all__ = ["GRID_KEYS", "MODEL_ID", "Prepared", "Search", "precheck", "prepare"]
