"""Sharing a machine, for real (docs/contracts.md, section 13): jobs that queue for this
host's CPU slots and run in turn, `--no-wait`, a queued job cancelled, `kill -9` of the
running coordinator letting the next start, `aner parallel jobs`, and two coordinators
sharing one worker host granted one slot (`--max-slots 1`).

Leases are off for the rest of the suite; here they are on, with a lease table of the test's
own (`ANER_RUNTIME_DIR` in `tmp_path`) of two slots (`SLURM_CPUS_PER_TASK=2`, a scheduler's
hint). The test holds both slots itself while it submits the jobs, so that they queue
without a long first job.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import (
    ANER,
    HOLDING_JOB,
    LONG,
    Coordinators,
    finish,
    hold_slots,
    leased_env,
    result_of,
    run_aner,
    spawned,
    status_of,
    wait_running,
    wait_status,
    write_cluster,
)

from aner_coord.jobdir.status import JobState, QueuedBehind
from aner_worker.leases import Lease
from aner_worker.oracle import oracle_hits

SAMPLES = 1_000_000
TEST_JOB = HOLDING_JOB


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user whose host has two CPU slots, leases on."""
    return leased_env(tmp_path, 2)


def hold_both(env: dict[str, str]) -> Lease:
    return hold_slots(env, 2)


