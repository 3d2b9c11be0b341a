"""Who takes SIGINT in the `aner` program while a command starts, runs and ends.

Ctrl-C must mean one thing for a job command at every instant: cancel the job (exit 4, a
CANCELLED `status.json`), or, once the job's state is final, nothing (it exits as its
`status.json` says: 0 for a completed job). Python's own SIGINT handling raises
KeyboardInterrupt wherever the main thread happens to be, an import or the last flush
included: a traceback, or exit 130 for a job that completed. So the program holds SIGINT
(blocks it: the kernel keeps one that arrives meanwhile pending) from its first line, in
every thread it will start. A job command then routes it (`route_interrupts`): one thread
takes each SIGINT with `sigwait` and calls the command's action (cancel the job), a held
one at once; after the job's state is final the action is gone and a SIGINT does nothing.
Every other command releases the hold in its main thread as soon as its arguments are
parsed, and a held interrupt ends it as Python's always does (KeyboardInterrupt, exit 130).

Only the program itself does this (`aner_coord.program` calls `start` first): a Python
caller of `aner_coord.cli.main.main(argv)` keeps its own SIGINT handling, and where the
platform has no signal masks (Windows) nothing is held. A child process inherits the mask
of the thread that starts it: an `aner` child takes it as its own first line would; libuv
(uvloop) clears it for the workers it starts.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

_program = False  # this process is the `aner` program (`start`)
_lock = threading.Lock()  # an action runs whole before `route_interrupts` replaces it
_action: Callable[[], None] | None = None
_taker: threading.Thread | None = None


def _masks() -> bool:
    return _program and hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigwait")


def hold() -> None:
    """Keep SIGINT pending in this thread and in the threads it starts."""
    if _masks():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def release() -> None:
    """Deliver a held SIGINT, and any later one, to this thread's handler in place now."""
    if _masks():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def route_interrupts(action: Callable[[], None] | None) -> bool:
    """From now on each SIGINT calls `action` (from another thread: it must be thread-safe),
    or does nothing if it is None. False where the program does not hold SIGINT: the caller
    installs its own handler then."""
    global _action, _taker
    if not _masks():
        return False
    with _lock:
        _action = action
    if _taker is None:
        _taker = threading.Thread(target=_take, name="aner-sigint", daemon=True)
        _taker.start()
    return True


def _take() -> None:
    while True:
        signal.sigwait({signal.SIGINT})
        with _lock:
            if _action is not None:
                _action()


def start() -> None:
    """This process is the `aner` program: hold SIGINT from now on."""
    global _program
    _program = True
    hold()
