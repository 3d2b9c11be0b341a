"""Scientific results and their accounting, kept apart from the job's state.

Each result is a frozen msgspec Struct, tagged with its computation; `result.json` is its
JSON encoding (schema `aner-result/2`). Results are read by attribute (`result.hits`,
`result.theta`), and their accounting names workers by public identity only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.status import WorkerAccount, WorkerLoss

RESULT_SCHEMA = "aner-result/2"


class _Result(msgspec.Struct, frozen=True, kw_only=True, tag_field="computation"):
    seconds: float
    execution: dict[str, Any]
    workers: list[WorkerAccount]
    schema: str = RESULT_SCHEMA
    losses: list[WorkerLoss] = []  # workers lost and survived (retries)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data


class MonteCarloResult(_Result, frozen=True, tag="monte-carlo"):
    """The estimate of pi and exactly how it was obtained."""

    stream: str
    seed: int
    samples: int
    hits: int
    estimate: float

    @property
    def throughput(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"{self.samples:,} samples, seed {self.seed}: {self.hits:,} hits, "
            f"pi ~ {self.estimate:.10f} | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s, {self.throughput / 1e6:,.1f} M samples/s"
        )


class RegressionResult(_Result, frozen=True, tag="regression"):
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
    theta: list[float]
    committed_steps: int

    def summary(self) -> str:
        return (
            f"{self.samples:,} rows x {self.steps} steps at rate {self.rate}: loss "
            f"{self.initial_loss:.6f} -> {self.final_loss:.6f}, fit accuracy "
            f"{self.fit_accuracy:.6f} (on the fitted rows) | {len(self.workers)} worker(s), "
            f"{self.seconds:.3f} s"
        )


JobResult = MonteCarloResult | RegressionResult


def encode_result(result: Any) -> bytes:
    return msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n"
