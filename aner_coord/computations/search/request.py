"""What a model search or a cross-validation asks for (docs/contracts.md, section 12), declared once
here.

`SearchRequest` is a `DenseRequest` (every `train` option, fixed for every candidate, with
Dense's own defaults and help, the group column among them) plus what a search adds: the
folds, the refit, the rows of a chunk within each fit (a Dense option: the parameters
depend on it; a search hands out whole fits, never chunks of one) and the `grid` of
candidates. `aner parallel cv` is a search whose grid is empty: one candidate. The API
(`parallel.search`, `parallel.cross_validate`), the command line and the search file take
their options from this type. Light: nothing here imports numpy.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from aner_coord.computations.dense.request import DenseRequest
from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS

# The options a grid may vary (docs/contracts.md, section 12), in the order the help lists them.
GRID_KEYS = ("hidden", "lr", "batch", "epochs", "optimizer", "patience", "chunk")
MAX_FOLDS = 255  # a fold is one byte per row, and 255 marks a test row


class SearchRequest(DenseRequest, frozen=True, tag="search"):
    """Candidates of a Dense classifier, each evaluated by K-fold cross-validation (or by
    section 9's validation split with `folds = 1`), the best refit and tested once."""

    folds: Annotated[
        int,
        Meta(
            description=f"folds of the cross-validation (2..{MAX_FOLDS}); 1 uses train's own "
            "validation split",
            extra={"metavar": "K"},
        ),
    ] = 5
    refit: Annotated[
        bool,
        Meta(
            description="train the selected candidate on the whole pool and test it once",
            extra={
                "off": "no refit of the configuration on the whole pool (no test metrics, no model)"
            },
        ),
    ] = True
    # Dense's own default, so that a one-candidate search of a `train` configuration
    # computes its very numbers.
    chunk: Annotated[
        int, Meta(description="rows of a chunk within each fit; the parameters depend on it")
    ] = DEFAULT_CHUNK_ROWS
    seeds: Annotated[
        tuple[int, ...] | None,
        Meta(
            description="training seeds: every candidate is fitted with each on every fold, "
            "and selected by the mean over seeds and folds (instead of --replicates; the "
            "data and folds stay --seed's)",
            extra={"metavar": "S,S,..."},
        ),
    ] = None
    # msgspec gives each request its own empty dict: a shared mutable default is no risk.
    grid: Annotated[
        dict[str, list[Any]],
        Meta(
            description="lists of values of " + ", ".join(GRID_KEYS) + "; candidates are "
            "their cartesian product, the last key varying fastest"
        ),
    ] = {}  # noqa: RUF012
