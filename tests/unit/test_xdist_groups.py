"""`make test` relies on pytest-xdist's `--dist loadgroup` (tests/conftest.py): every test of
a group runs in one xdist worker, so one Slurm serves the Slurm tests and a corpus is driven
once. A pytest and xdist pair that ignores the groups (pytest 9.2 with xdist 3.8 did) is
found here, not by a suite that silently starts two Slurms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODULE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("i", range(8))
def test_where(i, tmp_path_factory):
    out = tmp_path_factory.getbasetemp().parent.parent / f"ran-{i}"
    out.write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
"""


def test_a_group_runs_in_one_xdist_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(MODULE)
    (tmp_path / "base").mkdir()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist"),
            *("-n", "2", "--dist", "loadgroup", "--basetemp", str(tmp_path / "base" / "t")),
            "test_grouped.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {p.read_text() for p in tmp_path.glob("base/ran-*")}
    assert len(list(tmp_path.glob("base/ran-*"))) == 8, done.stdout
    assert len(workers) == 1, workers
