"""A queue that survives a reboot (issue 36, item 4): jobs QUEUED or RUNNING when the host
went down are listed by `aner parallel jobs` as interrupted, from the durable queue (the
runtime directory, and the job index in it, is gone), and `aner parallel jobs
--resume-interrupted` resumes each from its ledger, in queue order, to the result an
undisturbed run gives. The reboot is simulated: every coordinator and worker killed with
SIGKILL, the runtime directory removed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path

import psutil
from support import (
    Coordinators,
    gated_pair,
    leased_env,
    result_of,
    run_aner,
    status_of,
    wait_running,
    wait_status,
)

from aner_coord.jobdir.status import JobState
from aner_worker.oracle import oracle_hits

SAMPLES = 2_000_000


def _kill_everything(pid: int) -> None:
    """What a reboot does to a coordinator: it and its worker processes die at once."""
    coordinator = psutil.Process(pid)
    for process in [*coordinator.children(recursive=True), coordinator]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs([coordinator], timeout=60)


def _ids(job: Path) -> str:
    return str(json.loads((job / "run-manifest.json").read_text())["job"])[:12]


def test_jobs_a_reboot_interrupted_are_listed_and_resumed_in_queue_order(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    env = leased_env(tmp_path, 2)  # its own lease table, job index and durable queue
    running, queued = tmp_path / "running", tmp_path / "queued"
    with gated_pair(tmp_path / "pair.cluster") as (cluster, gate):
        # RUNNING mid-way (its gated worker holds its tasks), on both slots of the host ...
        done = run_aner(
            "parallel", "run", "--samples", str(SAMPLES), "--seed", "5", "--chunk", "125000",
            "--cluster", str(cluster), "--output", str(running), "--background", "--quiet",
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        first = wait_running(running)
        coordinators.add(first.pid)
        # ... and one QUEUED behind it.
        done = run_aner(
            "parallel", "run", "--samples", str(SAMPLES), "--seed", "6", "--workers", "1",
            "--chunk", "125000", "--output", str(queued), "--background", "--quiet", env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        second = status_of(queued)
        coordinators.add(second.pid)
        assert second.state is JobState.QUEUED
        accepted = status_of(running).accepted

        # The reboot (the queued job first: killing the running one frees its slots).
        _kill_everything(second.pid)
        _kill_everything(first.pid)
        shutil.rmtree(tmp_path / "rt")

        listed = json.loads(run_aner("parallel", "jobs", "--json", env=env).stdout)["jobs"]
        assert [(j["directory"], j["recorded"], j["interrupted"]) for j in listed] == [
            (str(running), "RUNNING", True),
            (str(queued), "QUEUED", True),
        ]
        shown = run_aner("parallel", "jobs", env=env).stdout
        assert "interrupted (RUNNING when its coordinator went)" in shown

        gate.open()  # before the resume starts that worker again
        resumed = run_aner("parallel", "jobs", "--resume-interrupted", env=env, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.splitlines() == [
            f"resumed job {_ids(running)} ({running})",
            f"resumed job {_ids(queued)} ({queued})",
        ]
        for job in (running, queued):
            coordinators.add(status_of(job).pid)
        finals = [
            wait_status(job, lambda s: s.state is JobState.COMPLETED, 300, "COMPLETED")
            for job in (running, queued)
        ]
    assert result_of(running)["hits"] == oracle_hits(5, 0, SAMPLES)
    assert result_of(queued)["hits"] == oracle_hits(6, 0, SAMPLES)
    assert finals[0].recovered >= accepted and finals[0].resumes == 1
    # Ended: nothing is interrupted any more, and a second run resumes nothing.
    again = run_aner("parallel", "jobs", "--resume-interrupted", env=env)
    assert (again.returncode, again.stdout) == (0, "no interrupted jobs of yours on this host\n")
    assert not os.listdir(tmp_path / "state" / "queue")
