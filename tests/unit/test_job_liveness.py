"""The liveness rules (aner_coord/job/liveness.py), pure: clocks in, verdicts out."""

from __future__ import annotations

import pytest

from aner_coord.job.liveness import (
    Deadline,
    Liveness,
    frame_bound,
    result_bound,
    result_floor,
    silence_timeout,
)

MIB = 1 << 20


def watch(at: float = 100.0) -> Liveness:
    return Liveness(silence_s=30.0, result_floor_s=30.0, heard=at, progress=at)


def test_a_worker_heard_from_within_the_silence_bound_is_alive() -> None:
    w = watch()
    assert w.verdict(129.9, 0, 0.01, True) is None
    assert w.verdict(130.1, 0, 0.01, True) == (
        "sent nothing for 30 s, not even an answer to a ping (stalled, or its link is cut)"
    )
    w.read(130.0, 1, 0, None)  # a complete frame
    assert w.verdict(159.9, 0, 0.01, True) is None


def test_bytes_without_a_complete_frame_are_not_a_sign_of_life() -> None:
    w = watch()
    w.read(101.0, 0, 4, 16 * MIB)  # a header announcing 16 MiB
    for at in range(102, 250, 10):  # more bytes of it, never a whole frame
        w.read(float(at), 0, 4 + at, 16 * MIB)
    assert frame_bound(30.0, 16 * MIB) == 150.0
    assert w.verdict(250.0, 0, 0.01, True) is None  # 149 s open: within its bound
    assert w.verdict(252.0, 0, 0.01, True) == (
        "sent 246 bytes of a 16,777,216-byte frame and not the rest within 150 s "
        "(stalled mid-frame, or a corrupted length)"
    )


def test_a_frame_that_completes_and_one_that_begins_in_the_same_read() -> None:
    w = watch()
    w.read(110.0, 0, 10, 100)
    w.read(135.0, 2, 3, None)  # two frames done, a new one begun: its clock starts now
    assert w.frame_opened == 135.0 and w.heard == 135.0
    assert w.verdict(165.1, 0, 0.01, True) == (
        "sent 3 bytes of a frame and not the rest within 30 s "
        "(stalled mid-frame, or a corrupted length)"
    )
    w.read(166.0, 1, 0, None)
    assert w.frame_opened is None


def test_a_worker_that_answers_pings_but_computes_nothing_is_lost() -> None:
    w = watch()
    for at in range(105, 400, 5):
        w.read(float(at), 1, 0, None)  # a pong every 5 s
    assert w.verdict(399.0, 3, 0.5, True) == (
        "answered pings but returned no result for 30 s with 3 task(s) outstanding (its "
        "tasks take about 0.5 s; stalled)"
    )
    assert w.verdict(399.0, 0, 0.5, True) is None  # nothing outstanding: nothing owed


def test_an_open_frame_that_keeps_growing_does_not_hold_off_the_result_bound() -> None:
    # Every second the end of one pong and the start of the next: a frame always open,
    # one completing every second, and never a result.
    w = watch()
    for at in range(101, 1000):
        w.read(float(at), 1, 3, None)
        lost = w.verdict(float(at), 3, 0.5, True)
        if lost is not None:
            break
    # The result bound (30 s) plus, once, the open frame's own bound (30 s).
    assert at == 161
    assert lost == (
        "answered pings but returned no result for 60 s with 3 task(s) outstanding (its "
        "tasks take about 0.5 s; stalled)"
    )


def test_a_slot_that_says_it_computes_keeps_a_long_task_alive() -> None:
    w = watch()
    for at in range(105, 400, 5):  # a pong and a word from the computing slot every 5 s
        w.read(float(at), 2, 0, None)
        w.progress = float(at)  # what the backend does with a `Working` frame
        assert w.verdict(float(at) + 4.0, 1, 0.001, True) is None
    assert w.verdict(399.0 + 31.0, 1, 0.001, True) is not None  # then silence on it


def test_the_result_bound_follows_the_task_time_with_a_generous_floor() -> None:
    assert result_bound(30.0, 0.01, measured=True) == 30.0
    assert result_bound(30.0, 10.0, measured=True) == 200.0
    assert result_bound(30.0, 0.01, measured=False) == 120.0  # a first task may warm up
    assert result_bound(30.0, 60.0, measured=False) == 1200.0
    w = watch()
    w.read(180.0, 1, 0, None)
    assert w.verdict(180.0, 2, 10.0, True) is None  # 80 s for tasks of 10 s: fine
    w.read(299.0, 1, 0, None)
    assert w.verdict(301.0, 2, 10.0, True) is not None  # 201 s: twenty times over


