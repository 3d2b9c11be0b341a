"""The lease table of CPU slots (`aner_worker.leases`) and the scheduler's CPU hints of
`inventory()`: real files and real `flock`s in `tmp_path`, and real holder processes killed
with SIGKILL (tests/lease_holders.py forks them, cheaply, from one helper process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import HANG_S, TESTS

from aner_worker import leases
from aner_worker.inventory import collect, scheduler_hints
from aner_worker.leases import Holder, Lease, LeaseError, LeaseTable

ME = Holder(os.getpid(), job="0123456789ab", kind="monte-carlo", slots=2, directory="/x/j1")


def table(tmp_path: Path, size: int = 2) -> LeaseTable:
    return LeaseTable(size, tmp_path / "slots")


def test_take_is_all_or_nothing_and_names_the_holders(tmp_path: Path) -> None:
    first = table(tmp_path).take(1, ME)
    assert isinstance(first, Lease) and first.slots == (0,)
    # Two are asked for, one is free: none is taken, and the holder is named once.
    busy = table(tmp_path).take(2, Holder(1, kind="worker", slots=1))
    assert busy == [ME]
    second = table(tmp_path).take(1, Holder(2, kind="worker", slots=1))
    assert isinstance(second, Lease) and second.slots == (1,)  # slot 1 was left free
    pid = os.getpid()
    assert ME.describe() == f"job 0123456789ab (monte-carlo, pid {pid}, 2 slot(s)) in /x/j1"
    first.release()
    second.release()
    assert [holder for _, holder in table(tmp_path).holders()] == [None, None]


def test_a_slot_file_that_is_a_hard_link_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    """A slot file linked to another file of the user's (a hard link passes O_NOFOLLOW and
    the regular-file check) was accepted and the holder written over its target."""
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    leased = table(tmp_path)
    os.link(target, leased.path / "slot-0")
    with pytest.raises(LeaseError) as caught:
        leased.take(1, ME)
    assert str(caught.value) == (
        f"lease directory {leased.path}: slot-0 has 2 links (a hard link to another file): "
        "remove it"
    )
    assert target.read_text() == "mine\n"


def test_a_holder_that_is_not_json_is_unknown(tmp_path: Path) -> None:
    lease = table(tmp_path, 1).take(1, ME)
    assert isinstance(lease, Lease)
    (tmp_path / "slots" / "slot-0").write_bytes(b"\xff" * 10_000)  # not ours to trust
    assert table(tmp_path, 1).take(1, ME) == [leases.UNKNOWN]
    lease.release()


def test_a_granted_table_uses_its_first_slots_only(tmp_path: Path) -> None:
    whole = table(tmp_path, 4).take(1, ME)  # slot 0
    granted = LeaseTable(1, tmp_path / "slots")
    assert granted.take(1, ME) == [ME]  # slots 1..3 are free, but not granted
    assert isinstance(whole, Lease)
    whole.release()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.symlink_to(p.parent / "elsewhere"), "is a symlink"),
        (lambda p: p.write_text(""), "is not a directory"),
        (lambda p: p.mkdir(mode=0o755), "has mode 755: `chmod 700` it"),
    ],
)
def test_an_unsafe_directory_is_refused_naming_it(tmp_path: Path, make, words: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    path = tmp_path / "slots"
    make(path)
    path.parent.chmod(0o700)
    if path.is_dir() and not path.is_symlink():
        path.chmod(0o755)
    with pytest.raises(LeaseError) as caught:
        LeaseTable(2, path)
    message = str(caught.value)
    assert message.startswith(f"lease directory {path} ") and words in message
    assert "\n" not in message


def test_the_runtime_directory_is_chosen_in_order(tmp_path: Path) -> None:
    given = {"ANER_RUNTIME_DIR": str(tmp_path / "rt"), "XDG_RUNTIME_DIR": str(tmp_path)}
    assert leases.runtime_dir(given)[0] == tmp_path / "rt"
    assert leases.runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)})[0] == tmp_path / "aner"
    run_user = Path(f"/run/user/{os.getuid()}")
    fallback = run_user / "aner" if run_user.is_dir() else Path(f"/tmp/aner-{os.getuid()}")
    assert leases.runtime_dir({})[0] == fallback
    made = leases.private_dir("slots", given)
    assert made == tmp_path / "rt" / "slots"
    assert (made.stat().st_mode & 0o777, made.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    assert leases.leases_enabled({"ANER_LEASES": "off"}) is False
    assert leases.leases_enabled({}) is True


def test_no_stale_lease_after_200_random_kills(tmp_path: Path) -> None:
    """200 holders, each killed with SIGKILL at a random moment (before, while or after it
    takes its slots); after each kill every slot of the table can be taken at once."""
    helper = subprocess.run(
        [sys.executable, str(TESTS / "lease_holders.py"), str(tmp_path / "slots"), "200", "7"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert helper.returncode == 0, helper.stderr
    report = json.loads(helper.stdout)
    assert report["kills"] == 200
    assert report["stale"] == 0
    assert report["held_when_killed"] > 0  # some holders really held their slots
    assert [holder for _, holder in table(tmp_path, 3).holders()] == [None, None, None]


def test_scheduler_hints_bound_the_effective_cpus_with_a_note() -> None:
    notes: list[str] = []
    env = {"SLURM_CPUS_PER_TASK": "1", "NCPUS": "3", "LSB_DJOB_NUMPROC": "x"}
    assert scheduler_hints(env, notes) == [
        (1, "SLURM_CPUS_PER_TASK=1 (Slurm)"),
        (3, "NCPUS=3 (PBS)"),
    ]
    assert notes == [
        "effective_cpus: bounded by SLURM_CPUS_PER_TASK=1, set by Slurm",
        "effective_cpus: bounded by NCPUS=3, set by PBS",
        "effective_cpus: LSB_DJOB_NUMPROC='x' is not a positive integer: ignored",
    ]


def test_omp_num_threads_is_a_limit_only_inside_a_batch_job() -> None:
    notes: list[str] = []
    assert scheduler_hints({"OMP_NUM_THREADS": "1"}, notes) == []
    assert "not applied" in notes[0]
    inside = {"OMP_NUM_THREADS": "2,1", "SLURM_JOB_ID": "7", "OMP_THREAD_LIMIT": "4"}
    assert scheduler_hints(inside, []) == [
        (4, "OMP_THREAD_LIMIT=4 (OpenMP)"),
        (2, "OMP_NUM_THREADS=2 (OpenMP, inside a batch job)"),
    ]


def test_inventory_reports_a_slurm_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    inv = collect().to_dict()
    assert inv["effective_cpus"] == 1
    assert "SLURM_CPUS_PER_TASK=1 (Slurm)" in str(inv["auto_rule"])
    assert "effective_cpus: bounded by SLURM_CPUS_PER_TASK=1, set by Slurm" in inv["notes"]  # type: ignore[operator]


def test_tickets_queue_in_the_order_taken_and_a_dead_one_is_removed(tmp_path: Path) -> None:
    t = table(tmp_path)
    first = t.ticket(Holder(1, job="aaaaaaaaaaaa", kind="wide", slots=2))
    second = t.ticket(Holder(2, job="bbbbbbbbbbbb", kind="narrow", slots=1))
    assert first.number < second.number
    assert [h.job for _, h in t.queue()] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    # A holder that died leaves its file unlocked: the next reader removes it.
    dead = tmp_path / "slots" / "ticket-00000000000000000001"
    dead.write_text("{}")
    assert [n for n, _ in t.queue()] == [first.number, second.number]
    assert not dead.exists()
    first.release()
    assert [h.job for _, h in t.queue()] == ["bbbbbbbbbbbb"]
    third = t.ticket(Holder(3, job="cccccccccccc", kind="narrow", slots=1))
    assert third.number > second.number
    second.release()
    third.release()
    assert t.queue() == []
    assert sorted(p.name for p in (tmp_path / "slots").iterdir()) == []
