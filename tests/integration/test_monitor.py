"""`aner parallel status` and `cancel` against real job directories and real coordinators."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sys
from pathlib import Path

import pytest
from suite_env import child_env
from support import (
    ANER,
    CHUNK,
    FEW_SECONDS,
    LONG,
    Coordinators,
    finish,
    lock_held,
    process_gone,
    run_aner,
    spawned,
    status_of,
    submit,
    wait_for,
    wait_running,
    write_cluster_file,
)

from aner_coord.jobdir.status import JobState


def test_status_and_cancel_refuse_what_is_not_a_job_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = {
        "missing": "no job directory at",
        "file": "is not a directory",
        "empty": "is not an aner job directory (it has no run-manifest.json)",
    }
    for name, message in cases.items():
        for command in (("status",), ("status", "--json"), ("status", "--watch"), ("cancel",)):
            done = run_aner("parallel", *command, "--job", str(tmp_path / name))
            assert done.returncode == 2, (name, command, done.stderr)
            assert message in done.stderr, (name, command, done.stderr)
            assert "Traceback" not in done.stderr
    assert os.listdir(tmp_path / "empty") == []


_READER = """
import json, sys
from pathlib import Path
from aner_coord.cli.monitor import observe
job = Path(sys.argv[1])
reads, seqs = 0, set()
while True:
    raw = json.loads((job / "status.json").read_bytes())
    observed = json.loads(observe(job).to_json())
    assert observed["observed_state"] in ("STARTING", "RUNNING", "COMPLETED"), observed
    reads += 2
    seqs.add(observed["seq"])
    if observed["state"] == "COMPLETED" and not observed["lock_held"]:
        break
