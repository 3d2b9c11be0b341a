"""What `status` shows of a completed Dense training job, from its `result.json`: kept apart
from `dense`, which imports numpy and the kernels, so that a monitor never does. Epochs are
counted from 1, as `result.json` counts them since schema `aner-result/3` (schema 2 indexed
them from 0, and still reads)."""

from __future__ import annotations

from typing import Any


def summarize(result: dict[str, Any]) -> list[str]:
    history = result["history"]
    best = result["best_epoch"] + (1 if result.get("schema") == "aner-result/2" else 0)
    lines = [
        f"epochs    {len(history)} run, the best was epoch {best} (validation accuracy "
        f"{history[best - 1]['validation_accuracy']:.4f})",
        "test      none (no test rows)"
        if result.get("test_accuracy") is None
        else f"test      accuracy {result['test_accuracy']:.4f}, loss {result['test_loss']:.4f}",
    ]
    if result.get("time_to_target_s") is not None:
        lines.append(f"target    reached after {result['time_to_target_s']:.3f} s")
    recovered = result.get("steps_recovered") or 0
    if recovered:
        lines.append(
            f"steps     {result['committed_steps']:,} committed, {recovered:,} of them "
            "recovered from a checkpoint"
        )
    lines.extend(f"note      {note}" for note in result.get("notes") or [])
    for record in result.get("staging") or []:
        lines.append(
            f"staging   {record['identity']}: {record['state']}, {record['bytes']:,} bytes "
            f"in {record['seconds']:.3f} s"
        )
    return lines
