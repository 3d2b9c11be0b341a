"""The cluster file `ANER_CLUSTER 1`: grammar, exact error lines, file protection, fuzzing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aner_coord.clusterfile import (
    MAX_WORKER_RECORDS,
    BlasChoice,
    ClusterConfig,
    ClusterFileError,
    SlurmEndpoint,
    WorkerRecord,
    load_cluster_file,
    parse_cluster_text,
    parse_slurm_endpoint,
    parse_ssh_endpoint,
)

VALID = """\
# research cluster
ANER_CLUSTER 1

# the machine under the desk
worker "Atlas-01" local "-" "/opt/aner/bin/aner" 2
\tworker  "Atlas-02"\tssh "research-peer" "/opt/aner/bin/aner" 4
worker "gpu_box.3" ssh "alice@10.0.0.7:2222" "/home/alice/my tools/aner" 256
"""


def parse(text: str) -> ClusterConfig:
    return parse_cluster_text(text, "/x/c.txt")


def refused(text: str) -> ClusterFileError:
    with pytest.raises(ClusterFileError) as info:
        parse(text)
    return info.value


def record(body: str) -> str:
    return f"ANER_CLUSTER 1\n{body}\n"


def test_valid_file_parses_every_field() -> None:
    config = parse(VALID)
    assert config.path == "/x/c.txt"
    assert config.workers == (
        WorkerRecord("Atlas-01", "local", "-", "/opt/aner/bin/aner", 2, line=5),
        WorkerRecord("Atlas-02", "ssh", "research-peer", "/opt/aner/bin/aner", 4, line=6),
        WorkerRecord(
            "gpu_box.3", "ssh", "alice@10.0.0.7:2222", "/home/alice/my tools/aner", 256, 7
        ),
    )
    assert config.total_slots == 262


def test_crlf_and_missing_final_newline_are_accepted() -> None:
    config = parse('ANER_CLUSTER 1\r\nworker "a" local "-" "/bin/aner" 1')
    assert [w.identity for w in config.workers] == ["a"]


def test_exactly_32_records_are_accepted() -> None:
    body = "\n".join(f'worker "w{i}" local "-" "/bin/aner" 1' for i in range(32))
    assert len(parse(record(body)).workers) == MAX_WORKER_RECORDS


@pytest.mark.parametrize(
    ("endpoint", "host", "user", "port"),
    [
        ("research-peer", "research-peer", None, None),
        ("alice@10.0.0.7:2222", "10.0.0.7", "alice", 2222),
        ("bob@node.example.org", "node.example.org", "bob", None),
        ("[2001:db8::1]:22", "2001:db8::1", None, 22),
        ("host:65535", "host", None, 65535),
    ],
)
def test_ssh_endpoint_parts(endpoint: str, host: str, user: str | None, port: int | None) -> None:
    parts = parse_ssh_endpoint(endpoint)
    assert (parts.host, parts.user, parts.port) == (host, user, port)


def test_slurm_records_keep_their_endpoint_parsed() -> None:
    config = parse(
        record(
            'worker "Atlas-10" slurm "partition=cpu nodelist=node[07-08],gpu1 '
            'time=1-00:00:00" "/opt/aner/bin/aner" 32\n'
            'worker "Atlas-11" slurm "-" "/opt/aner/bin/aner" 8'
        )
    )
    first, second = config.workers
    assert first.transport == "slurm"
    assert first.slurm == SlurmEndpoint(
        partition="cpu", nodelist="node[07-08],gpu1", time="1-00:00:00"
    )
    assert first.slurm.srun_options() == (
        "--partition=cpu",
        "--nodelist=node[07-08],gpu1",
        "--time=1-00:00:00",
    )
    assert second.slurm == SlurmEndpoint()
    assert second.slurm.srun_options() == ()


@pytest.mark.parametrize(
    "endpoint",
    [
        "account=proj_42 qos=normal constraint=intel&ib|amd",
        "time=30",
        "time=10:00",
        "time=2-12",
        "time=UNLIMITED",
        "partition=a\tnodelist=n1",
    ],
)
def test_slurm_endpoint_forms_accepted(endpoint: str) -> None:
    parsed = parse_slurm_endpoint(endpoint)
    assert parsed.srun_options()


ERRORS = [
    ("", None, "the file is empty"),
    ("# only a comment\n\n", None, "the file is empty"),
    ("ANER_CLUSTER 1\n# no records\n", None, "no worker records"),
    (
        '# x\nworker "a" local "-" "/bin/aner" 1\n',
        2,
        'first non-comment line must be "ANER_CLUSTER 1"',
    ),
    ("\nANER_CLUSTER 2\n", 2, 'this aner reads exactly "ANER_CLUSTER 1"'),
    ("ANER_CLUSTER 1 extra\n", 1, "unsupported header"),
    (
        record('worker "a" rsh "-" "/bin/aner" 1'),
        2,
        'unknown transport "rsh" (use local, ssh or slurm',
    ),
    (
        record('worker "a" slurm "partition=cpu mem=4G" "/bin/aner" 1'),
        2,
        'slurm endpoint key "mem" is not allowed (allowed: partition nodelist account qos',
    ),
    (record('worker "a" slurm "--exclusive" "/bin/aner" 1'), 2, "item 1 of the slurm endpoint"),
    (record('worker "a" slurm "partition" "/bin/aner" 1'), 2, "is not key=value"),
    (record('worker "a" slurm "qos=a qos=b" "/bin/aner" 1'), 2, '"qos" is given twice'),
    (record('worker "a" slurm "account=" "/bin/aner" 1'), 2, 'the value of "account" must be'),
    (record('worker "a" slurm "time=soon" "/bin/aner" 1'), 2, "must be a Slurm time limit"),
    (record('worker "a" slurm "" "/bin/aner" 1'), 2, "the slurm endpoint is empty"),
    (record('worker "a" slurm "  " "/bin/aner" 1'), 2, "the slurm endpoint is empty"),
    (record('worker "a" "ssh" "h" "/bin/aner" 1'), 2, "unknown transport"),
    (record('worker "a" local "-" "bin/aner" 1'), 2, "must be an absolute path"),
    (record('worker "a" local "-" "" 1'), 2, "must be an absolute path"),
    (record('worker "a" local "-" "/bin/aner" 0'), 2, "slots must be at least 1"),
    (
        record('worker "a" local "-" "/bin/aner" -1'),
        2,
        'slots must be a whole number from 1 to 256 without quotes, got "-1"',
    ),
    (record('worker "a" local "-" "/bin/aner" two'), 2, 'got "two"'),
    (record('worker "a" local "-" "/bin/aner" "2"'), 2, "without quotes"),
    (record('worker "a" local "-" "/bin/aner" 257'), 2, "slots must be at most 256"),
    (record('worker "a" local "-" "/bin/aner" 99999999999999999999'), 2, "at most 256"),
    (record('worker "a" local "-" "/bin/aner" 2.5'), 2, "whole number"),
    (record('worker "a" local "-" "/bin/aner" ²'), 2, "whole number"),
    (
        record('worker "Atlas-01" local "-" "/a" 1\n\nworker "Atlas-01" ssh "h" "/a" 1'),
        4,
        'duplicate worker identity "Atlas-01" (line 2 already uses it',
    ),
    (
        record('worker "Atlas-01" local "-" "/a" 1\nworker "atlas-01" local "-" "/a" 1'),
        3,
        'same as "Atlas-01" ignoring case',
    ),
    (
        record("\n".join(f'worker "w{i}" local "-" "/a" 1' for i in range(33))),
        34,
        "too many worker records (at most 32",
    ),
    (record('worker "a local "-" "/bin/aner" 1'), 2, 'a closing " must be followed by a space'),
    (record('worker "a" local "-" "/bin/aner 1'), 2, "unterminated quoted string"),
    (record('worker "a" local "-" "/bin/aner" 1 extra'), 2, "unexpected field after the slots"),
    (record('worker "a" local "-" "/bin/aner" 1 # note'), 2, "comments must be on their own line"),
    (record('worker "a" local "-" "/bin/aner"'), 2, "has 5 fields, expected 6"),
    (record('wrker "a" local "-" "/bin/aner" 1'), 2, 'unknown record "wrker"'),
    (record('worker a local "-" "/bin/aner" 1'), 2, "identity must be in double quotes"),
    (record('worker "" local "-" "/bin/aner" 1'), 2, "identity must be 1 to 64 characters"),
    (record('worker "has space" local "-" "/a" 1'), 2, "identity must be 1 to 64 characters"),
    (record(f'worker "{"x" * 65}" local "-" "/a" 1'), 2, "(got 65 characters"),
    (
        record('worker "a" local "localhost" "/bin/aner" 1'),
        2,
        'a local worker takes the endpoint "-"',
    ),
    (record('worker "a" local - "/bin/aner" 1'), 2, "endpoint must be in double quotes"),
    (record('worker "a" ssh "-oProxyCommand=x" "/a" 1'), 2, "must not start with '-'"),
    (record('worker "a" ssh "-" "/a" 1'), 2, "must not start with '-'"),
    (record('worker "a" ssh "" "/a" 1'), 2, "the ssh endpoint is empty"),
    (record('worker "a" ssh "al ice@h" "/a" 1'), 2, "must not contain whitespace"),
    (record('worker "a" ssh "h:0" "/a" 1'), 2, "port after ':' must be a number from 1 to 65535"),
    (record('worker "a" ssh "h:99999" "/a" 1'), 2, "from 1 to 65535"),
    (record('worker "a" ssh "@h" "/a" 1'), 2, "the user part"),
    (record('worker "a" ssh "u@-h" "/a" 1'), 2, "the host must not start with '-'"),
    (record('worker "a" ssh "h;rm" "/a" 1'), 2, "the host must be an alias"),
    (record('worker "a" ssh "h" "/a\\b" 1'), 2, "no backslash escapes"),
    (record('worker "a" local "-" "/bin/\x1baner" 1'), 2, "control character"),
    (record('worker"a" local "-" "/a" 1'), 2, 'a " may only start a field'),
    # The record's OpenBLAS options (docs/contracts.md, section 5).
    (record('worker "a" local "-" "/a" 1 blas=x'), 2, "blas= takes own or coordinator"),
    (record('worker "a" local "-" "/a" 1 blas=own coretype=Haswell'), 2, "drop coretype="),
    (record('worker "a" local "-" "/a" 1 coretype=A coretype=B'), 2, '"coretype" is given twice'),
    (record('worker "a" local "-" "/a" 1 coretype='), 2, "needs a value, or - for unset"),
    (record('worker "a" local "-" "/a" 1 coretype=$(id)'), 2, "must be a core name"),
    (record('worker "a" local "-" "/a" 1 l2size=0'), 2, "must be a size in kilobytes"),
    (record('worker "a" local "-" "/a" 1 "coretype=A"'), 2, "unexpected field after the slots"),
    (record('worker "a" local "-" "/a" 1 cores=A'), 2, "options are blas=, coretype=, l2size="),
]


@pytest.mark.parametrize(
    ("options", "blas"),
    [
        ("", BlasChoice()),
        (" blas=coordinator", BlasChoice()),
        (" blas=own", BlasChoice(own=True)),
        (" coretype=SkylakeX", BlasChoice(values=(("OPENBLAS_CORETYPE", "SkylakeX"),))),
        (
            " l2size=1024 coretype=-",
            BlasChoice(values=(("OPENBLAS_L2_SIZE", "1024"), ("OPENBLAS_CORETYPE", ""))),
        ),
    ],
)
def test_a_record_may_end_with_its_openblas_options(options: str, blas: BlasChoice) -> None:
    # Before: any field after the slots was refused.
    config = parse_cluster_text(record(f'worker "a" ssh "h" "/a" 2{options}'), "/x/c.txt")
    assert config.workers[0].blas == blas
    assert config.workers[0].slots == 2


@pytest.mark.parametrize(("text", "line", "fragment"), ERRORS)
def test_errors_name_the_line_and_the_fix(text: str, line: int | None, fragment: str) -> None:
    error = refused(text)
    assert error.path == "/x/c.txt"
    assert error.line == line
    assert fragment in error.reason
    where = "cluster file /x/c.txt" + ("" if line is None else f", line {line}")
    assert str(error) == f"{where}: {error.reason}"
    assert "\n" not in str(error)


def test_errors_do_not_repeat_private_endpoints_or_paths() -> None:
    for body in (
        'worker "a" ssh "secret-host;x" "/a" 1',
        'worker "a" local "secret-host" "/a" 1',
        'worker "a" ssh "secret-host" "relative/secret-path" 1',
        'worker "a" ssh "secret-host" "/secret-path" 1 secret-extra',
    ):
        assert "secret" not in str(refused(record(body)))


def test_duplicate_message_matches_the_documented_form() -> None:
    error = refused(
        record('worker "Atlas-01" local "-" "/a" 1\nworker "Atlas-01" local "-" "/a" 1')
    )
    assert str(error) == (
        'cluster file /x/c.txt, line 3: duplicate worker identity "Atlas-01" '
        "(line 2 already uses it; identities must be unique)"
    )


# --------------------------------------------------------------------------- the file


def write(path: Path, text: str = VALID, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    return path


def refused_file(path: Path) -> ClusterFileError:
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert info.value.line is None or "UTF-8" in info.value.reason
    return info.value


def test_load_reads_a_protected_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt")
    config = load_cluster_file(path)
    assert config.path == str(path)
    assert [w.identity for w in config.workers] == ["Atlas-01", "Atlas-02", "gpu_box.3"]


def test_load_names_the_file_in_grammar_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt", 'ANER_CLUSTER 1\nworker "a" local "-" "/a" 0\n')
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert str(info.value) == f"cluster file {path}, line 2: slots must be at least 1"


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o660, 0o601])
def test_group_or_other_bits_are_refused(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "c.txt", mode=mode)
    error = refused_file(path)
    assert f"has mode {mode:04o}" in error.reason
    assert str(error).endswith(f"run: chmod 600 {path}")


def test_owner_only_bits_are_accepted(tmp_path: Path) -> None:
    assert load_cluster_file(write(tmp_path / "c.txt", mode=0o700)).total_slots == 262
    assert load_cluster_file(write(tmp_path / "d.txt", mode=0o400)).total_slots == 262


def test_symlink_is_refused_even_to_a_protected_file(tmp_path: Path) -> None:
    target = write(tmp_path / "real.txt")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert "is a symbolic link" in refused_file(link).reason


def test_directory_missing_and_fifo_are_refused(tmp_path: Path) -> None:
    assert "is a directory" in refused_file(tmp_path).reason
    assert "no such file" in refused_file(tmp_path / "absent.txt").reason
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert "is not a regular file" in refused_file(fifo).reason


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_file_of_another_owner_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt")
    os.chown(path, 65534, 65534)
    error = refused_file(path)
    assert "is owned by uid 65534, not by you (uid 0)" in error.reason
    assert f"chmod 600 {path}" in error.reason


def test_bad_utf8_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b'ANER_CLUSTER 1\n# caf\xe9\nworker "a" local "-" "/a" 1\n')
    os.chmod(path, 0o600)
    error = refused_file(path)
    assert (error.line, error.reason) == (2, "not valid UTF-8 text (save it as UTF-8)")


# --------------------------------------------------------------------------- properties


def only_refuses_cleanly(text: str) -> None:
    try:
        config = parse(text)
    except ClusterFileError as error:
        assert error.line is None or 1 <= error.line <= text.count("\n") + 1
        assert "\n" not in str(error)
    else:
        assert 1 <= len(config.workers) <= MAX_WORKER_RECORDS
        assert all(1 <= w.slots <= 256 for w in config.workers)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_is_parsed_or_refused(text: str) -> None:
    only_refuses_cleanly(text)


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "replace"]),
            st.integers(min_value=0),
            st.sampled_from(list(' \t\n\r"#\\-@:[]0123456789aZ/\x00\x85\u2028é'))
            | st.text(max_size=3),
        ),
        max_size=8,
    ),
)
def test_mutations_of_a_valid_file_are_parsed_or_refused(
    data: st.DataObject, edits: list[tuple[str, int, str]]
) -> None:
    text = VALID
    for action, position, fragment in edits:
        at = position % (len(text) + 1)
        if action == "insert":
            text = text[:at] + fragment + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + len(fragment) + 1 :]
        else:
            text = text[:at] + fragment + text[at + 1 :]
    only_refuses_cleanly(text)


@pytest.mark.parametrize(
    "endpoint",
    [
        "partition=secret-part mem=4G",
        "nodelist=secret-node07 secret-node08",
        "account=secret-acct account=secret-acct",
        "time=secret-time",
        'qos=secret"q',
    ],
)
def test_slurm_endpoint_errors_never_repeat_values(endpoint: str) -> None:
    error = refused(record(f'worker "a" slurm "{endpoint}" "/bin/aner" 1'))
    assert error.line == 2
    assert "secret" not in str(error)
