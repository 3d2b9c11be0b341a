"""Replicates: independent repetitions of one computation, and their aggregation rule
(docs/contracts.md, section 16).

Replicate `k` (0-based) of a request with seed `s` computes with the seed `replicate_seed(s, k)`:
word 0 of block `k` of the Philox4x64-10 stream keyed `(s, REPLICATE_STREAM)` (section 1's
generator). Never `s + k`: a user who runs seeds 1, 2, 3 by hand and replicates of seed 1 gets
streams that do not overlap by accident. The seeds are a function of `(s, k)` alone, so a
replicate's result never depends on which worker, task or resume computed it.

The aggregate over replicates is computed here, once for every computation: for each numeric
field, `n`, the mean, the sample standard deviation (`n - 1`; null for one replicate), the
standard error `std / sqrt(n)` and the spread (least and greatest), summed with `math.fsum` in
replicate order, so the same replicate values always give the same bits. `replicates.csv` has
one row per replicate, and `replicates.png` (with the `charts` extra) shows each headline
field's replicates around their mean.

One result type serves every computation's replicates (`ReplicatesResult`, `result.json`'s
`computation = "replicates"`, `of` naming the computation), and one summary shows it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from aner_coord.computations.base import Accounting, readable
from aner_coord.computations.display import fields_table, records_table, repr_lines
from aner_coord.errors import RequestError
from aner_coord.jobdir.results import ResultBase

# The Philox stream of replicate seeds: far from every stream a computation reads (0 to 9,
# 16 + layer, 2**32 + epoch).
REPLICATE_STREAM = 2**40
MAX_REPLICATES = 10_000
# A replicate of at most this many samples is one task when the execution names no chunk.
WHOLE_REPLICATE = 1 << 26

_MASK = 2**64 - 1
_M0, _M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
_W0, _W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B


def check_replicates(value: object) -> int:
    """`replicates` is an integer in [1, MAX_REPLICATES] (one validator for every path)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{{replicates}} must be an integer, got {value!r}", "replicates")
    if not 1 <= value <= MAX_REPLICATES:
        raise RequestError(
            f"{{replicates}} must be between 1 and {MAX_REPLICATES:,}, got {value:,}",
            "replicates",
        )
    return value


def _block(b: int, k0: int, k1: int) -> tuple[int, int, int, int]:
    """Philox4x64-10 of counter (b, 0, 0, 0) under key (k0, k1), in Python integers (the
    coordinator derives a few seeds and need not load numba for it)."""
    c0, c1, c2, c3 = b, 0, 0, 0
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & _MASK, (p0 >> 64) ^ c3 ^ k1, p0 & _MASK
    return c0, c1, c2, c3


def replicate_seed(seed: int, index: int) -> int:
    """The seed of replicate `index` of `seed` (see the module docstring)."""
    return _block(index, seed, REPLICATE_STREAM)[0]


def replicate_seeds(seed: int, n: int) -> tuple[int, ...]:
    return tuple(replicate_seed(seed, k) for k in range(n))


class FieldSummary(msgspec.Struct, frozen=True):
    """One numeric field over the replicates."""

    n: int
    mean: float
    std: float | None  # sample standard deviation (n - 1); None for one replicate
    standard_error: float | None
    min: float | None = None  # the spread: least and greatest (None in an older result)
    max: float | None = None


def summarize_field(values: Sequence[float]) -> FieldSummary:
    n = len(values)
    mean = math.fsum(values) / n
    low, high = min(values), max(values)
    if n < 2:
        return FieldSummary(n, mean, None, None, low, high)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return FieldSummary(n, mean, std, std / math.sqrt(n), low, high)


def aggregate(
    rows: Sequence[Mapping[str, Any]], skip: Sequence[str] = ()
) -> dict[str, FieldSummary]:
    """Each numeric field of `rows` (bools and `skip` excluded) over the replicates."""
    names = [
        name
        for name, value in rows[0].items()
        if name not in skip and isinstance(value, int | float) and not isinstance(value, bool)
    ]
    return {name: summarize_field([float(row[name]) for row in rows]) for name in names}


