"""Malformed and hostile inputs for `aner parallel predict`: the predict part of the corpus
that found 36 failures in 97 cases (tampered `model.npz` files, feature files of every
malformed kind, paths that are not regular files), and the one way to run the command on
them: a subprocess in its own session, under an address-space cap (a runaway read fails at
once instead of eating the machine) and a generous timeout (a hang is a failure, not a
stall of the suite), with its peak RSS measured by `wait4` on the command itself.

No numpy here: `.npy` members and archives are written byte by byte, which is what lets a
member declare a shape its bytes do not have. Each case's files are made just before it
runs, under its own directory, from a trained model that `Bases` makes once with the CLI.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import pickle
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suite_env import child_env
from support import ANER, HANG_S, unix_socket

SEED = 20261203
KiB, GiB = 1 << 10, 1 << 30
SPARSE = 3 * GiB  # larger than the 2 GiB data limit and than the address-space cap
MEM_CAP = 2 * GiB
RSS_LIMIT_KIB = 1 << 20  # 1 GiB: a normal predict takes about 100 MiB
TIMEOUT_S = HANG_S  # a hang's bound, never a measure of speed
IS_ROOT = os.geteuid() == 0

# --------------------------------------------------------------------------- running


_WRAPPER = (
    "import os, resource, signal, sys\n"
    "cap, report, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
    "        os.execvp(argv[0], argv)\n"
    "    finally:\n"
    "        os._exit(127)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "with open(report, 'w') as f:\n"
    "    f.write(str(usage.ru_maxrss))\n"
    "os._exit(max(0, os.waitstatus_to_exitcode(status)))\n"
)


@dataclass
class Outcome:
    rc: int | None  # None: killed at the timeout
    stderr: str
    maxrss_kib: int


def run_cli(argv: Sequence[str], env: dict[str, str]) -> Outcome:
    """`aner ARGV` in its own session under the cap; the whole session is killed at the
    timeout (a hang)."""
    with tempfile.TemporaryDirectory(prefix="aner-predict-") as scratch:
        report = os.path.join(scratch, "maxrss")
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, str(MEM_CAP), report, ANER, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            rc = None
        try:
            maxrss = int(Path(report).read_text())
        except (OSError, ValueError):
            maxrss = 0
    return Outcome(rc, err.decode("utf-8", "replace"), maxrss)


def cli_env(root: Path) -> dict[str, str]:
    """A private HOME and XDG directories under `root`, no bytecode written."""
    env = child_env({k: v for k, v in os.environ.items() if not k.startswith(("ANER_", "XDG_"))})
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONDONTWRITEBYTECODE="1")
    return env


def problems(case: Case, got: Outcome, absent: Path) -> list[str]:
    """What is wrong with how the command treated `case`: the corpus's rules."""
    found = []
    if got.rc is None:
        found.append(f"hang: still running after {TIMEOUT_S:g} s")
    if got.maxrss_kib > RSS_LIMIT_KIB or "MemoryError" in got.stderr:
        found.append(f"memory: peak RSS {got.maxrss_kib // 1024} MiB")
    if "Traceback (most recent call last)" in got.stderr:
        found.append("a traceback")
    if got.rc is not None and got.rc not in case.rc:
        found.append(f"exit {got.rc}, expected {' or '.join(map(str, case.rc))}")
    lines = got.stderr.splitlines()
    if got.rc == 2:
        if len(lines) != 1 or not lines[0].strip() or len(got.stderr) > 4096:
            found.append(f"{len(lines)} stderr lines ({len(got.stderr)} bytes), expected one")
        if not any(name in got.stderr for name in case.names):
            found.append(f"stderr names none of {case.names}")
        if os.path.lexists(absent):
            found.append(f"{absent} exists after a refusal")
    elif got.rc == 0 and "Warning" in got.stderr:
        found.append(f"a warning: {got.stderr[:200]}")
    return found


# --------------------------------------------------------------------------- the cases


@dataclass
class Case:
    """One input and the exit codes `predict` may answer it with."""

    id: str
    rc: tuple[int, ...]
    note: str
    data: Callable[[Path], Path]  # makes the --data path in a case directory
    model: Callable[[Path, Path], Path]  # (base model job, case directory) -> --model path
    names: tuple[str, ...] = field(default=())
    skip: str | None = None


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


