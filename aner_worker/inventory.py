"""The local CPU and memory allocation this process may really use.

`collect()` reads the affinity mask, the cgroup (v1 or v2) CPU quota and memory limit, and the
machine's memory, and derives from them the effective CPU count that admission and the
automatic worker policy rely on. It never guesses: a value it cannot determine is ``None`` and
gets a note that starts with the field's name (``"physical_cores: ..."``), never a 0.

Effective CPUs, the exact rule:

    effective_cpus = max(1, min(len(affinity), floor(cgroup_quota_cpus), logical_cpus,
                                the scheduler's hints))

where each term takes part only when it is known, and the quota term is at least 1 (a quota of
0.5 CPU still runs one worker, just slowly). A fractional quota rounds down: 1.5 CPUs of
bandwidth gives 1, because two busy workers would be throttled. With nothing known the result
is 1, with notes saying why. The scheduler's hints (`SCHEDULER_HINTS`: Slurm's
`SLURM_CPUS_PER_TASK` and `SLURM_CPUS_ON_NODE`, PBS's `NCPUS`, LSF's `LSB_DJOB_NUMPROC`,
OpenMP's `OMP_THREAD_LIMIT`, and `OMP_NUM_THREADS` inside a batch job) bound it too; each
one applied is named in the rule, and one applied or ignored gets a note naming its source.

The cgroup quota (read by `aner_worker.cgroups`) is the tightest one found walking from the
process's own cgroup up to the root of the hierarchy, because every ancestor's bandwidth
limit applies too (both versions). When the process's cgroup path from ``/proc/self/cgroup``
does not exist under the mount (a container without a cgroup namespace sees its host path),
the hierarchy root is read instead. The memory limit is found the same way.

Automatic workers: ``auto_workers = min(effective_cpus, LOCAL_WORKER_LIMIT)``. The effective
count already respects affinity and quota, so one CPU-bound worker per effective CPU neither
oversubscribes the allocation nor leaves it idle.

This module stays cheap to import (no numba); psutil is imported only inside `collect()`.
"""

from __future__ import annotations

import functools
import math
import os
import platform as _platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aner_worker.cgroups import read_cgroups

__all__ = [
    "LOCAL_WORKER_LIMIT",
    "SCHEMA",
    "Inventory",
    "collect",
    "current",
    "format_table",
]

LOCAL_WORKER_LIMIT = 256
"""Admission limit on local CPU workers (docs/contracts.md, section 3)."""

SCHEMA = "aner-inventory/v1"
"""Identity of the `Inventory.to_dict()` layout, for manifests and `--json` readers."""


