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
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
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
from aner_worker.leases import Holder, Lease, LeaseTable, private_dir
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


def first_and_last(job: Path) -> tuple[float, float]:
    """When the job handed out its first task and read its last answer (Unix time)."""
    lines = [json.loads(line) for line in (job / "timeline.jsonl").read_text().splitlines()]
    walls = {line["segment"]: line["wall"] for line in lines if line["kind"] == "segment"}
    tasks = [t for t in lines if t["kind"] == "task"]
    return (
        min(walls[t["segment"]] + t["dispatched"] for t in tasks),
        max(walls[t["segment"]] + t["received"] for t in tasks),
    )


def test_narrow_jobs_submitted_behind_a_wide_one_do_not_overtake_it(
    tmp_path: Path, env: dict[str, str], coordinators: Coordinators
) -> None:
    """One of the two slots is held: a job of two workers queues, and two jobs of one worker
    submitted after it, which one free slot would fit, queue behind it; `jobs` shows their
    places, and they start in that order once the slot is freed."""
    held = hold_slots(env, 1)
    wide, narrow = tmp_path / "wide", [tmp_path / "narrow-1", tmp_path / "narrow-2"]
    assert run_job(env, wide, 31, "--background", "--quiet").returncode == 0
    for seed, job in enumerate(narrow, 32):
        done = run_aner(
            "parallel", "run", "--samples", str(SAMPLES), "--seed", str(seed), "--workers", "1",
            "--chunk", "125000", "--output", str(job), "--background", "--quiet", env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    for job in (wide, *narrow):
        status = status_of(job)
        coordinators.add(status.pid)
        assert status.state is JobState.QUEUED, (job, status.state)
    listed = json.loads(run_aner("parallel", "jobs", "--json", env=env).stdout)["jobs"]
    assert [(j["directory"], j["position"]) for j in listed] == [
        (str(wide), 1), (str(narrow[0]), 2), (str(narrow[1]), 3)
    ]  # fmt: skip
    shown = run_aner("parallel", "jobs", env=env).stdout
    assert shown.count("in this host's queue for CPU slots") == 3, shown

    held.release()
    for seed, job in enumerate((wide, *narrow), 31):
        wait_status(job, lambda s: s.state is JobState.COMPLETED, 120, "COMPLETED")
        assert result_of(job)["hits"] == oracle_hits(seed, 0, SAMPLES)
    spans = [first_and_last(job) for job in (wide, *narrow)]
    # The wide job held both slots: the narrow ones began after its last answer.
    assert all(spans[0][1] < span[0] for span in spans[1:]), spans
    assert not list((tmp_path / "rt" / "slots").glob("ticket-*"))  # every ticket returned


# Started by the test: makes itself the subreaper of what it starts (so that a killed
# coordinator's workers become its children, and their ends can be read), runs the
# coordinator, kills it with SIGKILL when told, and prints how each orphan ended.
REAPER = r"""
import ctypes, json, os, signal, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
coordinator = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
print(coordinator.pid, flush=True)
sys.stdin.readline()
os.kill(coordinator.pid, signal.SIGKILL)
coordinator.wait()
ends = {}
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    ends[pid] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status)
print(json.dumps(ends), flush=True)
"""


def test_a_pipe_workers_coordinator_killed_takes_its_workers_with_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`kill -9` of a pipe group's coordinator mid-task: each worker is killed by the
    kernel as its coordinator ends (SIGKILL, its parent-death signal), not left computing
    until it notices its closed input."""
    cluster = write_cluster(
        tmp_path / "pair.cluster", [("p1", "local", "-", ANER, 1), ("p2", "local", "-", ANER, 1)]
    )
    job = tmp_path / "job"
    argv = [
        ANER, "parallel", "run", "--samples", LONG, "--seed", "1", "--cluster", str(cluster),
        "--quiet", "--output", str(job),
    ]  # fmt: skip
    with spawned([sys.executable, "-c", REAPER, *argv], env=env, stdin=subprocess.PIPE) as reaper:
        assert reaper.stdout is not None and reaper.stdin is not None
        coordinator = int(reaper.stdout.readline())
        wait_running(job, timeout=120)
        workers = [p.pid for p in psutil.Process(coordinator).children()]
        assert len(workers) == 2
        reaper.stdin.write("kill\n")
        reaper.stdin.flush()
        ends = {int(pid): end for pid, end in json.loads(reaper.stdout.readline()).items()}
    assert {pid: ends.get(pid) for pid in workers} == {pid: signal.SIGKILL for pid in workers}
    assert all(not psutil.pid_exists(pid) for pid in workers)


def test_ssh_records_on_this_host_take_its_slot_leases(
    tmp_path: Path, env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    """Two SSH records that reach this very host (a loopback sshd): their handshakes name
    this host, so their slots come from its lease table like local threads'. 2 + 1 slots on
    a table of 2 cannot all be held: the job fails naming the record that would exceed it.
    One record of 2 slots runs, and a job that wants the host's slots meanwhile waits."""
    sshd = request.getfixturevalue("sshd")
    env = {**sshd.env, **{k: env[k] for k in ("ANER_RUNTIME_DIR", "SLURM_CPUS_PER_TASK")}}
    env.pop("ANER_LEASES", None)
    records = [("s1", "ssh", sshd.alias, ANER, 2), ("s2", "ssh", sshd.alias, ANER, 1)]
    three = write_cluster(tmp_path / "three.cluster", records)
    done = run_aner(
        "parallel", "run", "--samples", "2000000", "--seed", "3", "--chunk", "200000",
        "--cluster", str(three), "--output", str(tmp_path / "three"), env=env,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert re.search(
        r'worker "s[12]" failed during lease: runs on this host \(its host identity is this '
        r"coordinator's\), where this job's workers would take 3 CPU slots of its 2",
        done.stderr,
    ), done.stderr

    two = write_cluster(tmp_path / "two.cluster", records[:1])
    job = tmp_path / "two"
    argv = [
        ANER, "parallel", "run", "--samples", LONG, "--seed", "3", "--cluster", str(two),
        "--quiet", "--output", str(job),
    ]  # fmt: skip
    with spawned(argv, env=env) as proc:
        wait_running(job, timeout=120)
        table = LeaseTable(2, private_dir("slots", env))
        held = [h for _, h in table.holders() if h is not None]
        assert [(h.kind, h.slots) for h in held] == [("worker s1 on this host", 2)] * 2
        refused = run_job(env, tmp_path / "local", 41, "--no-wait")
        assert refused.returncode == 2, refused.stderr
        assert "held by a worker s1 on this host" in refused.stderr, refused.stderr
        proc.send_signal(signal.SIGINT)
        finish(proc, 120)
    assert [h for _, h in table.holders()] == [None, None]


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
        f'#!/bin/sh\nANER_LEASES=on ANER_RUNTIME_DIR="{env["ANER_RUNTIME_DIR"]}" '
        f'exec "{ANER}" "$@" '
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


def compute_intervals(job: Path) -> list[tuple[float, float, float]]:
    """Each task's compute interval in Unix time (its segment's `wall` plus its mapped
    `started` and `ended`) and its clock's uncertainty, from the job's timeline."""
    lines = [json.loads(line) for line in (job / "timeline.jsonl").read_text().splitlines()]
    walls = {line["segment"]: line["wall"] for line in lines if line["kind"] == "segment"}
    return [
        (walls[t["segment"]] + t["started"], walls[t["segment"]] + t["ended"], t["clock_error_s"])
        for t in lines
        if t["kind"] == "task"
    ]


def test_waiting_for_a_granted_slot_is_not_compute(tmp_path: Path, env: dict[str, str]) -> None:
    """Two coordinators share one local worker host granted one slot. The test holds that
    slot until both jobs have tasks waiting for it, so that they must take turns: each
    timeline counts a task's compute from when its slot got the grant, so the two jobs'
    compute intervals do not overlap (counted from when a slot took the task, the first
    tasks of both spanned the whole wait)."""
    granted = tmp_path / "granted-aner"
    granted.write_text(
        f'#!/bin/sh\nANER_RUNTIME_DIR="{env["ANER_RUNTIME_DIR"]}" exec "{ANER}" "$@" '
        "--max-slots 1\n"
    )
    granted.chmod(0o700)
    one = write_cluster(tmp_path / "one.cluster", [("g1", "local", "-", str(granted), 1)])
    table = LeaseTable(1, private_dir("granted", env))
    gate = table.take(1, Holder(os.getpid(), job=TEST_JOB, kind="test", slots=1))
    assert isinstance(gate, Lease)
    jobs = [tmp_path / "a", tmp_path / "b"]
    argv = [
        ANER, "parallel", "run", "--samples", "4000000", "--seed", "5", "--chunk", "1000000",
        "--cluster", str(one), "--quiet", "--output",
    ]  # fmt: skip
    with spawned([*argv, str(jobs[0])], env=env) as a, spawned([*argv, str(jobs[1])], env=env) as b:
        try:
            for job in jobs:
                wait_status(job, lambda s: s.state is JobState.RUNNING, 120, "RUNNING")
        finally:
            gate.release()
        assert finish(a, 120)[0] == 0 and finish(b, 120)[0] == 0
    assert result_of(jobs[0])["hits"] == result_of(jobs[1])["hits"] == oracle_hits(5, 0, 4_000_000)
    tasks = sorted(interval for job in jobs for interval in compute_intervals(job))
    assert len(tasks) == 8
    assert all(x[1] - x[2] - y[2] <= y[0] for x, y in itertools.pairwise(tasks)), tasks


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
