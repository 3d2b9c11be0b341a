"""The native C reference of `make bench` (bench/c/pi_ref.c) counts the same hits as aner's
kernel: the same stream, so the benchmark compares like with like. Built here as the Makefile
builds it (same rule and flags), into a temporary directory; skipped only without a C
compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support import ROOT

from aner_worker.kernels.philox import count_hits

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")


@pytest.fixture(scope="module")
def pi_ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("cref") / "pi_ref"
    built = subprocess.run(
        ["make", "-s", "-C", str(ROOT), f"CREF={binary}", str(binary)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return binary


def hits(binary: Path, *args: int) -> int:
    done = subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_the_reference_value_of_spec_section_1(pi_ref: Path) -> None:
    assert hits(pi_ref, 10**7, 42) == 7_856_672


@pytest.mark.parametrize(
    ("samples", "seed"),
    [(1, 0), (2, 0), (1000, 1), (1001, 1), (3_000_017, 7), (65_537, 2**64 - 1), (10**6, 123)],
)
@pytest.mark.parametrize("threads", [1, 3])
def test_same_hits_as_the_kernel(pi_ref: Path, samples: int, seed: int, threads: int) -> None:
    assert hits(pi_ref, samples, seed, threads) == count_hits(seed, 0, samples)


def test_zero_samples_and_bad_arguments(pi_ref: Path) -> None:
    assert hits(pi_ref, 0, 5) == 0
    bad = subprocess.run([str(pi_ref), "-3", "1"], capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "SAMPLES must be a non-negative integer" in bad.stderr
