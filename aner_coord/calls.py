"""What every call of the API shares, one-off or on a session: how a finished job becomes
its result or its exception, and how the Dense options become a request."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from aner_coord.computations.dense.request import DenseRequest
from aner_coord.errors import JobCancelled, JobFailed
from aner_coord.job.coordinator import JobReport
from aner_coord.jobdir.status import JobState


def outcome(report: JobReport, interrupt: BaseException | None = None) -> Any:
    if report.state is JobState.COMPLETED:
        return report.result
    if report.state is JobState.CANCELLED:
        # An interrupt (Ctrl-C, a notebook's kernel interrupt) cancelled it: chained, so a
        # notebook shows why, and nothing of the job runs on.
        raise JobCancelled(report.error or "cancelled") from interrupt
    raise JobFailed(report.error or "job failed") from report.task_exception


def dense_request(
    seed: int,
    data: str | os.PathLike[str] | None,
    label: str | None,
    teacher: tuple[int, int, int] | None,
    hidden: Sequence[int],
    batch: int,
    epochs: int,
    optimizer: str,
    lr: float,
    patience: int,
    target_accuracy: float | None,
) -> DenseRequest:
    """The request of a `dense_fit` call (shared with sessions)."""
    return DenseRequest(
        seed=seed,
        data=None if data is None else (data if data == "digits" else os.fspath(data)),
        label=label,
        teacher=None if teacher is None else (teacher[0], teacher[1], teacher[2]),
        hidden=tuple(hidden),
        batch=batch,
        epochs=epochs,
        optimizer=optimizer,
        lr=lr,
        patience=patience,
        target_accuracy=target_accuracy,
    )
