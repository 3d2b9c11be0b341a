"""The rounds of an experiment: one excluded warm-up per case, then `repetitions` rounds that
each run every case once, in an order rotated every round so that no case always runs
first (the machine warms up and others come and go; interleaving spreads that over every
case alike).

Each finished trial is appended to `trials.jsonl` at once (and fsynced). Ctrl-C (SIGINT,
at any instant until the last line is printed) is taken by `Interrupt`, never as an
exception that could land in a record's write or the summaries: it is passed on to the
running trial's command (which cancels its job: not a finished trial), no further trial
starts, every finished trial is kept, the summaries, the report and the charts are written
from them, and the exit status is 4. Progress goes to stderr: the trial number, case,
repetition, its time and an ETA from the medians so far.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from aner_coord.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK
from aner_coord.interrupts import route_interrupts
from aner_coord.requests import JobRequest
from aner_coord.runner import CANCEL_SIGNALS
from aner_coord.scaling.experiment import (
    LOCAL_IDENTITY,
    Case,
    Experiment,
    execution_of,
    subset_file,
)
from aner_coord.scaling.records import (
    CASES,
    REPORT,
    CaseSummary,
    cases_csv,
    report_md,
    summarize,
    write_text,
)
from aner_coord.scaling.registry import Registry
from aner_coord.scaling.trials import (
    Outcome,
    disagreement,
    private_dir,
    run_trial,
    scientific,
)

TRIALS = "trials.jsonl"
Predict = Callable[[Case], float | None]


@dataclass
class Schedule:
    experiment: Experiment
    trials: list[tuple[Case, int]] = field(default_factory=list)  # (case, 0 = warm-up)

    def __post_init__(self) -> None:
        cases = list(self.experiment.cases)
        self.trials = [(c, 0) for c in cases]
        for rep in range(1, self.experiment.repetitions + 1):
            shift = (rep - 1) % len(cases)
            self.trials += [(c, rep) for c in cases[shift:] + cases[:shift]]


def run_experiment(
    experiment: Experiment,
    output: Path,
    registry: Registry,
    predict: Predict | None = None,
    progress: TextIO = sys.stderr,
    on_created: Callable[[Path], None] | None = None,
) -> int:
    """Run every trial into `output` (created owner-only); the exit status: 0 when every
    trial ran and agreed, 3 when some failed (they are kept and shown), 4 on Ctrl-C."""
    with Interrupt() as interrupt:
        return _run(experiment, output, registry, predict, progress, on_created, interrupt)


def _run(
    experiment: Experiment,
    output: Path,
    registry: Registry,
    predict: Predict | None,
    progress: TextIO,
    on_created: Callable[[Path], None] | None,
    interrupt: Interrupt,
) -> int:
    private_dir(output)
    jobs = private_dir(output / "jobs")
    if on_created is not None:
        on_created(output)
    predicted = {c.name: (predict(c) if predict else None) for c in experiment.cases}
    schedule = Schedule(experiment).trials
    records: list[dict[str, Any]] = []
    reference: dict[str, Any] | None = None
    interrupted = False
    began = time.monotonic()
    trials_path = output / TRIALS
    with (
        tempfile.TemporaryDirectory(prefix="aner-scaling-") as private,
        _owner_only_append(trials_path) as out,
    ):
        clusters = {c.name: subset_file(c, Path(private)) for c in experiment.cases}
        for index, (case, rep) in enumerate(schedule):
            job = jobs / f"{experiment.cases.index(case):02d}-{_slug(case.name)}-r{rep}"
            request = JobRequest(
                computation=experiment.computation,
                execution=execution_of(case, clusters[case.name]),
                output=str(job),
            )
            if interrupt.seen.is_set():
                interrupted = True
                break
            outcome = run_trial(request, Path(private) / f"trial-{index}.json", interrupt.trial)
            if interrupt.seen.is_set() and outcome.result is None:
                # Its command was cancelled (or never ran): it is not a finished trial.
                interrupted = True
                break
            record = trial_record(experiment, case, rep, outcome, registry, reference)
            record["predicted_s"] = predicted[case.name]
            if record["ok"] and reference is None:
                reference = record["result"]
            records.append(record)
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())
            _show(progress, index, len(schedule), case, rep, experiment, record, records, began)
    write_summaries(experiment, output, records, predicted, registry, interrupted=interrupted)
    if interrupt.seen.is_set():
        print(
            f"aner: scaling interrupted; {len(records)} finished trial(s) kept in {output}",
            file=progress,
        )
        return EXIT_CANCELLED
    failed = [r for r in records if not r["ok"]]
    print(
        f"aner: {len(records)} trials in {output} ({len(failed)} failed); see report.md",
        file=progress,
    )
    return EXIT_FAILED if failed else EXIT_OK


class Interrupt:
    """SIGINT, SIGTERM and SIGHUP while an experiment runs: `seen` is set and the running
    trial's command gets SIGINT (its own graceful cancel). SIGINT is routed from the
    program's hold (`aner_coord.interrupts`: a thread, so no exception is raised anywhere);
    the others, and SIGINT outside the program, by handlers of this (main) thread, whose
    old handlers come back afterwards."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        # Reentrant: a handler of this thread may run while the thread holds it.
        self._lock = threading.RLock()
        self._trial: subprocess.Popen[str] | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        routed = route_interrupts(self)
        if threading.current_thread() is threading.main_thread():
            for sig in CANCEL_SIGNALS:
                if not (routed and sig == signal.SIGINT):
                    self._old[sig] = signal.signal(sig, lambda *_: self())
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        route_interrupts(None)

    def __call__(self) -> None:
        with self._lock:
            self.seen.set()
            self._pass_on()

    def trial(self, proc: subprocess.Popen[str]) -> None:
        """The trial now running; it is interrupted at once if an interrupt came first."""
        with self._lock:
            self._trial = proc
            if self.seen.is_set():
                self._pass_on()

    def _pass_on(self) -> None:
        if self._trial is not None and self._trial.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._trial.send_signal(signal.SIGINT)


