"""What `status` shows of a model search, from `result.json` (a completed search) and from
`status.json`'s detail (a running one): kept apart from the computation, which imports
numpy and the kernels, so that a monitor never does."""

from __future__ import annotations

from typing import Any


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def options(values: dict[str, Any]) -> str:
    """A candidate's grid values as `hidden 64,64, lr 0.003` (empty for none)."""
    return ", ".join(f"{k} {_value(v)}" for k, v in values.items())


def _number(value: Any, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _plus_minus(mean: Any, std: Any) -> str:
    return _number(mean) + ("" if std is None else f" ± {_number(std)}")


def fits_text(fits: int, refit: bool) -> str:
    """The fits a search ran, counted as its progress counts them (a refit is one more fit):
    `7 fits (6 cross-validation, 1 refit)`."""
    if not refit:
        return f"{fits} fits"
    return f"{fits + 1} fits ({fits} cross-validation, 1 refit)"


def summarize(result: dict[str, Any]) -> list[str]:
    candidates = result["candidates"]
    folds = result["folds"]
    how = f"{folds} folds" if folds >= 2 else "train's own validation split"
    grouped = ", grouped" if result.get("grouped") else ""
    seeds = f" x {len(result['seeds'])} seeds" if result.get("seeds") else ""
    lines = [f"search    {len(candidates)} candidate(s) x {how}{grouped}{seeds}: "
             f"{fits_text(len(result['fits']), result.get('refit') is not None)}"]  # fmt: skip
    selected = result.get("selected")
    if selected is None:
        lines.append("selected  none: every candidate has a fit that diverged")
    else:
        best = candidates[selected]
        shown = options(best["options"])
        lines.append(
            f"selected  candidate {selected}{f' ({shown})' if shown else ''}: validation loss "
            f"{_plus_minus(best['validation_loss_mean'], best['validation_loss_std'])}, "
            f"accuracy "
            f"{_plus_minus(best['validation_accuracy_mean'], best['validation_accuracy_std'])} "
            f"over {best['n']} fit(s)"
        )
    refit = result.get("refit")
    if refit is not None and refit.get("test_accuracy") is None:
        lines.append(f"test      none: no test rows (refit of {refit['epochs']} epoch(s))")
    elif refit is not None:
        lines.append(
            f"test      accuracy {refit['test_accuracy']:.4f}, loss {refit['test_loss']:.4f} "
            f"(refit of {refit['epochs']} epoch(s) on the pool)"
        )
    lines.extend(f"note      {note}" for note in result.get("notes") or [])
    return lines


def progress(detail: dict[str, Any], slots: dict[str, int]) -> list[str]:
    """Lines of a running search: fits done, what each worker holds (the first `slots` of
    them running, the rest queued), and the best candidate so far."""
    total = detail["fits"] + (1 if detail.get("refit") else 0)
    done = detail["done"] + (1 if detail.get("refit_done") else 0)
    lines = [f"fits      {done} of {total} done ({detail['phase']})"]
    for worker, held in detail.get("running", {}).items():
        if not held:
            continue
        n = slots.get(worker, 1)
        text = ", ".join(held[:n])
        if held[n:]:
            text += f"; queued {', '.join(held[n:])}"
        lines.append(f"running   {worker}: {text}")
    best = detail.get("best")
    if best is not None:
        shown = options(best["options"])
        lines.append(
            f"best      candidate {best['candidate']}{f' ({shown})' if shown else ''}: "
            f"validation loss {_number(best['validation_loss'])}, accuracy "
            f"{_number(best['validation_accuracy'])} over {best['folds_done']} of "
            f"{best['folds']} fold(s)"
        )
    return lines
