"""`timeline.jsonl` written and read (`aner_coord.jobdir.timeline`) and analysed
(`aner_coord.timeline.analysis`) without a job: the size bound and its sampling rule, a
resumed coordinator's segment appended after a torn tail is cut, and the summary's numbers
on a timeline made by hand."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from aner_coord.jobdir import JobDir, JobFileError
from aner_coord.jobdir import timeline as tl
from aner_coord.jobdir.timeline import (
    TIMELINE_SCHEMA,
    PhaseLine,
    Sampling,
    Segment,
    TaskLine,
    TimelineWriter,
    Truncated,
    read_timeline,
)
from aner_coord.timeline.analysis import analyse, recent_busy, summary_lines, to_json


def _segment(number: int = 0, backend: str = "processes") -> Segment:
    return Segment(TIMELINE_SCHEMA, number, 1000.0, "monte-carlo", backend, {"A": 2, "B": 1})


def _task(task_id: int, worker: str = "A", busy: float | None = 0.5, **kw: object) -> TaskLine:
    fields: dict[str, object] = {
        "segment": 0,
        "worker": worker,
        "pass_id": 0,
        "task_id": task_id,
        "start": 10 * task_id,
        "count": 10,
        "dispatched": 0.0,
        "received": None if busy is None else busy + 0.1,
        "busy_s": busy,
        "queued_s": 0.0,
        "link_s": 0.1,
    }
    fields.update(kw)
    return msgspec.convert(fields, TaskLine)


@pytest.fixture
def directory(tmp_path: Path) -> JobDir:
    path = tmp_path / "job"
    path.mkdir(mode=0o700)
    return JobDir.open(path)


def test_past_the_bound_one_line_in_sixteen_is_kept_then_nothing(
    directory: JobDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tl, "TIMELINE_FULL_BYTES", 4096)
    monkeypatch.setattr(tl, "TIMELINE_MAX_BYTES", 16384)
    writer = TimelineWriter(directory, 0)
    writer.add(_segment())
    for i in range(2000):
        writer.add(_task(i), sample_key=i)
        if i == 1500:
            writer.add(_task(i, outcome="lost"))  # never sampled away
    writer.close()
    lines = read_timeline(directory)
    kinds = [type(line) for line in lines]
    assert kinds.count(Sampling) == 1 and kinds[-1] is Truncated
    at = kinds.index(Sampling)
    before = [line.task_id for line in lines[:at] if isinstance(line, TaskLine)]
    after = [line for line in lines[at:] if isinstance(line, TaskLine)]
    assert before == list(range(len(before)))  # every line up to the first bound
    assert after and all(t.task_id % 16 == 0 or t.outcome == "lost" for t in after)
    assert (directory.path / "timeline.jsonl").stat().st_size < 16384 + 1024
    assert (directory.path / "timeline.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_resumed_coordinator_appends_its_segment_after_cutting_a_torn_tail(
    directory: JobDir,
) -> None:
    first = TimelineWriter(directory, 0)
    first.add(_segment())
    first.add(_task(1))
    first.close()
    path = directory.path / "timeline.jsonl"
    whole = path.read_bytes()
    with open(path, "ab") as out:
        out.write(b'{"kind":"task","segment":0,"wor')  # a coordinator killed mid-write
    with pytest.raises(JobFileError, match=f"from byte {len(whole):,}, is unfinished"):
        read_timeline(directory)
    second = TimelineWriter(directory, 1)
    second.add(_segment(1))
    second.add(_task(2))
    second.close()
    lines = read_timeline(directory)
    assert [type(line) for line in lines] == [Segment, TaskLine, Segment, TaskLine]
    assert path.read_bytes().startswith(whole)
    views = analyse(lines)
    assert [v.segment.segment for v in views] == [0, 1]
    assert "segment 1 (resumed coordinator)" in "\n".join(summary_lines(views))


def test_the_analysis_counts_busy_shares_gaps_stragglers_phases_and_the_rest() -> None:
    # Worker A (2 slots): tasks 0..3 of 0.5 s each, two at a time, then a gap, then a
    # straggler of 2 s; worker B: one 0.5 s task. Times are when each slot computed.
    spans = [(0.0, 0.5), (0.0, 0.5), (0.5, 1.0), (0.5, 1.0), (2.0, 4.0)]
    tasks = [
        _task(i, busy=e - b, started=b, ended=e, received=e + 0.01, dispatched=0.0)
        for i, (b, e) in enumerate(spans)
    ]
    tasks.append(_task(9, "B", busy=0.5, started=1.0, ended=1.5, received=1.51))
    tasks.append(_task(10, "B", busy=None, received=None, outcome="lost", dispatched=1.6))
    phases = [
        PhaseLine(0, "update", 4.01, 4.11, 0),
        PhaseLine(0, "reduce", 0.5, 1.5, 0, busy_s=0.02, pieces=5),
    ]
    (view,) = analyse([_segment(), *tasks, *phases])
    a, b = view.workers
    assert a.compute_s == pytest.approx(4.0) and b.compute_s == pytest.approx(0.5)
    assert view.wall_s == pytest.approx(4.11)
    assert a.busy_share == pytest.approx(4.0 / (2 * 4.11))
    assert a.longest_gap_s == pytest.approx(1.0) and a.longest_gap_at == pytest.approx(1.0)
    assert a.stragglers == 1 and b.stragglers == 0  # 2 s against a pass median of 0.5 s
    assert b.outcomes == {"accepted": 1, "lost": 1}
    assert view.phases == {"update": (pytest.approx(0.1), 1), "reduce": (0.02, 5)}
    assert view.longest[0].task_id == 4
    # Nobody computed from 1.5 to 2.0 nor while the last result travelled (4.0 to 4.01),
    # and no phase ran then: the rest between tasks.
    assert view.uncovered_s == pytest.approx(0.51)
    data = to_json([view])
    assert data["segments"][0]["workers"][1]["outcomes"] == {"accepted": 1, "lost": 1}
    text = "\n".join(summary_lines([view]))
    assert "1 lost" in text and "update 100.0 ms (2.4%, 1x)" in text
    # The last 2 s: A computed the straggler on one of its 2 slots, B nothing.
    assert recent_busy([_segment(), *tasks], 2.0) == {"A": 0.5, "B": 0.0}
