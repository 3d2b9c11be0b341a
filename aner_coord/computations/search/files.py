"""The files a search leaves in its job directory (besides `result.json`):

- `fits.csv`: one row per fit: candidate, its grid values, fold, training seed, epochs run,
  best epoch
  (from 1, as every file counts epochs), validation loss and accuracy at it, seconds,
  worker, and why it diverged;
- `candidates.csv`: one row per candidate: its grid values, n, mean, sample standard
  deviation and standard error of the validation loss and accuracy (over its folds and
  seeds), mean best epoch, and which is selected;
- `histories.csv`: every epoch of every fit (the refit's as fold `refit`), with its seed:
  training loss,
  validation loss and accuracy;
- `model.npz`: the refit model, as `aner parallel train` writes it (so `aner parallel
  predict` takes it), its `meta` naming the candidate and its options;
- `candidates.png` (with the `charts` extra, matplotlib): validation accuracy per candidate,
  every fold's point and the mean.

Numbers are written as Python's `repr` of a binary64 (the shortest text that reads back to
the same bits), so two runs can be compared byte for byte; an undefined one is empty. A
search that did not complete leaves only `fits.csv`, of the fits accepted so far: diagnostic,
never a result.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from aner_coord.computations.dense.model import DenseModel, encode_model
from aner_coord.computations.search.result import (
    FitRecord,
    SearchResult,
    candidate_rows,
    fit_rows,
    format_value,
)
from aner_worker.kernels.search.params import REFIT, FitResult

_LABEL_KEYS = ("hidden", "lr", "batch", "epochs", "optimizer")

log = logging.getLogger("aner.coordinator")


def cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return format_value(value)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = columns if columns is not None else list(rows[0]) if rows else []
    writer.writerow(names)
    for row in rows:
        writer.writerow([cell(row.get(name)) for name in names])
    return out.getvalue().encode("utf-8")


def completed_files(
    result: SearchResult,
    fits: Sequence[FitResult],
    refit: FitResult | None,
    model: DenseModel | None,
    label: str | None,
    seed_of: Callable[[FitResult], int],
    group: str | None = None,
) -> dict[str, bytes]:
    """The files of a completed search; `fits` are every fit of the folds, `seed_of` gives
    a fit's training seed."""
    files = {
        "fits.csv": table(fit_rows(result)),
        "candidates.csv": table(candidate_rows(result)),
        "histories.csv": _histories([*fits, *([refit] if refit is not None else [])], seed_of),
    }
    if model is not None and result.selected is not None and result.refit is not None:
        meta = {
            "data": result.data,
            "seed": result.seed,
            "label": label,  # `predict` drops this column from a CSV that has it
            "group": group,  # not a feature either
            "epoch": result.refit.epochs,  # from 1, as every file counts epochs
            "complete": True,
            "search": {
                "candidate": result.selected,
                "options": result.candidates[result.selected].options,
                "folds": result.folds,
            },
        }
        files["model.npz"] = encode_model(model, meta)
    chart = _chart(result)
    if chart is not None:
        files["candidates.png"] = chart
    return files


def partial_files(
    grid: Sequence[str],
    candidates: Sequence[dict[str, Any]],
    fits: Sequence[FitResult],
    seed_of: Callable[[FitResult], int],
) -> dict[str, bytes]:
    """`fits.csv` of the fits accepted so far, for a search that did not complete."""
    columns = ["candidate", *grid, "fold", "seed", "epochs", "best_epoch", "validation_loss",
               "validation_accuracy", "seconds", "worker", "diverged"]  # fmt: skip
    rows = []
    for f in fits:
        record = FitRecord(
            f.candidate, f.fold, f.epochs, f.best_epoch, f.validation_loss,
            f.validation_accuracy, f.seconds, f.worker, f.diverged or None, seed_of(f),
        )  # fmt: skip
        rows.append({**candidates[f.candidate], **_as_dict(record)})
    return {"fits.csv": table(rows, columns)}


