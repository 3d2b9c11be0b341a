"""How a fitted result shows itself in a notebook: a `repr` of a few lines (bounded, however
large the model or the search) and an HTML table (`_repr_html_`, as Jupyter displays it).
Values are escaped; a long table shows its first rows and says how many it leaves out."""

from __future__ import annotations

import html
from collections.abc import Sequence

MAX_ROWS = 50  # rows of a table shown before "and N more"
MAX_CELL = 200  # characters of a cell (a note, a long option list)


def cell(value: object) -> str:
    text = str(value)
    if len(text) > MAX_CELL:
        text = text[: MAX_CELL - 1] + "…"
    return html.escape(text)


def fields_table(title: str, fields: Sequence[tuple[str, object]]) -> str:
    """A two-column table: each field's name and value, under `title`."""
    rows = "".join(
        f"<tr><th style='text-align:left'>{cell(name)}</th>"
        f"<td style='text-align:left'>{cell(value)}</td></tr>"
        for name, value in fields
    )
    return f"<table><caption style='text-align:left'><b>{cell(title)}</b></caption>{rows}</table>"


def records_table(header: Sequence[str], rows: Sequence[Sequence[object]], more: str) -> str:
    """A table of records: `header`, then at most MAX_ROWS rows, then how many it left out
    and where they are (`more`)."""
    head = "".join(f"<th>{cell(name)}</th>" for name in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell(value)}</td>" for value in row) + "</tr>"
        for row in rows[:MAX_ROWS]
    )
    left = len(rows) - MAX_ROWS
    tail = "" if left <= 0 else f"<p>and {left:,} more: {cell(more)}</p>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{tail}"


def short(text: str, limit: int = 300) -> str:
    """One line of a `repr`, cut at `limit` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
