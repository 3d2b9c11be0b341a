"""What a Dense training job asks for (SPEC section 9): its options, declared once here. The
API, the command line and spec files take them from this type.
"""

from __future__ import annotations

from aner_coord.requests import ComputationRequest


class DenseRequest(ComputationRequest, frozen=True, tag="dense"):
    """A Dense classifier trained on `data` (a CSV or NPZ path, or "digits") or on the
    procedural `teacher` set (rows, features, classes), SPEC section 9."""

    data: str | None = None
    label: str | None = None
    teacher: tuple[int, int, int] | None = None
    hidden: tuple[int, ...] = (64, 64)
    batch: int = 256
    epochs: int = 100
    optimizer: str = "adam"
    lr: float = 1e-3
    patience: int = 5
    target_accuracy: float | None = None
