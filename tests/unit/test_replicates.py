"""Replicates (aner_coord.computations.replicates, and Dense's in
aner_coord.computations.search.replicates): the seed rule of docs/contracts.md against an
independent implementation (numpy's Philox), the aggregation rule against the statistics
module, the one validator of `replicates`, and a Dense replicate as section 9's training."""

from __future__ import annotations

import statistics

import msgspec
import numpy as np
import pytest

from aner_coord.computations.dense.request import DenseRequest
from aner_coord.computations.replicates import (
    MAX_REPLICATES,
    REPLICATE_STREAM,
    aggregate,
    check_replicates,
    replicate_seeds,
    replicates_csv,
)
from aner_coord.computations.search.replicates import DenseTraining
from aner_coord.errors import RequestError
from aner_coord.parallel import dense_fit
from aner_worker.kernels.montecarlo import McParams, MonteCarloKernel, replicate_segments
from aner_worker.kernels.philox import count_hits
from aner_worker.kernels.search.fits import run_fits


def numpy_replicate_seed(seed: int, k: int) -> int:
    """Word 0 of block k of the stream keyed (seed, 2**40): numpy increments its counter
    before a block, so counter k - 1 starts at block k (docs/contracts.md, section 1)."""
    generator = np.random.Philox(key=seed + (2**40 << 64), counter=(k - 1) % 2**256)
    return int(generator.random_raw(4)[0])


@pytest.mark.parametrize("seed", [0, 1, 42, 2**63 + 12345, 2**64 - 1])
def test_replicate_seeds_follow_the_contract_rule(seed: int) -> None:
    assert REPLICATE_STREAM == 2**40
    seeds = replicate_seeds(seed, 50)
    assert list(seeds) == [numpy_replicate_seed(seed, k) for k in range(50)]
    assert len(set(seeds)) == 50
    assert all(0 <= s < 2**64 for s in seeds)
    assert not {seed + k for k in range(50)} & set(seeds)  # never seed + k


def test_seed_42_gives_the_documented_first_replicate_seeds() -> None:
    # The values docs/contracts.md quotes.
    assert replicate_seeds(42, 3) == (
        12592837064490476508,
        4241535741120090130,
        6911127069311292716,
    )


def test_the_aggregate_is_mean_sample_std_and_standard_error() -> None:
    rows = [{"replicate": k, "seed": 7, "hits": h, "estimate": 4 * h / 10} for k, h in
            enumerate([7, 8, 8, 6, 9])]  # fmt: skip
    summary = aggregate(rows, skip=("replicate", "seed"))
    assert set(summary) == {"hits", "estimate"}
    hits = summary["hits"]
    assert hits.n == 5
    assert hits.mean == statistics.fmean([7, 8, 8, 6, 9])
    assert hits.std == pytest.approx(statistics.stdev([7, 8, 8, 6, 9]), rel=1e-15)
    assert hits.standard_error == pytest.approx(hits.std / 5**0.5, rel=1e-15)
    assert (hits.min, hits.max) == (6.0, 9.0)  # the spread
    one = aggregate(rows[:1], skip=("replicate", "seed"))["hits"]
    assert (one.n, one.mean, one.std, one.standard_error) == (1, 7.0, None, None)


def test_replicates_csv_has_a_row_per_replicate_with_exact_floats() -> None:
    rows = [{"replicate": 0, "seed": 2**64 - 1, "estimate": 0.1 + 0.2}]
    assert (
        replicates_csv(rows)
        == b"replicate,seed,estimate\n0,18446744073709551615,0.30000000000000004\n"
    )


@pytest.mark.parametrize("bad", [0, -1, MAX_REPLICATES + 1, True, 2.0, "3"])
def test_replicates_out_of_range_is_one_error_naming_the_argument(bad: object) -> None:
    with pytest.raises(RequestError) as caught:
        check_replicates(bad)
    assert caught.value.render(lambda name: f"--{name}").startswith("--replicates must be")


def test_a_task_straddling_replicates_counts_each_with_its_own_seed() -> None:
    seeds = replicate_seeds(5, 3)
    assert replicate_segments(1000, 900, 1200) == [(0, 900, 100), (1, 0, 1000), (2, 0, 100)]
    stats = MonteCarloKernel().run(McParams(5, seeds, 1000), 900, 1200, None)
    assert stats.split == (
        count_hits(seeds[0], 900, 100),
        count_hits(seeds[1], 0, 1000),
        count_hits(seeds[2], 0, 100),
    )
    assert stats.hits == sum(stats.split)


def test_a_dense_replicate_is_section_9s_training_with_its_seed_on_the_roles_of_the_seed() -> None:
    """Replicate k trains with R(s, k) on the data and roles of s: given s itself as its
    training seed, it is `train --seed s`, bit for bit (validation history, best epoch, test)."""
    request = DenseRequest(seed=5, teacher=(300, 6, 3), hidden=(8,), epochs=3, replicates=2)
    training = DenseTraining()
    admitted = training.admit(request)
    assert (admitted.items, admitted.passes, admitted.chunk) == (2, 1, 1)
    assert training.kernel_for(request).name == "search"
    spec = training.start(request, 1).next_pass()
    assert spec is not None and spec.params.seeds == list(replicate_seeds(5, 2))
    fit = run_fits(msgspec.structs.replace(spec.params, seeds=[5, 6]), 0, 1, None).fits[0]
    plain = dense_fit(teacher=(300, 6, 3), hidden=(8,), epochs=3, seed=5)
    assert fit.validation_losses == [h.validation_loss for h in plain.history]
    assert fit.best_epoch + 1 == plain.best_epoch
    assert (fit.test_loss, fit.test_accuracy) == (plain.test_loss, plain.test_accuracy)
    # One replicate is the plain training, on its own kernel.
    single = msgspec.structs.replace(request, replicates=1)
    assert training.kernel_for(single).name == "dense"


def test_the_replicates_chart_draws_the_reference_and_the_means_interval() -> None:
    # Issue 38, item 7: replicates.png had no reference line (pi) and no interval; its title
    # did not say what it shows. Rendered, and its title, labels and legend read back.
    pytest.importorskip("matplotlib")
    import math

    from aner_coord.computations.replicates import (
        Z_95,
        replicates_figure,
        replicates_png,
        summarize_field,
    )

    rows = [{"replicate": k, "seed": k, "estimate": 3.14 + 0.001 * k} for k in range(5)]
    title = "Monte Carlo estimates of pi: 5 replicates of 1,000 samples"
    figure = replicates_figure(rows, ["estimate"], title, {"estimate": ("pi", math.pi)})
    (ax,) = figure.axes
    assert figure.get_suptitle() == title
    assert (ax.get_xlabel(), ax.get_ylabel()) == (
        "replicate (index, from 0)",
        "estimate (per replicate)",
    )
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    summary = summarize_field([row["estimate"] for row in rows])
    assert labels == [
        "estimate of a replicate",
        f"mean {summary.mean:.6g}",
        "95% confidence interval of the mean",
        f"pi = {math.pi:.6g}",
    ]
    band = ax.patches[0]  # axhspan's Rectangle: its y and height in data units
    assert summary.standard_error is not None
    assert math.isclose(band.get_y(), summary.mean - Z_95 * summary.standard_error)
    assert math.isclose(band.get_height(), 2 * Z_95 * summary.standard_error)
    png = replicates_png(rows, ["estimate"], title)
    assert png is not None and png.startswith(b"\x89PNG")
