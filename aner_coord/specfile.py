"""A `JobRequest` read from a TOML spec file or a job's `request.json`: unknown keys and
kinds are refused, and every registered computation's request type is accepted.

Also the reading every small file a user names shares (a run spec, a search file, an
experiment file): `read_small_file` reads it only if it is a regular file of at most
MAX_SPEC_BYTES (a FIFO, a device or a directory is refused at once, never waited on or read
whole: `aner_worker.files.read_regular`), and `decode_toml` turns it into a table or one
line (bad UTF-8, bad TOML, nesting too deep for the parser).
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_coord.requests import Execution, JobRequest, LocalExecution
from aner_worker.files import FileRefused, read_regular

MAX_SPEC_BYTES = 1 << 20  # a spec or an experiment file is a few hundred bytes


def read_small_file(path: str, what: str, source: str) -> bytes:
    """The bytes of the user's `what` ("spec file", "experiment file") at `path`: a regular
    file (a link to one is followed) of at most MAX_SPEC_BYTES; RequestError otherwise, one
    line that starts with `source` (the words that name the file)."""
    try:
        return read_regular(path, MAX_SPEC_BYTES, follow=True)
    except FileRefused as exc:
        raise RequestError(f"{source}: cannot be read: it is {exc}") from None
    except OSError as exc:
        raise RequestError(f"{source}: cannot read the {what}: {exc.strerror or exc}") from None


def decode_toml(data: bytes, what: str, source: str) -> dict[str, Any]:
    """The top-level table of TOML `data`; RequestError (one line that starts with `source`)
    if it is not TOML."""
    try:
        raw: dict[str, Any] = msgspec.toml.decode(data, type=dict[str, Any])
    except msgspec.DecodeError as exc:
        raise RequestError(f"{source}: not a TOML {what}: {exc}") from None
    except RecursionError:
        raise RequestError(f"{source}: nested too deeply to be read") from None
    return raw


class _Placement(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A request file's fields besides its computation, which is decoded by kind."""

    execution: Execution = LocalExecution()
    output: str | None = None
    audit: float = 0.0
    retries: int = 0


def decode_request(data: bytes, *, fmt: str, source: str) -> JobRequest:
    """A request from TOML or JSON bytes; unknown keys and kinds are refused."""
    from aner_coord.computations import request_types

    try:
        raw: dict[str, Any] = (
            decode_toml(data, "spec file", source)
            if fmt == "toml"
            else msgspec.json.decode(data, type=dict[str, Any])
        )
        computation = raw.pop("computation", None)
        if computation is None:
            raise RequestError(f"{source}: missing [computation]")
        union: Any = request_types()
        rest = msgspec.convert(raw, type=_Placement)
        return JobRequest(
            computation=msgspec.convert(computation, type=union),
            execution=rest.execution,
            output=rest.output,
            audit=rest.audit,
            retries=rest.retries,
        )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(f"{source}: {exc}") from None
    except RecursionError:
        raise RequestError(f"{source}: nested too deeply to be read") from None
