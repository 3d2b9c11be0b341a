"""The sample plugin's own tests, as a plugin author writes them: aner's conformance suite
on the installed computation `asian`, and the price of the geometric-average option against
its closed form (Kemna and Vorst), within the standard error the simulation reports.

Run by aner's `make test` (pyproject.toml, testpaths) and by `pytest samples/asian/tests`
in any environment where aner and this distribution are installed."""

from __future__ import annotations

from aner import parallel
from aner.testing import check_computation
from aner_asian.model import geometric_price


def test_asian_passes_the_conformance_suite() -> None:
    report = check_computation("asian")
    assert report.passed == ("stream", "placement", "resume", "refusals")
    assert report.plugin == "asian (plugin aner-asian 0.1.0)"


def test_asian_passes_it_with_other_parameters() -> None:
    check_computation("asian", params={"sigma": 0.4, "steps": 5, "strike": 80.0}, seed=11)


def test_the_geometric_average_price_is_its_closed_form_within_its_standard_error() -> None:
    params = {"spot": 100.0, "strike": 95.0, "rate": 0.03, "sigma": 0.25, "maturity": 2.0}
    result = parallel.run("asian", samples=1 << 20, seed=2024, params={**params, "steps": 16})
    geometric = result.outputs["geometric"]
    exact = geometric_price(steps=16, **params)
    assert geometric.standard_error is not None
    assert abs(geometric.mean - exact) < 3 * geometric.standard_error
    assert geometric.standard_error < 0.01 * exact  # a price to about a cent in a dollar
    # The arithmetic average is above the geometric one on every path: so is its price.
    assert result.outputs["arithmetic"].mean > geometric.mean
