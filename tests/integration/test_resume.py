"""`aner parallel resume` continues exactly the job its manifest describes, after any stop,
and nothing else (docs/contracts.md, section 11; `aner_coord.job.resume`).

Real detached coordinators and real `aner parallel cancel`: a cancelled job resumes (in the
foreground and in the background) to the hits of an uninterrupted run; an edited
`request.json`, a changed data file, another job's ledger, a forged or damaged ledger
record are each refused with one line naming what changed (exit 2), leaving the job
directory as it was. The detached coordinator's log goes to the directory it holds, not to
whatever stands at its path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    Coordinators,
    advance_until,
    hold_slots,
    installed_copy,
    leased_env,
    process_gone,
    result_of,
    run_aner,
    status_of,
    wait_for,
    wait_status,
)

from aner_coord.jobdir import jobkey
from aner_coord.jobdir.ledger import Accepted, frame, scan
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.base import encode
from aner_worker.kernels.montecarlo import McStats

HITS_1E9 = 785_386_550  # docs/contracts.md, section 1, seed 42
CHUNK = 10_000_000


def listing(job: Path) -> list[tuple[str, int, int]]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in job.iterdir())


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def cancel_when_running(job: Path, at_least: int) -> None:
    wait_status(job, lambda s: s.state is JobState.RUNNING and s.accepted >= at_least, 120, "work")
    done = run_aner("parallel", "cancel", "--job", str(job), timeout=120)
    assert done.returncode == 4, done.stderr
    assert status_of(job).state is JobState.CANCELLED


@pytest.fixture(scope="module")
def cancelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Monte Carlo job of 1e9 samples (seed 42) stopped by `aner parallel cancel`."""
    job = tmp_path_factory.mktemp("cancelled") / "job"
    started = run_aner(
        "parallel", "run", "--samples", "1e9", "--seed", "42", "--workers", "1",
        "--chunk", str(CHUNK), "--output", str(job), "--background",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    pid = status_of(job).pid
    try:
        wait_status(
            job, lambda s: s.state is JobState.RUNNING and s.accepted >= 2 * CHUNK, 120, "work"
        )
        # `cancel --json`: its outcome as one document (issue 38, item 5).
        done = run_aner("parallel", "cancel", "--job", str(job), "--json", timeout=120)
        assert done.returncode == 4, done.stderr
        doc = json.loads(done.stdout)
        assert (doc["schema"], doc["command"], doc["state"]) == (
            "aner-job-outcome/1",
            "cancel",
            "CANCELLED",
        )
        assert doc["exit_status"] == 4 and doc["reason"].startswith(f"job {job} CANCELLED")
        wait_for(lambda: process_gone(pid), 30, "the coordinator to exit")
        assert (job / "cancel-request").exists()
        yield job
    finally:
        left = Coordinators()  # nothing to kill normally: it ended with the cancel
        left.add(pid)
        left.cleanup()


@pytest.fixture
def copy(cancelled: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(cancelled, tmp_path / "job", symlinks=True))


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_cancelled_job_resumes_to_the_exact_hits(
    copy: Path, background: bool, coordinators: Coordinators
) -> None:
    before = status_of(copy)
    # In the foreground with --json (issue 38, item 5): one document, the summary in it.
    how = ["--background"] if background else ["--json"]
    done = run_aner("parallel", "resume", "--job", str(copy), *how, timeout=300)
    assert done.returncode == 0, done.stderr
    if background:
        assert "job resumed in the background" in done.stdout
        coordinators.add(status_of(copy).pid)
        wait_status(copy, lambda s: s.state.terminal, 300, "the resumed job to end")
        # The coordinator logs its summary after the status it ends with: wait for the line.
        line = "completed: 1,000,000,000 samples, seed 42: 785,386,550 hits"
        wait_for(lambda: line in (copy / "coordinator.log").read_text(), 60, "the summary")
    else:
        doc = json.loads(done.stdout)
        assert (doc["command"], doc["state"], doc["job"]) == ("resume", "COMPLETED", str(copy))
        assert f"{HITS_1E9:,} hits" in "\n".join(doc["summary"])
    final = status_of(copy)
    assert (final.state, final.resumes) == (JobState.COMPLETED, 1)
    assert final.seq > before.seq
    # Exactly what the last status reported: no status counts work the ledger does not hold.
    assert final.recovered == before.accepted >= 2 * CHUNK
    assert result_of(copy)["hits"] == HITS_1E9
    assert not (copy / "cancel-request").exists()


def _edit_request(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(job: Path) -> None:
        request = json.loads((job / "request.json").read_text())
        change(request)
        (job / "request.json").write_text(json.dumps(request))

    return edit


def _computation(key: str, value: object) -> Callable[[Path], None]:
    return _edit_request(lambda r: r["computation"].__setitem__(key, value))


def _execution(key: str, value: object) -> Callable[[Path], None]:
    return _edit_request(lambda r: r["execution"].__setitem__(key, value))


def _forge(stats: McStats, chunk: int, *, keyed: bool = True) -> Callable[[Path], None]:
    """Append a record that the job's own identity and checksums make look genuine, and
    with `keyed` its MAC too (what only the job key's holder can write)."""

    def forge(job: Path) -> None:
        key = bytes.fromhex(json.loads((job / "run-manifest.json").read_text())["job"])
        secret = jobkey.user_secret(create=False)
        assert secret is not None
        mac_key = jobkey.job_mac_key(secret, key) if keyed else None
        offset = (job / "ledger").stat().st_size
        with open(job / "ledger", "ab") as ledger:
            ledger.write(frame(key, Accepted(0, chunk, encode(stats)), mac_key, offset))

    return forge


def _reframe(job: Path) -> None:
    """The same records under another job's identity: another job's ledger."""
    entries, _ = scan((job / "ledger").read_bytes())
    (job / "ledger").write_bytes(b"".join(frame(bytes(16), e.record) for e in entries))


def _flip_early_byte(job: Path) -> None:
    data = bytearray((job / "ledger").read_bytes())
    data[20] ^= 0x10  # inside the payload of the opening record
    (job / "ledger").write_bytes(bytes(data))


EDITS: list[tuple[str, Callable[[Path], None], str]] = [
    ("seed", _computation("seed", 43), "no longer describes the job begun: seed: 42 when it "
     "began, 43 now"),
    ("samples", _computation("samples", 2_000_000_000), "samples: 1000000000 when it began, "
     "2000000000 now; plan.chunks: 100 when it began, 200 now"),
    ("chunk", _execution("chunk", 5_000_000), "plan.chunk: 10000000 when it began, 5000000 "
     "now"),
    ("audit", _edit_request(lambda r: r.__setitem__("audit", 0.5)), "its request.json was "
     "changed since the job began (SHA256 sha256:"),
    ("workers", _execution("workers", 2), "its request.json was changed since the job began"),
    ("kind", _edit_request(lambda r: r.__setitem__("computation", {
        "kind": "regression", "samples": 1_000_000_000, "steps": 1, "rate": 0.5, "seed": 42})),
     "computation: \"monte-carlo\" when it began, \"regression\" now"),
    ("ledger_of_another_job", _reframe, "its record at byte 0 belongs to another job"),
    ("ledger_damaged_before_its_tail", _flip_early_byte, "is damaged (its checksum is wrong) "
     "and records follow it"),
    ("ledger_record_all_hits", _forge(McStats(CHUNK), 99), "the ledger's record of chunk 99 "
     "of pass 0 is refused: 10,000,000 hits in 10,000,000 samples is more than 12 standard "
     "deviations from pi/4"),
    ("ledger_record_out_of_range", _forge(McStats(7_853_981), 100), "the ledger's record of "
     "chunk 100 of pass 0 is refused: that pass has 100 chunks"),
    # Issue 36: a chunk of one more hit, with the job's own checksums, resumed with exit 0.
    ("ledger_record_without_the_key", _forge(McStats(7_853_982), 99, keyed=False),
     "(chunk 99 of pass 0) does not carry the MAC of your job key"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "edit", "words"), EDITS, ids=[e[0] for e in EDITS])
def test_a_job_that_is_not_the_one_begun_is_refused_naming_what_changed(
    copy: Path, what: str, edit: Callable[[Path], None], words: str
) -> None:
    edit(copy)
    before = listing(copy)
    done = run_aner("parallel", "resume", "--job", str(copy), timeout=120)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"aner: job {copy} cannot be resumed: "), line
    assert words in line, line
    assert listing(copy) == before  # nothing written, the cancel request still stands
    assert status_of(copy).state is JobState.CANCELLED


def test_a_data_file_changed_since_the_job_began_is_refused_naming_its_sha256(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    data = tmp_path / "data.csv"
    rows = [f"{i % 7 / 7:.3f},{(i * 3) % 11 / 11:.3f},{i % 2}" for i in range(400)]
    data.write_text("a,b,label\n" + "\n".join(rows) + "\n")
    job = tmp_path / "job"
    started = run_aner(
        "parallel", "train", "--data", str(data), "--seed", "1", "--epochs", "10000",
        "--patience", "10000", "--workers", "1", "--output", str(job), "--background",
        timeout=300,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    coordinators.add(status_of(job).pid)
    cancel_when_running(job, 1)
    was = json.loads((job / "run-manifest.json").read_text())["request"]["data"]
    with open(data, "a") as more:
        more.write("0.5,0.5,1\n")  # one more row: another data set
    now = "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()
    done = run_aner("parallel", "resume", "--job", str(job), timeout=300)
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == (
        f"aner: job {job} cannot be resumed: its data {data} changed since the job began "
        f"(SHA256 {was} when it began, {now} now)"
    )
    assert status_of(job).state is JobState.CANCELLED


# -- the detached coordinator's log --------------------------------------------------------

ADOPT = """
import os, sys
from pathlib import Path
from aner_coord import jobdir
from aner_coord.cli.background import adopt_log

job = Path(sys.argv[1])
directory = jobdir.JobDir.create(job)
print("before the swap", file=sys.stderr, flush=True)
os.rename(job, job.with_name("held"))  # someone swaps another directory in at the path
job.mkdir()
adopt_log(directory)
print("after adopting the log", file=sys.stderr, flush=True)
"""


def test_the_log_is_adopted_through_the_directory_held_not_the_path(tmp_path: Path) -> None:
    job = tmp_path / "job"
    early = tmp_path / "early.log"
    with open(early, "w+b") as stderr:  # as the submitter's temporary file: readable
        done = subprocess.run(
            [sys.executable, "-c", ADOPT, str(job)], stderr=stderr, timeout=60, check=False
        )
    assert done.returncode == 0, early.read_text()
    assert os.listdir(job) == []  # the directory swapped in got nothing
    log = (tmp_path / "held" / "coordinator.log").read_text()
    assert log == "before the swap\nafter adopting the log\n"
    assert (tmp_path / "held" / "coordinator.log").stat().st_mode & 0o777 == 0o600


def test_a_coordinator_whose_numerical_code_changed_cannot_resume_the_job(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    """Issue 25 item 7, issue 35 item 3: the coordinator applies the fixture's updates and
    replays the ledger's accepted chunks, so a change to the computation or to the ledger
    (one comment line more, in a copy of the installation whose workers are the same) refuses the
    resume naming the file; the installation that began the job resumes it."""
    import signal

    job = tmp_path / "job"
    # The job queues behind a slot the test holds, so that it is stopped before it has done
    # any work, however fast the machine; its 600 steps outlast the slices of `advance_until`.
    env = leased_env(tmp_path, 1)
    held = hold_slots(env, 1)
    done = run_aner(
        "parallel", "regression", "--samples", "200000", "--steps", "600", "--rate", "0.5",
        "--seed", "3", "--chunk", "50000", "--workers", "1", "--output", str(job),
        "--background", "--quiet", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert status_of(job).state is JobState.QUEUED
    pid = coordinators.add(status_of(job).pid)
    os.kill(pid, signal.SIGSTOP)
    held.release()
    advance_until(pid, lambda: status_of(job).accepted > 0, "accepted work")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 30, "the killed coordinator to go")
    manifest = json.loads((job / "run-manifest.json").read_text())
    kept = [entry for entry in listing(job) if entry[0] != "coordinator.lock"]
    for changed in ("aner_coord/jobdir/ledger.py", "aner_coord/computations/regression.py"):
        assert changed in manifest["sources"]
        where = tmp_path / Path(changed).stem
        where.mkdir()
        other = installed_copy(where, changed)
        refused = subprocess.run(
            [str(other), "parallel", "resume", "--job", str(job)],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        line = one_line(refused.stderr)
        assert f"was started by a different aner: {changed} differs" in line, line
        assert manifest["sources"][changed] in line
        # (the dead coordinator's lock file goes with the lock the refused resume took)
        assert [entry for entry in listing(job) if entry[0] != "coordinator.lock"] == kept
    done = run_aner("parallel", "resume", "--job", str(job), "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr
    assert status_of(job).state is JobState.COMPLETED
