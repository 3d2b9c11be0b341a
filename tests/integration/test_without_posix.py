"""Local computation where POSIX is missing (aner_coord/posix.py).

Each case runs in a fresh interpreter made to look like Windows where it matters here:
`fcntl`, `termios`, `tty`, `pty`, `resource`, `grp`, `pwd` and `uvloop` cannot be imported,
the signals Windows lacks (SIGHUP, SIGKILL, SIGPIPE, ...) are gone from `signal`, and event
loops cannot handle signals. There the API imports and local runs give the exact hits (and
a Ctrl-C still cancels gracefully), while job directories, background jobs and worker groups
(local pipes, SSH, Slurm) are refused in one line, before anything is made or started.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from suite_env import child_env
from support import ROOT, write_cluster

HITS_1E6_SEED_42 = 785_882

NOT_POSIX = textwrap.dedent(
    """
    import asyncio, importlib.abc, signal, sys
    BLOCK = {"fcntl", "termios", "tty", "pty", "resource", "grp", "pwd", "uvloop"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCK:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    for module in list(sys.modules):
        if module.split(".")[0] in BLOCK:
            del sys.modules[module]
    for name in ("SIGHUP", "SIGKILL", "SIGPIPE", "SIGCHLD", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            delattr(signal, name)

    def no_signal_handlers(self, *args, **kwargs):
        raise NotImplementedError  # as Windows' event loops do

    asyncio.unix_events._UnixSelectorEventLoop.add_signal_handler = no_signal_handlers
    """
)


def without_posix(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = child_env(PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", NOT_POSIX + textwrap.dedent(script)],
        capture_output=True, text=True, timeout=300, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip


def test_the_api_imports_and_local_runs_give_the_exact_hits(tmp_path: Path) -> None:
    done = without_posix(
        tmp_path,
        """
        from aner_coord import parallel
        assert "fcntl" not in sys.modules and "uvloop" not in sys.modules
        print(parallel.monte_carlo(samples=10**6, seed=42, execution=parallel.local(2)).hits)
        print(parallel.monte_carlo(samples=10**6, seed=42).hits)
        with parallel.session() as s:
            print(s.monte_carlo(samples=10**6, seed=42).hits)
        print(asyncio.run(parallel.monte_carlo_async(samples=10**6, seed=42)).hits)
        fit = parallel.regression(samples=20_000, steps=3, rate=0.5, seed=7)
        print(len(fit.theta))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(HITS_1E6_SEED_42)] * 4 + ["9"]


def test_an_interrupt_still_cancels_a_local_run_gracefully(tmp_path: Path) -> None:
    # No loop takes signals here: the job runs on a helper thread and the main thread
    # takes the Ctrl-C, as in a notebook.
    done = without_posix(
        tmp_path,
        """
        import _thread, threading
        from aner_coord import parallel
        threading.Timer(1.0, _thread.interrupt_main).start()
        try:
            parallel.monte_carlo(samples=10**10, seed=1, execution=parallel.local(1))
        except parallel.JobCancelled as exc:
            print("cancelled", type(exc.__cause__).__name__)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cancelled", "KeyboardInterrupt"]


def test_job_directories_and_worker_groups_are_refused_in_one_line(tmp_path: Path) -> None:
    cluster = write_cluster(
        tmp_path / "cluster", [("w1", "local", "-", sys.executable, 1), ("s1", "ssh", "h", "/x", 1)]
    )
    done = without_posix(
        tmp_path,
        f"""
        from aner_coord import parallel
        try:
            parallel.monte_carlo(samples=10**6, seed=42, output="job")
        except parallel.RequestError as exc:
            print(exc)
        try:
            parallel.cluster({str(cluster)!r})
        except parallel.RequestError as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "job directories (output=, and so background jobs, status, cancel and resume) need "
        "a POSIX system such as Linux or macOS (the fcntl module is not available); local "
        "computation without a job directory works here",
        "worker groups (local pipes, SSH, Slurm) need a POSIX system such as Linux or macOS "
        "(the fcntl module is not available); local computation without a job directory "
        "works here",
    ]
    assert not (tmp_path / "job").exists()


def test_the_command_line_refuses_background_jobs_in_one_line(tmp_path: Path) -> None:
    done = without_posix(
        tmp_path,
        """
        from aner_coord.cli.main import main
        code = main(["parallel", "run", "--samples", "1000", "--seed", "1", "--workers", "1",
                     "--output", "job", "--background"])
        print("exit", code)
        """,
    )
    assert done.stdout.split() == ["exit", "2"], done.stderr
    assert done.stderr == (
        "aner: job directories (--output, and so background jobs, status, cancel and resume) "
        "need a POSIX system such as Linux or macOS (the fcntl module is not available); "
        "local computation without a job directory works here\n"
    )
    assert not (tmp_path / "job").exists()
