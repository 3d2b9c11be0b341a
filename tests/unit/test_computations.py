"""The coordinator halves of the computations (aner_coord/computations), pure: how each
request is admitted and planned into passes, how a result is checked, accepted and committed
at the barrier, and what the final result says. The job machine is not involved."""

from __future__ import annotations

import math

import pytest

from aner_coord.computations import COMPUTATIONS, Accounting, Diverged, request_types
from aner_coord.computations.montecarlo import STREAM_ID, MonteCarlo, MonteCarloRequest
from aner_coord.computations.regression import FIXTURE_ID, N_PARAMS, Regression, RegressionRequest
from aner_coord.errors import RequestError, api_name, cli_name
from aner_coord.jobdir.status import WorkerAccount
from aner_worker.kernels.fixture import fixture_pass
from aner_worker.kernels.montecarlo import McParams, McStats
from aner_worker.kernels.philox import count_hits
from aner_worker.kernels.regression import RegressionParams, RegressionStats

ACCOUNTING = Accounting(
    seconds=2.0,
    workers=(WorkerAccount("local-1", 1, 10, 1, [10]),),
    execution={"kind": "local", "workers": 1, "chunk": 10, "automatic": False},
)


def zero_grad_stats(count: int) -> RegressionStats:
    return RegressionStats((0.0,) * N_PARAMS, 0.5 * count, count, count)


# -- the registry ------------------------------------------------------------------------


def test_each_kind_has_one_name_everywhere() -> None:
    for kind, computation in COMPUTATIONS.items():
        assert computation.kind == kind
        assert computation.request_type.__struct_config__.tag == kind
    assert COMPUTATIONS["monte-carlo"].kernel.name == "monte-carlo"
    assert COMPUTATIONS["regression"].kernel.name == "regression"
    assert "fixture" not in COMPUTATIONS
    assert (COMPUTATIONS["monte-carlo"].unit, COMPUTATIONS["regression"].unit) == (
        "samples",
        "rows",
    )


def test_request_types_is_the_union_of_registered_requests() -> None:
    import msgspec

    union = request_types()
    decoded = msgspec.convert({"kind": "regression", "samples": 5, "steps": 1, "rate": 0.5,
                               "seed": 2}, type=union)  # fmt: skip
    assert decoded == RegressionRequest(samples=5, steps=1, rate=0.5, seed=2)


# -- Monte Carlo -------------------------------------------------------------------------


def test_monte_carlo_admits_one_pass_of_its_samples() -> None:
    admitted = MonteCarlo().admit(MonteCarloRequest(samples=1_000, seed=3))
    assert (admitted.items, admitted.passes, admitted.identity) == (1_000, 1, STREAM_ID)
    assert admitted.describe == {"samples": 1_000, "seed": 3}


def test_monte_carlo_run_plans_one_pass_and_sums_hits_in_any_order() -> None:
    request = MonteCarloRequest(samples=25, seed=3)
    run = MonteCarlo().start(request, 10)
    spec = run.next_pass()
    assert spec is not None
    assert (spec.items, spec.params, spec.label) == (25, McParams(3), "sampling")
    for chunk, (start, count) in reversed(list(enumerate([(0, 10), (10, 10), (20, 5)]))):
        stats = McStats(count_hits(3, start, count))
        assert run.check(chunk, start, count, stats) is None
        run.accept(chunk, stats)
    run.commit()
    assert run.next_pass() is None
    assert run.committed_steps is None
    result = run.result(ACCOUNTING)
    assert result.hits == count_hits(3, 0, 25)
    assert (result.samples, result.seed, result.stream) == (25, 3, STREAM_ID)
    assert result.estimate == 4 * result.hits / 25
    assert (result.seconds, result.workers, result.execution) == (
        2.0, list(ACCOUNTING.workers), ACCOUNTING.execution,
    )  # fmt: skip


def test_monte_carlo_plausibility_bound_is_twelve_sigma() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=10**6, seed=1), 10**6)
    count = 10**6
    p = math.pi / 4
    spread = 12 * math.sqrt(count * p * (1 - p)) + 12
    inside = round(count * p + spread) - 1
    outside = round(count * p + spread) + 1
    assert run.check(0, 0, count, McStats(inside)) is None
    problem = run.check(0, 0, count, McStats(outside))
    assert problem is not None and "12 standard deviations" in problem


def test_monte_carlo_audit_compares_exactly() -> None:
    run = MonteCarlo().start(MonteCarloRequest(samples=10, seed=1), 10)
    assert run.same(McStats(7), McStats(7))
    assert not run.same(McStats(7), McStats(8))


def test_monte_carlo_summary_shows_estimate_and_hits() -> None:
    lines = MonteCarlo().summarize({"estimate": 3.1426688, "hits": 7_856_672, "samples": 10**7})
    text = "\n".join(lines)
    assert "3.1426688000" in text
    assert "7,856,672" in text and "10,000,000" in text


# -- the regression fixture --------------------------------------------------------------


def test_regression_admits_steps_plus_two_passes() -> None:
    request = RegressionRequest(samples=100, steps=3, rate=0.5, seed=7)
    admitted = Regression().admit(request)
    assert (admitted.items, admitted.passes, admitted.identity) == (100, 5, FIXTURE_ID)
    assert admitted.describe == {"samples": 100, "steps": 3, "rate": 0.5, "seed": 7}


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (RegressionRequest(samples=100, steps=-1, rate=0.5, seed=1), "steps= must be in"),
        (RegressionRequest(samples=100, steps=3, rate=0.0, seed=1), "rate= must be positive"),
        (RegressionRequest(samples=100, steps=3, rate=math.inf, seed=1), "rate= must be a finite"),
        (RegressionRequest(samples=0, steps=3, rate=0.5, seed=1), "samples= must be positive"),
    ],
)
def test_regression_refuses_bad_parameters(request_: RegressionRequest, words: str) -> None:
    with pytest.raises(RequestError, match=words.replace("(", r"\(")):
        Regression().admit(request_)


