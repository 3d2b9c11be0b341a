"""A simulation's result (docs/contracts.md, section 15): each output's mean, sample standard
deviation, standard error and 95% confidence interval over the samples, with the plugin's
identity; and how `status` shows one. Light: no numpy."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from aner_coord.jobdir.results import ResultBase

# The normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054
CONFIDENCE = 0.95


class OutputSummary(msgspec.Struct, frozen=True):
    """One output over `n` samples."""

    n: int
    mean: float
    std: float | None  # sample standard deviation (n - 1); None for one sample
    standard_error: float | None
    ci_low: float | None  # mean -+ Z95 standard errors
    ci_high: float | None


def output_summary(n: int, mean: float, m2: float) -> OutputSummary:
    """An output's summary from its count, mean and sum of squared deviations."""
    if n < 2:
        return OutputSummary(n, mean, None, None, None, None)
    std = math.sqrt(max(m2, 0.0) / (n - 1))
    se = std / math.sqrt(n)
    return OutputSummary(n, mean, std, se, mean - Z95 * se, mean + Z95 * se)


class SimulationResult(ResultBase, frozen=True, tag="simulation"):
    """The outputs of simulation `of` (contract `contract`) over `samples` samples of
    `seed`'s stream, with the parameters it ran with and its plugin's identity."""

    of: str
    contract: str
    plugin: dict[str, str]  # distribution, version, digest
    seed: int
    samples: int
    params: dict[str, float]
    outputs: dict[str, OutputSummary]
    confidence: float = CONFIDENCE

    def summary(self) -> str:
        shown = "; ".join(f"{name} {_shown(o)}" for name, o in self.outputs.items())
        return (
            f"{self.of}, {self.samples:,} samples, seed {self.seed}: {shown} | "
            f"{len(self.workers)} worker(s), {self.seconds:.3f} s"
        )


def _shown(o: OutputSummary) -> str:
    if o.standard_error is None:
        return f"{o.mean:.10g}"
    return f"{o.mean:.10g} +- {o.standard_error:.3g} (95% CI {o.ci_low:.6g} .. {o.ci_high:.6g})"


def summarize(result: dict[str, Any]) -> list[str]:
    """The lines `status` shows of a completed simulation."""
    lines = [
        f"simulation {result['of']} ({result['contract']}), {int(result['samples']):,} samples"
    ]
    for name, o in result["outputs"].items():
        lines.append(f"{name:<9} {_shown(msgspec.convert(o, OutputSummary))}")
    return lines
