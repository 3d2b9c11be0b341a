"""Scientific results and their accounting, kept apart from the job's state."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aner_coord.status import StatusSnapshot


@dataclass(frozen=True)
class WorkerShare:
    """What one worker contributed: public identity, slots, accepted items and chunks."""

    identity: str
    slots: int
    items: int
    chunks: int
    items_by_pass: tuple[int, ...] = ()


def shares_of(snapshot: StatusSnapshot) -> tuple[WorkerShare, ...]:
    return tuple(
        WorkerShare(w.identity, w.slots, w.items, w.chunks, tuple(w.items_by_pass))
        for w in snapshot.workers
    )


@dataclass(frozen=True)
class MonteCarloResult:
    """The estimate of pi and exactly how it was obtained."""

    stream: str
    seed: int
    samples_: int
    hits_: int
    seconds_: float
    shares: tuple[WorkerShare, ...]
    execution: dict[str, Any]

    def estimate(self) -> float:
        return 4 * self.hits_ / self.samples_

    def samples(self) -> int:
        return self.samples_

    def hits(self) -> int:
        return self.hits_

    def workers(self) -> int:
        return len(self.shares)

    def seconds(self) -> float:
        return self.seconds_

    def throughput(self) -> float:
        return self.samples_ / self.seconds_ if self.seconds_ > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"{self.samples_:,} samples, seed {self.seed}: {self.hits_:,} hits, "
            f"pi ~ {self.estimate():.10f} | {self.workers()} worker(s), "
            f"{self.seconds_:.3f} s, {self.throughput() / 1e6:,.1f} M samples/s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "computation": "monte-carlo",
            "stream": self.stream,
            "seed": self.seed,
            "samples": self.samples_,
            "hits": self.hits_,
            "estimate": self.estimate(),
            "seconds": self.seconds_,
            "execution": self.execution,
            "workers": [
                {"identity": s.identity, "slots": s.slots, "samples": s.items, "chunks": s.chunks}
                for s in self.shares
            ],
        }


@dataclass(frozen=True)
class FixtureResult:
    """The fitted fixture of SPEC section 2: metrics before and after, and the parameters."""

    fixture: str
    seed: int
    samples: int
    steps: int
    rate: float
    initial_loss: float
    initial_accuracy: float
    final_loss: float
    fit_accuracy: float
    theta: tuple[float, ...]
    seconds: float
    shares: tuple[WorkerShare, ...]
    execution: dict[str, Any]

    def summary(self) -> str:
        return (
            f"{self.samples:,} rows x {self.steps} steps at rate {self.rate}: loss "
            f"{self.initial_loss:.6f} -> {self.final_loss:.6f}, fit accuracy "
            f"{self.fit_accuracy:.6f} (on the fitted rows) | {len(self.shares)} worker(s), "
            f"{self.seconds:.3f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["computation"] = "regression"
        out["theta"] = list(self.theta)
        out["workers"] = [
            {
                "identity": s.identity,
                "slots": s.slots,
                "rows": s.items,
                "chunks": s.chunks,
                "rows_by_phase": list(s.items_by_pass),
            }
            for s in self.shares
        ]
        del out["shares"]
        return out
