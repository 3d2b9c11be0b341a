"""Configured worker groups end to end: real `aner` worker processes over pipes and a real
OpenSSH sshd on loopback, driven through the CLI as a researcher would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import ANER, write_cluster

from aner_worker.inventory import current
from aner_worker.philox import count_hits

ROOT = Path(__file__).resolve().parent.parent
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
            ANER,
            "parallel",
            "run",
            "--samples",
            str(samples),
            "--seed",
            str(seed),
            "--chunk",
            str(chunk),
            "--cluster",
            str(cluster),
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return proc, out


def job_files_text(job: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(job.iterdir()) if p.is_file())


def assert_private(job: Path, *secrets: str) -> None:
    text = job_files_text(job)
    for secret in secrets:
        assert secret not in text, f"{secret!r} leaked into a job file"


def test_local_pipe_group_matches_kernel(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "c", [("w1", "local", "-", ANER, 1), ("w2", "local", "-", ANER, 1)]
    )
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((job / "result.json").read_text())
    assert result["hits"] == count_hits(7, 0, SAMPLES)
    assert result["samples"] == SAMPLES
    per_worker = {w["identity"]: w for w in result["workers"]}
    assert set(per_worker) == {"w1", "w2"}
    assert all(w["chunks"] >= 1 for w in per_worker.values())
    assert sum(w["samples"] for w in per_worker.values()) == SAMPLES
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
    env = {**sshd.env, "HOME": str(home)}
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, 1)])
    proc, job = run_job(tmp_path, cluster, env=env)
    assert proc.returncode == 3, proc.stderr
    assert 'worker "peer-1"' in proc.stderr and "host key" in proc.stderr
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "FAILED"
    assert "peer-1" in status["error"]
    assert status["accepted"] == 0
    assert not (job / "result.json").exists()
    assert_private(job, sshd.alias, "127.0.0.1", str(sshd.port))


@pytest.mark.ssh
def test_worker_with_more_slots_than_its_allocation_is_refused(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    too_many = current().effective_cpus + 1
    cluster = write_cluster(tmp_path / "c", [("peer-1", "ssh", sshd.alias, ANER, too_many)])
    proc, job = run_job(tmp_path, cluster, env=sshd.env)
    assert proc.returncode == 3, proc.stderr
    assert 'worker "peer-1" failed during handshake' in proc.stderr
    assert f"assigned {too_many} slots" in proc.stderr
    assert json.loads((job / "status.json").read_text())["accepted"] == 0


def test_local_slots_above_allocation_are_refused_before_work(tmp_path: Path) -> None:
    too_many = current().effective_cpus + 1
    cluster = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, too_many)])
    proc, job = run_job(tmp_path, cluster)
    assert proc.returncode == 2
    assert "effective CPU allocation" in proc.stderr and str(too_many) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not job.exists()


def test_worker_with_a_different_source_contract_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "other-aner"
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    kernel = copy / "aner_worker" / "philox.py"
    kernel.write_text(kernel.read_text() + "\n# a changed kernel is a different contract\n")
    launcher = tmp_path / "other-aner-launcher"
    launcher.write_text(
        f'#!/bin/sh\nPYTHONPATH="{copy}" exec "{sys.executable}" -P -m aner_coord "$@"\n'
    )
    launcher.chmod(0o755)
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


def test_worker_killed_mid_run_fails_the_job_naming_it(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "c", [("steady", "local", "-", ANER, 1), ("victim", "local", "-", ANER, 1)]
    )
    out = tmp_path / "job"
    coordinator = subprocess.Popen(
        [
            ANER,
            "parallel",
            "run",
            "--samples",
            "10000000000",
            "--seed",
            "1",
            "--chunk",
            "10000000",
            "--cluster",
            str(cluster),
            "--output",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        parent = psutil.Process(coordinator.pid)
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            status = out / "status.json"
            if status.exists() and json.loads(status.read_text())["accepted"] > 0:
                children = parent.children(recursive=True)
                # Workers are started in record order; the second is the victim.
                workers = sorted(children, key=lambda p: p.create_time())
                if len(workers) == 2:
                    victim = workers[1]
            time.sleep(0.05)
        assert victim is not None, "the job never started running"
        all_children = parent.children(recursive=True)
        victim.send_signal(signal.SIGKILL)
        _, stderr = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
    assert coordinator.returncode == 3, stderr
    assert 'worker "victim" failed during run' in stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "FAILED" and "victim" in status["error"]
    assert 0 < status["accepted"] < status["requested"]
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