def test_regression_run_labels_its_passes_and_freezes_theta_per_pass() -> None:
    run = Regression().start(RegressionRequest(samples=4, steps=2, rate=0.5, seed=7), 4)
    labels = []
    while (spec := run.next_pass()) is not None:
        labels.append(spec.label)
        assert isinstance(spec.params, RegressionParams) and spec.params.seed == 7
        assert spec.params.theta == run.theta  # the committed parameters, frozen
        stats = RegressionStats((1.0,) * N_PARAMS, 2.0, 3, 4)
        assert run.check(0, 0, 4, stats) is None
        run.accept(0, stats)
        run.commit()
    assert labels == ["initial metrics", "step 1 of 2", "step 2 of 2", "final metrics"]
    assert run.committed_steps == 2
    # Each step: theta -= rate * G / n with G = 1 everywhere: 0 - 0.5/4, twice.
    assert run.theta == (-0.25,) * N_PARAMS
    result = run.result(ACCOUNTING)
    assert (result.initial_loss, result.final_loss) == (0.5, 0.5)
    assert (result.initial_accuracy, result.fit_accuracy) == (0.75, 0.75)
    assert result.theta == [-0.25] * N_PARAMS
    assert (result.fixture, result.steps, result.committed_steps) == (FIXTURE_ID, 2, 2)


def test_regression_commit_sums_chunk_slots_in_chunk_order() -> None:
    grads = [(0.1,), (0.2,), (0.3,)]  # (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1
    assert (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1
    thetas = []
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        run = Regression().start(RegressionRequest(samples=3, steps=1, rate=1.0, seed=1), 1)
        run.next_pass()
        for chunk in range(3):
            run.accept(chunk, zero_grad_stats(1))
        run.commit()  # initial metrics
        run.next_pass()
        for chunk in order:
            g = grads[chunk] * N_PARAMS
            run.accept(chunk, RegressionStats(g, 0.5, 1, 1))
        run.commit()
        thetas.append(run.theta)
    assert thetas[0] == thetas[1] == thetas[2]
    assert thetas[0][0] == -(((0.0 + 0.1) + 0.2) + 0.3) / 3


def test_regression_commit_refuses_a_partial_pass() -> None:
    run = Regression().start(RegressionRequest(samples=10, steps=1, rate=0.5, seed=1), 5)
    run.next_pass()
    run.accept(0, zero_grad_stats(5))
    with pytest.raises(AssertionError):
        run.commit()  # chunk 1 is missing: never applied


def test_regression_divergence_names_the_step() -> None:
    run = Regression().start(RegressionRequest(samples=1, steps=3, rate=1e308, seed=1), 1)
    run.next_pass()
    run.accept(0, zero_grad_stats(1))
    run.commit()
    run.next_pass()
    run.accept(0, RegressionStats((-1.0,) * N_PARAMS, 0.5, 1, 1))
    run.commit()  # theta = 1e308: still finite
    run.next_pass()
    run.accept(0, RegressionStats((-1.0,) * N_PARAMS, 0.5, 1, 1))
    with pytest.raises(Diverged, match="left the finite range at step 2 of 3"):
        run.commit()
    assert run.committed_steps == 1  # the diverging update was never applied
    assert run.theta == (1e308,) * N_PARAMS


def test_non_finite_statistics_are_a_divergence() -> None:
    run = Regression().start(RegressionRequest(samples=2, steps=1, rate=0.5, seed=1), 2)
    run.next_pass()
    stats = RegressionStats((math.nan,) + (0.0,) * 8, 1.0, 1, 2)
    with pytest.raises(Diverged, match="non-finite loss or gradient in initial metrics"):
        run.check(0, 0, 2, stats)


def test_regression_audit_tolerates_rounding_only() -> None:
    run = Regression().start(RegressionRequest(samples=1_000, steps=1, rate=0.5, seed=1), 1_000)
    theta = (0.1,) * N_PARAMS
    real = fixture_pass(1, 0, 1_000, theta)
    a = RegressionStats(real.grad, real.loss_sum, real.correct, real.valid)
    nudged = tuple(g * (1 + 1e-13) for g in real.grad)
    assert run.same(a, RegressionStats(nudged, real.loss_sum, real.correct, real.valid))
    assert not run.same(a, RegressionStats(real.grad, real.loss_sum * 1.01, real.correct, 1_000))
    assert not run.same(a, RegressionStats(real.grad, real.loss_sum, real.correct - 1, 1_000))


def test_regression_summary_shows_loss_and_accuracy() -> None:
    lines = Regression().summarize(
        {"initial_loss": 0.693147, "final_loss": 0.5, "steps": 3, "fit_accuracy": 0.8}
    )
    loss, accuracy = lines
    assert loss.startswith("loss ") and "0.693147" in loss and "0.500000" in loss
    assert "3 steps" in loss
    assert accuracy.startswith("accuracy ") and "0.800000" in accuracy


# -- errors name arguments as the caller wrote them --------------------------------------


def test_request_errors_render_for_the_api_and_the_command_line() -> None:
    error = RequestError("{workers} must be at most 2; see {config}", "workers", "config")
    assert str(error) == "workers= must be at most 2; see config="
    assert error.render(api_name) == str(error)
    assert error.render(cli_name) == "--workers must be at most 2; see --cluster"
    assert error.exit_code == 2