@dataclass(frozen=True)
class Inventory:
    """What this process may use; ``None`` means unknown or unlimited (see `notes`)."""

    logical_cpus: int | None
    physical_cores: int | None
    affinity: tuple[int, ...] | None
    cgroup_version: int | None
    cgroup_quota_cpus: float | None
    effective_cpus: int
    auto_workers: int
    auto_rule: str
    memory_total: int | None
    memory_available: int | None
    memory_cgroup_limit: int | None
    platform: dict[str, str]
    notes: tuple[str, ...]
    # This host's identity (`aner_worker.host`): None where nothing identifies it (see notes).
    host: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON-ready form used by ``aner parallel inventory --json`` and run manifests."""
        return {
            "schema": SCHEMA,
            "logical_cpus": self.logical_cpus,
            "physical_cores": self.physical_cores,
            "affinity": None if self.affinity is None else list(self.affinity),
            "cgroup_version": self.cgroup_version,
            "cgroup_quota_cpus": self.cgroup_quota_cpus,
            "effective_cpus": self.effective_cpus,
            "auto_workers": self.auto_workers,
            "auto_rule": self.auto_rule,
            "local_worker_limit": LOCAL_WORKER_LIMIT,
            "memory_total": self.memory_total,
            "memory_available": self.memory_available,
            "memory_cgroup_limit": self.memory_cgroup_limit,
            "platform": dict(self.platform),
            "notes": list(self.notes),
            "host": self.host,
        }


def collect(
    *,
    cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
    proc_self_cgroup: str | os.PathLike[str] = "/proc/self/cgroup",
    machine_id: str | os.PathLike[str] | None = None,
    boot_id: str | os.PathLike[str] | None = None,
) -> Inventory:
    """Discover the allocation now. The paths exist so tests can point at fixture trees."""
    notes: list[str] = []

    logical = os.cpu_count()
    if logical is None:
        notes.append("logical_cpus: os.cpu_count() could not determine the CPU count")

    affinity = _affinity(notes)
    physical, memory_total, memory_available = _psutil_facts(notes)
    cgroups = read_cgroups(Path(cgroup_root), Path(proc_self_cgroup), notes)

    effective, derivation = _effective_cpus(logical, affinity, cgroups.quota_cpus, notes)
    effective, derivation = _apply_hints(effective, derivation, scheduler_hints(os.environ, notes))
    auto = min(effective, LOCAL_WORKER_LIMIT)
    from aner_worker.host import BOOT_ID, MACHINE_ID, host_identity  # loads the wire's rules

    host = host_identity(
        MACHINE_ID if machine_id is None else Path(machine_id),
        BOOT_ID if boot_id is None else Path(boot_id),
    )
    notes.extend(f"host: {note}" for note in host.notes)
    rule = (
        f"automatic workers = effective CPUs ({effective} = {derivation}), "
        f"capped at {LOCAL_WORKER_LIMIT} local workers"
    )

    return Inventory(
        logical_cpus=logical,
        physical_cores=physical,
        affinity=affinity,
        cgroup_version=cgroups.version,
        cgroup_quota_cpus=cgroups.quota_cpus,
        effective_cpus=effective,
        auto_workers=auto,
        auto_rule=rule,
        memory_total=memory_total,
        memory_available=memory_available,
        memory_cgroup_limit=cgroups.memory_limit,
        platform=_platform_identity(),
        notes=tuple(notes),
        host=host.value,
    )


@functools.cache
def current() -> Inventory:
    """The inventory of this process, collected once: the allocation does not change under us
    often enough to pay for re-reading /sys on every admission check."""
    return collect()


def _affinity(notes: list[str]) -> tuple[int, ...] | None:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        notes.append("affinity: os.sched_getaffinity is not available on this platform")
        return None
    try:
        return tuple(sorted(getaffinity(0)))
    except OSError as exc:
        notes.append(f"affinity: os.sched_getaffinity(0) failed: {exc}")
        return None


def _psutil_facts(notes: list[str]) -> tuple[int | None, int | None, int | None]:
    """Physical cores, total and available memory, or ``None`` with a note for each."""
    try:
        import psutil
    except ImportError as exc:
        notes.append(f"physical_cores: psutil is not importable: {exc}")
        notes.append("memory_total: psutil is not importable")
        notes.append("memory_available: psutil is not importable")
        return None, None, None

    physical: int | None
    try:
        physical = psutil.cpu_count(logical=False)
    except Exception as exc:  # psutil raises assorted errors on odd platforms
        physical = None
        notes.append(f"physical_cores: psutil.cpu_count(logical=False) failed: {exc}")
    else:
        if physical is None:
            notes.append("physical_cores: psutil could not determine the physical core count")

    try:
        vm = psutil.virtual_memory()
    except Exception as exc:
        notes.append(f"memory_total: psutil.virtual_memory() failed: {exc}")
        notes.append(f"memory_available: psutil.virtual_memory() failed: {exc}")
        return physical, None, None
    return physical, int(vm.total), int(vm.available)


def _platform_identity() -> dict[str, str]:
    return {
        "system": _platform.system(),
        "release": _platform.release(),
        "machine": _platform.machine(),
        "python_implementation": _platform.python_implementation(),
        "python_version": _platform.python_version(),
    }


def _effective_cpus(
    logical: int | None,
    affinity: tuple[int, ...] | None,
    quota: float | None,
    notes: list[str],
) -> tuple[int, str]:
    """Apply the module docstring's rule; also return how it was reached, for `auto_rule`."""
    terms: list[tuple[int, str]] = []
    if affinity is not None:
        terms.append((len(affinity), f"affinity {len(affinity)}"))
    if quota is not None:
        bound = max(1, math.floor(quota))
        terms.append((bound, f"cgroup quota {quota:g} -> {bound}"))
    if logical is not None:
        terms.append((logical, f"logical CPUs {logical}"))
    if not terms:
        notes.append("effective_cpus: no CPU count could be determined; assuming 1")
        return 1, "nothing known, assumed 1"
    effective = max(1, min(value for value, _ in terms))
    return effective, "min of " + ", ".join(text for _, text in terms)


# The batch schedulers' statements of a job's CPUs, in the order they are looked at. Each is
# a limit wherever it is set, except OMP_NUM_THREADS, which outside a batch job is a request
# to OpenMP runtimes (people set it to 1 to stop BLAS oversubscription), not an allocation.
SCHEDULER_HINTS = (
    ("SLURM_CPUS_PER_TASK", "Slurm"),
    ("SLURM_CPUS_ON_NODE", "Slurm"),
    ("NCPUS", "PBS"),
    ("LSB_DJOB_NUMPROC", "LSF"),
    ("OMP_THREAD_LIMIT", "OpenMP"),
    ("OMP_NUM_THREADS", "OpenMP, inside a batch job"),
)
BATCH_JOB_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID")


