"""How the command line reads what a job asks for: numbers as people write them, the flags
every job command shares (`--workers`, `--chunk`, `--cluster`, `--output`, ...), and a
computation's own options, one flag per field of its request type (declared once there, with
its help). Light on purpose: every command builds its parser from here.
"""

from __future__ import annotations

import argparse
import os
import re
import typing
from collections.abc import Callable, Collection
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from aner_coord.errors import RequestError
from aner_coord.localplan import CHOICES
from aner_coord.requests import ClusterExecution, Execution, LocalExecution

_INTEGER = re.compile(r"[0-9]+|[0-9]{1,3}(,[0-9]{3})+|[0-9]{1,3}(_[0-9]{3})+|[0-9]+[eE]\+?[0-9]+")


# Far above every count a limit admits (10**10 samples, 2**64 seeds): larger is refused here.
MAX_EXPONENT = 30


def count(text: str) -> int:
    """An exact non-negative integer: 1000000, 1,000,000, 1_000_000 or 1e6."""
    text = text.strip()
    if not _INTEGER.fullmatch(text):
        sign = " (0 or more)" if text.startswith("-") else ""
        raise argparse.ArgumentTypeError(
            f"expected a whole number such as 1000000, 1,000,000 or 1e6{sign}; got {text!r}"
        )
    if "e" in text.lower():
        mantissa, exponent = re.split("[eE]", text)
        if int(exponent) > MAX_EXPONENT:  # past every limit; 10**exponent itself could hang
            raise argparse.ArgumentTypeError(f"{text!r} is larger than any limit admits")
        value: int = int(mantissa) * 10 ** int(exponent)
        return value
    return int(text.replace(",", "").replace("_", ""))


def count_of(expected: str) -> Callable[[str], int]:
    """`count` for a flag whose refusal says what it takes (`expected`): `--workers`, a
    seed (a field's Meta `extra["expected"]`)."""

    def parse(text: str) -> int:
        try:
            return count(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {expected}; got {text.strip()!r}") from None

    parse.__name__ = "count"  # argparse names the type in its own messages
    return parse


WORKERS_EXPECTED = (
    "the number of local workers: 0 for the automatic policy (every effective CPU, see "
    "`aner parallel inventory`) or a whole number of 1 or more"
)


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def fraction(text: str) -> float:
    value = number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}")
    return value


def add_execution_arguments(
    p: argparse.ArgumentParser,
    what: str,
    default_chunk: int | None,
    chunk_note: str = "",
    *,
    chunk_help: str | None = None,
) -> None:
    """Where a job runs and what becomes of it: shared by every job command. `chunk_help`
    replaces the help of `--chunk` for a command whose chunk is not items per task; a
    command with no `default_chunk` does not offer `--chunk` (its tasks are not the user's to
    cut): the flag is parsed, unlisted, for the command to refuse saying why."""
    p.add_argument(
        "--workers",
        type=count_of(WORKERS_EXPECTED),
        default=0,
        help="local workers (default 0: automatic, see `aner parallel inventory`)",
    )
    p.add_argument(
        "--backend",
        choices=CHOICES,
        default="auto",
        help="local workers as threads or worker processes (default auto: processes for "
        "work that holds the GIL, see `aner parallel inventory`)",
    )
    p.add_argument(
        "--chunk",
        type=count,
        default=None,
        help=argparse.SUPPRESS
        if default_chunk is None
        else chunk_help or f"{what} per task (default {default_chunk:,}){chunk_note}",
    )
    p.add_argument(
        "--audit",
        type=fraction,
        default=0.0,
        metavar="FRACTION",
        help="recompute this fraction of chunks on the coordinator and fail naming a worker "
        "whose result differs (default 0)",
    )
    p.add_argument("--cluster", metavar="FILE", help="run on the workers of this cluster file")
    add_strict_bits_argument(p)
    p.add_argument("--output", metavar="DIR", help="job directory to create (must not exist)")
    p.add_argument(
        "--retries",
        type=count,
        default=0,
        metavar="N",
        help="lost workers to survive: their chunks go to the others (default 0)",
    )
    p.add_argument(
        "--task-timeout",
        type=number,
        default=None,
        metavar="SECONDS",
        help="a worker whose task computes longer than this is lost (default: 20 times the "
        "slowest task measured so far per item, at least ANER_WORKER_RESULT_S)",
    )
    p.add_argument(
        "--after",
        metavar="DIR",
        help="start once the job in DIR completes; fail, saying why, if it fails or is cancelled",
    )
    p.add_argument("--background", action="store_true", help="detach; watch with `status`")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="refuse at once (exit 2, naming their holders) if this host's CPU slots are "
        "taken, instead of queueing",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line and no summary")
    add_json_argument(p)


def add_json_argument(p: argparse.ArgumentParser) -> None:
    """A job command's `--json` (`aner_coord.cli.outcome`)."""
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (aner-job-outcome/1: the job directory, its state, the "
        "exit status and reason, the result's summary) and nothing else on stdout",
    )


def add_strict_bits_argument(p: argparse.ArgumentParser) -> None:
    """`--strict-bits` (`ClusterExecution.strict_bits`), for job commands and `resume`."""
    p.add_argument(
        "--strict-bits",
        action="store_true",
        help="refuse, before any work, a worker group whose BLAS kernel sets differ (their "
        "Dense and search bits may differ); without it they compute within the stated "
        "tolerance",
    )


