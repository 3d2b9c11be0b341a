"""plan: the recommender's predicted wall time of each case against the median measured by
`aner parallel scaling` on this machine: local threads with 1 and 2 workers, a group of 2
local-pipe workers and an SSH group on loopback (the tests' sshd), each at the default and
a coarse chunk. Goal: every prediction within 25% of its measured median.

The experiment runs as one whole `aner parallel scaling` command (which probes, predicts,
then times every trial as a fresh command with one excluded warm-up per case and
interleaved repetitions); this benchmark reads its `cases.csv`. The full run copies the
charts to `docs/` for the README.
"""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.calls import ANER, environment, loopback_ssh, write_cluster
from bench.runner import ROOT, Benchmark, goal, note, run_command, scratch_dir, secs, table

SEED = 5
GOAL = 0.25


@dataclass(frozen=True)
class Sizes:
    samples: int
    coarse: bool  # also each case at a coarse chunk (two chunks per slot)
    reps: int
    charts_to_docs: bool


def _experiment(path: Path, sizes: Sizes, ssh: bool) -> None:
    cases = [("local-1", "workers = 1", 1), ("local-2", "workers = 2", 2)]
    cases.append(("pipes", 'cluster = "cluster"\nidentities = ["pipe-1", "pipe-2"]', 2))
    if ssh:
        cases.append(("ssh", 'cluster = "cluster"\nidentities = ["ssh-1"]', 2))
    text = [
        'name = "predicted against measured"',
        f"repetitions = {sizes.reps}",
        'reference = "local-1 chunk 65536"',
        "[computation]",
        'kind = "monte-carlo"',
        f"samples = {sizes.samples}",
        f"seed = {SEED}",
    ]
    for name, where, slots in cases:
        chunks = [65536] + ([-(-sizes.samples // (2 * slots))] if sizes.coarse else [])
        for chunk in chunks:
            text += ["[[case]]", f'name = "{name} chunk {chunk}"', where, f"chunk = {chunk}"]
    path.write_text("\n".join(text) + "\n")


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-plan-")
    tmp.chmod(0o700)
    out = tmp / "scaling"
    with contextlib.ExitStack() as stack:
        records = [("pipe-1", "local", "-", 1), ("pipe-2", "local", "-", 1)]
        env: dict[str, str | None] = {}
        ssh_note = None
        try:
            (tmp / "sshd").mkdir(mode=0o700)
            peer = stack.enter_context(loopback_ssh(tmp / "sshd"))
            records.append(("ssh-1", "ssh", peer.alias, 2))
            env = peer.env
        except Exception as exc:  # no sshd here: measure the others and say so
            ssh_note = f"SSH group skipped: {type(exc).__name__}: {str(exc)[:300]}"
        write_cluster(tmp / "cluster", records)
        _experiment(tmp / "experiment.toml", sizes, ssh_note is None)
        argv = [ANER, "parallel", "scaling", "--experiment", str(tmp / "experiment.toml")]
        argv += ["--output", str(out), "--registry", str(tmp / "registry.json")]
        with environment(env):
            command = run_command(argv, timeout=1800)
    if ssh_note:
        note(ssh_note)
    if not (out / "cases.csv").exists():
        raise RuntimeError(f"aner parallel scaling failed ({command.exit}): {command.stderr}")
    with (out / "cases.csv").open() as f:
        rows = list(csv.DictReader(f))
    cases = []
    for row in rows:
        median = float(row["median"]) if row["median"] else None
        predicted = float(row["predicted_s"]) if row["predicted_s"] else None
        error = predicted / median - 1 if median and predicted else None
        cases.append(
            {
                "case": row["case"],
                "slots": int(row["slots"]),
                "predicted_s": predicted,
                "median_s": median,
                "min_s": float(row["min"]) if row["min"] else None,
                "max_s": float(row["max"]) if row["max"] else None,
                "error": error,
                "failed": int(row["failed"]),
            }
        )
    table(
        ("case", "predicted", "measured median", "min:max s", "error"),
        [
            (
                c["case"],
                secs(c["predicted_s"]) if c["predicted_s"] else "N/A",
                secs(c["median_s"]) if c["median_s"] else "N/A",
                f"{c['min_s']:.3f}:{c['max_s']:.3f}" if c["min_s"] else "N/A",
                f"{c['error']:+.0%}" if c["error"] is not None else "N/A",
            )
            for c in cases
        ],
    )
    met = all(c["error"] is not None and abs(c["error"]) <= GOAL for c in cases)
    goal(f"every prediction within {GOAL:.0%} of the measured median", met)
    charts = sorted(p.name for p in out.glob("*.png"))
    if sizes.charts_to_docs:
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        report = (out / "report.md").read_text()
        for name in charts:
            shutil.copyfile(out / name, docs / f"scaling-{name}")
            # The report links its charts by their own names: in docs/ they are scaling-*.
            report = report.replace(f"]({name})", f"](scaling-{name})")
        (docs / "scaling-report.md").write_text(report)
    probe = json.loads((out / "probe.json").read_text()) if (out / "probe.json").exists() else None
    return {
        "cases": cases,
        "probe": probe,
        "exit_code": command.exit,
        "seconds": command.wall_s,
        "charts": charts,
        "ssh": ssh_note or "loopback sshd",
        "goal_met": met,
    }


BENCHMARK = Benchmark(
    title="plan: predicted against measured wall time of scaling cases",
    full=Sizes(samples=400_000_000, coarse=True, reps=3, charts_to_docs=True),
    quick=Sizes(samples=50_000_000, coarse=False, reps=3, charts_to_docs=False),
    smoke=Sizes(samples=10**6, coarse=False, reps=3, charts_to_docs=False),
    run=run,
)
