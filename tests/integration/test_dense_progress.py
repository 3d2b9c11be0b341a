"""Dense progress is true (issue 16, item 3): the work counts every pass (normalisation,
steps, validation, test), the percentage never exceeds 100 and reaches it only at
completion, the position is epoch e of E and step s of S with the latest validation
accuracy, the rate reads in k/M units and the ETA is never negative and says when it is an
upper bound. Asserted on every snapshot a real job publishes, on what `status` and the
cancel message print, and at completion."""

from __future__ import annotations

import re
import time
from pathlib import Path

from support import read_status, result_of, run_aner, wait_for

from aner_coord.admission import admit
from aner_coord.cli.monitor import busy_text
from aner_coord.cli.progress import compact, describe, percent, rate_text, work_text
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.job.coordinator import STATUS_INTERVAL_S, TICK_S
from aner_coord.job.execute import execute
from aner_coord.jobdir import JobDir
from aner_coord.jobdir.status import JobState, StatusSnapshot
from aner_coord.requests import JobRequest, LocalExecution
from aner_coord.runner import run_sync

SLOW = 3  # positions (epoch, step) the observer takes its time over
RATE = re.compile(r"(--|\d+(\.\d+)?[kMGT]?) rows/s")
# The work's percent: of the rows, or of the rows and of the cost, each labelled (issue 38).
DONE = r"\((\d+\.\d%|\d+\.\d% of the rows, \d+\.\d% of the cost)\)"


def test_every_snapshot_of_a_training_job_tells_the_truth(tmp_path: Path) -> None:
    epochs, patience = 6, 2
    job = admit(
        JobRequest(
            computation=DenseRequest(
                seed=3, teacher=(3000, 8, 3), hidden=(16,), epochs=epochs, patience=patience
            ),
            # Passes of one chunk: each snapshot the slow observer takes leaves the next
            # pass's snapshot due.
            execution=LocalExecution(workers=2, chunk=4096),
            output=str(tmp_path / "job"),
        )
    )
    roles = job.admitted.describe["roles"]
    steps = job.admitted.describe["steps_per_epoch"]
    planned = roles["train"] + epochs * (roles["train"] + roles["validation"]) + roles["test"]
    seen: list[StatusSnapshot] = []

    def observe(snapshot: StatusSnapshot) -> None:
        """Slow until it has seen SLOW positions (a snapshot is then due at the next pass,
        whatever this machine's speed), so that snapshots of several steps are seen."""
        seen.append(snapshot)
        if len({s.position for s in seen if s.position is not None}) < SLOW:
            time.sleep(STATUS_INTERVAL_S)

    began = time.monotonic()
    report = run_sync(execute(job, observers=[observe]))
    elapsed = time.monotonic() - began
    assert report.state is JobState.COMPLETED
    result = result_of(tmp_path / "job")
    ran = len(result["history"])

    running = [s for s in seen if s.state is not JobState.COMPLETED]
    assert seen[: len(running)] == running  # then only COMPLETED snapshots
    for snap in running:
        assert snap.total_work == planned and snap.work_upper_bound  # patience < epochs
        assert 0 <= snap.accepted <= planned
        assert percent(snap) < 100.0
        assert snap.eta_s is None or snap.eta_s >= 0
        assert RATE.search(rate_text(snap)), rate_text(snap)
        assert work_text(snap).startswith(f"{snap.accepted:,} of at most {planned:,} rows (")
        if snap.eta_s is not None:
            assert "ETA at most " in describe(snap)
        if snap.position is not None:
            at = snap.position
            assert 1 <= at.epoch <= ran and at.epochs == epochs
            assert 1 <= at.step <= at.steps == steps  # the step in progress, from 1
            assert f"epoch {at.epoch} of {epochs}, step {at.step} of {steps}" in describe(snap)
            assert compact(snap).startswith(f"epoch {at.epoch}/{epochs} step {at.step}/{steps}")
    # Snapshots come on state changes and otherwise at most every STATUS_INTERVAL_S, not one
    # per step (one per step cost a Dense step on the digits 5%): positions only move on.
    positions = [(s.position.epoch, s.position.step) for s in seen if s.position is not None]
    assert len(set(positions)) >= SLOW and positions == sorted(positions)
    assert len(seen) <= 8 + elapsed / min(STATUS_INTERVAL_S, TICK_S), len(seen)
    # The accuracies shown are the latest validation's, epoch by epoch as they came.
    accuracies = [s.position.validation_accuracy for s in seen if s.position is not None]
    history = iter(h["validation_accuracy"] for h in result["history"])
    assert all(a in history for a in dict.fromkeys(accuracies) if a is not None), accuracies
    accepted = [s.accepted for s in seen]
    assert accepted == sorted(accepted)

    # What ran is the whole work of a completed job (early stopping may have ended it sooner).
    ran_work = roles["train"] + ran * (roles["train"] + roles["validation"]) + roles["test"]
    for final in seen[len(running) :]:
        assert percent(final) == 100.0 and final.eta_s is None
        assert final.accepted == final.total_work == ran_work and not final.work_upper_bound
        assert work_text(final) == f"{ran_work:,} of {ran_work:,} rows (100.0%)"