def execution_from_args(args: argparse.Namespace) -> Execution:
    if args.cluster is not None:
        if args.workers:
            raise RequestError("--workers applies to local runs; a cluster file sets slots")
        if args.backend != "auto":
            raise RequestError("--backend applies to local runs; a cluster file names workers")
        return ClusterExecution(config=args.cluster, chunk=args.chunk, strict_bits=args.strict_bits)
    if args.strict_bits:
        raise RequestError(
            "--strict-bits applies to a worker group (--cluster FILE): local workers run "
            "this one installation, with one kernel set"
        )
    return LocalExecution(workers=args.workers, chunk=args.chunk, backend=args.backend)


# -- a computation's options, from its request type --------------------------------------


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parts(annotation: Any) -> tuple[Any, list[Meta], bool]:
    """The type inside `Annotated[... | None, Meta(...)]`, its Metas, and whether None is
    allowed."""
    metas: list[Meta] = []
    if typing.get_origin(annotation) is Annotated:
        annotation, *extras = typing.get_args(annotation)
        metas = [m for m in extras if isinstance(m, Meta)]
    args = typing.get_args(annotation)
    optional = type(None) in args
    if optional:
        annotation = next(a for a in args if a is not type(None))
    return annotation, metas, optional


def _sizes(parts: int | None) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of whole numbers (`64,64`, `1e9,4,2`: each as `count` reads
    it, `1_000` and `1e3` included; the comma separates), of exactly `parts` if given."""

    def parse(text: str) -> tuple[int, ...]:
        pieces = [p.strip() for p in text.split(",")] if text.strip() else []
        exact = all(p and "," not in p and _INTEGER.fullmatch(p) for p in pieces)
        if not exact or (parts is not None and len(pieces) != parts):
            shape = ",".join(["N"] * parts) if parts else "N,N,..."
            raise argparse.ArgumentTypeError(f"expected {shape} (whole numbers), got {text!r}")
        return tuple(count(p) for p in pieces)

    return parse


def _parser_of(kind: Any, expected: str | None = None) -> Callable[[str], Any]:
    if kind is int:
        return count if expected is None else count_of(expected)
    if kind is float:
        return number
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        return _sizes(None if args[-1] is Ellipsis else len(args))
    return str


def _shown(default: Any) -> str:
    if isinstance(default, tuple):
        return ",".join(str(v) for v in default)
    return str(default)


def add_request_arguments(
    p: argparse.ArgumentParser, kind: type[Any], *, skip: Collection[str] = ()
) -> list[str]:
    """One flag per field of the request type `kind` (`target_accuracy` is
    `--target-accuracy`), with its description and default as help. Every flag defaults to
    None: what is not given takes the request type's own default. A field true by default
    is switched off by `--no-NAME`, whose help is its Meta's `extra["off"]`. Returns the
    flags of the required fields (for `show_needed`)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    needed: list[str] = []
    for field in msgspec.structs.fields(kind):
        if field.name in skip:
            continue
        if field.required:
            needed.append(_flag(field.name))
        inner, metas, _optional = _parts(hints[field.name])
        extra: dict[str, Any] = {}
        words = ""
        for meta in metas:
            extra.update(meta.extra or {})
            words = meta.description or words
        if inner is bool and field.default is True:
            off = {"help": extra.get("off", f"not: {words}"), "default": None}
            p.add_argument("--no-" + _flag(field.name)[2:], dest=extra.get("dest", field.name),
                           action="store_const", const=False, **off)  # fmt: skip
            continue
        if not field.required and field.default is not None:
            words += f" (default {_shown(field.default)})"
        options: dict[str, Any] = {
            "type": _parser_of(inner, extra.get("expected")),
            "help": words,
            "default": None,
        }
        if "choices" in extra:
            options["choices"] = extra["choices"]
        if "metavar" in extra:
            options["metavar"] = extra["metavar"]
        p.add_argument(_flag(field.name), dest=extra.get("dest", field.name), **options)
    return needed


def show_needed(p: argparse.ArgumentParser, *flags: str) -> None:
    """Write `p`'s usage line with `flags` shown as required. The parser leaves their check
    to the request (one line naming every missing flag, as the API names its arguments), so
    argparse would bracket them as optional. Call it once every flag of `p` is added."""
    actions = [p._option_string_actions[flag] for flag in flags]
    for action in actions:
        action.required = True
    try:
        p.usage = p.format_usage().removeprefix("usage: ").rstrip("\n")
    finally:
        for action in actions:
            action.required = False


def request_from_arguments(
    args: argparse.Namespace, kind: type[Any], command: str, *, skip: Collection[str] = ()
) -> Any:
    """The request of type `kind` that the flags of `add_request_arguments` describe. A
    required field not given is one line naming its flag."""
    hints = typing.get_type_hints(kind, include_extras=True)
    values: dict[str, Any] = {}
    missing: list[str] = []
    for field in msgspec.structs.fields(kind):
        if field.name in skip:
            continue
        _inner, metas, _optional = _parts(hints[field.name])
        extra: dict[str, Any] = {}
        for meta in metas:
            extra.update(meta.extra or {})
        value = getattr(args, extra.get("dest", field.name), None)
        if value is None:
            if field.required:
                missing.append(_flag(field.name))
            continue
        if any((m.extra or {}).get("path") for m in metas) and value != "digits":
            value = os.path.abspath(value)
        values[field.name] = value
    if missing:
        raise RequestError(f"missing {', '.join(missing)} (see `aner parallel {command} -h`)")
    return msgspec.convert(values, kind)
