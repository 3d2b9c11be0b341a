"""Computations as installed plugins (docs/contracts.md, section 15), discovered from real
distributions: a `*.dist-info` folder with its entry points and RECORD beside the package it
installs, on a folder put on `sys.path`, read by `importlib.metadata` as pip's are. A broken
plugin is one line naming its distribution and never breaks aner's own computations; the
current directory is never a source of plugins."""

from __future__ import annotations

import hashlib
import os
import sys
from base64 import urlsafe_b64encode
from pathlib import Path

import pytest

from aner_worker.plugins import Plugin, discover
from aner_worker.plugins.discovery import discover_in, trusted_path
from aner_worker.plugins.identity import identity_of
from protocol.connection import plugin_difference, plugin_digest

SIMULATION = """
from aner_worker.plugins import Param, Simulation
DECLARED = Simulation(
    function="{package}.model:f", draws=2, outputs=("x",),
    params=(Param("scale", 1.0, 0.0, 10.0),), contract="test/{package}/v1",
)
"""


def install(site: Path, distribution: str, package: str, entry: str, init: str) -> Path:
    """A distribution `distribution` 1.0 installed into `site` as pip would: its package
    (`__init__.py` holding `init`) and a dist-info with one entry point `entry`."""
    folder = site / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(init.format(package=package))
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[aner.computations]\n{entry}\n")
    rows = []
    for path in [folder / "__init__.py", info / "METADATA", info / "entry_points.txt"]:
        digest = urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=")
        rows.append(f"{path.relative_to(site)},sha256={digest.decode()},{path.stat().st_size}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def everything(site: Path) -> list[str]:
    return [str(site), *trusted_path()]


def test_aner_declares_its_own_computations_by_entry_point() -> None:
    found = discover()
    own = [f.name for f in found.found if f.builtin]
    assert own == ["monte-carlo", "regression", "dense", "search"]
    assert all(isinstance(f.declaration, Plugin) for f in found.found if f.builtin)


def test_a_plugin_is_found_with_its_distribution_and_version(site: Path) -> None:
    install(site, "lab-ok", "lab_ok", "lab-ok = lab_ok:DECLARED", SIMULATION)
    found = discover_in(everything(site))
    plugin = found.get("lab-ok")
    assert plugin is not None and not plugin.builtin
    assert (plugin.distribution, plugin.version) == ("lab-ok", "1.0")
    assert found.problems == ()


def test_a_plugin_that_fails_to_import_is_one_line_and_breaks_nothing(site: Path) -> None:
    install(site, "lab-broken", "lab_broken", "broken = lab_broken:DECLARED", "1 / 0\n")
    found = discover_in(everything(site))
    assert found.problems == (
        "plugin lab-broken 1.0: computation 'broken': cannot import lab_broken:DECLARED: "
        "ZeroDivisionError: division by zero",
    )
    own = [f.name for f in found.found if f.builtin]
    assert own == ["monte-carlo", "regression", "dense", "search"]
    assert found.get("broken") is None


def test_a_plugin_cannot_take_a_name_aner_has(site: Path) -> None:
    install(site, "lab-thief", "lab_thief", "monte-carlo = lab_thief:DECLARED", SIMULATION)
    found = discover_in(everything(site))
    assert found.problems == (
        "plugin lab-thief 1.0: computation 'monte-carlo': the name is taken by aner: rename "
        "its entry point",
    )
    mc = found.get("monte-carlo")
    assert mc is not None and mc.builtin


def test_an_entry_point_that_is_no_declaration_is_named(site: Path) -> None:
    install(site, "lab-odd", "lab_odd", "odd = lab_odd:DECLARED", "DECLARED = 42\n")
    (problem,) = discover_in(everything(site)).problems
    assert problem == (
        "plugin lab-odd 1.0: computation 'odd': lab_odd:DECLARED is a int, not an aner Plugin "
        "or Simulation (aner_worker.plugins)"
    )


def test_a_declaration_out_of_shape_is_named(site: Path) -> None:
    bad = SIMULATION.replace('Param("scale", 1.0', 'Param("scale", 99.0')
    install(site, "lab-shape", "lab_shape", "shape = lab_shape:DECLARED", bad)
    (problem,) = discover_in(everything(site)).problems
    assert problem == (
        "plugin lab-shape 1.0: computation 'shape': parameter scale: default 99.0 is outside "
        "[0.0, 10.0]"
    )


def test_the_current_directory_is_never_a_source_of_plugins(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `python -m aner` puts the working directory first on sys.path: a dist-info there (a
    # folder someone happened to start in) must not add code.
    install(site, "lab-here", "lab_here", "here = lab_here:DECLARED", SIMULATION)
    monkeypatch.chdir(site)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    assert str(site) not in trusted_path() and "" not in trusted_path()
    assert discover_in(trusted_path()).get("here") is None


def test_a_module_shadowed_from_elsewhere_is_refused(site: Path, tmp_path: Path) -> None:
    install(site, "lab-shadow", "lab_shadow", "shadow = lab_shadow:DECLARED", SIMULATION)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "lab_shadow").mkdir(parents=True)
    (elsewhere / "lab_shadow" / "__init__.py").write_text("raise SystemExit('never run')\n")
    sys.path.insert(0, str(elsewhere))
    try:
        (problem,) = discover_in(everything(site)).problems
    finally:
        sys.path.remove(str(elsewhere))
    assert problem.startswith(
        "plugin lab-shadow 1.0: computation 'shadow': its module lab_shadow would be imported "
        f"from {elsewhere / 'lab_shadow' / '__init__.py'}, not from the installed distribution"
    )


def test_an_identity_names_the_first_file_that_differs(site: Path) -> None:
    folder = install(site, "lab-id", "lab_id", "id = lab_id:DECLARED", SIMULATION)
    found = discover_in(everything(site)).get("id")
    assert found is not None
    before = identity_of(found.dist, found.modules)
    assert set(before.files) == {"lab_id/__init__.py"}  # not the dist-info
    (folder / "__init__.py").write_text((folder / "__init__.py").read_text() + "# edited\n")
    after = identity_of(found.dist, found.modules)
    assert plugin_digest(after) != plugin_digest(before)
    difference = plugin_difference(before, after, "when it began", "installed now")
    assert difference is not None
    assert difference.startswith("lab_id/__init__.py differs (sha256:")
    assert difference.endswith(" installed now)")
    assert plugin_difference(before, before, "a", "b") is None
    assert os.path.basename(str(found.dist.locate_file(""))) == "site"
