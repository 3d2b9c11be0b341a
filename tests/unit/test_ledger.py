"""The job ledger (`aner_coord.jobdir.ledger`) byte by byte, and its replay by the job machine.

A real job directory in tmp_path, a real `LedgerWriter` and `read_ledger`: only a torn tail
is forgiven (every cut of the last record, zeros after it, a damaged last payload); every
single-bit flip before the tail is refused, as are records of another job, a ledger that
does not open with its job's record, a chunk recorded twice, and files that are not a
regular file of the job (FIFO, links, a directory, an oversized sparse file), without
blocking or reading them whole. The machine checks replayed statistics as it checks a live
worker's result.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from aner_coord import jobdir
from aner_coord.computations.montecarlo import MonteCarlo, MonteCarloRequest
from aner_coord.job.machine import JobMachine
from aner_coord.jobdir import jobkey, ledger
from aner_coord.jobdir.ledger import (
    Accepted,
    Committed,
    LedgerError,
    LedgerWriter,
    Lost,
    Opened,
    Resumed,
    frame,
    read_ledger,
    scan,
)
from aner_coord.jobdir.status import JobState
from aner_worker.kernels.base import encode
from aner_worker.kernels.montecarlo import McStats

KEY = bytes(range(16))
OTHER = bytes(range(1, 17))


def write_records(path: Path, records: list[ledger.Record], key: bytes = KEY) -> Path:
    directory = jobdir.JobDir.create(path)
    with directory:
        writer = LedgerWriter(directory, key, computation="monte-carlo", at=1.0)
        for record in records:
            writer.append(record)
        writer.close()
    return path


BODY: list[ledger.Record] = [
    Accepted(0, 0, encode(McStats(2))),
    Accepted(0, 2, encode(McStats(3))),
    Lost("w1", "run", "killed", 2.0),
    Resumed(3.0, 42),
    Accepted(0, 1, encode(McStats(1))),
]


def read(job: Path, key: bytes = KEY) -> ledger.Recovered:
    with jobdir.JobDir.open(job) as directory:
        return read_ledger(directory, key)


def test_what_is_written_reads_back_with_the_jobs_identity(tmp_path: Path) -> None:
    job = write_records(tmp_path / "job", BODY)
    entries, intact = scan((job / "ledger").read_bytes())
    assert intact == (job / "ledger").stat().st_size
    assert {e.job for e in entries} == {KEY}
    assert [type(e.record) for e in entries] == [Opened, *map(type, BODY)]
    assert entries[0].record == Opened("aner-ledger/3", "monte-carlo", 1.0)
    assert all(len(e.mac) == 16 for e in entries)  # keyed (issue 36)
    got = read(job)
    assert got.opened and got.resumes == 1 and got.intact == intact
    assert got.chunks == {0: {0: encode(McStats(2)), 2: encode(McStats(3)), 1: encode(McStats(1))}}
    assert got.statistics(McStats) == {0: {0: McStats(2), 1: McStats(1), 2: McStats(3)}}
    assert [loss.identity for loss in got.worker_losses()] == ["w1"]
    assert (job / "ledger").stat().st_mode & 0o777 == 0o600


def test_no_ledger_is_an_empty_one(tmp_path: Path) -> None:
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        got = read_ledger(directory, KEY)
    assert (got.chunks, got.opened, got.intact, got.file) == ({}, False, 0, None)


def _records_end(data: bytes) -> list[int]:
    """Where each record of `data` ends."""
    ends, offset = [], 0
    while offset < len(data):
        offset += 12 + int.from_bytes(data[offset : offset + 4], "big")
        ends.append(offset)
    return ends


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, bytes, list[int]]:
    job = write_records(tmp_path / "job", BODY)
    data = (job / "ledger").read_bytes()
    return job, data, _records_end(data)


def test_every_cut_of_the_last_record_is_a_torn_tail_and_is_forgiven(
    written: tuple[Path, bytes, list[int]],
) -> None:
    job, data, ends = written
    for cut in range(ends[-2] + 1, len(data)):
        (job / "ledger").write_bytes(data[:cut])
        got = read(job)
        assert 1 not in got.chunks[0], cut  # the torn record's chunk is recomputed
        assert got.intact == ends[-2]


def test_zeros_after_the_last_record_and_a_damaged_last_payload_are_a_torn_tail(
    written: tuple[Path, bytes, list[int]],
) -> None:
    job, data, ends = written
    (job / "ledger").write_bytes(data + bytes(5000))
    assert read(job).intact == len(data)
    damaged = bytearray(data)
    damaged[-1] ^= 0x40  # the last payload's last byte
    (job / "ledger").write_bytes(bytes(damaged))
    got = read(job)
    assert got.intact == ends[-2] and 1 not in got.chunks[0]


def test_every_bit_flipped_before_the_last_record_is_refused(
    written: tuple[Path, bytes, list[int]],
) -> None:
    job, data, ends = written
    refused = 0
    for offset in range(ends[-2]):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[offset] ^= 1 << bit
            (job / "ledger").write_bytes(bytes(flipped))
            with pytest.raises(LedgerError, match=r"cannot be trusted: its record at byte"):
                read(job)
            refused += 1
    assert refused == 8 * ends[-2] > 1000


def test_a_record_of_another_job_is_refused_wherever_it_stands(tmp_path: Path) -> None:
    job = write_records(tmp_path / "job", BODY)
    ours = (job / "ledger").read_bytes()
    with pytest.raises(LedgerError, match="its record at byte 0 belongs to another job"):
        read(job, OTHER)
    ends = _records_end(ours)
    spliced = ours[: ends[1]] + frame(OTHER, Accepted(0, 3, encode(McStats(1)))) + ours[ends[1] :]
    (job / "ledger").write_bytes(spliced)
    with pytest.raises(LedgerError, match=f"its record at byte {ends[1]} belongs to another job"):
        read(job)


@pytest.mark.parametrize(
    ("records", "words"),
    [
        ([Accepted(0, 0, b"")], "does not begin with its job's opening record"),
        (
            [Opened("aner-ledger/2", "monte-carlo", 1.0), Opened("aner-ledger/2", "x", 2.0)],
            "holds a second its job's opening record",
        ),
        (
            [
                Opened("aner-ledger/2", "monte-carlo", 1.0),
                Committed(0),
                Committed(0),
                Accepted(0, 4, b"\x91\x01"),
                Accepted(0, 4, b"\x91\x01"),
            ],
            "records chunk 4 of pass 0 twice",
        ),
    ],
)
def test_a_ledger_that_contradicts_itself_is_refused(
    tmp_path: Path, records: list[ledger.Record], words: str
) -> None:
    job = jobdir.JobDir.create(tmp_path / "job")
    with job:
        job.write_bytes("ledger", b"".join(frame(KEY, r) for r in records))
    with pytest.raises(LedgerError, match=words):
        read(tmp_path / "job")


def test_a_header_that_claims_more_than_a_record_may_hold_is_refused(tmp_path: Path) -> None:
    import zlib

    head = (0xFFFFFFFF).to_bytes(4, "big") + bytes(4)
    with jobdir.JobDir.create(tmp_path / "job") as directory:
        directory.write_bytes("ledger", head + zlib.crc32(head).to_bytes(4, "big") + b"x" * 99)
    with pytest.raises(LedgerError, match="claims 4,294,967,295 bytes, over the limit"):
        read(tmp_path / "job")


def _kinds() -> list[tuple[str, Callable[[Path], object], str]]:
    def sparse(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(3 << 30)

    return [
        ("fifo", lambda p: os.mkfifo(p, 0o600), "it is a FIFO, not a regular file"),
        (
            "dev_zero",
            lambda p: os.symlink("/dev/zero", p),
            "it is a symbolic link, not a regular file",
        ),
        (
            "link",
            lambda p: os.symlink(p.with_name("elsewhere"), p),
            "it is a symbolic link, not a regular file",
        ),
        ("directory", lambda p: p.mkdir(), "it is a directory, not a regular file"),
        ("sparse_3GiB", sparse, "it has 3,221,225,472 bytes; the limit is 1,073,741,824"),
    ]


@pytest.mark.parametrize(("kind", "make", "words"), _kinds(), ids=[k[0] for k in _kinds()])
def test_a_ledger_that_is_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, kind: str, make: Callable[[Path], object], words: str
) -> None:
    job = tmp_path / "job"
    jobdir.JobDir.create(job).close()
    (job / "elsewhere").write_bytes(frame(KEY, Opened("aner-ledger/2", "monte-carlo", 1.0)))
    make(job / "ledger")
    outcome: list[BaseException | ledger.Recovered] = []

    def attempt() -> None:
        try:
            outcome.append(read(job))
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), f"reading a {kind} ledger blocked"
    [got] = outcome
    assert isinstance(got, LedgerError)
    assert str(got) == f"{job / 'ledger'} cannot be read: {words}"
    assert got.exit_code == 2


def test_a_resumed_writer_cuts_a_torn_tail_and_keeps_the_file_it_read(
    written: tuple[Path, bytes, list[int]],
) -> None:
    job, data, _ends = written
    (job / "ledger").write_bytes(data[:-3])
    with jobdir.JobDir.open(job) as directory:
        recovered = read_ledger(directory, KEY)
        writer = LedgerWriter(
            directory, KEY, computation="monte-carlo", at=4.0, recovered=recovered
        )
        writer.append(Accepted(0, 1, encode(McStats(1))))
        writer.close()
    entries, intact = scan((job / "ledger").read_bytes())
    assert intact == (job / "ledger").stat().st_size
    assert [type(e.record) for e in entries].count(Opened) == 1  # not opened twice
    assert read(job).chunks[0][1] == encode(McStats(1))
    # A ledger swapped for another file after it was read is not written.
    with jobdir.JobDir.open(job) as directory:
        recovered = read_ledger(directory, KEY)
        os.rename(job / "ledger", job / "old")
        (job / "ledger").write_bytes(b"")
        with pytest.raises(jobdir.JobDirError, match="it was replaced while the job was"):
            LedgerWriter(directory, KEY, computation="monte-carlo", at=5.0, recovered=recovered)


# -- replay: statistics from a ledger are checked as a live result ------------------------


def _replayed(recovered: dict[int, dict[int, McStats]]) -> JobMachine:
    run = MonteCarlo().start(MonteCarloRequest(samples=10_000, seed=1), 1000)
    machine = JobMachine(run, {"a": 1}, chunk=1000, passes=1, recovered=recovered)
    machine.start()
    return machine


def test_a_replayed_chunk_claiming_every_sample_a_hit_fails_the_job_naming_the_ledger() -> None:
    machine = _replayed({0: {0: McStats(785), 3: McStats(1000)}})
    assert machine.state is JobState.FAILED
    assert machine.error == (
        "the ledger's record of chunk 3 of pass 0 is refused: 1,000 hits in 1,000 samples is "
        "more than 12 standard deviations from pi/4: not the stream's samples"
    )


def test_a_replayed_chunk_the_pass_does_not_have_or_with_impossible_counts_is_refused() -> None:
    machine = _replayed({0: {10: McStats(785)}})
    assert machine.error == (
        "the ledger's record of chunk 10 of pass 0 is refused: that pass has 10 chunks"
    )
    machine = _replayed({0: {9: McStats(1001)}})
    assert machine.error == (
        "the ledger's record of chunk 9 of pass 0 is refused: 1001 hits is impossible for "
        "1000 samples"
    )
    assert _replayed({0: {9: McStats(790)}}).state is JobState.STARTING  # plausible: kept


# --------------------------------------------------------------------------- keyed records
# (issue 36, item 5: a chunk forged by +1 hit, written with the job's own checksum, resumed
# with exit 0)


def _append(job: Path, data: bytes) -> None:
    with open(job / "ledger", "ab") as file:
        file.write(data)


def test_a_record_written_without_the_key_is_refused_naming_file_and_record(
    tmp_path: Path,
) -> None:
    job = write_records(tmp_path / "job", BODY)
    end = (job / "ledger").stat().st_size
    _append(job, frame(KEY, Accepted(0, 3, encode(McStats(4)))))  # the job's checksums
    with pytest.raises(LedgerError) as refused:
        read(job)
    assert str(refused.value) == (
        f"{job / 'ledger'} cannot be trusted: its record at byte {end:,} (chunk 3 of pass 0) "
        f"does not carry the MAC of your job key ({os.environ['ANER_JOB_KEY']}): it was "
        "written or changed by someone without that key; resume needs the ledger this job "
        "wrote (start the job again with a new --output)"
    )


def test_a_record_changed_in_place_or_copied_elsewhere_is_refused(tmp_path: Path) -> None:
    job = write_records(tmp_path / "job", BODY)
    data = (job / "ledger").read_bytes()
    entries, _ = scan(data)
    # Chunk 0's record with one more hit and its own MAC kept, checksums made anew.
    changed = ledger._encoder.encode(
        ledger.Entry(KEY, Accepted(0, 0, encode(McStats(3))), entries[1].mac)
    )
    second = len(frame(KEY, entries[0].record, b"k" * 32))  # where the first chunk begins
    head = ledger._LENGTH_CRC.pack(len(changed), ledger.zlib.crc32(changed))
    record = head + ledger._CRC.pack(ledger.zlib.crc32(head)) + changed
    old = len(frame(KEY, entries[1].record, b"k" * 32))
    (job / "ledger").write_bytes(data[:second] + record + data[second + old :])
    with pytest.raises(LedgerError, match=r"\(chunk 0 of pass 0\) does not carry the MAC"):
        read(job)
    # A genuine record copied to the end: its MAC covers the offset it was written at.
    (job / "ledger").write_bytes(data + data[second : second + old])
    with pytest.raises(LedgerError, match=r"\(chunk 0 of pass 0\) does not carry the MAC"):
        read(job)


def test_an_older_unkeyed_ledger_still_reads_and_a_keyed_job_refuses_one(tmp_path: Path) -> None:
    older = tmp_path / "older"
    older.mkdir(mode=0o700)
    records = [Opened("aner-ledger/2", "monte-carlo", 1.0), *BODY]
    (older / "ledger").write_bytes(b"".join(frame(KEY, r) for r in records))
    assert read(older).statistics(McStats)[0] == {0: McStats(2), 2: McStats(3), 1: McStats(1)}
    # The same unkeyed ledger under an identity begun keyed: replaced without the key.
    keyed = ledger.new_job_key()
    (older / "ledger").write_bytes(b"".join(frame(keyed, r) for r in records))
    with pytest.raises(LedgerError, match="carries no MAC though the job was begun keyed"):
        read(older, keyed)


def test_a_keyed_ledger_without_its_key_says_where_the_key_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = write_records(tmp_path / "job", BODY)
    key = Path(os.environ["ANER_JOB_KEY"])
    assert key.stat().st_mode & 0o777 == 0o600  # made on first use, owner-only
    elsewhere = tmp_path / "other-account" / "job-key"
    monkeypatch.setenv("ANER_JOB_KEY", str(elsewhere))
    with pytest.raises(LedgerError) as refused:
        read(job)
    assert (
        f"is keyed by a job key that is not here: {elsewhere} is missing (a job directory "
        "from another account or machine resumes with that account's job key copied there, "
        "mode 600)"
    ) in str(refused.value)
    assert not elsewhere.exists()  # reading never makes a key
    elsewhere.parent.mkdir(mode=0o700)
    elsewhere.write_bytes(key.read_bytes())
    elsewhere.chmod(0o644)
    with pytest.raises(jobkey.JobKeyError, match=r"has mode 644: `chmod 600` it"):
        read(job)
    elsewhere.chmod(0o600)  # copied as the message says: it reads
    assert read(job).statistics(McStats)[0] == {0: McStats(2), 2: McStats(3), 1: McStats(1)}
