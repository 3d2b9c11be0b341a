"""The programs in samples/ run as a researcher would run them, and tell the truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import ANER, SAMPLES, write_cluster

from aner_coord.clusterfile import parse_cluster_text
from aner_worker.kernels.philox import count_hits


def test_local_program_runs_serial_and_parallel_with_identical_hits() -> None:
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "local_pi.py"), "--samples", "2000003", "--seed", "9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    hits = f"{count_hits(9, 0, 2_000_003):,}"
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("serial", "parallel"))]
    assert len(rows) == 2 and all(hits in row for row in rows)
    assert "identical hits: True" in proc.stdout
    # Issue 38, item 6: it says what share of the CPUs other processes took while it timed.
    measured = [line for line in proc.stdout.splitlines() if "other processes used" in line]
    assert len(measured) == 1 and "CPUs while this timed" in measured[0]
    assert measured[0].startswith("note: ") == ("is a busy machine" in measured[0])


def test_cluster_program_on_a_local_pipe_group(tmp_path: Path) -> None:
    config = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "cluster_pi.py"), str(config), "--samples", "1000003"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"identical hits: {count_hits(42, 0, 1_000_003):,}" in proc.stdout
    assert "w1" in proc.stdout


def test_session_program_on_a_local_pipe_group(tmp_path: Path) -> None:
    records = [("w1", "local", "-", ANER, 1), ("w2", "local", "-", ANER, 1)]
    config = write_cluster(tmp_path / "c", records)
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "session_pi.py"), str(config), "--samples", "1000003",
         "--calls", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [(row[0], row[2]) for row in rows] == [
        (str(seed), f"{count_hits(seed, 0, 1_000_003):,}") for seed in range(3)
    ]


def test_cluster_program_explains_a_bad_file(tmp_path: Path) -> None:
    config = tmp_path / "c"
    config.write_text("ANER_CLUSTER 1\n")
    config.chmod(0o644)
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "cluster_pi.py"), str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cluster run failed" in proc.stderr and "chmod 600" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_example_cluster_file_parses() -> None:
    config = parse_cluster_text((SAMPLES / "cluster.example").read_text(), "cluster.example")
    assert [w.identity for w in config.workers] == ["this-machine", "lab-peer-1"]


def test_local_program_prints_one_line_for_a_bad_number() -> None:
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "local_pi.py"), "--samples", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == "local_pi: samples= must be positive, got 0\n"  # no traceback
    assert "hits" not in proc.stdout
