"""Shared fixtures for the test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import suite_env
from slurm_support import SlurmCluster, SlurmUnavailable, start_slurm
from sshd_support import SshdUnavailable, SshServer, start_sshd
from support import Coordinators

# Slot leases (docs/contracts.md, section 13) are off for the suite, which runs many jobs at
# once on two CPUs under pytest-xdist: they would queue behind each other. The lease tests
# switch them back on with a table of their own (`tests/integration/test_sharing_a_machine.py`).
# The job index (`aner parallel jobs`) of each test process is its own, not the user's; a
# subprocess environment is built with `suite_env.child_env`, which keeps both.
suite_env.install()


@pytest.fixture(scope="session", autouse=True)
def _the_users_runtime_directory_is_untouched(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Fails the run (an error at the last test's teardown) if any job index entry or lease
    holder in the user's own runtime directory points into this run's temporary folders."""
    yield
    found = suite_env.strays(tmp_path_factory.getbasetemp())
    if found:
        pytest.fail(
            "the suite wrote into the user's runtime directory "
            f"({suite_env.real_runtime_dir()}): " + "; ".join(found),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A real OpenSSH sshd on 127.0.0.1 for the current user (see tests/sshd_support.py).

    Fields: `home` (a client HOME with alias, key and known_hosts), `alias`, `port`, `user`,
    `env` (os.environ with that HOME, for subprocesses) and `write_home(path,
    wrong_host_key=..., with_user_key=...)` for negative tests.  Fails, never skips, when
    sshd is missing.
    """
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdUnavailable as exc:
        pytest.fail(f"real-SSH tests need OpenSSH's sshd: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real single-node Slurm cluster (munged, slurmctld, slurmd; see tests/slurm_support.py).

    Fields: `env` (os.environ with SLURM_CONF, for subprocesses), `conf`, `node`, `cpus` and
    `command(*argv)` for Slurm's client commands.  Fails, never skips, when Slurm is missing.
    """
    try:
        cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as exc:
        pytest.fail(f"real-Slurm tests need Slurm and munge: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def coordinators() -> Iterator[Coordinators]:
    """Coordinator pids a test started; whatever is still alive at teardown is killed."""
    tracked = Coordinators()
    try:
        yield tracked
    finally:
        tracked.cleanup()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`), every test that uses
    the real Slurm runs in one xdist worker: one single-node cluster per run, as without
    xdist, and its tests see only their own job steps.  The tests of a module that share a
    module-scoped fixture (the malformed-file corpora, driven once in about 50 s) run in one
    xdist worker too, or each worker would build it again.  Each xdist worker starts its
    own sshd (a cheap session fixture on a free port). (Until this hook ran first, xdist
    read the groups before they were set: each worker started its own Slurm.)"""
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if "slurm" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"module:{item.module.__name__}"))


def _uses_a_module_fixture(item: pytest.Function) -> bool:
    definitions = item._fixtureinfo.name2fixturedefs.values()
    return any(d.scope == "module" for defs in definitions for d in defs)
