"""Dense classifier training `aner-dense/v1` (docs/contracts.md, section 9), the coordinator's half.

- `request`: `DenseRequest`, the options of a training job, declared once; `options`: the
  one check of each option and the limits, for `train` and a search alike;
- `computation`: admission (data, limits); `run`: the run the job machine drives, pass by
  pass: normalisation, training steps, validation, test; `checkpoint`: its committed state
  as a file; `arrays`: the API's in-memory data; `inputs`: the one conversion of
  the API's X and y, for training and prediction alike;
- `splits`: which role each row takes (by row, by group, or a split the user made);
  `columns`: a CSV's group and split columns, set aside from the features;
- `single`: the same training driven in one process (the reference the tests compare with);
  `saved`: a finished job's model read back (`predict --model`, `parallel.load_model`);
  (`DenseClassifier`, the training as a scikit-learn estimator, is an API object:
  `aner_coord.estimator`);
- `model`: `model.npz`; `features`: `predict`'s rows, by feature name; `result`:
  `result.json` and the API's fitted model; `suspect`: divergence, overflowing features and
  a still-improving fit; `summary`: what `status` shows of a finished job (without numpy).

The worker's half, under the same name, is `aner_worker.kernels.dense`: data sets, streams,
the network's forward and backward, the training plan and the optimizers.
"""
