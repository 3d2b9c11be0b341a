"""The summaries of an experiment: `cases.csv` and `report.md` (beside `trials.jsonl`).

Per case, over its finished, agreeing, non-warm-up trials: the times (hyperfine-style
`times`, `mean`, `stddev`, `median`, `min`, `max`) and every trial's exit code; speedup
`T(reference) / T(case)` and efficiency `speedup / (slots / reference slots)` against the
declared reference case; the medians of the measured compute, transfer and wait seconds;
the predicted time; for a training, the test accuracy, the median time to the target
accuracy and how the trials' worker processes got the data (cold: blocks sent; cached: the
block cache held them). Unfavourable cases are kept, and the report says in plain sentences
what did not scale. A value not measured is empty in the CSV and `N/A` in the report.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord.hosts import host_groups, hosts_text, on_one_host
from aner_coord.scaling.experiment import Case, Experiment
from aner_coord.scaling.load import BUSY_SHARE
from aner_coord.scaling.registry import Registry

CASES = "cases.csv"
REPORT = "report.md"
EFFICIENT = 0.8  # below this efficiency a case "did not scale" in the report's words


@dataclass(frozen=True)
class CaseSummary:
    case: Case
    times: list[float]
    exit_codes: list[int]
    failed: int
    predicted_s: float | None
    internal_s: float | None
    compute_s: float | None
    transfer_s: float | None
    wait_s: float | None
    speedup: float | None = None
    efficiency: float | None = None
    # A training's: test accuracy, median seconds to the target accuracy, staging states.
    test_accuracy: float | None = None
    time_to_target_s: float | None = None
    staged: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def min(self) -> float | None:
        return min(self.times) if self.times else None

    @property
    def max(self) -> float | None:
        return max(self.times) if self.times else None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.times) if self.times else None

    @property
    def stddev(self) -> float | None:
        return statistics.stdev(self.times) if len(self.times) > 1 else None


def _median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    if not known or len(known) != len(values):
        return None
    return float(statistics.median(known))


def summarize(
    experiment: Experiment, records: list[dict[str, Any]], predicted: dict[str, float | None]
) -> list[CaseSummary]:
    summaries = []
    for case in experiment.cases:
        mine = [r for r in records if r["case"] == case.name and not r["warmup"]]
        good = [r for r in mine if r["ok"]]
        summaries.append(
            CaseSummary(
                case=case,
                times=[r["wall_s"] for r in good],
                exit_codes=[r["exit_code"] for r in mine],
                failed=len(mine) - len(good),
                predicted_s=predicted.get(case.name),
                internal_s=_median([r["internal_s"] for r in good]),
                compute_s=_median([r["compute_s"] for r in good]),
                transfer_s=_median([r["transfer_s"] for r in good]),
                wait_s=_median([r["wait_s"] for r in good]),
                test_accuracy=_median([r.get("test_accuracy") for r in good]),
                time_to_target_s=_median([r.get("time_to_target_s") for r in good]),
                staged=_staged(mine),
            )
        )
    ref = next(s for s in summaries if s.case.name == experiment.reference)
    out = []
    for s in summaries:
        speedup = efficiency = None
        if ref.median and s.median:
            speedup = ref.median / s.median
            if s.case.slots and ref.case.slots:
                efficiency = speedup / (s.case.slots / ref.case.slots)
        out.append(CaseSummary(**{**s.__dict__, "speedup": speedup, "efficiency": efficiency}))
    return out


def _staged(records: list[dict[str, Any]]) -> str | None:
    """How the case's timed trials got their data: "cached", "cold", or "2 cold, 1 cached"."""
    states = [r.get("staged") for r in records if r.get("staged")]
    if not states:
        return None
    counts = {s: states.count(s) for s in dict.fromkeys(states)}
    if len(counts) == 1:
        return states[0]
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def write_text(path: Path, text: str) -> None:
    """Write an owner-only text file of the experiment's output directory."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _num(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def cases_csv(summaries: list[CaseSummary]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "case", "execution", "workers", "slots", "chunk", "mean", "stddev", "median",
            "min", "max", "times", "exit_codes", "failed", "speedup", "efficiency",
            "predicted_s", "internal_s", "compute_s", "transfer_s", "wait_s",
            "test_accuracy", "time_to_target_s", "staging",
        ]
    )  # fmt: skip
    for s in summaries:
        c = s.case
        writer.writerow(
            [
                c.name,
                "local" if c.local else "cluster",
                " ".join(c.identities) if not c.local else c.workers,
                c.slots,
                c.chunk,
                _num(s.mean), _num(s.stddev), _num(s.median), _num(s.min), _num(s.max),
                " ".join(f"{t:.6f}" for t in s.times),
                " ".join(str(e) for e in s.exit_codes),
                s.failed,
                _num(s.speedup, 4), _num(s.efficiency, 4), _num(s.predicted_s),
                _num(s.internal_s), _num(s.compute_s), _num(s.transfer_s), _num(s.wait_s),
                _num(s.test_accuracy), _num(s.time_to_target_s), s.staged or "",
            ]
        )  # fmt: skip
    return buffer.getvalue()


def _na(value: float | None, fmt: str = "{:.3f}") -> str:
    return "N/A" if value is None else fmt.format(value)


def report_md(
    experiment: Experiment,
    records: list[dict[str, Any]],
    summaries: list[CaseSummary],
    registry: Registry,
    charts: list[str],
    *,
    interrupted: bool,
    chart_note: str | None = None,
    here: str | None = None,
) -> str:
    computation = experiment.to_dict()["computation"]
    fingerprints = sorted({r["source_fingerprint"] for r in records if r["source_fingerprint"]})
    lines = [
        f"# {experiment.name}",
        "",
        f"Computation `{experiment.kind}`: "
        + ", ".join(f"{k} = {v}" for k, v in computation.items() if k != "kind")
        + f". {experiment.repetitions} repetitions per case after one excluded warm-up, "
        "interleaved across cases; each trial a fresh `aner parallel` command timed by an "
        "external monotonic clock. Times are the median and min:max of the agreeing trials; "
        f"speedup and efficiency are against `{experiment.reference}`.",
        "",
        f"Source fingerprint: {', '.join(f'`{f}`' for f in fingerprints) or 'N/A'}.",
    ]
    if interrupted:
        lines += ["", "**Interrupted**: only the trials that finished are counted."]
    lines += ["", "## Machines", "", *_machines(records, registry)]
    lines += _hosts_lines(experiment, records, here)
    lines += ["", f"## {experiment.kind}", ""]
    lines += [
        "| case | execution | slots | chunk | median s | min:max s | speedup | efficiency "
        "| predicted s | compute s | transfer s | wait s | failed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for s in summaries:
        c = s.case
        span = "N/A" if s.min is None else f"{s.min:.3f}:{s.max:.3f}"
        lines.append(
            f"| {c.name} | {'local' if c.local else ' + '.join(c.identities)} | {c.slots} "
            f"| {c.chunk:,} | {_na(s.median)} | {span} | {_na(s.speedup, '{:.2f}')} "
            f"| {_na(s.efficiency, '{:.2f}')} | {_na(s.predicted_s)} | {_na(s.compute_s)} "
            f"| {_na(s.transfer_s)} | {_na(s.wait_s)} | {s.failed} |"
        )
    lines += _training_table(summaries, records)
    singles = [s for s in summaries if s.median is not None and _single_machine(s.case)]
    if singles:
        fastest = min(singles, key=lambda s: s.median or 0.0)
        lines += [
            "",
            f"Fastest single machine, measured: {fastest.case.name} "
            f"({fastest.median or 0.0:.3f} s).",
        ]
    lines += _load_lines(records)
    lines += ["", "## What did not scale", ""]
    lines += [f"- {sentence}" for sentence in unfavourable(experiment, summaries, records)] or [
        "Every case was faster than the reference in proportion to its slots "
        f"(efficiency at least {EFFICIENT})."
    ]
    failed = [r for r in records if not r["ok"]]
    if failed:
        lines += ["", "## Failed trials", ""]
        lines += [
            f"- {r['case']}, {'warm-up' if r['warmup'] else 'repetition ' + str(r['repetition'])}"
            f" ({r['started']}): {r['failure']}"
            for r in failed
        ]
    if charts or chart_note:
        lines += ["", "## Charts", ""]
        lines += [f"![{name}]({name})" for name in charts]
        if chart_note:
            lines.append(chart_note)
    return "\n".join(lines) + "\n"


def _load_lines(records: list[dict[str, Any]]) -> list[str]:
    """Which trials were taken on a busy machine (`aner_coord.scaling.load`)."""
    measured = [r for r in records if "busy" in r]
    if not measured:
        return []
    busy = [r for r in measured if r["busy"]]
    lines = ["", "## Machine load", ""]
    if not busy:
        most = max(r["others_cpu_share"] for r in measured)
        return [
            *lines,
            f"No trial was taken on a busy machine: other processes used at most {most:.0%} "
            f"of the CPUs during any trial (busy: {BUSY_SHARE:.0%} or more).",
        ]
    lines.append(
        f"{len(busy)} of {len(measured)} trials were taken on a busy machine (other processes "
        f"used {BUSY_SHARE:.0%} or more of its CPUs meanwhile): their times say as much about "
        "that load as about the plan, and so does what did not scale below."
    )
    lines += [
        f"- {r['case']}, {'warm-up' if r['warmup'] else 'repetition ' + str(r['repetition'])}"
        f": others used {r['others_cpu_share']:.0%} of the CPUs, load "
        f"{_na(r['load_1m'][0], '{:.2f}')} -> {_na(r['load_1m'][1], '{:.2f}')}"
        for r in busy
    ]
    return lines


def _training_table(summaries: list[CaseSummary], records: list[dict[str, Any]]) -> list[str]:
    """For a training: each case's test accuracy, time to target and data staging."""
    if not any(r.get("history") for r in records):
        return []
    lines = [
        "",
        "| case | test accuracy | time to target s | staging (timed trials) |",
        "| --- | ---: | ---: | --- |",
    ]
    for s in summaries:
        lines.append(
            f"| {s.case.name} | {_na(s.test_accuracy, '{:.4f}')} | {_na(s.time_to_target_s)} "
            f"| {s.staged or 'N/A (nothing staged)'} |"
        )
    warm = [r for r in records if r["warmup"] and r.get("staged")]
    if warm:
        lines += [
            "",
            "Staging: " + "; ".join(f"{r['case']} warm-up {r['staged']}" for r in warm) + ".",
        ]
    return lines


