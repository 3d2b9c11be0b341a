"""Durable jobs (docs/contracts.md, section 11) with real parts: a real sshd worker and pipe workers
killed with SIGKILL mid-run, a background coordinator killed three times and resumed each
time, a torn ledger, and the refusals of `resume`. Every surviving job must end with the
exact result of an undisturbed run."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from support import (
    ANER,
    LONG,
    Coordinators,
    GatedWorker,
    gated_pair,
    process_gone,
    result_of,
    run_aner,
    status_of,
    wait_for,
    wait_status,
    write_cluster,
    write_pipe_pair,
)

from aner_coord import parallel
from aner_coord.jobdir.ledger import LEDGER, Accepted, scan
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_coord.jobdir.timeline import Segment, TaskLine, read_timeline

HITS_1E9 = 785_386_550  # docs/contracts.md, section 1, seed 42


def workers_of(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in children if "worker" in " ".join(p.cmdline())]


def background(
    job: Path, *args: str, env: dict[str, str] | None = None, samples: str = "1e9"
) -> int:
    done = run_aner(
        "parallel", "run", "--samples", samples, "--seed", "42", "--output", str(job),
        "--background", *args, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return status_of(job).pid


def is_gated(process: psutil.Process, gate: GatedWorker) -> bool:
    """Whether `process` is `gate`'s worker: its grant wrapper, or the worker it became."""
    argv = process.cmdline()
    return str(gate.executable) in argv or "--max-slots" in argv


def chunks_of(status: StatusSnapshot, identity: str) -> int:
    return next(w.chunks for w in status.workers if w.identity == identity)


def wait_accepted(job: Path, at_least: int) -> None:
    wait_status(
        job,
        lambda s: s.state is JobState.RUNNING and s.accepted >= at_least,
        120,
        f"{at_least:,} accepted",
    )


def test_a_killed_ssh_worker_is_survived_with_the_exact_hits(
    tmp_path: Path,
    sshd,
    coordinators: Coordinators,  # type: ignore[no-untyped-def]
) -> None:
    # The pipe worker is gated (`GatedWorker`): it holds the tasks it is sent, or the chunk
    # kept for it, so the job is mid-run, whatever the machine's speed, until it is opened.
    gate = GatedWorker(tmp_path, "pipe-1")
    gate.close()
    try:
        cluster = write_cluster(
            tmp_path / "c",
            [
                ("remote-1", "ssh", sshd.alias, ANER, 1),
                ("pipe-1", "local", "-", str(gate.executable), 1),
            ],
        )
        job = tmp_path / "job"
        args = ("--cluster", str(cluster), "--chunk", "10000000", "--retries", "1")
        pid = coordinators.add(background(job, *args, env=sshd.env))
        # Mid-run: the ssh worker past its handshake, with work accepted.
        wait_status(
            job,
            lambda s: (
                s.state is JobState.RUNNING
                and any(w.identity == "remote-1" and w.chunks > 0 for w in s.workers)
            ),
            120,
            "the ssh worker working",
        )
        remote = workers_of(sshd.process.pid)
        assert len(remote) == 1
        remote[0].kill()
        # Its loss is recorded while the job cannot end; then the pipe worker computes.
        wait_status(job, lambda s: bool(s.losses) or s.state.terminal, 120, "the loss")
    finally:
        gate.open()
    final = wait_status(job, lambda s: s.state.terminal, 120, "the job to end")
    assert final.state is JobState.COMPLETED, final.error
    result = result_of(job)
    assert result["hits"] == HITS_1E9
    [loss] = result["losses"]
    assert loss["identity"] == "remote-1" and loss["phase"] == "run"
    assert [loss.identity for loss in final.losses] == ["remote-1"]
    wait_for(lambda: process_gone(pid), 30, "the coordinator to exit")


