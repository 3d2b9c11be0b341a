"""A real Jupyter kernel (ipykernel, driven through jupyter_client) interrupted in the middle
of a long call: the cell fails with JobCancelled chained from the KeyboardInterrupt, and soon
after nothing of the call is left: the kernel process is idle, no `aner-*` thread remains,
no worker process remains (one-off calls) or computes (a session's kept workers).

A kernel interrupt is SIGINT to the kernel's whole process group, so the local pipe workers
receive it too: they ignore it and stop when their coordinator cancels (aner_worker.worker).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from suite_env import child_env
from support import ROOT, wait_for, write_pipe_pair

jupyter_client = pytest.importorskip("jupyter_client")
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

DEADLINE_S = 30  # generous: the checks poll, and pass as soon as they hold

SETUP = """
import sys, threading, psutil
from aner_coord import parallel
GROUP = parallel.cluster({cluster!r}, chunk=10**9)
LOCAL = parallel.local(2, chunk=10**9)
"""

REPORT = """
import json
error = sys.last_value
workers = [c for c in psutil.Process().children(recursive=True)
           if c.status() != psutil.STATUS_ZOMBIE]
print(json.dumps({{
    "error": type(error).__name__,
    "cause": type(error.__cause__).__name__,
    "context": type(error.__context__).__name__,
    "threads": [t.name for t in threading.enumerate()],
    "workers": [w.pid for w in workers],
    "worker_cpu": sum(sum(w.cpu_times()[:2]) for w in workers),
}}))
"""


class Kernel:
    def __init__(self, manager: KernelManager) -> None:
        self.manager = manager
        self.client = manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        assert manager.provisioner is not None
        pid = manager.provisioner.process.pid  # type: ignore[attr-defined]
        self.process = psutil.Process(pid)

    def execute(self, code: str) -> str:
        """Run a cell to its end; return its stdout (its error is raised)."""
        msg_id = self.client.execute(code)
        reply = self.reply(msg_id)
        assert reply["content"]["status"] == "ok", reply["content"]
        return self.stdout(msg_id)

    def reply(self, msg_id: str) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = self.client.get_shell_msg(timeout=DEADLINE_S)
            if message["parent_header"].get("msg_id") == msg_id:
                return message

    def stdout(self, msg_id: str) -> str:
        text = []
        while True:
            message = self.client.get_iopub_msg(timeout=DEADLINE_S)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
                text.append(message["content"]["text"])
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return "".join(text)

    def cpu(self) -> float:
        return float(sum(self.process.cpu_times()[:2]))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    specs = tmp_path_factory.mktemp("kernels")
    spec = specs / "aner-test"
    spec.mkdir()
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "aner test", "language": "python"})
    )
    manager = KernelManager(
        kernel_name="aner-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)])
    )
    env = child_env(PYTHONPATH=str(ROOT))
    manager.start_kernel(cwd=str(ROOT), env=env)
    running: Kernel | None = None
    try:
        running = Kernel(manager)
        cluster = write_pipe_pair(tmp_path_factory.mktemp("cluster") / "cluster")
        running.execute(SETUP.format(cluster=str(cluster)))
        yield running
    finally:
        if running is not None:
            running.client.stop_channels()
        manager.shutdown_kernel(now=True)
        manager.context.destroy(linger=0)


def _interrupt_when_computing(kernel: Kernel, code: str) -> dict[str, Any]:
    """Start `code`, interrupt the kernel once the call computes, return the error reply."""

    def cpu() -> float:  # the kernel's and its workers' (those alive now), in seconds
        children = kernel.process.children(recursive=True)
        return kernel.cpu() + sum(sum(c.cpu_times()[:2]) for c in children)

    began = cpu()
    msg_id = kernel.client.execute(code)

    def computing() -> bool:
        return cpu() - began > 0.5

    wait_for(computing, DEADLINE_S, "the call to compute")
    interrupted = time.monotonic()
    kernel.manager.interrupt_kernel()
    reply = kernel.reply(msg_id)
    print(f"the cell ended {time.monotonic() - interrupted:.2f} s after the interrupt")
    kernel.stdout(msg_id)
    return reply


def _quiet(kernel: Kernel, *, workers_remain: bool) -> dict[str, Any]:
    """Poll until nothing of the call runs: no aner-* call thread, no (computing) worker,
    and the kernel process idle over an interval; return the last report."""
    state: dict[str, Any] = {}

    def check() -> bool:
        state.update(json.loads(kernel.execute(REPORT.format())))
        threads = [t for t in state["threads"] if t.startswith("aner") and t != "aner-session"]
        if threads or (state["workers"] and not workers_remain):
            return False
        before = kernel.cpu()
        time.sleep(0.5)
        after = json.loads(kernel.execute(REPORT.format()))
        state["kernel_busy"] = kernel.cpu() - before
        state["worker_busy"] = after["worker_cpu"] - state["worker_cpu"]
        return bool(state["kernel_busy"] < 0.2 and state["worker_busy"] < 0.2)

    wait_for(check, DEADLINE_S, "the interrupted call to leave nothing running")
    return state


@pytest.mark.parametrize("execution", ["LOCAL", "GROUP"])
def test_a_kernel_interrupt_cancels_a_one_off_call(kernel: Kernel, execution: str) -> None:
    code = f"parallel.monte_carlo(samples=10**10, seed=1, execution={execution})"
    reply = _interrupt_when_computing(kernel, code)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "JobCancelled", reply["content"]
    state = _quiet(kernel, workers_remain=False)
    assert state["error"] == "JobCancelled"
    assert "KeyboardInterrupt" in (state["cause"], state["context"]), state
    assert state["workers"] == []
    assert not [t for t in state["threads"] if t.startswith("aner")], state["threads"]


def test_a_kernel_interrupt_cancels_a_session_call_and_the_session_goes_on(
    kernel: Kernel,
) -> None:
    kernel.execute(
        "S = parallel.session(GROUP)\nS.monte_carlo(samples=10**6, seed=42, chunk=10**5)"
    )
    reply = _interrupt_when_computing(kernel, "S.monte_carlo(samples=10**10, seed=1)")
    assert reply["content"]["ename"] == "JobCancelled", reply["content"]
    state = _quiet(kernel, workers_remain=True)
    assert "KeyboardInterrupt" in (state["cause"], state["context"]), state
    out = kernel.execute("print(S.monte_carlo(samples=10**7, seed=42, chunk=10**6).hits)")
    assert out.split() == ["7856672"]
    kernel.execute("S.close()")
    state = json.loads(kernel.execute(REPORT.format()))
    assert state["workers"] == []
    assert "aner-session" not in state["threads"]


def _outputs(kernel: Kernel, msg_id: str) -> list[dict[str, Any]]:
    """The cell's display messages, in order, up to its end."""
    shown = []
    while True:
        message = kernel.client.get_iopub_msg(timeout=DEADLINE_S)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] in ("display_data", "update_display_data"):
            shown.append(message)
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return shown


