"""The hardware and software identity a worker reports at the handshake (docs/contracts.md, section
10).

Public facts only, all strings: CPU model, logical CPUs, memory, OS and architecture, and
the Python, numpy, numba and aner versions, and the source fingerprint of the contract
(`aner_worker.contract`), so that a rebuilt engine is a new revision even under an unchanged
version string. Never a hostname, a user or a path: the coordinator records these in job
files and in the configuration registry, which people publish. Any change of one of them
makes a new configuration revision of the worker.

`same_platform` says whether two identities compute bitwise alike (the same CPU model, OS,
architecture and numeric stack), which is what a bitwise audit may assume.
"""

from __future__ import annotations

import functools
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from aner_worker.contract import source_fingerprint

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
)
# What decides the bits of a floating-point kernel: the instructions the CPU offers and the
# code that uses them (BLAS comes with numpy).
PLATFORM_FIELDS = ("cpu_model", "os", "arch", "python", "numpy", "numba")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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
    """This machine's identity, computed once per process."""
    return {
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
    }


def same_platform(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether two machine identities compute bitwise alike (see PLATFORM_FIELDS)."""
    return all(a.get(k) == b.get(k) for k in PLATFORM_FIELDS)
