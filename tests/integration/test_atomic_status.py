"""status.json is replaced atomically, and says COMPLETED only once result.json is on disk.
(The checked-in samples of each schema are read in tests/unit/test_job_files.py.)"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from support import finish, read_status, spawned, status_of

from aner_coord.jobdir import StatusWriter
from aner_coord.jobdir.status import (
    STATUS_SCHEMA,
    JobState,
    StatusSnapshot,
    WorkerAccount,
    decode_status,
)
from aner_worker.files import write_atomically

WRITES = 3000


def snapshot(seq: int) -> StatusSnapshot:
    """A snapshot whose size varies a lot with `seq` (a few hundred bytes to ~12 KB), and
    whose fields are tied to `seq` so that a mix of two versions would show."""
    n_workers = 1 + (seq * 7) % 40
    return StatusSnapshot(
        schema=STATUS_SCHEMA,
        seq=seq,
        state=JobState.RUNNING,
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
        workers=[WorkerAccount(f"w{i}", 1, seq, seq, [seq]) for i in range(n_workers)],
        error="x" * ((seq * 131) % 6000) or None,
        unit="samples",
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
            time.sleep(0)  # yields the GIL to the writer between reads; it waits for nothing

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
    reads, distinct, problems = hammer(path, write_atomically)
    assert problems == []
    assert reads > 0 and distinct > 1  # the reader really ran alongside the writer
    assert decode_status(path.read_bytes()).seq == WRITES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp files left
    assert path.stat().st_mode & 0o777 == 0o600


def test_sizes_really_vary() -> None:
    sizes = {len(msgspec.json.encode(snapshot(seq))) for seq in range(1, 200)}
    assert min(sizes) < 1_000 and max(sizes) > 8_000


def test_completed_is_written_only_after_the_result(tmp_path: Path) -> None:
    writer = StatusWriter(tmp_path)
    writer(snapshot(1))
    assert status_of(tmp_path).state is JobState.RUNNING
    done = msgspec.structs.replace(snapshot(2), state=JobState.COMPLETED)
    final = msgspec.structs.replace(snapshot(3), state=JobState.COMPLETED)
    writer(done)
    writer(final)
    # No result.json yet, so no reader may see COMPLETED.
    assert status_of(tmp_path).state is JobState.RUNNING
    writer.commit_completed()
    writer.close()  # the writer thread has written what it was given
    written = status_of(tmp_path)
    assert (written.state, written.seq) == (JobState.COMPLETED, 3)


def test_a_completed_cli_run_has_its_result_whenever_status_says_so(tmp_path: Path) -> None:
    out = tmp_path / "job"
    argv = [
        sys.executable, "-m", "aner_coord", "parallel", "run", "--samples", "300000000",
        "--seed", "3", "--workers", "1", "--output", str(out), "--quiet",
    ]  # fmt: skip
    with spawned(argv) as proc:
        while proc.poll() is None:  # reads as fast as it can: any gap is a window missed
            status = read_status(out)
            if status is not None and status.state is JobState.COMPLETED:
                assert (out / "result.json").exists()
        code, _out, err = finish(proc, timeout=120)
    assert code == 0, err
    assert status_of(out).state is JobState.COMPLETED
