"""A worker whose installed plugin differs from the coordinator's is refused at the handshake,
naming the distribution and the first file that differs (issue 34, item 3; docs/contracts.md,
section 15): real processes, a real distribution installed twice (tests/plugin_site.py), one
copy with an edited module, as an installation that drifted would have."""

from __future__ import annotations

import subprocess
from pathlib import Path

from plugin_site import install_broken
from suite_env import child_env
from support import ANER, write_cluster


def _worker_behind(site: Path, tmp_path: Path, name: str) -> str:
    """`aner` behind a wrapper that puts `site`'s plugins first, as a worker machine would."""
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{ANER}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def _run(tmp_path: Path, worker: str, coordinator_site: Path) -> subprocess.CompletedProcess[str]:
    cluster = write_cluster(tmp_path / "group.cluster", [("w1", "local", "-", worker, 1)])
    return subprocess.run(
        [ANER, "parallel", "run", "--computation", "lab-good", "--samples", "131072",
         "--seed", "1", "--cluster", str(cluster), "--output", str(tmp_path / "job"), "--quiet"],
        env=child_env(PYTHONPATH=str(coordinator_site)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip


def test_a_worker_whose_plugin_file_differs_is_refused_naming_the_file(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "site-coordinator", tmp_path / "site-worker"
    install_broken(mine)
    install_broken(theirs)
    model = theirs / "lab_kit" / "model.py"
    model.write_text(model.read_text() + "\n# edited on the worker's machine\n")
    done = _run(tmp_path, _worker_behind(theirs, tmp_path, "aner-drifted"), mine)
    assert done.returncode != 0 and done.stdout == ""
    said = done.stderr.strip()
    assert said.count("\n") == 0, said
    assert "w1" in said and "lab-kit" in said and "lab_kit/model.py" in said, said
    assert not (tmp_path / "job" / "result.json").exists()


def test_the_same_plugin_on_both_sides_runs(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "site-coordinator", tmp_path / "site-worker"
    install_broken(mine)
    install_broken(theirs)
    done = _run(tmp_path, _worker_behind(theirs, tmp_path, "aner-same"), mine)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "job" / "result.json").is_file()
