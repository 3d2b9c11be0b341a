"""The logistic-regression training fixture (docs/contracts.md, section 2): `steps + 2` passes with
a barrier between them. Each pass keeps its chunk results by chunk index and sums them in that
order, so the same plan always gives bitwise the same parameters, whatever completed first;
one update per step is applied at the barrier, never a partial one."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar

from msgspec import Meta

from aner_coord.computations.base import Accounting, Admitted, Diverged, PassSpec, readable
from aner_coord.computations.display import repr_lines, result_table
from aner_coord.computations.replicates import (
    ReplicatesResult,
    check_replicates,
    replicate_seeds,
    replicates_files,
    replicates_result,
)
from aner_coord.errors import RequestError
from aner_coord.jobdir.results import ResultBase
from aner_coord.jobdir.status import JobState
from aner_coord.limits import (
    DEFAULT_CHUNK,
    MAX_STEPS,
    check_int,
    check_items,
    check_rate,
    check_seed,
)
from aner_coord.requests import ComputationRequest
from aner_worker.kernels.identities import FIXTURE_ID, N_PARAMS
from aner_worker.kernels.regression import RegressionKernel, RegressionParams, RegressionStats

# Statistics that differ by more than this (relative) are not the same computation.
_AUDIT_RTOL = 1e-9


class RegressionRequest(ComputationRequest, frozen=True, tag="regression"):
    """Fit the logistic fixture of docs/contracts.md, section 2 to `samples` rows in `steps`
    full-batch gradient steps at `rate`."""

    samples: Annotated[int, Meta(description="number of rows (1e6, 1,000,000...)")]
    steps: Annotated[int, Meta(description="full-batch gradient steps")]
    rate: Annotated[float, Meta(description="learning rate")]
    replicates: Annotated[
        int,
        Meta(
            description="independent fits, each with a seed derived from --seed and run whole "
            "on one worker slot (docs/contracts.md, section 16)"
        ),
    ] = 1


class RegressionResult(ResultBase, frozen=True, tag="regression"):
    """The fitted fixture of docs/contracts.md, section 2: metrics before and after, and the
    parameters."""

    fixture: str
    seed: int
    samples: int
    steps: int
    rate: float
    initial_loss: float
    initial_accuracy: float
    final_loss: float
    fit_accuracy: float
    theta: list[float]
    committed_steps: int

    def summary(self) -> str:
        return (
            f"{self.samples:,} rows x {self.steps} steps at rate {self.rate}: loss "
            f"{readable(self.initial_loss)} -> {readable(self.final_loss)}, fit accuracy "
            f"{self.fit_accuracy:.6f} (on the fitted rows) | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s"
        )

    def __repr__(self) -> str:
        head = f"RegressionResult({self.fixture}, seed {self.seed}, {self.samples:,} rows)"
        return repr_lines(head, self.summary(), ("theta, to_dict(): the parameters, every field",))

    def _repr_html_(self) -> str:
        names = ("fixture", "seed", "samples", "steps", "rate", "initial_loss", "final_loss",
                 "fit_accuracy", "seconds")  # fmt: skip
        return result_table("Logistic regression fit", self, names, self.summary())


_FIT_FIELDS = (
    "initial_loss",
    "initial_accuracy",
    "final_loss",
    "fit_accuracy",
    *(f"theta_{j}" for j in range(N_PARAMS)),
)
# The fields a replicates summary and chart show.
_HEADLINE = ("final_loss", "fit_accuracy")


class Regression:
    kind: ClassVar[str] = "regression"
    unit: ClassVar[str] = "rows"
    request_type: ClassVar[type[RegressionRequest]] = RegressionRequest
    kernel: ClassVar[RegressionKernel] = RegressionKernel()
    default_chunk: ClassVar[int] = DEFAULT_CHUNK
    seconds_per_item: ClassVar[float] = 1 / 20e6

    def admit(self, request: RegressionRequest) -> Admitted:
        check_seed(request.seed)
        rows = check_items("samples", request.samples, self.unit)
        steps = check_int("steps", request.steps)
        if not 0 <= steps <= MAX_STEPS:
            raise RequestError(f"{{steps}} must be in [0, {MAX_STEPS}], got {steps}", "steps")
        rate = check_rate(request.rate)
        describe = {"samples": rows, "steps": steps, "rate": rate, "seed": request.seed}
        replicates = check_replicates(request.replicates)
        if replicates == 1:
            return Admitted(items=rows, passes=steps + 2, identity=FIXTURE_ID, describe=describe)
        # A replicate is one item: a whole fit, run on one slot.
        return Admitted(
            items=replicates,
            passes=1,
            identity=FIXTURE_ID,
            describe={**describe, "replicates": replicates},
            chunk=1,
        )

    def start(self, request: RegressionRequest, chunk: int) -> _Run | ReplicatesRun:
        if request.replicates > 1:
            return ReplicatesRun(request, chunk)
        return _Run(request, chunk)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return [
            f"loss      final_loss {readable(float(result['final_loss']))} "
            f"(initial {readable(float(result['initial_loss']))}, {int(result['steps'])} steps)",
            f"accuracy  fit_accuracy {float(result['fit_accuracy']):.6f} (on the fitted rows)",
        ]


class _Run:
    durable_chunks: ClassVar[bool] = True

    def __init__(self, request: RegressionRequest, chunk: int) -> None:
        self._request = request
        self._rows = request.samples
        self._steps = request.steps
        self._rate = float(request.rate)
        self._n_chunks = -(-self._rows // chunk)
        self.theta: tuple[float, ...] = (0.0,) * N_PARAMS
        self._committed = 0
        self._pass = -1  # the pass in progress
        self._slots: list[RegressionStats | None] = []
        self._initial: tuple[float, float] | None = None
        self._final: tuple[float, float] | None = None

    def next_pass(self) -> PassSpec | None:
        if self._pass + 1 >= self._steps + 2:
            return None
        self._pass += 1
        self._slots = [None] * self._n_chunks
        params = RegressionParams(self._request.seed, self.theta)
        return PassSpec(self._rows, params, self._label(self._pass))

    def _label(self, index: int) -> str:
        if index == 0:
            return "initial metrics"
        if index <= self._steps:
            return f"step {index} of {self._steps}"
        return "final metrics"

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, RegressionStats):
            return f"expected fixture statistics, got {type(stats).__name__}"
        if len(stats.grad) != N_PARAMS:
            return f"{len(stats.grad)} gradient sums, expected {N_PARAMS}"
        if not all(math.isfinite(g) for g in (*stats.grad, stats.loss_sum)):
            raise Diverged(
                f"non-finite loss or gradient in {self._label(self._pass)}: the fit diverged; "
                "lower --rate"
            )
        if stats.valid != count:
            return f"{stats.valid} valid rows reported for a range of {count}"
        if not 0 <= stats.correct <= count:
            return f"{stats.correct} correct predictions is impossible for {count} rows"
        if stats.loss_sum < 0:
            return f"negative loss sum {stats.loss_sum}"
        # |p - y| <= 1 and every feature lies in [-1, 1): no gradient sum exceeds the rows.
        if any(abs(g) > count for g in stats.grad):
            return f"a gradient sum exceeds the {count} rows it sums over"
        return None

    def accept(self, chunk: int, stats: RegressionStats) -> None:
        self._slots[chunk] = stats

    def commit(self) -> None:
        grad = [0.0] * N_PARAMS
        loss = 0.0
        correct = valid = 0
        for slot in self._slots:  # fixed chunk order: the same plan gives the same bits
            assert slot is not None
            for j in range(N_PARAMS):
                grad[j] += slot.grad[j]
            loss += slot.loss_sum
            correct += slot.correct
            valid += slot.valid
        if valid != self._rows:
            raise AssertionError(f"reduction accepted {valid} rows, expected {self._rows}")
        metrics = (loss / valid, correct / valid)
        if self._pass == 0:
            self._initial = metrics
        if 0 < self._pass <= self._steps:
            theta = tuple(t - self._rate * g / valid for t, g in zip(self.theta, grad, strict=True))
            if not all(math.isfinite(t) for t in theta):
                raise Diverged(
                    f"the parameters left the finite range at step {self._pass} of "
                    f"{self._steps}: the fit diverged; lower --rate"
                )
            self.theta = theta
            self._committed += 1
        if self._pass == self._steps + 1:
            assert self._initial is not None
            if self._steps and not metrics[0] <= self._initial[0]:
                # Full-batch gradient descent on a convex loss with a rate its smoothness
                # allows never ends above where it began: this one overshot (scikit-learn's
                # SGD stops alike on an overflow), so it is no fit to report.
                raise Diverged(
                    f"the loss rose from {self._initial[0]:.6g} to {metrics[0]:.6g} over "
                    f"{self._steps} steps at rate {self._rate:g}: the fit diverged; lower --rate"
                )
            self._final = metrics

    def same(self, a: RegressionStats, b: RegressionStats) -> bool:
        if (a.correct, a.valid) != (b.correct, b.valid):
            return False
        pairs = zip((*a.grad, a.loss_sum), (*b.grad, b.loss_sum), strict=True)
        return all(math.isclose(x, y, rel_tol=_AUDIT_RTOL, abs_tol=1e-12) for x, y in pairs)

    @property
    def committed_steps(self) -> int | None:
        return self._committed

    def result(self, accounting: Accounting) -> RegressionResult:
        assert self._initial is not None and self._final is not None
        return RegressionResult(
            fixture=FIXTURE_ID,
            seed=self._request.seed,
            samples=self._rows,
            steps=self._steps,
            rate=self._rate,
            initial_loss=self._initial[0],
            initial_accuracy=self._initial[1],
            final_loss=self._final[0],
            fit_accuracy=self._final[1],
            theta=list(self.theta),
            committed_steps=self._committed,
            seconds=accounting.seconds,
            execution=accounting.execution,
            workers=list(accounting.workers),
            losses=list(accounting.losses),
        )


class ReplicatesRun:
    """One pass over the replicates: item `k` is the whole fit of replicate `k`, with the
    seed `replicate_seed(seed, k)`, computed on one slot (`whole_fit`), so its numbers are
    bitwise the same whichever worker, task or resume computed it."""

    durable_chunks: ClassVar[bool] = True

    def __init__(self, request: RegressionRequest, chunk: int) -> None:
        self._request = request
        self._chunk = chunk
        self._seeds = replicate_seeds(request.seed, request.replicates)
        self._fits: list[tuple[float, ...] | None] = [None] * request.replicates
        self._passes_begun = 0

    def next_pass(self) -> PassSpec | None:
        if self._passes_begun:
            return None
        self._passes_begun = 1
        r = self._request
        params = RegressionParams(r.seed, (), self._seeds, r.samples, r.steps, float(r.rate))
        return PassSpec(r.replicates, params, "replicates")

    def check(self, chunk: int, start: int, count: int, stats: Any) -> str | None:
        if not isinstance(stats, RegressionStats):
            return f"expected fixture statistics, got {type(stats).__name__}"
        if len(stats.fits) != count or any(len(f) != len(_FIT_FIELDS) for f in stats.fits):
            return f"{len(stats.fits)} fits of the wrong shape for {count} replicates"
        for k, fit in enumerate(stats.fits, start):
            if not all(math.isfinite(x) for x in fit):
                raise Diverged(f"replicate {k} diverged (non-finite numbers); lower --rate")
            if not (0 <= fit[1] <= 1 and 0 <= fit[3] <= 1 and fit[0] >= 0 and fit[2] >= 0):
                return f"replicate {k}: impossible loss or accuracy {fit[:4]}"
        return None

    def accept(self, chunk: int, stats: RegressionStats) -> None:
        for k, fit in enumerate(stats.fits, chunk * self._chunk):
            self._fits[k] = fit

    def commit(self) -> None:
        return None

    def same(self, a: RegressionStats, b: RegressionStats) -> bool:
        return bool(a.fits == b.fits)

    @property
    def committed_steps(self) -> int | None:
        return None

    def rows(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for k, (seed, fit) in enumerate(zip(self._seeds, self._fits, strict=True)):
            assert fit is not None
            out.append({"replicate": k, "seed": seed, **dict(zip(_FIT_FIELDS, fit, strict=True))})
        return out

    def result(self, accounting: Accounting) -> ReplicatesResult:
        r = self._request
        options = {"samples": r.samples, "steps": r.steps, "rate": float(r.rate)}
        return replicates_result(
            "regression", FIXTURE_ID, r.seed, options, self.rows(), _HEADLINE, accounting
        )

    def files(self, state: JobState) -> dict[str, bytes]:
        """`replicates.csv` and `replicates.png` of a completed job."""
        if state is not JobState.COMPLETED:
            return {}
        rows = self.rows()
        title = (
            f"Logistic regression fits: {len(rows)} replicates of {self._request.samples:,} rows"
        )
        return replicates_files(rows, _HEADLINE, title)
