"""Audits of Dense training end to end (`train --audit FRACTION`): the coordinator recomputes
that fraction of the chunks itself and fails the job naming a worker whose statistics differ,
bitwise on one platform. The liar here is the subtle kind that a handshake cannot catch: it
runs the real kernel from the real installation (so its source fingerprint is right) and
scales its gradient sums by 1.01, which moves the parameters without any statistic looking
wrong."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from support import ANER, write_cluster

LIAR = """
import os
import numpy as np
from aner_worker.contract import source_fingerprint
from aner_worker.kernels import KERNELS, decode, encode
from aner_worker.kernels.dense.params import TRAIN, DenseParams, DenseStats
from protocol import TaskReceived, WorkerConnection

conn = WorkerConnection(source_fingerprint(), 1, "liar", KERNELS)
events = []
while not events:
    events = conn.receive(os.read(0, 65536))
os.write(1, conn.reply())
kernel = KERNELS["dense"]
while True:
    data = os.read(0, 1 << 20)
    if not data:
        break
    for event in conn.receive(data):
        if not isinstance(event, TaskReceived):
            continue
        task = event.task
        params = decode(DenseParams, conn.params_for(task.pass_id).body)
        stats = kernel.run(params, task.start, task.count, None)
        if params.step == TRAIN:
            sums = np.frombuffer(stats.sums, dtype="<f8") * 1.01
            stats = DenseStats(sums.tobytes(), stats.m2, stats.loss_sum, stats.correct, stats.valid)
        os.write(1, conn.result(task, encode(stats), 0.0))
"""

TRAIN = ["parallel", "train", "--teacher", "3000,8,3", "--seed", "4", "--epochs", "2"]


def train(tmp_path: Path, name: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / name
    proc = subprocess.run(
        [ANER, *TRAIN, *extra, "--output", str(out)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, out


def liar_cluster(tmp_path: Path) -> Path:
    script = tmp_path / "liar"
    script.write_text(f"#!{sys.executable}\n{textwrap.dedent(LIAR)}")
    script.chmod(0o755)
    return write_cluster(
        tmp_path / "cluster",
        [("honest", "local", "-", ANER, 1), ("liar", "local", "-", str(script), 1)],
    )


def params_of(job: Path) -> dict[str, np.ndarray]:
    with np.load(job / "model.npz", allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files if name[0] in "Wb"}


def test_without_an_audit_the_scaled_gradients_go_unnoticed(tmp_path: Path) -> None:
    # The premise: every statistic the liar sends passes the result checks.
    cluster = liar_cluster(tmp_path)
    honest, honest_job = train(tmp_path, "honest", "--workers", "1")
    fooled, fooled_job = train(tmp_path, "fooled", "--cluster", str(cluster))
    assert honest.returncode == 0, honest.stderr
    assert fooled.returncode == 0, fooled.stderr
    moved = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(params_of(honest_job).values(), params_of(fooled_job).values(), strict=True)
    )
    assert moved > 0.0
    workers = json.loads((fooled_job / "result.json").read_text())["workers"]
    assert {w["identity"]: w["chunks"] > 0 for w in workers} == {"honest": True, "liar": True}


def test_train_audit_fails_the_job_naming_the_lying_worker(tmp_path: Path) -> None:
    cluster = liar_cluster(tmp_path)
    proc, job = train(tmp_path, "audited", "--cluster", str(cluster), "--audit", "0.2")
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert 'worker "liar" failed during audit' in line
    assert "differs from the coordinator's own" in line
    assert len(line) < 600  # a summary of the difference, not the gradient bytes
    assert not (job / "result.json").exists()
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "FAILED" and 'worker "liar"' in status["error"]


def test_an_audited_honest_group_completes_with_the_local_parameters(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "cluster",
        [("one", "local", "-", ANER, 1), ("two", "local", "-", ANER, 1)],
    )
    local, local_job = train(tmp_path, "local", "--workers", "1")
    audited, audited_job = train(tmp_path, "audited", "--cluster", str(cluster), "--audit", "0.5")
    assert local.returncode == 0, local.stderr
    assert audited.returncode == 0, audited.stderr
    for name, value in params_of(local_job).items():
        assert np.array_equal(value, params_of(audited_job)[name]), name