class _owner_only_append:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> TextIO:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.file = os.fdopen(fd, "a")
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name)[:40]


def trial_record(
    experiment: Experiment,
    case: Case,
    rep: int,
    outcome: Outcome,
    registry: Registry,
    reference: dict[str, Any] | None,
) -> dict[str, Any]:
    """The docs/contracts.md, section 10 record of one trial."""
    result = outcome.result
    science = scientific(result) if result is not None else None
    failure: str | None = None
    if outcome.exit_code != 0 or result is None:
        last = outcome.stderr.splitlines()[-1] if outcome.stderr else "no result.json"
        failure = f"exit code {outcome.exit_code}: {last}"
    elif reference is not None:
        differs = disagreement(science, reference)
        if differs:
            failure = f"different scientific result: {differs}"
    workers = []
    for account in (result or {}).get("workers", []):
        public = LOCAL_IDENTITY if case.local else account["identity"]
        machine = account.get("machine")
        revision = registry.revision(public, machine) if machine else None
        workers.append(
            {
                "identity": account["identity"],
                "configuration": revision.label if revision else None,
                "replaced": revision.replaced if revision else None,
                "slots": account["slots"],
                "items": account["items"],
                "chunks": account["chunks"],
                "compute_s": account.get("compute_s"),
                "transfer_s": account.get("transfer_s"),
                "wait_s": account.get("wait_s"),
                # Its host (docs/contracts.md, section 18): equal on one host.
                "host": account.get("host"),
            }
        )
    record: dict[str, Any] = {
        "experiment": experiment.name,
        "case": case.name,
        "repetition": rep,
        "warmup": rep == 0,
        "started": outcome.started,
        "wall_s": round(outcome.wall_s, 6),
        "internal_s": result.get("seconds") if result else None,
        "exit_code": outcome.exit_code,
        "ok": failure is None,
        "failure": failure,
        "result": science,
        "workers": workers,
        "compute_s": _total(workers, "compute_s"),
        # The longest worker's link time (each is a union of intervals, at most the job's
        # span): never more than the wall time, unlike a sum over workers.
        "transfer_s": _longest(workers, "transfer_s"),
        "wait_s": _total(workers, "wait_s"),
        "source_fingerprint": outcome.fingerprint,
        **(outcome.load.to_record() if outcome.load is not None else {}),
    }
    record.update(_training(result))
    return record


