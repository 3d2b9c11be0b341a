"""The `inventory`, `run`, `regression` and `resume` subcommands: thin shells over the job
engine (`aner_coord.job.execute`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import msgspec

from aner_coord.admission import Job, admit, precheck, strict_bits_request, with_strict_bits
from aner_coord.cli import outcome
from aner_coord.cli.arguments import (
    add_execution_arguments,
    add_json_argument,
    add_request_arguments,
    add_strict_bits_argument,
    execution_from_args,
    request_from_arguments,
    show_needed,
)
from aner_coord.cli.progress import LiveProgress, describe
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.computations.regression import RegressionRequest
from aner_coord.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, RequestError
from aner_coord.interrupts import route_interrupts
from aner_coord.job.coordinator import JobReport
from aner_coord.job.execute import Resumption, execute
from aner_coord.jobdir.status import JobState
from aner_coord.requests import ComputationRequest, JobRequest
from aner_coord.runner import CANCEL_SIGNALS
from aner_coord.specfile import decode_request
from aner_coord.userfiles import read_small_file

# The request type of each job command: its flags are that type's fields.
REQUEST_TYPES: dict[str, type[ComputationRequest]] = {
    "run": MonteCarloRequest,
    "regression": RegressionRequest,
}

T = TypeVar("T")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    needed = _add_job_arguments(p, "run")
    p.add_argument("--spec", metavar="FILE", help="run the job described by a TOML spec file")
    p.add_argument(
        "--computation",
        metavar="NAME",
        help="run this installed computation (a plugin's: `aner parallel capabilities` lists "
        "them) instead of Monte Carlo pi, with --samples, --seed, --replicates and its --param",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter of --computation (repeat for each; its declared default otherwise)",
    )
    show_needed(p, *needed)


def add_regression_arguments(p: argparse.ArgumentParser) -> None:
    show_needed(p, *_add_job_arguments(p, "regression"))


def _add_job_arguments(p: argparse.ArgumentParser, command: str) -> list[str]:
    """The job's flags; returns those it cannot run without (`--spec` aside)."""
    needed = add_request_arguments(p, REQUEST_TYPES[command])
    add_execution_arguments(p, "samples" if command == "run" else "rows", 65_536)
    p.add_argument(
        "--resume",
        action="store_true",
        help="if --output already holds this same job, resume it instead of refusing "
        "(for units that restart on failure)",
    )
    return [*needed, "--output"]


def add_resume_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", required=True, metavar="DIR", help="the job directory to continue")
    p.add_argument("--background", action="store_true", help="detach; watch with `status`")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="refuse at once (exit 2, naming their holders) if this host's CPU slots are "
        "taken, instead of queueing",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    add_json_argument(p)
    add_strict_bits_argument(p)


def request_from_args(args: argparse.Namespace) -> JobRequest:
    """The command line's job, as the one request type the API and spec files use."""
    kind = REQUEST_TYPES[args.command]
    named = getattr(args, "computation", None)
    if getattr(args, "spec", None):
        given = [f.name for f in msgspec.structs.fields(kind)] + ["output", "cluster"]
        strict = getattr(args, "strict_bits", False)  # the spec's [execution] says it
        chosen = named is not None or bool(getattr(args, "param", []))
        if strict or chosen or any(getattr(args, k, None) is not None for k in given):
            raise RequestError("--spec describes the whole job: give no other job options")
        return load_spec_file(args.spec)
    if named is not None:
        return job_request(args, _named_request(args, named))
    if getattr(args, "param", []):
        raise RequestError("--param goes with --computation NAME (the computation it sets)")
    computation = request_from_arguments(args, kind, args.command)
    return job_request(args, computation)


def _named_request(args: argparse.Namespace, name: str) -> ComputationRequest:
    """`run --computation NAME --param K=V ...`: the request of that installed computation,
    checked as `parallel.run(NAME, ...)` checks it (`computations.named`)."""
    from aner_coord.computations.named import SIMULATION_OPTIONS, named_request

    options = {k: getattr(args, k) for k in SIMULATION_OPTIONS if getattr(args, k) is not None}
    params: dict[str, str] = {}
    for given in args.param:
        key, equals, value = given.partition("=")
        if not (equals and key.strip() and value.strip()):
            raise RequestError(f"--param takes NAME=VALUE, got {given!r}")
        if key.strip() in params:
            raise RequestError(f"--param {key.strip()} is given twice: give it once")
        params[key.strip()] = value.strip()
    return named_request(name, options, params, text=True)


