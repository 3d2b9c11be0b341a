"""The reading every small file a user names shares (a run spec, a search file, an
experiment file): `read_small_file` reads it only if it is a regular file of at most
MAX_SPEC_BYTES (a FIFO, a device or a directory is refused at once, never waited on or read
whole: `aner_worker.files.read_regular`), and `decode_toml` turns it into a table or one
line (bad UTF-8, bad TOML, nesting too deep for the parser).

It sits below the computations (a computation's own file format, as the search file, uses
it) and below `specfile`, which decodes a whole job request and so knows every computation.
"""

from __future__ import annotations

from typing import Any

import msgspec

from aner_coord.errors import RequestError
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