def test_status_watch_and_cancel_show_epochs_steps_and_readable_rates(tmp_path: Path) -> None:
    job = tmp_path / "job"
    started = run_aner(
        "parallel", "train", "--teacher", "200000,32,5", "--seed", "1", "--epochs", "500",
        "--patience", "500", "--workers", "1", "--output", str(job), "--background",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:

        def an_epoch_done() -> StatusSnapshot | None:
            snap = read_status(job)
            ok = snap is not None and snap.position is not None
            return snap if ok and snap.position.validation_accuracy is not None else None  # type: ignore[union-attr]

        wait_for(an_epoch_done, 300, "the first epoch's validation")
        status = run_aner("parallel", "status", "--job", str(job))
        assert status.returncode == 0, status.stderr
        lines = {line[:9].strip(): line[10:] for line in status.stdout.splitlines()}
        assert re.fullmatch(
            r"epoch \d+ of 500, step \d+ of \d+, validation accuracy 0\.\d{4}", lines["training"]
        ), lines["training"]
        assert re.fullmatch(r"[\d,]+ of [\d,]+ rows " + DONE, lines["work"]), lines["work"]
        assert RATE.fullmatch(lines["rate"]), lines["rate"]
        assert re.fullmatch(r"(\d+:)?\d+:\d\d|--", lines["eta"]), lines["eta"]  # no bound here
        # What `status --watch` adds while the job runs: its worker's recent busy share,
        # from the tail of the live timeline.
        with JobDir.open(job) as directory:
            busy = busy_text(directory)
        assert busy is not None and re.fullmatch(
            r"local-1 \d+% \(computing, last 5 s of the timeline\)", busy
        ), busy
    finally:
        cancelled = run_aner("parallel", "cancel", "--job", str(job), timeout=120)
    assert cancelled.returncode == 4, cancelled.stderr
    message = cancelled.stdout.strip().splitlines()[-1]
    assert re.search(
        r"CANCELLED; partial counts are diagnostic only: CANCELLED \[epoch \d+ of 500, step \d+ "
        r"of \d+(, validation accuracy 0\.\d+)?\] [\d,]+ of [\d,]+ rows " + DONE + r", "
        r"(--|\d+(\.\d+)?[kMG]?) rows/s, ETA --",
        message,
    ), message
    watched = run_aner("parallel", "status", "--job", str(job), "--watch")  # not a terminal
    assert watched.returncode == 4, watched.stderr
    assert re.fullmatch(
        r"CANCELLED \[epoch \d+ of 500, step \d+ of \d+, validation accuracy 0\.\d{4}\] [\d,]+ "
        r"of [\d,]+ rows " + DONE + r", (\d+(\.\d+)?[kMG]?) rows/s, ETA --\n",
        watched.stdout,
    ), watched.stdout
