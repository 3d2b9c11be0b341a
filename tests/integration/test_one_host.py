"""One host is one host (issue 28, item 4), with real worker processes: two `local` records of
a cluster file start two workers that report the same host identity as local threads of
this process, no job file carries the raw machine ID or boot id, and `status` says the two
records share one host."""

from __future__ import annotations

import json
from pathlib import Path

import aner.parallel as parallel
from support import result_of, run_aner, write_pipe_pair

from aner_worker.host import BOOT_ID, MACHINE_ID, host_identity


def raw_ids() -> list[str]:
    """This host's raw machine ID and boot id (both forms of the boot id), where present."""
    out = []
    for path in (MACHINE_ID, BOOT_ID):
        if path.exists():
            raw = path.read_text().strip()
            out += [raw, raw.replace("-", "")]
    return [raw for raw in out if raw]


def test_a_pipe_pair_and_local_threads_report_one_host_and_status_says_so(tmp_path: Path) -> None:
    here = host_identity().value
    assert here is not None  # this test machine has /etc/machine-id and a boot id
    job = tmp_path / "pair"
    cluster = write_pipe_pair(tmp_path / "pair.cluster")
    proc = run_aner(
        *("parallel", "run", "--samples", "200000", "--seed", "3", "--cluster", str(cluster)),
        *("--chunk", "50000", "--output", str(job), "--quiet"),
    )
    assert proc.returncode == 0, proc.stderr
    # Two worker starts, one identity: the same as this process computes for its host.
    accounts = result_of(job)["workers"]
    assert [(w["identity"], w["host"]) for w in accounts] == [("w1", here), ("w2", here)]
    status = json.loads((job / "status.json").read_text())
    assert [w["host"] for w in status["workers"]] == [here, here]
    # Local threads report this host too, so a plan can compare them with the pair.
    threads = tmp_path / "threads"
    parallel.monte_carlo(samples=1000, seed=3, execution=parallel.local(workers=1), output=threads)
    assert [w["host"] for w in result_of(threads)["workers"]] == [here]
    # The raw values reach no file of either job.
    for path in [*job.iterdir(), *threads.iterdir()]:
        if path.is_file():
            text = path.read_bytes().decode("latin-1")
            assert [raw for raw in raw_ids() if raw in text] == [], path.name
    shown = run_aner("parallel", "status", "--job", str(job))
    assert shown.returncode == 0, shown.stderr
    assert "hosts     2 workers on 1 host\n" in shown.stdout
