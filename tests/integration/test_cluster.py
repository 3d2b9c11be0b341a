"""Configured worker groups end to end: real `aner` worker processes over pipes and a real
OpenSSH sshd on loopback, driven through the CLI as a researcher would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from suite_env import child_env
from support import (
    ANER,
    finish,
    installed_copy,
    spawned,
    status_of,
    wait_for,
    write_cluster,
    write_pipe_pair,
)

from aner_coord.jobdir.status import JobState
from aner_worker.inventory import current
from aner_worker.kernels.philox import count_hits

SAMPLES = 3_000_017  # uneven: the last chunk keeps the remainder


def run_job(
    tmp_path: Path,
    cluster: Path,
    *,
    samples: int = SAMPLES,
    chunk: int = 65536,
    env: dict[str, str] | None = None,
    seed: int = 7,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"job-{time.monotonic_ns()}"
    proc = subprocess.run(
        [
            ANER, "parallel", "run", "--samples", str(samples), "--seed", str(seed),
            "--chunk", str(chunk), "--cluster", str(cluster), "--output", str(out),
        ],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, out


def job_files_text(job: Path) -> str:
    # Some job files are binary (the ledger): a secret inside them is still found.
    files = sorted(p for p in job.iterdir() if p.is_file())
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in files)


def leaks(text: str, secret: str) -> bool:
    """Whether `secret` occurs in `text` as a whole token: a port number inside a memory
    figure, or an alias inside a longer word, is not a leak."""
    edge = r"[A-Za-z0-9_.-]"
    return re.search(rf"(?<!{edge}){re.escape(secret)}(?!{edge})", text) is not None


def assert_private(job: Path, *secrets: str) -> None:
    text = job_files_text(job)
    for secret in secrets:
        assert not leaks(text, secret), f"{secret!r} leaked into a job file"


def test_leaks_are_whole_tokens() -> None:
    assert leaks('"endpoint": "127.0.0.1:2222"', "127.0.0.1")
    assert leaks('"endpoint": "127.0.0.1:2222"', "2222")
    assert leaks('"exec": "/opt/aner/bin/aner"', "/opt/aner/bin/aner")
    assert leaks("ssh aner-test-peer failed", "aner-test-peer")
    assert not leaks('"memory_total": 25275973632', "2597")  # a port inside a number
    assert not leaks('"identity": "peer-10"', "peer-1")
    assert not leaks("10.127.0.0.15", "127.0.0.1")


def test_local_pipe_group_matches_kernel(tmp_path: Path) -> None:
    cluster = write_pipe_pair(tmp_path / "c")
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == count_hits(7, 0, SAMPLES)
    assert result["samples"] == SAMPLES
    per_worker = {w["identity"]: w for w in result["workers"]}
    assert set(per_worker) == {"w1", "w2"}
    assert all(w["chunks"] >= 1 for w in per_worker.values())
    assert sum(w["items"] for w in per_worker.values()) == SAMPLES
    assert sum(w["chunks"] for w in per_worker.values()) == -(-SAMPLES // 65536)
    assert_private(job, ANER)


@pytest.mark.ssh
def test_ssh_group_matches_kernel(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, 2)])
    proc, job = run_job(tmp_path, cluster, env=sshd.env, chunk=100_003)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == count_hits(7, 0, SAMPLES)
    assert_private(job, ANER, sshd.alias, "127.0.0.1", str(sshd.port))


@pytest.mark.ssh
def test_mixed_group_with_user_host_port_endpoint(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    endpoint = f"{sshd.user}@127.0.0.1:{sshd.port}"
    cluster = write_cluster(
        tmp_path / "c",
        [
            ("local-a", "local", "-", ANER, 1),
            ("remote-b", "ssh", endpoint, ANER, 1),
            ("remote-c", "ssh", sshd.alias, ANER, 1),
        ],
    )
    proc, job = run_job(tmp_path, cluster, env=sshd.env, chunk=77_777)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == count_hits(7, 0, SAMPLES)
    assert {w["identity"] for w in result["workers"]} == {"local-a", "remote-b", "remote-c"}
    assert all(w["chunks"] >= 1 for w in result["workers"])
    assert_private(job, ANER, endpoint, sshd.alias, "127.0.0.1")


@pytest.mark.ssh
def test_wrong_host_key_is_refused(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    home = sshd.write_home(tmp_path / "home", wrong_host_key=True)
    env = child_env(sshd.env, HOME=str(home))
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, 1)])
    proc, job = run_job(tmp_path, cluster, env=env)
    assert proc.returncode == 3, proc.stderr
    assert 'worker "peer-1"' in proc.stderr and "host key" in proc.stderr
    status = status_of(job)
    assert status.state is JobState.FAILED
    assert status.error is not None and "peer-1" in status.error
    assert status.accepted == 0
    assert not (job / "result.json").exists()
    assert_private(job, sshd.alias, "127.0.0.1", str(sshd.port))


@pytest.mark.ssh
def test_a_missing_identity_file_is_named(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    """It said "failed during connect: No such file or directory", naming no file."""
    home = sshd.write_home(tmp_path / "home")
    config = home / ".ssh" / "config"
    missing = home / ".ssh" / "id_gone"
    config.write_text(config.read_text().replace(str(home / ".ssh" / "id_ed25519"), str(missing)))
    env = child_env(sshd.env, HOME=str(home))
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, 1)])
    proc, job = run_job(tmp_path, cluster, env=env)
    assert proc.returncode == 3, proc.stderr
    assert (
        'worker "peer-1" failed during connect: No such file or directory: ~/.ssh/id_gone '
        "(an IdentityFile or other file this worker's ~/.ssh/config names?)"
    ) in proc.stderr
    assert_private(job, sshd.alias, "127.0.0.1", str(sshd.port), str(home))


@pytest.mark.ssh
def test_worker_with_more_slots_than_its_allocation_is_refused(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    too_many = current().effective_cpus + 1
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, too_many)])
    proc, job = run_job(tmp_path, cluster, env=sshd.env)
    assert proc.returncode == 3, proc.stderr
    assert 'worker "peer-1" failed during handshake' in proc.stderr
    assert f"assigned {too_many} slots" in proc.stderr
    assert status_of(job).accepted == 0


def test_local_slots_above_allocation_are_refused_before_work(tmp_path: Path) -> None:
    too_many = current().effective_cpus + 1
    cluster = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, too_many)])
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 2
    assert "effective CPU allocation" in proc.stderr and str(too_many) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not job.exists()


def test_worker_with_a_different_source_contract_is_refused(tmp_path: Path) -> None:
    launcher = installed_copy(tmp_path, "aner_worker/kernels/philox.py")
    cluster = write_cluster(
        tmp_path / "c", [("good", "local", "-", ANER, 1), ("stale", "local", "-", str(launcher), 1)]
    )
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 3, proc.stderr
    assert 'worker "stale" failed during handshake' in proc.stderr
    assert "source contract differs" in proc.stderr
    assert proc.stderr.count("sha256:") == 2
    assert not (job / "result.json").exists()
    assert_private(job, str(launcher))


def test_a_comment_changed_in_a_dense_kernel_file_refuses_the_worker(tmp_path: Path) -> None:
    # The contract is every source file of protocol/ and aner_worker/, not a list: a Dense
    # file the old list never named counts, down to a comment.
    launcher = installed_copy(tmp_path, "aner_worker/kernels/dense/network.py")
    cluster = write_cluster(tmp_path / "c", [("stale", "local", "-", str(launcher), 1)])
    out = tmp_path / "job"
    proc = subprocess.run(
        [ANER, "parallel", "train", "--teacher", "400,4,2", "--epochs", "1", "--seed", "1",
         "--cluster", str(cluster), "--output", str(out)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert 'worker "stale" failed during handshake' in proc.stderr
    assert "source contract differs" in proc.stderr
    assert proc.stderr.count("sha256:") == 2
    assert not (out / "result.json").exists()


def test_worker_killed_mid_run_fails_the_job_naming_it(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "c", [("steady", "local", "-", ANER, 1), ("victim", "local", "-", ANER, 1)]
    )
    out = tmp_path / "job"
    argv = [
        ANER, "parallel", "run", "--samples", "10000000000", "--seed", "1",
        "--chunk", "10000000", "--cluster", str(cluster), "--output", str(out),
    ]  # fmt: skip
    with spawned(argv) as coordinator:
        parent = psutil.Process(coordinator.pid)

        def second_worker_with_work_done() -> psutil.Process | None:
            status = out / "status.json"
            # Both workers past their handshake, with work accepted: a kill now is mid-run.
            if not status.exists() or any(w.chunks == 0 for w in status_of(out).workers):
                return None
            # Workers are started in record order; the second is the victim.
            workers = sorted(parent.children(recursive=True), key=lambda p: p.create_time())
            return workers[1] if len(workers) == 2 else None

        victim = wait_for(second_worker_with_work_done, 60, "the job to start running")
        all_children = parent.children(recursive=True)
        victim.send_signal(signal.SIGKILL)
        code, _out, stderr = finish(coordinator, timeout=60)
    assert code == 3, stderr
    assert 'worker "victim" failed during run' in stderr
    status = status_of(out)
    assert status.state is JobState.FAILED
    assert status.error is not None and "victim" in status.error
    assert 0 < status.accepted < status.requested
    assert not (out / "result.json").exists()
    _, alive = psutil.wait_procs(all_children, timeout=10)
    assert not alive, f"processes left behind: {alive}"


def test_killed_worker_leaves_no_zombie_and_cluster_file_permissions(tmp_path: Path) -> None:
    cluster = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    os.chmod(cluster, 0o640)
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 2
    assert "chmod 600" in proc.stderr
    assert not job.exists()


def test_too_few_chunks_for_the_workers_suggests_a_smaller_chunk(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "c", [("a", "local", "-", ANER, 1), ("b", "local", "-", ANER, 1)]
    )
    proc, job = run_job(tmp_path, cluster, samples=10, chunk=10)
    assert proc.returncode == 2
    message = proc.stderr.strip()
    assert len(message.splitlines()) == 1
    assert (
        "10 samples in chunks of 10 make 1 chunk(s), fewer than the 2 configured workers" in message
    )
    assert message.endswith("use a chunk of at most 5 (--chunk)")
    assert not job.exists()
