"""From a request to a result: validation, the coordinator run, and the job directory.

`JobSpec` is the frozen description of one job, whether it came from the command line, a
TOML spec file (systemd units) or the Python API. `prepare()` checks everything and starts
nothing; `execute()` runs a prepared job, optionally inside a job directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from aner_coord import jobdir
from aner_coord.computations import Computation, Fixture, MonteCarlo
from aner_coord.contexts import Execution, LocalExecution, cluster, local
from aner_coord.coordinator import Coordinator, JobReport, Observer
from aner_coord.errors import RequestError
from aner_coord.jobstate import JobState
from aner_coord.plan import DEFAULT_CHUNK, admit_plan, check_int, check_seed
from aner_coord.results import FixtureResult, MonteCarloResult, shares_of

STREAM_ID = "aner-mc/philox4x64-10/v1"
FIXTURE_ID = "aner-fixture/logistic/v1"
MAX_STEPS = 100_000


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One job, as the CLI, a spec file and the API describe it."""

    computation: Literal["monte-carlo", "regression"]
    samples: int
    seed: int
    output: str | None = None
    steps: int | None = None
    rate: float | None = None
    workers: int = 0
    chunk: int = DEFAULT_CHUNK
    cluster: str | None = None


@dataclass(frozen=True)
class PreparedJob:
    spec: JobSpec
    computation: Computation
    execution: Execution
    output: Path | None

    @property
    def kind(self) -> str:
        return "fixture" if isinstance(self.computation, Fixture) else "monte-carlo"


def build_computation(spec: JobSpec, execution: Execution) -> Computation:
    seed = check_seed(spec.seed)
    what = "samples" if spec.computation == "monte-carlo" else "rows (--samples)"
    plan = admit_plan(
        total=spec.samples,
        chunk=execution.chunk,
        what=what,
        min_chunks=execution.workers if not isinstance(execution, LocalExecution) else 1,
    )
    if spec.computation == "monte-carlo":
        return MonteCarlo(plan, seed)
    steps = check_int("steps", spec.steps)
    if not 0 <= steps <= MAX_STEPS:
        raise RequestError(f"steps must be in [0, {MAX_STEPS}], got {steps}")
    rate = spec.rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate):
        raise RequestError(f"rate must be a finite number, got {rate!r}")
    if rate <= 0:
        raise RequestError(f"rate must be positive, got {rate}")
    return Fixture(plan, seed, steps, float(rate))


def prepare(spec: JobSpec, *, execution: Execution | None = None) -> PreparedJob:
    """Validate a job completely, creating nothing. Raises RequestError (exit 2)."""
    if execution is None:
        if spec.cluster is not None:
            if spec.workers:
                raise RequestError("--workers applies to local runs; a cluster file sets slots")
            execution = cluster(spec.cluster, chunk=spec.chunk)
        else:
            execution = local(spec.workers, chunk=spec.chunk)
    computation = build_computation(spec, execution)
    output = jobdir.check_new_output(spec.output) if spec.output is not None else None
    return PreparedJob(spec, computation, execution, output)


def manifest_of(job: PreparedJob) -> dict[str, object]:
    from aner_coord import __version__
    from aner_worker.contract import source_fingerprint
    from aner_worker.inventory import current

    spec = job.spec
    request: dict[str, object] = {"samples": spec.samples, "seed": spec.seed}
    if spec.computation == "regression":
        request.update(steps=spec.steps, rate=spec.rate)
    return {
        "schema": "aner-manifest/1",
        "computation": spec.computation,
        "identity": STREAM_ID if spec.computation == "monte-carlo" else FIXTURE_ID,
        "request": request,
        "plan": {
            **job.execution.describe(),
            "chunks": job.computation.plan.n_chunks,
            "passes": job.computation.passes,
        },
        "inventory": current().to_dict(),
        "aner_version": __version__,
        "source_fingerprint": source_fingerprint(),
        "created_at": time.time(),
        "pid": os.getpid(),
    }


def result_of(job: PreparedJob, report: JobReport) -> MonteCarloResult | FixtureResult:
    computation = job.computation
    shares = shares_of(report.snapshot)
    described = job.execution.describe()
    if isinstance(computation, MonteCarlo):
        return MonteCarloResult(
            stream=STREAM_ID,
            seed=computation.seed,
            samples_=computation.plan.total,
            hits_=computation.hits,
            seconds_=report.seconds,
            shares=shares,
            execution=described,
        )
    assert isinstance(computation, Fixture)
    assert computation.initial is not None and computation.final is not None
    return FixtureResult(
        fixture=FIXTURE_ID,
        seed=computation.seed,
        samples=computation.plan.total,
        steps=computation.steps,
        rate=computation.rate,
        initial_loss=computation.initial.loss,
        initial_accuracy=computation.initial.accuracy,
        final_loss=computation.final.loss,
        fit_accuracy=computation.final.accuracy,
        theta=computation.theta,
        seconds=report.seconds,
        shares=shares,
        execution=described,
    )


@dataclass(frozen=True)
class Outcome:
    report: JobReport
    result: MonteCarloResult | FixtureResult | None


async def execute(
    job: PreparedJob,
    *,
    observers: Sequence[Observer] = (),
    cancel: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> Outcome:
    """Run a prepared job; with an output directory, write its files as SPEC section 7 says
    and honour `aner parallel cancel` (a `cancel-request` file) as well as `cancel`."""
    observers = list(observers)
    cancel = cancel if cancel is not None else asyncio.Event()
    directory: jobdir.JobDir | None = None
    lock: jobdir.JobLock | None = None
    writer: jobdir.StatusWriter | None = None
    if job.output is not None:
        directory = jobdir.JobDir.create(job.output)
        try:
            lock = jobdir.JobLock(directory)
            lock.acquire()
            directory.write_json(jobdir.MANIFEST, manifest_of(job))
        except BaseException:
            if lock is not None:
                lock.release()
            directory.remove()  # a run that could not start leaves nothing behind
            raise
        writer = jobdir.StatusWriter(directory)
        observers.insert(0, writer)
    try:
        # Before the Coordinator is built: it copies the list.
        if on_ready is not None:
            observers.append(_once(on_ready))
        coordinator = Coordinator(
            job.computation, job.execution, kind=job.kind, observers=observers, cancel=cancel
        )
        async with (
            jobdir.cancel_requests(directory, cancel)
            if directory is not None
            else contextlib.nullcontext()
        ):
            report = await coordinator.run()
        result = result_of(job, report) if report.state is JobState.COMPLETED else None
        if directory is not None and result is not None:
            directory.write_json(jobdir.RESULT, result.to_dict())
        if writer is not None and result is not None:
            writer.commit_completed()
        return Outcome(report, result)
    except BaseException:
        if directory is not None and not directory.exists(jobdir.STATUS):
            # Failed before its first status (nothing ran): leave no half-made directory.
            if lock is not None:
                lock.release()
                lock = None
            directory.remove()
        raise
    finally:
        # The last status is on disk before the lock goes: a monitor that can take the lock
        # then reads the final state.
        try:
            if writer is not None:
                await writer.aclose()
        finally:
            if lock is not None:
                lock.release()
            if directory is not None:
                directory.close()


def _once(callback: Callable[[], None]) -> Observer:
    fired = False

    def observer(_snapshot: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            callback()

    return observer
