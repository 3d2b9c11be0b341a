"""How a fitted result shows itself in a notebook: a `repr` of a few lines (bounded, however
large the model or the search) and an HTML table (`_repr_html_`, as Jupyter displays it).
Values are escaped; a long table shows its first rows and says how many it leaves out."""

from __future__ import annotations

import html
from collections.abc import Sequence

MAX_ROWS = 50  # rows of a table shown before "and N more"
MAX_REPR_LINES = 5  # lines of a result's `repr`, whatever its summary holds
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


def repr_lines(head: str, summary: str, tail: Sequence[str] = ()) -> str:
    """A result's `repr`: `head`, its summary's lines indented, `tail`, in at most
    MAX_REPR_LINES lines (the summary's last lines give way, named by how many: the whole
    is `summary()`)."""
    lines = [f"  {short(line)}" for line in summary.split("\n") if line]
    room = MAX_REPR_LINES - 1 - len(tail)
    if len(lines) > room:
        left = len(lines) - room + 1
        lines = [*lines[: room - 1], f"  ... {left} more line(s): summary()"]
    return "\n".join([short(head), *lines, *(f"  {short(t)}" for t in tail)])


def result_table(title: str, result: object, names: Sequence[str], summary: str) -> str:
    """The HTML table of a plain result: its fields `names`, then its summary."""
    fields = [(name, getattr(result, name)) for name in names]
    return fields_table(title, [*fields, ("summary", summary)])