def _hosts_lines(
    experiment: Experiment, records: list[dict[str, Any]], here: str | None
) -> list[str]:
    """Which of each group case's records share a host (docs/contracts.md, "Host
    identity"), from its last trial whose workers reported one; `here` is the host the
    experiment ran on, where its local cases' threads ran."""
    lines = []
    for case in experiment.cases:
        if case.local:
            continue
        reported = [
            r
            for r in records
            if r["case"] == case.name and any(w.get("host") for w in r["workers"])
        ]
        if not reported:
            lines.append(f"- {case.name}: no trial reported its workers' hosts.")
            continue
        hosts = {w["identity"]: w.get("host") for w in reported[-1]["workers"]}
        line = f"- {case.name}: {hosts_text(hosts, here=here)}."
        if len(hosts) > 1 and on_one_host(hosts, here):
            line += (
                " Its records share the CPUs of the machine that ran the experiment (and of"
                " its local cases): it cannot scale beyond them."
            )
        elif len(hosts) > len(host_groups(hosts)):
            line += " Records on one host share its CPUs: its slots are not that many CPUs."
        lines.append(line)
    return ["", "## Hosts", "", *lines] if lines else []


def _machines(records: list[dict[str, Any]], registry: Registry) -> list[str]:
    labels: dict[str, bool] = {}
    for r in records:
        for w in r["workers"]:
            if w["configuration"]:
                labels[w["configuration"]] = bool(w["replaced"])
    if not labels:
        return ["No trial reported a machine."]
    out = [
        "| configuration | CPU | logical CPUs | memory GiB | OS / arch | Python | numpy | numba "
        "| aner |",
        "| --- | --- | ---: | ---: | --- | --- | --- | --- | --- |",
    ]
    flagged = []
    for label, replaced in sorted(labels.items()):
        identity, revision = label.split(" / ")
        entry = next(h for h in registry.history(identity) if h["revision"] == revision)
        m = entry["machine"]
        memory = m.get("memory_bytes", "")
        gib = f"{int(memory) / 2**30:.1f}" if memory.isdigit() else "N/A"
        out.append(
            f"| {label} | {m.get('cpu_model', 'N/A')} | {m.get('logical_cpus', 'N/A')} | {gib} "
            f"| {m.get('os', 'N/A')} / {m.get('arch', 'N/A')} | {m.get('python', 'N/A')} "
            f"| {m.get('numpy', 'N/A')} | {m.get('numba', 'N/A')} | {m.get('aner', 'N/A')} |"
        )
        if replaced:
            flagged.append(label)
    for label in flagged:
        out += [
            "",
            f"**{label} is a different machine**: its CPU, CPU count, memory and architecture "
            "all changed under the same public name; earlier results under that name are not "
            "comparable.",
        ]
    return out


