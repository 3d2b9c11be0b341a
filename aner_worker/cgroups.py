"""What the cgroup hierarchy (v1 or v2) lets this process use: the tightest CPU quota and
memory limit from its own cgroup up to the root (see `aner_worker.inventory`, which folds
them into the effective CPU count).

Every ancestor's bandwidth limit applies too, so the walk goes up to the root in both
versions. When the process's cgroup path from ``/proc/self/cgroup`` does not exist under the
mount (a container without a cgroup namespace sees its host path), the hierarchy root is read
instead. Nothing is guessed: a value not found is ``None`` with a note naming its field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# cgroup v1 reports "no limit" as LONG_MAX rounded down to a page (9223372036854771712 with
# 4 KiB pages, a little less with larger pages); no real limit comes anywhere near 2**62.
_V1_UNLIMITED_THRESHOLD = 2**62


@dataclass(frozen=True)
class Cgroups:
    """The cgroup findings, before they are folded into an `Inventory`."""

    version: int | None
    quota_cpus: float | None
    memory_limit: int | None


def read_cgroups(root: Path, proc_self_cgroup: Path, notes: list[str]) -> Cgroups:
    """What the cgroup hierarchy this process belongs to limits it to, with a note for
    each limit that could not be determined."""
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError as exc:
        notes.append(f"cgroup_version: cannot read {proc_self_cgroup}: {exc.strerror}")
        notes.append("cgroup_quota_cpus: unknown without cgroup information")
        notes.append("memory_cgroup_limit: unknown without cgroup information")
        return Cgroups(None, None, None)

    v2_path: str | None = None
    v1_paths: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2_path = path
        else:
            for controller in controllers.split(","):
                v1_paths[controller] = path

    # A unified mount at the root means cgroup v2 owns every controller; otherwise (v1 or the
    # hybrid layout with a v2 tree under "unified") the v1 cpu and memory hierarchies apply.
    if (root / "cgroup.controllers").is_file() and v2_path is not None:
        directory = _own_directory(root, v2_path, "cgroup v2", notes)
        return Cgroups(
            2,
            _v2_quota(root, directory, notes),
            _v2_memory_limit(root, directory, notes),
        )
    if v1_paths:
        return Cgroups(
            1,
            _v1_quota(root, v1_paths, notes),
            _v1_memory_limit(root, v1_paths, notes),
        )
    notes.append(f"cgroup_version: no cgroup v1 or v2 hierarchy found at {root}")
    notes.append("cgroup_quota_cpus: unknown without a cgroup hierarchy")
    notes.append("memory_cgroup_limit: unknown without a cgroup hierarchy")
    return Cgroups(None, None, None)


def _own_directory(mount: Path, path: str, what: str, notes: list[str]) -> Path:
    """The process's cgroup directory under `mount`, or the mount itself when it is absent."""
    relative = path.strip("/")
    if not relative:
        return mount
    candidate = mount / relative
    if ".." not in Path(relative).parts and candidate.is_dir():
        return candidate
    notes.append(
        f"cgroup: {what} path {path} is not under {mount} (container view?); "
        "read the hierarchy root instead, so limits set above it are not visible"
    )
    return mount


def _ancestry(mount: Path, directory: Path) -> list[Path]:
    """`directory` and each parent up to and including `mount`, deepest first."""
    chain = [directory]
    while chain[-1] != mount and mount in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _tightest(values: list[float]) -> float | None:
    return min(values) if values else None


def _v2_quota(root: Path, directory: Path, notes: list[str]) -> float | None:
    quotas: list[float] = []
    seen = False
    for level in _ancestry(root, directory):
        text = _read(level / "cpu.max")
        if text is None:
            continue
        seen = True
        fields = text.split()
        if not fields or fields[0] == "max":
            continue
        try:
            quota_us = int(fields[0])
            period_us = int(fields[1]) if len(fields) > 1 else 100_000
        except ValueError:
            notes.append(f"cgroup_quota_cpus: cannot parse {level / 'cpu.max'}: {text!r}")
            continue
        if quota_us <= 0 or period_us <= 0:
            notes.append(f"cgroup_quota_cpus: nonsensical {level / 'cpu.max'}: {text!r}")
            continue
        quotas.append(quota_us / period_us)
    if not seen:
        notes.append(
            f"cgroup_quota_cpus: no cpu.max from {directory} up to {root} "
            "(cpu controller not enabled there); CPU quota unknown"
        )
    return _tightest(quotas)