def sparse(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(SPARSE)
    return path


def symlink(path: Path, target: str | Path) -> Path:
    os.symlink(target, path)
    return path


def directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# Kinds of path that are not a regular file one may read.
KINDS: list[tuple[str, Callable[[Path], Path]]] = [
    ("fifo", fifo),
    ("directory", directory),
    ("dev_zero", lambda p: Path("/dev/zero")),
    ("symlink_dev_zero", lambda p: symlink(p, "/dev/zero")),
    ("symlink_urandom", lambda p: symlink(p, "/dev/urandom")),
    ("dangling_symlink", lambda p: symlink(p, p.parent / "nowhere")),
    ("missing", lambda p: p),
    ("socket", unix_socket),
    ("sparse_3GiB", sparse),
    ("dev_null", lambda p: Path("/dev/null")),
]
NPZ_KINDS = ("fifo", "directory", "symlink_dev_zero", "symlink_urandom", "sparse_3GiB")


def npy(descr: object, shape: tuple[int, ...], payload: bytes, fortran: bool = False) -> bytes:
    """A `.npy` member, version 1.0, whatever its header claims."""
    header = f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"
    pad = (-(10 + len(header) + 1)) % 64
    text = (header + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def f8(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def npy_x(rows: Sequence[Sequence[float]]) -> bytes:
    return npy("<f8", (len(rows), len(rows[0])), f8([v for r in rows for v in r]))


def text_npy(text: str) -> bytes:
    return npy(f"<U{max(1, len(text))}", (), text.encode("utf-32-le"))


def parse_npy(data: bytes) -> tuple[dict[str, object], bytes]:
    (n,) = struct.unpack("<H", data[8:10])
    return ast.literal_eval(data[10 : 10 + n].decode("latin1")), data[10 + n :]


def zip_bytes(members: Sequence[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in members:
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return buffer.getvalue()


def patch_zip(data: bytes, *, flag: int | None = None, method: int | None = None) -> bytes:
    """Rewrite the general-purpose flag or the method of every local and central header."""
    b = bytearray(data)
    for sig, flag_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        for m in re.finditer(re.escape(sig), bytes(b)):
            o = m.start()
            if flag is not None:
                b[o + flag_at : o + flag_at + 2] = struct.pack("<H", flag)
            if method is not None:
                b[o + method_at : o + method_at + 2] = struct.pack("<H", method)
    return bytes(b)


def pickle_payload() -> bytes:
    return pickle.dumps([[1.0, 2.0, 3.0]], protocol=2)


def rows_csv(r: random.Random, n: int = 30, d: int = 4, label: bool = False) -> str:
    head = [f"x{j}" for j in range(d)] + (["label"] if label else [])
    tail = ["0"] if label else []
    body = [[f"{r.uniform(-1, 1):.6f}" for _ in range(d)] + tail for _ in range(n)]
    return "\n".join(",".join(row) for row in [head, *body]) + "\n"


def feature_rows(r: random.Random, n: int, d: int) -> list[list[float]]:
    return [[round(r.uniform(-1, 1), 6) for _ in range(d)] for _ in range(n)]


def with_value(r: random.Random, value: str, at: int = 4, col: int = 1) -> str:
    lines = rows_csv(r).splitlines()
    fields = lines[at].split(",")
    fields[col] = value
    lines[at] = ",".join(fields)
    return "\n".join(lines) + "\n"


def copy_model(base: Path, case: Path) -> Path:
    job = case / "model-job"
    shutil.copytree(base, job, symlinks=True)
    return job


def tampered(change: Callable[[dict[str, bytes]], None]) -> Callable[[Path, Path], Path]:
    """A copy of the model whose archive members `change` edits."""

    def make(base: Path, case: Path) -> Path:
        job = copy_model(base, case)
        with zipfile.ZipFile(job / "model.npz") as z:
            members = {info.filename: z.read(info) for info in z.infolist()}
        change(members)
        write(job / "model.npz", zip_bytes(list(members.items())))
        return job

    return make


def model_file(make: Callable[[Path], object]) -> Callable[[Path, Path], Path]:
    """A copy of the model job whose model.npz is replaced by what `make` puts there."""

    def replace(base: Path, case: Path) -> Path:
        job = copy_model(base, case)
        (job / "model.npz").unlink()
        make(job / "model.npz")
        return job

    return replace


def model_bytes(edit: Callable[[bytes], bytes]) -> Callable[[Path, Path], Path]:
    def make(base: Path, case: Path) -> Path:
        job = copy_model(base, case)
        write(job / "model.npz", edit((job / "model.npz").read_bytes()))
        return job

    return make


def set_member(name: str, data: bytes) -> Callable[[Path, Path], Path]:
    return tampered(lambda m: m.__setitem__(f"{name}.npy", data))


def drop_member(name: str) -> Callable[[Path, Path], Path]:
    return tampered(lambda m: m.__delitem__(f"{name}.npy"))


def poke(name: str, value: float) -> Callable[[Path, Path], Path]:
    """The first float64 of member `name` replaced by `value`."""

    def change(m: dict[str, bytes]) -> None:
        header, payload = parse_npy(m[f"{name}.npy"])
        body = struct.pack("<d", value) + payload[8:]
        m[f"{name}.npy"] = npy("<f8", header["shape"], body, bool(header["fortran_order"]))  # type: ignore[arg-type]

    return tampered(change)


def fill(name: str, value: float) -> Callable[[Path, Path], Path]:
    def change(m: dict[str, bytes]) -> None:
        header, payload = parse_npy(m[f"{name}.npy"])
        count = len(payload) // 8
        m[f"{name}.npy"] = npy("<f8", header["shape"], f8([value] * count))  # type: ignore[arg-type]

    return tampered(change)


def reshape(name: str, shape: tuple[int, ...]) -> Callable[[Path, Path], Path]:
    count = 1
    for s in shape:
        count *= s
    return set_member(name, npy("<f8", shape, f8([0.01] * count)))


def edit_meta(edit: Callable[[dict[str, object]], object]) -> Callable[[Path, Path], Path]:
    def change(m: dict[str, bytes]) -> None:
        _, payload = parse_npy(m["meta.npy"])
        meta = json.loads(payload.decode("utf-32-le").rstrip("\0"))
        new = edit(meta)
        m["meta.npy"] = text_npy(json.dumps(meta if new is None else new))

    return tampered(change)


Maker = Callable[[random.Random], bytes | str]


def _data(make: Maker, cid: str, suffix: str) -> Callable[[Path], Path]:
    return lambda d: write(d / f"rows{suffix}", make(random.Random(f"{SEED}:{cid}")))


def _good(cid: str, suffix: str = ".csv") -> Callable[[Path], Path]:
    if suffix == ".npz":
        return _data(lambda r: zip_bytes([("X.npy", npy_x(feature_rows(r, 30, 4)))]), cid, suffix)
    return _data(rows_csv, cid, suffix)


def data_cases() -> list[Case]:
    def xz(r: random.Random, member: bytes | None = None, method: int = 0) -> bytes:
        return zip_bytes([("X.npy", member or npy_x(feature_rows(r, 30, 4)))], method)

    csv_items: list[tuple[str, Callable[[random.Random], bytes | str], tuple[int, ...], str]] = [
        ("ok_csv", rows_csv, (0,), "control"),
        ("ok_csv_with_label_column", lambda r: rows_csv(r, label=True), (0,), "label ignored"),
        ("ok_bom", lambda r: "\ufeff" + rows_csv(r), (0,), "byte-order mark"),
        ("ok_crlf", lambda r: rows_csv(r).replace("\n", "\r\n"), (0,), "CRLF"),
        ("wrong_column_count", lambda r: rows_csv(r, d=3), (2,), "x3 missing"),
        # Columns are mapped by name: x4 and x5 are columns the model does not know.
        ("too_many_columns", lambda r: rows_csv(r, d=6), (0,), "extra columns ignored"),
        ("bad_utf8", lambda r: rows_csv(r).encode().replace(b"x1", b"x\xff", 1), (2,), "UTF-8"),
        ("empty", lambda r: b"", (2,), "zero bytes"),
        ("header_only", lambda r: "x0,x1,x2,x3\n", (2,), "no rows"),
        ("ragged", lambda r: rows_csv(r) + "0.1,0.2\n", (2,), "a short row"),
        ("non_numeric", lambda r: with_value(r, "abc"), (2,), "a word"),
        ("nan", lambda r: with_value(r, "nan"), (2,), "NaN"),
        ("inf", lambda r: with_value(r, "-inf"), (2,), "-inf"),
        ("overflow_1e309", lambda r: with_value(r, "1e309"), (2,), "overflows"),
        ("nul_byte", lambda r: with_value(r, "0.\x005"), (2,), "a NUL byte"),
        ("huge_field", lambda r: with_value(r, "7" * (200 * KiB)), (2,), "a 200 KiB field"),
        ("unclosed_quote", lambda r: with_value(r, '"0.5', col=0), (2,), "an unclosed quote"),
        ("magnitude_1e300", lambda r: with_value(r, "1e300"), (0, 2), "finite; no NaN written"),
        # refused, but after a numpy RuntimeWarning on stderr (issue 36)
        (
            "magnitude_1_7e308_every_feature",
            lambda r: "x0,x1,x2,x3\n1.7e308,-1.7e308,1.7e308,-1.7e308\n",
            (2,),
            "overflows the row's distance",
        ),
        ("gzip", lambda r: gzip.compress(rows_csv(r).encode(), mtime=0), (2,), "gzip bytes"),
    ]
    npz_items: list[tuple[str, Callable[[random.Random], bytes], str]] = [
        ("not_a_zip", lambda r: b"PK\x05\x06" + bytes(r.randrange(256) for _ in range(300)), "zip"),
        ("no_X", lambda r: zip_bytes([("Z.npy", npy_x([[0.1] * 4]))]), "no X"),
        ("X_1d", lambda r: xz(r, npy("<f8", (4,), f8([0.1] * 4))), "1-D X"),
        ("X_wrong_width", lambda r: xz(r, npy_x(feature_rows(r, 5, 3))), "3 features"),
        ("X_object_pickle", lambda r: xz(r, npy("|O", (3, 4), pickle_payload())), "a pickle"),
        ("X_strings", lambda r: xz(r, npy("<U3", (2, 4), "abc".encode("utf-32-le") * 8)), "text"),
        ("X_complex", lambda r: xz(r, npy("<c16", (2, 4), f8([0.5, 1.0] * 8))), "complex"),
        ("X_nan", lambda r: xz(r, npy_x([[0.1, float("nan"), 0.2, 0.3]])), "NaN"),
        ("member_not_npy", lambda r: zip_bytes([("X", b"0.1,0.2,0.3,0.4\n")]), "not .npy"),
        ("zip_bomb_X_1e12", lambda r: xz(r, npy("<f8", (10**12, 4), b"\0" * 4096), 8), "bomb"),
        ("zip_encrypted_flag", lambda r: patch_zip(xz(r), flag=1), "encrypted"),
        ("zip_unknown_method", lambda r: patch_zip(xz(r), method=99), "method 99"),
    ]
    base = copy_model_of
    cases = [
        Case(f"csv-{cid}", rc, note, _data(make, cid, ".csv"), base)
        for cid, make, rc, note in csv_items
    ]
    cases.append(Case("npz-ok_npz", (0,), "control", _good("npz-ok", ".npz"), base))
    cases += [
        Case(f"npz-{cid}", (2,), note, _data(make, cid, ".npz"), base)
        for cid, make, note in npz_items
    ]
    for suffix in (".csv", ".npz"):
        for name, maker in KINDS:
            if suffix == ".npz" and name not in NPZ_KINDS:
                continue
            path_of = (lambda m, s: lambda d: m(d / f"rows{s}"))(maker, suffix)
            cases.append(Case(f"kind{suffix.replace('.', '_')}-{name}", (2,), name, path_of, base))
    for case in cases:
        case.names = ("--data",)
    return cases


def copy_model_of(base: Path, case: Path) -> Path:
    return copy_model(base, case)


def sizes(value: object) -> Callable[[Path, Path], Path]:
    return edit_meta(lambda d: d.__setitem__("layer_sizes", value))


def model_cases() -> list[Case]:
    huge = npy("<f8", (10**6, 10**6), b"\0" * 4096)
    items: list[tuple[str, Callable[[Path, Path], Path], str]] = [
        ("model_npz_fifo", model_file(fifo), "a FIFO"),
        ("model_npz_directory", model_file(directory), "a directory"),
        ("model_npz_symlink_dev_zero", model_file(lambda p: symlink(p, "/dev/zero")), "zero"),
        ("model_npz_symlink_urandom", model_file(lambda p: symlink(p, "/dev/urandom")), "random"),
        ("model_npz_dangling", model_file(lambda p: symlink(p, p.parent / "gone.npz")), "dangling"),
        ("model_npz_socket", model_file(unix_socket), "a socket"),
        ("model_npz_empty", model_file(lambda p: write(p, b"")), "zero bytes"),
        ("model_npz_garbage", model_file(lambda p: write(p, bytes(range(256)) * 16)), "garbage"),
        ("model_npz_plain_npy", model_file(lambda p: write(p, npy_x([[0.5] * 4]))), "one .npy"),
        ("model_npz_pickle", model_file(lambda p: write(p, pickle_payload())), "a pickle"),
        ("model_npz_truncated", model_bytes(lambda b: b[:5000]), "5,000 bytes"),
        ("model_npz_sparse_3GiB", model_file(sparse), "3 GiB sparse"),
        ("model_npz_encrypted_flag", model_bytes(lambda b: patch_zip(b, flag=1)), "encrypted"),
        ("model_npz_unknown_method", model_bytes(lambda b: patch_zip(b, method=99)), "method 99"),
        ("W1_nan", poke("W1", float("nan")), "a NaN weight"),
        ("W1_inf", poke("W1", float("inf")), "an infinite weight"),
        ("b2_nan", poke("b2", float("nan")), "a NaN bias"),
        ("W3_all_huge", fill("W3", 1e308), "1e308 weights: the softmax overflows"),
        ("mean_nan", poke("mean", float("nan")), "a NaN mean"),
        ("std_zero", fill("std", 0.0), "std 0 (SPEC: 1 where 0)"),
        ("std_negative", fill("std", -1.0), "a negative std would flip every feature"),
        ("W1_shape", reshape("W1", (3, 4)), "W1 of the wrong shape"),
        ("b1_shape", reshape("b1", (7,)), "b1 of the wrong shape"),
        ("mean_shape", reshape("mean", (9,)), "mean of 9 entries"),
        ("classes_shape", set_member("classes", npy("<f8", (5,), f8([0, 1, 2, 3, 4]))), "5"),
        ("classes_object", set_member("classes", npy("|O", (2,), pickle_payload())), "pickle"),
        ("W2_missing", drop_member("W2"), "no W2"),
        ("classes_missing", drop_member("classes"), "no classes"),
        ("meta_missing", drop_member("meta"), "no meta"),
        ("W1_object", set_member("W1", npy("|O", (64, 4), pickle_payload())), "a pickle"),
        ("W1_strings", set_member("W1", npy("<U2", (64, 4), "ab".encode("utf-32-le") * 256)), "U"),
        ("W1_zip_bomb", set_member("W1", huge), "W1 claims 10**12 float64"),
        ("meta_not_json", set_member("meta", text_npy("{not json")), "not JSON"),
        ("meta_json_list", set_member("meta", text_npy("[1, 2, 3]")), "a list"),
        ("meta_json_number", set_member("meta", text_npy("42")), "a number"),
        ("meta_floats", set_member("meta", npy("<f8", (3,), f8([1, 2, 3]))), "floats"),
        ("meta_deep_json", set_member("meta", text_npy("[" * 100_000 + "]" * 100_000)), "deep"),
        ("meta_no_schema", edit_meta(lambda d: d.pop("schema")), "no schema"),
        ("meta_wrong_schema", edit_meta(lambda d: d.__setitem__("schema", "aner-model/999")), "?"),
        ("meta_no_layer_sizes", edit_meta(lambda d: d.pop("layer_sizes")), "no layer sizes"),
        ("meta_layer_sizes_strings", edit_meta(lambda d: d.__setitem__("layer_sizes", ["a"])), "a"),
        ("meta_layer_sizes_negative", sizes([4, -64, 64, 2]), "a negative layer"),
        ("meta_layer_sizes_huge", sizes([4, 10**12, 64, 2]), "a layer of 10**12 units"),
        ("meta_layer_sizes_not_list", edit_meta(lambda d: d.__setitem__("layer_sizes", 7)), "7"),
        ("meta_features_wrong", edit_meta(lambda d: d.__setitem__("features", ["x0"])), "1 name"),
        ("meta_incomplete", edit_meta(lambda d: d.__setitem__("complete", False)), "cancelled"),
    ]
    cases = [
        Case(f"model-{cid}", (2,), note, _good(cid), make, ("model.npz", "--model"))
        for cid, make, note in items
    ]
    dirs: list[tuple[str, Callable[[Path, Path], Path]]] = [
        ("model_dir_missing", lambda base, d: d / "model-job"),
        ("model_dir_is_file", lambda base, d: write(d / "model-job", b"not a directory")),
        ("model_dir_fifo", lambda base, d: fifo(d / "model-job")),
        ("model_dir_dev_zero", lambda base, d: Path("/dev/zero")),
        ("model_dir_empty", lambda base, d: directory(d / "model-job")),
    ]
    cases += [Case(f"model-{cid}", (2,), cid, _good(cid), make, ("--model",)) for cid, make in dirs]
    return cases


def cases() -> list[Case]:
    return [*data_cases(), *model_cases()]


def settle(case: Case, base: Path, root: Path) -> tuple[list[str], Path]:
    """Make the case's files under `root` and the argv that runs it; the predictions path."""
    where = root / case.id
    where.mkdir(parents=True)
    model = case.model(base, where)
    data = case.data(where)
    out = where / "predictions.csv"
    argv = ["parallel", "predict", "--model", str(model), "--data", str(data), "--output", str(out)]
    return argv, out
