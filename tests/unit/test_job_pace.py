"""Progress weighted by cost, and the ETA (`aner_coord.job.pace`), on recorded sequences of
observations: a Dense training's passes as the machine reports them (one observation after
each pass), with per-row costs that differ by kind, per-pass overheads and jitter. No clock
is read: the times are the sequence's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from aner_coord.computations.base import ONE_KIND, Segment
from aner_coord.computations.dense.run import (
    NORMALISATION,
    PRIOR_COSTS,
    STEP,
    TEST_PASS,
    VALIDATION_PASS,
    training_plan,
)
from aner_coord.job.pace import Pace, added, prefix, totals

TRAIN, VALIDATION, TEST, EPOCHS, BATCH = 4_800, 1_600, 1_600, 10, 64
PLAN = training_plan(TRAIN, VALIDATION, TEST, EPOCHS)
# Seconds per row of each kind and per pass: a normalisation row is summed, a training row
# goes forward and backward, an evaluated row forward only; every pass has a barrier.
# A job of about a minute, as the 100 s one.
COST = {NORMALISATION: 1e-6, STEP: 1e-3, VALIDATION_PASS: 2.5e-4, TEST_PASS: 2.5e-4}
OVERHEAD_S = 0.02


@dataclass(frozen=True)
class Observation:
    at: float
    live: dict[str, int]  # this run's items by kind so far


def passes() -> list[tuple[str, int]]:
    """The training's passes in order: normalisation, each epoch's steps and validation,
    the test."""
    out = [(NORMALISATION, TRAIN)]
    for _ in range(EPOCHS):
        steps, last = divmod(TRAIN, BATCH)
        out += [(STEP, BATCH)] * steps + ([(STEP, last)] if last else [])
        out.append((VALIDATION_PASS, VALIDATION))
    return [*out, (TEST_PASS, TEST)]


def recorded(seed: int, skip: int = 0, warm_up: float = 1.0) -> list[Observation]:
    """One run's observations: at its start, then after each pass from pass `skip` on (the
    passes before were recovered), each pass taking its rows' cost plus the barrier, with
    up to 15% jitter either way; the passes of the first epoch `warm_up` times slower."""
    jitter = random.Random(seed)
    at, live = 100.0, dict.fromkeys(COST, 0)
    out = [Observation(at, dict(live))]
    first_epoch = 1 + TRAIN // BATCH + 1
    for index, (kind, rows) in enumerate(passes()[skip:], start=skip):
        slower = warm_up if index < first_epoch else 1.0
        at += (rows * COST[kind] + OVERHEAD_S) * jitter.uniform(0.85, 1.15) * slower
        live[kind] += rows
        out.append(Observation(at, dict(live)))
    return out


def test_the_plan_and_its_prefix_by_kind() -> None:
    assert totals(PLAN) == {
        NORMALISATION: TRAIN,
        STEP: EPOCHS * TRAIN,
        VALIDATION_PASS: EPOCHS * VALIDATION,
        TEST_PASS: TEST,
    }
    assert prefix(PLAN, TRAIN + 100) == {
        NORMALISATION: TRAIN,
        STEP: 100,
        VALIDATION_PASS: 0,
        TEST_PASS: 0,
    }
    first_epoch = TRAIN + TRAIN + VALIDATION
    assert prefix(PLAN, first_epoch + 7) == {
        NORMALISATION: TRAIN,
        STEP: TRAIN + 7,
        VALIDATION_PASS: VALIDATION,
        TEST_PASS: 0,
    }
    assert prefix(PLAN, 10**9) == totals(PLAN)
    assert sum(s.items for s in PLAN) == TRAIN + EPOCHS * (TRAIN + VALIDATION) + TEST


def test_the_normalisation_pass_does_not_move_the_bar_as_training_would() -> None:
    pace = Pace(PLAN, PRIOR_COSTS)
    observations = recorded(seed=1)
    for seen in observations[:2]:  # the start, then the normalisation pass
        pace.observe(seen.at, seen.live)
    done = observations[1].live
    rows_share = TRAIN / sum(totals(PLAN).values())
    assert rows_share > 0.06  # what an unweighted bar shows after normalising
    assert pace.fraction(done) < 0.005
    assert pace.eta(done) is None  # no training step measured yet


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_eta_of_a_steady_job_is_within_20_percent_from_10_percent_on(seed: int) -> None:
    observations = recorded(seed)
    end = observations[-1].at
    pace = Pace(PLAN, PRIOR_COSTS)
    checked = 0
    worst = 0.0
    for seen in observations:
        pace.observe(seen.at, seen.live)
        fraction = pace.fraction(seen.live)
        left = end - seen.at
        if fraction < 0.10 or left <= 0:
            continue
        eta = pace.eta(seen.live)
        assert eta is not None, f"no ETA at {fraction:.1%}"
        worst = max(worst, abs(eta - left) / left)
        assert abs(eta - left) <= 0.20 * left, f"ETA {eta:.3f} s for {left:.3f} s at {fraction:.1%}"
        checked += 1
    assert checked > 500
    print(f"seed {seed}: worst ETA error from 10% on {worst:.1%} over {checked} observations")


def test_a_first_epoch_slowed_by_warming_caches_is_forgotten() -> None:
    """A first epoch 1.5 times slower than the rest: the cost of older work fades, so the
    ETA is back within 20% soon after that epoch."""
    observations = recorded(seed=5, warm_up=1.5)
    end = observations[-1].at
    pace = Pace(PLAN, PRIOR_COSTS)
    errors = []
    for seen in observations:
        pace.observe(seen.at, seen.live)
        eta, left = pace.eta(seen.live), end - seen.at
        if eta is not None and left > 0 and pace.fraction(seen.live) >= 0.20:
            errors.append(abs(eta - left) / left)
    assert errors and max(errors) <= 0.20, max(errors)


def test_an_eta_from_items_alone_would_swing_out_of_that_bound() -> None:
    """The former estimate (items left over items done per second) misses by far more than
    20% on the same sequence: the bound above can fail."""
    observations = recorded(seed=1)
    start, end = observations[0].at, observations[-1].at
    planned = sum(totals(PLAN).values())
    worst = 0.0
    for seen in observations:
        done = sum(seen.live.values())
        left = end - seen.at
        if done < 0.10 * planned or left <= 0:
            continue
        eta = (planned - done) / (done / (seen.at - start))
        worst = max(worst, abs(eta - left) / left)
    assert worst > 0.20


def test_a_resume_counts_what_it_recovered_as_done_and_times_only_its_own_work() -> None:
    skip = 1 + 4 * (TRAIN // BATCH + 1)  # normalisation and four epochs were checkpointed
    recovered_items = TRAIN + 4 * (TRAIN + VALIDATION)
    kept = prefix(PLAN, recovered_items)
    assert kept == {
        NORMALISATION: TRAIN,
        STEP: 4 * TRAIN,
        VALIDATION_PASS: 4 * VALIDATION,
        TEST_PASS: 0,
    }
    whole = recorded(seed=4)
    observations = recorded(seed=4, skip=skip)
    pace = Pace(PLAN, PRIOR_COSTS)
    pace.observe(observations[0].at, observations[0].live)
    first = pace.fraction(added(kept, observations[0].live))
    # The numerator starts at the recovered work: four of ten epochs, less the cheap rest.
    assert 0.38 < first < 0.42
    assert pace.eta(added(kept, observations[0].live)) is None  # nothing of its own yet
    end = observations[-1].at
    for seen in observations[1:]:
        pace.observe(seen.at, seen.live)
        done = added(kept, seen.live)
        assert pace.fraction(done) >= first
        left = end - seen.at
        eta = pace.eta(done)
        if pace.fraction(done) >= 0.5 and left > 0:
            assert eta is not None and abs(eta - left) <= 0.20 * left
    assert pace.fraction(added(kept, observations[-1].live)) == pytest.approx(1.0)
    # Its own run took the time of the six epochs left, not of ten.
    assert end - observations[0].at < 0.7 * (whole[-1].at - whole[0].at)


def test_one_kind_is_items_over_items_and_time_without_movement_waits() -> None:
    plan = (Segment(ONE_KIND, 1_000),)
    pace = Pace(plan, {})
    pace.observe(0.0, {ONE_KIND: 0})
    pace.observe(1.0, {ONE_KIND: 0})  # nothing moved: the second goes to what moves next
    pace.observe(2.0, {ONE_KIND: 250})
    assert pace.fraction({ONE_KIND: 250}) == 0.25
    assert pace.cost(ONE_KIND) == pytest.approx(2.0 / 250)
    assert pace.eta({ONE_KIND: 250}) == pytest.approx(6.0)
    assert pace.eta({ONE_KIND: 1_000}) == 0.0


def test_no_eta_before_half_a_second_or_a_hundredth_of_the_work() -> None:
    pace = Pace((Segment(ONE_KIND, 1_000_000),), {})
    pace.observe(0.0, {ONE_KIND: 0})
    pace.observe(0.4, {ONE_KIND: 1_000})
    assert pace.eta({ONE_KIND: 1_000}) is None  # 0.4 s measured
    pace.observe(0.8, {ONE_KIND: 2_000})
    assert pace.eta({ONE_KIND: 2_000}) is None  # 0.2% of the work
    pace.observe(4.0, {ONE_KIND: 10_000})
    assert pace.eta({ONE_KIND: 10_000}) == pytest.approx(396.0)
