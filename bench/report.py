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


# A benchmark's own figures, as far as a page shows them: its scalars down to DEPTH levels
# (the medians, ratios, efficiencies and verdicts); the repetitions' raw lists stay in the
# JSON file.
DEPTH = 3
MAX_ROWS = 40


def _figures(
    value: Mapping[str, Any], prefix: str = "", depth: int = 1
) -> Iterator[tuple[str, str]]:
    for key, inner in value.items():
        name = f"{prefix}{key}"
        if isinstance(inner, Mapping):
            if depth < DEPTH:
                yield from _figures(inner, f"{name}.", depth + 1)
        elif not isinstance(inner, list):
            yield name, _number(inner)


def _share(figures: Mapping[str, Any]) -> str:
    noise = figures.get("cpu_noise", {}).get("other_share_of_capacity")
    return "unknown" if noise is None else f"{100 * noise:.0f}%"


def render(results: Mapping[str, Any]) -> str:
    machine = results.get("machine", {})
    git = machine.get("git", {})
    dirty = " (dirty tree)" if git.get("dirty") else ""
    load = ", ".join(f"{x:.2f}" for x in machine.get("loadavg_at_start", []))
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
        f"| load average before | {load} |",
        f"| total | {_number(results.get('total_seconds'))} s |",
        "",
    ]
    benchmarks = {
        name: figures
        for name, figures in results.items()
        if isinstance(figures, Mapping) and "section_seconds" in figures
    }
    rows += [
        "| benchmark | goal | seconds | CPU other processes used |",
        "| --- | --- | --- | --- |",
    ]
    for name, figures in benchmarks.items():
        rows.append(
            f"| [{name}](#{name}) | {_verdict(figures.get('goal_met'))} |"
            f" {_number(figures['section_seconds'])} | {_share(figures)} |"
        )
    rows.append("")
    for name, figures in benchmarks.items():
        rows += [f"## {name}", ""]
        if "error" in figures:
            rows += [f"It crashed: `{figures['error']}`.", ""]
        pairs = list(_figures({k: v for k, v in figures.items() if k not in RUNNER_KEYS}))
        if pairs:
            rows += ["| figure | value |", "| --- | --- |"]
            # A figure's path, not code: in backticks a dotted path would read as a module.
            rows += [f"| {key.replace('.', ' / ')} | {value} |" for key, value in pairs[:MAX_ROWS]]
            if len(pairs) > MAX_ROWS:
                rows.append(f"| ... | {len(pairs) - MAX_ROWS} more in `bench-results.json` |")
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
