"""Plugins installed for a test as pip installs them: a package and a `*.dist-info` folder
(METADATA, entry points, RECORD) in a site folder that the test puts on `sys.path`, or on
PYTHONPATH for the processes it starts (docs/contracts.md, section 15).

`BROKEN` is a distribution of simulations that break the kit's rules in the ways the
conformance suite (`aner.testing.check_computation`) must catch, beside one that keeps them.
"""

from __future__ import annotations

import hashlib
from base64 import urlsafe_b64encode
from pathlib import Path


def install(
    site: Path, distribution: str, package: str, entry: str, init: str, **modules: str
) -> Path:
    """A distribution `distribution` 1.0 installed into `site` as pip would: its package
    (`__init__.py` holding `init`, with `package` formatted in, and a module for each of
    `modules`) and a dist-info whose entry points are the lines of `entry`."""
    folder = site / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(init.format(package=package))
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[aner.computations]\n{entry}\n")
    rows = []
    files = [*sorted(folder.glob("*.py")), info / "METADATA", info / "entry_points.txt"]
    for path in files:
        digest = urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=")
        rows.append(f"{path.relative_to(site)},sha256={digest.decode()},{path.stat().st_size}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return folder


_DECLARED = """
from aner_worker.plugins import Param, Simulation

def _declared(function, outputs=("x", "y")):
    return Simulation(
        function=f"lab_kit.model:{{function}}", draws=3, outputs=outputs,
        params=(Param("scale", 1.0, 0.0, 10.0), Param("terms", 2, 1, 8, kind="int")),
        contract=f"test/lab-kit/{{function}}/v1",
    )

GOOD = _declared("good")
GLOBAL_RNG = _declared("global_rng")
CLOCK = _declared("clock")
NON_FINITE = _declared("non_finite")
RAISES = _declared("raises")
COUNT = _declared("good", outputs=("x", "y", "z"))
"""

_MODEL = """
import math
import time

import numba
import numpy as np


@numba.njit(nogil=True, cache=False)
def good(u, p):
    return p[0] * u[0], u[1] * u[2] * p[1]


@numba.njit(nogil=True, cache=False)
def global_rng(u, p):  # numpy's global generator (numba's copy), not the sample's stream
    return p[0] * u[0] + 1e-9 * np.random.random(), u[1]


@numba.njit(cache=False)
def clock(u, p):  # the time of day leaks into the result
    with numba.objmode(t="float64"):
        t = time.perf_counter()
    return p[0] * u[0] + 1e-6 * t, u[1]


@numba.njit(nogil=True, cache=False)
def non_finite(u, p):
    return np.inf if u[0] < 1e-3 else p[0] * u[0], u[1]


@numba.njit(nogil=True, cache=False)
def raises(u, p):
    if u[0] < 2e-7:
        raise ValueError("the path left the domain")
    return u[0], u[1]
"""

BROKEN_ENTRIES = "\n".join(
    f"{name} = lab_kit:{attribute}"
    for name, attribute in [
        ("lab-good", "GOOD"),
        ("lab-global-rng", "GLOBAL_RNG"),
        ("lab-clock", "CLOCK"),
        ("lab-non-finite", "NON_FINITE"),
        ("lab-raises", "RAISES"),
        ("lab-count", "COUNT"),
    ]
)


def install_broken(site: Path) -> Path:
    """The distribution `lab-kit` 1.0 of the simulations above, in `site`."""
    return install(site, "lab-kit", "lab_kit", BROKEN_ENTRIES, _DECLARED, model=_MODEL)
