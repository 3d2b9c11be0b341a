"""The experiment file, and the standard matrix of `--auto`.

    name = "pi on the lab machines"    # optional
    repetitions = 3                     # at least 3, after one excluded warm-up per case
    reference = "local-1"               # optional: the case speedups are measured against

    [computation]                       # fixed for every case
    kind = "monte-carlo"
    samples = 400_000_000
    seed = 1

    [[case]]
    name = "local-1"
    workers = 1                         # local threads...
    chunk = 65_536                      # optional: the computation's default

    [[case]]
    name = "group"
    cluster = "lab.cluster"             # ...or a cluster file (relative to this file)
    identities = ["Atlas-01", "Atlas-02"]   # optional subset of its records
    chunk = 4_000_000

Unknown keys are refused; every case's trial spec is written, read back as its command
reads it and admitted before the first trial starts, so a bad experiment is one line and
exit 2 at once. Limits, checked first: at most MAX_REPETITIONS repetitions and MAX_CASES
cases (the `--auto` matrix of 256 CPUs and 32 cluster records has 84), names of at most
MAX_NAME characters.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.errors import RequestError
from aner_coord.limits import DEFAULT_CHUNK
from aner_coord.requests import (
    ClusterExecution,
    ComputationRequest,
    Execution,
    JobRequest,
    LocalExecution,
)

MIN_REPETITIONS = 3
MAX_REPETITIONS = 100
MAX_CASES = 100
MAX_NAME = 200  # characters of an experiment's or a case's name
LOCAL_IDENTITY = "local"  # the public name of the machine that runs the experiment


class CaseFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    workers: int | None = None
    cluster: str | None = None
    identities: list[str] | None = None
    chunk: int | None = None  # the computation's default (65,536 samples; 64 Dense rows)


class _ExperimentFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str = "scaling experiment"
    repetitions: int = MIN_REPETITIONS
    reference: str | None = None
    case: list[CaseFile] = []


@dataclass(frozen=True)
class Case:
    """One execution plan of the experiment: local threads, or records of a cluster file."""

    name: str
    chunk: int
    workers: int | None = None  # local threads
    cluster: str | None = None  # the cluster file's path
    records: tuple[WorkerRecord, ...] = ()

    @property
    def local(self) -> bool:
        return self.cluster is None

    @property
    def slots(self) -> int:
        return (self.workers or 0) if self.local else sum(r.slots for r in self.records)

    @property
    def identities(self) -> list[str]:
        return [LOCAL_IDENTITY] if self.local else [r.identity for r in self.records]

    def describe(self) -> str:
        if self.local:
            return f"local, {self.workers} worker(s), chunk {self.chunk:,}"
        return f"{' + '.join(self.identities)} ({self.slots} slots), chunk {self.chunk:,}"


@dataclass(frozen=True)
class Experiment:
    name: str
    computation: ComputationRequest
    cases: tuple[Case, ...]
    repetitions: int
    reference: str

    @property
    def kind(self) -> str:
        from aner_coord.computations import computation_for

        return computation_for(self.computation).kind

    def case(self, name: str) -> Case:
        return next(c for c in self.cases if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "computation": msgspec.to_builtins(self.computation),
            "repetitions": self.repetitions,
            "reference": self.reference,
            "cases": [
                {
                    "name": c.name,
                    "execution": "local" if c.local else "cluster",
                    "workers": c.identities if not c.local else c.workers,
                    "slots": c.slots,
                    "chunk": c.chunk,
                }
                for c in self.cases
            ],
        }


def load_experiment(path: str) -> Experiment:
    """Read and check the experiment file at `path` (RequestError on anything wrong)."""
    from aner_coord.computations import request_types

    source = f"experiment {path}"
    from aner_coord.userfiles import decode_toml, read_small_file

    raw = decode_toml(read_small_file(path, "experiment file", source), "experiment file", source)
    try:
        computation_raw = raw.pop("computation", None)
        if computation_raw is None:
            raise RequestError(f"{source}: missing [computation]")
        union: Any = request_types()
        computation: ComputationRequest = msgspec.convert(computation_raw, type=union)
        spec = msgspec.convert(raw, type=_ExperimentFile)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(f"{source}: {exc}") from None
    except RecursionError:
        raise RequestError(f"{source}: nested too deeply to be read") from None
    _check_limits(source, spec.name, [c.name for c in spec.case], spec.repetitions)
    base = Path(path).absolute().parent
    from aner_coord.computations import computation_for

    default_chunk = computation_for(computation).default_chunk
    cases = tuple(_case(source, base, c, default_chunk) for c in spec.case)
    return checked(spec.name, computation, cases, spec.repetitions, spec.reference, source)


def _check_limits(source: str, name: str, cases: list[str], repetitions: int) -> None:
    """The experiment's size, before anything is read or admitted for its cases."""
    if len(cases) > MAX_CASES:
        raise RequestError(f"{source}: {len(cases):,} cases; the limit is {MAX_CASES}")
    if repetitions > MAX_REPETITIONS:
        raise RequestError(
            f"{source}: repetitions = {repetitions:,}; the limit is {MAX_REPETITIONS}"
        )
    for what, text in [("name", name), *(("case name", c) for c in cases)]:
        if len(text) > MAX_NAME:
            raise RequestError(
                f"{source}: a {what} of {len(text):,} characters ({text[:40]!r}...); the limit "
                f"is {MAX_NAME}"
            )