def test_a_write_in_progress_has_its_own_bound_and_pauses_the_other_clocks() -> None:
    w = watch()
    w.writing(110.0, 8 * MIB)  # three times the bound for 8 MiB
    assert frame_bound(30.0, 8 * MIB) == 90.0
    assert w.verdict(190.0, 5, 0.01, True) is None  # silent meanwhile: our write's fault
    assert w.verdict(200.5, 5, 0.01, True) == (
        "did not take the 8,388,608 bytes written to it within 90 s (it stopped reading its input)"
    )
    w.written(195.0)  # took 85 s: the silence and result clocks move on by as much
    assert w.writing_since is None
    assert w.heard == 185.0 and w.progress == 185.0
    assert w.verdict(214.0, 5, 0.01, True) is None
    assert w.verdict(215.5, 5, 0.01, True) is not None


def test_a_failed_write_is_reported_first() -> None:
    w = watch()
    w.write_failed = "the worker closed its input (it may have exited)"
    assert w.verdict(100.0, 0, 0.01, True) == (
        "its input cannot be written to: the worker closed its input (it may have exited)"
    )


@pytest.mark.parametrize(
    ("value", "silence", "floor"),
    [
        (None, 30.0, 30.0),
        ("5", 5.0, 5.0),
        ("0.01", 0.5, 0.5),
        ("nan", 30.0, 30.0),
        ("inf", 30.0, 30.0),
        ("1e9", 86400.0, 86400.0),
        ("x", 30.0, 30.0),
    ],
)
def test_the_bounds_come_from_the_environment_within_limits(
    monkeypatch: pytest.MonkeyPatch, value: str | None, silence: float, floor: float
) -> None:
    for name in ("ANER_WORKER_SILENCE_S", "ANER_WORKER_RESULT_S"):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert silence_timeout() == silence
    assert result_floor() == floor


def test_a_tasks_deadline_is_its_timeout_or_twenty_times_the_slowest_measured_per_item() -> None:
    deadline = Deadline(None, 30.0)
    assert deadline.of(1000, None, 0.5) == 120.0  # nothing measured: four times the floor
    assert deadline.of(1000, None, 10.0) == 200.0  # or twenty times the prior estimate
    assert deadline.of(1000, 1e-4, 0.5) == 30.0  # 2 s computed: the floor
    assert deadline.of(1000, 0.01, 0.5) == 200.0  # 20 x 0.01 s x 1000 items
    assert Deadline(5.0, 30.0).of(10**6, 1.0, 99.0) == 5.0  # --task-timeout decides


def test_working_frames_extend_nothing_past_a_tasks_deadline() -> None:
    w = watch()
    # Its first word: 3 s computed, so it began at 97 s; later words move nothing.
    assert w.working(100.0, 7, 1000, 3.0, 0.0) is None
    for now in (110.0, 120.0, 130.0):
        assert w.working(now, 7, 1000, now - 97.0, 0.0) is None
        assert w.verdict(now, 1, 0.01, True) is None  # a word from a slot is progress
    assert w.overdue(126.9, lambda count: 30.0, "rule") is None
    assert w.overdue(127.1, lambda count: 30.0, "rule") == (
        "computed task 7 (1,000 items) for 30.1 s, past its deadline of 30 s (rule)"
    )
    w.answered(7)
    assert w.overdue(200.0, lambda count: 30.0, "rule") is None


def test_working_frames_must_count_up_and_waiting_for_a_grant_is_not_computing() -> None:
    w = watch()
    assert w.working(100.0, 1, 10, 0.0, 0.0) is None
    assert w.working(101.0, 1, 10, 0.0, 0.0) == (
        "said it had been at task 1 for 0 s after saying 0 s (its Working frames must count up)"
    )
    assert w.working(100.0, 2, 10, 2.0, 0.0) is None  # a new task's first word
    assert w.working(101.0, 2, 10, 1.5, 0.0) == (
        "said it had been at task 2 for 1.5 s after saying 2 s (its Working frames must count up)"
    )
    w.answered(2)
    # Waiting for a granted slot: no deadline until it computes.
    assert w.working(100.0, 3, 10, 0.0, 5.0) is None
    assert w.working(500.0, 3, 10, 0.0, 405.0) is None
    assert w.overdue(500.0, lambda count: 30.0, "rule") is None
    assert w.working(501.0, 3, 10, 1.0, 405.0) is None  # computing since 500 s
    assert w.overdue(529.9, lambda count: 30.0, "rule") is None
    assert w.overdue(530.1, lambda count: 30.0, "rule") is not None


def test_tasks_whose_cost_does_not_follow_their_items_have_the_ceiling() -> None:
    from aner_coord.computations.base import UnevenTasks
    from aner_coord.computations.montecarlo import MonteCarlo
    from aner_coord.computations.search.computation import Search

    assert isinstance(Search(), UnevenTasks) and not isinstance(MonteCarlo(), UnevenTasks)
    assert Deadline(None, 30.0, uneven=True).of(1, 1e-4, 0.5) == 86_400.0
    assert Deadline(60.0, 30.0, uneven=True).of(1, 1e-4, 0.5) == 60.0
