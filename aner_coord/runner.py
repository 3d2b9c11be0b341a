"""Runs a coroutine to completion from synchronous code, on uvloop where available.

Works where an event loop is already running in this thread (a Jupyter notebook): the
coroutine then runs on a fresh loop in a helper thread, and the caller blocks until it ends.

`run_in_thread` starts a job that the caller holds a handle to (`parallel.submit`).
`run_interruptible` is for jobs: an interrupt of the calling thread (Ctrl-C, a Jupyter kernel
interrupt) does not abandon the coordinator and its workers to run on, it sets the job's
cancel event, waits for the graceful cancel (workers stop at their kernels' next sub-range
boundary, within milliseconds) and hands back the interrupt for the caller to chain. Where
an event loop cannot handle signals (Windows), the job runs on a helper thread's loop and
the calling thread takes the interrupt, as it does in a notebook.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# What a coordinator takes as a request to cancel gracefully: SIGHUP too, since a lost
# terminal or a logged-out session sends it (those that exist here: Windows has no SIGHUP).
CANCEL_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                box["value"] = runner.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="aner-coordinator")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    result: T = box["value"]
    return result


def run_in_thread(
    make: Callable[[asyncio.Event], Coroutine[Any, Any, T]],
) -> tuple[concurrent.futures.Future[T], Callable[[], None]]:
    """Start `make(cancel)` on a loop of its own in a thread ("aner-job") and return at once:
    its value to come, and a function that sets `cancel` from any thread."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def in_thread() -> T:
        box["loop"] = asyncio.get_running_loop()
        box["cancel"] = cancel = asyncio.Event()
        ready.set()
        return await make(cancel)

    def target() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                value = runner.run(in_thread())
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(value)
        finally:
            ready.set()

    def cancel() -> None:
        ready.wait()
        if "loop" in box:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the job is over
                box["loop"].call_soon_threadsafe(box["cancel"].set)

    threading.Thread(target=target, name="aner-job").start()
    return future, cancel


def run_interruptible(
    make: Callable[[asyncio.Event], Coroutine[Any, Any, T]],
) -> tuple[T, KeyboardInterrupt | None]:
    """Run `make(cancel)` to its end; an interrupt meanwhile sets `cancel` instead of
    unwinding. Returns the value and the interrupt, if there was one."""
    try:
        asyncio.get_running_loop()
        in_loop = True
    except RuntimeError:
        in_loop = False
    if (
        not in_loop
        and threading.current_thread() is threading.main_thread()
        and _loops_take_signals()
    ):
        return _run_on_main_thread(make)
    # A loop already runs here (a notebook), or this is not the main thread: the job runs on
    # a loop of its own in a helper thread, and this thread waits for it interruptibly.
    return _run_in_helper_thread(make)


@functools.cache
def _loops_take_signals() -> bool:
    """Whether this platform's event loops handle signals (not on Windows)."""
    factory = loop_factory()
    loop = factory() if factory is not None else asyncio.new_event_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        loop.remove_signal_handler(signal.SIGINT)
    except (NotImplementedError, RuntimeError):
        return False
    finally:
        loop.close()
    return True


def _run_on_main_thread(
    make: Callable[[asyncio.Event], Coroutine[Any, Any, T]],
) -> tuple[T, KeyboardInterrupt | None]:
    """A loop of our own in this (main) thread, with SIGINT setting `cancel`."""
    interrupted: list[KeyboardInterrupt] = []

    async def main() -> T:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            interrupted.append(KeyboardInterrupt())
            cancel.set()

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await make(cancel)
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        value = runner.run(main())
    return value, (interrupted[0] if interrupted else None)


def _run_in_helper_thread(
    make: Callable[[asyncio.Event], Coroutine[Any, Any, T]],
) -> tuple[T, KeyboardInterrupt | None]:
    """A loop of its own in a helper thread; an interrupt of this thread sets `cancel`."""
    interrupted: list[KeyboardInterrupt] = []
    box: dict[str, Any] = {}
    ready = threading.Event()
    finished = threading.Event()

    async def in_thread() -> T:
        box["loop"] = asyncio.get_running_loop()
        box["cancel"] = cancel = asyncio.Event()
        ready.set()
        return await make(cancel)

    def target() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                box["value"] = runner.run(in_thread())
        except BaseException as exc:
            box["error"] = exc
        finally:
            ready.set()
            finished.set()

    thread = threading.Thread(target=target, name="aner-coordinator")
    thread.start()
    # Waiting on an event, not in join(): an interrupt inside Thread.join can leave the
    # thread looking finished while it still runs.
    while not finished.is_set():
        try:
            finished.wait(0.05)
        except KeyboardInterrupt as exc:
            interrupted.append(exc)
            ready.wait()
            if "cancel" in box:
                box["loop"].call_soon_threadsafe(box["cancel"].set)
    thread.join()
    if "error" in box:
        raise box["error"]
    result: T = box["value"]
    return result, (interrupted[0] if interrupted else None)
