"""The machine load recorded with each scaling trial (issue 25 item 16;
`aner_coord.scaling.load`): other processes that keep every CPU busy while a trial runs make
it a trial taken on a busy machine, and the report says which trials were."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psutil

from aner_coord.scaling.load import BUSY_SHARE, LoadMeter, MachineLoad
from aner_coord.scaling.records import _load_lines

SPIN = "while True: pass"


def test_other_processes_that_keep_every_cpu_busy_make_a_busy_trial() -> None:
    cpus = psutil.cpu_count() or 1
    burners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(cpus)]
    try:
        meter = LoadMeter()
        meter.start()
        # The trial itself: a child that computes nothing and is reaped before `stop`.
        subprocess.run([sys.executable, "-c", "import time; time.sleep(1.0)"], check=True)
        load = meter.stop()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert load.cpus == cpus
    assert load.busy and BUSY_SHARE <= load.others_cpu_share <= 1.0, load
    record: dict[str, Any] = load.to_record()
    assert record["busy"] is True and len(record["load_1m"]) == 2


def _record(case: str, rep: int, share: float) -> dict[str, Any]:
    load = MachineLoad(17.5, 21.0, share, 2)
    return {"case": case, "repetition": rep, "warmup": rep == 0, **load.to_record()}


def test_the_report_names_the_trials_taken_on_a_busy_machine() -> None:
    records = [_record("one", 1, 0.05), _record("two", 1, 0.6), _record("two", 2, 0.9)]
    lines = _load_lines(records)
    assert lines[1] == "## Machine load"
    assert lines[3].startswith("2 of 3 trials were taken on a busy machine")
    assert lines[4:] == [
        "- two, repetition 1: others used 60% of the CPUs, load 17.50 -> 21.00",
        "- two, repetition 2: others used 90% of the CPUs, load 17.50 -> 21.00",
    ]
    quiet = _load_lines([_record("one", 1, 0.05)])
    assert quiet[-1].startswith("No trial was taken on a busy machine: other processes used at")
    assert _load_lines([{"case": "old", "repetition": 1, "warmup": False}]) == []
