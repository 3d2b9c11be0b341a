"""The one place that calls aner: its public Python API and its command line.

Benchmarks use `parallel.local` and `parallel.cluster` directly, but read results only
through `monte_carlo`, `session_monte_carlo` and `regression` here, build command lines
with `run_argv` and worker groups with `write_cluster` and `loopback_ssh`: when a public
shape changes, this module changes and the benchmarks do not.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord import parallel
from bench.runner import ROOT

# The console script next to this interpreter (a venv's bin/ is not resolved through links).
ANER = str(Path(sys.executable).parent / "aner")

# The tests' loopback sshd (generated host and user keys, an ssh_config alias, known_hosts).
SSHD_SUPPORT = ROOT / "tests" / "sshd_support.py"


@dataclass(frozen=True)
class Count:
    """A Monte Carlo run: its hits and `seconds`, the coordinator's own elapsed time."""

    hits: int
    seconds: float


def monte_carlo(samples: int, seed: int, execution: Any) -> Count:
    result = parallel.monte_carlo(samples=samples, seed=seed, execution=execution)
    return Count(result.hits, result.seconds)


@contextlib.contextmanager
def session(execution: Any) -> Iterator[Any]:
    """A `parallel.session` on `execution`, closed afterwards; call `session_monte_carlo`."""
    with parallel.session(execution) as s:
        yield s


def session_monte_carlo(s: Any, samples: int, seed: int) -> Count:
    result = s.monte_carlo(samples=samples, seed=seed)
    return Count(result.hits, result.seconds)


@dataclass(frozen=True)
class CountOnWorkers(Count):
    """A Monte Carlo run on a worker group, with each worker's measured round trip and
    in-flight window (None where the result does not report them)."""

    rtts: tuple[float | None, ...] = ()
    windows: tuple[int | None, ...] = ()


def monte_carlo_workers(samples: int, seed: int, execution: Any) -> CountOnWorkers:
    result = parallel.monte_carlo(samples=samples, seed=seed, execution=execution)
    return CountOnWorkers(
        result.hits,
        result.seconds,
        tuple(getattr(w, "rtt_s", None) for w in result.workers),
        tuple(getattr(w, "window", None) for w in result.workers),
    )


@dataclass(frozen=True)
class Fit:
    """A regression fixture run; `job_seconds` is None where no coordinator ran it."""

    theta: tuple[float, ...]
    initial_loss: float
    initial_accuracy: float
    final_loss: float
    fit_accuracy: float
    job_seconds: float | None = None


def regression(rows: int, steps: int, rate: float, seed: int, execution: Any) -> Fit:
    r = parallel.regression(samples=rows, steps=steps, rate=rate, seed=seed, execution=execution)
    return Fit(
        tuple(r.theta), r.initial_loss, r.initial_accuracy, r.final_loss, r.fit_accuracy, r.seconds
    )


def run_argv(
    samples: int,
    seed: int,
    output: Path,
    *,
    chunk: int | None = None,
    workers: int | None = None,
    cluster: Path | None = None,
    replicates: int | None = None,
) -> list[str]:
    """`aner parallel run` in the foreground, quiet, on local threads (or a cluster file)."""
    argv = [ANER, "parallel", "run", "--samples", str(samples), "--seed", str(seed)]
    if replicates is not None:
        argv += ["--replicates", str(replicates)]
    if chunk is not None:
        argv += ["--chunk", str(chunk)]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if cluster is not None:
        argv += ["--cluster", str(cluster)]
    return [*argv, "--output", str(output), "--quiet"]


def hits_of(job: Path) -> int | None:
    """The hits in a completed job directory's result, or None."""
    try:
        return int(json.loads((job / "result.json").read_bytes())["hits"])
    except (OSError, ValueError, KeyError):
        return None


def write_cluster(path: Path, records: list[tuple[str, str, str, int]]) -> Path:
    """A cluster file of (identity, transport, endpoint, slots) records running `aner`."""
    lines = ["ANER_CLUSTER 1", "# written by python -m bench"]
    for identity, transport, endpoint, slots in records:
        lines.append(f'worker "{identity}" {transport} "{endpoint}" "{ANER}" {slots}')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class SshPeer:
    """A loopback sshd: the alias to put in a cluster file, the environment to reach it in."""

    alias: str
    env: dict[str, str | None]


@contextlib.contextmanager
def loopback_ssh(directory: Path) -> Iterator[SshPeer]:
    """Start the tests' sshd on 127.0.0.1 under `directory` and stop it afterwards; raises
    if it cannot start (sshd missing: `.ci/ensure-sshd`)."""
    sys.path.insert(0, str(SSHD_SUPPORT.parent))
    try:
        from sshd_support import start_sshd  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SSHD_SUPPORT.parent))
    server = start_sshd(directory)
    try:
        # asyncssh finds ~/.ssh through $HOME; no agent, only the generated user key.
        yield SshPeer(server.alias, {"HOME": str(server.home), "SSH_AUTH_SOCK": None})
    finally:
        server.stop()


@contextlib.contextmanager
def environment(changes: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the duration of a call."""
    saved = {key: os.environ.get(key) for key in changes}

    def apply(values: dict[str, str | None]) -> None:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    try:
        apply(changes)
        yield
    finally:
        apply(saved)
