"""aner's own computations, declared as any plugin's are: aner's `pyproject.toml` names
these objects as its entry points in the group "aner.computations", so there is one path by
which a computation becomes known (`aner_worker.plugins.discovery`)."""

from __future__ import annotations

from aner_worker.kernels.identities import FIXTURE_ID, STREAM_ID
from aner_worker.plugins.declaration import Plugin

MONTE_CARLO = Plugin(
    kernel="aner_worker.kernels.montecarlo:MonteCarloKernel",
    computation="aner_coord.computations.montecarlo:MonteCarlo",
    request="aner_coord.computations.montecarlo:MonteCarloRequest",
    contract=STREAM_ID,
)
REGRESSION = Plugin(
    kernel="aner_worker.kernels.regression:RegressionKernel",
    computation="aner_coord.computations.regression:Regression",
    request="aner_coord.computations.regression:RegressionRequest",
    contract=FIXTURE_ID,
)
DENSE = Plugin(
    kernel="aner_worker.kernels.dense.kernel:DenseKernel",
    computation="aner_coord.computations.search.replicates:DenseTraining",
    request="aner_coord.computations.dense.request:DenseRequest",
    contract="aner-dense/v1",
    summary="aner_coord.computations.dense.summary:summarize",
)
SEARCH = Plugin(
    kernel="aner_worker.kernels.search.kernel:SearchKernel",
    computation="aner_coord.computations.search.computation:Search",
    request="aner_coord.computations.search.request:SearchRequest",
    contract="aner-search/v1",
    summary="aner_coord.computations.search.summary:summarize",
    progress="aner_coord.computations.search.summary:progress",
)

# The order `capabilities` and every listing show them in (entry points have none).
ORDER = ("monte-carlo", "regression", "dense", "search")
