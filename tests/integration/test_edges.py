"""Rough edges a new user hit, each checked against the real command: usage and version,
the hidden subcommand, numbers as people write them, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from support import run_aner

from aner_coord import parallel

ROOT = Path(__file__).resolve().parents[2]


def test_aner_alone_prints_usage() -> None:
    done = run_aner()
    assert done.returncode == 0
    assert done.stdout.startswith("usage: aner")
    assert "parallel" in done.stdout
    done = run_aner("parallel")
    assert done.returncode == 0
    assert "inventory" in done.stdout and "regression" in done.stdout


def test_version_comes_from_the_package_metadata() -> None:
    done = run_aner("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"aner {version('aner')}"


def test_the_hidden_coordinator_appears_in_no_help_or_error() -> None:
    texts = [
        run_aner().stdout,
        run_aner("parallel", "--help").stdout,
        run_aner("parallel", "nonsense").stderr,
        run_aner("parallel", "run", "--help").stdout,
    ]
    for text in texts:
        assert "coordinate" not in text


@pytest.mark.parametrize("samples", ["1e6", "1,000,000", "1_000_000", "1000000", "1E6"])
def test_samples_as_people_write_them(samples: str, tmp_path: Path) -> None:
    done = run_aner(
        "parallel", "run", "--samples", samples, "--seed", "42", "--workers", "1",
        "--output", str(tmp_path / "job"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1,000,000 samples, seed 42: ")


@pytest.mark.parametrize("samples", ["1.5e3", "1e6.0", "10,00", "-5", "2**20", "1e-3"])
def test_samples_that_are_not_whole_numbers_are_refused(samples: str, tmp_path: Path) -> None:
    done = run_aner(
        "parallel", "run", "--samples", samples, "--seed", "1", "--output", str(tmp_path / "j")
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "expected a whole number such as 1000000, 1,000,000 or 1e6" in done.stderr
    assert not (tmp_path / "j").exists()


def test_cli_errors_name_flags(tmp_path: Path) -> None:
    done = run_aner(
        "parallel", "run", "--samples", "1e9", "--seed", "1", "--chunk", "10",
        "--output", str(tmp_path / "j"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "use a chunk of at least 1000 (--chunk)" in done.stderr
    assert "chunk=" not in done.stderr


def test_api_errors_name_arguments() -> None:
    with pytest.raises(parallel.RequestError) as error:
        parallel.monte_carlo(samples=10, seed=1, execution=parallel.local(workers=-1))
    assert "workers= must be 0 (automatic) or positive" in str(error.value)
    assert "--workers" not in str(error.value)


def test_results_are_read_by_attribute_and_show_no_private_names() -> None:
    mc = parallel.monte_carlo(samples=10**5, seed=42, execution=parallel.local(1))
    assert (mc.samples, mc.seed) == (10**5, 42)
    assert mc.estimate == 4 * mc.hits / mc.samples
    assert "samples_" not in repr(mc) and "hits_" not in repr(mc)
    fit = parallel.regression(samples=1000, steps=2, rate=0.5, seed=1, execution=parallel.local(1))
    assert len(fit.theta) == 9 and fit.committed_steps == 2
    assert "samples_" not in repr(fit)


def test_local_pi_sample_prints_one_line_for_a_bad_number() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "local_pi.py"), "--samples", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == "local_pi: samples= must be positive, got 0"


def test_output_where_the_os_refuses_is_one_line(tmp_path: Path) -> None:
    for output in ("/proc/aner-job", "/sys/aner-job"):
        done = run_aner("parallel", "run", "--samples", "10", "--seed", "1", "--output", output)
        assert done.returncode == 2, (output, done.stderr)
        assert done.stderr.count("\n") == 1
        assert "Traceback" not in done.stderr
