"""Execution contexts: where a computation runs, as immutable, validated policies.

`local(workers=0, chunk=65536)` is a bounded allocation of this machine's CPUs;
`cluster(config=PATH)` is the explicitly configured group of a cluster file. Admission is
checked when the context is made (worker counts) and again per request (chunk counts), always
before any work starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aner_coord.clusterfile import ClusterConfig, ClusterFileError, load_cluster_file
from aner_coord.errors import AdmissionError, RequestError
from aner_coord.plan import DEFAULT_CHUNK, MAX_LOCAL_WORKERS, check_int


def _effective_cpus() -> int:
    from aner_worker.inventory import current

    return current().effective_cpus


@dataclass(frozen=True)
class LocalExecution:
    """`workers` threads of this process, each running one chunk at a time."""

    workers: int
    chunk: int
    automatic: bool

    def worker_slots(self) -> dict[str, int]:
        return {f"local-{i + 1}": 1 for i in range(self.workers)}

    def describe(self) -> dict[str, object]:
        return {
            "kind": "local",
            "workers": self.workers,
            "chunk": self.chunk,
            "automatic": self.automatic,
        }


@dataclass(frozen=True)
class ClusterExecution:
    """The workers of a cluster file; endpoints and paths stay inside `config`."""

    config: ClusterConfig
    chunk: int

    @property
    def workers(self) -> int:
        return len(self.config.workers)

    def worker_slots(self) -> dict[str, int]:
        return {w.identity: w.slots for w in self.config.workers}

    def describe(self) -> dict[str, object]:
        # Public identities and slots only: never endpoints, executables or credentials.
        return {
            "kind": "cluster",
            "chunk": self.chunk,
            "workers": [
                {"identity": w.identity, "transport": w.transport, "slots": w.slots}
                for w in self.config.workers
            ],
        }


Execution = LocalExecution | ClusterExecution


def _check_chunk(chunk: object) -> int:
    value = check_int("chunk", chunk)
    if value <= 0:
        raise RequestError(f"chunk must be positive, got {value}")
    return value


def local(workers: int = 0, chunk: int = DEFAULT_CHUNK) -> LocalExecution:
    """A local allocation; `workers=0` means the automatic policy reported by `inventory`."""
    workers = check_int("workers", workers)
    chunk = _check_chunk(chunk)
    if workers < 0:
        raise RequestError(f"workers must be 0 (automatic) or positive, got {workers}")
    if workers == 0:
        from aner_worker.inventory import current

        return LocalExecution(current().auto_workers, chunk, automatic=True)
    effective = _effective_cpus()
    if workers > MAX_LOCAL_WORKERS:
        raise AdmissionError(
            f"{workers} local workers exceed the limit of {MAX_LOCAL_WORKERS}: "
            f"use at most {min(effective, MAX_LOCAL_WORKERS)} workers (--workers)"
        )
    if workers > effective:
        raise AdmissionError(
            f"{workers} workers exceed this process's effective CPU allocation of {effective} "
            f"(see `aner parallel inventory`): use at most {effective} workers (--workers), "
            "or 0 for automatic"
        )
    return LocalExecution(workers, chunk, automatic=False)


def cluster(config: str | os.PathLike[str], chunk: int = DEFAULT_CHUNK) -> ClusterExecution:
    """The group described by the cluster file at `config` (SPEC section 5)."""
    chunk = _check_chunk(chunk)
    try:
        parsed = load_cluster_file(os.path.expanduser(config))
    except ClusterFileError as exc:
        raise RequestError(str(exc)) from None
    local_slots = sum(w.slots for w in parsed.workers if w.transport == "local")
    effective = _effective_cpus()
    if local_slots > effective:
        raise AdmissionError(
            f"cluster file {os.fspath(config)} gives local-pipe workers {local_slots} slots "
            f"in all, more than this machine's effective CPU allocation of {effective}: "
            "lower their slots"
        )
    if any(w.transport == "slurm" for w in parsed.workers):
        from aner_coord.transports import slurm_start_timeout

        try:
            slurm_start_timeout()
        except ValueError as exc:
            raise RequestError(str(exc)) from None
    return ClusterExecution(parsed, chunk)
