"""A poisoned block cache through a real local-pipe worker (`aner_worker.blocks`): a cached
block that is a link to /dev/zero, a 3 GiB sparse file or a FIFO, a cache directory of mode
0777, `blocks` or `aner` a link to another directory. Each job completes with the model of a
clean run, bit for bit; a poisoned block is sent again and replaced by a regular file of
the right bytes; aner's own directories end owner-only; a directory reached through a link
is never written nor chmod-ed."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from suite_env import child_env
from support import ANER, result_of, run_aner, write_cluster

from aner_coord.computations.dense.model import load_model
from aner_coord.computations.dense.single import train_single
from aner_worker.blocks import split
from aner_worker.kernels.dense import rows as dense_rows
from aner_worker.kernels.dense.data import TeacherDataset, load_csv
from aner_worker.kernels.dense.network import flatten

SEED = 4
ARGS = ["--seed", str(SEED), "--hidden", "4", "--batch", "32", "--epochs", "1", "--chunk", "16"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, np.ndarray]:
    """A CSV, the name of its one staged block, and the parameters a clean run gives."""
    x, y = TeacherDataset(300, 4, 2, SEED).rows(np.arange(300))
    path = tmp_path_factory.mktemp("data") / "d.csv"
    lines = ["a,b,c,d,label"] + [
        ",".join([*(repr(float(v)) for v in row), str(int(label))])
        for row, label in zip(x, y, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    dataset = load_csv(path)
    [(digest, _)] = split(dense_rows.encode_blob(dataset.x, dataset.y))
    reference = train_single(dataset, seed=SEED, hidden=(4,), batch=32, epochs=1, chunk=16)
    return path, digest, flatten(reference.model.params)


def train(tmp_path: Path, csv: Path, cache: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    group = write_cluster(tmp_path / "c", [("w1", "local", "-", ANER, 1)])
    job = tmp_path / f"job-{time.monotonic_ns()}"
    env = child_env(XDG_CACHE_HOME=str(cache))
    done = run_aner(
        "parallel", "train", "--data", str(csv), *ARGS, "--cluster", str(group),
        "--output", str(job), env=env, timeout=240,
    )  # fmt: skip
    return done, job


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def check_model(job: Path, reference: np.ndarray) -> None:
    model, _ = load_model(job / "model.npz")
    assert np.array_equal(flatten(model.params), reference)


def _sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(3 << 30)


BLOCKS: list[tuple[str, Callable[[Path], Any]]] = [
    ("symlink_dev_zero", lambda p: os.symlink("/dev/zero", p)),
    ("sparse_3GiB", _sparse),
    ("fifo", lambda p: os.mkfifo(p, 0o600)),
]


@pytest.mark.parametrize(("kind", "make"), BLOCKS, ids=[k for k, _ in BLOCKS])
def test_a_poisoned_block_is_sent_again_and_replaced(
    tmp_path: Path, data: tuple[Path, str, np.ndarray], kind: str, make: Callable[[Path], Any]
) -> None:
    csv, digest, reference = data
    cache = tmp_path / "cache"
    blocks = cache / "aner" / "blocks"
    blocks.mkdir(parents=True, mode=0o700)
    os.chmod(blocks.parent, 0o700)
    make(blocks / digest)
    done, job = train(tmp_path, csv, cache)
    assert done.returncode == 0, done.stderr
    check_model(job, reference)
    [staging] = result_of(job)["staging"]
    assert (staging["state"], staging["blocks"]) == ("cold", 1)  # not taken from the cache
    assert stat.S_ISREG(os.lstat(blocks / digest).st_mode) and mode(blocks / digest) == 0o600
    assert (blocks / digest).stat().st_size < 4 << 20
    again, job2 = train(tmp_path, csv, cache)  # and now it is a cache that works
    assert again.returncode == 0, again.stderr
    assert result_of(job2)["staging"][0]["state"] == "cached"
    check_model(job2, reference)


@pytest.mark.parametrize("which", ["aner", "aner/blocks"])
def test_a_cache_directory_of_mode_0777_is_made_owner_only(
    tmp_path: Path, data: tuple[Path, str, np.ndarray], which: str
) -> None:
    csv, _digest, reference = data
    cache = tmp_path / "cache"
    (cache / "aner" / "blocks").mkdir(parents=True)
    os.chmod(cache / which, 0o777)
    done, job = train(tmp_path, csv, cache)
    assert done.returncode == 0, done.stderr
    check_model(job, reference)
    assert mode(cache / "aner") == mode(cache / "aner" / "blocks") == 0o700


@pytest.mark.parametrize("which", ["aner", "aner/blocks"])
def test_a_cache_directory_that_is_a_link_is_never_followed(
    tmp_path: Path, data: tuple[Path, str, np.ndarray], which: str
) -> None:
    csv, _digest, reference = data
    cache = tmp_path / "cache"
    other = tmp_path / "other"
    other.mkdir()
    os.chmod(other, 0o755)
    (cache / which).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(other, cache / which)
    done, job = train(tmp_path, csv, cache)
    assert done.returncode == 0, done.stderr
    check_model(job, reference)
    assert os.listdir(other) == [] and mode(other) == 0o755  # nothing written, nothing chmod-ed
    assert os.path.islink(cache / which)