def test_without_retries_a_lost_worker_still_fails_the_job(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    cluster = write_pipe_pair(tmp_path / "c")
    job = tmp_path / "job"
    # A job that only ends when it fails (or is cancelled): it is running when a worker dies.
    args = ("--cluster", str(cluster), "--chunk", "10000000")
    pid = coordinators.add(background(job, *args, samples=LONG))
    # Both past their handshake (each has work accepted), so that whichever is killed is
    # lost in its run phase: on a loaded machine one may still be starting when the other
    # has results.
    wait_status(
        job,
        lambda s: s.state is JobState.RUNNING and all(w.items > 0 for w in s.workers),
        120,
        "work accepted from both workers",
    )
    workers_of(pid)[0].kill()
    final = wait_status(job, lambda s: s.state.terminal, 120, "the job to end")
    assert final.state is JobState.FAILED
    assert "failed during run: the worker closed its connection" in (final.error or "")
    assert not (job / "result.json").exists()


def test_a_killed_pipe_worker_mid_step_gives_the_undisturbed_parameters(tmp_path: Path) -> None:
    # 120 steps (a few seconds): the first status snapshot may already show half of a
    # shorter job done, and the kill must land before its last step.
    kwargs = {"samples": 1_000_003, "steps": 120, "rate": 0.5, "seed": 11}
    undisturbed = parallel.regression(**kwargs, execution=parallel.local(2, chunk=100_000))
    cluster = write_pipe_pair(tmp_path / "c")
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "regression", "--samples", "1000003", "--steps", "120", "--rate", "0.5",
        "--seed", "11", "--chunk", "100000", "--cluster", str(cluster), "--retries", "1",
        "--output", str(job), "--background",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid = status_of(job).pid
    seen = wait_status(
        job,
        lambda s: s.state is JobState.RUNNING and (s.committed_steps or 0) >= 2,
        120,
        "two committed steps",
    )
    workers_of(pid)[0].kill()
    final = wait_status(job, lambda s: s.state.terminal, 120, "the job to end")
    assert final.state is JobState.COMPLETED, final.error
    assert seen.committed_steps is not None and seen.committed_steps < 120
    result = result_of(job)
    assert result["theta"] == list(undisturbed.theta)  # bitwise: the same floats
    assert result["final_loss"] == undisturbed.final_loss
    assert len(result["losses"]) == 1


def test_a_coordinator_killed_three_times_and_resumed_gives_the_exact_hits(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    # "w2" is gated (`gated_pair`), and stays so across the resumes (each starts its workers
    # from the same cluster file): it holds a chunk it never begins, so the job is mid-way at
    # every kill, whatever the machine's speed, until the gate opens after the last resume.
    with gated_pair(tmp_path / "c") as (cluster, gate):
        job = tmp_path / "job"
        args = ("--cluster", str(cluster), "--chunk", "10000000")
        pid = coordinators.add(background(job, *args))
        every_worker: list[psutil.Process] = []
        for threshold in (100_000_000, 300_000_000, 500_000_000):
            wait_accepted(job, threshold)
            every_worker.extend(workers_of(pid))
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: process_gone(pid), 30, "the coordinator to die")  # noqa: B023
            wait_for(
                lambda: run_aner("parallel", "status", "--job", str(job)).returncode == 5,
                30,
                "COORDINATOR_OFFLINE",
            )
            done = run_aner("parallel", "resume", "--job", str(job), "--background")
            assert done.returncode == 0, done.stderr
            assert "job resumed in the background" in done.stdout
            pid = coordinators.add(status_of(job).pid)
        gate.open()
        final = wait_status(job, lambda s: s.state.terminal, 120, "the job to end")
    assert final.state is JobState.COMPLETED, final.error
    assert final.resumes == 3
    assert final.recovered >= 500_000_000
    assert result_of(job)["hits"] == HITS_1E9
    shown = run_aner("parallel", "status", "--job", str(job)).stdout
    assert "resumed   3 times; the last resume recovered" in shown
    # Each coordinator appended its own segment to the one timeline.
    segments = [line for line in read_timeline(job) if isinstance(line, Segment)]
    assert [s.segment for s in segments] == [0, 1, 2, 3]
    # No worker of any killed coordinator is left running.
    wait_for(lambda: all(process_gone(w.pid) for w in every_worker), 30, "no orphan workers")
    assert len(every_worker) >= 6


def test_a_torn_ledger_tail_is_ignored_and_its_chunk_recomputed(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    pid = coordinators.add(background(job, "--workers", "1", "--chunk", "10000000"))
    wait_accepted(job, 200_000_000)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 30, "the coordinator to die")
    data = (job / LEDGER).read_bytes()
    records, intact = scan(data)
    assert intact == len(data) and len(records) >= 20
    accepted = [e for e in records if isinstance(e.record, Accepted)]
    assert len(accepted) == len(records) - 1  # and the job's opening record
    (job / LEDGER).write_bytes(data[:-3])  # the last record loses its tail
    assert len(scan((job / LEDGER).read_bytes())[0]) == len(records) - 1
    done = run_aner("parallel", "resume", "--job", str(job))
    assert done.returncode == 0, done.stderr
    assert f"{HITS_1E9:,} hits" in done.stdout
    assert status_of(job).recovered == (len(accepted) - 1) * 10_000_000


def test_resume_refuses_a_live_a_completed_and_a_foreign_job(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    live = tmp_path / "live"
    coordinators.add(run_and_pid(live, "--samples", "6e9", "--chunk", "4000000", "--workers", "1"))
    wait_accepted(live, 1)
    done = run_aner("parallel", "resume", "--job", str(live))
    assert done.returncode == 2
    assert "has a live coordinator (it holds the lock): nothing to resume" in done.stderr
    run_aner("parallel", "cancel", "--job", str(live))

    finished = tmp_path / "finished"
    done = run_aner("parallel", "run", "--samples", "1e6", "--seed", "1", "--output", str(finished))
    assert done.returncode == 0
    done = run_aner("parallel", "resume", "--job", str(finished))
    assert done.returncode == 2
    assert "has COMPLETED: nothing to resume" in done.stderr

    foreign = tmp_path / "foreign"
    pid = run_and_pid(foreign, "--samples", "6e9", "--chunk", "4000000", "--workers", "1")
    coordinators.add(pid)
    wait_accepted(foreign, 1)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), 30, "the coordinator to die")
    manifest = foreign / "run-manifest.json"
    text = manifest.read_text()
    marker = '"source_fingerprint": "sha256:'
    assert marker in text
    manifest.write_text(text.replace(marker, marker + "0000"))
    done = run_aner("parallel", "resume", "--job", str(foreign))
    assert done.returncode == 2
    assert "was started by a different aner (source fingerprint sha256:0000" in done.stderr
    assert done.stderr.count("\n") == 1


