"""The performance page is written from a benchmark run's JSON (`bench/report.py`, issue 37
item 4): the run's machine, date and commit, each benchmark's goal met or not, and its
figures; never a figure the run did not measure."""

from __future__ import annotations

from bench.report import render

RESULTS = {
    "schema": "aner-bench/v2",
    "mode": "full",
    "machine": {
        "date": "2026-12-07T23:00:00+00:00",
        "cpu_model": "AMD EPYC",
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "loadavg_at_start": [0.25, 0.5, 1.0],
    },
    "kernel": {
        "ratio_kernel_over_oracle": 2.78,
        "runs": {"numba": {"median_s": 0.1, "seconds": [0.1, 0.2]}},
        "goal_met": True,
        "section_seconds": 3.0,
        "cpu_noise": {"other_share_of_capacity": 0.02},
        "loadavg_after": [0.1, 0.2, 0.3],
    },
    "dense": {
        "error": "ImportError: cannot import name 'x'",
        "goal_met": False,
        "section_seconds": 1.0,
        "cpu_noise": {"other_share_of_capacity": None},
    },
    "total_seconds": 4.0,
}


def test_the_page_names_the_run_and_each_goal() -> None:
    page = render(RESULTS)
    for said in ("2026-12-07T23:00:00+00:00", "`0123456789ab`", "AMD EPYC", "0.25, 0.50, 1.00"):
        assert said in page
    assert "| [kernel](#kernel) | met | 3 | 2% |" in page
    assert "| [dense](#dense) | **not met** | 1 | unknown |" in page
    assert "It crashed: `ImportError: cannot import name 'x'`." in page


def test_the_page_shows_the_benchmarks_figures_not_the_runners() -> None:
    page = render(RESULTS)
    assert "| ratio_kernel_over_oracle | 2.78 |" in page
    assert "loadavg_after" not in page and "section_seconds" not in page
    assert "| runs / numba / median_s | 0.1 |" in page  # a median, three levels down
    assert "runs / numba / seconds" not in page  # the repetitions: the JSON file's, not the page's