def test_a_cell_shows_a_progress_bar_that_updates_before_the_call_returns(kernel: Kernel) -> None:
    code = (
        "R = parallel.monte_carlo(samples=10**8, seed=42, progress=True,\n"
        "                         execution=parallel.local(2, chunk=10**6))\n"
        "print(R.hits)"
    )
    msg_id = kernel.client.execute(code)
    reply = kernel.reply(msg_id)
    assert reply["content"]["status"] == "ok", reply["content"]
    shown = _outputs(kernel, msg_id)
    kinds = [m["msg_type"] for m in shown]
    print(f"{len(shown)} progress outputs: {kinds.count('update_display_data')} updates")
    assert kinds[0] == "display_data" and kinds.count("display_data") == 1, kinds
    assert kinds.count("update_display_data") >= 1, kinds  # more than one update in all
    ids = {m["content"]["transient"]["display_id"] for m in shown}
    assert len(ids) == 1  # one bar, replaced in place
    last = shown[-1]["content"]["data"]
    assert "<progress" in last["text/html"]
    assert last["text/plain"].startswith("COMPLETED"), last["text/plain"]
    assert "100,000,000 of 100,000,000 samples (100.0%)" in last["text/plain"]
    assert kernel.execute("print(R.hits)").split() == ["78542873"]


def test_a_kernel_interrupt_cancels_a_call_showing_progress(kernel: Kernel) -> None:
    code = "parallel.monte_carlo(samples=10**10, seed=1, execution=LOCAL, progress=True)"
    reply = _interrupt_when_computing(kernel, code)
    assert reply["content"]["ename"] == "JobCancelled", reply["content"]
    state = _quiet(kernel, workers_remain=False)
    assert "KeyboardInterrupt" in (state["cause"], state["context"]), state
    assert not [t for t in state["threads"] if t.startswith("aner")], state["threads"]