def run_and_pid(job: Path, *args: str) -> int:
    done = run_aner("parallel", "run", "--seed", "1", "--output", str(job), "--background", *args)
    assert done.returncode == 0, done.stderr
    return status_of(job).pid


@pytest.mark.parametrize("retries", ["-1", "x"])
def test_retries_must_be_a_whole_number(retries: str, tmp_path: Path) -> None:
    done = run_aner(
        "parallel", "run", "--samples", "10", "--seed", "1", "--retries", retries,
        "--output", str(tmp_path / "j"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--retries" in done.stderr


def test_the_units_resume_flag_continues_the_same_job_and_refuses_another(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    job = tmp_path / "job"
    spec = tmp_path / "job.toml"
    spec.write_text(
        f'output = "{job}"\n[computation]\nkind = "monte-carlo"\nsamples = 1_000_000_000\n'
        'seed = 42\n[execution]\nkind = "local"\nworkers = 1\nchunk = 10_000_000\n'
    )
    started = run_aner("parallel", "run", "--spec", str(spec), "--resume", "--background")
    assert started.returncode == 0, started.stderr
    pid = coordinators.add(status_of(job).pid)
    wait_accepted(job, 100_000_000)
    os.kill(pid, signal.SIGKILL)  # what systemd's Restart=on-failure then sees
    wait_for(lambda: process_gone(pid), 30, "the coordinator to die")
    again = run_aner("parallel", "run", "--spec", str(spec), "--resume")
    assert again.returncode == 0, again.stderr
    assert f"{HITS_1E9:,} hits" in again.stdout
    assert status_of(job).resumes == 1

    other = tmp_path / "other.toml"
    other.write_text(spec.read_text().replace("seed = 42", "seed = 43"))
    refused = run_aner("parallel", "run", "--spec", str(other), "--resume")
    assert refused.returncode == 2
    assert "holds a different job than this request" in refused.stderr


def test_a_lost_pipe_worker_is_reconnected_and_works_again(
    tmp_path: Path, coordinators: Coordinators
) -> None:
    # "w2" is gated (`gated_pair`): it holds the chunk it was sent (or the one kept for it),
    # so the job cannot end before the killed "w1" is back and has done chunks again, however
    # fast the machine; then "w2" is let compute.
    with gated_pair(tmp_path / "c") as (cluster, gate):
        job = tmp_path / "job"
        args = ("--cluster", str(cluster), "--chunk", "10000000", "--retries", "2")
        pid = coordinators.add(background(job, *args))
        wait_status(
            job,
            lambda s: s.state is JobState.RUNNING and chunks_of(s, "w1") > 0,
            120,
            "w1 working",
        )
        [first] = [p for p in workers_of(pid) if not is_gated(p, gate)]
        first.kill()
        wait_for(lambda: process_gone(first.pid), 30, "the worker to die")
        # Once its loss is recorded, no chunk of the killed process counts any more: the lost
        # worker comes back (a new process) and accepts chunks again.
        loss_seen = wait_status(
            job, lambda s: [x.identity for x in s.losses] == ["w1"], 120, "the loss of w1"
        )
        wait_status(
            job,
            lambda s: chunks_of(s, "w1") > chunks_of(loss_seen, "w1") + 1,
            120,
            "the lost worker to work again",
        )
        gate.open()
        final = wait_status(job, lambda s: s.state.terminal, 120, "the job to end")
    assert final.state is JobState.COMPLETED, final.error
    assert result_of(job)["hits"] == HITS_1E9
    assert [loss.identity for loss in final.losses] == ["w1"]
    # The timeline shows the tasks the killed worker held as lost, each range retried once.
    tasks = [line for line in read_timeline(job) if isinstance(line, TaskLine)]
    lost = sorted((t.pass_id, t.start) for t in tasks if t.outcome == "lost")
    retried = sorted((t.pass_id, t.start) for t in tasks if t.outcome == "retried")
    assert lost and lost == retried
    assert {t.worker for t in tasks if t.outcome == "lost"} == {final.losses[0].identity}
