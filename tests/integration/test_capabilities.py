"""The capability and provenance report (docs/contracts.md, section 17):
`aner --version --json` and `aner parallel capabilities [--json] [--cluster FILE]` as real
commands. Its JSON keeps one schema; its fingerprint follows the contract files of the
installation it runs from; each worker of a cluster file reports its own, by its handshake."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from suite_env import child_env
from support import ANER, ROOT, run_aner, write_cluster, write_pipe_pair

from aner_worker.contract import fingerprint_of, source_fingerprint
from aner_worker.host import host_identity
from protocol import PROTOCOL_VERSION

BUILD = {"install_hash", "editable", "numpy", "numba", "blas", "blas_threads"}
TOP = {
    "schema", "aner", "protocol", "fingerprint", "build", "computations", "precisions",
    "transports", "analytic_training", "distributed_neural_training", "gpu", "reasons",
    "workers", "bits", "problems",
}  # fmt: skip


def _json(*args: str) -> dict[str, Any]:
    done = run_aner(*args, timeout=120)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_capability_json_keeps_its_schema() -> None:
    report = _json("parallel", "capabilities", "--json")
    assert set(report) == TOP
    assert report["schema"] == "aner-capabilities/1"
    assert report["protocol"] == PROTOCOL_VERSION
    assert report["fingerprint"] == source_fingerprint()
    assert set(report["build"]) == BUILD
    # JSON's own boolean, null where the build cannot tell (it was the string "true")
    build = dict(report["build"])
    assert build.pop("editable") in (True, False, None)
    assert all(isinstance(v, str) and v for v in build.values())
    assert report["build"]["install_hash"].startswith("sha256:")
    assert str(ROOT) not in json.dumps(report)  # no private path, hashed or not
    # The built-in computations first (a test may register more in this process, not in
    # `aner`'s; the test venv installs the sample plugin, samples/asian).
    assert [c["kind"] for c in report["computations"] if c["plugin"] is None] == [
        "monte-carlo", "regression", "dense", "search"
    ]  # fmt: skip
    contracts = {c["kind"]: c["contract"] for c in report["computations"]}
    assert contracts["monte-carlo"] == "aner-mc/philox4x64-10/v1"
    assert contracts["regression"] == "aner-fixture/logistic/v1"
    assert (
        "replicates"
        in next(c for c in report["computations"] if c["kind"] == "monte-carlo")["options"]
    )
    assert report["precisions"] == ["float64", "float32"]
    assert set(report["transports"]) == {"local", "ssh", "slurm"}
    for transport in report["transports"].values():
        assert set(transport) == {"available", "reason"}
        assert (transport["reason"] is None) == transport["available"]
    assert report["transports"]["local"]["available"] is True
    assert report["analytic_training"] is True
    assert report["distributed_neural_training"] is True
    assert report["gpu"] is False
    assert set(report["reasons"]) == {"analytic_training", "distributed_neural_training", "gpu"}
    assert "CPU kernel" in report["reasons"]["gpu"]
    assert report["workers"] is None
    version = _json("--version", "--json")
    assert version == {k: report[k] for k in ("schema", "aner", "protocol", "fingerprint", "build")}
    assert run_aner("--version").stdout.strip() == f"aner {report['aner']}"


def test_json_before_the_command_without_version_is_one_line_and_exit_2() -> None:
    done = run_aner("--json")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "aner: error: --json before the command goes with --version (see `aner --help`)"
    ]


def _fingerprint_from(tree: Path) -> str:
    env = child_env(PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from aner_coord.cli.main import main; "
         "sys.exit(main(['--version', '--json']))"],
        capture_output=True, text=True, env=env, cwd=tree, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["build"]["install_hash"] != _json("--version", "--json")["build"]["install_hash"]
    fingerprint: str = report["fingerprint"]
    return fingerprint


def test_the_fingerprint_changes_when_a_contract_file_changes(tmp_path: Path) -> None:
    for package in ("protocol", "aner_worker", "aner_coord"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    first = _fingerprint_from(tmp_path)
    assert first == fingerprint_of(tmp_path) == source_fingerprint()
    # The coordinator's package is not in the contract: a change there changes nothing.
    with (tmp_path / "aner_coord" / "limits.py").open("a") as f:
        f.write("# not a contract file\n")
    assert _fingerprint_from(tmp_path) == first
    with (tmp_path / "aner_worker" / "kernels" / "philox.py").open("a") as f:
        f.write("# a comment is a change of the contract\n")
    second = _fingerprint_from(tmp_path)
    assert second != first
    assert second == fingerprint_of(tmp_path)


def test_each_worker_of_a_cluster_reports_its_capabilities_by_its_handshake(
    tmp_path: Path,
) -> None:
    report = _json(
        "parallel", "capabilities", "--json", "--cluster", str(write_pipe_pair(tmp_path / "c"))
    )
    workers = report["workers"]
    assert [w["identity"] for w in workers] == ["w1", "w2"]
    for worker in workers:
        assert worker["error"] is None
        assert worker["transport"] == "local" and worker["slots"] == 1
        assert worker["fingerprint"] == report["fingerprint"]
        assert worker["build"] == report["build"]  # the same installation
        assert worker["kernels"] == sorted(c["kind"] for c in report["computations"])
        assert worker["precisions"] == ["float64", "float32"]
        assert worker["machine"]["source"] == report["fingerprint"]
        assert worker["host"] == host_identity().value  # both on this host
    shown = run_aner("parallel", "capabilities", "--cluster", str(tmp_path / "c"), timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "worker       w1 (local, 1 slots):" in shown.stdout


def test_a_worker_that_cannot_start_is_named_with_its_error_and_exit_3(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-aner"
    cluster = write_cluster(
        tmp_path / "c", [("good", "local", "-", ANER, 1), ("gone", "local", "-", str(missing), 1)]
    )
    done = run_aner("parallel", "capabilities", "--json", "--cluster", str(cluster), timeout=120)
    assert done.returncode == 3, done.stderr
    good, gone = json.loads(done.stdout)["workers"]
    assert good["error"] is None
    assert gone["identity"] == "gone" and gone["error"].startswith('worker "gone" failed during')
    assert str(missing) not in done.stdout  # a path is private
