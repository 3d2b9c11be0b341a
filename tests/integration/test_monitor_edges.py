"""`aner parallel status` at its edges: a reader that closes the pipe, a job directory deleted
while watched, the result of a completed job, an offline job's (absent) ETA, and SIGHUP to a
coordinator. Real processes, real pipes, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support import (
    ANER,
    CHUNK,
    LONG,
    Coordinators,
    finish,
    process_gone,
    read_status,
    run_aner,
    spawned,
    status_of,
    submit,
    wait_for,
    wait_running,
)

from aner_coord.jobdir.status import JobState


@pytest.fixture(scope="module")
def completed_mc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("mc") / "job"
    done = run_aner(
        "parallel", "run", "--samples", "1000000", "--seed", "7", "--chunk", "100000",
        "--output", str(job), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return job


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `aner` with stdout a pipe whose reader has already gone (what `| head -1` leaves
    once head has its line): every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [ANER, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)


# --------------------------------------------------------------------------- broken pipe


@pytest.mark.parametrize("mode", [(), ("--json",), ("--watch",), ("--watch", "--json")])
def test_status_into_a_closed_pipe_ends_quietly(completed_mc: Path, mode: tuple[str, ...]) -> None:
    done = closed_pipe_run("parallel", "status", "--job", str(completed_mc), *mode)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_watch_piped_into_head_ends_quietly_while_the_job_goes_on(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    for mode in ("", " --json"):
        done = subprocess.run(
            ["bash", "-c",
             f'"$0" parallel status --job "$1" --watch{mode} | head -1; exit "${{PIPESTATUS[0]}}"',
             ANER, str(job)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert len(done.stdout.splitlines()) == 1
        assert "RUNNING" in done.stdout
    assert not process_gone(pid)
    assert run_aner("parallel", "cancel", "--job", str(job)).returncode == 4


# --------------------------------------------------------------------------- deleted


def test_watch_of_a_deleted_job_directory_says_it_is_gone(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    with spawned([ANER, "parallel", "status", "--job", str(job), "--watch"]) as watch:
        assert watch.stdout is not None
        assert watch.stdout.readline().startswith(("STARTING", "RUNNING"))

        def deleted() -> bool:
            shutil.rmtree(job, ignore_errors=True)  # the coordinator may be adding a file
            return not os.path.lexists(job)

        wait_for(deleted, 30, "the job directory to be deleted")
        code, _out, err = finish(watch, timeout=30)
    assert code == 3, err
    assert err == f"aner: job directory {job} was deleted: there is nothing to report\n"
    # The coordinator fails too: it cannot write its status any more.
    wait_for(lambda: process_gone(pid), 30, "the coordinator to end")


# --------------------------------------------------------------------------- results


def fields(stdout: str) -> dict[str, str]:
    return dict(line.split(None, 1) for line in stdout.splitlines() if line[:1] != " ")


def test_status_of_a_completed_monte_carlo_job_shows_its_estimate(completed_mc: Path) -> None:
    result = json.loads((completed_mc / "result.json").read_text())
    done = run_aner("parallel", "status", "--job", str(completed_mc))
    assert done.returncode == 0, done.stderr
    shown = fields(done.stdout)
    assert shown["estimate"] == f"pi ~ {result['estimate']:.10f}"
    assert shown["hits"] == f"{result['hits']:,} of 1,000,000 samples"
    assert shown["result"] == str(completed_mc / "result.json")
    as_json = json.loads(
        run_aner("parallel", "status", "--job", str(completed_mc), "--json").stdout
    )
    assert as_json["result"] == result
    line = run_aner("parallel", "status", "--job", str(completed_mc), "--watch").stdout
    assert line.startswith("COMPLETED 1,000,000 of 1,000,000 samples")
    assert line.rstrip().endswith(f"pi ~ {result['estimate']:.10f}; {result['hits']:,} of "
                                  "1,000,000 samples")  # fmt: skip


def test_status_of_a_completed_regression_shows_loss_and_accuracy(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "regression", "--samples", "50000", "--steps", "3", "--rate", "0.5",
        "--seed", "2", "--workers", "1", "--chunk", "10000", "--output", str(job), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((job / "result.json").read_text())
    status = run_aner("parallel", "status", "--job", str(job))
    assert status.returncode == 0, status.stderr
    shown = fields(status.stdout)
    assert shown["loss"] == (
        f"final_loss {result['final_loss']:.6f} (initial {result['initial_loss']:.6f}, 3 steps)"
    )
    assert shown["accuracy"] == f"fit_accuracy {result['fit_accuracy']:.6f} (on the fitted rows)"


# --------------------------------------------------------------------------- offline


def test_an_offline_job_shows_no_eta(tmp_path: Path, coordinators: Coordinators) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job, min_accepted=3 * int(CHUNK))
    wait_for(lambda: (s := read_status(job)) is not None and s.eta_s is not None, 30, "an ETA")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 10, "the killed coordinator to disappear")
    assert status_of(job).eta_s is not None  # the last snapshot had one
    human = run_aner("parallel", "status", "--job", str(job))
    assert human.returncode == 5
    assert "COORDINATOR_OFFLINE" in human.stdout
    assert "eta" not in fields(human.stdout)
    as_json = json.loads(run_aner("parallel", "status", "--job", str(job), "--json").stdout)
    assert as_json["observed_state"] == "COORDINATOR_OFFLINE"
    assert as_json["eta_s"] is None
    line = run_aner("parallel", "status", "--job", str(job), "--watch").stdout.strip()
    assert line.startswith("COORDINATOR_OFFLINE: ")
    assert line.endswith("ETA --")


# --------------------------------------------------------------------------- SIGHUP


def test_sighup_to_a_background_coordinator_cancels_gracefully(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--workers", "1"))
    wait_running(job)
    os.kill(pid, signal.SIGHUP)
    wait_for(lambda: process_gone(pid), 20, "the coordinator to exit")
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()
    assert "SIGHUP received: cancelling" in (job / "coordinator.log").read_text()
    assert run_aner("parallel", "status", "--job", str(job)).returncode == 4


def test_sighup_to_a_foreground_run_cancels_gracefully(tmp_path: Path) -> None:
    job = tmp_path / "job"
    argv = [
        ANER, "parallel", "run", "--samples", LONG, "--seed", "3", "--workers", "1",
        "--chunk", CHUNK, "--output", str(job),
    ]  # fmt: skip
    with spawned(argv) as run:
        wait_running(job)
        run.send_signal(signal.SIGHUP)
        code, _out, err = finish(run, timeout=30)
    assert code == 4, err
    assert "job cancelled" in err
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()
