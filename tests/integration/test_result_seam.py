"""The last seam of a job: the computation's `result()`, called once the machine has said
COMPLETED. A computation that raises there must end the job FAILED naming where, like a
fault at any other seam, never escape as a bare exception with status.json left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from support import status_of
from toy_computation import Toy, ToyRequest, _ToyRun

from aner_coord import parallel
from aner_coord.computations import COMPUTATIONS, register
from aner_coord.jobdir import lock_is_held
from aner_coord.jobdir.status import JobState


class ResultFaultRequest(ToyRequest, frozen=True, tag="toy-result-fault"):
    """The toy computation under its own kind, so the registered toy stays untouched."""


class _ResultFaultRun(_ToyRun):
    def result(self, accounting: Any) -> Any:
        raise RuntimeError("injected result fault")


class ResultFault(Toy):
    kind: ClassVar[str] = "toy-result-fault"
    request_type: ClassVar[type[ResultFaultRequest]] = ResultFaultRequest  # type: ignore[assignment]

    def start(self, request: ToyRequest, chunk: int) -> _ResultFaultRun:
        return _ResultFaultRun(request)


@pytest.fixture(scope="module", autouse=True)
def registered() -> Any:
    register(ResultFault())
    yield
    del COMPUTATIONS[ResultFault.kind]


def test_a_fault_in_the_final_result_fails_the_job_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "job"
    with pytest.raises(parallel.JobFailed, match="injected result fault"):
        parallel.run(
            ResultFaultRequest(items=1_000, seed=0),
            execution=parallel.local(1, chunk=100),
            output=out,
        )
    status = status_of(out)
    assert status.state is JobState.FAILED
    assert status.error is not None and "result" in status.error
    assert not (out / "result.json").exists()
    assert not lock_is_held(out)
