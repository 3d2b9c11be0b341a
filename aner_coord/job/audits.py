"""What `--audit` checked, per worker, for the result (docs/contracts.md, section 9).

The coordinator recomputes the tasks the machine picks for audit and counts here the ones
that agreed (a disagreeing one fails the job). How a worker's answers are compared follows
from its handshake: bitwise where it reported this machine's platform identity (BLAS
kernels included), within the run's stated tolerance (`ExplainsDifference.tolerance`)
where it reported another; a worker that reported nothing is held to bitwise, the strict
comparison. Counts cover this coordinator's run: a resumed job counts the audits since its
resume.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from aner_coord.jobdir.results import AuditedWorker, AuditRecord
from aner_coord.jobdir.status import WorkerAccount

BITWISE, TOLERANCE = "bitwise", "tolerance"


class AuditBook:
    def __init__(
        self,
        fraction: float,
        tolerance: float | None,
        machine_of: Callable[[str], dict[str, str] | None],
    ) -> None:
        self.fraction = fraction
        self.tolerance = tolerance  # None: the run compares bitwise on every platform
        self._machine_of = machine_of
        self._agreed: Counter[str] = Counter()

    def differences(self, worker: str) -> list[str]:
        """The platform fields where `worker`'s handshake differs from this machine's."""
        from aner_worker.machine import machine_identity, platform_differences

        machine = self._machine_of(worker)
        return [] if machine is None else platform_differences(machine, machine_identity())

    def comparison(self, worker: str) -> str:
        if self.tolerance is None or not self.differences(worker):
            return BITWISE
        return TOLERANCE

    def agreed(self, worker: str) -> None:
        self._agreed[worker] += 1

    def record(self, workers: Sequence[WorkerAccount]) -> AuditRecord:
        return AuditRecord(
            fraction=self.fraction,
            tolerance=self.tolerance,
            workers=[
                AuditedWorker(
                    identity=w.identity,
                    tasks=w.chunks,
                    audited=self._agreed[w.identity],
                    comparison=self.comparison(w.identity),
                    platform_differs=self.differences(w.identity),
                )
                for w in workers
            ],
        )
