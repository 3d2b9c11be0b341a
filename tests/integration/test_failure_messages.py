"""Every kind of job failure gives a bounded message (issue 25, item 4): one stderr line,
status.json's `error` and `status`'s output each hold at most MAX_MESSAGE_CHARS of it; a
longer message is cut, saying so, and kept whole in the job directory's `error-detail.txt`.

Each case provokes one kind with a real `aner` command and a hostile worker (or a request
that diverges) whose message is as long as it can make it: a failed task's reason at the
wire's 2,000 characters, a lost worker's stderr, a malformed frame, an audit mismatch, an
inconsistent result, a divergence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile import fake_worker, group
from support import run_aner, write_cluster

from aner_coord import parallel
from aner_coord.errors import MAX_MESSAGE_CHARS, bounded_message
from aner_coord.jobdir import ERROR_DETAIL

_TASKS = """
from aner_worker.kernels import KERNELS, decode, encode
from aner_worker.kernels.montecarlo import McParams, McStats
kernel = KERNELS["monte-carlo"]
while True:
    for event in read():
        if isinstance(event, TaskReceived):
            task = event.task
            params = decode(McParams, conn.params_for(task.pass_id).body)
            hits = kernel.run(params, task.start, task.count, None).hits
            {answer}
"""

KINDS = {
    "task failed": (
        _TASKS.format(answer='send(conn.failed(task.task_id, "boom " + "x" * 1500 + " END"))'),
        'worker "bad" failed during task: boom xxx',
        True,
    ),
    "worker lost": (
        'sys.stderr.write("y" * 5000 + " END\\n"); sys.stderr.flush(); sys.exit(7)',
        'worker "bad" failed during run: the worker closed its connection',
        False,
    ),
    "protocol error": (
        'send(b"\\x00\\x00\\x00\\x08" + b"\\xc1" * 8); time.sleep(30)',
        'worker "bad"',
        False,
    ),
    "audit mismatch": (
        _TASKS.format(answer="send(conn.result(task, encode(McStats(hits + 1)), 0.0))"),
        'worker "bad" failed during audit',
        False,
    ),
    "inconsistent result": (
        _TASKS.format(answer="send(conn.result(task, encode(McStats(task.count)), 0.0))"),
        'worker "bad" failed during run: inconsistent result rejected',
        False,
    ),
}


def check_bounded(job: Path, stderr: str, expected: str, cut: bool) -> None:
    lines = stderr.strip().splitlines()
    prefix = f"aner: job failed (job directory {job}): "
    assert lines[-1].startswith(prefix + expected), lines[-1][:300]
    for line in lines:
        assert len(line.removeprefix(prefix)) <= MAX_MESSAGE_CHARS, len(line)
    error = json.loads((job / "status.json").read_text())["error"]
    assert error == lines[-1].removeprefix(prefix)
    shown = run_aner("parallel", "status", "--job", str(job))
    assert shown.returncode == 3
    for line in (shown.stdout + shown.stderr).splitlines():
        assert len(line) <= MAX_MESSAGE_CHARS + 40, len(line)
    detail = job / ERROR_DETAIL
    if cut:
        assert f"characters in all; the whole message is in {ERROR_DETAIL}]" in error
        whole = detail.read_text()
        assert whole.rstrip("\n").endswith("END") and len(whole) > MAX_MESSAGE_CHARS
        assert whole.startswith(error.split(" [... cut:")[0])
    else:
        assert not detail.exists()


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_failure_of_a_worker_is_one_bounded_line(tmp_path: Path, kind: str) -> None:
    behaviour, expected, cut = KINDS[kind]
    prologue = "from protocol import TaskReceived\n"
    exe = fake_worker(tmp_path, "bad", prologue + behaviour)
    cluster = write_cluster(tmp_path / "cluster", [("bad", "local", "-", exe, 1)])
    job = tmp_path / "job"
    audit = ["--audit", "1"] if kind == "audit mismatch" else []
    proc = run_aner("parallel", "run", "--samples", "400000", "--seed", "1", "--chunk", "100000",
                    "--cluster", str(cluster), *audit, "--output", str(job),
                    timeout=300)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    check_bounded(job, proc.stderr, expected, cut)


def test_a_divergence_is_one_bounded_line(tmp_path: Path) -> None:
    job = tmp_path / "job"
    proc = run_aner("parallel", "train", "--teacher", "600,4,2", "--seed", "1", "--epochs", "3",
                    "--optimizer", "sgd", "--lr", "1e300", "--workers", "1", "--output", str(job),
                    timeout=300)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    check_bounded(job, proc.stderr, "numerical divergence", False)


def test_a_message_is_cut_to_one_line_saying_where_the_rest_is() -> None:
    assert bounded_message("short", None) == "short"
    assert bounded_message("two\nlines\r", None) == "two lines "
    long = "z" * 10_000
    cut = bounded_message(long, ERROR_DETAIL)
    assert len(cut) == MAX_MESSAGE_CHARS
    assert cut.endswith(
        f"[... cut: 10,000 characters in all; the whole message is in {ERROR_DETAIL}]"
    )
    assert bounded_message(cut, ERROR_DETAIL) == cut  # what status.json holds stays as it is
    assert bounded_message(long, None).endswith("[... cut: 10,000 characters in all]")


def test_the_api_bounds_the_message_and_keeps_the_whole_in_detail(tmp_path: Path) -> None:
    behaviour, _, _ = KINDS["task failed"]
    exe = fake_worker(tmp_path, "bad", "from protocol import TaskReceived\n" + behaviour)
    with pytest.raises(parallel.JobFailed) as failure:
        parallel.monte_carlo(samples=10**6, seed=1, execution=group(tmp_path, exe, "bad"))
    message = str(failure.value)
    assert len(message) == MAX_MESSAGE_CHARS and message.endswith(" characters in all]")
    assert failure.value.detail.endswith(" END") and failure.value.detail.startswith(message[:400])
