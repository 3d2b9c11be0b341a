"""What a Dense task carries: the parameters frozen for a pass (`DenseParams`) and a chunk's
sufficient statistics (`DenseStats`), both msgspec Structs encoded by the kernel registry.

A pass's `DenseParams` name the data set, the step kind and everything frozen for the pass
(the flat parameters and the normalisation, as binary64 bytes); a task is a range
[start, start + count) of the pass's row positions. Those positions are the batch's own
(carried in the parameters, in epoch order) for a training step, and the ascending
positions of a role for the normalisation and the evaluation passes: computed by the worker
from the seed and the fractions under the per-row rule, carried where groups or a split the
user made decide the roles. Tasks never carry row data. Parameters and
statistics travel in binary64 whatever the pass's compute precision.
"""

from __future__ import annotations

import msgspec

MOMENTS, TRAIN, EVALUATE = "moments", "train", "evaluate"

# Rows a task unless the execution says otherwise, for `train` and for each fit of a search
# alike; the parameters depend on it (the order of the gradient sums), never on the
# workers. Two chunks for a default batch of 256: two workers each compute half of every
# step. Measured (bench/dense_workers.py): a chunk costs the job about 0.3 ms of
# coordination besides its kernel time, so 64 rows (four chunks) made one worker about 40%
# slower than 256 and two workers no faster than 128.
DEFAULT_CHUNK_ROWS = 128

# The optimizers a training offers (`optimizers`), by name.
OPTIMIZERS = ("adam", "sgd")


class DenseParams(msgspec.Struct, frozen=True, array_like=True):
    step: str  # MOMENTS, TRAIN or EVALUATE
    data: str  # the staged blob's SHA256 hex, or a teacher identity
    teacher: tuple[int, ...]  # (rows, features, classes) of a teacher set, else ()
    seed: int
    fractions: tuple[float, float]  # test, validation
    role: int  # MOMENTS and EVALUATE: the role whose positions are the pass's items
    # TRAIN: the batch's row positions, int64 little-endian; MOMENTS and EVALUATE: the
    # role's positions where the roles are not the per-row rule (groups, a given split),
    # else empty (the worker derives them from the seed and the fractions).
    positions: bytes
    sizes: tuple[int, ...]  # layer sizes [d, h1, ..., k]
    params: bytes  # flat binary64 parameters (TRAIN, EVALUATE)
    mean: bytes  # normalisation (TRAIN, EVALUATE)
    std: bytes
    # The compute precision of the training (`network.PRECISIONS`): float32 computes the
    # chunk in binary32 from a binary32 copy of `params`; statistics come back in binary64.
    precision: str = "float64"


class DenseStats(msgspec.Struct, frozen=True, array_like=True):
    # Byte views (format "B"), never copied: of the kernel's own result arrays where they
    # are computed, of the received frame where they are decoded (msgspec decodes a
    # memoryview field in place). On the wire they are MessagePack bin, as bytes would be.
    sums: memoryview  # TRAIN: the gradient sum; MOMENTS: the feature sums (binary64)
    m2: memoryview  # MOMENTS: squared deviations about the chunk's own mean
    loss_sum: float
    correct: int
    valid: int
