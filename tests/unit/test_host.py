"""The host identity (`aner_worker.host`, docs/contracts.md, section 18): a salted hash of
the machine ID and the boot id, stable, different when either input differs, never
containing either raw value, and None with a note where neither file says anything. The
file paths are the function's parameters: the tests write their own files."""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path

import msgspec
import pytest

from aner_worker.host import BOOT_ID, HOST_SALT, MACHINE_ID, host_identity
from protocol import HOST_HEX_DIGITS, Accepted, CoordinatorConnection, WorkerConnection

MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"
BOOT = "80ae5233-a68f-49d5-8218-b67e31822282"
OTHER_BOOT = "80ae5233-a68f-49d5-8218-b67e31822283"  # one digit apart: a reboot
FP = "sha256:" + "0" * 64


def files(
    tmp_path: Path, machine: str | None = MACHINE, boot: str | None = BOOT
) -> tuple[Path, Path]:
    """A machine-id and a boot id file as the system writes them (one line each); None
    leaves that file out."""
    machine_path, boot_path = tmp_path / "machine-id", tmp_path / "boot_id"
    for path, value in ((machine_path, machine), (boot_path, boot)):
        if value is not None:
            path.write_text(value + "\n")
    return machine_path, boot_path


def raw_pieces(*values: str) -> list[str]:
    """Every 8-character piece of each raw value, dashes and all: none may show."""
    out = []
    for value in values:
        for text in (value, value.replace("-", "")):
            out += [text[i : i + 8] for i in range(len(text) - 7)]
    return out


def test_the_identity_is_the_salted_hash_the_contract_states(tmp_path: Path) -> None:
    identity = host_identity(*files(tmp_path))
    message = f"machine-id={MACHINE}\nboot-id={BOOT}\n".encode()
    expected = hmac.new(b"aner-host/v1", message, hashlib.sha256).hexdigest()[:32]
    assert HOST_SALT == b"aner-host/v1" and HOST_HEX_DIGITS == 32
    assert identity.value == expected and identity.notes == ()
    assert re.fullmatch(r"[0-9a-f]{32}", expected)


def test_the_identity_is_stable_and_never_contains_a_raw_value(tmp_path: Path) -> None:
    paths = files(tmp_path)
    first, second = host_identity(*paths), host_identity(*paths)
    assert first == second and first.value is not None
    # Not in the value, and not in the Welcome that carries it across the wire.
    worker = WorkerConnection(FP, 2, "p", {"mc"}, host=first.value)
    coordinator = CoordinatorConnection("w1", 1, FP, ("mc",))
    worker.receive(coordinator.hello())
    reply = worker.reply()
    (accepted,) = coordinator.receive(reply)
    assert isinstance(accepted, Accepted) and accepted.welcome.host == first.value
    seen = first.value + reply.decode("latin-1") + msgspec.json.encode(accepted.welcome).decode()
    assert [piece for piece in raw_pieces(MACHINE, BOOT) if piece in seen] == []


@pytest.mark.parametrize(
    ("machine", "boot"),
    [(MACHINE, OTHER_BOOT), ("0" * 31 + "1", BOOT), (None, BOOT), (MACHINE, None)],
    ids=["rebooted", "another machine", "no machine-id", "no boot id"],
)
def test_either_input_changes_the_identity(
    tmp_path: Path, machine: str | None, boot: str | None
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = host_identity(*files(tmp_path / "a"))
    other = host_identity(*files(tmp_path / "b", machine, boot))
    assert base.value is not None and other.value is not None and other.value != base.value


def test_one_missing_file_is_a_note_and_the_other_still_identifies(tmp_path: Path) -> None:
    identity = host_identity(*files(tmp_path, machine=None))
    assert identity.value is not None
    assert len(identity.notes) == 1 and identity.notes[0].startswith("no machine-id (")
    assert "No such file" in identity.notes[0]


@pytest.mark.parametrize(
    ("machine", "boot"),
    [(None, None), ("uninitialized", None), ("", "not-a-boot-id"), (MACHINE.upper(), "x" * 36)],
    ids=["neither file", "uninitialised machine-id", "empty and malformed", "wrong formats"],
)
def test_nothing_readable_is_none_with_a_note_never_a_made_up_value(
    tmp_path: Path, machine: str | None, boot: str | None
) -> None:
    identity = host_identity(*files(tmp_path, machine, boot))
    assert identity.value is None
    assert identity.notes[-1] == "host identity unknown"
    assert [n.split(" (")[0] for n in identity.notes[:-1]] == ["no machine-id", "no boot id"]


def test_a_file_that_is_not_text_is_no_value(tmp_path: Path) -> None:
    machine, boot = files(tmp_path)
    machine.write_bytes(b"\xff" * 33)
    identity = host_identity(machine, boot)
    assert identity.value is not None and identity.notes == (
        f"no machine-id ({machine}: not ASCII)",
    )


def test_this_host_has_an_identity_where_the_system_files_exist() -> None:
    identity = host_identity()
    if not (MACHINE_ID.exists() and BOOT_ID.exists()):
        pytest.skip("this system lacks /etc/machine-id or the boot id")
    assert identity.value is not None and identity.notes == ()
    raw = [MACHINE_ID.read_text().strip(), BOOT_ID.read_text().strip()]
    assert [piece for piece in raw_pieces(*raw) if piece in identity.value] == []


def test_the_inventory_shows_the_identity_or_says_why_it_has_none(tmp_path: Path) -> None:
    from aner_worker.inventory import collect, format_table

    known = collect(machine_id=tmp_path / "absent", boot_id=files(tmp_path)[1])
    assert known.host is not None and known.to_dict()["host"] == known.host
    assert [n for n in known.notes if n.startswith("host: ")] == [
        f"host: no machine-id ({tmp_path / 'absent'}: No such file or directory)"
    ]
    unknown = collect(machine_id=tmp_path / "absent", boot_id=tmp_path / "absent")
    assert unknown.host is None and unknown.to_dict()["host"] is None
    assert "host: host identity unknown" in unknown.notes
    assert "host identity        unknown (see notes)" in format_table(unknown)
