"""The job timeline end to end (docs/contracts.md, section 14): every job directory gets a
`timeline.jsonl` whose per-worker sums reconcile with the result's `compute_s`,
`transfer_s` and `wait_s` (Monte Carlo, the fixture, Dense and search, on local threads and
on a pipe group); `aner parallel timeline` summarises it, draws it and exports it; and a
timeline that is missing, damaged, cut short, a FIFO or too big is refused in one line,
exit 2, before anything is written."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aner.parallel as parallel
import pytest
from support import result_of, run_aner, write_pipe_pair

from aner_coord.cli.monitor import busy_text
from aner_coord.cli.timeline import timeline
from aner_coord.jobdir import JobDir
from aner_coord.jobdir.timeline import PhaseLine, Segment, TaskLine, read_timeline
from aner_coord.timeline.analysis import analyse

SEARCH = {
    "teacher": (300, 4, 3),
    "seed": 2,
    "folds": 2,
    "hidden": (4,),
    "epochs": 1,
    "chunk": 32,
    "grid": {"lr": [0.01, 0.03]},
}
# Each computation's call, and the chunk it is run with (a search chooses its own).
CALLS: dict[str, tuple[Any, int | None]] = {
    "monte-carlo": (lambda on, **kw: on.monte_carlo(samples=2_000_000, seed=42, **kw), 131_072),
    "regression": (
        lambda on, **kw: on.regression(samples=20_000, steps=3, rate=0.5, seed=3, **kw),
        4096,
    ),
    "dense": (
        lambda on, **kw: on.dense_fit(
            teacher=(800, 6, 3), epochs=1, seed=5, hidden=(8,), batch=256, **kw
        ),
        128,
    ),
    "search": (lambda on, **kw: on.search(**SEARCH, **kw), None),
}


@pytest.fixture(scope="module")
def pipes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One session of a two-worker pipe group for every computation (its workers start
    once; each call is still its own job with its own directory and timeline)."""
    cluster = write_pipe_pair(tmp_path_factory.mktemp("pipes") / "pair.txt")
    with parallel.session(parallel.cluster(config=cluster)) as session:
        yield session


def _close(timeline_value: float | None, result_value: float | None) -> bool:
    if result_value is None or timeline_value is None:
        return timeline_value is None and result_value is None
    # within 1% (and the result's rounding to the microsecond)
    return abs(timeline_value - result_value) <= 0.01 * abs(result_value) + 2e-6


