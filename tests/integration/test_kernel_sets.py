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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from suite_env import child_env
from support import ANER, run_aner, write_cluster

from aner_coord.scaling.registry import public_machine


def openblas_kernels(coretype: str) -> str:
    code = "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])"
    env = child_env({"PATH": "/usr/bin:/bin"}, OPENBLAS_CORETYPE=coretype)
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
    env = child_env(**blas)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if name not in blas:
            env.pop(name, None)
    return env


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


# -- a group of two kernel sets: named everywhere, refused with --strict-bits ----------------

TRAIN = ["parallel", "train", "--teacher", "2000,6,3", "--seed", "3", "--epochs", "2",
         "--hidden", "16", "--quiet"]  # fmt: skip
WARNING = "bits may differ between these workers; results are within the stated tolerance"


def two_kernel_sets(tmp_path: Path) -> Path:
    """ "plain" computes with the coordinator's Haswell, "sandy" with Sandybridge."""
    return write_cluster(
        tmp_path / "cluster",
        [
            ("plain", "local", "-", ANER, 1),
            ("sandy", "local", "-", ANER, 1, "coretype=Sandybridge"),
        ],
    )


HASWELL = environment(OPENBLAS_CORETYPE="Haswell", OPENBLAS_L2_SIZE="512")


# Before: nothing said that the two workers' bits may differ.
@pytest.mark.usefixtures("openblas")
def test_capabilities_and_plan_name_a_group_of_two_kernel_sets(tmp_path: Path) -> None:
    cluster = two_kernel_sets(tmp_path)
    proc = run_aner("parallel", "capabilities", "--cluster", str(cluster), "--json",
                    env=HASWELL, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bits = json.loads(proc.stdout)["bits"]
    assert bits.startswith(WARNING)
    assert "plain: openblas" in bits and "Haswell" in bits and "sandy: openblas" in bits
    text = run_aner("parallel", "capabilities", "--cluster", str(cluster), env=HASWELL)
    assert f"kernel sets  {WARNING}" in text.stdout
    plan = run_aner("parallel", "plan", "--cluster", str(cluster), "--samples", "100000",
                    "--json", env=HASWELL, timeout=600)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["bits"].startswith(WARNING)


# Before: status and result.json said nothing of it, and nothing measured the spread.
@pytest.mark.usefixtures("openblas")
def test_status_and_the_result_name_it_with_the_measured_spread(tmp_path: Path) -> None:
    cluster, job = two_kernel_sets(tmp_path), tmp_path / "job"
    proc = run_aner(*TRAIN, "--cluster", str(cluster), "--audit", "0.5", "--output", str(job),
                    env=HASWELL, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    status = json.loads((job / "status.json").read_text())
    assert any(note.startswith(WARNING) for note in status["notes"])
    shown = run_aner("parallel", "status", "--job", str(job), env=HASWELL)
    assert WARNING in shown.stdout
    bits = json.loads((job / "result.json").read_text())["bits"]
    assert bits["note"].startswith(WARNING)
    assert [s["workers"] for s in bits["kernel_sets"]] == [["plain"], ["sandy"]]
    assert "Sandybridge" in bits["kernel_sets"][1]["blas"]
    # The audit measured "sandy" against the coordinator's own Haswell: within 1e-9, and
    # (measured, not promised) not bitwise the same.
    assert bits["tolerance"] == 1e-9
    assert bits["measured_tasks"] >= 1
    assert 0 < bits["measured"] <= bits["tolerance"]
    audit = json.loads((job / "result.json").read_text())["audit"]
    audited = {w["identity"]: w for w in audit["workers"]}
    assert audited["sandy"]["largest_difference"] == bits["measured"]
    assert audited["plain"]["largest_difference"] is None


# Before: --strict-bits did not exist (exit 2 for an unknown flag, with argparse's usage).
@pytest.mark.usefixtures("openblas")
def test_strict_bits_refuses_the_group_before_anything_starts(tmp_path: Path) -> None:
    cluster, job = two_kernel_sets(tmp_path), tmp_path / "job"
    proc = run_aner(*TRAIN, "--cluster", str(cluster), "--strict-bits", "--output", str(job),
                    env=HASWELL, timeout=600)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--strict-bits: these workers compute with different BLAS kernel sets" in lines[0]
    assert "plain: openblas" in lines[0] and "sandy: openblas" in lines[0]
    assert "Sandybridge" in lines[0] and "Haswell" in lines[0]
    assert not job.exists()


@pytest.mark.usefixtures("openblas")
def test_strict_bits_runs_a_group_of_one_kernel_set_on_the_workers_it_checked(
    tmp_path: Path,
) -> None:
    cluster = write_cluster(
        tmp_path / "cluster", [("w1", "local", "-", ANER, 1), ("w2", "local", "-", ANER, 1)]
    )
    strict, plain = tmp_path / "strict", tmp_path / "plain"
    for job, extra in ((strict, ["--strict-bits"]), (plain, [])):
        proc = run_aner(*TRAIN, "--cluster", str(cluster), *extra, "--output", str(job),
                        env=HASWELL, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    # The same bits as without the check (the workers it checked computed the job).
    assert _same_model(strict, plain)
    bits = json.loads((strict / "result.json").read_text())["bits"]
    assert bits["note"] is None and len(bits["kernel_sets"]) == 1
    assert bits["measured"] is None and bits["measured_tasks"] == 0


def _same_model(a: Path, b: Path) -> bool:
    import numpy as np

    with np.load(a / "model.npz") as x, np.load(b / "model.npz") as y:
        return all(np.array_equal(x[k], y[k]) for k in x.files if k != "meta")


@pytest.mark.usefixtures("openblas")
def test_the_api_takes_strict_bits_in_its_execution_context(tmp_path: Path) -> None:
    import numpy as np

    from aner_coord import parallel
    from aner_coord.errors import AdmissionError

    group = parallel.cluster(two_kernel_sets(tmp_path), strict_bits=True)
    assert group.strict_bits
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((300, 4)), rng.integers(0, 2, 300)
    with pytest.raises(AdmissionError, match=r"^strict_bits=: these workers compute with"):
        parallel.dense_fit(x, y, seed=1, hidden=8, epochs=1, execution=group,
                           output=tmp_path / "job")  # fmt: skip
    assert not (tmp_path / "job").exists()


def test_strict_bits_without_a_group_is_refused(tmp_path: Path) -> None:
    proc = run_aner(*TRAIN, "--strict-bits", "--output", str(tmp_path / "job"))
    assert proc.returncode == 2
    assert "--strict-bits applies to a worker group (--cluster FILE)" in proc.stderr
    assert not (tmp_path / "job").exists()