def replicates_csv(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """One row per replicate, the columns of the first."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return out.getvalue().encode()


# The band drawn about a replicates mean: its normal 95% confidence interval.
Z_95 = 1.959963984540054


def replicates_figure(
    rows: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    title: str,
    references: Mapping[str, tuple[str, float]] | None = None,
) -> Any:
    """The figure of `replicates_png` (matplotlib's `Figure`), for a test to read its titles
    and labels; ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    # A journal column (3.5 in) at twice its width: labels stay readable printed at half.
    figure = Figure(figsize=(7, 2.6 * len(fields)), layout="constrained")
    axes = figure.subplots(len(fields), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], fields, strict=True):
        values = [float(row[name]) for row in rows]
        summary = summarize_field(values)
        ax.plot(range(len(values)), values, "o", markersize=3, label=f"{name} of a replicate")
        ax.axhline(summary.mean, color="black", linewidth=1, label=f"mean {summary.mean:.6g}")
        if summary.standard_error is not None:
            half = Z_95 * summary.standard_error
            ax.axhspan(summary.mean - half, summary.mean + half, color="grey", alpha=0.3,
                       label="95% confidence interval of the mean")  # fmt: skip
        if references is not None and name in references:
            what, value = references[name]
            ax.axhline(value, color="tab:red", linestyle="--", linewidth=1,
                       label=f"{what} = {value:.6g}")  # fmt: skip
        ax.set_ylabel(f"{name} (per replicate)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # replicates are counted
        ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel("replicate (index, from 0)")
    figure.suptitle(title, fontsize="medium")
    return figure


def replicates_png(
    rows: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    title: str,
    references: Mapping[str, tuple[str, float]] | None = None,
) -> bytes | None:
    """Each of `fields` per replicate, with its mean and the mean's 95% confidence interval,
    and a reference value where one exists (`references`: field to its name and value, as
    pi for Monte Carlo's estimate); None without matplotlib (the `charts` extra), whose
    absence costs only the picture."""
    try:
        figure = replicates_figure(rows, fields, title, references)
    except ImportError:
        return None
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100, metadata={"Software": None})
    return out.getvalue()


class ReplicatesResult(ResultBase, frozen=True, tag="replicates"):
    """Replicates of one computation (`of`, under its contract identity): each replicate's
    seed and result fields (`per_replicate`, as `replicates.csv` has them), each numeric
    field's aggregate, and what the computation adds (`pooled`: Monte Carlo's estimate over
    all samples). `options` are the request's as the manifest describes them; `headline`
    names the fields a summary shows."""

    of: str  # the computation: "monte-carlo", "regression", "dense"
    contract: str  # its identity (docs/contracts.md, sections 1, 2, 9)
    seed: int
    replicates: int
    options: dict[str, Any]
    per_replicate: list[dict[str, Any]]  # replicate, seed, the result's fields
    aggregate: dict[str, FieldSummary]
    headline: list[str]
    pooled: dict[str, float] | None = None

    def summary(self) -> str:
        shown = ", ".join(f"{name} {_spread(self.aggregate[name])}" for name in self.headline)
        pooled = ""
        if self.pooled is not None:
            pooled = (
                f"; pooled {self.pooled['estimate']:.10f} +- {self.pooled['standard_error']:.2e}"
            )
        return (
            f"{self.replicates} replicates of {self.of}, seed {self.seed}: {shown} (mean +- "
            f"standard error){pooled} | {len(self.workers)} worker(s), {self.seconds:.3f} s"
        )

    def __repr__(self) -> str:
        head = (
            f"ReplicatesResult({self.replicates} of {self.of}, {self.contract}, seed {self.seed})"
        )
        tail = ("per_replicate: one record per replicate; aggregate: each field's mean and spread",)
        return repr_lines(head, self.summary(), tail)

    def _repr_html_(self) -> str:
        header = [*self.aggregate]
        rows = [[row.get(name, "") for name in ("replicate", "seed", *header)]
                for row in self.per_replicate]  # fmt: skip
        fields: list[tuple[str, object]] = [
            ("replicates", f"{self.replicates} of {self.of} ({self.contract}), seed {self.seed}"),
            *((name, _spread(self.aggregate[name])) for name in self.headline),
            ("summary", self.summary()),
        ]
        table = records_table(["replicate", "seed", *header], rows, "per_replicate")
        return fields_table("Replicates", fields) + table


def _spread(summary: FieldSummary) -> str:
    return f"{readable(summary.mean)} +- {summary.standard_error or 0.0:.2e}"


def replicates_result(
    of: str,
    contract: str,
    seed: int,
    options: dict[str, Any],
    rows: Sequence[Mapping[str, Any]],
    headline: Sequence[str],
    accounting: Accounting,
    pooled: dict[str, float] | None = None,
) -> ReplicatesResult:
    """The result of a replicates run whose replicate `k` gave `rows[k]` (its `replicate`
    and `seed` first, then its fields)."""
    return ReplicatesResult(
        of=of,
        contract=contract,
        seed=seed,
        replicates=len(rows),
        options=options,
        per_replicate=[dict(row) for row in rows],
        aggregate=aggregate(rows, skip=("replicate", "seed")),
        headline=list(headline),
        pooled=pooled,
        seconds=accounting.seconds,
        execution=accounting.execution,
        workers=list(accounting.workers),
        losses=list(accounting.losses),
    )


def replicates_files(
    rows: Sequence[Mapping[str, Any]],
    headline: Sequence[str],
    title: str,
    references: Mapping[str, tuple[str, float]] | None = None,
) -> dict[str, bytes]:
    """`replicates.csv`, and `replicates.png` where matplotlib is installed."""
    out = {"replicates.csv": replicates_csv(rows)}
    png = replicates_png(rows, headline, title, references)
    if png is not None:
        out["replicates.png"] = png
    return out


def summarize(result: dict[str, Any]) -> list[str]:
    """The lines `status` shows of a completed replicates job, from its `result.json`."""
    n = result["replicates"]
    lines = []
    for name in result["headline"]:
        s = result["aggregate"][name]
        lines.append(
            f"{name:<9} {readable(float(s['mean']))} +- {s['standard_error'] or 0.0:.2e} "
            f"(mean of {n} replicates +- standard error; from {readable(float(s['min']))} to "
            f"{readable(float(s['max']))})"
        )
    pooled = result.get("pooled")
    if pooled is not None:
        lines.append(
            f"pooled    {pooled['estimate']:.10f} +- {pooled['standard_error']:.2e} "
            f"({int(pooled['hits']):,} hits of {int(pooled['samples']):,} samples)"
        )
    return lines