def run_job(
    env: dict[str, str], job: Path, seed: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_aner(
        "parallel", "run", "--samples", str(SAMPLES), "--seed", str(seed), "--workers", "2",
        "--chunk", "125000", "--output", str(job), *extra, env=env,
    )  # fmt: skip


def test_jobs_queue_for_the_slots_and_run_in_turn(
    tmp_path: Path, env: dict[str, str], coordinators: Coordinators
) -> None:
    held = hold_both(env)
    behind = [QueuedBehind(TEST_JOB, "test", os.getpid(), 2)]
    jobs = {seed: tmp_path / f"j{seed}" for seed in (11, 12, 13, 14)}
    for seed, job in jobs.items():
        done = run_job(env, job, seed, "--background", "--quiet")
        assert done.returncode == 0, done.stderr
        status = status_of(job)
        coordinators.add(status.pid)
        assert (status.state, status.queued_behind) == (JobState.QUEUED, behind)

    # --no-wait: refused at once, naming the holder, nothing made.
    refused = run_job(env, tmp_path / "refused", 15, "--no-wait")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert f"held by job {TEST_JOB} (test, pid {os.getpid()}, 2 slot(s))" in refused.stderr
    assert not (tmp_path / "refused").exists()

    shown = run_aner("parallel", "status", "--job", str(jobs[11]), env=env)
    assert shown.returncode == 0
    assert f"queued    waiting for CPU slots held by job {TEST_JOB}" in shown.stdout
    listed = json.loads(run_aner("parallel", "jobs", "--json", env=env).stdout)["jobs"]
    assert [(j["directory"], j["state"]) for j in listed] == [
        (str(job), "QUEUED") for job in jobs.values()
    ]

    # A queued job cancelled: CANCELLED at once, no result, nothing computed.
    cancelled = run_aner("parallel", "cancel", "--job", str(jobs[14]), env=env)
    assert cancelled.returncode == 4, cancelled.stderr
    assert status_of(jobs.pop(14)).state is JobState.CANCELLED

    held.release()
    finals = [
        wait_status(job, lambda s: s.state is JobState.COMPLETED, 120, "COMPLETED")
        for job in jobs.values()
    ]
    for seed, job in jobs.items():
        assert result_of(job)["hits"] == oracle_hits(seed, 0, SAMPLES)  # a solo run's
    # One at a time: each ran (from its coordinator's start to its last status) while
    # the others waited.
    spans = sorted((s.created_at, s.updated_at) for s in finals)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_kill_9_of_the_running_coordinator_lets_the_next_start(
    tmp_path: Path, env: dict[str, str], coordinators: Coordinators
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    done = run_aner(
        "parallel", "run", "--samples", LONG, "--seed", "1", "--workers", "2",
        "--output", str(first), "--background", "--quiet", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    holder = coordinators.add(wait_running(first).pid)
    assert run_job(env, second, 21, "--background", "--quiet").returncode == 0
    queued = status_of(second)
    coordinators.add(queued.pid)
    assert queued.state is JobState.QUEUED
    assert [(q.kind, q.pid, q.slots) for q in queued.queued_behind] == [("monte-carlo", holder, 2)]

    killed_at = time.monotonic()
    os.kill(holder, signal.SIGKILL)
    wait_status(second, lambda s: s.state is not JobState.QUEUED, 60, "leaving QUEUED")
    started_s = time.monotonic() - killed_at
    print(f"kill -9 to the next job's start: {started_s * 1000:.0f} ms")
    wait_status(second, lambda s: s.state is JobState.COMPLETED, 120, "COMPLETED")
    assert result_of(second)["hits"] == oracle_hits(21, 0, SAMPLES)
    assert run_aner("parallel", "status", "--job", str(first), env=env).returncode == 5
    # Issue 38, item 6: the time queued counts since submission, not since the start.
    final = status_of(second)
    assert final.submitted_at == queued.submitted_at == queued.created_at < final.created_at
    shown = run_aner("parallel", "status", "--job", str(second), env=env).stdout
    line = next(x for x in shown.splitlines() if x.startswith("elapsed"))
    assert line == (
        f"elapsed   {final.updated_at - queued.created_at:.1f} s since submission, "
        f"{final.elapsed_s:.1f} s since start"
    )


@pytest.mark.parametrize("transport", ["local", "ssh"])
def test_a_worker_granted_one_slot_computes_one_task_at_a_time(
    tmp_path: Path, env: dict[str, str], transport: str, request: pytest.FixtureRequest
) -> None:
    """Two coordinators share one worker host (local pipes, or a loopback SSH host) whose
    owner granted one slot (the wrapper is what an `authorized_keys` forced command would
    be; over SSH the session's environment is sshd's, so it names the lease table itself);
    the workers' own records show no two tasks computing at once, and a cluster file asking
    for two slots is refused."""
    endpoint = "-"
    if transport == "ssh":
        sshd = request.getfixturevalue("sshd")
        env = {**sshd.env, **{k: env[k] for k in ("ANER_RUNTIME_DIR", "SLURM_CPUS_PER_TASK")}}
        env.pop("ANER_LEASES", None)
        endpoint = sshd.alias
    granted = tmp_path / "granted-aner"
    granted.write_text(
        f'#!/bin/sh\nANER_RUNTIME_DIR="{env["ANER_RUNTIME_DIR"]}" exec "{ANER}" "$@" '
        f'--max-slots 1 2>>"{tmp_path}/worker-$$.log"\n'
    )
    granted.chmod(0o700)
    one = write_cluster(tmp_path / "one.cluster", [("g1", transport, endpoint, str(granted), 1)])
    two = write_cluster(tmp_path / "two.cluster", [("g2", transport, endpoint, str(granted), 2)])
    argv = [
        ANER, "parallel", "run", "--samples", "2000000", "--seed", "3", "--chunk", "200000",
        "--cluster", str(one), "--quiet", "--output",
    ]  # fmt: skip
    with (
        spawned([*argv, str(tmp_path / "a")], env=env) as a,
        spawned([*argv, str(tmp_path / "b")], env=env) as b,
    ):
        assert finish(a, 120)[0] == 0 and finish(b, 120)[0] == 0
    expected = oracle_hits(3, 0, 2_000_000)
    assert result_of(tmp_path / "a")["hits"] == result_of(tmp_path / "b")["hits"] == expected
    spans = sorted(
        (float(words[-3]), float(words[-1]))
        for log in tmp_path.glob("worker-*.log")
        for words in (line.split() for line in log.read_text().splitlines())
        if "on granted slot 0" in " ".join(words)
    )
    assert len(spans) == 20  # ten tasks of each job
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(spans))

    refused = run_aner(
        "parallel", "run", "--samples", "2000000", "--seed", "3", "--chunk", "200000",
        "--cluster", str(two), "--output", str(tmp_path / "c"), env=env,
    )  # fmt: skip
    assert refused.returncode == 3
    assert "grant is 1 (--max-slots 1, set on its host)" in refused.stderr


def test_after_starts_a_job_when_another_completes_and_fails_it_when_that_one_cannot(
    tmp_path: Path, env: dict[str, str], coordinators: Coordinators
) -> None:
    first, chained = tmp_path / "first", tmp_path / "chained"
    assert run_job(env, first, 31).returncode == 0
    done = run_job(env, chained, 32, "--after", str(first))
    assert done.returncode == 0, done.stderr
    assert result_of(chained)["hits"] == oracle_hits(32, 0, SAMPLES)

    # The failure path, without computing anything: the job to run after waits for the
    # slots the test holds, and is cancelled.
    held = hold_both(env)
    queued, after = tmp_path / "queued", tmp_path / "after"
    assert run_job(env, queued, 33, "--background", "--quiet").returncode == 0
    coordinators.add(status_of(queued).pid)
    assert (
        run_job(env, after, 34, "--after", str(queued), "--background", "--quiet").returncode == 0
    )
    waiting = status_of(after)
    coordinators.add(waiting.pid)
    assert waiting.state is JobState.QUEUED
    assert [(q.job, q.slots) for q in waiting.queued_behind] == [
        (json.loads((queued / "run-manifest.json").read_text())["job"][:12], 0)
    ]
    assert run_aner("parallel", "cancel", "--job", str(queued), env=env).returncode == 4
    failed = wait_status(after, lambda s: s.terminal, 60, "ended")
    assert failed.state is JobState.FAILED
    assert (
        failed.error == f"the job it was to run after, {queued}, ended CANCELLED: it did not start"
    )
    assert not (after / "result.json").exists()
    held.release()

    missing = run_job(env, tmp_path / "never", 35, "--after", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "there is no job directory at" in missing.stderr and "(--after)" in missing.stderr
