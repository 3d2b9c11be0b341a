"""The `inventory`, `run` and `regression` subcommands: thin shells over `aner_coord.jobs`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import msgspec

from aner_coord.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, RequestError
from aner_coord.jobs import JobSpec, Outcome, PreparedJob, execute, prepare
from aner_coord.jobstate import JobState
from aner_coord.progress import LiveProgress, describe


def inventory_command(*, as_json: bool) -> int:
    from aner_worker.inventory import current, format_table

    inv = current()
    print(json.dumps(inv.to_dict(), indent=2) if as_json else format_table(inv))
    return EXIT_OK


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    computation: Literal["monte-carlo", "regression"] = (
        "monte-carlo" if args.command == "run" else "regression"
    )
    if getattr(args, "spec", None):
        if any(getattr(args, k) is not None for k in ("samples", "seed", "output", "cluster")):
            raise RequestError("--spec describes the whole job: give no other job options")
        return load_spec_file(args.spec)
    required = ["samples", "seed", "output"] + (["steps", "rate"] if args.command != "run" else [])
    missing = [f"--{name}" for name in required if getattr(args, name) is None]
    if missing:
        raise RequestError(f"missing {', '.join(missing)} (see `aner parallel {args.command} -h`)")
    return JobSpec(
        computation,
        samples=args.samples,
        seed=args.seed,
        output=args.output,
        steps=getattr(args, "steps", None),
        rate=getattr(args, "rate", None),
        workers=args.workers,
        chunk=args.chunk,
        cluster=args.cluster,
    )


def load_spec_file(path: str) -> JobSpec:
    """A TOML job spec (systemd units use these); unknown keys are refused."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RequestError(f"cannot read spec file {path}: {exc.strerror}") from None
    try:
        return msgspec.toml.decode(data, type=JobSpec)
    except msgspec.DecodeError as exc:
        raise RequestError(f"spec file {path}: {exc}") from None
    except msgspec.ValidationError as exc:
        raise RequestError(f"spec file {path}: {exc}") from None


def job_command(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    job = prepare(spec)
    if args.background:
        from aner_coord.background import submit

        return submit(job, quiet=args.quiet)
    from aner_coord.sdnotify import Notifier

    notifier = Notifier.from_environment()  # run by a systemd Type=notify unit
    if notifier is None:
        return run_foreground(job, quiet=args.quiet)
    try:
        return run_foreground(
            job, quiet=args.quiet, extra_observers=(notifier,), on_ready=notifier.ready
        )
    finally:
        notifier.close()


@contextlib.contextmanager
def cancel_on_signals(cancel: asyncio.Event) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP (the terminal went away) request a graceful cancel; the old
    handlers come back afterwards."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, cancel.set)
            installed.append(sig)
        except (RuntimeError, ValueError):  # not the main thread
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_foreground(
    job: PreparedJob,
    *,
    quiet: bool,
    extra_observers: tuple[Callable[..., None], ...] = (),
    on_ready: Callable[[], None] | None = None,
) -> int:
    from aner_coord.runner import run_sync

    show_live = not quiet and sys.stderr.isatty()

    async def main() -> Outcome:
        cancel = asyncio.Event()
        with cancel_on_signals(cancel):
            if show_live:
                with LiveProgress() as live:
                    return await execute(
                        job, observers=[live, *extra_observers], cancel=cancel, on_ready=on_ready
                    )
            return await execute(job, observers=extra_observers, cancel=cancel, on_ready=on_ready)

    outcome = run_sync(main())
    return report_outcome(job, outcome, quiet=quiet)


def report_outcome(job: PreparedJob, outcome: Outcome, *, quiet: bool) -> int:
    report = outcome.report
    where = f" (job directory {job.output})" if job.output else ""
    if report.state is JobState.COMPLETED:
        assert outcome.result is not None
        if not quiet:
            print(outcome.result.summary() + where)
        return EXIT_OK
    if report.state is JobState.CANCELLED:
        print(
            f"aner: job cancelled{where}; partial counts are diagnostic only: "
            f"{describe(report.snapshot)}",
            file=sys.stderr,
        )
        return EXIT_CANCELLED
    print(f"aner: job failed{where}: {report.error}", file=sys.stderr)
    return EXIT_FAILED
