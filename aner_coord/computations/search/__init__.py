"""Model search and cross-validation `aner-search/v1` (docs/contracts.md, section 12), the
coordinator's half: independent Dense fits spread over the group, each whole on one worker slot.

- `request`: `SearchRequest`, the options of a search (every `train` option, the folds,
  the group column, the refit, the grid, the training seeds), declared once;
- `specfile`: the search file (TOML) of `aner parallel search --spec`;
- `computation`: admission and the start of a run; `data`: the rows and a CSV's group
  column; `folds`: the pool and the folds; `grid`: the candidates and their options' checks;
  `plan`: the fits and their dispatch order (longest first), the admitted search;
- `run`: the state machine the job machine drives (the folds, the selection, the refit);
  `aggregate`: means, deviations, selection and refit epochs; `audit`: how an audited
  task's fits compare with the coordinator's own;
- `result`: `result.json` and the API's `SearchFit`; `files`: `fits.csv`, `candidates.csv`,
  `histories.csv`, `model.npz` and the chart; `summary`: what `status` shows (no numpy);
- `replicates`: replicates of a Dense training (`train --replicates N`), each a whole fit,
  and `DenseTraining`, the computation the registry names for a Dense training.

The worker's half, under the same name, is `aner_worker.kernels.search`.
"""
