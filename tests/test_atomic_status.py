"""status.json is replaced atomically, and status files of older schema versions keep reading."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from aner_coord.jobdir import StatusWriter, write_atomic
from aner_coord.status import STATUS_SCHEMA, StatusSnapshot, WorkerStatus, decode_status

DATA = Path(__file__).parent / "data"
WRITES = 3000


def snapshot(seq: int) -> StatusSnapshot:
    """A snapshot whose size varies a lot with `seq` (a few hundred bytes to ~12 KB), and
    whose fields are tied to `seq` so that a mix of two versions would show."""
    n_workers = 1 + (seq * 7) % 40
    return StatusSnapshot(
        schema=STATUS_SCHEMA,
        seq=seq,
        state="RUNNING",
        kind="monte-carlo",
        pid=1234,
        created_at=1.0e9,
        updated_at=1.0e9 + seq,
        elapsed_s=float(seq),
        requested=10 * WRITES,
        passes=1,
        pass_index=0,
        phase="sampling",
        accepted=10 * seq,
        accepted_in_pass=10 * seq,
        chunks_total=WRITES,
        chunks_done=seq,
        in_flight=n_workers,
        throughput=10.0,
        eta_s=float(WRITES - seq),
        workers=[WorkerStatus(f"w{i}", 1, seq, seq, [seq]) for i in range(n_workers)],
        error="x" * ((seq * 131) % 6000) or None,
    )


def hammer(path: Path, write: Callable[[Path, bytes], None]) -> tuple[int, int, list[str]]:
    """Replace `path` WRITES times from one thread while another reads and parses it.
    Returns (reads, distinct seqs seen, problems)."""
    write(path, msgspec.json.encode(snapshot(0)))
    done = threading.Event()
    problems: list[str] = []
    seen: set[int] = set()
    reads = 0

    def reader() -> None:
        nonlocal reads
        last = -1
        while not done.is_set():
            data = path.read_bytes()
            reads += 1
            try:
                status = decode_status(data)
            except msgspec.DecodeError as exc:
                problems.append(f"read {reads}: {len(data)} bytes did not parse: {exc}")
                continue
            if status.seq < last:
                problems.append(f"seq went back from {last} to {status.seq}")
            if (
                status.accepted != 10 * status.seq
                or len(status.workers) != 1 + (status.seq * 7) % 40
            ):
                problems.append(f"snapshot {status.seq} is inconsistent")
            last = status.seq
            seen.add(status.seq)
            time.sleep(0)  # let the writer have the GIL between reads

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for seq in range(1, WRITES + 1):
            write(path, msgspec.json.encode(snapshot(seq)))
    finally:
        done.set()
        thread.join()
    return reads, len(seen), problems


def test_concurrent_reader_never_sees_a_partial_status(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    reads, distinct, problems = hammer(path, write_atomic)
    assert problems == []
    assert reads > 0 and distinct > 1  # the reader really ran alongside the writer
    assert decode_status(path.read_bytes()).seq == WRITES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp files left
    assert path.stat().st_mode & 0o777 == 0o600


def test_sizes_really_vary() -> None:
    sizes = {len(msgspec.json.encode(snapshot(seq))) for seq in range(1, 200)}
    assert min(sizes) < 1_000 and max(sizes) > 8_000


def test_checked_in_status_v1_still_reads() -> None:
    data = (DATA / "status-v1.json").read_bytes()
    assert b'"schema": "aner-status/1"' in data
    status = decode_status(data)
    assert status.schema == "aner-status/1"
    assert status.state == "COMPLETED"
    assert status.kind == "monte-carlo"
    assert status.requested == status.accepted == 10_000_000
    assert status.chunks_done == status.chunks_total == 153
    assert [w.identity for w in status.workers] == ["local-1", "local-2"]
    assert sum(w.items for w in status.workers) == 10_000_000
    assert status.terminal
    assert status.total_work == 10_000_000


def test_completed_is_written_only_after_the_result(tmp_path: Path) -> None:
    writer = StatusWriter(tmp_path)
    writer(snapshot(1))
    assert decode_status((tmp_path / "status.json").read_bytes()).state == "RUNNING"
    done = msgspec.structs.replace(snapshot(2), state="COMPLETED")
    final = msgspec.structs.replace(snapshot(3), state="COMPLETED")
    writer(done)
    writer(final)
    # No result.json yet, so no reader may see COMPLETED.
    assert decode_status((tmp_path / "status.json").read_bytes()).state == "RUNNING"
    writer.commit_completed()
    writer.close()  # the writer thread has written what it was given
    written = decode_status((tmp_path / "status.json").read_bytes())
    assert (written.state, written.seq) == ("COMPLETED", 3)


def test_a_completed_cli_run_has_its_result_whenever_status_says_so(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "job"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aner_coord",
            "parallel",
            "run",
            "--samples",
            "300000000",
            "--seed",
            "3",
            "--workers",
            "1",
            "--output",
            str(out),
            "--quiet",
        ],
    )
    while proc.poll() is None:
        try:
            state = decode_status((out / "status.json").read_bytes()).state
        except FileNotFoundError:
            continue
        if state == "COMPLETED":
            assert (out / "result.json").exists()
    assert proc.wait() == 0
    assert decode_status((out / "status.json").read_bytes()).state == "COMPLETED"