def job_request(args: argparse.Namespace, computation: ComputationRequest) -> JobRequest:
    """The request of a job command, given its computation's."""
    if args.output is None:
        raise RequestError(f"missing --output (see `aner parallel {args.command} -h`)")
    return JobRequest(
        computation=computation,
        execution=execution_from_args(args),
        output=args.output,
        audit=args.audit,
        retries=args.retries,
        task_timeout=args.task_timeout,
        after=args.after,
    )


def load_spec_file(path: str) -> JobRequest:
    """A job spec: TOML (systemd units use these), or JSON for a name ending in `.json` (as a
    job's `request.json`, and the specs of scaling trials); unknown keys are refused. It is
    read only if it is a regular file of at most MAX_SPEC_BYTES (a FIFO or a device is
    refused at once, never waited on or read)."""
    data = read_small_file(path, "spec file", f"spec file {path}")
    fmt = "json" if path.endswith(".json") else "toml"
    try:
        return decode_request(data, fmt=fmt, source=f"spec file {path}")
    except RecursionError:
        raise RequestError(f"spec file {path}: nested too deeply to be a job spec") from None


def admit_spec(request: JobRequest, args: argparse.Namespace, how: Callable[[JobRequest], T]) -> T:
    """Admit the command's request (`how`: `admit`, or `precheck` for --background); a spec
    file's values are named by their keys in it (the user never typed `--samples`)."""
    spec = getattr(args, "spec", None)
    try:
        return how(request)
    except RequestError as exc:
        if not spec:
            raise
        if args.command == "search":  # as the search file's own checks name its keys
            from aner_coord.computations.search.specfile import render

            raise render(spec, exc) from None
        raise RequestError(f"spec file {spec}: {exc.render(_spec_key)}") from None


def _spec_key(name: str) -> str:
    return f"`{name}`"


def run_command(args: argparse.Namespace) -> int:
    return _job_command(args)


def regression_command(args: argparse.Namespace) -> int:
    return _job_command(args)