def _case(source: str, base: Path, spec: CaseFile, default_chunk: int) -> Case:
    where = f"{source}: case {spec.name!r}"
    chunk = spec.chunk if spec.chunk is not None else default_chunk
    if (spec.workers is None) == (spec.cluster is None):
        raise RequestError(f"{where}: give exactly one of workers = N or cluster = FILE")
    if spec.workers is not None:
        if spec.identities is not None:
            raise RequestError(f"{where}: identities apply to a cluster case")
        if spec.workers < 1:
            raise RequestError(f"{where}: workers must be at least 1, got {spec.workers}")
        return Case(spec.name, chunk, workers=spec.workers)
    assert spec.cluster is not None
    cluster = str(base / os.path.expanduser(spec.cluster))
    from aner_coord.admission import load_cluster

    config = load_cluster(cluster)
    records = config.workers
    if spec.identities is not None:
        known = {r.identity: r for r in records}
        unknown = [i for i in spec.identities if i not in known]
        if unknown:
            raise RequestError(
                f"{where}: {', '.join(unknown)} not in {spec.cluster} (it has {', '.join(known)})"
            )
        if not spec.identities:
            raise RequestError(f"{where}: identities is empty")
        records = tuple(known[i] for i in dict.fromkeys(spec.identities))
    return Case(spec.name, chunk, cluster=cluster, records=tuple(records))


def _check_comparable(
    computation: ComputationRequest, cases: tuple[Case, ...], source: str
) -> None:
    """Every trial must give the same scientific result (docs/contracts.md, section 10).
    In float32 only plans of one chunk do (section 9: the chunk decides the rounding of
    binary32 sums, a difference far above the comparison's tolerance), so a float32
    experiment whose cases differ in chunk could only fail: it is refused before it runs."""
    from aner_coord.computations.dense.request import DenseRequest  # a search's too

    if not isinstance(computation, DenseRequest) or computation.precision != "float32":
        return
    chunks = sorted({c.chunk for c in cases})
    if len(chunks) > 1:
        shown = ", ".join(f"{c:,}" for c in chunks)
        raise RequestError(
            f"{source}: float32 results agree bit for bit only at one chunk, and the cases use "
            f"chunks {shown}: give every case the same chunk, or compare chunks in float64"
        )


