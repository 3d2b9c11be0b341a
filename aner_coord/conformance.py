"""The conformance suite of a simulation plugin (docs/contracts.md, section 15), as
scikit-learn's `check_estimator` is for estimators: `aner.testing.check_computation(NAME)`,
called from the plugin's own tests, runs the installed computation NAME on small sizes and
checks what aner promises of every computation it runs:

- `stream`: the function is a function of its uniforms and parameters alone: the same
  samples computed twice, with another seed's between, give the same bits (a function that
  draws from numpy's global generator, reads the clock or keeps state fails here), and every
  value is finite;
- `placement`: the same bits on one and two local workers, on a pipe group of two worker
  processes, and with two chunk sizes;
- `resume`: a job interrupted after its first accepted chunk and resumed from its job
  directory gives the bits of an uninterrupted run;
- `refusals`: each parameter out of its range, of the wrong type, and an unknown parameter
  are refused in one line naming the computation, before any worker starts.

Every check runs, and the suite raises `ConformanceError` with one line per failed check
(`NAME: check: what`), or returns what passed. Worker processes are this interpreter's
`aner`, so the plugin must be installed where they find it (as for any job).
"""

from __future__ import annotations

import asyncio
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord.admission import admit
from aner_coord.errors import AnerError, RequestError
from aner_coord.requests import ClusterExecution, Execution, JobRequest, LocalExecution
from aner_worker.kernels.simulation import BLOCK
from aner_worker.plugins import Param, Simulation

# Four full blocks and a short one: the smallest size where chunks of one and two blocks,
# and two workers, all cut the samples differently.
SAMPLES = 4 * BLOCK + 123
CHECKS = ("stream", "placement", "resume", "refusals")
# The job the resume check interrupts: about this long on one worker, and at most so large.
INTERRUPTED_S = 1.5
MAX_INTERRUPTED = 1 << 28