def _job_command(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    if args.resume and request.output is not None and os.path.lexists(request.output):
        # A unit restarted on failure: the output must hold this very job, which goes on.
        return start(request, args=args, resume=request.output)
    return start(request, args=args)


def start(
    request: JobRequest | None, *, args: argparse.Namespace, resume: str | None = None
) -> int:
    """The one way every command starts a job: a new one (`request`), or the resumption of
    the job directory `resume` (which must then hold `request`, if given).

    In the foreground the job is admitted whole here (`admit`, `prepare_resume`), a new
    job's plan notes are said (they are in `status.json` too, for `status`), and it runs
    here, telling systemd when it is ready if a Type=notify unit started us. With
    --background only the checks that do no work in proportion to the data's rows are made
    here (`precheck`, `check_resumable`): the detached coordinator admits the job whole
    before it says it is ready, and sends back its refusal or the notes (`submit`)."""
    quiet = args.quiet or args.json  # with --json stdout holds the one document alone
    if args.background:
        from aner_coord.cli.background import submit

        if resume is not None:
            from aner_coord.job.resume import check_resumable

            prechecked = check_resumable(resume, expect=request)
            strict = request is None and args.strict_bits
            if strict:
                strict_bits_request(prechecked.request)  # refused here, as in the foreground
            status = submit(
                prechecked, quiet=quiet, resume=True, wait=not args.no_wait, strict=strict
            )
            return _submitted(args, prechecked.output, status)
        assert request is not None
        # The coordinator's refusal is raised here, to be named as the user named things.
        status = admit_spec(
            request,
            args,
            lambda r: submit(precheck(r), quiet=quiet, wait=not args.no_wait),
        )
        return _submitted(args, None if request.output is None else Path(request.output), status)
    job: Job
    resumption: Resumption | None = None
    if resume is not None:
        from aner_coord.job.resume import prepare_resume

        job, resumption = prepare_resume(resume, expect=request)
        if request is None and args.strict_bits:  # `resume --strict-bits`
            job = with_strict_bits(job)
    else:
        assert request is not None
        job = admit_spec(request, args, admit)
        if not quiet:
            for note in job.notes:
                print(f"aner: note: {note}", file=sys.stderr)
    from aner_coord.cli.sdnotify import Notifier

    notifier = Notifier.from_environment()  # run by a systemd Type=notify unit
    as_json = args.command if args.json else None
    if notifier is None:
        return run_foreground(
            job, quiet=quiet, resume=resumption, wait=not args.no_wait, as_json=as_json
        )
    try:
        return run_foreground(
            job,
            quiet=quiet,
            as_json=as_json,
            resume=resumption,
            wait=not args.no_wait,
            extra_observers=(notifier,),
            on_ready=notifier.ready,
        )
    finally:
        notifier.close()


@contextlib.contextmanager
def cancel_on_signals(cancel: asyncio.Event) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP request a graceful cancel; the old handlers come back
    afterwards. In the `aner` program SIGINT is routed (`aner_coord.interrupts`): one pressed
    while the command started cancels the job at once, and one after the job's state is
    final does nothing, so that a completed job exits 0."""
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        loop.call_soon_threadsafe(cancel.set)

    routed = route_interrupts(interrupted)
    installed = []
    for sig in CANCEL_SIGNALS:
        if routed and sig == signal.SIGINT:
            continue
        try:
            loop.add_signal_handler(sig, cancel.set)
            installed.append(sig)
        except (RuntimeError, ValueError):  # not the main thread
            pass
    try:
        yield
    finally:
        if routed:
            route_interrupts(None)
        for sig in installed:
            loop.remove_signal_handler(sig)


def resume_command(args: argparse.Namespace) -> int:
    return start(None, args=args, resume=args.job)


def _submitted(args: argparse.Namespace, output: Path | None, status: int) -> int:
    """With --json, the document of a job handed to its background coordinator."""
    if args.json:
        reason = "submitted to a background coordinator: follow it with `aner parallel status`"
        outcome.emit(outcome.document(args.command, output, "SUBMITTED", status, reason))
    return status


def run_foreground(
    job: Job,
    *,
    quiet: bool,
    as_json: str | None = None,
    resume: Resumption | None = None,
    extra_observers: tuple[Callable[..., None], ...] = (),
    on_ready: Callable[[], None] | None = None,
    wait: bool = True,
) -> int:
    from aner_coord.runner import run_sync

    show_live = not quiet and sys.stderr.isatty()

    async def main() -> JobReport:
        cancel = asyncio.Event()
        with cancel_on_signals(cancel), contextlib.ExitStack() as stack:
            observers = list(extra_observers)
            if show_live:
                observers.insert(0, stack.enter_context(LiveProgress()))
            return await execute(
                job,
                observers=observers,
                cancel=cancel,
                on_ready=on_ready,
                resume=resume,
                wait=wait,
            )

    report = run_sync(main())
    if as_json is not None:
        return json_outcome(as_json, job, report)
    return report_outcome(job, report, quiet=quiet)


def report_outcome(job: Job, report: JobReport, *, quiet: bool) -> int:
    where = f" (job directory {job.output})" if job.output else ""
    if report.state is JobState.COMPLETED:
        if not quiet:
            print(report.result.summary() + where)
        return EXIT_OK
    if report.state is JobState.CANCELLED:
        print(f"aner: job {_cancelled(report)}{where}", file=sys.stderr)
        return EXIT_CANCELLED
    print(f"aner: job failed{where}: {report.error}", file=sys.stderr)
    return EXIT_FAILED


def _cancelled(report: JobReport) -> str:
    return f"cancelled; partial counts are diagnostic only: {describe(report.snapshot)}"


def json_outcome(command: str, job: Job, report: JobReport) -> int:
    """`--json`: the outcome as one document on stdout (`outcome`); the exit status as
    without it."""
    state = report.state
    if state is JobState.COMPLETED:
        status, reason, summary = EXIT_OK, "completed", report.result.summary()
    elif state is JobState.CANCELLED:
        status, reason, summary = EXIT_CANCELLED, _cancelled(report), ""
    else:
        status, reason, summary = EXIT_FAILED, f"failed: {report.error}", ""
    outcome.emit(outcome.document(command, job.output, state.value, status, reason, summary))
    return status
