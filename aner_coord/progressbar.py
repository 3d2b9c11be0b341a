"""`progress=True`: a progress bar in a terminal or in a Jupyter notebook.

In a terminal (and wherever else stderr goes) it is the command line's own rich bar
(`aner_coord.cli.progress.LiveProgress`), left showing how the job ended. In a notebook it is
one output of the cell, replaced in place at each update (`IPython.display` with a display
id: an HTML `<progress>` element and the line `aner parallel status` prints, with plain
text for front ends without HTML); rich's own notebook display needs ipywidgets, which
aner does not require. Either is given snapshots by the call's `Reporter` thread, a few
times a second at most, never by the coordinator itself.
"""

from __future__ import annotations

import html
import sys
from typing import Any, Protocol

from aner_coord.cli.progress import LiveProgress, compact, describe
from aner_coord.jobdir.status import StatusSnapshot

_BAR_STEPS = 1000  # the notebook bar's resolution


class _Shown(Protocol):
    def update(self, snapshot: StatusSnapshot) -> None: ...

    def close(self) -> None: ...


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (never imports IPython to find out)."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class ProgressBar:
    """The bar `progress=True` gives: a callable of snapshots, closed when the job ends."""

    def __init__(self) -> None:
        self._shown: _Shown | None = None  # made at the first snapshot, where it shows

    def __call__(self, snapshot: StatusSnapshot) -> None:
        if self._shown is None:
            self._shown = _NotebookBar() if in_notebook() else _TerminalBar()
        self._shown.update(snapshot)

    def close(self) -> None:
        if self._shown is not None:
            self._shown.close()


class _TerminalBar:
    def __init__(self) -> None:
        self._live = LiveProgress(transient=False)
        self._live.__enter__()

    def update(self, snapshot: StatusSnapshot) -> None:
        self._live(snapshot)

    def close(self) -> None:
        self._live.__exit__(None, None, None)


class _Rendering:
    """One state of the notebook bar, as HTML and as plain text."""

    def __init__(self, snapshot: StatusSnapshot) -> None:
        self._snapshot = snapshot

    def _repr_html_(self) -> str:
        done = round(self._snapshot.fraction * _BAR_STEPS)
        line = html.escape(f"{self._snapshot.state.value} {compact(self._snapshot)}")
        return (
            f'<progress value="{done}" max="{_BAR_STEPS}" style="width: 16em"></progress> '
            f"<code>{line}</code>"
        )

    def __repr__(self) -> str:
        return describe(self._snapshot)


class _NotebookBar:
    def __init__(self) -> None:
        self._handle: Any = None

    def update(self, snapshot: StatusSnapshot) -> None:
        import IPython.display

        shown = _Rendering(snapshot)
        if self._handle is None:
            display: Any = IPython.display.display  # untyped
            self._handle = display(shown, display_id=True)
        else:
            self._handle.update(shown)

    def close(self) -> None:
        pass  # the last rendering stays in the cell's output
