"""Numba's first use in a process, made cheaper where the process is aner's own.

The first compile or cache load of any numba function initialises numba's CPU target, which
imports `numba.np.arraymath`; that module probes for a BLAS by importing `scipy.linalg` when
SciPy is installed (about 0.14 s, more than loading aner's Monte Carlo kernel itself). The
probe only decides whether numba's `np.correlate`/`np.convolve` use BLAS; no aner kernel uses
those (nor any other BLAS routine inside numba: the Dense layers are numpy's). In processes
that aner alone owns, the `aner` command and its worker processes, `own_process()` turns the
probe off (`prepare()` imports `numba.np.arraymath` while `scipy.linalg` is unimportable);
numba's linear algebra still imports SciPy itself if some later code needs it. A process
that merely imports aner (a notebook, a test) keeps numba's behaviour untouched.
"""

from __future__ import annotations

import sys
import threading

_own = False
_lock = threading.Lock()


def own_process() -> None:
    """This process is the `aner` command (a coordinator or a worker), nobody else's."""
    global _own
    _own = True


def prepare() -> None:
    """Call before numba's first compile or cache load (kernel modules do, on import)."""
    if not _own:
        return
    with _lock:
        if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
            return
        # A None entry makes importing that name raise ImportError; SciPy itself too, if
        # nothing has imported it yet (its package costs a few milliseconds more).
        blocked = "scipy.linalg" if "scipy" in sys.modules else "scipy"
        sys.modules[blocked] = None  # type: ignore[assignment]
        try:
            import numba.np.arraymath  # noqa: F401
        finally:
            if blocked in sys.modules and sys.modules[blocked] is None:
                del sys.modules[blocked]
