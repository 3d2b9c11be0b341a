"""`.ci/ensure-sshd` (and `.ci/ensure-slurm`, through the same `.ci/apt-get-waiting`) waits
while another process holds the package manager's lock, bounded and saying so, instead of
failing at once. A fake `apt-get` (and `sudo`, for a user who is not root) first in PATH
answers as apt-get does while the lock is held."""

from __future__ import annotations

import subprocess
from pathlib import Path

from suite_env import child_env
from support import ROOT

SCRIPT = ROOT / ".ci" / "ensure-sshd"
HELD = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"


def fake_tools(tmp_path: Path, busy_calls: int) -> dict[str, str]:
    """A PATH whose apt-get fails with the lock message for its first `busy_calls` calls
    (all of them for -1), then succeeds, `install` creating the fake sshd."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sshd = tmp_path / "sshd"
    (bin_dir / "apt-get").write_text(
        "#!/bin/bash\n"
        f'calls=$(cat "{tmp_path}/calls" 2>/dev/null || echo 0)\n'
        f'echo $((calls + 1)) > "{tmp_path}/calls"\n'
        f"if [[ {busy_calls} -lt 0 || $calls -lt {busy_calls} ]]; then\n"
        f'  echo "{HELD}" >&2; exit 100\n'
        "fi\n"
        f'if [[ " $* " == *" install "* ]]; then\n'
        f'  printf "#!/bin/sh\\n" > "{sshd}"; chmod +x "{sshd}"\n'
        "fi\n"
    )
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in ("apt-get", "sudo"):
        (bin_dir / tool).chmod(0o755)
    return child_env(PATH=f"{bin_dir}:/usr/bin:/bin", ENSURE_SSHD=str(sshd))


def test_it_waits_for_the_lock_and_says_so_once(tmp_path: Path) -> None:
    env = fake_tools(tmp_path, busy_calls=2)
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sshd").exists()
    assert int((tmp_path / "calls").read_text()) == 4  # two refusals, update, install
    waiting = [line for line in done.stderr.splitlines() if "waiting for it" in line]
    assert waiting == [
        "ensure-sshd: another process holds the package manager's lock; waiting for it "
        "(at most 600 s, APT_LOCK_WAIT_S)"
    ]


def test_the_wait_is_bounded_and_the_failure_names_the_bound(tmp_path: Path) -> None:
    env = {**fake_tools(tmp_path, busy_calls=-1), "APT_LOCK_WAIT_S": "3"}
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 100
    assert not (tmp_path / "sshd").exists()
    assert done.stderr.splitlines()[-1] == (
        "ensure-sshd: the package manager's lock was still held after 3 s (APT_LOCK_WAIT_S); "
        "run this again once the other apt or dpkg has ended"
    )