def scheduler_hints(environ: Mapping[str, str], notes: list[str]) -> list[tuple[int, str]]:
    """The CPU counts the environment's scheduler states, each with its source; a value
    that is not a positive integer is noted and ignored (OMP_NUM_THREADS's list form
    "4,2" counts by its first level)."""
    hints: list[tuple[int, str]] = []
    in_batch_job = any(environ.get(name) for name in BATCH_JOB_VARIABLES)
    for name, source in SCHEDULER_HINTS:
        raw = environ.get(name)
        if raw is None or raw.strip() == "":
            continue
        if name == "OMP_NUM_THREADS" and not in_batch_job:
            notes.append(
                f"effective_cpus: {name}={raw} is a request to OpenMP outside a batch job "
                "(no SLURM_JOB_ID, PBS_JOBID or LSB_JOBID): not applied"
            )
            continue
        text = raw.split(",")[0].strip() if name == "OMP_NUM_THREADS" else raw.strip()
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            notes.append(f"effective_cpus: {name}={raw!r} is not a positive integer: ignored")
            continue
        hints.append((value, f"{name}={value} ({source})"))
        notes.append(f"effective_cpus: bounded by {name}={value}, set by {source}")
    return hints


def _apply_hints(effective: int, derivation: str, hints: list[tuple[int, str]]) -> tuple[int, str]:
    """The effective count bounded by the scheduler's hints, and the rule that says so."""
    for value, text in hints:
        derivation += f", {text}"
        effective = min(effective, value)
    return max(1, effective), derivation


def _is_noted(inv: Inventory, field: str) -> bool:
    return any(note.startswith(field + ":") for note in inv.notes)


def _or_unknown(inv: Inventory, field: str, value: object, absent: str) -> str:
    """Render ``None`` as "unknown" when a note says so, else as what ``None`` means here."""
    if value is not None:
        return str(value)
    return "unknown (see notes)" if _is_noted(inv, field) else absent


def _bytes(inv: Inventory, field: str, value: int | None, absent: str) -> str:
    if value is None:
        return _or_unknown(inv, field, None, absent)
    return f"{value / 2**30:.1f} GiB ({value} bytes)"


def _ranges(cpus: tuple[int, ...]) -> str:
    """Compact CPU list as Linux prints it, e.g. ``0-3,8,10-11``."""
    spans: list[str] = []
    start = prev = cpus[0]
    for cpu in (*cpus[1:], None):
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(spans)


def format_table(inv: Inventory) -> str:
    """An aligned two-column table for ``aner parallel inventory`` without ``--json``."""
    if inv.affinity is None:
        affinity = _or_unknown(inv, "affinity", None, "unknown")
    elif inv.affinity:
        affinity = f"{_ranges(inv.affinity)} ({len(inv.affinity)} CPUs)"
    else:
        affinity = "(empty)"
    if inv.cgroup_version is None:
        version = _or_unknown(inv, "cgroup_version", None, "none")
    else:
        version = f"v{inv.cgroup_version}"
    quota = (
        f"{inv.cgroup_quota_cpus:g} CPUs"
        if inv.cgroup_quota_cpus is not None
        else _or_unknown(inv, "cgroup_quota_cpus", None, "none")
    )
    p = inv.platform
    rows = [
        ("logical CPUs", _or_unknown(inv, "logical_cpus", inv.logical_cpus, "unknown")),
        ("physical cores", _or_unknown(inv, "physical_cores", inv.physical_cores, "unknown")),
        ("affinity", affinity),
        ("cgroup", version),
        ("cgroup CPU quota", quota),
        ("effective CPUs", str(inv.effective_cpus)),
        ("automatic workers", str(inv.auto_workers)),
        ("automatic rule", inv.auto_rule),
        ("memory total", _bytes(inv, "memory_total", inv.memory_total, "unknown")),
        ("memory available", _bytes(inv, "memory_available", inv.memory_available, "unknown")),
        (
            "cgroup memory limit",
            _bytes(inv, "memory_cgroup_limit", inv.memory_cgroup_limit, "none"),
        ),
        (
            "platform",
            f"{p.get('system', '?')} {p.get('release', '?')} {p.get('machine', '?')}, "
            f"{p.get('python_implementation', '?')} {p.get('python_version', '?')}",
        ),
        ("host identity", _or_unknown(inv, "host", inv.host, "unknown")),
    ]
    rows += [("notes" if i == 0 else "", note) for i, note in enumerate(inv.notes)]
    if not inv.notes:
        rows.append(("notes", "(none)"))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
