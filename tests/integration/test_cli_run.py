"""The `aner parallel` command line as a user runs it: real subprocesses, real job directories."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psutil
import pytest
from support import finish, read_status, spawned, status_of, wait_for

import aner_coord
from aner_coord import jobdir, parallel
from aner_coord.computations.montecarlo import STREAM_ID
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_worker.contract import source_fingerprint
from aner_worker.inventory import current

HITS_1E7_SEED_42 = 7_856_672
U64_MAX = 2**64 - 1
ANER_MODULE = [sys.executable, "-m", "aner_coord", "parallel"]


def aner(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ANER_MODULE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def poll_status(proc: subprocess.Popen[str], job: Path) -> Iterator[StatusSnapshot]:
    """Yield each distinct status.json read while the process lives."""
    last = -1
    while proc.poll() is None:
        status = read_status(job)
        if status is not None and status.seq != last:
            last = status.seq
            yield status


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(text in part for part in cmdline):
            found.append(proc.info["pid"])
    return found


@pytest.fixture(scope="module")
def completed_job(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    job = tmp_path_factory.mktemp("cli") / "job"
    proc = aner(
        "run", "--samples", "10000000", "--seed", "42", "--workers", "2",
        "--chunk", "65536", "--output", str(job),
    )  # fmt: skip
    return job, proc


# -- a completed foreground run ------------------------------------------------------------


def test_foreground_run_writes_the_job_directory(
    completed_job: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    job, proc = completed_job
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert "10,000,000 samples, seed 42: 7,856,672 hits" in lines[0]
    assert str(job) in lines[0]
    assert mode(job) == 0o700
    names = {p.name for p in job.iterdir()}
    assert {jobdir.MANIFEST, jobdir.STATUS, jobdir.RESULT} <= names
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")], names  # no temps
    assert jobdir.LOG not in names and jobdir.CANCEL_REQUEST not in names  # a foreground run
    for name in names:
        assert mode(job / name) == 0o600, name
    result = json.loads((job / jobdir.RESULT).read_text())
    assert result["hits"] == HITS_1E7_SEED_42
    assert result["samples"] == 10_000_000
    assert result["seed"] == 42
    assert result["stream"] == STREAM_ID
    assert result["estimate"] == 4 * HITS_1E7_SEED_42 / 10_000_000
    assert result["computation"] == "monte-carlo"
    assert sum(w["items"] for w in result["workers"]) == 10_000_000
    assert sum(w["chunks"] for w in result["workers"]) == 153
    assert not jobdir.lock_is_held(job)


def test_final_status_is_completed(completed_job: tuple[Path, object]) -> None:
    job, _ = completed_job
    status = status_of(job)
    assert status.schema == "aner-status/3"
    assert status.state is JobState.COMPLETED
    assert status.accepted == status.requested == 10_000_000
    assert status.chunks_total == 153
    assert status.unit == "samples"
    assert status.error is None
    assert status.eta_s is None
    assert sum(w.items for w in status.workers) == 10_000_000
    assert [w.identity for w in status.workers] == ["local-1", "local-2"]


def test_manifest_describes_the_run_without_paths(completed_job: tuple[Path, object]) -> None:
    job, _ = completed_job
    text = (job / jobdir.MANIFEST).read_text()
    manifest = json.loads(text)
    assert manifest["request"] == {"samples": 10_000_000, "seed": 42}
    assert manifest["identity"] == STREAM_ID
    assert manifest["computation"] == "monte-carlo"
    assert manifest["plan"]["kind"] == "local"
    assert manifest["plan"]["workers"] == 2
    assert manifest["plan"]["chunk"] == 65_536
    assert manifest["plan"]["chunks"] == 153
    assert manifest["plan"]["passes"] == 1
    assert manifest["inventory"]["effective_cpus"] == current().effective_cpus
    assert manifest["aner_version"] == aner_coord.__version__
    assert manifest["source_fingerprint"] == source_fingerprint()

    def strings(value: object) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield k
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    absolute = [s for s in strings(manifest) if s.startswith("/") or "/bin/" in s]
    assert absolute == []
    for private in (sys.executable, str(Path(sys.executable).parent), str(job)):
        assert private not in text


@pytest.mark.parametrize(
    ("samples", "seed", "options"),
    [
        (10_000_000, 42, ["--workers", "1", "--chunk", "999983"]),
        (10_000_000, 42, ["--workers", "2", "--chunk", "1000"]),
        (3_000_000, U64_MAX, ["--workers", "2", "--chunk", "65536"]),
    ],
    ids=["1-worker", "2-workers-small-chunks", "largest-seed"],
)
def test_cli_hits_equal_the_api(
    tmp_path: Path, samples: int, seed: int, options: list[str]
) -> None:
    proc = aner(
        "run", "--samples", str(samples), "--seed", str(seed), *options,
        "--output", str(tmp_path / "job"), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = parallel.monte_carlo(
        samples=samples, seed=seed, execution=parallel.local(workers=1, chunk=10**6)
    ).hits
    result = json.loads((tmp_path / "job" / jobdir.RESULT).read_text())
    assert result["hits"] == expected
    assert result["seed"] == seed
    if seed == 42:
        assert expected == HITS_1E7_SEED_42


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    proc = aner(
        "run", "--samples", "1000000", "--seed", "1", "--quiet", "--output", str(tmp_path / "j")
    )
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr == ""
    assert (tmp_path / "j" / jobdir.RESULT).is_file()


def test_no_escape_codes_when_not_a_terminal(tmp_path: Path) -> None:
    proc = aner(
        "run", "--samples", "30000000", "--seed", "5", "--chunk", "1000000",
        "--output", str(tmp_path / "j"),
    )  # fmt: skip
    assert proc.returncode == 0
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    assert "\x1b" not in proc.stdout
    assert proc.stderr == ""
    assert proc.stdout.count("\n") == 1


def test_status_seq_increases_during_a_longer_run(tmp_path: Path) -> None:
    job = tmp_path / "job"
    samples = 600_000_000
    argv = [
        *ANER_MODULE, "run", "--samples", str(samples), "--seed", "9", "--workers", "2",
        "--chunk", "10000000", "--quiet", "--output", str(job),
    ]  # fmt: skip
    with spawned(argv) as proc:
        seen = list(poll_status(proc, job))
        code, _out, err = finish(proc, timeout=120)
    assert code == 0, err
    final = status_of(job)
    seen.append(final)
    seqs = [s.seq for s in seen]
    assert seqs == sorted(seqs)
    accepted = [s.accepted for s in seen]
    assert accepted == sorted(accepted)
    assert len(set(seqs)) >= 2  # the file was replaced while we read it
    assert any(s.state is JobState.RUNNING for s in seen)
    assert final.state is JobState.COMPLETED
    assert final.accepted == samples
    assert final.seq > seen[0].seq


# -- invalid requests ----------------------------------------------------------------------


INVALID = [
    ("samples-0", ["--samples", "0", "--seed", "1"], "--samples must be positive, got 0"),
    (
        "samples-over-limit",
        ["--samples", "10000000001", "--seed", "1"],
        "--samples is 10,000,000,001 samples; the limit is 10,000,000,000",
    ),
    (
        "seed-negative",
        ["--samples", "1000", "--seed", "-1"],
        "argument --seed: expected a seed, a whole number from 0 to 2**64 - 1 (such as 42); "
        "got '-1'",
    ),
    (
        "seed-2**64",
        ["--samples", "1000", "--seed", str(2**64)],
        f"--seed must be in [0, 2**64), got {2**64}",
    ),
    (
        "seed-abc",
        ["--samples", "1000", "--seed", "abc"],
        "argument --seed: expected a seed, a whole number from 0 to 2**64 - 1 (such as 42); "
        "got 'abc'",
    ),
    ("chunk-0", ["--samples", "1000", "--seed", "1", "--chunk", "0"], "--chunk must be positive"),
    (
        "too-many-chunks",
        ["--samples", "10000000", "--seed", "1", "--chunk", "1"],
        "use a chunk of at least 10 (--chunk)",
    ),
]


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _expect_invalid(proc: subprocess.CompletedProcess[str], words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("aner: ")
    assert words in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_request_exits_2_and_creates_nothing(
    tmp_path: Path, args: list[str], words: str
) -> None:
    proc = aner("run", *args, "--output", "out", cwd=tmp_path)
    _expect_invalid(proc, words)
    assert _listing(tmp_path) == []


def test_workers_over_the_allocation_names_both_numbers(tmp_path: Path) -> None:
    effective = current().effective_cpus
    proc = aner(
        "run", "--samples", "1000", "--seed", "1", "--workers", str(effective + 1),
        "--output", "out", cwd=tmp_path,
    )  # fmt: skip
    _expect_invalid(proc, f"{effective + 1} workers exceed")
    assert f"allocation of {effective}" in proc.stderr
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("kind", ["dir", "file", "symlink", "dangling-symlink"])
def test_existing_output_is_refused(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "dir":
        out.mkdir()
        words = "is an existing directory"
    elif kind == "file":
        out.write_text("precious\n")
        words = "is an existing file"
    elif kind == "symlink":
        (tmp_path / "target").mkdir()
        out.symlink_to(tmp_path / "target")
        words = "is a symbolic link"
    else:
        out.symlink_to(tmp_path / "nowhere")
        words = "is a symbolic link"
    before = _listing(tmp_path)
    proc = aner("run", "--samples", "1000", "--seed", "1", "--output", "out", cwd=tmp_path)
    _expect_invalid(proc, words)
    assert _listing(tmp_path) == before
    if kind == "file":
        assert out.read_text() == "precious\n"


def test_missing_parent_is_refused(tmp_path: Path) -> None:
    proc = aner("run", "--samples", "1000", "--seed", "1", "--output", "missing/out", cwd=tmp_path)
    _expect_invalid(proc, "does not exist: create it first")
    assert _listing(tmp_path) == []


def test_missing_output_option(tmp_path: Path) -> None:
    proc = aner("run", "--samples", "1000", "--seed", "1", cwd=tmp_path)
    _expect_invalid(proc, "missing --output")
    assert _listing(tmp_path) == []


# -- Ctrl-C --------------------------------------------------------------------------------


def test_sigint_cancels_a_foreground_run(tmp_path: Path) -> None:
    job = tmp_path / "job"
    requested = 10_000_000_000
    argv = [
        *ANER_MODULE, "run", "--samples", str(requested), "--seed", "3", "--chunk", "10000000",
        "--workers", "1", "--output", str(job),
    ]  # fmt: skip
    with spawned(argv) as proc:

        def progressing() -> bool:
            status = read_status(job)
            if proc.poll() is not None:
                raise AssertionError(f"the run ended early: {proc.communicate()}")
            return status is not None and status.state is JobState.RUNNING and status.accepted > 0

        wait_for(progressing, 60, "the run to show progress")
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc, timeout=60)
    assert code == 4, err
    assert out == ""
    assert "job cancelled" in err and "partial counts are diagnostic only" in err
    assert "Traceback" not in err
    status = status_of(job)
    assert status.state is JobState.CANCELLED
    assert 0 < status.accepted < requested
    assert status.error == "cancelled: cancel requested"
    assert not (job / jobdir.RESULT).exists()
    assert not jobdir.lock_is_held(job)
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == "zombie"
    assert processes_mentioning(str(job)) == []


# -- inventory and status ------------------------------------------------------------------


def test_inventory_json() -> None:
    proc = aner("inventory", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["effective_cpus"] == current().effective_cpus
    assert isinstance(data["effective_cpus"], int) and data["effective_cpus"] >= 1
    assert data["auto_workers"] == current().auto_workers
    assert isinstance(data["notes"], list)


def test_inventory_table() -> None:
    proc = aner("inventory")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("effective CPUs"))
    assert line.split()[-1] == str(current().effective_cpus)


def test_status_of_a_completed_job(completed_job: tuple[Path, object]) -> None:
    job, _ = completed_job
    proc = aner("status", "--job", str(job), "--json")
    assert proc.returncode == 0, proc.stderr
    data = msgspec.json.decode(proc.stdout)
    assert data["state"] == "COMPLETED"
    assert data["accepted"] == 10_000_000


def test_status_of_a_completed_job_shows_its_result(completed_job: tuple[Path, object]) -> None:
    job, _ = completed_job
    proc = aner("status", "--job", str(job))
    assert proc.returncode == 0, proc.stderr
    assert "COMPLETED" in proc.stdout
    assert "7,856,672" in proc.stdout  # the hits, not only the path to result.json
    assert "3.1426688" in proc.stdout  # and the estimate