def _v2_memory_limit(root: Path, directory: Path, notes: list[str]) -> int | None:
    limits: list[int] = []
    seen = False
    for level in _ancestry(root, directory):
        text = _read(level / "memory.max")
        if text is None:
            continue
        seen = True
        if text == "max":
            continue
        try:
            limits.append(int(text))
        except ValueError:
            notes.append(f"memory_cgroup_limit: cannot parse {level / 'memory.max'}: {text!r}")
    if not seen:
        notes.append(
            f"memory_cgroup_limit: no memory.max from {directory} up to {root} "
            "(memory controller not enabled there); cgroup memory limit unknown"
        )
    return min(limits) if limits else None


def _v1_mount(root: Path, controller: str) -> Path | None:
    """The v1 hierarchy holding `controller`: "cpu", or a co-mount such as "cpu,cpuacct"."""
    exact = root / controller
    if exact.is_dir():
        return exact
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return None
    for entry in entries:
        if controller in entry.name.split(",") and entry.is_dir():
            return entry
    return None


def _v1_directory(
    root: Path, v1_paths: dict[str, str], controller: str, field: str, notes: list[str]
) -> tuple[Path, Path] | None:
    mount = _v1_mount(root, controller)
    if mount is None:
        notes.append(f"{field}: no cgroup v1 {controller} hierarchy under {root}")
        return None
    path = v1_paths.get(controller)
    if path is None:
        notes.append(f"{field}: /proc/self/cgroup names no v1 {controller} cgroup")
        return None
    return mount, _own_directory(mount, path, f"cgroup v1 {controller}", notes)


def _v1_quota(root: Path, v1_paths: dict[str, str], notes: list[str]) -> float | None:
    found = _v1_directory(root, v1_paths, "cpu", "cgroup_quota_cpus", notes)
    if found is None:
        return None
    mount, directory = found
    quotas: list[float] = []
    seen = False
    for level in _ancestry(mount, directory):
        quota_text = _read(level / "cpu.cfs_quota_us")
        period_text = _read(level / "cpu.cfs_period_us")
        if quota_text is None or period_text is None:
            continue
        seen = True
        try:
            quota_us, period_us = int(quota_text), int(period_text)
        except ValueError:
            notes.append(
                f"cgroup_quota_cpus: cannot parse {level}/cpu.cfs_quota_us "
                f"{quota_text!r} / cpu.cfs_period_us {period_text!r}"
            )
            continue
        if quota_us < 0:  # -1: no bandwidth limit at this level
            continue
        if quota_us == 0 or period_us <= 0:
            notes.append(
                f"cgroup_quota_cpus: nonsensical quota {quota_us} / period {period_us} at {level}"
            )
            continue
        quotas.append(quota_us / period_us)
    if not seen:
        notes.append(
            f"cgroup_quota_cpus: no cpu.cfs_quota_us and cpu.cfs_period_us from {directory} "
            f"up to {mount}; CPU quota unknown"
        )
    return _tightest(quotas)


def _v1_memory_limit(root: Path, v1_paths: dict[str, str], notes: list[str]) -> int | None:
    found = _v1_directory(root, v1_paths, "memory", "memory_cgroup_limit", notes)
    if found is None:
        return None
    mount, directory = found
    limits: list[int] = []
    seen = False
    for level in _ancestry(mount, directory):
        text = _read(level / "memory.limit_in_bytes")
        if text is None:
            continue
        seen = True
        try:
            value = int(text)
        except ValueError:
            notes.append(
                f"memory_cgroup_limit: cannot parse {level / 'memory.limit_in_bytes'}: {text!r}"
            )
            continue
        if 0 < value < _V1_UNLIMITED_THRESHOLD:
            limits.append(value)
    if not seen:
        notes.append(
            f"memory_cgroup_limit: no memory.limit_in_bytes from {directory} up to {mount}; "
            "cgroup memory limit unknown"
        )
    return min(limits) if limits else None


# --- human-readable form ---------------------------------------------------------------------
