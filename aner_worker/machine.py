"""The hardware and software identity a worker reports at the handshake (docs/contracts.md, section
10).

Public facts only, all strings: CPU model, logical CPUs, memory, OS and architecture, the
Python, numpy, numba and aner versions, the BLAS numpy computes with (library, version, the
kernel set it chose, threading layer), the OpenBLAS settings it runs with (`blas_env`:
`OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` where set, `aner_worker.blasenv`) and its
default thread count, and the source fingerprint of the contract
(`aner_worker.contract`), so that a rebuilt engine is a new revision even under an unchanged
version string. Never a hostname, a user or a path: the coordinator records these in job
files and in the configuration registry, which people publish. Any change of one of them
makes a new configuration revision of the worker.

`platform_differences` names the fields where two identities may compute differently (the
CPU model, OS, architecture and numeric stack, BLAS kernels included); where there are none,
a bitwise audit may assume the same bits.
"""

from __future__ import annotations

import functools
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from aner_worker import blasenv
from aner_worker.contract import source_fingerprint
from protocol import bounded_machine

FIELDS = (
    "cpu_model",
    "logical_cpus",
    "memory_bytes",
    "os",
    "arch",
    "python",
    "numpy",
    "numba",
    "aner",
    "source",
    "blas",
    "blas_threads",
    "blas_env",
)
# What decides the bits of a floating-point kernel: the instructions the CPU offers and the
# code that uses them. Two builds of one numpy version may carry different BLAS libraries,
# and one library picks its kernels by CPU (or by OPENBLAS_CORETYPE), so the BLAS counts on
# its own: the kernel set it chose, not how it was chosen (an OPENBLAS_CORETYPE that names
# the set the CPU would pick computes alike), so `blas_env` does not count. Nor does the
# thread count: every kernel that calls BLAS holds it to one thread per computing thread
# (`kernels.dense.network.single_thread_blas`).
PLATFORM_FIELDS = ("cpu_model", "os", "arch", "python", "numpy", "numba", "blas")
# The /proc/cpuinfo fields that tell one CPU model (and stepping) from another where the
# "model name" alone does not (a virtual machine may say only "AMD EPYC").
_CPU_DETAIL = (
    "vendor_id",
    "cpu family",
    "model",
    "stepping",
    "cpu implementer",
    "cpu architecture",
    "cpu variant",
    "cpu part",
    "cpu revision",
)


def _cpu_model() -> str:
    """The first CPU's model name, with its vendor, family, model and stepping (or, on Arm,
    implementer, part and revision) where /proc/cpuinfo gives them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    name = ""
    detail: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        key = key.lower()
        if not name and key in ("model name", "hardware", "cpu model"):
            name = value
        elif key in _CPU_DETAIL and value:
            detail.setdefault(key, value)
    name = name or platform.processor() or "unknown"
    if not detail:
        return name
    return f"{name} ({', '.join(f'{k} {v}' for k, v in detail.items())})"


def _blas() -> tuple[str, str]:
    """The BLAS numpy computes with, as threadpoolctl sees it (library, version, kernel set,
    threading layer), and its default thread count; "unknown" where it cannot tell."""
    try:
        import numpy
        from threadpoolctl import threadpool_info

        found = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # numpy or threadpoolctl missing or unable to look: unknown
        return "unknown", "unknown"
    own = str(Path(numpy.__file__).parent)
    # numpy's own library where several are loaded (scipy brings another OpenBLAS).
    mine = [i for i in found if str(i.get("filepath", "")).startswith(own)] or found
    if not mine:
        return "unknown", "unknown"
    names = sorted(
        " ".join(
            str(info.get(key) or "unknown")
            for key in ("internal_api", "version", "architecture", "threading_layer")
        )
        for info in mine
    )
    threads = ",".join(str(info.get("num_threads", "unknown")) for info in mine)
    return "; ".join(names), threads


def _memory_bytes() -> str:
    try:
        import psutil

        return str(int(psutil.virtual_memory().total))
    except Exception:  # psutil missing or unable to read: unknown, never 0
        return "unknown"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def machine_identity() -> dict[str, str]:
    """This machine's identity, computed once per process, within the bounds the wire
    carries (so that the coordinator compares its own with what a worker could send)."""
    blas, threads = _blas()
    return bounded_machine(
        {
            "cpu_model": _cpu_model(),
            "logical_cpus": str(os.cpu_count() or "unknown"),
            "memory_bytes": _memory_bytes(),
            "os": f"{platform.system()} {platform.release()}",
            "arch": platform.machine() or "unknown",
            "python": platform.python_version(),
            "numpy": _version("numpy"),
            "numba": _version("numba"),
            "aner": _version("aner"),
            "source": source_fingerprint(),
            "blas": blas,
            "blas_threads": threads,
            "blas_env": blasenv.describe(),
        }
    )


def platform_differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The PLATFORM_FIELDS where two machine identities differ (a field one of them lacks,
    as an older worker's lacks "blas", differs); none: they compute bitwise alike."""
    return [k for k in PLATFORM_FIELDS if a.get(k) != b.get(k)]
