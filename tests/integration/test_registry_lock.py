"""The configuration registry (`aner_coord.scaling.registry`) shared by experiments that run
at once, and refusing files that are not one: two real processes record revisions of many
identities at the same time and nothing is lost; a FIFO, a device, an oversized file or a
malformed one is refused with one line, at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from aner_coord.errors import RequestError
from aner_coord.scaling.registry import Registry

RECORD = """
import sys
from pathlib import Path
from aner_coord.scaling.registry import Registry

path, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
registry = Registry(path)  # loaded once, as an experiment does, then updated as it goes
for i in range(n):
    registry.revision(f"{who}-{i}", {"cpu_model": who, "logical_cpus": "1"})
    registry.revision("shared", {"cpu_model": f"{who}-{i}", "logical_cpus": "1"})
"""


def test_two_experiments_at_once_lose_no_revision(tmp_path: Path) -> None:
    path = tmp_path / "data" / "registry.json"
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", RECORD, str(path), who, str(n)])
        for who in ("A", "B")
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    identities = json.loads(path.read_text())["identities"]
    for who in ("A", "B"):
        for i in range(n):
            assert [e["revision"] for e in identities[f"{who}-{i}"]] == ["C01"]
    shared = [e["revision"] for e in identities["shared"]]
    assert shared == [f"C{k:02d}" for k in range(1, 2 * n + 1)]  # every change, numbered once
    assert path.stat().st_mode & 0o077 == 0


def _sparse(p: Path) -> None:
    with open(p, "wb") as f:
        f.truncate(3 << 30)


KINDS: list[tuple[str, Callable[[Path], object], str]] = [
    ("fifo", lambda p: os.mkfifo(p, 0o600), "cannot be read: it is a FIFO, not a regular file"),
    ("dev_zero", lambda p: os.symlink("/dev/zero", p), "it is a character device, not a"),
    ("directory", lambda p: p.mkdir(), "it is a directory, not a regular file"),
    ("sparse_3GiB", _sparse, "3,221,225,472 bytes, over the limit of 16,777,216 bytes"),
    ("garbage", lambda p: p.write_bytes(b"\x00\xff" * 100), "is not an aner-registry/1 file"),
    ("deep", lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000), "is not an aner-registry"),
    (
        "wrong_shape",
        lambda p: p.write_text('{"schema": "aner-registry/1", "identities": {"a": [1]}}'),
        "is not an aner-registry/1 file: Expected `object`, got `int`",
    ),
]


@pytest.mark.parametrize(("kind", "make", "words"), KINDS, ids=[k for k, _, _ in KINDS])
def test_a_registry_that_is_not_one_is_refused_at_once(
    tmp_path: Path, kind: str, make: Callable[[Path], object], words: str
) -> None:
    path = tmp_path / "registry.json"
    make(path)
    got: list[BaseException] = []

    def load() -> None:
        try:
            Registry(path)
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), f"a {kind} registry blocked"
    [error] = got
    assert isinstance(error, RequestError)
    assert str(error).startswith(f"registry {path} ")
    assert words in str(error)
    assert "\n" not in str(error)
