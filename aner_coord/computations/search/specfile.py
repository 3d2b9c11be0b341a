"""The search file of `aner parallel search --spec FILE.toml` (docs/contracts.md, section 12).

TOML; every `train` option may stand at the top level (fixed for every candidate) beside
`group`, `folds`, `refit`, `chunk` and `seed`, and `[grid]` holds the lists of values that
make the candidates, in the file's key order. Unknown keys are refused, and so is an option
given both at the top level and in the grid. A relative `data` path is relative to the file.
Every error is one line naming the file and the key; `render` does the same for errors of
admission (the data, the folds, a limit), so that nothing starts on a bad file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec

from aner_coord.computations.search.grid import check_conflicts, check_shape
from aner_coord.computations.search.request import SearchRequest
from aner_coord.errors import RequestError
from aner_coord.userfiles import decode_toml, read_small_file

_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "array": "a list",
          "bool": "true or false", "object": "a table", "null": "nothing"}  # fmt: skip


def known_keys() -> list[str]:
    return [f.name for f in msgspec.structs.fields(SearchRequest)]


def load_search_file(path: str | Path) -> SearchRequest:
    where = str(path)
    raw = decode_toml(read_small_file(where, "search file", where), "search file", where)
    known = known_keys()
    for key in raw:
        if key not in known:
            raise RequestError(
                f"{where}: unknown key {key!r}: a search file takes {', '.join(known)}"
            )
    grid = raw.get("grid", {})
    if not isinstance(grid, dict):
        raise RequestError(f"{where}: grid must be a table ([grid]), got {grid!r}")
    try:
        check_shape(grid)
        check_conflicts(set(raw) - {"grid"}, grid)
    except RequestError as exc:
        raise RequestError(f"{where}: {exc}") from None
    data_path = raw.get("data")
    if isinstance(data_path, str) and data_path != "digits":
        # Absolute, not resolved: a link loop or a NUL is admission's to name, not a crash.
        raw["data"] = os.path.normpath(Path(path).absolute().parent / data_path)
    try:
        return msgspec.convert(raw, type=SearchRequest)
    except msgspec.ValidationError as exc:
        raise RequestError(f"{where}: {_validation(str(exc), raw)}") from None


def _validation(text: str, raw: dict[str, Any]) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.folds`" as "folds: expected an integer,
    got 'five'"; "Object missing required field `seed`" as "missing key seed"."""
    missing = re.fullmatch(r"Object missing required field `(\w+)`", text)
    if missing:
        return f"missing key {missing.group(1)}"
    message, _, at = text.partition(" - at `$.")
    key = at.rstrip("`")
    expected = re.fullmatch(r"Expected `([^`]+)`, got `(\w+)`", message)
    if expected and key in raw:
        words = " or ".join(_WORDS.get(w.strip(), w.strip()) for w in expected.group(1).split("|"))
        return f"{key}: expected {words}, got {raw[key]!r}"
    return f"{key}: {message[:1].lower()}{message[1:]}" if key else text


def render(where: str, error: RequestError) -> RequestError:
    """An admission error of a search file's request, naming the file and its keys."""
    return RequestError(f"{where}: {error.render(lambda name: name)}")


def admitted_search_file(path: str, *, whole: bool = True) -> SearchRequest:
    """The search file's request, admitted (its data read, its folds made), or with `whole`
    False only prechecked (`computation.precheck`: nothing in proportion to its rows): every
    error of the file, admission's included, is one line naming the file and the key."""
    from aner_coord.computations.search.computation import precheck, prepare

    request = load_search_file(path)
    try:
        if whole:
            prepare(request)
        else:
            precheck(request)
    except RequestError as exc:
        raise render(path, exc) from None
    return request
