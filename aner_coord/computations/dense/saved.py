"""A finished job's model read back: `aner parallel predict --model` and `parallel.load_model`.

One reader for both, so the API refuses what the command line refuses: a path that is neither
a job directory nor a model file, a job without `model.npz`, a file that fails
`model.load_model`'s checks (tampered, foreign, out of bounds), and the incomplete model of a
failed or cancelled job unless it is asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aner_coord.computations.dense.model import DenseModel, ModelFileError, load_model
from aner_coord.errors import RequestError


def read_saved(
    where: str, name: str, *, allow_incomplete: bool, incomplete_hint: str
) -> tuple[DenseModel, dict[str, Any]]:
    """The model and meta of the job directory (or `model.npz` file) `where`; a
    RequestError names the argument as `name` (`--model`, `path=`) and, for an incomplete
    model, says how to take it anyway (`incomplete_hint`)."""
    directory = Path(where)
    if directory.is_dir():
        path = directory / "model.npz"
        if not os.path.lexists(path):
            raise RequestError(f"{name} {where}: no model.npz (is it a completed train job?)")
    elif os.path.lexists(where) and directory.suffix == ".npz":
        path = directory
    else:
        raise RequestError(f"{name} {where}: not a job directory or a model.npz file")
    try:
        model, meta = load_model(path)
    except ModelFileError as exc:
        raise RequestError(f"{name}: {exc}") from None
    if meta.get("complete") is False and not allow_incomplete:
        state = str(meta.get("state", "unfinished"))[:20]
        raise RequestError(
            f"{name} {where}: model.npz is the incomplete model of a {state} job (after "
            f"{meta.get('committed_steps')} committed steps): {incomplete_hint}"
        )
    return model, meta


def read_model(where: str, name: str, *, allow_incomplete: bool = False) -> DenseModel:
    """`parallel.load_model`: the model alone."""
    hint = "give allow_incomplete=True to use it"
    return read_saved(where, name, allow_incomplete=allow_incomplete, incomplete_hint=hint)[0]