print(reads, len(seqs))
"""


def test_concurrent_json_readers_always_parse(tmp_path: Path, coordinators: Coordinators) -> None:
    job = tmp_path / "job"
    coordinators.add(submit(job, FEW_SECONDS, "--workers", "1"))
    argv = [sys.executable, "-c", _READER, str(job)]
    with spawned(argv) as first_reader, spawned(argv) as second_reader:
        seen: list[dict[str, object]] = []
        while True:
            done = run_aner("parallel", "status", "--job", str(job), "--json")
            assert done.returncode == 0, done.stderr
            seen.append(json.loads(done.stdout))
            if seen[-1]["observed_state"] == "COMPLETED":
                break
        for reader in (first_reader, second_reader):
            code, out, err = finish(reader, timeout=30)
            assert code == 0, err
            reads, distinct = map(int, out.split())
            assert reads >= 300, reads
            assert distinct >= 3, distinct
    seqs = [int(s["seq"]) for s in seen]  # type: ignore[call-overload]
    assert seqs == sorted(seqs)
    running = [s for s in seen if s["observed_state"] == "RUNNING"]
    assert running, "no read happened while the job ran"
    assert all(s["lock_held"] is True for s in running)
    assert seen[-1]["accepted"] == int(FEW_SECONDS)
    assert seen[-1]["lock_held"] is False
    assert (job / "result.json").is_file()


def test_human_status_of_a_running_job(tmp_path: Path, coordinators: Coordinators) -> None:
    job = tmp_path / "job"
    coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job, min_accepted=3 * int(CHUNK))
    wait_for(lambda: status_of(job).eta_s is not None, 30, "an ETA")
    done = run_aner("parallel", "status", "--job", str(job))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines() if line[:1] != " ")
    assert lines["state"].startswith("RUNNING (seq ")
    work = re.fullmatch(rf"([\d,]+) of {int(LONG):,} samples \(\d+\.\d%\)", lines["work"])
    assert work is not None, lines["work"]
    accepted = int(work.group(1).replace(",", ""))
    assert accepted >= 3 * int(CHUNK)
    assert lines["rate"].endswith("M samples/s")
    assert lines["eta"] != "--"
    assert lines["workers"].startswith("local-1: 1 slot, ")
    assert "error" not in lines
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 4


def test_interrupting_a_watch_leaves_the_job_running(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, FEW_SECONDS, "--workers", "1"))
    with spawned([ANER, "parallel", "status", "--job", str(job), "--watch"]) as watch:
        assert watch.stdout is not None
        first = watch.stdout.readline()
        assert first.startswith(("STARTING", "RUNNING")), first
        watch.send_signal(signal.SIGINT)
        code, _out, err = finish(watch, timeout=5)
    assert code == 130
    assert "stopped watching; the job itself goes on" in err
    assert lock_held(job)
    assert status_of(job).state in (JobState.STARTING, JobState.RUNNING)
    final = run_aner("parallel", "status", "--job", str(job), "--watch")
    assert final.returncode == 0, final.stderr
    assert json.loads((job / "result.json").read_text())["samples"] == int(FEW_SECONDS)
    wait_for(lambda: process_gone(pid), 10, "the coordinator to exit")


def test_cancel_reaches_a_foreground_job_too(tmp_path: Path) -> None:
    job = tmp_path / "job"
    argv = [
        ANER, "parallel", "run", "--samples", LONG, "--seed", "3", "--workers", "1",
        "--chunk", CHUNK, "--output", str(job),
    ]  # fmt: skip
    with spawned(argv) as foreground:
        wait_running(job)
        cancel = run_aner("parallel", "cancel", "--job", str(job))
        code, _out, err = finish(foreground, timeout=20)
    assert cancel.returncode == 4, cancel.stderr
    assert code == 4
    assert "job cancelled" in err
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()


def test_a_failed_job_reports_exit_3_and_its_error(tmp_path: Path) -> None:
    cluster = write_cluster_file(tmp_path / "cluster", executable="/nonexistent/bin/aner")
    job = tmp_path / "job"
    run = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--chunk", "100000",
        "--cluster", str(cluster), "--output", str(job),
    )  # fmt: skip
    assert run.returncode == 3
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 3
    assert "state     FAILED" in status.stdout
    assert 'error     worker "w1" failed during start' in status.stdout
    assert "/nonexistent" not in status.stdout
    as_json = json.loads(run_aner("parallel", "status", "--job", str(job), "--json").stdout)
    assert as_json["observed_state"] == as_json["state"] == "FAILED"
    watch = run_aner("parallel", "status", "--job", str(job), "--watch")
    assert watch.returncode == 3
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 3
    assert "already ended: FAILED; nothing to cancel" in cancel.stdout
    assert not (job / "cancel-request").exists()


def test_a_completed_job_and_one_whose_result_never_came(tmp_path: Path) -> None:
    job = tmp_path / "job"
    run = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--chunk", "100000",
        "--output", str(job),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 0
    assert "state     COMPLETED" in status.stdout
    assert "work      1,000,000 of 1,000,000 samples (100.0%)" in status.stdout
    assert f"result    {job / 'result.json'}" in status.stdout
    # The result itself, not only where it is.
    hits = json.loads((job / "result.json").read_text())["hits"]
    assert f"hits      {hits:,} of 1,000,000 samples" in status.stdout
    (estimate,) = [line for line in status.stdout.splitlines() if line.startswith("estimate ")]
    assert f"{4 * hits / 1_000_000:.10f}" in estimate
    assert "ETA" not in status.stdout
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 0
    assert "already ended: COMPLETED; nothing to cancel" in cancel.stdout
    # COMPLETED is only true with its result: a coordinator that died between its last
    # status and result.json is offline, not done.
    (job / "result.json").unlink()
    status = run_aner("parallel", "status", "--job", str(job), "--json")
    assert status.returncode == 5
    observed = json.loads(status.stdout)
    assert observed["observed_state"] == "COORDINATOR_OFFLINE"
    assert "before writing result.json" in observed["note"]


def test_watch_on_a_terminal_redraws_and_exits_with_the_job(tmp_path: Path) -> None:
    job = tmp_path / "job"
    run = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "1", "--chunk", "100000",
        "--output", str(job),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    controller, terminal = pty.openpty()
    argv = [ANER, "parallel", "status", "--job", str(job), "--watch"]
    env = child_env(COLUMNS="120", TERM="xterm")
    try:
        with spawned(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env) as watch:
            os.close(terminal)
            output = b""
            while True:  # until the terminal's last writer has gone (EIO) or end of file
                readable, _, _ = select.select([controller], [], [], 20)
                assert readable, f"the watch went silent without exiting: {output!r}"
                try:
                    chunk = os.read(controller, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            assert watch.wait(timeout=10) == 0
    finally:
        os.close(controller)
    text = output.decode(errors="replace")
    assert "COMPLETED (seq" in text
    assert "1,000,000 of 1,000,000 samples" in text


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a directory to another user")
def test_cancel_refuses_another_users_job(tmp_path: Path) -> None:
    job = tmp_path / "job"
    run = run_aner(
        "parallel", "run", "--samples", "100000", "--seed", "1", "--output", str(job),
    )  # fmt: skip
    assert run.returncode == 0
    os.chown(job, 65534, 65534)
    cancel = run_aner("parallel", "cancel", "--job", str(job))
    assert cancel.returncode == 2
    assert "belongs to another user (uid 65534): only its owner can cancel it" in cancel.stderr
    assert not (job / "cancel-request").exists()
