"""The local allocation inventory: cgroup fixtures, a restricted affinity mask, the JSON form.

Fixture trees stand in for /sys/fs/cgroup and /proc/self/cgroup; the CPU count and affinity
are pinned to 8 CPUs so each case can assert exact numbers on any machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from suite_env import child_env
from support import ROOT

from aner_worker import inventory
from aner_worker.inventory import LOCAL_WORKER_LIMIT, Inventory, collect, format_table

V1_UNLIMITED = "9223372036854771712"
GIB = 2**30

# Every key docs/contracts.md, section 4 asks for, by the name to_dict() gives it.
SPEC_KEYS = {
    "logical_cpus",
    "physical_cores",
    "affinity",
    "cgroup_version",
    "cgroup_quota_cpus",
    "effective_cpus",
    "auto_workers",
    "auto_rule",
    "memory_total",
    "memory_available",
    "memory_cgroup_limit",
    "platform",
    "notes",
}

has_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)"
)


@pytest.fixture
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def v2_tree(tmp_path: Path, own: str = "/") -> tuple[Path, Path]:
    """A unified hierarchy root and a /proc/self/cgroup naming `own`."""
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpuset cpu io memory pids")
    proc = tmp_path / "proc-self-cgroup"
    write(proc, f"0::{own}")
    return root, proc


def v1_tree(tmp_path: Path, cpu_path: str = "/", memory_path: str = "/") -> tuple[Path, Path]:
    """Separate v1 hierarchies, cpu co-mounted with cpuacct as most distributions do."""
    root = tmp_path / "cgroup"
    (root / "cpu,cpuacct").mkdir(parents=True)
    (root / "memory").mkdir()
    (root / "unified").mkdir()  # the hybrid layout's v2 tree must not make this "v2"
    proc = tmp_path / "proc-self-cgroup"
    write(
        proc,
        "\n".join(
            [
                "9:name=systemd:/",
                f"4:memory:{memory_path}",
                f"3:cpu,cpuacct:{cpu_path}",
                "0::/",
            ]
        ),
    )
    return root, proc


def noted(inv: Inventory, field: str) -> bool:
    return any(note.startswith(field + ":") for note in inv.notes)


# --- cgroup v2 -------------------------------------------------------------------------------


@pytest.mark.usefixtures("eight_cpus")
def test_v2_without_quota_uses_every_cpu(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path)
    write(root / "cpu.max", "max 100000")
    write(root / "memory.max", "max")

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 2
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert inv.logical_cpus == 8
    assert inv.affinity == tuple(range(8))
    assert inv.effective_cpus == 8
    assert inv.auto_workers == 8
    assert inv.auto_rule == (
        "automatic workers = effective CPUs (8 = min of affinity 8, logical CPUs 8), "
        "capped at 256 local workers"
    )
    # "max" is a known answer (no limit), not an unknown one
    assert not noted(inv, "cgroup_quota_cpus")
    assert not noted(inv, "memory_cgroup_limit")


@pytest.mark.usefixtures("eight_cpus")
@pytest.mark.parametrize(
    ("cpu_max", "quota", "effective"),
    [
        ("150000 100000", 1.5, 1),  # fractional: rounds down, 2 workers would be throttled
        ("100000 100000", 1.0, 1),
        ("250000 100000", 2.5, 2),
        ("400000 100000", 4.0, 4),
        ("50000 100000", 0.5, 1),  # below one CPU still runs one worker
        ("2000000 100000", 20.0, 8),  # a quota above the affinity does not add CPUs
        ("300000 200000", 1.5, 1),  # a non-default period
    ],
)
def test_v2_quota(tmp_path: Path, cpu_max: str, quota: float, effective: int) -> None:
    root, proc = v2_tree(tmp_path)
    write(root / "cpu.max", cpu_max)
    write(root / "memory.max", "max")

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 2
    assert inv.cgroup_quota_cpus == quota
    assert inv.effective_cpus == effective
    assert inv.auto_workers == effective
    assert f"cgroup quota {quota:g} -> {max(1, int(quota))}" in inv.auto_rule
    assert inv.notes == ()


@pytest.mark.usefixtures("eight_cpus")
def test_v2_nested_path_takes_tightest_ancestor(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, own="/user.slice/job.scope")
    # the root cgroup has no cpu.max or memory.max, as on a real host
    write(root / "user.slice" / "cpu.max", "300000 100000")
    write(root / "user.slice" / "memory.max", str(1 * GIB))
    write(root / "user.slice" / "job.scope" / "cpu.max", "600000 100000")
    write(root / "user.slice" / "job.scope" / "memory.max", str(4 * GIB))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_quota_cpus == 3.0
    assert inv.effective_cpus == 3
    assert inv.memory_cgroup_limit == 1 * GIB
    assert inv.notes == ()


@pytest.mark.usefixtures("eight_cpus")
def test_v2_child_tighter_than_parent(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, own="/a/b")
    write(root / "a" / "cpu.max", "max 100000")
    write(root / "a" / "b" / "cpu.max", "200000 100000")
    write(root / "a" / "b" / "memory.max", str(512 * 2**20))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_quota_cpus == 2.0
    assert inv.effective_cpus == 2
    assert inv.memory_cgroup_limit == 512 * 2**20


@pytest.mark.usefixtures("eight_cpus")
def test_v2_host_path_absent_in_container_falls_back_to_root(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, own="/system.slice/docker-abc.scope")
    write(root / "cpu.max", "200000 100000")
    write(root / "memory.max", str(2 * GIB))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_quota_cpus == 2.0
    assert inv.effective_cpus == 2
    assert inv.memory_cgroup_limit == 2 * GIB
    assert len(inv.notes) == 1
    assert inv.notes[0].startswith("cgroup: cgroup v2 path /system.slice/docker-abc.scope")


@pytest.mark.usefixtures("eight_cpus")
def test_v2_missing_files_are_unknown_with_notes(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path)

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 2
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert noted(inv, "cgroup_quota_cpus")
    assert noted(inv, "memory_cgroup_limit")
    assert inv.effective_cpus == 8


@pytest.mark.usefixtures("eight_cpus")
def test_v2_unparsable_cpu_max_is_noted(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path)
    write(root / "cpu.max", "lots 100000")
    write(root / "memory.max", "plenty")

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert any("cannot parse" in n and "'lots 100000'" in n for n in inv.notes)
    assert any("cannot parse" in n and "'plenty'" in n for n in inv.notes)


# --- cgroup v1 -------------------------------------------------------------------------------


@pytest.mark.usefixtures("eight_cpus")
def test_v1_without_quota(tmp_path: Path) -> None:
    root, proc = v1_tree(tmp_path)
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000")
    write(root / "memory" / "memory.limit_in_bytes", V1_UNLIMITED)

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 1
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert inv.effective_cpus == 8
    assert inv.auto_workers == 8
    assert inv.notes == ()


@pytest.mark.usefixtures("eight_cpus")
def test_v1_half_cpu_quota_still_runs_one_worker(tmp_path: Path) -> None:
    root, proc = v1_tree(tmp_path)
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "50000")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000")
    write(root / "memory" / "memory.limit_in_bytes", str(768 * 2**20))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 1
    assert inv.cgroup_quota_cpus == 0.5
    assert inv.effective_cpus == 1
    assert inv.auto_workers == 1
    assert "cgroup quota 0.5 -> 1" in inv.auto_rule
    assert inv.memory_cgroup_limit == 768 * 2**20
    assert inv.notes == ()


@pytest.mark.usefixtures("eight_cpus")
def test_v1_nested_paths_and_plain_cpu_mount(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = tmp_path / "proc-self-cgroup"
    write(proc, "2:cpu:/batch/job7\n1:memory:/batch/job7")
    write(root / "cpu" / "cpu.cfs_quota_us", "-1")
    write(root / "cpu" / "cpu.cfs_period_us", "100000")
    write(root / "cpu" / "batch" / "cpu.cfs_quota_us", "250000")
    write(root / "cpu" / "batch" / "cpu.cfs_period_us", "100000")
    write(root / "cpu" / "batch" / "job7" / "cpu.cfs_quota_us", "-1")
    write(root / "cpu" / "batch" / "job7" / "cpu.cfs_period_us", "100000")
    write(root / "memory" / "memory.limit_in_bytes", V1_UNLIMITED)
    write(root / "memory" / "batch" / "job7" / "memory.limit_in_bytes", str(3 * GIB))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 1
    assert inv.cgroup_quota_cpus == 2.5
    assert inv.effective_cpus == 2
    assert inv.memory_cgroup_limit == 3 * GIB
    assert inv.notes == ()


@pytest.mark.usefixtures("eight_cpus")
def test_v1_host_path_absent_falls_back_to_root(tmp_path: Path) -> None:
    root, proc = v1_tree(tmp_path, cpu_path="/docker/abc", memory_path="/docker/abc")
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "150000")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000")
    write(root / "memory" / "memory.limit_in_bytes", str(GIB))

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_quota_cpus == 1.5
    assert inv.effective_cpus == 1
    assert inv.memory_cgroup_limit == GIB
    assert [n.split(" path ")[0] for n in inv.notes] == [
        "cgroup: cgroup v1 cpu",
        "cgroup: cgroup v1 memory",
    ]


@pytest.mark.usefixtures("eight_cpus")
def test_v1_missing_files_are_unknown_with_notes(tmp_path: Path) -> None:
    root, proc = v1_tree(tmp_path)

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 1
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert noted(inv, "cgroup_quota_cpus")
    assert noted(inv, "memory_cgroup_limit")
    assert inv.effective_cpus == 8


@pytest.mark.usefixtures("eight_cpus")
def test_v1_missing_hierarchies_are_noted(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    proc = tmp_path / "proc-self-cgroup"
    write(proc, "3:cpu,cpuacct:/\n4:memory:/")

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.cgroup_version == 1
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert noted(inv, "cgroup_quota_cpus")
    assert noted(inv, "memory_cgroup_limit")


# --- no cgroups, no affinity, no psutil ------------------------------------------------------


@pytest.mark.usefixtures("eight_cpus")
def test_no_proc_self_cgroup_is_unknown_with_notes(tmp_path: Path) -> None:
    inv = collect(cgroup_root=tmp_path / "absent", proc_self_cgroup=tmp_path / "absent-proc")

    assert inv.cgroup_version is None
    assert inv.cgroup_quota_cpus is None
    assert inv.memory_cgroup_limit is None
    assert noted(inv, "cgroup_version")
    assert noted(inv, "cgroup_quota_cpus")
    assert noted(inv, "memory_cgroup_limit")
    assert inv.effective_cpus == 8


def test_nothing_known_still_gives_one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    def broken() -> object:
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(os, "cpu_count", lambda: None)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: None)
    monkeypatch.setattr(psutil, "virtual_memory", broken)

    inv = collect(cgroup_root=tmp_path / "absent", proc_self_cgroup=tmp_path / "absent-proc")

    assert inv.effective_cpus == 1
    assert inv.auto_workers == 1
    as_dict = inv.to_dict()
    unknown = [key for key in SPEC_KEYS if as_dict[key] is None]
    assert sorted(unknown) == sorted(
        [
            "logical_cpus",
            "physical_cores",
            "affinity",
            "cgroup_version",
            "cgroup_quota_cpus",
            "memory_total",
            "memory_available",
            "memory_cgroup_limit",
        ]
    )
    for key in [*unknown, "effective_cpus"]:
        assert noted(inv, key), f"{key} is unknown without a note: {inv.notes}"
    assert 0 not in [as_dict[key] for key in unknown]

    table = format_table(inv)
    assert "logical CPUs         unknown (see notes)" in table
    assert "effective CPUs       1" in table
    for note in inv.notes:
        assert note in table


@pytest.mark.usefixtures("eight_cpus")
def test_quota_without_affinity_uses_logical_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    root, proc = v2_tree(tmp_path)
    write(root / "cpu.max", "1200000 100000")
    write(root / "memory.max", "max")

    inv = collect(cgroup_root=root, proc_self_cgroup=proc)

    assert inv.affinity is None
    assert noted(inv, "affinity")
    assert inv.effective_cpus == 8
    assert "min of cgroup quota 12 -> 12, logical CPUs 8" in inv.auto_rule


# --- the real process ------------------------------------------------------------------------


def run_child(code: str) -> object:
    """Run `code` in a fresh interpreter and return the JSON it prints."""
    env = child_env(PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@has_affinity
def test_restricted_affinity_mask_gives_one_effective_cpu() -> None:
    cpu = min(os.sched_getaffinity(0))
    child = run_child(
        "import json, os\n"
        f"os.sched_setaffinity(0, {{{cpu}}})\n"
        "from aner_worker.inventory import collect\n"
        "print(json.dumps(collect().to_dict()))\n"
    )
    assert isinstance(child, dict)
    assert child["affinity"] == [cpu]
    assert child["effective_cpus"] == 1
    assert child["auto_workers"] == 1


@has_affinity
def test_this_machine_respects_its_affinity() -> None:
    inv = collect()
    assert inv.affinity == tuple(sorted(os.sched_getaffinity(0)))
    assert 1 <= inv.effective_cpus <= len(os.sched_getaffinity(0))
    assert inv.auto_workers == min(inv.effective_cpus, LOCAL_WORKER_LIMIT)
    if inv.logical_cpus is not None:
        assert inv.effective_cpus <= inv.logical_cpus


def test_current_is_collected_once() -> None:
    assert inventory.current() is inventory.current()


def test_import_stays_light() -> None:
    loaded = run_child(
        "import json, sys\n"
        "import aner_worker.inventory\n"
        "print(json.dumps(sorted(m for m in ('numba', 'numpy', 'psutil') if m in sys.modules)))\n"
    )
    assert loaded == []


# --- the machine-readable and human forms ----------------------------------------------------


def test_to_dict_is_json_with_every_spec_key() -> None:
    inv = collect()
    as_dict = inv.to_dict()

    assert SPEC_KEYS - set(as_dict) == set()
    assert as_dict["schema"] == "aner-inventory/v1"
    assert as_dict["local_worker_limit"] == LOCAL_WORKER_LIMIT
    assert json.loads(json.dumps(as_dict)) == as_dict
    platform = as_dict["platform"]
    assert isinstance(platform, dict)
    assert set(platform) == {
        "system",
        "release",
        "machine",
        "python_implementation",
        "python_version",
    }
    assert platform["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(as_dict["effective_cpus"], int)
    assert as_dict["effective_cpus"] >= 1


@pytest.mark.usefixtures("eight_cpus")
def test_format_table_is_aligned_and_distinguishes_none_from_unknown(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, own="/a")
    write(root / "a" / "cpu.max", "max 100000")  # no quota: a known "none"
    # no memory.max anywhere: an unknown limit

    table = format_table(collect(cgroup_root=root, proc_self_cgroup=proc))
    lines = table.splitlines()

    assert "cgroup               v2" in lines
    assert "cgroup CPU quota     none" in lines
    assert "cgroup memory limit  unknown (see notes)" in lines
    assert "affinity             0-7 (8 CPUs)" in lines
    assert "effective CPUs       8" in lines
    assert "automatic workers    8" in lines
    assert lines[-1].startswith("notes                memory_cgroup_limit: no memory.max")
    # every value starts in the same column
    assert all(line[19:21] == "  " and line[21] != " " for line in lines)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [((0,), "0"), ((0, 1, 2, 3), "0-3"), ((0, 2, 3, 4, 7, 9, 10), "0,2-4,7,9-10")],
)
def test_affinity_ranges(cpus: tuple[int, ...], text: str) -> None:
    assert inventory._ranges(cpus) == text
