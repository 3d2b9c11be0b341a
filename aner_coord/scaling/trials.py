"""One trial: a fresh `aner parallel` command, timed by an external monotonic clock.

The trial's job is written as a spec file (`aner parallel run --spec`, which runs any
registered computation) next to its job directory (`read_back` is how an experiment checks
every case's spec before the first trial); the command's exit status, its
`result.json` (the scientific result, the coordinator's own seconds and per-worker
accounting with measured costs and machines) and its manifest's source fingerprint are what
the trial records. Every trial's scientific result is compared with the experiment's first:
integers and strings exactly, numbers within `TOLERANCE`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.requests import JobRequest
from aner_coord.scaling.load import LoadMeter, MachineLoad

# docs/contracts.md, sections 2 and 9: theta and losses within 1e-10 between plans.
TOLERANCE = 1e-10
# result.json keys that describe how, not what: they may differ between plans, at any depth
# (a search's every fit and its refit have their own `seconds` and `worker`).
_ACCOUNTING = {
    "seconds",
    "worker",
    "execution",
    "workers",
    "schema",
    "history",
    "time_to_target_s",
    "staging",
    "load_s",
    "losses",
    "audit",  # what the audit checked (where in each window is drawn at random)
    "bits",  # the workers' kernel sets and the measured spread: where it ran, not what
    "chunk",  # the plan's (Dense: float64 plans of any chunk agree within the tolerance)
}


@dataclass(frozen=True)
class Outcome:
    started: str  # UTC, ISO 8601
    wall_s: float
    exit_code: int
    result: dict[str, Any] | None  # the whole result.json, when the job completed
    fingerprint: str | None
    stderr: str
    load: MachineLoad | None = None  # how busy the machine was meanwhile


def aner_executable() -> str:
    """The `aner` of this installation (beside the interpreter), else `python -m`."""
    beside = Path(sys.executable).with_name("aner")
    return str(beside) if beside.exists() else ""


def command(spec: Path) -> list[str]:
    exe = aner_executable()
    head = [exe] if exe else [sys.executable, "-m", "aner_coord"]
    return [*head, "parallel", "run", "--spec", str(spec), "--quiet"]


def write_spec(request: JobRequest, path: Path) -> None:
    """The request as a spec file that `aner parallel run --spec` reads: JSON (a name ending
    in `.json`), the same encoding as a job's own `request.json`."""
    path.write_bytes(msgspec.json.encode(request) + b"\n")


def read_back(request: JobRequest) -> JobRequest:
    """The request as a trial's command reads it from its spec file (RequestError if it
    would refuse the file): an experiment checks every case's spec this way before its
    first trial."""
    from aner_coord.specfile import decode_request

    return decode_request(msgspec.json.encode(request), fmt="json", source="the trial spec")


def run_trial(
    request: JobRequest,
    spec: Path,
    on_start: Callable[[subprocess.Popen[str]], None] | None = None,
) -> Outcome:
    """Run the job of `request` (whose output must not exist yet) as a whole command;
    `on_start` is given the command's process as soon as it runs."""
    assert request.output is not None
    write_spec(request, spec)
    started = datetime.now(UTC).isoformat(timespec="milliseconds")
    meter = LoadMeter()
    meter.start()
    began = time.monotonic()
    with subprocess.Popen(
        command(spec),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        if on_start is not None:
            on_start(proc)
        _, stderr = proc.communicate()
    wall = time.monotonic() - began
    load = meter.stop()
    job = Path(request.output)
    result = _read_json(job / "result.json")
    manifest = _read_json(job / "run-manifest.json")
    return Outcome(
        started=started,
        wall_s=wall,
        exit_code=proc.returncode,
        result=result,
        fingerprint=manifest.get("source_fingerprint") if manifest else None,
        stderr=stderr.strip()[-2000:],
        load=load,
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
        return data
    except (OSError, ValueError):
        return None


def scientific(result: dict[str, Any]) -> dict[str, Any]:
    """What a result says about the science, without how long or where it ran (at any
    depth: timings and placements are never part of the scientific result)."""
    return {k: _without_accounting(v) for k, v in result.items() if k not in _ACCOUNTING}


def _without_accounting(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_accounting(v) for k, v in value.items() if k not in _ACCOUNTING}
    if isinstance(value, list):
        return [_without_accounting(v) for v in value]
    return value


def disagreement(a: Any, b: Any, where: str = "") -> str | None:
    """None if `a` and `b` agree (integers exactly, floats within TOLERANCE), else where not."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where or 'result'} has fields {sorted(a)} vs {sorted(b)}"
        for key in a:
            found = disagreement(a[key], b[key], f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where} has {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = disagreement(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, float) or isinstance(b, float):
        numbers = isinstance(a, int | float) and isinstance(b, int | float)
        if numbers and abs(a - b) <= TOLERANCE:
            return None
        return f"{where} is {a!r}, the first trial's is {b!r}"
    return None if a == b else f"{where} is {a!r}, the first trial's is {b!r}"


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path
