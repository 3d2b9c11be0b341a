"""Dense scaling experiments and plans end to end (issue 16, item 4): an experiment over
local threads and a pipe group runs every trial to the same model; the records carry the
test accuracy, the time to the target accuracy and how each trial's workers got the data
(cold, then cached); `training.png` is drawn; a bad case is refused before the first trial;
`plan --experiment` predicts a Dense experiment."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from suite_env import child_env
from support import ANER, write_cluster

from aner_worker.kernels.dense.data import TeacherDataset

matplotlib_image = pytest.importorskip("matplotlib.image")


def data_file(tmp_path: Path) -> Path:
    x, y = TeacherDataset(1500, 6, 3, 4).rows(np.arange(1500))
    path = tmp_path / "rows.csv"
    lines = ["a,b,c,d,e,f,label"] + [
        ",".join(repr(float(v)) for v in row) + f",{label}" for row, label in zip(x, y, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def experiment(tmp_path: Path, extra_case: str = "") -> Path:
    write_cluster(
        tmp_path / "pair.cluster", [("p1", "local", "-", ANER, 1), ("p2", "local", "-", ANER, 1)]
    )
    path = tmp_path / "experiment.toml"
    path.write_text(
        f'name = "dense rows"\n[computation]\nkind = "dense"\ndata = "{data_file(tmp_path)}"\n'
        "seed = 2\nepochs = 2\nhidden = [12]\ntarget_accuracy = 0.3\n"
        '[[case]]\nname = "threads"\nworkers = 1\n'
        '[[case]]\nname = "pipes"\ncluster = "pair.cluster"\n' + extra_case
    )
    return path


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ANER, "parallel", *args], capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def test_a_dense_experiment_over_threads_and_a_pipe_group(tmp_path: Path) -> None:
    out = tmp_path / "scaling"
    # A fresh block cache: the pipe group's first trial stages cold, the others find it.
    env = child_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    proc = run(
        "scaling", "--experiment", str(experiment(tmp_path)), "--output", str(out),
        "--registry", str(tmp_path / "registry.json"), "--no-predict", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 8 and all(t["ok"] for t in trials)
    assert len({t["test_accuracy"] for t in trials}) == 1  # one model, whatever the plan
    for t in trials:
        assert 0 < t["test_accuracy"] <= 1 and len(t["history"]) == 2
        assert t["time_to_target_s"] is None or t["time_to_target_s"] > 0
        if t["transfer_s"] is not None:
            assert t["transfer_s"] <= t["wall_s"]
    pipes = [t for t in trials if t["case"] == "pipes"]
    # The two workers share this machine's cache: the first to stage sends the blocks, the
    # other may already find them ("mixed"); every later trial finds them all.
    assert pipes[0]["staged"] in ("cold", "mixed")
    assert "cold" in {r["state"] for r in pipes[0]["staging"]}
    assert [t["staged"] for t in pipes[1:]] == ["cached"] * 3
    assert {r["identity"] for r in pipes[0]["staging"]} == {"p1", "p2"}
    assert all(t.get("staged") is None for t in trials if t["case"] == "threads")
    with (out / "cases.csv").open() as f:
        rows = {row["case"]: row for row in csv.DictReader(f)}
    assert rows["pipes"]["chunk"] == rows["threads"]["chunk"] == "128"  # Dense's default
    assert float(rows["pipes"]["test_accuracy"]) == round(trials[0]["test_accuracy"], 6)
    assert rows["pipes"]["staging"] == "cached" and rows["threads"]["staging"] == ""
    assert "time_to_target_s" in rows["threads"]
    report = (out / "report.md").read_text()
    assert "| case | test accuracy | time to target s | staging (timed trials) |" in report
    assert f"Staging: pipes warm-up {pipes[0]['staged']}." in report
    assert "![training.png](training.png)" in report
    pixels = matplotlib_image.imread(out / "training.png")
    assert pixels.shape[1] >= 400 and float(pixels[..., :3].var()) > 1e-3


def test_a_case_its_command_would_refuse_stops_the_experiment_at_once(tmp_path: Path) -> None:
    # Three workers for a data set whose largest pass makes two chunks of 600 rows (SSH
    # records: nothing connects before the experiment is refused).
    write_cluster(
        tmp_path / "three.cluster",
        [(f"t{i}", "ssh", f"peer-{i}", "/opt/aner/bin/aner", 1) for i in range(3)],
    )
    bad = '[[case]]\nname = "coarse"\ncluster = "three.cluster"\nchunk = 600\n'
    out = tmp_path / "scaling"
    proc = run("scaling", "--experiment", str(experiment(tmp_path, bad)), "--output", str(out))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "case 'coarse': " in proc.stderr and "fewer than the 3 configured workers" in proc.stderr
    assert not out.exists()


def test_plan_predicts_a_dense_experiment(tmp_path: Path) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text(
        '[computation]\nkind = "dense"\nteacher = [2000, 8, 3]\nseed = 1\nepochs = 2\n'
        'hidden = [16]\n[[case]]\nname = "one"\nworkers = 1\n[[case]]\nname = "two"\nworkers = 2\n'
    )
    proc = run("plan", "--experiment", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    advice = json.loads(proc.stdout)
    assert set(advice["cases"]) == {"one", "two"}
    assert all(seconds > 0 for seconds in advice["cases"].values())
    assert advice["recommended"]["execution"] == "local" and advice["reason"]


def test_a_search_experiment_passes_whatever_its_fits_took_or_where_they_ran(
    tmp_path: Path,
) -> None:
    """Issue 25 item 15: a fit's `seconds` and `worker` are how it ran, not what it found."""
    path = tmp_path / "experiment.toml"
    path.write_text(
        'name = "tiny search"\nrepetitions = 3\n[computation]\nkind = "search"\n'
        "teacher = [600, 4, 2]\nseed = 1\nfolds = 2\nepochs = 1\nhidden = [4]\n"
        "[computation.grid]\nlr = [1e-3, 3e-3]\n"
        '[[case]]\nname = "two"\nworkers = 2\n'
    )
    out = tmp_path / "scaling"
    proc = run(
        "scaling", "--experiment", str(path), "--output", str(out),
        "--registry", str(tmp_path / "registry.json"), "--no-predict",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 4 and all(t["ok"] and t["failure"] is None for t in trials), [
        t["failure"] for t in trials
    ]
    fits = [t["result"]["fits"] for t in trials]
    assert all(len(f) == 4 for f in fits)
    losses = {tuple(fit["validation_loss"] for fit in f) for f in fits}
    assert len(losses) == 1  # the same fits, to the bit, however long each took
    # Each trial keeps how busy the machine was, and the report says it.
    for t in trials:
        assert 0.0 <= t["others_cpu_share"] <= 1.0 and isinstance(t["busy"], bool)
        assert len(t["load_1m"]) == 2
    assert "## Machine load" in (out / "report.md").read_text()
