"""The candidates of a search (docs/contracts.md, section 12, Candidates) and the checks of their
options.

Candidates are the cartesian product of the grid's lists in the grid's key order (the
order of the search file or of the `grid` mapping), the last key varying fastest; candidate
`c` is its 0-based index. A grid may vary `GRID_KEYS` only; a key may not also stand at the
top level (one place for each option), and no list may be empty. An empty grid is one
candidate: the top-level options (`aner parallel cv`).

Every option, fixed or from the grid, is checked as `train` checks it, by the same
validator (`dense.options.check_option`); an error names the option as its caller wrote it:
`{lr}` at the top level (rendered `lr=`, `--lr` or `lr` by whoever reports it),
`grid.lr[1]` for the second value of the grid's list.
"""

from __future__ import annotations

import functools
import itertools
import math
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

from aner_coord.computations.dense.options import check_option
from aner_coord.computations.search.request import GRID_KEYS, SearchRequest
from aner_coord.errors import RequestError


def candidates(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Each candidate's grid values, candidate `c` at index `c`."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def count(grid: Mapping[str, Sequence[Any]]) -> int:
    return math.prod(len(values) for values in grid.values())


def check_conflicts(given: Collection[str], grid: Mapping[str, Any]) -> None:
    """Options given at the top level (`given`) may not also be in the grid."""
    both = [key for key in grid if key in given]
    if both:
        raise RequestError(
            f"{both[0]} is given both at the top level and in the grid: give it in one place"
        )


def check_shape(grid: Mapping[str, Any]) -> None:
    """Keys the grid may vary, each with a non-empty list of values."""
    for key, values in grid.items():
        if key == "seed":
            # A seed is no candidate's option: fits of one candidate under several seeds
            # are replicates, aggregated together, not candidates competing for selection.
            raise RequestError(
                "the grid cannot vary 'seed': a seed is not an option to select; fit every "
                "candidate with several seeds by `seeds = [..]` or `replicates = N` at the top "
                "level (selection then uses the mean over seeds and folds)"
            )
        if key not in GRID_KEYS:
            raise RequestError(
                f"the grid cannot vary {key!r}: it varies {', '.join(GRID_KEYS)} "
                "(fixed options stand at the top level)"
            )
        if not isinstance(values, list | tuple) or not values:
            raise RequestError(f"grid.{key} must be a non-empty list of values, got {values!r}")


def check_grid(grid: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The grid with every value checked and converted to its option's type."""
    check_shape(grid)
    return {
        key: [_grid_value(key, i, value) for i, value in enumerate(values)]
        for key, values in grid.items()
    }


def _grid_value(key: str, index: int, value: Any) -> Any:
    where = f"grid.{key}[{index}]"
    try:
        typed = msgspec.convert(value, type=_hints()[key])
        return check_option(key, typed)
    except msgspec.ValidationError as exc:
        raise RequestError(f"{where}: {_lower(str(exc))}, got {value!r}") from None
    except RequestError as exc:
        raise RequestError(
            exc.render(lambda name: where if name == key else f"{{{name}}}"),
            *(a for a in exc.arguments if a != key),
        ) from None


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(SearchRequest, include_extras=True)


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]
