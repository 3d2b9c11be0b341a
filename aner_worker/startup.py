"""The start of a process that is aner's own (the `aner` command: a coordinator, a monitor
or a worker), made cheaper than a mere library import of aner may make it.

Garbage collection: an `aner` process starts with cyclic collection off while it imports
the coordinator or numba and loads a kernel (objects that live as long as the process);
after STARTUP_S it freezes what exists by then (never scanned again) and collects as usual.
Collections during numba's import and at the exit of a process holding it cost about 0.1 s
of CPU; a command that ends within STARTUP_S pays none (the CLI freezes before it exits).

Numba's first use: the first compile or cache load of any numba function initialises
numba's CPU target, which imports every optional integration numba has. `numba.np.arraymath`
probes for a BLAS by importing `scipy.linalg` when SciPy is installed (about 0.14 s, more
than loading aner's Monte Carlo kernel itself), and `numba.core.typing.cffi_utils` imports
cffi and its C parser (about 0.03 s). The BLAS probe only decides whether numba's own
`np.correlate`/`np.convolve` use BLAS, and cffi only lets nopython code call cffi functions;
no aner kernel does either (the Dense layers' matrix products are numpy's, outside numba).
In an aner process `prepare()` imports those two numba modules while SciPy and cffi are
unimportable, as on a machine without them (numba supports that); both stay importable
afterwards, and numba's linear algebra still imports SciPy itself if later code needs it.

A process that merely imports aner (a notebook, a test) keeps Python's and numba's
behaviour untouched: none of this happens without `own_process()`.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading

STARTUP_S = 1.0

# numba module -> the optional package it probes on import (absent from sys.modules while
# it does, so importing it raises ImportError)
_PROBES = (
    ("numba.np.arraymath", ("scipy", "scipy.linalg")),
    ("numba.core.typing.cffi_utils", ("cffi",)),
)

_own = False
_lock = threading.Lock()


def own_process() -> None:
    """This process is the `aner` command (a coordinator or a worker), nobody else's."""
    global _own
    _own = True
    gc.disable()
    timer = threading.Timer(STARTUP_S, started)
    timer.daemon = True
    timer.start()


def started() -> None:
    """The start-up is over: what it made stays, and garbage collection resumes."""
    gc.freeze()
    gc.enable()


def prepare() -> None:
    """Call before numba's first compile or cache load (kernel modules do, on import)."""
    if not _own:
        return
    with _lock:
        for module, packages in _PROBES:
            if module in sys.modules:
                continue
            # Block the package itself if nothing has imported it yet, else the submodule.
            blocked = next((p for p in packages if p not in sys.modules), None)
            if blocked is None:
                continue  # already imported by someone: the probe costs nothing more
            sys.modules[blocked] = None  # type: ignore[assignment]
            try:
                importlib.import_module(module)
            finally:
                if blocked in sys.modules and sys.modules[blocked] is None:
                    del sys.modules[blocked]
