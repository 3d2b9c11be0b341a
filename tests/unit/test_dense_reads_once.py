"""A Dense run trains on the very data set that admission parsed and whose SHA256 the
manifest records, even when the file changes between admission and the run's start (a CSV
appended to while `train` starts); a later admission sees the new file."""

from __future__ import annotations

from pathlib import Path

from aner_coord.admission import admit
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.requests import JobRequest, LocalExecution


def rows(n: int, offset: int = 0) -> str:
    return "".join(
        f"{(i + offset) % 7 / 7:.3f},{(i * 3) % 11 / 11:.3f},{i % 2}\n" for i in range(n)
    )


def test_the_run_trains_on_the_bytes_admission_parsed(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,b,label\n" + rows(300))
    request = JobRequest(
        computation=DenseRequest(seed=1, data=str(data)), execution=LocalExecution(1, 64)
    )
    job = admit(request)
    recorded = job.admitted.describe
    with open(data, "a") as more:
        more.write(rows(100, 300))  # appended while the job starts
    run = job.computation.start(job.request.computation, job.chunk)
    assert run.roles.counts() == recorded["roles"]  # type: ignore[attr-defined]
    assert sum(recorded["roles"].values()) == 300
    again = admit(request)  # a new job reads the file as it is now
    assert sum(again.admitted.describe["roles"].values()) == 400
    assert again.admitted.describe["data"] != recorded["data"]
    rerun = again.computation.start(again.request.computation, again.chunk)
    assert rerun.roles.counts() == again.admitted.describe["roles"]  # type: ignore[attr-defined]
