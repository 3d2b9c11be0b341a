"""The job index behind `aner parallel jobs` (`aner_coord.jobdir.index`): what a job
registers, and a reader that trusts nothing it finds there (real files in `tmp_path`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aner_coord.jobdir.index import entries, index_dir, register

KEY = bytes.fromhex("0123456789abcdef0123456789abcdef")


def job_dir(path: Path, key: bytes) -> Path:
    path.mkdir(mode=0o700)
    (path / "run-manifest.json").write_text(json.dumps({"job": key.hex()}))
    return path


def test_a_reader_lists_registered_jobs_and_trusts_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANER_RUNTIME_DIR", str(tmp_path / "rt"))
    kept = job_dir(tmp_path / "kept", KEY)
    register(kept, KEY)
    index = index_dir()
    assert (index / "0123456789ab").read_text() == f"{kept}\n"
    assert (index.stat().st_mode & 0o777) == 0o700

    other = bytes(16)
    deleted = job_dir(tmp_path / "deleted", other)
    register(deleted, other)
    os.remove(deleted / "run-manifest.json")
    deleted.rmdir()
    replaced = tmp_path / "replaced"  # deleted, then made again by another job
    job_dir(replaced, bytes.fromhex("ff" * 16))
    (index / "aaaaaaaaaaaa").write_text(f"{replaced}\n")
    (index / "bbbbbbbbbbbb").write_text("relative/path\n")
    (index / "cccccccccccc").symlink_to(index / "0123456789ab")
    (index / "not-an-id").write_text(f"{kept}\n")
    (index / "dddddddddddd").write_bytes(b"/" + b"x" * 5000)  # over the size an entry has

    assert [(e.job, e.directory) for e in entries(index)] == [("0123456789ab", kept)]
    assert not (index / "000000000000").exists()  # its directory is gone: removed
    assert (index / "aaaaaaaaaaaa").exists()  # its directory is there: kept, not listed
