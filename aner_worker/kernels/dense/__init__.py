"""Dense classifier training `aner-dense/v1` (docs/contracts.md, section 9), the worker's half, and
the numerics both halves share.

- `kernel`: the "dense" kernel a worker runs per task; `params`: what a task carries;
- `rows`: where a chunk's rows come from (a staged file, the teacher set) and one chunk's
  statistics;
- `network`: the forward and backward pass of one chunk (where a gradient is computed), in
  the training's compute precision (float64 or float32), with per-thread buffers; `loops`:
  its numba loops;
- `data`: data sets (CSV, NPZ, the digits, the procedural teacher); `delimiters`: a CSV's
  delimiter, read from its header line; `values`: input values
  as binary64, exactly or refused; `labels`: labels as classes in their own type (continuous
  and missing labels refused); `streams`: the Philox streams of roles, epochs and initial
  weights;
- `plan`: roles, normalisation, initial weights, epoch order, batches, the chunk reduction
  and early stopping; `optimizers`: Adam and SGD in binary64;
- `training`: one training as a pure state machine; `fit`: a whole training driven in one
  process (a search's fit, the reference).

The coordinator's half is `aner_coord.computations.dense`.
"""
