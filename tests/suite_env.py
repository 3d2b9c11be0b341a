"""The suite keeps to itself: the one way a test builds a subprocess environment.

Every test process points aner's runtime directory (the job index behind `aner parallel
jobs`, the lease table) and the job key at its own and switches slot leases off
(`install()`, called by conftest.py before any test runs); a test that runs a subprocess
with an environment of its own builds it with `child_env(...)`, which puts both back
whatever the base it starts from (a private HOME, a bare PATH, os.environ without the
`ANER_` variables). `tests/unit/test_suite_isolation.py` fails if a test builds an
environment any other way.

Which directory is the user's own is worked out once, in the first process of a run,
before anything is changed, and handed to pytest-xdist's workers in `REAL_RUNTIME_ENV`:
`strays(basetemp)` lists what of this run's temporary folders reached it (conftest.py
fails the run with that list; before issue 36 `make test` left three jobs there).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from aner_coord.jobdir.index import STATE_ENV, state_dir
from aner_coord.jobdir.jobkey import KEY_ENV
from aner_worker.leases import DIR_ENV, DISABLE_ENV, runtime_dir

REAL_RUNTIME_ENV = "ANER_TEST_REAL_RUNTIME_DIR"  # the user's own runtime directory
REAL_STATE_ENV = "ANER_TEST_REAL_STATE_DIR"  # and state directory (the durable queue)
_HOLDER_BYTES = 4096


def install() -> None:
    """Give this test process its own runtime directory, leases off (once, at import)."""
    os.environ.setdefault(REAL_RUNTIME_ENV, str(runtime_dir(os.environ)[0]))
    os.environ[DIR_ENV] = tempfile.mkdtemp(prefix="aner-runtime-")
    os.environ[DISABLE_ENV] = "off"
    # The job key that keys ledgers (docs/contracts.md, section 7): the suite's own, made on
    # first use there, never the user's ~/.config/aner/job-key.
    os.environ[KEY_ENV] = os.path.join(tempfile.mkdtemp(prefix="aner-key-"), "job-key")
    # and the durable queue that outlives a reboot (`aner_coord.jobdir.index`)
    os.environ.setdefault(REAL_STATE_ENV, str(state_dir(os.environ)))
    os.environ[STATE_ENV] = tempfile.mkdtemp(prefix="aner-state-")


def isolation() -> dict[str, str]:
    """The variables every child of the suite gets unless the test names them itself (those
    set: outside the suite, as where `make bench` starts the suite's sshd, none may be)."""
    names = (DIR_ENV, DISABLE_ENV, KEY_ENV, STATE_ENV)
    return {name: os.environ[name] for name in names if name in os.environ}


def child_env(base: Mapping[str, str] | None = None, /, **values: str) -> dict[str, str]:
    """`base` (default: this process's environment) with the suite's runtime directory and
    leases off, then `values` (a lease test names its own `ANER_RUNTIME_DIR` and
    `ANER_LEASES="on"` there)."""
    env = dict(os.environ if base is None else base)
    env.update(isolation())
    env.update(values)
    return env


def real_runtime_dir() -> Path:
    return Path(os.environ[REAL_RUNTIME_ENV])


def strays(basetemp: Path, real: Path | None = None) -> list[str]:
    """The entries of the user's own job index, lease tables and durable queue that point
    into `basetemp` (this run's temporary folders): what the suite left where it must not
    write (`real`: a runtime directory to look in instead, for the check's own test)."""
    tables = (
        [real / "jobs", real / "slots", real / "granted"]
        if real is not None
        else [real_runtime_dir() / t for t in ("jobs", "slots", "granted")]
        + [Path(os.environ[REAL_STATE_ENV]) / "queue"]
    )
    roots = {os.fsencode(str(basetemp.absolute())), os.fsencode(str(basetemp.resolve()))}
    found = []
    for table in tables:
        try:
            names = sorted(os.listdir(table))
        except OSError:
            continue
        for name in names:
            path = table / name
            try:
                with open(path, "rb") as entry:
                    data = entry.read(_HOLDER_BYTES)
            except OSError:
                continue
            if any(root in data for root in roots):
                found.append(f"{path}: {data.decode('utf-8', 'replace').strip()}")
    return found
