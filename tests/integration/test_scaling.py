"""`aner parallel scaling` and `aner parallel plan` end to end: real commands, real local
threads, a real group of pipe workers, tiny work."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from support import ANER, interrupted_at, wait_for, write_cluster

from aner_coord.scaling.plan import recommend
from aner_coord.scaling.probe import Probe
from aner_worker.host import host_identity

matplotlib_image = pytest.importorskip("matplotlib.image")

SAMPLES = 1_000_003
SEED = 11


def experiment_file(tmp_path: Path, cluster: Path, repetitions: int = 3) -> Path:
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "tiny pi"\nrepetitions = {repetitions}\n'
        f'[computation]\nkind = "monte-carlo"\nsamples = {SAMPLES}\nseed = {SEED}\n'
        '[[case]]\nname = "threads"\nworkers = 1\nchunk = 262144\n'
        f'[[case]]\nname = "pipes"\ncluster = "{cluster.name}"\nidentities = ["p1", "p2"]\n'
        "chunk = 131072\n"
    )
    return path


def pipe_cluster(tmp_path: Path, executable: str = ANER) -> Path:
    return write_cluster(
        tmp_path / "lab.cluster",
        [
            ("p1", "local", "-", executable, 1),
            ("p2", "local", "-", executable, 1),
            ("unused", "local", "-", executable, 1),
        ],
    )


def scaling(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ANER, "parallel", "scaling", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def check_png(path: Path) -> None:
    """A real PNG of a sensible size that is not blank."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib_image.imread(path)
    height, width = pixels.shape[:2]
    assert width >= 400 and height >= 300
    assert float(pixels[..., :3].var()) > 1e-3  # not one flat colour


def test_an_experiment_over_threads_and_a_pipe_group(tmp_path: Path) -> None:
    cluster = pipe_cluster(tmp_path)
    out = tmp_path / "scaling"
    registry = tmp_path / "registry.json"
    proc = scaling(
        "--experiment",
        str(experiment_file(tmp_path, cluster)),
        "--output",
        str(out),
        "--registry",
        str(registry),
    )
    assert proc.returncode == 0, proc.stderr
    # Progress named the case, the repetition and an ETA, for every trial.
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 8
    assert progress[0].startswith("[  1/8] threads, warm-up: ")
    assert "pipes, repetition 3 of 3" in proc.stderr and "(ETA 0:00)" in progress[-1]
    assert os.stat(out).st_mode & 0o777 == 0o700

    check_trials(out)
    check_cases(out)
    check_report(out)
    # Endpoints and executables never reach the published files.
    for name in ("trials.jsonl", "cases.csv", "report.md", "probe.json"):
        assert ANER not in (out / name).read_text()
    assert json.loads(registry.read_text())["identities"].keys() == {"local", "p1", "p2"}


def check_trials(out: Path) -> None:
    """trials.jsonl of the experiment above: warm-ups, interleaved rounds, one result."""
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 8
    assert [t["case"] for t in trials[:2]] == ["threads", "pipes"]  # one warm-up each
    assert [t["warmup"] for t in trials] == [True, True] + [False] * 6
    # Rounds interleave the cases, and rotate which goes first.
    assert [t["case"] for t in trials[2:]] == ["threads", "pipes", "pipes", "threads"] * 1 + [
        "threads",
        "pipes",
    ]
    hits = {t["result"]["hits"] for t in trials}
    assert len(hits) == 1 and all(t["ok"] and t["exit_code"] == 0 for t in trials)
    for t in trials:
        assert t["wall_s"] > t["internal_s"] > 0
        assert t["source_fingerprint"].startswith("sha256:")
        assert t["started"].endswith("+00:00")
        assert t["predicted_s"] > 0
    threads = next(t for t in trials if t["case"] == "threads")
    pipes = next(t for t in trials if t["case"] == "pipes")
    assert [w["identity"] for w in pipes["workers"]] == ["p1", "p2"]
    # Every trial's workers, threads and pipe workers alike, report this one host.
    assert {w["host"] for t in trials for w in t["workers"]} == {host_identity().value}
    assert {w["configuration"] for w in pipes["workers"]} == {"p1 / C01", "p2 / C01"}
    assert threads["workers"][0]["configuration"] == "local / C01"
    assert sum(w["items"] for w in pipes["workers"]) == SAMPLES
    # Measured costs: a link for pipes, none for threads (null, never 0).
    assert pipes["compute_s"] > 0 and pipes["transfer_s"] > 0 and pipes["wait_s"] > 0
    assert threads["compute_s"] > 0 and threads["transfer_s"] is None
    assert "unused" not in (out / "trials.jsonl").read_text()


