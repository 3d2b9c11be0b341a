"""The suite keeps to itself (issue 36): every subprocess environment a test builds comes
from `suite_env.child_env`, which keeps the suite's own runtime directory and leases off, so
no test reaches the user's job index, lease table or job key. A dict built from
`os.environ`, or one naming PATH or HOME, anywhere else in tests/ is an environment built by
hand (test_malformed_jobs.py and test_systemd.py built theirs without ANER_RUNTIME_DIR, and
`make test` left three jobs in the user's `aner parallel jobs`)."""

from __future__ import annotations

import ast
from pathlib import Path

import suite_env
from support import TESTS

# kernel_sets.py builds the environment of whole pytest runs (`make test-kernel-sets`), whose
# conftest.py then isolates each test process itself.
EXEMPT = {TESTS / "suite_env.py", TESTS / "kernel_sets.py"}
ENV_KEYS = {"PATH", "HOME"}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def hand_built_environments(path: Path) -> list[str]:
    """`path:line` of each environment built in `path` other than by `child_env`."""
    tree = ast.parse(path.read_text(), str(path))
    bases = {  # what child_env starts from may be built any way: it is isolated anyway
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "child_env"
        and node.args
    }
    found = []
    for node in ast.walk(tree):
        built = False
        if id(node) in bases:
            continue
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            unpacked = [v for k, v in zip(node.keys, node.values, strict=True) if k is None]
            built = bool(keys & ENV_KEYS) or any(_is_environ(v) for v in unpacked)
        elif isinstance(node, ast.DictComp):
            built = any(_is_environ(n) for n in ast.walk(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            built = node.func.id == "dict" and any(_is_environ(a) for a in node.args)
        if built:
            found.append(f"{path.relative_to(TESTS.parent)}:{getattr(node, 'lineno', 0)}")
    return found


def test_every_subprocess_environment_comes_from_child_env() -> None:
    sources = sorted(p for p in TESTS.rglob("*.py") if p not in EXEMPT)
    found = [where for path in sources for where in hand_built_environments(path)]
    assert found == [], "build these with suite_env.child_env: " + ", ".join(found)


def test_child_env_keeps_the_suite_to_itself_whatever_its_base() -> None:
    env = suite_env.child_env(dict(PATH="/usr/bin", ANER_RUNTIME_DIR="/home/user/real"))
    assert env["ANER_RUNTIME_DIR"] == suite_env.isolation()["ANER_RUNTIME_DIR"] != "/home/user/real"
    assert env["ANER_LEASES"] == "off" and env["PATH"] == "/usr/bin"
    assert suite_env.child_env(ANER_LEASES="on")["ANER_LEASES"] == "on"


def test_a_stray_in_the_users_runtime_directory_is_found(tmp_path: Path) -> None:
    """The check conftest.py runs at the end of each test process, on a runtime directory
    of the test's own holding what `make test` left before issue 36."""
    real, basetemp = tmp_path / "real", tmp_path / "pytest-7"
    (real / "jobs").mkdir(parents=True)
    (real / "jobs" / "0123456789ab").write_text(f"{basetemp}/test_x0/job\n")
    (real / "jobs" / "ba9876543210").write_text("/home/user/jobs/mine\n")
    found = suite_env.strays(basetemp, real)
    assert found == [f"{real}/jobs/0123456789ab: {basetemp}/test_x0/job"]
