"""No stall, whatever a worker sends (aner_coord/job/liveness.py): hostile fake workers that
answer pings but compute nothing, corrupt a frame's length and keep talking into it, report
impossible timings, describe their machine in 30 MB, stop reading their input or close it.
Each job ends within its bound, naming the worker in one line; with `retries` a stalled
worker is a lost worker and the job completes with the exact hits.

Bounds here are the product's, shortened through its environment (ANER_WORKER_SILENCE_S=1,
ANER_WORKER_RESULT_S=1); no assertion depends on how fast this machine is."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hostile import HANDSHAKE, fake_worker, group
from support import ANER, finish, spawned, write_cluster

from aner_coord import parallel
from aner_coord.errors import JobFailed
from aner_worker.oracle import oracle_hits

HITS_10M = 7_856_672  # docs/contracts.md, section 1, seed 42

ANSWER_PINGS = """
while True:
    for event in read():
        if isinstance(event, PingReceived):
            send(conn.pong(event.nonce))
"""


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANER_WORKER_SILENCE_S", "1")
    monkeypatch.setenv("ANER_WORKER_RESULT_S", "1")


def test_a_worker_that_answers_pings_but_returns_no_result_is_lost(tmp_path: Path) -> None:
    exe = fake_worker(tmp_path, "idler", ANSWER_PINGS)
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    message = str(failure.value)
    # Before any task is measured the floor is four times ANER_WORKER_RESULT_S.
    assert message.startswith(
        'worker "bad-1" failed during run: answered pings but returned no result for 4 s with '
    ), message
    assert message.endswith("stalled)")


def test_with_retries_a_stalled_worker_is_a_lost_worker_and_the_hits_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real worker computes beside the fake: a silence bound of 5 s (pings every 1.7 s)
    # is one a loaded machine's reading thread keeps; the result bound (4 s before a task
    # is measured) is what the fake must miss, and the real worker's computing slot says
    # it computes three times a second.
    monkeypatch.setenv("ANER_WORKER_SILENCE_S", "5")
    # Its first start stalls; any later start (the backend reconnects a lost worker) exits
    # at once, so that exactly one loss is counted whatever the timing.
    marker = tmp_path / "started-once"
    once = (
        f"import os, sys\nif os.path.exists({str(marker)!r}): sys.exit(3)\n"
        f"open({str(marker)!r}, 'w').close()\n"
    )
    exe = fake_worker(tmp_path, "idler", ANSWER_PINGS, prologue=once + HANDSHAKE)
    cluster = write_cluster(
        tmp_path / "cluster", [("stuck", "local", "-", exe, 1), ("good", "local", "-", ANER, 1)]
    )
    result = parallel.monte_carlo(
        samples=10**7, seed=42, execution=parallel.cluster(cluster, chunk=10**6), retries=1
    )
    assert result.hits == HITS_10M
    [loss] = result.losses
    assert (loss.identity, loss.phase) == ("stuck", "run")
    assert loss.detail.startswith("answered pings but returned no result for 4 s")
    accounts = {w.identity: w.items for w in result.workers}
    assert accounts == {"stuck": 0, "good": 10**7}


def test_a_corrupted_length_that_swallows_the_pongs_fails_within_the_frame_bound(
    tmp_path: Path,
) -> None:
    # One flipped bit: a frame of 16 MiB announced, then pongs that the decoder takes for its
    # payload. Bytes keep coming; no frame ever completes.
    exe = fake_worker(tmp_path, "swallower", "send(b'\\x01\\x00\\x00\\x00')\n" + ANSWER_PINGS)
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert re.fullmatch(
        r'worker "bad-1" failed during run: sent [\d,]+ bytes of a 16,777,216-byte frame and '
        r"not the rest within 5 s \(stalled mid-frame, or a corrupted length\)",
        str(failure.value),
    ), str(failure.value)


@pytest.mark.parametrize(
    ("busy", "queued", "field", "shown"),
    [
        ("float('inf')", "0.0", "busy_s", "inf"),
        ("float('nan')", "0.0", "busy_s", "nan"),
        ("-1.0", "0.0", "busy_s", "-1.0"),
        ("1e300", "0.0", "busy_s", "1e+300"),
        ("0.5", "float('inf')", "queued_s", "inf"),
        ("0.5", "-0.25", "queued_s", "-0.25"),
    ],
)
def test_impossible_timings_are_a_protocol_error_naming_the_worker(
    tmp_path: Path, busy: str, queued: str, field: str, shown: str
) -> None:
    exe = fake_worker(
        tmp_path,
        "clock",
        f"""
        from aner_worker.kernels import encode
        from aner_worker.kernels.montecarlo import McStats
        while True:
            for event in read():
                if isinstance(event, TaskReceived):
                    t = event.task
                    body = msgspec.Raw(encode(McStats(t.count * 3 // 4)))
                    result = Result(t.task_id, t.start, t.count, body, {busy}, {queued})
                    send(encoder.encode(result))
                elif isinstance(event, PingReceived):
                    send(conn.pong(event.nonce))
        """,
    )
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert re.fullmatch(
        rf'worker "bad-1" failed during run: protocol error: result for task \d+ has {field} = '
        rf"{re.escape(shown)}, not a number of seconds in 0\.\.1e\+07",
        str(failure.value),
    ), str(failure.value)


def test_a_claimed_compute_time_is_bounded_by_the_tasks_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An honest result that claims a week of computing: accepted (the hits are right), but
    # counted as no more than the seconds the task existed, here and in its pacing. (This
    # fake computes in its reading thread, so it may not answer a ping for a while.)
    monkeypatch.setenv("ANER_WORKER_SILENCE_S", "30")
    exe = fake_worker(
        tmp_path,
        "boaster",
        """
        from aner_worker.kernels import decode, encode
        from aner_worker.kernels.montecarlo import McParams, McStats
        kernel = KERNELS["monte-carlo"]
        while True:
            for event in read():
                if isinstance(event, TaskReceived):
                    t = event.task
                    params = decode(McParams, conn.params_for(t.pass_id).body)
                    stats = kernel.run(params, t.start, t.count, None)
                    body = msgspec.Raw(encode(stats))
                    send(encoder.encode(Result(t.task_id, t.start, t.count, body, 604800.0, 0.0)))
                elif isinstance(event, PingReceived):
                    send(conn.pong(event.nonce))
        """,
    )
    result = parallel.monte_carlo(
        samples=10**7, seed=42, execution=group(tmp_path, exe, chunk=10**6)
    )
    assert result.hits == HITS_10M
    [worker] = result.workers
    assert worker.compute_s is not None and 0 < worker.compute_s <= result.seconds
    assert worker.task_s is not None and worker.task_s <= result.seconds


MACHINE_PROLOGUE = """
import os, sys
import msgspec
from aner_worker.contract import source_fingerprint
from protocol import FrameEncoder, PROTOCOL_VERSION, Welcome, WorkerConnection
conn = WorkerConnection(source_fingerprint(), 2, "fake", {"monte-carlo"})
events = []
while not events:
    events = conn.receive(os.read(0, 65536))
hello = events[0].hello
"""


@pytest.mark.parametrize(
    ("machine", "problem"),
    [
        (
            "{'cpu_model': 'x' * 30_000_000}",
            "machine description field 'cpu_model' longer than 64 characters (key) or 256 (value)",
        ),
        (
            "{str(i): '' for i in range(100_000)}",
            "machine description of 100000 fields (at most 32)",
        ),
        ("{'k' * 1000: 'v'}", "machine description field '" + "k" * 64 + "' longer than"),
    ],
)
def test_an_oversized_machine_description_is_refused_and_never_stored(
    tmp_path: Path, machine: str, problem: str
) -> None:
    exe = fake_worker(
        tmp_path,
        "bloated",
        f"""
        welcome = Welcome(PROTOCOL_VERSION, conn.fingerprint, "fake", 2, hello.slots, {machine})
        os.write(1, FrameEncoder().encode(welcome))
        while os.read(0, 65536):
            pass
        """,
        prologue=MACHINE_PROLOGUE,
    )
    job = tmp_path / "job"
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe), output=job)
    message = str(failure.value)
    assert message.startswith(
        f'worker "bad-1" failed during handshake: protocol error: {problem}'
    ), message
    assert len(message) < 300
    status = (job / "status.json").read_bytes()
    assert len(status) < 16_384
    assert json.loads(status)["state"] == "FAILED"
    assert not (job / "result.json").exists()


def test_a_worker_that_stops_reading_its_input_is_lost(tmp_path: Path) -> None:
    # It answers the first pass (the feature moments: one chunk) with statistics that pass
    # its checks, then never reads again: the next pass's parameters, the weights of these
    # layers (2.4 MB, more than a pipe holds), can never be written.
    exe = fake_worker(
        tmp_path,
        "deaf",
        """
        from aner_worker.kernels import encode
        from aner_worker.kernels.dense.params import DenseStats
        answered = False
        while not answered:
            for event in read():
                if isinstance(event, PingReceived):
                    send(conn.pong(event.nonce))
                elif isinstance(event, TaskReceived):
                    t = event.task
                    zeros = bytes(8 * 8)
                    send(conn.result(t, encode(DenseStats(zeros, zeros, 0.0, 0, t.count)), 0.0))
                    answered = True
        time.sleep(3600)
        """,
    )
    with pytest.raises(JobFailed) as failure:
        parallel.dense_fit(
            teacher=(1000, 8, 2),
            hidden=(512, 512),
            epochs=1,
            seed=1,
            execution=group(tmp_path, exe),
        )
    message = str(failure.value)
    match = re.fullmatch(
        r'worker "bad-1" failed during run: did not take the ([\d,]+) bytes written to it '
        r"within ([\d.]+) s \(it stopped reading its input\)",
        message,
    )
    assert match is not None, message
    size = int(match.group(1).replace(",", ""))
    assert size > 2_000_000
    assert math.isclose(float(match.group(2)), 1 + size / (4 << 20), rel_tol=1e-3)


def test_a_worker_that_closes_its_input_is_lost_naming_it(tmp_path: Path) -> None:
    # Its output stays open (no end of file to read), so only a failed write can tell.
    exe = fake_worker(tmp_path, "closer", "os.close(0)\ntime.sleep(3600)\n")
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert str(failure.value) in {
        'worker "bad-1" failed during run: its input cannot be written to: the worker closed '
        "its input (it may have exited)",
        # Its silence may be judged first, at the same tick: either way, one line naming it.
        'worker "bad-1" failed during run: sent nothing for 1 s, not even an answer to a ping '
        "(stalled, or its link is cut)",
    }


def test_half_a_welcome_fails_the_handshake_within_the_frame_bound(tmp_path: Path) -> None:
    # The handshake may take minutes (a first start compiles the kernels), but a Welcome
    # that has begun must be whole within the bound of a frame of its size.
    exe = fake_worker(
        tmp_path,
        "stammer",
        """
        import os
        from aner_worker.contract import source_fingerprint
        from protocol import WorkerConnection
        conn = WorkerConnection(source_fingerprint(), 2, "fake", {"monte-carlo"})
        events = []
        while not events:
            events = conn.receive(os.read(0, 65536))
        reply = conn.reply()
        os.write(1, reply[: len(reply) // 2])
        while os.read(0, 65536):
            pass
        """,
        prologue="",
    )
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert re.fullmatch(
        r'worker "bad-1" failed during handshake: sent \d+ bytes of a \d+-byte frame and not '
        r"the rest within 1 s \(stalled mid-frame, or a corrupted length\)",
        str(failure.value),
    ), str(failure.value)


def test_a_frame_of_pongs_kept_open_forever_does_not_hold_a_job(tmp_path: Path) -> None:
    # At each ping: the end of the last pong and the start of the next. A frame is always
    # open and one completes at every ping, but no result ever comes.
    exe = fake_worker(
        tmp_path,
        "straddler",
        """
        rest = b""
        while True:
            for event in read():
                if isinstance(event, PingReceived):
                    pong = conn.pong(event.nonce)
                    send(rest + pong[: len(pong) // 2])
                    rest = pong[len(pong) // 2 :]
        """,
    )
    cluster = write_cluster(tmp_path / "cluster", [("bad-1", "local", "-", exe, 1)])
    argv = [
        ANER, "parallel", "run", "--samples", "1000000", "--seed", "1",
        "--cluster", str(cluster), "--output", str(tmp_path / "job"),
    ]  # fmt: skip
    with spawned(argv) as proc:
        code, _, err = finish(proc, 300)  # hang protection only: the bound is 5 s
    assert code == 3, err
    # The unmeasured result bound (4 x 1 s), plus the open frame's own bound (1 s) once.
    assert (
        'worker "bad-1" failed during run: answered pings but returned no result for 5 s with '
        in err
    ), err


SLOW_TASK = """
from aner_worker.kernels import decode, encode
from aner_worker.kernels.montecarlo import McParams
kernel = KERNELS["monte-carlo"]
answered = 0
held = None  # (task, result frame, pings seen since)
while True:
    for event in read():
        if isinstance(event, TaskReceived):
            t = event.task
            params = decode(McParams, conn.params_for(t.pass_id).body)
            frame = conn.result(t, encode(kernel.run(params, t.start, t.count, None)), 0.0001)
            answered += 1
            if answered == 4:  # the first three are quick; this one takes 30 pings
                held = [t, frame, 0]
            else:
                send(frame)
        elif isinstance(event, PingReceived):
            send(conn.pong(event.nonce))
            if held is not None:
                held[2] += 1
                if BEATS:
                    send(conn.working(held[0].task_id, held[2] * 0.3))
                if held[2] == 30:
                    send(held[1])
                    held = None
"""


@pytest.mark.parametrize(("beats", "timeout"), [(True, 30.0), (True, None), (False, None)])
def test_a_task_far_longer_than_those_before_lives_while_its_slot_says_so_until_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beats: bool, timeout: float | None
) -> None:
    # Pings every third of a second; three quick tasks make the measured task time tiny,
    # so the result bound is its floor, 2 s; the fourth task takes 30 pings (10 s), 10**5
    # times the first three. A worker that says it computes at every ping lives while
    # --task-timeout allows it; without one, past its deadline (the floor, 2 s: twenty times
    # the tasks measured is less); one that says nothing is lost at the result bound.
    monkeypatch.setenv("ANER_WORKER_RESULT_S", "2")
    # It computes in its reading thread: the kernel is loaded before the handshake, so
    # that no first task keeps it from answering a ping.
    warm = "from aner_worker.kernels import KERNELS\nKERNELS['monte-carlo'].warm_up()\n"
    exe = fake_worker(tmp_path, "slow", f"BEATS = {beats}\n" + SLOW_TASK, prologue=warm + HANDSHAKE)
    execution = group(tmp_path, exe, chunk=10**6)
    if timeout is not None:
        result = parallel.monte_carlo(
            samples=10**7, seed=42, execution=execution, task_timeout=timeout
        )
        assert result.hits == HITS_10M
        return
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**7, seed=42, execution=execution)
    message = str(failure.value)
    if beats:
        assert re.fullmatch(
            r'worker "bad-1" failed during run: computed task 4 \(1,000,000 items\) for '
            r"[\d.]+ s, past its deadline of 2 s \(20 times the slowest measured task's time "
            r"per item, at least 2 s; set --task-timeout where tasks grow faster\)",
            message,
        ), message
        return
    assert message.startswith(
        'worker "bad-1" failed during run: answered pings but returned no result for 2 s with '
    ), message


# Says it computes its first task, at every ping, and never returns it: with `elapsed_s`
# standing at 0 (STEP 0) or counting up as a real slot's would (STEP 0.3).
FOREVER = """
task = None
while True:
    for event in read():
        if isinstance(event, TaskReceived) and task is None:
            task, said = event.task, 0.0
        elif isinstance(event, PingReceived):
            send(conn.pong(event.nonce))
            if task is not None:
                said += STEP
                send(conn.working(task.task_id, said))
"""


def test_working_frames_that_do_not_count_up_make_the_worker_lost(tmp_path: Path) -> None:
    exe = fake_worker(tmp_path, "liar", "STEP = 0.0\n" + FOREVER)
    with pytest.raises(JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe))
    assert str(failure.value) == (
        'worker "bad-1" failed during run: said it had been at task 1 for 0 s after saying '
        "0 s (its Working frames must count up)"
    )


@pytest.mark.parametrize("step", [0.0, 0.3])
def test_with_retries_a_worker_working_forever_is_lost_and_the_hits_are_exact(
    tmp_path: Path, step: float
) -> None:
    # Its first start says it works forever; a later start (a rejoin) exits at once, so
    # that one loss is counted. A real worker beside it computes every chunk.
    marker = tmp_path / "started-once"
    once = (
        f"import os, sys\nif os.path.exists({str(marker)!r}): sys.exit(3)\n"
        f"open({str(marker)!r}, 'w').close()\n"
    )
    exe = fake_worker(tmp_path, "liar", f"STEP = {step}\n" + FOREVER, prologue=once + HANDSHAKE)
    cluster = write_cluster(
        tmp_path / "cluster", [("liar", "local", "-", exe, 1), ("good", "local", "-", ANER, 1)]
    )
    result = parallel.monte_carlo(
        samples=10**7,
        seed=42,
        execution=parallel.cluster(cluster, chunk=10**6),
        retries=1,
        task_timeout=2,
    )
    assert result.hits == HITS_10M
    [loss] = result.losses
    assert (loss.identity, loss.phase) == ("liar", "run")
    expected = "past its deadline of 2 s (--task-timeout)" if step else "must count up"
    assert expected in loss.detail, loss.detail
    assert {w.identity: w.items for w in result.workers} == {"liar": 0, "good": 10**7}


# Computes each task honestly, each taking five times the one before (5 ms to 3 s), saying
# `Working` every 0.2 s with its true time and answering pings meanwhile.
GROWING = """
import select
from aner_worker.kernels import decode, encode
from aner_worker.kernels.montecarlo import McParams
kernel = KERNELS["monte-carlo"]
waiting, current, n = [], None, 0
while True:
    if select.select([0], [], [], 0.02)[0]:
        for event in read():
            if isinstance(event, TaskReceived):
                waiting.append(event.task)
            elif isinstance(event, PingReceived):
                send(conn.pong(event.nonce))
    now = time.monotonic()
    if current is None and waiting:
        t = waiting.pop(0)
        params = decode(McParams, conn.params_for(t.pass_id).body)
        body = encode(kernel.run(params, t.start, t.count, None))
        current, n = [t, body, now, 0.005 * 5**n, now], n + 1
    if current is not None:
        t, body, began, takes, said = current
        if now - began >= takes:
            send(conn.result(t, body, now - began, 0.0, began))
            current = None
        elif now - said >= 0.2:
            send(conn.working(t.task_id, now - began))
            current[4] = now
"""


def test_an_honest_worker_whose_tasks_grow_completes(tmp_path: Path) -> None:
    """No --task-timeout: each task's default deadline is twenty times the slowest one
    before it per item (at least the floor, 1 s here), and each takes five times that one."""
    warm = "from aner_worker.kernels import KERNELS\nKERNELS['monte-carlo'].warm_up()\n"
    exe = fake_worker(tmp_path, "grower", GROWING, prologue=warm + HANDSHAKE)
    result = parallel.monte_carlo(
        samples=5 * 10**6, seed=42, execution=group(tmp_path, exe, chunk=10**6)
    )
    assert result.hits == oracle_hits(42, 0, 5 * 10**6)