def check_cases(out: Path) -> None:
    """cases.csv: three timed repetitions per case, and their summary."""
    with (out / "cases.csv").open() as f:
        rows = {row["case"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"threads", "pipes"}
    for row in rows.values():
        times = [float(x) for x in row["times"].split()]
        assert len(times) == 3
        assert float(row["min"]) == min(times) and float(row["max"]) == max(times)
        assert float(row["median"]) == sorted(times)[1]
        assert row["exit_codes"] == "0 0 0" and row["failed"] == "0"
        assert float(row["predicted_s"]) > 0
    assert float(rows["threads"]["speedup"]) == 1.0
    assert rows["pipes"]["workers"] == "p1 p2" and rows["pipes"]["slots"] == "2"
    assert rows["threads"]["transfer_s"] == ""


def check_report(out: Path) -> None:
    """report.md with its charts, and probe.json."""
    report = (out / "report.md").read_text()
    assert report.startswith("# tiny pi\n")
    assert "| p1 / C01 |" in report and "| local / C01 |" in report
    assert "## monte-carlo" in report and "## What did not scale" in report
    assert "| threads | local | 1 | 262,144 |" in report
    assert "N/A" in report  # the threads' transfer
    for chart in ("speedup.png", "cases.png"):
        assert f"![{chart}]({chart})" in report
        check_png(out / chart)
    assert not (out / "training.png").exists()  # no per-epoch history in Monte Carlo
    probe = json.loads((out / "probe.json").read_text())
    assert [w["identity"] for w in probe["workers"]] == ["p1", "p2"]
    # One host is one host: the pipe pair runs where the threads do, and the report says so.
    here = host_identity().value
    assert probe["local"]["host"] == here and [w["host"] for w in probe["workers"]] == [here] * 2
    assert "## Hosts\n\n- pipes: 2 records on 1 host, this one. Its records share the CPUs" in (
        report
    )
    # The group's start-up is measured with its workers starting together, as in a job.
    assert [g["identities"] for g in probe["groups"]] == [["p1", "p2"]]


def test_ctrl_c_keeps_every_finished_trial(tmp_path: Path) -> None:
    out = tmp_path / "scaling"
    path = tmp_path / "experiment.toml"
    # The most repetitions an experiment may ask for (a warm-up and 100 trials of about half
    # a second each here): the SIGINT sent once two trials are kept lands long before the
    # last (three repetitions left it under two seconds). It ends the run, so they cost
    # nothing.
    path.write_text(
        'repetitions = 100\n[computation]\nkind = "monte-carlo"\nsamples = 100_000\nseed = 1\n'
        '[[case]]\nname = "one"\nworkers = 1\n'
    )
    proc = subprocess.Popen(
        [
            *(ANER, "parallel", "scaling", "--experiment", str(path), "--output", str(out)),
            *("--registry", str(tmp_path / "r.json"), "--no-predict"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    trials = out / "trials.jsonl"
    wait_for(lambda: trials.exists() and trials.read_text().count("\n") >= 2, 120, "2 trials")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 4, stderr
    kept = trials.read_text().splitlines()
    assert len(kept) >= 2 and all(json.loads(line)["ok"] for line in kept)
    assert f"{len(kept)} finished trial(s) kept" in stderr
    assert "**Interrupted**" in (out / "report.md").read_text()
    assert (out / "cases.csv").exists()


INTERRUPT_POINTS = 20  # every 5% of a measured run: 50 took two minutes of the suite


@pytest.mark.slow
def test_a_sigint_anywhere_keeps_every_finished_trial_and_the_summaries(tmp_path: Path) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text(
        '[computation]\nkind = "monte-carlo"\nsamples = 100_000\nseed = 1\n'
        '[[case]]\nname = "one"\nworkers = 1\n'
    )

    def argv(out: Path) -> list[str]:
        return [
            *(ANER, "parallel", "scaling", "--experiment", str(path), "--output", str(out)),
            *("--registry", str(tmp_path / "r.json"), "--no-predict"),
        ]

    code, _, err, whole = interrupted_at(argv(tmp_path / "measured"), None)
    assert code == 0, err
    total = len((tmp_path / "measured" / "trials.jsonl").read_text().splitlines())
    for i in range(INTERRUPT_POINTS):
        out = tmp_path / f"out-{i}"
        code, _, err, _ = interrupted_at(argv(out), whole * (i + 0.5) / INTERRUPT_POINTS)
        assert "Traceback" not in err, err
        kept = (out / "trials.jsonl").read_text().splitlines()
        assert all(json.loads(line)["ok"] for line in kept)
        assert (out / "cases.csv").exists() and (out / "report.md").exists(), err
        if code == 0:  # the SIGINT came after the experiment's last line
            assert len(kept) == total and f"{total} trials in" in err, err
            continue
        assert code == 4, err
        assert f"{len(kept)} finished trial(s) kept" in err, err
        if len(kept) < total:
            assert "**Interrupted**" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --experiment FILE.toml, or --auto"),
        (["--auto", "--experiment", "x.toml"], "give --experiment FILE.toml, or --auto"),
        (
            ["--experiment", "missing.toml"],
            "experiment missing.toml: cannot read the experiment file",
        ),
    ],
)
def test_bad_scaling_input_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = subprocess.run(
        [ANER, "parallel", "scaling", *args, "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not (tmp_path / "out").exists()


def test_plan_recommends_local_for_a_tiny_job_and_the_group_for_a_large_one(
    tmp_path: Path,
) -> None:
    # Workers whose start-up includes an artificial delay, like a slow remote login.
    slow = tmp_path / "slow-aner"
    slow.write_text(f'#!/bin/sh\nsleep 0.5\nexec "{ANER}" "$@"\n')
    slow.chmod(0o755)
    cluster = write_cluster(
        tmp_path / "slow.cluster",
        [("s1", "local", "-", str(slow), 1), ("s2", "local", "-", str(slow), 1)],
    )
    saved = tmp_path / "probe.json"
    proc = subprocess.run(
        [
            *(ANER, "parallel", "plan", "--cluster", str(cluster), "--samples", "1e6"),
            *("--json", "--save", str(saved)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    advice = json.loads(proc.stdout)
    probe = Probe.from_dict(json.loads(saved.read_text()))
    assert [w.identity for w in probe.workers] == ["s1", "s2"]
    assert all(w.startup_s >= 0.5 for w in probe.workers)  # the delay is in what was measured
    assert all(w.rate_per_slot > 0 and w.round_trip_s > 0 for w in probe.workers)
    # Each worker's cost per task comes from whole jobs on it: measured, finite.
    assert all(0 < w.task_s < math.inf for w in probe.workers)
    # What the command advised is what the probe it saved gives.
    again = recommend(probe, 10**6, 1)
    assert (advice["recommended"], advice["reason"]) == (again.best.to_dict(), again.reason)
    # Both records run on this host, as the local threads do: one host, and the plan says so.
    here = host_identity().value
    assert here is not None and probe.local.host == here
    assert [w.host for w in probe.workers] == [here, here]
    assert advice["hosts"] == {
        "text": "2 records on 1 host, this one",
        "groups": [["s1", "s2"]],
        "this_host": ["s1", "s2"],
    }
    assert all(c["on_this_host"] for c in advice["candidates"] if c["execution"] == "cluster")
    # The advice itself is judged on costs measured at one moment: on a busy machine a
    # local command measured during a burst may cost more than the group's measured in a
    # lull, and the advice rightly follows. So the group's fixed cost is taken as a local
    # command plus its own measured start and stop (the 0.5 s delay among them), and a
    # local thread as fast as one of its slots.
    steady = replace(probe, groups=tuple(replace(g, command_s=None) for g in probe.groups))
    tiny = recommend(steady, 10**6, 1)
    assert tiny.best.local, tiny.reason
    assert tiny.reason.startswith("local, ") and "runs on this host" in tiny.reason
    slot_rate = min(w.rate_per_slot for w in probe.workers)
    one_cpu = replace(steady, local=replace(probe.local, cpus=1, rates={1: slot_rate}))
    # On this host the pair adds no CPU, however large the job (issue 28): local threads.
    same = recommend(one_cpu, 10**10, 1)
    assert same.best.local and " runs on this host (" in same.reason, same.reason
    assert all(c.on_this_host for c in same.candidates if not c.local)
    # Had the same measurements come from another host, its 2 slots would win a large job.
    elsewhere = "f" * 32
    away = replace(one_cpu, workers=tuple(replace(w, host=elsewhere) for w in probe.workers))
    large = recommend(away, 10**10, 1)
    assert not large.best.local and large.best.identities == ("s1", "s2"), large.reason
    assert large.reason.startswith("the group: its 2 slots save ")


def test_plan_without_a_size_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aner_coord", "parallel", "plan"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "aner: give --samples N or --experiment FILE.toml"
