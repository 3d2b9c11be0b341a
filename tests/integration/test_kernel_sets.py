"""BLAS kernel sets as part of a job's identity (issue 35, items 2 and 5), with real worker
processes over pipes (and, marked `ssh`, over the suite's loopback sshd).

- The coordinator passes its own `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` (or their
  absence) to every worker it starts, as arguments of the worker's command: a worker whose
  own environment presets other values (an installation's wrapper, a login's profile, an
  sshd `SetEnv`) computes with the coordinator's; a record's `coretype=` / `l2size=` set its
  own, `blas=own` keeps the worker's environment.
- One installation reached over pipes and over SSH reports what makes one configuration
  revision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import ANER, run_aner, write_cluster

from aner_coord.scaling.registry import public_machine


def openblas_kernels(coretype: str) -> str:
    code = "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])"
    env = {"PATH": "/usr/bin:/bin", "OPENBLAS_CORETYPE": coretype}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def openblas() -> None:
    if openblas_kernels("Sandybridge") != "Sandybridge":
        pytest.skip("numpy's BLAS here is not an OpenBLAS that takes OPENBLAS_CORETYPE")


def preset(tmp_path: Path, coretype: str) -> str:
    """`aner` behind a wrapper that presets its own kernel set, as an installation may."""
    script = tmp_path / f"aner-{coretype}"
    script.write_text(
        f'#!/bin/sh\nOPENBLAS_CORETYPE={coretype} OPENBLAS_L2_SIZE=256 exec "{ANER}" "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


def environment(**blas: str) -> dict[str, str]:
    """This environment with the OpenBLAS variables replaced by `blas` (none: both unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    return {**env, **blas}


def capabilities(cluster: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    proc = run_aner("parallel", "capabilities", "--cluster", str(cluster), "--json",
                    env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    return {w["identity"]: w for w in workers}


# Before: "plain" computed with its wrapper's SkylakeX, whatever the coordinator ran.
@pytest.mark.usefixtures("openblas")
def test_pipe_workers_compute_with_the_coordinators_kernel_set(tmp_path: Path) -> None:
    wrapped = preset(tmp_path, "SkylakeX")
    cluster = write_cluster(
        tmp_path / "cluster",
        [
            ("plain", "local", "-", wrapped, 1),
            ("own", "local", "-", wrapped, 1, "blas=own"),
            ("haswell", "local", "-", wrapped, 1, "coretype=Haswell"),
        ],
    )
    env = environment(OPENBLAS_CORETYPE="Sandybridge", OPENBLAS_L2_SIZE="512")
    by = capabilities(cluster, env)
    machine = {name: by[name]["machine"] for name in ("plain", "own", "haswell")}
    assert " Sandybridge " in machine["plain"]["blas"]
    assert machine["plain"]["blas_env"] == "OPENBLAS_CORETYPE=Sandybridge OPENBLAS_L2_SIZE=512"
    assert " SkylakeX " in machine["own"]["blas"]
    assert machine["own"]["blas_env"] == "OPENBLAS_CORETYPE=SkylakeX OPENBLAS_L2_SIZE=256"
    assert " Haswell " in machine["haswell"]["blas"]
    assert machine["haswell"]["blas_env"] == "OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=512"


# Before: the worker kept its wrapper's settings, since the coordinator had none to pass.
@pytest.mark.usefixtures("openblas")
def test_a_coordinator_without_the_variables_passes_their_absence(tmp_path: Path) -> None:
    wrapped = preset(tmp_path, "Sandybridge")
    cluster = write_cluster(tmp_path / "cluster", [("plain", "local", "-", wrapped, 1)])
    machine = capabilities(cluster, environment())["plain"]["machine"]
    assert machine["blas_env"] == "none"
    assert " Sandybridge " not in machine["blas"]


def test_a_malformed_coordinator_value_is_refused_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    cluster = write_cluster(tmp_path / "cluster", [("plain", "local", "-", "/no/aner", 1)])
    env = environment(OPENBLAS_CORETYPE="Haswell; rm")
    proc = run_aner("parallel", "run", "--samples", "1000", "--seed", "1", "--cluster",
                    str(cluster), "--output", str(tmp_path / "job"), env=env)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "OPENBLAS_CORETYPE must be a core name" in proc.stderr
    assert "plain" in proc.stderr and "blas=own" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "job").exists()


# Before: the SSH worker computed with what sshd's session gave it (its SetEnv), not the
# coordinator's kernel set.
@pytest.mark.ssh
@pytest.mark.usefixtures("openblas")
def test_ssh_workers_compute_with_the_coordinators_kernel_set(tmp_path: Path, sshd) -> None:  # type: ignore[no-untyped-def]
    cluster = write_cluster(
        tmp_path / "cluster",
        [
            ("pipe", "local", "-", ANER, 1),
            ("peer", "ssh", sshd.alias, ANER, 1),
            ("peer-own", "ssh", sshd.alias, ANER, 1, "blas=own"),
        ],
    )
    env = environment(OPENBLAS_CORETYPE="Sandybridge", OPENBLAS_L2_SIZE="1024")
    env["HOME"] = sshd.env["HOME"]
    by = capabilities(cluster, env)
    peer = by["peer"]["machine"]
    assert " Sandybridge " in peer["blas"]
    assert peer["blas_env"] == "OPENBLAS_CORETYPE=Sandybridge OPENBLAS_L2_SIZE=1024"
    # A stock sshd's session: no OpenBLAS variables unless its configuration sets some.
    assert by["peer-own"]["machine"]["blas_env"] != peer["blas_env"]
    # One installation on one host, over pipes and over SSH: one configuration revision.
    assert public_machine(peer) == public_machine(by["pipe"]["machine"])
