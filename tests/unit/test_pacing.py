"""Latency-adaptive windows (`aner_coord.job.pacing`): sizes from round trip and task time,
bounds, the moving averages and when the window moves. Pure: no clock, no processes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aner_coord.job.pacing import HYSTERESIS, Pacer, Window, size_window
from protocol import MAX_QUEUED_PER_SLOT


def limit(slots: int) -> int:
    return slots * MAX_QUEUED_PER_SLOT


def test_without_a_round_trip_the_window_holds_about_queue_s_of_work_per_slot() -> None:
    # 5 ms tasks: 1 running + 50 ms / 5 ms queued per slot; written in halves.
    assert size_window(2, 0.0, 0.005, limit(2)) == Window(22, 12)


def test_the_round_trip_is_covered_by_the_low_water_mark() -> None:
    # 60 ms round trip, 4 ms tasks, one slot: 1 + (60 + 25) / 4 -> 23 at low water,
    # 1 + (60 + 50) / 4 -> 29 in all.
    assert size_window(1, 0.060, 0.004, limit(1)) == Window(29, 23)


def test_long_tasks_keep_two_per_slot_and_one_slot_worth_of_low_water() -> None:
    assert size_window(3, 0.060, 10.0, limit(3)) == Window(6, 4)
    assert size_window(1, 0.0, 10.0, limit(1)) == Window(2, 1)


def test_tiny_tasks_or_huge_round_trips_stop_at_what_the_worker_accepts() -> None:
    assert size_window(2, 0.060, 1e-5, limit(2)).size == limit(2)
    assert size_window(2, 5.0, 0.01, limit(2)) == Window(limit(2), limit(2) - 1)
    assert size_window(1, 0.0, 0.0, limit(1)).size == limit(1)  # no division by zero


@given(
    slots=st.integers(1, 64),
    rtt=st.floats(0.0, 10.0),
    task=st.floats(0.0, 100.0),
)
def test_bounds_hold_for_any_estimates(slots: int, rtt: float, task: float) -> None:
    w = size_window(slots, rtt, task, limit(slots))
    assert 2 * slots <= w.size <= limit(slots)
    assert slots <= w.low_water < w.size


@given(
    slots=st.integers(1, 8),
    task=st.floats(1e-4, 1.0),
    rtts=st.lists(st.floats(0, 1), min_size=2, max_size=2),
)
def test_the_window_never_shrinks_as_the_round_trip_grows(
    slots: int, task: float, rtts: list[float]
) -> None:
    low, high = sorted(rtts)
    a, b = size_window(slots, low, task, limit(slots)), size_window(slots, high, task, limit(slots))
    assert a.size <= b.size and a.low_water <= b.low_water


def test_a_pacer_starts_from_the_prior_and_grows_with_the_first_ping() -> None:
    pacer = Pacer(1, 0.004, limit(1))
    assert (pacer.rtt_s, pacer.task_s) == (None, None)
    assert pacer.window == size_window(1, 0.0, 0.004, limit(1))
    grown = pacer.round_trip(0.060)  # the first sample seeds the average
    assert grown == size_window(1, 0.060, 0.004, limit(1)) == pacer.window
    assert pacer.rtt_s == 0.060


def test_measured_task_times_replace_the_prior() -> None:
    pacer = Pacer(1, 1.0, limit(1))  # the prior thought tasks long
    assert pacer.window.size == 2
    window = pacer.answered(busy_s=0.004, link_s=0.060)
    assert (pacer.task_s, pacer.rtt_s) == (0.004, 0.060)
    assert window == size_window(1, 0.060, 0.004, limit(1))


def test_estimates_are_moving_averages_with_weight_one_eighth() -> None:
    pacer = Pacer(1, 0.004, limit(1))
    pacer.answered(0.004, 0.060)
    pacer.answered(0.012, 0.140)
    assert pacer.task_s == pytest.approx(0.004 + (0.012 - 0.004) / 8)
    assert pacer.rtt_s == pytest.approx(0.060 + (0.140 - 0.060) / 8)


def test_an_unstamped_answer_updates_only_the_task_time() -> None:
    pacer = Pacer(1, 0.004, limit(1))
    pacer.round_trip(0.030)
    pacer.answered(0.008, None)
    assert (pacer.task_s, pacer.rtt_s) == (0.008, 0.030)


def test_small_changes_leave_the_window_alone_and_large_ones_move_it_both_ways() -> None:
    pacer = Pacer(1, 0.004, limit(1))
    pacer.round_trip(0.060)
    before = pacer.window
    # A round trip a little longer: the new size is within an eighth, nothing moves.
    assert pacer.round_trip(0.064) is None and pacer.window == before
    assert size_window(1, pacer.rtt_s or 0.0, 0.004, limit(1)).size <= before.size * (
        1 + HYSTERESIS
    )
    # The link gets fast: the average falls and the window shrinks once it is an eighth off.
    shrunk = None
    for _ in range(40):
        shrunk = pacer.answered(0.004, 0.0) or shrunk
    assert shrunk is not None and shrunk.size < before.size
    assert pacer.window == shrunk
    # Slow again: it grows back.
    grown = None
    for _ in range(40):
        grown = pacer.answered(0.004, 0.060) or grown
    assert grown is not None and grown.size > shrunk.size