class ConformanceError(AssertionError):
    """The computation breaks a rule: one line per failed check (`lines`)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = tuple(lines)
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Conformance:
    """What `check_computation` checked of `name` (plugin `plugin`), and in how long."""

    name: str
    plugin: str
    passed: tuple[str, ...]
    seconds: float


class _Failed(Exception):
    """One check's failure: its line, less the computation's name."""


def check_computation(
    name: str, *, params: dict[str, float] | None = None, seed: int = 1
) -> Conformance:
    """Check the installed simulation `name` with `params` (its declared defaults where
    not given) and `seed`; raise ConformanceError, one line per failed check."""
    from aner_coord.computations.named import found_named, label_of

    began = time.perf_counter()
    found = found_named(name)
    declaration = found.declaration
    if not isinstance(declaration, Simulation):
        raise ConformanceError([
            f"{name}: declaration: check_computation checks simulations (aner_worker.plugins."
            "Simulation); a general Plugin is checked by its own tests"
        ])  # fmt: skip
    suite = _Suite(name, declaration, dict(params or {}), seed)
    try:
        suite.admitted()
    except _Failed as failed:
        raise ConformanceError([f"{name}: declaration: {failed}"]) from None
    lines = []
    passed = []
    for check in CHECKS:
        if check != "refusals" and suite.broken is not None:
            lines.append(f"{name}: {check}: not run: {suite.broken}")
            continue
        try:
            getattr(suite, check)()
            passed.append(check)
        except _Failed as failed:
            lines.append(f"{name}: {check}: {failed}")
    if lines:
        raise ConformanceError(lines)
    return Conformance(name, label_of(found), tuple(passed), time.perf_counter() - began)


class _Suite:
    def __init__(self, name: str, simulation: Simulation, params: dict[str, float], seed: int):
        self.name = name
        self.simulation = simulation
        self.params = params
        self.seed = seed
        self.broken: str | None = None  # why no job can run (the stream check's finding)
        self.rate = 1e6  # samples a second on one local worker (the placement check's)

    def _request(self, samples: int = SAMPLES, seed: int | None = None) -> Any:
        from aner_coord.computations.named import named_request

        options = {"samples": samples, "seed": self.seed if seed is None else seed}
        return named_request(self.name, options, self.params, text=False)

    def admitted(self) -> None:
        """The request of the defaults is admitted (its function compiles and returns what
        the declaration says), or the one line of its refusal."""
        try:
            admit(JobRequest(computation=self._request(), execution=LocalExecution(workers=1)))
        except RequestError as exc:
            raise _Failed(str(exc)) from None

    # -- the checks ---------------------------------------------------------------------
    def stream(self) -> None:
        from aner_coord.computations.simulation.request import check_params
        from aner_worker.kernels.simulation.loop import compiled

        values = check_params(self.name, self.simulation, self._request().params)
        blocks = compiled(self.name, self.simulation)
        try:
            first = blocks(self.seed, 0, 2 * BLOCK, values)
            blocks(self.seed + 1, 0, BLOCK, values)
            again = blocks(self.seed, 0, 2 * BLOCK, values)
        except Exception as exc:
            self.broken = "its function fails on the stream check's samples"
            raise _Failed(f"{type(exc).__name__}: {exc}") from None
        if first != again:
            raise _Failed(
                "the same samples computed twice gave different values: the function must "
                "use only the uniforms and parameters it is given (not numpy's global "
                "generator, the clock, or state kept between calls)"
            )

    def placement(self) -> None:
        began = time.perf_counter()
        one = self._run(LocalExecution(workers=1))
        self.rate = SAMPLES / max(time.perf_counter() - began, 1e-3)
        ways: list[tuple[str, Callable[[], Any]]] = [
            ("2 local workers", lambda: self._run(LocalExecution(workers=2, chunk=BLOCK))),
            (
                f"chunks of {2 * BLOCK:,}",
                lambda: self._run(LocalExecution(workers=1, chunk=2 * BLOCK)),
            ),
            ("a pipe group of 2 worker processes", self._on_pipes),
        ]
        differ = [what for what, run in ways if run().outputs != one.outputs]
        if differ:
            raise _Failed(
                f"the bits on 1 local worker differ from those on {', '.join(differ)}: the "
                "result must not depend on the placement"
            )

    def resume(self) -> None:
        # The job is cancelled from its first snapshot that counts an accepted chunk; those
        # come every STATUS_INTERVAL_S, so it is sized to last about INTERRUPTED_S on one
        # worker at the rate the placement check measured (larger if it still ends first).
        samples = _blocks_of(self.rate * INTERRUPTED_S)
        for _ in range(3):
            with tempfile.TemporaryDirectory(prefix="aner-conformance-") as folder:
                job = Path(folder) / "job"
                chunk = BLOCK * max(1, samples // BLOCK // 64)
                request = JobRequest(
                    computation=self._request(samples=samples),
                    execution=LocalExecution(workers=1, chunk=chunk),
                    output=str(job),
                )
                if _interrupted(request):
                    resumed = _resumed(job)
                    break
            samples = min(4 * samples, MAX_INTERRUPTED)
        else:
            raise _Failed(f"a job of {samples:,} samples ended before it could be interrupted")
        whole = self._run(LocalExecution(workers=2), samples=samples)
        if resumed.outputs != whole.outputs:
            raise _Failed("a job resumed after an interruption differs from an uninterrupted run")

    def refusals(self) -> None:
        wrong = []
        for given, what in self._bad_params():
            try:
                self._request_with(given)
            except RequestError as exc:
                text = str(exc)
                if "\n" in text or self.name not in text:
                    wrong.append(f"{what} was refused in words that do not name {self.name}")
                continue
            wrong.append(f"{what} was admitted")
        if wrong:
            raise _Failed("; ".join(wrong))

    # -- helpers ------------------------------------------------------------------------
    def _request_with(self, given: dict[str, Any]) -> Any:
        from aner_coord.computations.named import named_request

        text = any(isinstance(v, str) for v in given.values())
        return named_request(self.name, {"samples": BLOCK, "seed": 1}, given, text=text)

    def _bad_params(self) -> list[tuple[dict[str, Any], str]]:
        bad: list[tuple[dict[str, Any], str]] = [
            ({"not_a_parameter": 1.0}, "an unknown parameter"),
        ]
        for param in self.simulation.params:
            bad += [({param.name: v}, f"{param.name} = {v!r}") for v in _outside(param)]
        return bad

    def _run(self, execution: Execution, samples: int = SAMPLES) -> Any:
        from aner_coord import parallel

        try:
            return parallel.run(self._request(samples=samples), execution=execution)
        except AnerError as exc:
            raise _Failed(f"the job failed: {exc}") from None

    def _on_pipes(self) -> Any:
        with tempfile.TemporaryDirectory(prefix="aner-conformance-") as folder:
            cluster = Path(folder) / "cluster"
            aner = Path(sys.executable).with_name("aner")
            lines = ["ANER_CLUSTER 1"] + [f'worker "pipe-{i}" local "-" "{aner}" 1' for i in (1, 2)]
            cluster.write_text("\n".join(lines) + "\n")
            cluster.chmod(0o600)
            return self._run(ClusterExecution(config=str(cluster), chunk=BLOCK))


def _outside(param: Param) -> list[Any]:
    """Values a parameter must refuse: beyond each end of its range, and for an int one
    that is not whole; a word where a number goes."""
    width = max(param.le - param.ge, 1.0)
    values: list[Any] = [param.ge - width, param.le + width, math.nan, "many"]
    if param.kind == "int":
        values.append(param.ge + 0.5 if param.ge < param.le else param.ge - 0.5)
    return values


def _blocks_of(samples: float) -> int:
    """`samples` as whole blocks, within the sizes the resume check takes."""
    return int(min(max(samples // BLOCK, 16), MAX_INTERRUPTED // BLOCK)) * BLOCK


def _interrupted(request: JobRequest) -> bool:
    """Run `request` and cancel it once its first chunk is accepted: whether it was (not if
    it completed first). A failure is the check's."""
    from aner_coord.job.execute import execute
    from aner_coord.jobdir.status import JobState
    from aner_coord.runner import run_sync

    job = admit(request)

    async def main() -> Any:
        cancel = asyncio.Event()

        def observe(snapshot: Any) -> None:
            if snapshot.accepted > 0:
                cancel.set()

        return await execute(job, observers=[observe], cancel=cancel)

    report = run_sync(main())
    if report.state is JobState.FAILED:
        raise _Failed(f"the job to interrupt failed: {report.error}")
    return report.state is JobState.CANCELLED


def _resumed(job: Path) -> Any:
    from aner_coord.calls import outcome
    from aner_coord.job.execute import execute
    from aner_coord.job.resume import prepare_resume
    from aner_coord.runner import run_sync

    try:
        admitted, resumption = prepare_resume(job)
        report = run_sync(execute(admitted, resume=resumption))
        return outcome(report)
    except AnerError as exc:
        raise _Failed(f"the resumed job failed: {exc}") from None
