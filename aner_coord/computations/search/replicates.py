"""Replicates of a Dense training: `train --replicates N`, `dense_fit(replicates=N)` and
`replicates = N` in a spec file (docs/contracts.md, section 16).

A replicate is a whole training on one worker slot: the search kernel's fit, which already
trains section 9's model start to end in one process, bitwise the same wherever it runs.
Cut into a distributed training's steps instead, N replicates would each wait at a
barrier per step, and a lost worker would cost every replicate it held a share of; whole,
each is one task and one ledger record, so retries and `resume` recompute only the
replicates the ledger lacks, and N of them keep N slots busy with no barrier at all.

Replicate `k` trains with the seed `replicate_seed(seed, k)` on the data and the roles of
`seed`: the same rows train, validate and test in every replicate (the honest choice is
argued in the contract), so the replicates measure what a training's own randomness
(initialisation, batch order) does to the metrics. Admitted as a search of one candidate on
train's own validation split (`folds = 1`), no refit, each fit also tested once on the test
rows with its best epoch's model (`SearchParams.test`).

`DenseTraining` is the computation the registry names for `dense`: a request of one
replicate is `dense.computation.Dense`'s, unchanged; one of more is admitted and run here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from aner_coord.computations.base import Accounting, Admitted, Diverged, PassSpec, StagePlan
from aner_coord.computations.dense.computation import Dense
from aner_coord.computations.dense.request import MODEL_ID, DenseRequest
from aner_coord.computations.dense.run import DenseRun
from aner_coord.computations.replicates import (
    ReplicatesResult,
    check_replicates,
    replicates_files,
    replicates_result,
)
from aner_coord.computations.search.computation import Search, precheck, prepare
from aner_coord.computations.search.plan import Prepared
from aner_coord.computations.search.request import SearchRequest
from aner_coord.computations.search.run import SearchRun
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.base import Kernel
from aner_worker.kernels.dense.kernel import DenseKernel
from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS
from aner_worker.kernels.search.params import FitResult, SearchStats

# What a summary shows, and what the chart draws, of each replicate.
_HEADLINE = ("validation_loss", "validation_accuracy", "test_loss", "test_accuracy", "best_epoch")
_CHARTED = ("validation_accuracy", "test_accuracy", "best_epoch")
# Admission's describe of the search that are not a training's.
_NOT_TRAINING = ("candidates", "grid", "refit", "fits")


def as_search(request: DenseRequest) -> SearchRequest:
    """The replicates of `request` as a search of its one configuration on train's own
    validation split, with no refit; every fit's chunk is a plain train's default."""
    fields = msgspec.structs.asdict(request)
    return SearchRequest(**fields, folds=1, refit=False, chunk=DEFAULT_CHUNK_ROWS)


class DenseTraining:
    """The `dense` computation: `Dense` for one training, whole fits for replicates."""

    kind: ClassVar[str] = "dense"
    unit: ClassVar[str] = "rows"
    request_type: ClassVar[type[DenseRequest]] = DenseRequest
    kernel: ClassVar[DenseKernel] = Dense.kernel
    seconds_per_item: ClassVar[float] = Dense.seconds_per_item
    default_chunk: ClassVar[int] = Dense.default_chunk
    _plain: ClassVar[Dense] = Dense()

    def admit(self, request: DenseRequest) -> Admitted:
        n = check_replicates(request.replicates)
        if n == 1:
            return self._plain.admit(request)
        prepared = prepare(as_search(request))
        described = {k: v for k, v in prepared.describe().items() if k not in _NOT_TRAINING}
        return Admitted(
            items=n,
            passes=1,
            identity=MODEL_ID,
            describe={**described, "replicates": n},
            chunk=1,  # a replicate a task
            seconds_per_item=Search.seconds_per_item,
            chunk_refused=(
                "each replicate is one whole fit on one slot, a task of its own, its chunks "
                f"train's default {DEFAULT_CHUNK_ROWS} rows: give no chunk with replicates"
            ),
            unit="replicates",
        )

    def precheck(self, request: DenseRequest) -> None:
        """`Prechecks`: the checks of `admit` that need no rows, a training's or its
        replicates' (`--background` leaves the rows to the detached coordinator)."""
        if check_replicates(request.replicates) == 1:
            self._plain.precheck(request)
        else:
            precheck(as_search(request))

    def start(self, request: DenseRequest, chunk: int) -> DenseRun | DenseReplicatesRun:
        if request.replicates == 1:
            return self._plain.start(request, chunk)
        return DenseReplicatesRun(prepare(as_search(request)), chunk)

    def kernel_for(self, request: DenseRequest) -> Kernel:
        """`ChoosesKernel`: replicates are the search kernel's whole fits."""
        return Search.kernel if request.replicates > 1 else self.kernel

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return self._plain.summarize(result)

    def tiny(self, request: DenseRequest, rows: int) -> DenseRequest:
        """A probe measures a training's steps: one replicate's."""
        return self._plain.tiny(msgspec.structs.replace(request, replicates=1), rows)


