"""What each command imports (issue 13, start-up): modules a command does not need are never
loaded. Read from `sys.modules` of real `aner` processes as they exit, so an import anywhere
(at module level, inside a function, in another thread) counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ANER, write_cluster

from aner_worker.contract import source_fingerprint
from protocol import PROTOCOL_VERSION, FrameDecoder, FrameEncoder, Hello, Shutdown, Welcome

# Never needed by a monitor, nor by the coordinator of a group of pipe workers.
HEAVY = {"numba", "llvmlite", "numpy", "scipy", "asyncssh", "watchfiles"}

# `python -m aner_coord ARGS`, which at exit writes the names of every module it holds to
# the file named by the first argument.
DRIVER = """
import atexit, runpy, sys

out = sys.argv.pop(1)

def dump():
    names = sorted(n for n, m in list(sys.modules.items()) if m is not None)
    with open(out, "w") as f:
        f.write("\\n".join(names))

atexit.register(dump)
sys.argv[0] = "aner"
runpy.run_module("aner_coord", run_name="__main__", alter_sys=True)
"""


def command(out: Path, *argv: str) -> list[str]:
    return [sys.executable, "-c", DRIVER, str(out), *argv]


def modules(out: Path) -> set[str]:
    return set(out.read_text().split("\n"))


def roots(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def aner(tmp: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp / f"modules-{os.urandom(4).hex()}"
    proc = subprocess.run(
        command(out, *argv), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    return proc, modules(out)


@pytest.fixture(scope="module")
def local_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    tmp = tmp_path_factory.mktemp("imports")
    job = tmp / "job"
    proc, names = aner(tmp, "parallel", "run", "--samples", "1000", "--seed", "1", "--workers", "1",
                       "--output", str(job))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return job, names


def test_the_reader_sees_what_a_local_run_imports(local_job: tuple[Path, set[str]]) -> None:
    # The control: a local run computes in this process, so numba is there, and the check
    # below would see it anywhere else.
    _job, names = local_job
    assert {"numba", "aner_worker.kernels.philox", "aner_coord.job.coordinator"} <= names
    # ...but a Monte Carlo run needs neither the Dense computation nor a file watcher.
    assert "aner_coord.computations.dense.computation" not in names
    assert "aner_worker.kernels.dense.streams" not in names
    assert roots(names).isdisjoint({"watchfiles", "asyncssh", "scipy", "cffi"})


def test_status_imports_nothing_heavy(local_job: tuple[Path, set[str]], tmp_path: Path) -> None:
    job, _ = local_job
    proc, names = aner(tmp_path, "parallel", "status", "--job", str(job))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "hits      799 of 1,000 samples" in proc.stdout  # the result, summarised
    assert "aner_coord.cli.monitor" in names
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY


def test_status_of_a_search_imports_nothing_heavy(tmp_path: Path) -> None:
    # A completed search's result, and the account of a running one (here one whose
    # coordinator is gone, which status still shows) come from light modules only.
    job = tmp_path / "job"
    proc, _ = aner(tmp_path, "parallel", "cv", "--teacher", "300,4,2", "--seed", "1",
                   "--folds", "2", "--hidden", "4", "--epochs", "1", "--workers", "1",
                   "--output", str(job))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc, names = aner(tmp_path, "parallel", "status", "--job", str(job))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "selected  candidate 0" in proc.stdout
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY
    status = json.loads((job / "status.json").read_text())
    status["state"] = "RUNNING"  # as a coordinator killed mid-search leaves it
    (job / "status.json").write_text(json.dumps(status))
    proc, names = aner(tmp_path, "parallel", "status", "--job", str(job))
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert "fits      3 of 3 done" in proc.stdout
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY


def test_cancel_of_an_ended_job_imports_nothing_heavy(
    local_job: tuple[Path, set[str]], tmp_path: Path
) -> None:
    job, _ = local_job
    proc, names = aner(tmp_path, "parallel", "cancel", "--job", str(job))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already ended" in proc.stdout
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY


def test_inventory_imports_nothing_heavy(tmp_path: Path) -> None:
    proc, names = aner(tmp_path, "parallel", "inventory", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "aner_worker.inventory" in names
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY


@pytest.mark.parametrize(
    "job",
    [
        ["run", "--samples", "300000", "--seed", "7"],
        ["regression", "--samples", "100000", "--steps", "2", "--rate", "0.5", "--seed", "3"],
    ],
    ids=["monte-carlo", "regression"],
)
def test_a_pipe_group_coordinator_never_imports_numba(tmp_path: Path, job: list[str]) -> None:
    cluster = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    proc, names = aner(tmp_path, "parallel", *job, "--cluster", str(cluster),
                       "--output", str(tmp_path / "job"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "aner_coord.job.processes" in names and "aner_coord.transports" in names
    assert roots(names).isdisjoint(HEAVY), roots(names) & HEAVY
    assert "aner_worker.kernels.philox" not in names
    assert "aner_coord.transports.ssh" not in names and "aner_coord.transports.slurm" not in names


def test_a_worker_loads_only_the_kernel_its_hello_names(tmp_path: Path) -> None:
    out = tmp_path / "modules"
    proc = subprocess.Popen(
        command(out, "parallel", "worker", "--stdio"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    encoder, decoder = FrameEncoder("test"), FrameDecoder("worker")
    hello = Hello(PROTOCOL_VERSION, "w1", 1, source_fingerprint(), ("monte-carlo",))
    stdout, stderr = proc.communicate(encoder.encode(hello) + encoder.encode(Shutdown()), 60)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    messages = list(decoder.feed(stdout))
    assert isinstance(messages[0], Welcome), messages
    names = modules(out)
    assert {"numba", "aner_worker.kernels.philox"} <= names  # warmed before its Welcome
    assert "aner_worker.kernels.fixture" not in names  # the regression kernel
    assert (
        "aner_worker.kernels.dense.kernel" not in names
        and "aner_worker.kernels.dense.streams" not in names
    )
    assert roots(names).isdisjoint({"watchfiles", "asyncssh", "scipy", "cffi"})


def test_the_skipped_probes_leave_scipy_and_cffi_importable() -> None:
    # In an aner process numba's first use skips its SciPy and cffi probes; both packages
    # stay importable for any later code, and the kernel counts what it always counted.
    code = (
        "import sys\n"
        "from aner_worker.startup import own_process; own_process()\n"
        "from aner_worker.kernels.philox import count_hits\n"
        "hits = count_hits(42, 0, 10**7)\n"
        "skipped = not {'scipy', 'cffi'} & set(sys.modules)\n"
        "import scipy.linalg, cffi\n"
        "print(hits, skipped, scipy.linalg.__name__, cffi.FFI.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["7856672", "True", "scipy.linalg", "FFI"]


def test_collection_waits_for_the_start_up_then_resumes() -> None:
    code = (
        "import gc, time\n"
        "from aner_worker.startup import own_process\n"
        "own_process()\n"
        "off = not gc.isenabled()\n"
        "deadline = time.monotonic() + 60\n"
        "while not gc.isenabled() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print(off, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]
