"""This installation's build provenance, as a worker reports it at the handshake and
`aner parallel capabilities` shows it (docs/contracts.md, section 17).

Public facts only, all strings: a hash of where the packages are installed (the path itself is
private) and whether the install is editable. The numeric stack (numpy, numba, the BLAS and
its kernel set) is the machine identity's (`aner_worker.machine`), which the report reuses.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib.metadata import distributions
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"


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


@functools.cache
def build_identity() -> dict[str, str]:
    """This installation's build, computed once per process."""
    return {
        "install_hash": "sha256:" + hashlib.sha256(str(_ROOT).encode()).hexdigest()[:16],
        "editable": _editable(),
    }
