"""What `--audit` checked, per worker, for the result (docs/contracts.md, section 9).

The coordinator recomputes the tasks the machine picks for audit and counts here the ones
that agreed (a disagreeing one fails the job). How a worker's answers are compared follows
from its handshake: bitwise where it reported this machine's platform identity (BLAS
kernels included), within the run's stated tolerance (`ExplainsDifference.tolerance`)
where it reported another; a worker that reported nothing is held to bitwise, the strict
comparison. Counts cover this coordinator's run: a resumed job counts the audits since its
resume. A task compared within the tolerance also measures how far apart the two platforms
are (`measured`): the largest deviation goes to the audit's record and the result's `bits`
(docs/contracts.md, section 6, "Kernel sets").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from aner_coord.jobdir.results import AuditedWorker, AuditRecord, BitsRecord, KernelSet
from aner_coord.jobdir.status import WorkerAccount
from aner_coord.kernelsets import bits_note, kernel_sets

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
        # Per worker compared within the tolerance: its largest deviation, and how many.
        self._largest: dict[str, float] = {}
        self._measured: Counter[str] = Counter()

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

    def measured(self, worker: str, deviation: float) -> None:
        """A task of `worker`, compared within the tolerance, deviated by `deviation`."""
        self._largest[worker] = max(self._largest.get(worker, 0.0), deviation)
        self._measured[worker] += 1

    def bits(self, workers: Sequence[WorkerAccount]) -> BitsRecord:
        """The group's kernel sets, the stated tolerance and what the audit measured."""
        machines = {w.identity: w.machine for w in workers}
        largest = [self._largest[w.identity] for w in workers if w.identity in self._largest]
        return BitsRecord(
            kernel_sets=[KernelSet(b, m) for b, m in kernel_sets(machines).items()],
            note=bits_note(machines),
            tolerance=self.tolerance,
            measured=max(largest) if largest else None,
            measured_tasks=sum(self._measured[w.identity] for w in workers),
        )

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
                    largest_difference=self._largest.get(w.identity),
                )
                for w in workers
            ],
        )
