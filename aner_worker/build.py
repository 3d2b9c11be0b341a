"""This installation's build provenance, as a worker reports it at the handshake and
`aner parallel capabilities` shows it (docs/contracts.md, "Capabilities and provenance").

Public facts only, all strings: a hash of where the packages are installed (the path itself is
private), whether the install is editable, the numpy and numba versions, and the BLAS that
numpy loaded (threadpoolctl's identity: implementation and version, the core type it chose,
its threading layer). Two builds whose BLAS identities differ may round differently, which is
what a reader of a bitwise comparison needs to know; the library's file path is never reported.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return UNKNOWN


def _editable() -> str:
    """ "true" when an editable install (PEP 660's direct_url.json) points at the source tree
    these packages were loaded from, "false" when they were loaded from site-packages,
    "unknown" otherwise (a source tree on PYTHONPATH, say)."""
    for dist in distributions(name="aner"):
        try:
            info = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if info.get("dir_info", {}).get("editable") is True and info.get("url") == _ROOT.as_uri():
            return "true"
    if _ROOT.name in ("site-packages", "dist-packages"):
        return "false"
    return UNKNOWN


def blas_identity() -> dict[str, str]:
    """The BLAS numpy uses: `blas` (implementation and version), `blas_core` (the core type
    it dispatches for, where it says), `blas_threading`, or `unknown` for each."""
    import numpy  # noqa: F401  (threadpoolctl sees only libraries already loaded)
    from threadpoolctl import threadpool_info

    for library in threadpool_info():
        if library.get("user_api") == "blas":
            name = f"{library.get('internal_api', UNKNOWN)} {library.get('version') or ''}"
            return {
                "blas": name.strip(),
                "blas_core": str(library.get("architecture") or UNKNOWN),
                "blas_threading": str(library.get("threading_layer") or UNKNOWN),
            }
    return {"blas": UNKNOWN, "blas_core": UNKNOWN, "blas_threading": UNKNOWN}


@functools.cache
def build_identity() -> dict[str, str]:
    """This installation's build, computed once per process."""
    return {
        "install_hash": "sha256:" + hashlib.sha256(str(_ROOT).encode()).hexdigest()[:16],
        "editable": _editable(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        **blas_identity(),
    }