def unfavourable(
    experiment: Experiment, summaries: list[CaseSummary], records: list[dict[str, Any]]
) -> list[str]:
    """Plain sentences for every case that did not scale."""
    sentences = []
    ref = next(s for s in summaries if s.case.name == experiment.reference)
    singles = [s for s in summaries if s.median is not None and _single_machine(s.case)]
    fastest = min(singles, key=lambda s: s.median or 0.0) if singles else None
    for s in summaries:
        if s.median is None:
            sentences.append(f"{s.case.name} has no agreeing trial to time.")
            continue
        if s is ref or ref.median is None:
            continue
        if s.median > ref.median:
            sentences.append(
                f"{s.case.name} ({_slots(s.case.slots)}) took {s.median:.3f} s, slower than the "
                f"reference {ref.case.name}'s {ref.median:.3f} s."
            )
        elif s.efficiency is not None and s.efficiency < EFFICIENT:
            sentences.append(
                f"{s.case.name} reached a speedup of {s.speedup:.2f} on {_slots(s.case.slots)} "
                f"(efficiency {s.efficiency:.2f})."
            )
        if (
            fastest is not None
            and not _single_machine(s.case)
            and s.median > (fastest.median or 0.0)
        ):
            sentences.append(
                f"{s.case.name} ({s.median:.3f} s) was slower than the fastest single machine, "
                f"{fastest.case.name} ({fastest.median:.3f} s)."
            )
    return sentences


def _slots(n: int) -> str:
    return f"{n} slot" if n == 1 else f"{n} slots"


def _single_machine(case: Case) -> bool:
    return case.local or len(case.records) == 1