def _as_dict(record: FitRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


def _histories(fits: Sequence[FitResult], seed_of: Callable[[FitResult], int]) -> bytes:
    rows: list[dict[str, Any]] = []
    for f in fits:
        for index, train_loss in enumerate(f.train_loss):
            has_validation = index < len(f.validation_losses)
            rows.append(
                {
                    "candidate": f.candidate,
                    "fold": "refit" if f.fold == REFIT else f.fold,
                    "seed": seed_of(f),
                    "epoch": index + 1,  # from 1, as every file counts epochs
                    "train_loss": train_loss,
                    "validation_loss": f.validation_losses[index] if has_validation else None,
                    "validation_accuracy": (
                        f.validation_accuracies[index] if has_validation else None
                    ),
                }
            )
    columns = ["candidate", "fold", "seed", "epoch", "train_loss", "validation_loss",
               "validation_accuracy"]  # fmt: skip
    return table(rows, columns)


_warming: list[threading.Thread] = []


def warm_charts() -> None:
    """Import matplotlib on a thread of its own, once: a search calls this when its folds
    are in, so that the import (about half a second) overlaps the refit, which leaves the
    other slots idle, instead of adding to the end of the command."""
    if _warming or "matplotlib.pyplot" in sys.modules:
        return

    def load() -> None:
        with contextlib.suppress(ImportError):
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot

    thread = threading.Thread(target=load, name="aner-charts", daemon=True)
    _warming.append(thread)
    thread.start()


def candidate_label(result: SearchResult, options: dict[str, Any]) -> str:
    """A candidate named by its options, one `key value` a line: its grid values, or for a
    cross-validation (no grid) its model and optimizer's."""
    shown = options or {k: v for k, v in result.options.items() if k in _LABEL_KEYS}
    return "\n".join(f"{k} {format_value(v)}" for k, v in shown.items())


def _chart(result: SearchResult) -> bytes | None:
    """`candidates.png`, or None without matplotlib (the optional `charts` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("no chart of the candidates: matplotlib is not installed (the charts extra)")
        return None
    figure = chart_figure(result)
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)
    return out.getvalue()


def chart_figure(result: SearchResult) -> Any:
    """The matplotlib figure of `candidates.png` (matplotlib imported, the Agg backend)."""
    import matplotlib.pyplot as plt

    labels = [candidate_label(result, c.options) for c in result.candidates]
    lines = max(label.count("\n") + 1 for label in labels)
    width = max(5.0, 1.1 * len(result.candidates) + 2)
    figure, ax = plt.subplots(figsize=(min(width, 24.0), 4 + 0.15 * lines))
    for f in result.fits:
        if f.validation_accuracy is not None:
            ax.plot(f.candidate, f.validation_accuracy, "o", color="0.6", markersize=4)
    means = [(c.candidate, c.validation_accuracy_mean) for c in result.candidates]
    shown = [(c, m) for c, m in means if m is not None]
    ax.plot([c for c, _ in shown], [m for _, m in shown], "_", color="C0", markersize=18,
            markeredgewidth=2,
            label="mean over folds and seeds" if result.seeds else "mean over folds")  # fmt: skip
    if result.selected is not None and len(result.candidates) > 1:  # one needs no marking
        ax.axvspan(result.selected - 0.4, result.selected + 0.4, color="C1", alpha=0.15,
                   zorder=0, label="selected (lowest mean loss)")  # fmt: skip
    # Half a candidate's room either side, so that a span (of one candidate, say) never
    # fills the plot.
    ax.set_xlim(-0.9, len(result.candidates) - 0.1)
    ax.set_xticks([c.candidate for c in result.candidates])
    many = len(result.candidates) > 8
    ax.set_xticklabels(labels, rotation=30 if many else 0, ha="right" if many else "center",
                       fontsize="small")  # fmt: skip
    ax.set_xlabel("candidate (its options)")
    ax.set_ylabel("validation accuracy (best epoch)")
    folds = f"{result.folds} folds" if result.folds >= 2 else "train's own validation split"
    what = "per candidate" if len(result.candidates) > 1 else "of one candidate"
    ax.set_title(f"validation accuracy {what}, {folds}:\nevery fit and the mean", fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    return figure
