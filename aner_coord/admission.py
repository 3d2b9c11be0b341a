"""The one place that admits a request (docs/contracts.md, section 3): every check, before anything
starts.

`admit(request)` validates the computation's parameters, the execution policy (worker
counts against this machine's allocation and the limits, the cluster file), the chunk plan
and the output path, and returns a frozen `Job`; it creates nothing. `precheck(request)`
makes those of its checks that do no work in proportion to the data's rows, for a command
that hands the job to a detached coordinator, which admits it whole. `local()` and
`cluster()` (the API's execution contexts) run the execution part of the same checks when
they are made, so a bad context fails where it is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from aner_coord import posix
from aner_coord.arguments import checked
from aner_coord.clusterfile import ClusterConfig, ClusterFileError, WorkerRecord, load_cluster_file
from aner_coord.computations import Admitted, Computation, computation_for
from aner_coord.computations.base import ChecksChunk, Prechecks, kernel_of
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.limits import (
    MAX_CHUNKS,
    MAX_LOCAL_WORKERS,
    MAX_SAMPLES,
    check_fraction,
    check_int,
    check_positive,
    check_seconds,
)
from aner_coord.localplan import CHOICES, LocalPlan, plan_for
from aner_coord.localplan import records as local_records
from aner_coord.requests import (
    ClusterExecution,
    Execution,
    JobRequest,
    LocalBackend,
    LocalExecution,
)


@dataclass(frozen=True)
class Workers:
    """Who computes: identities and slots, and for a cluster the records (with endpoints,
    which stay here and never reach a file). A local job's `local` says whether its workers
    are threads (no records) or local worker processes (one record each), and why."""

    slots: dict[str, int]
    records: tuple[WorkerRecord, ...] | None
    automatic: bool
    local: LocalPlan | None = None  # None: a cluster's workers

    def describe(self, chunk: int) -> dict[str, Any]:
        if self.local is not None or self.records is None:
            return {
                "kind": "local",
                "workers": len(self.slots),
                "chunk": chunk,
                "automatic": self.automatic,
                **(self.local.to_dict() if self.local is not None else {}),
            }
        return {
            "kind": "cluster",
            "chunk": chunk,
            "workers": [
                {"identity": r.identity, "transport": r.transport, "slots": r.slots}
                for r in self.records
            ],
        }


@dataclass(frozen=True)
class Job:
    """An admitted request: everything checked, nothing started."""

    request: JobRequest
    computation: Computation
    admitted: Admitted
    workers: Workers
    output: Path | None
    chunk: int  # items a task: the execution's, or the computation's default
    notes: tuple[str, ...] = ()  # what the user should know of the plan (idle slots)

    @property
    def kind(self) -> str:
        return self.computation.kind

    def describe_execution(self) -> dict[str, Any]:
        return self.workers.describe(self.chunk)

    @property
    def plan_line(self) -> str | None:
        """How a local job's workers run, as `status` shows it; None for a cluster's."""
        local = self.workers.local
        return local.describe() if local is not None else None


@dataclass(frozen=True)
class Prechecked:
    """A request that `precheck` passed, for a detached coordinator to admit whole."""

    request: JobRequest
    output: Path | None


def admit(request: JobRequest) -> Job:
    """Check `request` completely, creating nothing. Raises RequestError (exit 2)."""
    computation = computation_for(request.computation)
    admitted = computation.admit(request.computation)
    workers = _admit_job_options(request)
    if isinstance(request.execution, LocalExecution):
        kernel = kernel_of(computation, request.computation).name
        workers = _local_plan(workers, kernel, request.execution.backend)
    chunk = request.execution.chunk
    if chunk is not None and admitted.chunk_refused is not None:
        raise RequestError(f"{{chunk}}: {admitted.chunk_refused}", "chunk")
    if chunk is None:
        chunk = admitted.chunk or computation.default_chunk
    if isinstance(computation, ChecksChunk):
        problem = computation.check_chunk(request.computation, chunk)
        if problem is not None:
            raise RequestError(f"{{chunk}}: {problem}", "chunk")
    notes = _check_plan(admitted, chunk, workers, admitted.unit or computation.unit)
    output = _check_output(request)
    return Job(request, computation, admitted, workers, output, chunk, notes)


def precheck(request: JobRequest) -> Prechecked:
    """The checks of `admit` that do no work in proportion to the data's rows, for a command
    that hands the job to a detached coordinator (`--background`): that coordinator admits
    it whole before it says it is ready, so a mistake only the whole admission finds (a
    role without rows, a chunk plan over the limit) is still the command's own one line
    and exit status, while the rows are read, generated and assigned in the coordinator's
    process alone. A computation that `Prechecks` checks its request without its rows;
    any other is admitted whole here (its admission is small)."""
    computation = computation_for(request.computation)
    if isinstance(computation, Prechecks):
        computation.precheck(request.computation)
    else:
        computation.admit(request.computation)
    _admit_job_options(request)
    return Prechecked(request, _check_output(request))


def _admit_job_options(request: JobRequest) -> Workers:
    """The execution, the audit fraction, the retries, the task timeout and the job to run
    after."""
    workers = admit_execution(request.execution)
    check_fraction("audit", request.audit)
    retries = check_int("retries", request.retries)
    if retries < 0:
        raise RequestError(f"{{retries}} must be 0 or positive, got {retries}", "retries")
    if request.task_timeout is not None:
        check_seconds("task_timeout", request.task_timeout)
    if request.after is not None:
        _check_after(request.after)
    return workers


def _local_plan(workers: Workers, kernel: str, backend: str) -> Workers:
    """Local workers as threads or as worker processes (`aner_coord.localplan`)."""
    plan = plan_for(kernel, len(workers.slots), backend)
    if plan.backend == "threads":
        return Workers(workers.slots, None, workers.automatic, plan)
    posix.require("local worker processes ({backend})", "backend")
    try:
        records = local_records(list(workers.slots))
    except FileNotFoundError as exc:
        raise RequestError(f"{exc}: use {{backend}} threads", "backend") from None
    return Workers(workers.slots, records, workers.automatic, plan)


def _check_output(request: JobRequest) -> Path | None:
    from aner_coord import jobdir

    if request.output is None:
        return None
    posix.require(
        "job directories ({output}, and so background jobs, status, cancel and resume)",
        "output",
    )
    return jobdir.check_new_output(request.output)


def _check_after(after: str) -> None:
    """The job to run after must be a job directory (its manifest is there) now."""
    from aner_coord import jobdir

    posix.require("running after another job ({after})", "after")
    path = Path(after).expanduser()
    try:
        with jobdir.JobDir.open(path) as directory:
            directory.read_bytes(jobdir.MANIFEST)
    except OSError:
        raise RequestError(
            f"there is no job directory at {after} to run after: give one ({{after}})", "after"
        ) from None


def admit_execution(execution: Execution) -> Workers:
    if execution.chunk is not None:
        chunk = check_positive("chunk", execution.chunk)
        if chunk > MAX_SAMPLES:  # no job is that large: a typo, not a plan
            raise RequestError(
                f"{{chunk}} is {chunk:,}; a task takes at most {MAX_SAMPLES:,}", "chunk"
            )
    if isinstance(execution, LocalExecution):
        if execution.backend not in CHOICES:
            raise RequestError(
                f"{{backend}} must be one of {', '.join(CHOICES)}, got {execution.backend!r}",
                "backend",
            )
        return _admit_local(execution.workers)
    return _admit_cluster(execution)


def _effective_cpus() -> int:
    from aner_worker.inventory import current

    return current().effective_cpus


def _admit_local(workers: int) -> Workers:
    workers = check_int("workers", workers)
    if workers < 0:
        raise RequestError(
            f"{{workers}} must be 0 (automatic) or positive, got {workers}", "workers"
        )
    automatic = workers == 0
    if automatic:
        from aner_worker.inventory import current

        workers = current().auto_workers
    else:
        effective = _effective_cpus()
        if workers > MAX_LOCAL_WORKERS:
            raise AdmissionError(
                f"{workers} local workers exceed the limit of {MAX_LOCAL_WORKERS}: use at most "
                f"{min(effective, MAX_LOCAL_WORKERS)} workers ({{workers}})",
                "workers",
            )
        if workers > effective:
            raise AdmissionError(
                f"{workers} workers exceed this process's effective CPU allocation of "
                f"{effective} (see `aner parallel inventory`): use at most {effective} "
                "workers ({workers}), or 0 for automatic",
                "workers",
            )
    slots = {f"local-{i + 1}": 1 for i in range(workers)}
    return Workers(slots, None, automatic)


def load_cluster(path: str) -> ClusterConfig:
    try:
        config = load_cluster_file(os.path.expanduser(path))
    except ClusterFileError as exc:
        raise RequestError(str(exc)) from None
    check_blas_environment(config)
    return config


def check_blas_environment(config: ClusterConfig) -> None:
    """Refuse this process's OpenBLAS variables where a record's worker is to take them
    (docs/contracts.md, section 5) and the worker could not: they travel as its arguments."""
    from aner_worker.blasenv import own_settings, value_problem

    for name, value in own_settings().items():
        takers = [
            w.identity for w in config.workers if not w.blas.own and name not in dict(w.blas.values)
        ]
        problem = value_problem(name, value) if value and takers else None
        if problem is not None:
            raise RequestError(
                f"this environment's {problem}, and the workers of cluster file {config.path} "
                f"take it ({', '.join(takers)}): set it right or unset it, or give those "
                "records their own (coretype=, l2size=) or blas=own"
            )


def _admit_cluster(execution: ClusterExecution) -> Workers:
    posix.require("worker groups (local pipes, SSH, Slurm)")
    config = load_cluster(execution.config)
    local_slots = sum(w.slots for w in config.workers if w.transport == "local")
    effective = _effective_cpus()
    if local_slots > effective:
        raise AdmissionError(
            f"cluster file {execution.config} gives local-pipe workers {local_slots} slots "
            f"in all, more than this machine's effective CPU allocation of {effective}: "
            "lower their slots"
        )
    if any(w.transport == "slurm" for w in config.workers):
        from aner_coord.transports.slurm import slurm_start_timeout

        try:
            slurm_start_timeout()
        except ValueError as exc:
            raise RequestError(str(exc)) from None
    slots = {w.identity: w.slots for w in config.workers}
    return Workers(slots, tuple(config.workers), automatic=False)


def _check_plan(
    admitted: Admitted, chunk: int, workers: Workers, unit: str = "items"
) -> tuple[str, ...]:
    """Refuse a plan that cannot run (too many chunks; a cluster worker that no pass could
    give a chunk); return a note when every optimizer step leaves worker slots idle.

    The one-chunk-per-worker rule looks at the largest pass: a computation whose passes
    differ (Dense) may have passes smaller than the group (a last partial batch, a short
    validation pass) while every worker still takes part in the job."""
    total = admitted.largest
    n_chunks = -(-total // chunk)
    if n_chunks > MAX_CHUNKS:
        smallest = -(-total // MAX_CHUNKS)
        raise AdmissionError(
            f"{total:,} {unit} in chunks of {chunk:,} make {n_chunks:,} chunks; the limit is "
            f"{MAX_CHUNKS:,}: use a chunk of at least {smallest} ({{chunk}})",
            "chunk",
        )
    # Every configured worker of a cluster needs a chunk; local workers, threads or
    # processes, are the job's own and may idle.
    needed = len(workers.slots) if workers.local is None and workers.records is not None else 1
    if n_chunks < needed:
        raise AdmissionError(
            f"{total:,} {unit} in chunks of {chunk:,} make {n_chunks} chunk(s), fewer than "
            f"the {needed} configured workers (each needs at least one): "
            f"use a chunk of at most {max(1, total // needed)} ({{chunk}})",
            "chunk",
        )
    slots = sum(workers.slots.values())
    step_chunks = -(-admitted.items // chunk)
    if not admitted.steps or step_chunks >= slots:
        return ()
    idle = slots - step_chunks
    return (
        f"a step of {admitted.items:,} {unit} makes {step_chunks} chunk(s) of {chunk:,} for "
        f"{slots} worker slots: {idle} slot(s) idle during every step (a chunk of at most "
        f"{max(1, admitted.items // slots):,} would use them all, with other parameters)",
    )


def with_strict_bits(job: Job) -> Job:
    """`job` refusing a group of differing kernel sets (`resume --strict-bits`): its own
    request stays as its directory records it; only this run is strict."""
    return replace(job, request=strict_bits_request(job.request))


def strict_bits_request(request: JobRequest) -> JobRequest:
    """`request` with `strict_bits`; refused for local threads, which it does not concern."""
    execution = request.execution
    if not isinstance(execution, ClusterExecution):
        raise RequestError(
            "--strict-bits applies to a worker group (--cluster FILE): this job computes on "
            "local threads, in one process, with one kernel set"
        )
    strict = msgspec.structs.replace(execution, strict_bits=True)
    return msgspec.structs.replace(request, execution=strict)


@checked
def local(
    workers: int = 0, chunk: int | None = None, backend: LocalBackend = "auto"
) -> LocalExecution:
    """A local allocation; `workers=0` means the automatic policy reported by `inventory`.
    `chunk` items go to a task; None is each computation's own default (65,536 samples or
    rows for Monte Carlo and the fixture, docs/contracts.md, section 3). `backend`: "auto"
    (threads, or local worker processes for work that holds the GIL, as `inventory` says),
    "threads" or "processes"."""
    execution = LocalExecution(workers=workers, chunk=chunk, backend=backend)
    admit_execution(execution)
    return execution


@checked
def cluster(
    config: str | os.PathLike[str], chunk: int | None = None, strict_bits: bool = False
) -> ClusterExecution:
    """The group described by the cluster file at `config` (docs/contracts.md, section 5). With
    `strict_bits`, a Dense or search job refuses, before any work, a group whose workers
    compute with different BLAS kernel sets (section 6)."""
    execution = ClusterExecution(config=os.fspath(config), chunk=chunk, strict_bits=strict_bits)
    admit_execution(execution)
    return execution