@pytest.mark.parametrize("backend", ["threads", "pipes"])
@pytest.mark.parametrize("kind", list(CALLS))
def test_the_timelines_sums_reconcile_with_the_result(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    job = tmp_path / "job"
    call, chunk = CALLS[kind]
    if backend == "threads":
        # Threads, for every computation (a search's own choice would be worker processes).
        execution = parallel.local(2, chunk=chunk, backend="threads")
        call(parallel, execution=execution, output=str(job))
    else:
        session = request.getfixturevalue("pipes")
        call(session, output=str(job), **({} if chunk is None else {"chunk": chunk}))
    lines = read_timeline(job)
    (segment,) = [line for line in lines if isinstance(line, Segment)]
    assert segment.backend == ("threads" if backend == "threads" else "processes")
    tasks = [line for line in lines if isinstance(line, TaskLine)]
    workers = result_of(job)["workers"]
    assert len(tasks) == sum(w["chunks"] for w in workers)  # one line per task, all accepted
    assert {t.outcome for t in tasks} == {"accepted"}
    assert all(t.received is not None and t.dispatched <= t.received for t in tasks)
    if backend == "pipes":  # worker clocks mapped, within their stated uncertainty
        for t in tasks:
            assert t.started is not None and t.ended is not None and t.clock_error_s is not None
            assert t.started >= t.dispatched - t.clock_error_s - 1e-6
            assert t.ended <= t.received + t.clock_error_s + 1e-6
            assert t.bytes_out and t.bytes_in
    names = {line.name for line in lines if isinstance(line, PhaseLine)}
    assert {"broadcast", "update", "status"} <= names
    (view,) = analyse(lines)
    by_name = {w.identity: w for w in view.workers}
    for worker in workers:
        mine = by_name[worker["identity"]]
        for field in ("compute_s", "transfer_s", "wait_s"):
            assert _close(getattr(mine, field), worker.get(field)), (field, worker, mine)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished Dense job on two threads."""
    job = tmp_path_factory.mktemp("finished") / "job"
    parallel.dense_fit(
        teacher=(600, 6, 3), epochs=2, seed=5, hidden=(8,), batch=128, chunk=64,
        execution=parallel.local(2), output=str(job),
    )  # fmt: skip
    return job


def test_the_command_summarises_draws_and_exports_the_timeline(
    finished: Path, tmp_path: Path
) -> None:
    png, trace = tmp_path / "gantt.png", tmp_path / "trace.json"
    done = run_aner(
        "parallel", "timeline", "--job", str(finished), "--png", str(png), "--chrome", str(trace)
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "segment 0 (coordinator): dense on threads" in text
    for word in ("local-1", "local-2", "longest", "stragglers", "coordinator ", "update ", "rest"):
        assert word in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_mode & 0o077 == 0
    events = json.loads(trace.read_text())["traceEvents"]
    lines = read_timeline(finished)
    tasks = [line for line in lines if isinstance(line, TaskLine)]
    phases = [line for line in lines if isinstance(line, PhaseLine)]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(tasks) + len(phases)
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}
    as_json = run_aner("parallel", "timeline", "--job", str(finished), "--json")
    summary = json.loads(as_json.stdout)
    (segment,) = summary["segments"]
    assert sum(w["tasks"] for w in segment["workers"]) == len(tasks)
    result = {w["identity"]: w for w in result_of(finished)["workers"]}
    for worker in segment["workers"]:
        assert _close(worker["compute_s"], result[worker["identity"]]["compute_s"])
    # Each pass begins with a broadcast and ends with an update: normalisation, 2 epochs of
    # steps each followed by a validation, and the test.
    passes = 1 + result_of(finished)["committed_steps"] + 2 + 1
    assert segment["phases"]["update"]["pieces"] == segment["phases"]["broadcast"]["pieces"]
    assert segment["phases"]["update"]["pieces"] == passes


def test_the_watch_shows_each_workers_recent_busy_share(finished: Path) -> None:
    with JobDir.open(finished) as directory:
        text = busy_text(directory)
    assert text is not None and text.endswith("(computing, last 5 s of the timeline)")
    shares = dict(part.rsplit(" ", 1) for part in text.split(" (")[0].split(", "))
    assert set(shares) == {"local-1", "local-2"}
    assert all(share.endswith("%") and 0 <= int(share[:-1]) <= 100 for share in shares.values())
    assert any(int(share[:-1]) > 0 for share in shares.values())


def _copy(job: Path, tmp_path: Path) -> Path:
    """A job directory like `job` (its manifest), with a timeline of the test's making."""
    other = tmp_path / "copy"
    other.mkdir(mode=0o700)
    (other / "run-manifest.json").write_bytes((job / "run-manifest.json").read_bytes())
    return other


def _refused(job: Path, match: str) -> None:
    with pytest.raises(parallel.RequestError, match=match):
        timeline(str(job), png=str(job.parent / "never.png"))
    assert not (job.parent / "never.png").exists()


def test_a_timeline_that_cannot_be_read_is_refused_in_one_line(
    finished: Path, tmp_path: Path
) -> None:
    good = (finished / "timeline.jsonl").read_bytes()
    job = _copy(finished, tmp_path)
    _refused(job, "has no timeline.jsonl")
    target = job / "timeline.jsonl"
    target.write_bytes(good[:-7])  # cut short within its last line
    _refused(job, r"it is cut short: its last line, from byte [\d,]+, is unfinished")
    lines = good.split(b"\n")
    target.write_bytes(b"\n".join([lines[0], b'{"kind": "task", "worker": 3}', *lines[1:]]))
    _refused(job, "line 2 is not a timeline line")
    target.write_bytes(b"")
    _refused(job, "it is empty")
    target.write_bytes(b"\n".join(lines[1:]))
    _refused(job, "it does not begin with a segment line")
    with open(target, "wb") as big:
        big.truncate(66 << 20)  # sparse: over the bound without writing it
    _refused(job, "the limit is")
    target.unlink()
    os.mkfifo(target, 0o600)
    done = run_aner("parallel", "timeline", "--job", str(job))  # never waits on the FIFO
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "timeline.jsonl" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_line_nested_too_deeply_is_refused_in_one_line(finished: Path, tmp_path: Path) -> None:
    """100,000 nested brackets in a line (under a field the reader skips) exited 1 with a
    RecursionError."""
    lines = (finished / "timeline.jsonl").read_bytes().split(b"\n")
    deep = b'{"kind": "segment", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    job = _copy(finished, tmp_path)
    (job / "timeline.jsonl").write_bytes(b"\n".join([lines[0], deep, *lines[1:]]))
    done = run_aner("parallel", "timeline", "--job", str(job))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "line 2 is not a timeline line: it is nested too deeply" in done.stderr


def test_the_chart_gives_the_coordinators_measured_busy_share(finished: Path) -> None:
    # Issue 38, item 7: the reduce's pieces drawn as their span read as a coordinator 100%
    # busy where it spent 1.3% reducing. Its lane says the measured share; titled, labelled.
    pytest.importorskip("matplotlib")
    from aner_coord.timeline.analysis import analyse, coordinator_busy_share
    from aner_coord.timeline.gantt import chart

    views = analyse(read_timeline(finished))
    busy = coordinator_busy_share(views)
    assert busy is not None and 0 < busy < 1
    phases = sum(
        p.busy_s if p.busy_s is not None else max(0.0, p.end - p.begin)
        for v in views
        for p in v.phase_lines
    )
    assert busy == phases / sum(v.wall_s for v in views)
    figure = chart(views)
    (ax,) = figure.axes
    lanes = [tick.get_text() for tick in ax.get_yticklabels()]
    assert lanes[0] == f"coordinator (busy {busy:.1%})" and {"local-1", "local-2"} <= set(lanes)
    assert ax.get_title().startswith("Job timeline: dense on threads, ")
    assert ax.get_xlabel() == "time from the job's start (s)"
    assert ax.get_ylabel() == "coordinator and worker slots"
    from matplotlib import pyplot

    pyplot.close(figure)
