"""A `JobRequest` read from a TOML spec file or a job's `request.json`: unknown keys and
kinds are refused, and every registered computation's request type is accepted. The file
itself is read by `aner_coord.userfiles`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.errors import RequestError
from aner_coord.requests import Execution, JobRequest, LocalExecution
from aner_coord.userfiles import decode_toml


class _Placement(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A request file's fields besides its computation, which is decoded by kind."""

    execution: Execution = LocalExecution()
    output: str | None = None
    audit: float = 0.0
    retries: int = 0
    task_timeout: float | None = None
    after: str | None = None


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
            task_timeout=rest.task_timeout,
            after=rest.after,
        )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(f"{source}: {exc}") from None
    except RecursionError:
        raise RequestError(f"{source}: nested too deeply to be read") from None