def _training(result: dict[str, Any] | None) -> dict[str, Any]:
    """A training's own figures: test accuracy, time to target, the per-epoch history (for
    the training chart), and how each worker process got the data: "cold" (blocks sent)
    or "cached" (its block cache held them), so a seed's first trial is told apart."""
    if result is None or not result.get("history"):
        return {}
    staging = [
        {k: r.get(k) for k in ("identity", "state", "bytes", "seconds")}
        for r in result.get("staging") or []
    ]
    states = {r["state"] for r in staging}
    return {
        "test_accuracy": result.get("test_accuracy"),
        "time_to_target_s": result.get("time_to_target_s"),
        "load_s": result.get("load_s"),
        "staging": staging,
        "staged": None if not states else states.pop() if len(states) == 1 else "mixed",
        "history": result["history"],
    }


def _longest(workers: list[dict[str, Any]], key: str) -> float | None:
    """The largest over workers, or None unless every worker measured it."""
    values = [w[key] for w in workers]
    if not values or any(v is None for v in values):
        return None
    return round(float(max(values)), 6)


def _total(workers: list[dict[str, Any]], key: str) -> float | None:
    """The sum over workers, or None unless every worker measured it."""
    values = [w[key] for w in workers]
    if not values or any(v is None for v in values):
        return None
    return round(float(sum(values)), 6)


def _show(
    progress: TextIO,
    index: int,
    total: int,
    case: Case,
    rep: int,
    experiment: Experiment,
    record: dict[str, Any],
    records: list[dict[str, Any]],
    began: float,
) -> None:
    what = "warm-up" if rep == 0 else f"repetition {rep} of {experiment.repetitions}"
    verdict = "" if record["ok"] else f"  FAILED: {record['failure']}"
    # ETA: the remaining trials at their case's median so far, or the overall mean.
    by_case: dict[str, list[float]] = {}
    for r in records:
        by_case.setdefault(r["case"], []).append(r["wall_s"])
    mean = (time.monotonic() - began) / max(1, len(records))
    remaining = Schedule(experiment).trials[index + 1 :]
    eta = sum(statistics.median(by_case.get(c.name, [mean])) for c, _ in remaining)
    print(
        f"[{index + 1:>3}/{total}] {case.name}, {what}: {record['wall_s']:.3f} s"
        f"  (ETA {_clock(eta)}){verdict}",
        file=progress,
        flush=True,
    )


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def write_summaries(
    experiment: Experiment,
    output: Path,
    records: list[dict[str, Any]],
    predicted: dict[str, float | None],
    registry: Registry,
    *,
    interrupted: bool,
) -> list[CaseSummary]:
    """`cases.csv`, the charts (with the `charts` extra) and `report.md` of an experiment."""
    from aner_worker.host import host_identity

    summaries = summarize(experiment, records, predicted)
    write_text(output / CASES, cases_csv(summaries))
    charts: list[str] = []
    note = None
    try:
        from aner_coord.scaling import charts as charting
    except ImportError:
        note = "Charts need matplotlib: `pip install 'aner[charts]'`."
    else:
        charts = charting.draw(experiment, summaries, records, output)
    write_text(
        output / REPORT,
        report_md(
            experiment, records, summaries, registry, charts, interrupted=interrupted,
            chart_note=note, here=host_identity().value,
        ),
    )  # fmt: skip
    return summaries
