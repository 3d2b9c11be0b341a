"""Slurm worker groups end to end, on a real single-node Slurm (the `slurm` fixture): each
`slurm` record runs as one `srun --unbuffered` job step on this machine, driven through the
CLI as a researcher would.

The node is this machine, so the tests find a step's worker process by the environment srun
gives it (SLURM_CONF of the test cluster, SLURM_JOB_NAME `aner-<identity>-...`) and can kill
it, or check that it is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import psutil
import pytest
from slurm_support import HELD_PARTITION, SlurmCluster
from support import (
    ANER,
    LONG,
    Coordinators,
    process_gone,
    run_aner,
    status_of,
    submit,
    wait_for,
    wait_running,
    write_cluster,
)

from aner_coord import parallel
from aner_coord.jobdir.status import JobState
from aner_worker.oracle import oracle_hits

pytestmark = pytest.mark.slurm

from suite_env import child_env  # noqa: E402
from support import DEPLOY, advance_until, status_where  # noqa: E402

SEED = 42
SAMPLES = 10**7
HITS = 7_856_672  # docs/contracts.md, section 1
CHUNK_MC = "1000003"


def step_workers(cluster: SlurmCluster, identity: str | None = None) -> list[psutil.Process]:
    """Worker processes running as job steps of the test cluster (of one record, if given)."""
    prefix = "aner-" if identity is None else f"aner-{identity}-"
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "worker" not in cmdline or "parallel" not in cmdline:
            continue
        try:
            environ = process.environ()
        except psutil.Error:
            continue
        if environ.get("SLURM_CONF") == str(cluster.conf) and environ.get(
            "SLURM_JOB_NAME", ""
        ).startswith(prefix):
            found.append(process)
    return found


def step_ids(processes: list[psutil.Process]) -> set[str]:
    ids = set()
    for process in processes:
        environ = process.environ()
        ids.add(f"{environ['SLURM_JOB_ID']}.{environ['SLURM_STEP_ID']}")
    return ids


def steps_gone(cluster: SlurmCluster, ids: set[str]) -> bool:
    """No worker of the test cluster and no slurmstepd of these steps is left."""
    if step_workers(cluster):
        return False
    stepds = [
        " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [""])[0].startswith("slurmstepd")
    ]
    return not any(f"[{step}]" in line for step in ids for line in stepds)


def run_job(
    tmp_path: Path,
    cluster_file: Path,
    slurm: SlurmCluster,
    *args: str,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"job-{cluster_file.name}"
    done = run_aner(
        "parallel", *args, "--cluster", str(cluster_file), "--output", str(out), "--quiet",
        env=slurm.env if env is None else env, timeout=180,
    )  # fmt: skip
    return done, out


def mc_args(samples: int = SAMPLES) -> tuple[str, ...]:
    return ("run", "--samples", str(samples), "--seed", str(SEED), "--chunk", CHUNK_MC)


def job_text(job: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in sorted(job.iterdir()) if p.is_file()
    )


def test_slurm_group_gives_the_exact_hits(tmp_path: Path, slurm: SlurmCluster) -> None:
    endpoint = f"nodelist={slurm.node}"
    cluster = write_cluster(
        tmp_path / "slurm-group",
        [("step-a", "slurm", "-", ANER, 1), ("step-b", "slurm", endpoint, ANER, 1)],
    )
    done, job = run_job(tmp_path, cluster, slurm, *mc_args())
    assert done.returncode == 0, done.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == HITS == oracle_hits(SEED, 0, SAMPLES)
    per_worker = {w["identity"]: w for w in result["workers"]}
    assert set(per_worker) == {"step-a", "step-b"}
    assert all(w["chunks"] >= 1 for w in per_worker.values())
    assert sum(w["items"] for w in per_worker.values()) == SAMPLES
    text = job_text(job)
    for private in (endpoint, "nodelist", ANER):
        assert private not in text
    wait_for(lambda: not step_workers(slurm), 10, "the steps to end")


def test_mixed_slurm_and_pipe_group_gives_the_exact_hits(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    cluster = write_cluster(
        tmp_path / "mixed-group",
        [("pipe-1", "local", "-", ANER, 1), ("step-1", "slurm", "-", ANER, 1)],
    )
    done, job = run_job(tmp_path, cluster, slurm, *mc_args())
    assert done.returncode == 0, done.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == HITS
    assert {w["identity"] for w in result["workers"]} == {"pipe-1", "step-1"}
    assert all(w["chunks"] >= 1 for w in result["workers"])


def test_slurm_and_mixed_groups_fit_the_fixture_like_a_local_run(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    rows, steps, rate, seed = 65_539, 4, 0.7, 11
    local = parallel.regression(
        samples=rows, steps=steps, rate=rate, seed=seed, execution=parallel.local(workers=1)
    )
    for name, records in {
        "fx-slurm": [("s1", "slurm", "-", ANER, 1), ("s2", "slurm", "-", ANER, 1)],
        "fx-mixed": [("l1", "local", "-", ANER, 1), ("s1", "slurm", "-", ANER, 1)],
    }.items():
        cluster = write_cluster(tmp_path / name, records)
        done, job = run_job(
            tmp_path, cluster, slurm,
            "regression", "--samples", str(rows), "--steps", str(steps), "--rate", str(rate),
            "--seed", str(seed), "--chunk", "20000",
        )  # fmt: skip
        assert done.returncode == 0, (name, done.stderr)
        data = json.loads((job / "result.json").read_text())
        assert np.max(np.abs(np.array(data["theta"]) - np.array(local.theta))) <= 1e-10, name
        assert abs(data["initial_loss"] - local.initial_loss) <= 1e-10
        assert abs(data["final_loss"] - local.final_loss) <= 1e-10
        assert abs(data["fit_accuracy"] - local.fit_accuracy) <= 1e-12
        assert data["final_loss"] < data["initial_loss"]
        per_worker = {w["identity"]: w["items_by_pass"] for w in data["workers"]}
        assert len(per_worker) == 2
        assert np.sum(list(per_worker.values()), axis=0).tolist() == [rows] * (steps + 2)


def test_a_step_killed_mid_run_fails_the_job_naming_it(tmp_path: Path, slurm: SlurmCluster) -> None:
    cluster = write_cluster(
        tmp_path / "victim-group",
        [("steady", "slurm", "-", ANER, 1), ("victim", "slurm", "-", ANER, 1)],
    )
    out = tmp_path / "job"
    coordinator = subprocess.Popen(
        [
            ANER, "parallel", "run", "--samples", "10000000000", "--seed", "1",
            "--chunk", "10000000", "--cluster", str(cluster), "--output", str(out),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm.env,
    )  # fmt: skip
    try:
        wait_for(lambda: (out / "status.json").exists(), 30, "the job's first status")
        wait_running(out, timeout=60)
        (victim,) = wait_for(lambda: step_workers(slurm, "victim"), 30, "the victim's step")
        ids = step_ids(step_workers(slurm))
        assert len(ids) == 2, ids
        victim.send_signal(signal.SIGKILL)
        _, stderr = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert coordinator.returncode == 3, stderr
    assert 'worker "victim" failed during run' in stderr
    status = status_of(out)
    assert status.state is JobState.FAILED and "victim" in (status.error or "")
    assert 0 < status.accepted < status.requested
    assert not (out / "result.json").exists()
    wait_for(lambda: steps_gone(slurm, ids), 20, "every step process to end")


def test_an_endpoint_key_outside_the_allowlist_is_refused(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    cluster = write_cluster(
        tmp_path / "bad-key",
        [
            ("fine", "slurm", "partition=debug", ANER, 1),
            ("greedy", "slurm", "partition=debug exclusive=yes", ANER, 1),
        ],
    )
    done, job = run_job(tmp_path, cluster, slurm, *mc_args())
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cluster file {cluster}, line 4:" in lines[0]
    assert 'slurm endpoint key "exclusive" is not allowed' in lines[0]
    assert "partition nodelist account qos constraint time" in lines[0]
    assert "Traceback" not in done.stderr
    assert not job.exists()


def test_a_step_that_stays_pending_fails_the_job_with_slurms_reason(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    cluster = write_cluster(
        tmp_path / "pending",
        [("queued", "slurm", f"partition={HELD_PARTITION}", ANER, 1)],
    )
    env = {**slurm.env, "ANER_SLURM_START_TIMEOUT": "1"}
    done, job = run_job(tmp_path, cluster, slurm, *mc_args(), env=env)
    assert done.returncode == 3, done.stderr
    assert 'worker "queued" failed during start: Slurm did not start its job step' in done.stderr
    assert "job PENDING, reason PartitionDown" in done.stderr
    status = status_of(job)
    assert status.state is JobState.FAILED and "PartitionDown" in (status.error or "")
    assert HELD_PARTITION not in done.stderr + job_text(job)
    # The queued request was withdrawn.
    wait_for(
        lambda: "aner-queued-" not in slurm.command("squeue", "-h", "-o", "%j").stdout,
        10,
        "the queued job to leave the queue",
    )


def test_cancel_leaves_no_step_process_behind(
    tmp_path: Path, slurm: SlurmCluster, coordinators: Coordinators
) -> None:
    cluster = write_cluster(
        tmp_path / "cancel-group",
        [("step-a", "slurm", "-", ANER, 1), ("step-b", "slurm", "-", ANER, 1)],
    )
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--cluster", str(cluster), env=slurm.env))
    wait_running(job)
    workers = wait_for(
        lambda: (found := step_workers(slurm)) and len(found) == 2 and found,
        30,
        "both steps",
    )
    ids = step_ids(workers)
    cancel = run_aner("parallel", "cancel", "--job", str(job), env=slurm.env)
    assert cancel.returncode == 4, (cancel.stdout, cancel.stderr)
    assert status_of(job).state is JobState.CANCELLED
    assert not (job / "result.json").exists()
    wait_for(lambda: process_gone(pid), 10, "the coordinator to exit")
    wait_for(lambda: steps_gone(slurm, ids), 20, "every step process to end")
    assert all(process_gone(w.pid) for w in workers)
    assert str(slurm.conf) not in (job / "coordinator.log").read_text()


def test_kill_9_of_the_coordinator_ends_every_step(
    tmp_path: Path, slurm: SlurmCluster, coordinators: Coordinators
) -> None:
    cluster = write_cluster(tmp_path / "orphans", [("step-a", "slurm", "-", ANER, 1)])
    job = tmp_path / "job"
    pid = coordinators.add(submit(job, LONG, "--cluster", str(cluster), env=slurm.env))
    wait_running(job)
    (worker,) = wait_for(lambda: step_workers(slurm), 30, "the step")
    ids = step_ids([worker])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 10, "the killed coordinator to disappear")
    # srun sees end of input and passes it on; the worker ends, and with it the step.
    wait_for(lambda: steps_gone(slurm, ids), 30, "the orphaned step to end by itself")
    assert run_aner("parallel", "status", "--job", str(job), env=slurm.env).returncode == 5


def _submit_template(
    tmp_path: Path, slurm: SlurmCluster, jobs: Path, aner_job: str, **settings: str
) -> str:
    """Submit deploy/aner-slurm.sbatch on one node running `aner parallel ANER_JOB`, with its
    job directories under `jobs`; the Slurm job id."""
    env = {
        **slurm.env,
        **settings,
        "ANER": ANER,
        "ANER_DEPLOY": str(DEPLOY),
        "ANER_JOBS_DIR": str(jobs),
        "ANER_JOB": aner_job,
    }
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", str(DEPLOY / "aner-slurm.sbatch")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30, check=False,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def test_sbatch_template_runs_a_coordinator_with_one_step_per_node(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    jobs = tmp_path / "jobs"
    job_id = _submit_template(
        tmp_path, slurm, jobs, f"run --samples {SAMPLES} --seed {SEED} --chunk {CHUNK_MC}"
    )
    wait_for(
        lambda: job_id not in slurm.command("squeue", "-h", "-o", "%i").stdout.split(),
        120,
        "the batch job to end",
    )
    output = (tmp_path / f"aner-{job_id}.out").read_text()
    job = jobs / f"slurm-{job_id}"
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == HITS, output
    assert [w["identity"] for w in result["workers"]] == ["slurm-01"]
    assert output.splitlines()[-1].startswith("COMPLETED 10,000,000 of 10,000,000")
    cluster_file = jobs / f"slurm-{job_id}.cluster"
    assert (cluster_file.stat().st_mode & 0o777) == 0o600
    assert cluster_file.read_text().splitlines()[2:] == [
        f'worker "slurm-01" slurm "nodelist={slurm.node}" "{ANER}" {slurm.cpus}'
    ]
    # The worker ran as a step of the batch job's allocation, not as a job of its own.
    assert f"launch task StepId={job_id}.0 " in (slurm.directory / "slurmd.log").read_text()
    assert slurm.node not in job_text(job)


def test_cluster_file_generator_outside_an_allocation_says_so(tmp_path: Path) -> None:
    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    done = subprocess.run(
        [str(DEPLOY / "slurm-cluster-file"), str(tmp_path / "c"), ANER],
        capture_output=True, text=True, env=env, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "run it inside an allocation" in done.stderr
    assert not (tmp_path / "c").exists()


def test_a_step_waiting_in_a_busy_allocation_fails_naming_the_allocation(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    granted = slurm.command(
        "salloc", "--no-shell", "--ntasks=1", f"--cpus-per-task={slurm.cpus}",
        "--job-name=aner-test-allocation",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    job_id = granted.stderr.split("Granted job allocation ")[1].split()[0]
    blocker = subprocess.Popen(
        ["srun", f"--jobid={job_id}", "--ntasks=1", f"--cpus-per-task={slurm.cpus}",
         "sleep", "120"],
        env=slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(
            lambda: f"{job_id}.0" in slurm.command("squeue", "-h", "--steps", "-o", "%i").stdout,
            30,
            "the step that takes every CPU of the allocation",
        )
        cluster = write_cluster(tmp_path / "busy", [("late", "slurm", "-", ANER, 1)])
        env = {**slurm.env, "SLURM_JOB_ID": job_id, "ANER_SLURM_START_TIMEOUT": "1"}
        done, job = run_job(tmp_path, cluster, slurm, *mc_args(), env=env)
    finally:
        slurm.command("scancel", job_id)
        blocker.wait(30)
    assert done.returncode == 3, done.stderr
    assert 'worker "late" failed during start: Slurm did not start its job step' in done.stderr
    # (srun's own words, "Requested nodes are busy", follow when it has said them in time)
    assert f"the step waits for resources of allocation {job_id}, state RUNNING" in done.stderr
    assert status_of(job).state is JobState.FAILED
    # Nothing of the worker's step ran, and srun gave up waiting.
    assert not step_workers(slurm, "late")


def test_a_bad_start_timeout_is_refused_before_anything_starts(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    cluster = write_cluster(tmp_path / "timeout", [("step-a", "slurm", "-", ANER, 1)])
    env = {**slurm.env, "ANER_SLURM_START_TIMEOUT": "soon"}
    done, job = run_job(tmp_path, cluster, slurm, *mc_args(), env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "aner: ANER_SLURM_START_TIMEOUT must be a positive number of seconds, got 'soon'"
    ]
    assert not job.exists()


def test_a_missing_executable_on_the_node_fails_at_start(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    missing = "/nonexistent/aner-on-the-node"
    cluster = write_cluster(tmp_path / "missing", [("nowhere", "slurm", "-", missing, 1)])
    done, job = run_job(tmp_path, cluster, slurm, *mc_args())
    assert done.returncode == 3, done.stderr
    assert 'worker "nowhere" failed during start: executable not found on the Slurm node' in (
        done.stderr
    )
    assert missing not in done.stderr + job_text(job)


def test_sigterm_to_the_sbatch_script_cancels_the_aner_job_and_every_step(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    jobs = tmp_path / "jobs"
    job_id = _submit_template(
        tmp_path, slurm, jobs, f"run --samples {LONG} --seed 1 --chunk 4000000"
    )
    job = jobs / f"slurm-{job_id}"
    try:
        wait_for(lambda: (job / "status.json").exists(), 60, "the aner job directory")
        wait_running(job, timeout=60)
        workers = wait_for(lambda: step_workers(slurm), 30, "the worker step")
        ids = step_ids(workers)
        # The batch shell only, as the time limit does (--signal=B:TERM@60 in the template).
        assert slurm.command("scancel", "--batch", "--signal=TERM", job_id).returncode == 0
        wait_for(
            lambda: job_id not in slurm.command("squeue", "-h", "-o", "%i").stdout.split(),
            60,
            "the batch job to end",
        )
    finally:
        slurm.command("scancel", job_id)
    wait_for(lambda: steps_gone(slurm, ids), 30, "every step process to end")
    status = status_of(job)
    assert status.state is JobState.CANCELLED, status
    assert not (job / "result.json").exists()
    # The script's trap asked aner to cancel, and its watcher saw the job end.
    output = (tmp_path / f"aner-{job_id}.out").read_text()
    assert "cancel requested; waiting" in output
    assert any(line.startswith("CANCELLED ") for line in output.splitlines()), output


def _queued(slurm: SlurmCluster, job_id: str) -> bool:
    return job_id in slurm.command("squeue", "-h", "-o", "%i").stdout.split()


def _held_until_begin_time(slurm: SlurmCluster, job_id: str) -> bool:
    """Whether the batch job is pending, held by its begin time (as a requeued job is)."""
    listed = slurm.command("squeue", "-h", "-j", job_id, "-o", "%T %r").stdout.split()
    return listed == ["PENDING", "BeginTime"]


def test_a_training_the_time_limit_stops_is_requeued_and_resumed_from_its_checkpoint(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """The template's pattern for a training longer than one allocation: TERM ahead of the
    time limit (here: any TERM, ANER_REQUEUE_WITHIN covering the whole allocation) cancels
    the aner job, which keeps its committed steps, and requeues the batch job; the script,
    run again, resumes the job directory to completion."""
    jobs = tmp_path / "jobs"
    plan = "train --teacher 4000,16,4 --hidden 32,32 --batch 128 --epochs 4 --patience 100 --seed 3"
    job_id = _submit_template(
        tmp_path, slurm, jobs, plan, ANER_REQUEUE_WITHIN="1000000000", ANER_CHECKPOINT_S="3600"
    )
    job = jobs / f"slurm-{job_id}"
    try:
        wait_for(lambda: (job / "status.json").exists(), 60, "the aner job directory")
        pid = status_of(job).pid
        os.kill(pid, signal.SIGSTOP)  # held until the time limit's signal is on its way
        try:
            committed = status_where(
                job, lambda s: s.state is JobState.RUNNING and (s.committed_steps or 0) > 0
            )
            advance_until(pid, committed, "committed steps")
            assert slurm.command("scancel", "--batch", "--signal=TERM", job_id).returncode == 0
            wait_for(lambda: (job / "cancel-request").exists(), 60, "the script's cancel")
        finally:
            os.kill(pid, signal.SIGCONT)
        # Slurm holds a requeued batch job for two minutes (reason BeginTime) before it may
        # start again; the test lets it start ten seconds after it is held, as a user may.
        # Not at once: slurmd refuses a launch within the second its credential was revoked
        # ("Job credential revoked"), and the job would end without running.
        wait_for(lambda: _held_until_begin_time(slurm, job_id), 600, "the requeued job")
        started = slurm.command("scontrol", "update", f"JobId={job_id}", "StartTime=now+10")
        assert started.returncode == 0, started.stderr
        wait_for(
            lambda: (job / "result.json").exists() or not _queued(slurm, job_id),
            600,
            "the requeued job's result",
        )
        output = (tmp_path / f"aner-{job_id}.out").read_text()
        assert (job / "result.json").exists(), output  # the batch job ended without one
    finally:
        wait_for(
            lambda: job_id not in slurm.command("squeue", "-h", "-o", "%i").stdout.split(),
            120,
            "the batch job to end",
        )
        slurm.command("scancel", job_id)
    result = json.loads((job / "result.json").read_text())
    status = status_of(job)
    assert (status.state, status.resumes) == (JobState.COMPLETED, 1)
    assert result["steps_recovered"] > 0
    output = (tmp_path / f"aner-{job_id}.out").read_text()
    assert f"requeueing to resume {job}" in output, output
