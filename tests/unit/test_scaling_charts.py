"""The scaling charts (`aner_coord/scaling/charts.py`; issue 38, item 7): each is rendered from
a small experiment and read back: a title that says what it shows (an experiment named
"predicted against measured" titled a chart that drew no prediction), wrapped to the
figure's width however long the experiment's name (training.png's was cut), and axes
labelled with their units."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from aner_coord.scaling import charts

NAME = "predicted against measured, a long experiment name that a title must wrap to fit"


def case(name: str, slots: int, local: bool = True) -> Any:
    return SimpleNamespace(name=name, slots=slots, local=local, chunk=65_536)


def summary(c: Any, median: float) -> Any:
    return SimpleNamespace(case=c, median=median, min=median * 0.9, max=median * 1.1,
                           predicted_s=None)  # fmt: skip


@pytest.mark.parametrize(
    ("chart", "what", "x", "y"),
    [
        (charts._speedup, "Measured local speedup", "local workers (count)",
         "speedup over local-1 (x)"),
        (charts._cases, "Wall time per case", "", "wall time, s (median, min:max)"),
        (charts._training, "Validation accuracy against wall time",
         "time since the job started (s)", "validation accuracy (fraction)"),
    ],
)  # fmt: skip
def test_each_chart_has_a_title_that_fits_and_says_what_it_shows(
    chart: Any, what: str, x: str, y: str
) -> None:
    experiment = SimpleNamespace(name=NAME, reference="local-1")
    summaries = [summary(case("local-1", 1), 2.0), summary(case("local-2", 2), 1.1)]
    history = [{"validation_accuracy": 0.5, "seconds": 1.0}, {"validation_accuracy": 0.7,
                                                              "seconds": 2.0}]  # fmt: skip
    records = [{"warmup": False, "ok": True, "history": history, "case": "local-1"}]
    figure = chart(experiment, summaries, records)
    (ax,) = figure.axes
    lines = ax.get_title().split("\n")
    assert lines[0].startswith(what) and all(len(line) <= charts.TITLE_CHARACTERS for line in lines)
    assert " ".join(lines).endswith(f"experiment: {NAME}")
    assert (ax.get_xlabel(), ax.get_ylabel()) == (x, y)
    from matplotlib import pyplot

    pyplot.close(figure)
