"""The performance page of the documentation (`docs/performance.md`), written from a
`bench-results.json` by `make bench`: the machine, the date, the commit, the load, and each
benchmark's figures with its goal met or not. Never edited by hand, so no figure in the docs
is older than the run it names.

`python -m bench.report [RESULTS.json] [PAGE.md]`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bench.runner import DEFAULT_JSON, ROOT

PAGE = ROOT / "docs" / "performance.md"
# What the runner records beside a benchmark's own figures (shown in the benchmark's line).
RUNNER_KEYS = {"section_seconds", "cpu_noise", "loadavg_after", "goal_met", "error"}


def _verdict(goal: object) -> str:
    return {True: "met", False: "**not met**", None: "no goal"}.get(goal, str(goal))  # type: ignore[call-overload]


def _number(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _figures(prefix: str, value: object) -> Iterator[tuple[str, str]]:
    """Every scalar below `value`, by its dotted path (lists of scalars joined)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _figures(f"{prefix}.{key}" if prefix else str(key), inner)
    elif isinstance(value, list):
        if all(not isinstance(v, Mapping | list) for v in value) and len(value) <= 8:
            yield prefix, ", ".join(_number(v) for v in value)
        else:
            for i, inner in enumerate(value):
                yield from _figures(f"{prefix}[{i}]", inner)
    else:
        yield prefix, _number(value)


def render(results: Mapping[str, Any]) -> str:
    machine = results.get("machine", {})
    git = machine.get("git", {})
    dirty = " (dirty tree)" if git.get("dirty") else ""
    rows = [
        "# Measured figures",
        "",
        "Written by `make bench` (`bench/report.py`) from its `bench-results.json`; not edited",
        "by hand. Every ratio is of cases measured side by side, interleaved, in this one run;",
        "a goal not met is reported as such. What the figures mean and where the time goes:",
        "[performance](explanation/performance.md).",
        "",
        "| | |",
        "| --- | --- |",
        f"| mode | {results.get('mode', '?')} |",
        f"| date | {machine.get('date', '?')} |",
        f"| commit | `{(git.get('commit') or '?')[:12]}`{dirty} |",
        f"| CPU | {machine.get('cpu_model', '?')} |",
        f"| load average before | {_number(machine.get('loadavg_at_start'))} |",
        f"| total | {_number(results.get('total_seconds'))} s |",
        "",
    ]
    for name, figures in results.items():
        if not isinstance(figures, Mapping) or "section_seconds" not in figures:
            continue
        noise = figures.get("cpu_noise", {}).get("other_share_of_capacity")
        share = "unknown" if noise is None else f"{100 * noise:.0f}%"
        rows += [
            f"## {name}",
            "",
            f"Goal: {_verdict(figures.get('goal_met'))}. {_number(figures['section_seconds'])} s;"
            f" other processes used {share} of the CPUs meanwhile.",
            "",
        ]
        if "error" in figures:
            rows += [f"It crashed: `{figures['error']}`.", ""]
        own = {k: v for k, v in figures.items() if k not in RUNNER_KEYS}
        pairs = list(_figures("", own))
        if pairs:
            rows += ["| figure | value |", "| --- | --- |"]
            rows += [f"| `{key}` | {value} |" for key, value in pairs]
            rows.append("")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    source = Path(argv[0] if argv else DEFAULT_JSON)
    page = Path(argv[1]) if len(argv) > 1 else PAGE
    page.write_text(render(json.loads(source.read_text())), encoding="utf-8")
    print(f"  the performance page: {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
