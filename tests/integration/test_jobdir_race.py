"""The job directory is reached through a descriptor, never by path after mkdir.

An attacker who can write to the parent (world-writable, no sticky bit) swaps the new
directory for a symbolic link, or for another directory, at the worst moment: right after
aner's mkdir and before it opens the directory. The test drives that moment
deterministically through `jobdir.directory._make_dir` (the real mkdir, then the real swap)
and checks that nothing outside the job is written and the run fails cleanly, before any
work.
"""

from __future__ import annotations

import asyncio
import os
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from suite_env import child_env
from support import run_aner

from aner_coord import jobdir
from aner_coord.admission import admit
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.errors import EXIT_FAILED
from aner_coord.job.execute import execute
from aner_coord.requests import JobRequest

PRECIOUS = {
    "coordinator.lock": "precious lock\n",
    "run-manifest.json": "precious manifest\n",
    "status.json": "precious status\n",
    "coordinator.log": "precious log\n",
}


def world_writable_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)  # world-writable and, on purpose, no sticky bit
    assert not parent.stat().st_mode & stat.S_ISVTX
    return parent


def victim(tmp_path: Path) -> Path:
    target = tmp_path / "victim"
    target.mkdir()
    for name, text in PRECIOUS.items():
        (target / name).write_text(text)
    return target


def victim_untouched(target: Path) -> None:
    assert sorted(os.listdir(target)) == sorted(PRECIOUS)
    for name, text in PRECIOUS.items():
        assert (target / name).read_text() == text, name


def swap_after_mkdir(
    monkeypatch: pytest.MonkeyPatch, plant: Callable[[Path], None], parent: Path
) -> list[Path]:
    """Right after aner's mkdir, move the new directory away and `plant` something else at
    its name. Returns where the real directory went."""
    real = jobdir.directory._make_dir
    moved: list[Path] = []

    def make_then_swap(parent_fd: int, name: str) -> os.stat_result:
        made = real(parent_fd, name)
        away = parent / f"{name}.moved"
        os.rename(parent / name, away)
        moved.append(away)
        plant(parent / name)
        return made

    monkeypatch.setattr(jobdir.directory, "_make_dir", make_then_swap)
    return moved


def run_job(job: Path) -> None:
    request = MonteCarloRequest(samples=100_000, seed=1)
    prepared = admit(JobRequest(computation=request, output=str(job)))
    asyncio.run(execute(prepared))


def test_a_symlink_swapped_in_after_mkdir_makes_the_run_fail_and_writes_nothing_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = world_writable_parent(tmp_path)
    target = victim(tmp_path)
    job = parent / "job"
    moved = swap_after_mkdir(monkeypatch, lambda at: at.symlink_to(target), parent)
    with pytest.raises(jobdir.JobDirError) as caught:
        run_job(job)
    assert caught.value.exit_code == EXIT_FAILED
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"output {job} was replaced right after aner created it (")
    assert message.endswith(f"another user can write to {parent}; use a directory only you can "
                            "write to")  # fmt: skip
    victim_untouched(target)
    assert os.listdir(moved[0]) == []  # and nothing went into the real one either
    assert job.is_symlink()  # the attacker's link is not ours to remove


def test_another_directory_swapped_in_after_mkdir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = world_writable_parent(tmp_path)

    def plant_directory(at: Path) -> None:
        at.mkdir()
        at.chmod(0o777)

    moved = swap_after_mkdir(monkeypatch, plant_directory, parent)
    job = parent / "job"
    with pytest.raises(jobdir.JobDirError, match="another directory stands there"):
        run_job(job)
    assert os.listdir(job) == []
    assert os.listdir(moved[0]) == []


def test_the_cli_run_fails_with_one_line_when_the_directory_is_swapped(tmp_path: Path) -> None:
    """The same swap in a real `aner parallel run` process (a sitecustomize wraps _make_dir)."""
    parent = world_writable_parent(tmp_path)
    target = victim(tmp_path)
    job = parent / "job"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        import os
        from aner_coord.jobdir import directory
        _real = directory._make_dir
        def _swap(parent_fd, name):
            made = _real(parent_fd, name)
            os.rename(name, name + ".moved", src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            os.symlink({str(target)!r}, name, dir_fd=parent_fd)
            return made
        directory._make_dir = _swap
        """)
    )
    done = run_aner(
        "parallel", "run", "--samples", "100000", "--seed", "1", "--output", str(job),
        env=child_env(PYTHONPATH=str(hook)),
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"aner: output {job} was replaced right after aner created it")
    victim_untouched(target)
    assert os.listdir(parent / "job.moved") == []


def test_writes_follow_the_descriptor_when_the_directory_is_swapped_later(
    tmp_path: Path,
) -> None:
    parent = world_writable_parent(tmp_path)
    target = victim(tmp_path)
    job = parent / "job"
    with jobdir.JobDir.create(job) as directory:
        os.rename(job, parent / "moved")
        job.symlink_to(target)
        directory.write_json(jobdir.MANIFEST, {"schema": "test"})
        directory.write_bytes(jobdir.STATUS, b"{}\n")
        lock = jobdir.JobLock(directory)
        lock.acquire()
        lock.release()
        log_fd = directory.open_log()
        os.close(log_fd)
    victim_untouched(target)
    assert sorted(os.listdir(parent / "moved")) == sorted(
        [jobdir.MANIFEST, jobdir.STATUS, jobdir.LOG]
    )


def test_a_planted_lock_link_is_never_followed(tmp_path: Path) -> None:
    target = victim(tmp_path)
    job = tmp_path / "job"
    job.mkdir(mode=0o700)
    (job / jobdir.LOCK).symlink_to(target / "coordinator.lock")
    with pytest.raises(jobdir.JobDirError) as caught:
        jobdir.JobLock(job).acquire()
    assert str(caught.value).startswith(f"cannot lock {job / jobdir.LOCK}: ")
    assert not jobdir.lock_is_held(job)
    victim_untouched(target)


def test_new_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with jobdir.JobDir.create(tmp_path / "job") as directory:
            directory.write_json(jobdir.MANIFEST, {})
            os.close(directory.open_log())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "job").stat().st_mode) == 0o700
    for name in (jobdir.MANIFEST, jobdir.LOG):
        assert stat.S_IMODE((tmp_path / "job" / name).stat().st_mode) == 0o600, name
