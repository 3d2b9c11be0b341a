"""Hostile fake workers: small Python scripts that speak the wire protocol with the real
`WorkerConnection` and then misbehave as a broken or malicious peer would.

`fake_worker(tmp_path, name, behaviour)` writes an executable script: a real handshake
(`HANDSHAKE`: read the Hello, answer with the connection's own Welcome), then `behaviour`,
Python source that may use `conn`, `read()` (the events of the next read, or exit at end of
input), `send(frame)` and the helpers below. Cluster files name the script as the worker's
executable, so the coordinator starts it exactly as it starts `aner parallel worker --stdio`.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import write_cluster

from aner_coord import parallel

HANDSHAKE = """
import os, sys, time
import msgspec
from aner_worker.contract import source_fingerprint
from aner_worker.kernels import KERNELS
from protocol import FrameEncoder, PingReceived, Result, TaskReceived, WorkerConnection
conn = WorkerConnection(source_fingerprint(), 2, "fake", KERNELS)
encoder = FrameEncoder()

def read():
    data = os.read(0, 65536)
    if not data:
        sys.exit(0)
    return conn.receive(data)

def send(frame):
    os.write(1, frame)

events = []
while not events:
    events = read()
send(conn.reply())
"""


def fake_worker(tmp_path: Path, name: str, behaviour: str, *, prologue: str = HANDSHAKE) -> str:
    script = tmp_path / name
    body = prologue + textwrap.dedent(behaviour)
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return str(script)


def group(
    tmp_path: Path, executable: str, identity: str = "bad-1", chunk: int = 100_000
) -> parallel.ClusterExecution:
    """A cluster of one worker, `executable`, with one slot."""
    path = write_cluster(tmp_path / "cluster", [(identity, "local", "-", executable, 1)])
    return parallel.cluster(path, chunk=chunk)


@pytest.fixture
def short_silence(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setenv("ANER_WORKER_SILENCE_S", "1")
    return 1.0
