"""The numerical tests again, under every other BLAS kernel set this machine's OpenBLAS runs
(`make test-kernel-sets`, part of `make test`).

OpenBLAS picks its kernels by CPU, and `OPENBLAS_CORETYPE` overrides the pick: some
installations preset it (Haswell on an AMD EPYC, say). Each kernel set rounds a matrix product
differently in the last bits, so a test that holds bits across matrix shapes, chunk sizes or
kernel sets is a bug that one machine's suite never shows. This runs the kernel, Dense, search
and fixture tests once per distinct kernel set, other than the one the main suite ran under:
each candidate of `CANDIDATES` (and the variable unset, with `OPENBLAS_L2_SIZE`) is probed
for the kernel set it actually gives (threadpoolctl's `architecture`: a set the CPU cannot run
falls back to another), and each distinct one runs once.

Nothing is changed in the caller's environment: every run is a child process with its own.
Without OpenBLAS (MKL, Accelerate) there is nothing to vary, and it says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The values tried besides "unset": AVX-512, AVX2, AVX and SSE4.2 kernels of x86-64; on
# another architecture they fall back to what the CPU runs, and dedupe to fewer runs.
CANDIDATES = ("Haswell", "SkylakeX", "Sandybridge", "Nehalem")
VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# Every test file whose numbers come through BLAS or the kernels (the pure layer only: fast).
FILES = (
    "tests/unit/test_dense_network.py",
    "tests/unit/test_dense_training.py",
    "tests/unit/test_dense_precision.py",
    "tests/unit/test_dense_float32_bound.py",
    "tests/unit/test_dense_values.py",
    "tests/unit/test_dense_optimizers.py",
    "tests/unit/test_dense_model.py",
    "tests/unit/test_dense_plan.py",
    "tests/unit/test_search_run.py",
    "tests/unit/test_search_reference.py",
    "tests/unit/test_search_folds.py",
    "tests/unit/test_replicates.py",
    "tests/unit/test_fixture.py",
    "tests/unit/test_philox.py",
)

_PROBE = (
    "import numpy\n"
    "from threadpoolctl import threadpool_info\n"
    "found = [i for i in threadpool_info() if i.get('internal_api') == 'openblas']\n"
    "print(found[0].get('architecture') or '?' if found else '')\n"
)


def environment(coretype: str | None) -> dict[str, str]:
    """The caller's environment with the kernel set `coretype` (None: both variables unset)."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def kernel_set(env: dict[str, str]) -> str:
    """The kernel set OpenBLAS runs in a process of `env` ('' without OpenBLAS)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def label(coretype: str | None) -> str:
    return "unset" if coretype is None else f"OPENBLAS_CORETYPE={coretype}"


def plan() -> tuple[str, list[tuple[str | None, str]]]:
    """The kernel set of this environment, and one (value, kernel set) per other set."""
    current = kernel_set(dict(os.environ))
    runs: list[tuple[str | None, str]] = []
    seen = {current}
    for coretype in (None, *CANDIDATES):
        found = kernel_set(environment(coretype))
        if found not in seen:
            seen.add(found)
            runs.append((coretype, found))
    return current, runs


def main(argv: list[str]) -> int:
    current, runs = plan()
    if not current:
        print("kernel sets: numpy's BLAS is not OpenBLAS here; there is no kernel set to vary")
        return 0
    print(f"kernel sets: the main suite ran under {current}; now {len(runs)} more:", flush=True)
    failed = []
    for coretype, found in runs:
        print(f"\n== {label(coretype)} (OpenBLAS kernel set {found})", flush=True)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-m", "not slow", *argv, *FILES]
        if subprocess.run(command, cwd=ROOT, env=environment(coretype)).returncode != 0:
            failed.append(f"{label(coretype)} ({found})")
    if failed:
        print(f"\nkernel sets: the numerical tests failed under {', '.join(failed)}")
        return 1
    print(f"\nkernel sets: the numerical tests passed under {current} and", end=" ")
    print(", ".join(f"{label(c)} ({found})" for c, found in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
