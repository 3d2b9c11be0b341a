"""Measure what a plan's wall time is made of, on this machine and on each worker.

Locally: the fixed cost of a whole `aner parallel` command (a tiny job of the same
computation, the median of a few), the kernel's aggregate rate with 1, 2, 4, ... threads up
to the effective CPUs, and the coordinator's cost per task (the slope of a job's time
against its task count, with tiny tasks). For each worker record of a cluster file, over
its real transport: start-up (spawn to handshake), the kernel's rate per slot, the round
trip (Ping/Pong) and the bandwidth (Params frames of a few sizes, each followed by a Ping),
and shut-down (Shutdown to exit); and its cost per task as whole jobs on that worker alone
pay it (the slope of a job's time against its number of one-item tasks), since a job
pipelines its tasks (aner_coord.job.pacing) and batches its writes both ways: a task then costs
what the coordinator, the link (an sshd on the same host included) and the worker spend on
it, not a round trip or a write of its own.

Nothing here chooses a plan; `plan` predicts from a `Probe`, which is saved as
`probe.json` (public identities and machine facts only, never endpoints).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from aner_coord.clusterfile import WorkerRecord
from aner_coord.requests import (
    ClusterExecution,
    ComputationRequest,
    JobRequest,
    LocalExecution,
)

if TYPE_CHECKING:
    from aner_coord.job.link import WorkerLink

SCHEMA = "aner-probe/1"
RATE_TARGET_S = 0.15  # a rate measurement computes for about this long
RATE_REPEATS = 3
COMMAND_REPEATS = 3
PING_REPEATS = 8
TASKS_FEW, TASKS_MANY = 100, 4000  # one-item tasks of a worker's cost-per-task jobs
FRAME_SIZES = (1 << 14, 1 << 18, 15 << 16)  # below the 1 MiB frame limit


@dataclass(frozen=True)
class LocalProbe:
    cpus: int  # effective CPUs
    command_s: float  # a whole tiny `aner parallel` command, median
    rates: dict[int, float]  # threads -> aggregate items per second
    task_s: float  # coordinator seconds per task with local threads
    machine: dict[str, str] = field(default_factory=dict)
    host: str | None = None  # this host's identity (docs/contracts.md, section 18)

    def rate(self, workers: int) -> float:
        """Aggregate items/s with `workers` threads, interpolated between measured counts."""
        known = sorted(self.rates)
        below = max((k for k in known if k <= workers), default=known[0])
        above = min((k for k in known if k >= workers), default=known[-1])
        if below == above:
            return self.rates[below] * (workers / below if workers > above else 1.0)
        f = (workers - below) / (above - below)
        return self.rates[below] + f * (self.rates[above] - self.rates[below])


@dataclass(frozen=True)
class WorkerProbe:
    identity: str
    transport: str
    slots: int
    startup_s: float  # spawn to handshake, kernels warmed
    shutdown_s: float  # Shutdown to the process's exit
    rate_per_slot: float  # items per second on one slot
    task_s: float  # a slot's seconds per task beyond computing, in a job on this worker
    round_trip_s: float
    bandwidth_bps: float | None  # bytes per second; None if not resolvable
    machine: dict[str, str] = field(default_factory=dict)
    host: str | None = None  # the host its handshake reported; None: it did not say


@dataclass(frozen=True)
class GroupProbe:
    """Workers started together contend for what they share (often the same host): their
    start-up and shut-down are measured together too."""

    identities: tuple[str, ...]
    startup_s: float  # spawn of all to the last handshake
    shutdown_s: float  # Shutdown to the last exit
    command_s: float | None = None  # a whole tiny command on the group, median


@dataclass(frozen=True)
class Probe:
    kind: str
    local: LocalProbe
    workers: tuple[WorkerProbe, ...] = ()
    groups: tuple[GroupProbe, ...] = ()
    schema: str = SCHEMA

    def group(self, identities: tuple[str, ...]) -> GroupProbe | None:
        return next((g for g in self.groups if g.identities == identities), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["local"]["rates"] = {str(k): v for k, v in self.local.rates.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        local = dict(data["local"])
        local["rates"] = {int(k): float(v) for k, v in local["rates"].items()}
        return cls(
            kind=data["kind"],
            local=LocalProbe(**local),
            workers=tuple(WorkerProbe(**w) for w in data["workers"]),
            groups=tuple(
                GroupProbe(
                    tuple(g["identities"]), g["startup_s"], g["shutdown_s"], g.get("command_s")
                )
                for g in data.get("groups", [])
            ),
        )


def tiny(computation: ComputationRequest, items: int = 1000) -> ComputationRequest:
    """The same computation at a tiny size: `items` items, one step or epoch. A computation
    may say how (`tiny` on it: Dense makes a teacher set of the data's shape, which needs
    no staging, with one step per epoch)."""
    from aner_coord.computations import computation_for
    from aner_coord.computations.base import MakesTiny

    maker = computation_for(computation)
    if isinstance(maker, MakesTiny):
        small: ComputationRequest = maker.tiny(computation, items)
        return small
    changes: dict[str, Any] = {}
    fields = {f.name for f in msgspec.structs.fields(computation)}
    for name, value in (("samples", items), ("rows", items), ("steps", 1), ("epochs", 1)):
        if name in fields:
            changes[name] = value
    return msgspec.structs.replace(computation, **changes)


def _params(computation: ComputationRequest) -> tuple[Any, Any, int]:
    """The kernel, the parameters of a typical pass of `computation` and its item count: the
    first pass, or for a computation of steps (Dense) its first step, reached by computing
    the passes before it here."""
    from aner_coord.computations import computation_for

    comp = computation_for(computation)
    admitted = comp.admit(computation)
    run = comp.start(computation, max(admitted.largest, 1))
    spec = run.next_pass()
    assert spec is not None
    while admitted.steps and spec.items != admitted.items:
        stats = comp.kernel.run(spec.params, 0, spec.items, None)
        problem = run.check(0, 0, spec.items, stats)
        assert problem is None, problem
        run.accept(0, stats)
        run.commit()
        spec = run.next_pass()
        assert spec is not None
    return comp.kernel, spec.params, spec.items


def _worker_form(computation: ComputationRequest) -> ComputationRequest:
    """What a worker probe computes: the computation itself, or its tiny form where the
    computation has one (Dense: a teacher set of the data's shape, nothing to stage)."""
    from aner_coord.computations import computation_for
    from aner_coord.computations.base import MakesTiny

    if not isinstance(computation_for(computation), MakesTiny):
        return computation
    return tiny(computation, TASKS_MANY)


def _compute(kernel: Any, params: Any, count: int, limit: int) -> None:
    """`count` items of the pass, in pieces of at most its `limit` items."""
    while count > 0:
        piece = min(count, limit)
        kernel.run(params, 0, piece, None)
        count -= piece


# -- local -------------------------------------------------------------------------------
def probe_local(computation: ComputationRequest) -> LocalProbe:
    from aner_worker.host import host_identity
    from aner_worker.inventory import current
    from aner_worker.machine import machine_identity

    cpus = current().effective_cpus
    kernel, params, limit = _params(computation)
    kernel.warm_up()
    count = _calibrate(kernel, params, limit)
    counts = [1]
    while counts[-1] < cpus:
        counts.append(min(cpus, counts[-1] * 2))
    rates = dict.fromkeys(counts, 0.0)
    # The best of a few: the machine may be shared, and a rate is only ever lowered by what
    # else runs. The repeats take turns across thread counts, so that a burst of other work
    # lowers one of each count's tries, not all of one count's (which made 2 threads look
    # slower than 1 on a loaded 2-CPU machine).
    for _ in range(RATE_REPEATS):
        for p in counts:
            rates[p] = max(rates[p], _threads_rate(kernel, params, count, p, limit))
    return LocalProbe(
        cpus=cpus,
        command_s=_command_seconds(computation),
        rates=rates,
        task_s=_local_task_seconds(computation),
        machine=machine_identity(),
        host=host_identity().value,
    )


def _calibrate(kernel: Any, params: Any, limit: int) -> int:
    """Items that take about RATE_TARGET_S on one thread."""
    count = min(1 << 14, limit)
    while True:
        began = time.perf_counter()
        _compute(kernel, params, count, limit)
        took = time.perf_counter() - began
        if took >= RATE_TARGET_S / 4 or count >= 1 << 34:
            return max(count, int(count * RATE_TARGET_S / max(took, 1e-9)))
        count *= 4


def _threads_rate(kernel: Any, params: Any, count: int, threads: int, limit: int) -> float:
    """Aggregate items/s of `threads` threads each running the (nogil) kernel at once."""
    barrier = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        barrier.wait()
        _compute(kernel, params, count, limit)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    began = time.perf_counter()
    for t in pool:
        t.join()
    return threads * count / (time.perf_counter() - began)


def _command_seconds(
    computation: ComputationRequest,
    records: tuple[WorkerRecord, ...] = (),
    repeats: int = COMMAND_REPEATS,
) -> float:
    """The median wall time of a whole tiny command, on local threads or on `records`
    (through an owner-only cluster file of just those)."""
    from aner_coord.scaling.experiment import render_cluster
    from aner_coord.scaling.trials import run_trial

    times = []
    with tempfile.TemporaryDirectory(prefix="aner-probe-") as scratch:
        execution: LocalExecution | ClusterExecution = LocalExecution(workers=1)
        if records:
            path = Path(scratch) / "cluster"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(render_cluster(records))
            execution = ClusterExecution(config=str(path), chunk=max(1, 1000 // len(records)))
        for i in range(repeats):
            request = JobRequest(
                computation=tiny(computation),
                execution=execution,
                output=str(Path(scratch) / f"job-{i}"),
            )
            outcome = run_trial(request, Path(scratch) / f"spec-{i}.json")
            if outcome.exit_code != 0:
                raise RuntimeError(f"the probe's tiny command failed: {outcome.stderr}")
            times.append(outcome.wall_s)
    return statistics.median(times)


def _task_seconds(
    computation: ComputationRequest,
    execution: LocalExecution | ClusterExecution,
    few: int = 50,
    many: int = 1000,
) -> float:
    """Seconds per task beyond computing: the slope of a whole job's time against its
    number of one-item tasks, run the way a job runs them (on local threads, or through the
    process backend with its paced, batched writes and the worker's batched results)."""
    from aner_coord.admission import admit
    from aner_coord.job.execute import execute
    from aner_coord.runner import run_sync

    work: dict[int, int] = {}

    def seconds(tasks: int) -> float:
        job = admit(JobRequest(computation=tiny(computation, tasks), execution=execution))
        work[tasks] = job.admitted.planned_work  # one-item tasks of every pass
        return run_sync(execute(job)).seconds

    seconds(few)  # warm
    longer = min(seconds(many) for _ in range(2)) - min(seconds(few) for _ in range(2))
    return max(longer / max(1, work[many] - work[few]), 1e-7)


def _local_task_seconds(computation: ComputationRequest) -> float:
    """The coordinator's cost per task with one local thread."""
    return _task_seconds(computation, LocalExecution(workers=1, chunk=1))


def _worker_task_seconds(computation: ComputationRequest, record: WorkerRecord) -> float:
    """A slot's cost per task on `record` alone: the job's time per tiny task times its
    slots, since the plan charges each slot the cost of every task it runs (a slot's chunk
    takes `chunk / rate + task cost`)."""
    from aner_coord.scaling.experiment import render_cluster

    with tempfile.TemporaryDirectory(prefix="aner-probe-") as scratch:
        path = Path(scratch) / "cluster"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(render_cluster((record,)))
        execution = ClusterExecution(config=str(path), chunk=1)
        per_task = _task_seconds(computation, execution, TASKS_FEW, TASKS_MANY)
    return per_task * record.slots


# -- workers -----------------------------------------------------------------------------
def probe_workers(
    records: tuple[WorkerRecord, ...], computation: ComputationRequest, rate_hint: float
) -> tuple[WorkerProbe, ...]:
    """Probe every record, one after another (so that they do not slow each other)."""
    from aner_coord.runner import run_sync

    out = []
    for record in records:
        task_s = _worker_task_seconds(computation, record)
        out.append(run_sync(probe_worker(record, computation, rate_hint, task_s)))
    return tuple(out)


async def probe_worker(
    record: WorkerRecord, computation: ComputationRequest, rate_hint: float, task_s: float
) -> WorkerProbe:
    """Start-up, rate per slot, round trip, bandwidth and shut-down over one connection;
    `task_s` is measured apart, by whole jobs (`_worker_task_seconds`)."""
    from aner_coord.job.link import connect
    from aner_worker.contract import source_fingerprint
    from aner_worker.kernels.base import encode
    from protocol import CoordinatorConnection

    kernel, params, limit = _params(_worker_form(computation))
    connection = CoordinatorConnection(
        record.identity,
        record.slots,
        source_fingerprint(),
        (kernel.name,),
        window=record.slots * 4,
    )
    began = time.monotonic()
    link = await connect(record, connection)
    try:
        startup = time.monotonic() - began
        await link.transport.write(connection.params(1, kernel.name, encode(params)))
        # Rate per slot: one task per slot of about RATE_TARGET_S at the local rate.
        items = min(limit, max(1024, int(rate_hint * RATE_TARGET_S)))
        big = await _run_tasks(link, record.slots, items, limit)
        rate = statistics.median(items / max(busy, 1e-9) for _, busy in big)
        rtt = statistics.median([await _round_trip(link) for _ in range(PING_REPEATS)])
        # Bandwidth: a Params frame of each size, then a ping; time beyond the round trip.
        per_size = []
        for size in FRAME_SIZES:
            body = msgspec.msgpack.encode(b"\0" * size)
            frame = functools.partial(connection.params, 2, kernel.name, body)
            per_size.append((size, await _round_trip(link, frame)))
        shutdown = await _shut_down(link)
    except BaseException:
        await link.transport.close(timeout=1.0)
        raise
    return WorkerProbe(
        identity=record.identity,
        transport=record.transport,
        slots=record.slots,
        startup_s=startup,
        shutdown_s=shutdown,
        rate_per_slot=rate,
        task_s=task_s,
        round_trip_s=rtt,
        bandwidth_bps=_bandwidth(per_size),
        machine=dict(link.machine),
        host=link.host,
    )


async def _run_tasks(
    link: WorkerLink, count: int, items: int, limit: int
) -> list[tuple[float, float]]:
    """Run `count` tasks of `items` items (within the pass's `limit`), keeping the window
    full: (latency, busy) each."""
    from protocol import Answered, Result, Task

    connection = link.connection
    sent: dict[int, float] = {}
    out: list[tuple[float, float]] = []
    queue = list(range(count))
    task_id = 0
    while queue or sent:
        frames = []
        while queue and len(sent) < connection.window:
            queue.pop()
            task_id += 1
            sent[task_id] = time.monotonic()
            start = task_id * items if task_id * items + items <= limit else 0
            frames.append(connection.task(Task(task_id, 1, start, items)))
        if frames:
            await link.transport.write(b"".join(frames))
        event = await link.next_event()
        if isinstance(event, Answered) and isinstance(event.message, Result):
            t0 = sent.pop(event.message.task_id)
            out.append((time.monotonic() - t0, event.message.busy_s))
    return out


async def _round_trip(link: WorkerLink, before: Callable[[], bytes] | None = None) -> float:
    """Seconds from making and writing the frame `before` makes (if any) and a Ping to
    reading the Pong."""
    from protocol import Ponged

    t0 = time.monotonic()
    head = before() if before is not None else b""
    await link.transport.write(head + link.connection.ping())
    while not isinstance(await link.next_event(), Ponged):
        pass
    return time.monotonic() - t0


async def _shut_down(link: WorkerLink) -> float:
    """Seconds from Shutdown to the worker's exit."""
    t0 = time.monotonic()
    await link.transport.write(link.connection.shutdown("probe done"))
    await link.transport.close()
    return time.monotonic() - t0


async def _start_and_stop(record: WorkerRecord, kernel: str) -> tuple[float, float]:
    """Spawn to handshake, and Shutdown to exit, of one worker."""
    from aner_coord.job.link import connect
    from aner_worker.contract import source_fingerprint
    from protocol import CoordinatorConnection

    connection = CoordinatorConnection(
        record.identity, record.slots, source_fingerprint(), (kernel,)
    )
    began = time.monotonic()
    link = await connect(record, connection)
    startup = time.monotonic() - began
    try:
        return startup, await _shut_down(link)
    except BaseException:
        await link.transport.close(timeout=1.0)
        raise


def probe_groups(
    groups: list[tuple[WorkerRecord, ...]], computation: ComputationRequest
) -> tuple[GroupProbe, ...]:
    """Start and stop each group's workers all at once, as a job does."""
    from aner_coord.computations import computation_for
    from aner_coord.runner import run_sync

    kernel = computation_for(computation).kernel

    async def together(group: tuple[WorkerRecord, ...]) -> tuple[float, float]:
        times = await asyncio.gather(*(_start_and_stop(r, kernel.name) for r in group))
        return max(t[0] for t in times), max(t[1] for t in times)

    out = []
    for group in groups:
        startup, shutdown = run_sync(together(group))
        command = _command_seconds(computation, group, repeats=2)
        out.append(GroupProbe(tuple(r.identity for r in group), startup, shutdown, command))
    return tuple(out)


def _bandwidth(points: list[tuple[int, float]]) -> float | None:
    """Bytes per second from the least-squares slope of time against frame size."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    return 1 / slope if slope > 0 and math.isfinite(1 / slope) else None


def run_probe(
    computation: ComputationRequest,
    records: tuple[WorkerRecord, ...],
    groups: list[tuple[WorkerRecord, ...]] | None = None,
) -> Probe:
    """Probe this machine, each record alone, and each group together (default: each
    record alone and, when there are several, all of them)."""
    from aner_coord.computations import computation_for

    local = probe_local(computation)
    workers = probe_workers(records, computation, local.rates[1]) if records else ()
    if groups is None:
        groups = [(r,) for r in records] + ([records] if len(records) > 1 else [])
    return Probe(
        kind=computation_for(computation).kind,
        local=local,
        workers=workers,
        groups=probe_groups(groups, computation),
    )
