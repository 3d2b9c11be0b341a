"""What a job computes, as pure reductions over chunk results.

A computation turns chunk ranges into wire tasks, checks each result against its task, and
folds accepted results into its state. It knows nothing about workers or transports: the
job state machine decides who computes what, the computation decides what the numbers mean.

Monte Carlo is one pass whose hits are integers (order cannot matter). The fixture is
`steps + 2` passes with a barrier between them; each pass keeps its chunk results by chunk
index and sums them in that fixed order, so the same plan always gives bitwise the same
floats, whatever completed first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from aner_coord.plan import ChunkPlan
from protocol import FxResult, FxTask, McResult, McTask

Task = McTask | FxTask
Result = McResult | FxResult

N_PARAMS = 9


class Computation(Protocol):
    """The pure part of a job that the state machine drives pass by pass."""

    plan: ChunkPlan

    @property
    def passes(self) -> int: ...

    def make_task(self, task_id: int, start: int, count: int) -> Task: ...

    def check(self, task: Task, result: Result) -> str | None:
        """None if `result` answers `task` consistently, else why not."""
        ...

    def accept(self, chunk: int, result: Result) -> None: ...

    def end_pass(self) -> None:
        """All chunks of the current pass are accepted: commit them (the barrier)."""
        ...

    def describe_pass(self, index: int) -> str: ...


def _check_range(task: Task, result: Result) -> str | None:
    if result.start != task.start or result.count != task.count:
        return (
            f"result for task {task.task_id} covers [{result.start}, +{result.count}) "
            f"but the task was [{task.start}, +{task.count})"
        )
    return None


@dataclass
class MonteCarlo:
    """Hit counting for SPEC section 1: one pass, integer sums."""

    plan: ChunkPlan
    seed: int
    hits: int = 0

    @property
    def passes(self) -> int:
        return 1

    def make_task(self, task_id: int, start: int, count: int) -> Task:
        return McTask(task_id=task_id, seed=self.seed, start=start, count=count)

    def check(self, task: Task, result: Result) -> str | None:
        if not isinstance(result, McResult):
            return f"expected a Monte Carlo result, got {type(result).__name__}"
        if not 0 <= result.hits <= result.count:
            return f"{result.hits} hits is impossible for {result.count} samples"
        return _check_range(task, result)

    def accept(self, chunk: int, result: Result) -> None:
        assert isinstance(result, McResult)
        self.hits += result.hits

    def end_pass(self) -> None:
        return None

    def describe_pass(self, index: int) -> str:
        return "sampling"


@dataclass(frozen=True)
class PassMetrics:
    loss: float
    accuracy: float


class Fixture:
    """Full-batch logistic regression of SPEC section 2 with exact, ordered reduction."""

    def __init__(self, plan: ChunkPlan, seed: int, steps: int, rate: float) -> None:
        self.plan = plan
        self.seed = seed
        self.steps = steps
        self.rate = rate
        self.theta: tuple[float, ...] = (0.0,) * N_PARAMS
        self.committed_steps = 0
        self.initial: PassMetrics | None = None
        self.final: PassMetrics | None = None
        self._pass = 0
        self._slots: list[FxResult | None] = [None] * plan.n_chunks

    @property
    def passes(self) -> int:
        return self.steps + 2

    def make_task(self, task_id: int, start: int, count: int) -> Task:
        return FxTask(task_id=task_id, seed=self.seed, start=start, count=count, theta=self.theta)

    def check(self, task: Task, result: Result) -> str | None:
        if not isinstance(result, FxResult):
            return f"expected a fixture result, got {type(result).__name__}"
        if result.valid != result.count:
            return f"{result.valid} valid rows reported for a range of {result.count}"
        if not 0 <= result.correct <= result.count:
            return f"{result.correct} correct predictions is impossible for {result.count} rows"
        if len(result.grad) != N_PARAMS:
            return f"{len(result.grad)} gradient sums, expected {N_PARAMS}"
        if not all(math.isfinite(g) for g in (*result.grad, result.loss_sum)):
            return "non-finite gradient or loss sum"
        return _check_range(task, result)

    def accept(self, chunk: int, result: Result) -> None:
        assert isinstance(result, FxResult)
        self._slots[chunk] = result

    def end_pass(self) -> None:
        grad = [0.0] * N_PARAMS
        loss = 0.0
        correct = 0
        valid = 0
        for slot in self._slots:  # fixed chunk order: the same plan gives the same bits
            assert slot is not None
            for j in range(N_PARAMS):
                grad[j] += slot.grad[j]
            loss += slot.loss_sum
            correct += slot.correct
            valid += slot.valid
        if valid != self.plan.total:
            raise AssertionError(f"reduction accepted {valid} rows, expected {self.plan.total}")
        metrics = PassMetrics(loss=loss / valid, accuracy=correct / valid)
        if self._pass == 0:
            self.initial = metrics
        if 0 < self._pass <= self.steps:
            self.theta = tuple(
                t - self.rate * g / valid for t, g in zip(self.theta, grad, strict=True)
            )
            self.committed_steps += 1
        if self._pass == self.steps + 1:
            self.final = metrics
        self._pass += 1
        self._slots = [None] * self.plan.n_chunks

    def describe_pass(self, index: int) -> str:
        if index == 0:
            return "initial metrics"
        if index <= self.steps:
            return f"step {index} of {self.steps}"
        return "final metrics"
