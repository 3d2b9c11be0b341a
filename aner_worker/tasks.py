"""Executes one wire task with the numba kernels; shared by local threads and worker processes."""

from __future__ import annotations

from protocol import FxResult, FxTask, McResult, McTask


def execute(task: McTask | FxTask) -> McResult | FxResult:
    """Run `task` on the calling thread (the kernels release the GIL) and return its result."""
    if isinstance(task, McTask):
        from aner_worker.philox import count_hits

        hits = count_hits(task.seed, task.start, task.count)
        return McResult(task_id=task.task_id, start=task.start, count=task.count, hits=hits)
    from aner_worker.fixture import fixture_pass

    stats = fixture_pass(task.seed, task.start, task.count, task.theta)
    return FxResult(
        task_id=task.task_id,
        start=task.start,
        count=task.count,
        grad=tuple(stats.grad),
        loss_sum=stats.loss_sum,
        correct=stats.correct,
        valid=stats.valid,
    )


def warm_up() -> None:
    """Load (or compile, the first time) both kernels before the first real task."""
    from aner_worker.fixture import fixture_pass
    from aner_worker.philox import count_hits

    count_hits(0, 0, 3)
    fixture_pass(0, 0, 3, (0.0,) * 9)