def checked(
    name: str,
    computation: ComputationRequest,
    cases: tuple[Case, ...],
    repetitions: int,
    reference: str | None,
    source: str,
) -> Experiment:
    """The experiment, once every case is admitted as its command will be."""
    from aner_coord.admission import admit

    if not cases:
        raise RequestError(f"{source}: no [[case]]")
    _check_limits(source, name, [c.name for c in cases], repetitions)
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RequestError(f"{source}: case names must be unique: {', '.join(duplicates)}")
    if repetitions < MIN_REPETITIONS:
        raise RequestError(
            f"{source}: repetitions = {repetitions}; at least {MIN_REPETITIONS} are needed "
            "for a median and a spread"
        )
    if reference is None:
        ones = [c.name for c in cases if c.local and c.workers == 1]
        reference = ones[0] if ones else cases[0].name
    elif reference not in names:
        raise RequestError(f"{source}: reference {reference!r} is not a case")
    _check_comparable(computation, cases, source)
    from aner_coord.scaling.trials import read_back

    with tempfile.TemporaryDirectory(prefix="aner-scaling-") as scratch:
        for case in cases:
            execution = execution_of(case, subset_file(case, Path(scratch)))
            try:
                # The spec the case's trials will run, as their command will read it.
                admit(read_back(JobRequest(computation=computation, execution=execution)))
            except RequestError as exc:
                raise RequestError(f"{source}: case {case.name!r}: {exc}") from None
    return Experiment(name, computation, cases, repetitions, reference)


def execution_of(case: Case, cluster_file: str | None) -> Execution:
    """The case's execution; a cluster case runs on `cluster_file` (its subset's file)."""
    if case.local:
        return LocalExecution(workers=case.workers or 0, chunk=case.chunk)
    assert cluster_file is not None
    return ClusterExecution(config=cluster_file, chunk=case.chunk)


def subset_file(case: Case, directory: Path) -> str | None:
    """An owner-only cluster file in `directory` holding exactly the case's records (None
    for a local case). Endpoints stay private: the file lives only as long as `directory`."""
    if case.local:
        return None
    path = directory / f"cluster-{abs(hash(case.name)):x}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(render_cluster(case.records))
    return str(path)


def render_cluster(records: tuple[WorkerRecord, ...]) -> str:
    """A cluster file holding exactly `records`."""
    lines = ["ANER_CLUSTER 1", "# a subset written by `aner parallel scaling`"]
    for r in records:
        lines.append(
            f'worker "{r.identity}" {r.transport} "{r.endpoint}" "{r.executable}" {r.slots}'
        )
    return "\n".join(lines) + "\n"


def auto_experiment(
    cluster: str | None, samples: int, seed: int, repetitions: int, effective_cpus: int
) -> Experiment:
    """The standard matrix: 1 worker and every power of two up to the effective CPUs, each
    record of the cluster alone, all of them; each at the default and a coarse chunk. The
    fastest machine alone is then read from the measurements, not guessed."""
    computation = MonteCarloRequest(samples=samples, seed=seed)
    plans: list[tuple[str, int | None, tuple[WorkerRecord, ...]]] = []
    p = 1
    while p <= effective_cpus:
        plans.append((f"local-{p}", p, ()))
        p *= 2
    if cluster is not None:
        from aner_coord.admission import load_cluster

        records = load_cluster(cluster).workers
        for record in records:
            plans.append((f"alone {record.identity}", None, (record,)))
        if len(records) > 1:
            plans.append(("all", None, tuple(records)))
    cases: list[Case] = []
    for label, workers, records in plans:
        slots = workers or sum(r.slots for r in records)
        coarse = max(DEFAULT_CHUNK, math.ceil(samples / (2 * slots)))
        chunks = [DEFAULT_CHUNK] + ([coarse] if coarse != DEFAULT_CHUNK else [])
        for chunk in chunks:
            name = f"{label} chunk {chunk}"
            if workers is not None:
                cases.append(Case(name, chunk, workers=workers))
            else:
                assert cluster is not None
                cases.append(Case(name, chunk, cluster=cluster, records=records))
    return checked(
        "standard matrix",
        computation,
        tuple(cases),
        repetitions,
        f"local-1 chunk {DEFAULT_CHUNK}",
        "--auto",
    )
