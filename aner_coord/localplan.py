"""How local workers run (docs/contracts.md, section 3): threads of this process, or worker
processes over local pipes, chosen per kernel from the table below, never by code paths.

Threads start in microseconds and read the data in this process; a kernel that releases the
GIL for its whole inner loop (numba `nogil` kernels, large BLAS calls) scales on them. A
kernel whose inner loop holds the GIL does not: a search's fits are Python driving numba and
numpy step by step, so on two threads each fit takes about twice as long. Such a kernel is
declared in `PROCESSES`, and a job that asks for more than one local worker then runs on that
many `aner parallel worker --stdio` processes, each started as a cluster file's `local`
record starts (the same backend, leases, retries, timeline and progress as a pipe group), once
per job, or kept across the calls of a session. One worker stays a thread: nothing competes
for its GIL but the coordinator, and it saves the start-up. `LocalExecution.backend` may name
either backend instead of "auto".

Worker processes load their kernels from this installation, so a kernel registered only in
this process (a test's, a plug-in's) runs on threads unless it is asked for explicitly.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from typing import Literal, get_args

from aner_coord.clusterfile import WorkerRecord
from aner_coord.requests import LocalBackend

Backend = Literal["threads", "processes"]
CHOICES: tuple[str, ...] = get_args(LocalBackend)  # `LocalExecution.backend`

# The kernels whose inner loop holds the GIL, and why, as `inventory` and `status` say it.
PROCESSES: dict[str, str] = {
    "search": "search fits hold the GIL",  # model search, cross-validation, Dense replicates
}
RELEASES_GIL = "its kernel releases the GIL"
# Kernels on threads for a reason of their own.
THREADS: dict[str, str] = {
    # Its chunks' BLAS and numba release the GIL; processes would add a round trip a step.
    "dense": "its steps' chunks release the GIL; processes add a round trip a step",
}


@dataclass(frozen=True)
class LocalPlan:
    """Where a local job's workers run, and why (for the manifest, `status` and inventory)."""

    backend: Backend
    workers: int
    reason: str

    def describe(self) -> str:
        """As `status` shows it: "local: 2 worker processes (search fits hold the GIL)"."""
        one, many = _UNITS[self.backend]
        return f"local: {self.workers} {one if self.workers == 1 else many} ({self.reason})"

    def to_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "why": self.reason}


_UNITS: dict[Backend, tuple[str, str]] = {
    "threads": ("thread", "threads"),
    "processes": ("worker process", "worker processes"),
}


def automatic(kernel: str, workers: int) -> LocalPlan:
    """The automatic choice for `workers` local workers of `kernel`."""
    if workers == 1:
        return LocalPlan("threads", 1, "one worker: nothing shares its GIL")
    held = PROCESSES.get(kernel)
    if held is None:
        return LocalPlan("threads", workers, THREADS.get(kernel, RELEASES_GIL))
    if worker_command() is None:
        return LocalPlan("threads", workers, f"{held}, but no aner command is installed here")
    return LocalPlan("processes", workers, held)


def plan_for(kernel: str, workers: int, asked: str) -> LocalPlan:
    """The plan of a job asking for `asked` ("auto", "threads" or "processes")."""
    if asked == "auto":
        return automatic(kernel, workers)
    backend: Backend = "threads" if asked == "threads" else "processes"
    return LocalPlan(backend, workers, "asked for")


def worker_command() -> str | None:
    """This installation's `aner` command (beside its interpreter, where pip put it), which
    local worker processes run; None where there is none."""
    path = os.path.join(sysconfig.get_path("scripts"), "aner")
    return path if os.access(path, os.X_OK) else None


def records(names: list[str]) -> tuple[WorkerRecord, ...]:
    """One local pipe worker of one slot per name, as a cluster file's `local` record."""
    command = worker_command()
    if command is None:
        raise FileNotFoundError("no aner command is installed beside this interpreter")
    return tuple(WorkerRecord(name, "local", "-", command, 1, 0) for name in names)


def choices(workers: int) -> dict[str, LocalPlan]:
    """The automatic choice of each declared kernel for `workers` local workers, as
    `inventory` reports it (the automatic count)."""
    from aner_worker.kernels import KERNELS

    return {name: automatic(name, workers) for name in KERNELS}


def choices_dict(workers: int) -> dict[str, object]:
    """`inventory --json`'s `local_execution`."""
    plans = choices(workers)
    return {"workers": workers, "kernels": {name: p.to_dict() for name, p in plans.items()}}


def choice_lines(workers: int) -> list[str]:
    """The same for a person: one line per kernel."""
    lines = [f"local execution, {workers} automatic worker(s), by kernel:"]
    for name, plan in choices(workers).items():
        lines.append(f"  {name:<12} {_UNITS[plan.backend][1]:<17} {plan.reason}")
    return lines
