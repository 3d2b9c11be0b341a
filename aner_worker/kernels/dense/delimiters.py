"""The delimiter of a CSV file (docs/contracts.md, section 9, Data), read from its header line
and named in messages. Light: no numpy, so `predict`'s reader may import it cheaply.
"""

from __future__ import annotations

# The delimiters a CSV's header line is read for (docs/contracts.md, section 9, Data), by
# their names in messages; a tie goes to the earlier.
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "vertical bar"}


def delimiter_of(text: str) -> str:
    """The delimiter of CSV text: of `DELIMITERS`, the one its first line holds most often
    outside double quotes (a comma where it holds none). Spreadsheets in many locales write
    semicolons, and tab-separated exports are common: read them as they are."""
    counts = dict.fromkeys(DELIMITERS, 0)
    quoted = False
    for char in text[: text.find("\n") if "\n" in text else len(text)]:
        if char == '"':
            quoted = not quoted
        elif not quoted and char in counts:
            counts[char] += 1
    best = max(counts, key=lambda d: counts[d])  # the first of the largest counts
    return best if counts[best] else ","


def separated(delimiter: str) -> str:
    """`comma-separated`, `tab-separated`, ... for messages."""
    return f"{DELIMITERS.get(delimiter, repr(delimiter))}-separated"
