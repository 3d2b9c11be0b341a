"""Every fact is stated once and imported (issue 26, item 2; STYLE 18): no public module-level
constant of the product is assigned the same value under the same name in two modules (a
copy that would drift, as the search's "Dense's own default" chunk of 256 did from Dense's
128). `aner_worker/oracle.py` restates the streams on purpose: an oracle that imported the
implementation's constants would check nothing."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "aner_worker", "aner_coord")
INDEPENDENT = {"aner_worker/oracle.py"}


def constants() -> dict[tuple[str, str], list[str]]:
    """(name, value as source) -> the modules that assign it at module level."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where in INDEPENDENT:
                continue
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                elif isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                else:
                    continue
                for target in targets:
                    name = target.id if isinstance(target, ast.Name) else ""
                    if name.isupper() and not name.startswith("_") and len(name) > 1:
                        found[(name, ast.unparse(value))].append(where)
    return found


def test_no_public_constant_is_stated_twice() -> None:
    twice = {key: where for key, where in constants().items() if len(where) > 1}
    assert twice == {}


def test_the_check_sees_a_constant_stated_twice() -> None:
    # The control: names the check must see, each defined once where it is stated.
    found = constants()
    assert found[("DEFAULT_CHUNK_ROWS", "128")] == ["aner_worker/kernels/dense/params.py"]
    assert found[("MAX_LAYER", "4096")] == ["aner_coord/computations/dense/options.py"]