class DenseReplicatesRun:
    """One pass of N items: item `k` is replicate `k`'s whole fit (the search run's folds
    pass, each fit tested), checked, kept by position, then aggregated."""

    durable_chunks: ClassVar[bool] = True

    def __init__(self, prepared: Prepared, chunk: int) -> None:
        self._prepared = prepared
        self._search = SearchRun(prepared, chunk, test=True)
        self._tested = prepared.folds.test_rows > 0

    def next_pass(self) -> PassSpec | None:
        spec = self._search.next_pass()
        if spec is None:
            return None
        return PassSpec(spec.items, spec.params, f"{spec.items} replicates, each a whole fit")

    def received_from(self, stats: Any, worker: str) -> Any:
        return self._search.received_from(stats, worker)

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        problem = self._search.check(chunk, start, count, stats)
        if problem is not None:
            return problem
        assert isinstance(stats, SearchStats)
        for fit in stats.fits:
            seed = self._prepared.seeds[fit.replicate]
            if fit.diverged:
                raise Diverged(f"replicate {fit.replicate} (seed {seed}): {fit.diverged}; lower lr")
            test = (fit.test_loss, fit.test_accuracy)
            if not self._tested:
                if not all(math.isnan(v) for v in test):
                    return f"replicate {fit.replicate}: test metrics {test} without test rows"
            elif not (math.isfinite(test[0]) and test[0] >= 0 and 0 <= test[1] <= 1):
                return f"replicate {fit.replicate}: test loss and accuracy {test}"
        return None

    def accept(self, chunk: int, stats: SearchStats) -> None:
        self._search.accept(chunk, stats)

    def commit(self) -> None:
        self._search.commit()

    def same(self, a: SearchStats, b: SearchStats) -> bool:
        return self._search.same(a, b)

    @property
    def committed_steps(self) -> int | None:
        return None

    # -- audits across platforms and the workers' precision --------------------------------
    @property
    def tolerance(self) -> float:
        return self._search.tolerance

    def close(self, worker: SearchStats, own: SearchStats) -> bool:
        return self._search.close(worker, own)

    def difference(self, worker: SearchStats, own: SearchStats) -> str:
        return self._search.difference(worker, own)

    def deviation(self, worker: SearchStats, own: SearchStats) -> float:
        return self._search.deviation(worker, own)

    @property
    def precision(self) -> str:
        """`DeclaresPrecision`: every worker must offer the fits' precision."""
        return str(self._prepared.options[0].get("precision", "float64"))

    def staging(self) -> StagePlan | None:
        return self._search.staging()

    # -- the aggregate -----------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """One row per replicate, in replicate order (after the pass: every fit is in)."""
        fits = self._search.by_candidate()[0]  # fold 0, its replicates in order
        return [self._row(fit) for fit in fits]

    def _row(self, fit: FitResult) -> dict[str, Any]:
        row: dict[str, Any] = {
            "replicate": fit.replicate,
            "seed": self._prepared.seeds[fit.replicate],
            "epochs": fit.epochs,
            "best_epoch": fit.best_epoch + 1,  # from 1, as every file counts epochs
            "validation_loss": fit.validation_loss,
            "validation_accuracy": fit.validation_accuracy,
        }
        if self._tested:
            row["test_loss"] = fit.test_loss
            row["test_accuracy"] = fit.test_accuracy
        return row

    def _headline(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if self._tested or not n.startswith("test_")]

    def _options(self) -> dict[str, Any]:
        p = self._prepared
        return {
            "data": p.dataset.identity,
            **p.options[0],
            "layer_sizes": p.sizes[0],
            **p.rule.describe(),
            "rows": _roles(p.folds.rows, p.folds.test_rows),
        }

    def result(self, accounting: Accounting) -> ReplicatesResult:
        p = self._prepared
        return replicates_result(
            "dense", MODEL_ID, p.request.seed, self._options(), self.rows(),
            self._headline(_HEADLINE), accounting,
        )  # fmt: skip

    def files(self, state: JobState) -> dict[str, bytes]:
        """`replicates.csv` and `replicates.png` of a completed job."""
        if state is not JobState.COMPLETED:
            return {}
        rows = self.rows()
        title = f"Dense trainings: {len(rows)} replicates, seed {self._prepared.request.seed}"
        return replicates_files(rows, self._headline(_CHARTED), title)


def _roles(folds: Sequence[int], test_rows: int) -> Mapping[str, int]:
    """Rows per role: train's own split is validation fold 0 and training fold 1."""
    return {"train": folds[1], "validation": folds[0], "test": test_rows}
