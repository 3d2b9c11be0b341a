"""The hardware and software identity a worker reports at the handshake (SPEC section 10).

Public facts only, all strings: CPU model, logical CPUs, memory, OS and architecture, and
the Python, numpy, numba and aner versions. Never a hostname, a user or a path: the
coordinator records these in job files and in the configuration registry, which people
publish. Any change of one of them makes a new configuration revision of the worker.
"""

from __future__ import annotations

import functools
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
)


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
    }
