"""A generated corpus of malformed inputs for every command that reads a file a user names
(issue 17, item 6), and the driver that feeds them to the CLI.

Slots (what a command reads) and the commands that read them:

- `csv`, `npz`: Dense data: `train --data`, `cv --data`, `predict --data`;
- `model`: `predict --model` (the job's `model.npz` replaced);
- `spec`: `run --spec`; `search`: `search --spec`; `experiment`: `scaling --experiment`,
  `plan --experiment`; `cluster`: `run --cluster`.

Every slot gets the same kinds of file that are not files (a FIFO, a link to `/dev/zero`, a
directory, a socket, a dangling link, a 3 GiB sparse file) and of content that is not what
the slot holds (empty, binary garbage, bad UTF-8, NUL bytes, deep nesting, one 1 MB line),
then its own malformed contents (wrong types, NaN where numbers must be finite, truncated
archives, `.npy` headers that declare shapes of 10**12 values, members that are not `.npy`,
object arrays, unknown keys, limits exceeded). Every case must be refused: exit 2, exactly
one line on stderr, nothing created at `--output`, within a generous time.

The cases run in one Python process (`DRIVER`, run with `python -c`) that calls the CLI's
`main(argv)` in a loop with standard output and error captured, under an address-space cap
(a runaway read fails at once instead of eating the machine) and a per-case alarm (a hang
is reported as one, and the driver goes on). A small sample also runs through the real
`aner` program (`predict_inputs.run_cli`).
"""

from __future__ import annotations

import json
import os
import random
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from predict_inputs import f8, npy, patch_zip, zip_bytes
from support import HANG_S, unix_socket

SEED = 20261204
GiB = 1 << 30
CASE_TIMEOUT_S = int(HANG_S)  # a hang's bound: each case ends in well under a second idle
MEM_CAP = 4 * GiB

Maker = Callable[[Path], Path]  # makes the input at the given path, returns what to name


# --------------------------------------------------------------------------- file makers


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, 0o600)  # a cluster file must be private to be read at all
    return path


def content(data: bytes | str) -> Maker:
    return lambda path: write(path, data)


def fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


def link(target: str) -> Maker:
    def make(path: Path) -> Path:
        os.symlink(target, path)
        return path

    return make


def directory(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def sparse(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(3 * GiB)
    os.chmod(path, 0o600)
    return path


def generic() -> list[tuple[str, Maker]]:
    """Kinds of input every slot must refuse, whatever it holds."""
    noise = random.Random(SEED).randbytes(3000)
    return [
        ("fifo", fifo),
        ("symlink_dev_zero", link("/dev/zero")),
        ("symlink_urandom", link("/dev/urandom")),
        ("directory", directory),
        ("socket", unix_socket),
        ("dangling_symlink", link("/nonexistent/aner-corpus")),
        ("sparse_3GiB", sparse),
        ("empty", content(b"")),
        ("garbage", content(noise)),
        ("nul_bytes", content(b"\0" * 4096)),
        ("bad_utf8", content(b"\xff\xfe\xfa" * 100)),
        ("deep_brackets", content(b"a = " + b"[" * 100_000 + b"]" * 100_000)),
        ("deep_tables", content(b"a = " + b"{b = " * 20_000 + b"1" + b"}" * 20_000)),
        ("one_1MB_line", content(b"x" * (1 << 20))),
    ]


# --------------------------------------------------------------------------- contents


def csv_rows(defect: str | None = None, at: int = 5) -> str:
    """A good CSV of 40 rows (features a, b, c; label y, two classes) with one defect."""
    r = random.Random(SEED)
    lines = ["x0,x1,x2,y"]
    for i in range(40):
        lines.append(
            f"{r.uniform(-1, 1):.4f},{r.uniform(-1, 1):.4f},{r.uniform(-1, 1):.4f},{i % 2}"
        )
    if defect is not None:
        lines[at] = defect
    return "\n".join(lines) + "\n"


def csv_contents() -> list[tuple[str, Maker]]:
    return [
        ("nan", content(csv_rows("nan,0.1,0.2,1"))),
        ("inf", content(csv_rows("0.1,inf,0.2,1"))),
        ("minus_inf", content(csv_rows("0.1,0.2,-inf,0"))),
        ("word", content(csv_rows("0.1,zero,0.2,1"))),
        ("empty_field", content(csv_rows("0.1,,0.2,1"))),
        ("ragged_short", content(csv_rows("0.1,0.2,1"))),
        ("ragged_long", content(csv_rows("0.1,0.2,0.3,0.4,1"))),
        ("huge_number", content(csv_rows("1e400,0.2,0.3,1"))),
        ("header_only", content("x0,x1,x2,y\n")),
        ("no_header_numbers", content("1,2,3,0\n" * 3)),
        ("one_column", content("y\n" + "1\n" * 20)),
        ("one_class", content(csv_rows().replace(",1\n", ",0\n"))),
        ("bad_utf8_mid", content(csv_rows("0.1,0.2,0.3,\xff").encode("latin1"))),
        ("nul_in_row", content(csv_rows("0.1,0.2\x00,0.3,1"))),
        ("1MB_field", content(csv_rows("0.1," + "9" * (1 << 20) + ",0.3,1"))),
        ("1MB_label", content(csv_rows("0.1,0.2,0.3," + "L" * (1 << 20)))),
        ("quote_unclosed", content(csv_rows('0.1,"0.2,0.3,1'))),
        ("truncated_mid_number", content(csv_rows()[:-3] + "-")),
        ("duplicate_header", content(csv_rows().replace("x0,x1,x2,y", "x0,x0,x2,y", 1))),
        ("blank_lines_only", content("\n\n\n")),
    ]


def x_rows(n: int = 40, d: int = 3) -> bytes:
    r = random.Random(SEED)
    return npy("<f8", (n, d), f8([r.uniform(-1, 1) for _ in range(n * d)]))


def y_rows(n: int = 40) -> bytes:
    return npy("<i8", (n,), b"".join(i.to_bytes(8, "little") for i in (j % 2 for j in range(n))))


def npz(*members: tuple[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    return zip_bytes(members, method)


def npz_contents() -> list[tuple[str, Maker]]:
    good = npz(("X.npy", x_rows()), ("y.npy", y_rows()))
    nan_x = npy("<f8", (2, 3), f8([0.1, float("nan"), 0.3, 0.4, 0.5, 0.6]))
    bomb = npz(("X.npy", npy("<f8", (40, 3), bytes(8 * 120))), ("y.npy", y_rows()))
    return [
        ("not_a_zip", content(b"PK but not really " * 10)),
        ("truncated_half", content(good[: len(good) // 2])),
        ("truncated_tail", content(good[:-30])),
        ("missing_y", content(npz(("X.npy", x_rows())))),
        ("missing_x", content(npz(("y.npy", y_rows())))),
        (
            "member_not_npy",
            content(npz(("X.npy", x_rows()), ("y.npy", y_rows()), ("a.txt", b"hi"))),
        ),
        ("member_text_as_npy", content(npz(("X.npy", b"not npy at all"), ("y.npy", y_rows())))),
        (
            "x_declares_1e12",
            content(npz(("X.npy", npy("<f8", (10**6, 10**6), f8([1.0]))), ("y.npy", y_rows()))),
        ),
        (
            "x_declares_2e9_deflated",
            content(
                npz(
                    ("X.npy", npy("<f8", (2 * 10**9, 1), bytes(64))),
                    ("y.npy", y_rows()),
                    method=zipfile.ZIP_DEFLATED,
                )
            ),
        ),
        (
            "x_negative_shape",
            content(npz(("X.npy", npy("<f8", (-1, 0), b"")), ("y.npy", y_rows()))),
        ),
        (
            "x_shape_not_ints",
            content(npz(("X.npy", npy("<f8", ("a", 3), b"")), ("y.npy", y_rows()))),
        ),
        ("x_short_payload", content(npz(("X.npy", x_rows()[:-16]), ("y.npy", y_rows())))),
        ("x_long_payload", content(npz(("X.npy", x_rows() + bytes(64)), ("y.npy", y_rows())))),
        (
            "x_object",
            content(npz(("X.npy", npy("|O", (40, 3), b"\x80\x04N.")), ("y.npy", y_rows()))),
        ),
        (
            "x_strings",
            content(npz(("X.npy", npy("<U3", (40, 3), bytes(12 * 120))), ("y.npy", y_rows()))),
        ),
        (
            "x_one_d",
            content(npz(("X.npy", npy("<f8", (120,), f8([0.5] * 120))), ("y.npy", y_rows()))),
        ),
        ("x_nan", content(npz(("X.npy", nan_x), ("y.npy", y_rows(2))))),
        (
            "x_complex",
            content(npz(("X.npy", npy("<c16", (40, 3), bytes(16 * 120))), ("y.npy", y_rows()))),
        ),
        ("y_wrong_length", content(npz(("X.npy", x_rows()), ("y.npy", y_rows(7))))),
        (
            "y_two_d",
            content(npz(("X.npy", x_rows()), ("y.npy", npy("<i8", (40, 1), bytes(8 * 40))))),
        ),
        (
            "npy_version_9",
            content(npz(("X.npy", b"\x93NUMPY\x09\x00" + x_rows()[8:]), ("y.npy", y_rows()))),
        ),
        (
            "npy_header_64KiB",
            content(
                npz(
                    ("X.npy", b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little") + b"{" * 1000),
                    ("y.npy", y_rows()),
                )
            ),
        ),
        ("encrypted_flag", content(patch_zip(good, flag=1))),
        ("method_bzip2", content(patch_zip(good, method=12))),
        ("zip_entry_declares_1e12", content(_declared_size(bomb, 10**12))),
        (
            "zip_bomb_lies_small",
            content(
                _declared_size(
                    npz(("X.npy", x_rows()), ("y.npy", y_rows()), method=zipfile.ZIP_DEFLATED), 100
                )
            ),
        ),
    ]


def _declared_size(data: bytes, size: int) -> bytes:
    """The archive with every entry's uncompressed size set to `size` (capped to 32 bits)."""
    b = bytearray(data)
    value = min(size, 0xFFFFFFFF).to_bytes(4, "little")
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = 0
        while (o := bytes(b).find(sig, start)) >= 0:
            b[o + at : o + at + 4] = value
            start = o + 4
    return bytes(b)


def model_contents() -> list[tuple[str, Maker]]:
    """`model.npz` contents: every NPZ defect, and archives of the wrong arrays."""
    meta = npy("<U2", (), "{}".encode("utf-32-le"))
    return [
        *npz_contents(),
        ("meta_not_json", content(npz(("meta.npy", npy("<U3", (), "{{{".encode("utf-32-le")))))),
        ("meta_empty_object", content(npz(("meta.npy", meta)))),
    ]


def spec_contents() -> list[tuple[str, Maker]]:
    mc = 'output = "out"\n[computation]\nkind = "monte-carlo"\n'
    return [
        ("missing_computation", content('output = "out"\n')),
        ("unknown_kind", content('[computation]\nkind = "nope"\nseed = 1\n')),
        ("seed_string", content(mc + 'seed = "one"\nsamples = 1000\n')),
        ("samples_float_nan", content(mc + "seed = 1\nsamples = nan\n")),
        ("samples_negative", content(mc + "seed = 1\nsamples = -5\n")),
        ("samples_zero", content(mc + "seed = 1\nsamples = 0\n")),
        ("samples_huge", content(mc + "seed = 1\nsamples = 99999999999999999999999\n")),
        ("seed_2_64", content(mc + "seed = 18446744073709551616\nsamples = 1000\n")),
        ("chunk_in_computation", content(mc + "seed = 1\nsamples = 1000\nchunk = 0\n")),
        (
            "execution_chunk_zero",
            content(mc + 'seed = 1\nsamples = 1000\n[execution]\nkind = "local"\nchunk = 0\n'),
        ),
        (
            "execution_chunk_1e13",
            content(
                mc
                + 'seed = 1\nsamples = 1000\n[execution]\nkind = "local"\nchunk = 10000000000000\n'
            ),
        ),
        ("unknown_key", content(mc + "seed = 1\nsamples = 1000\ncolour = 3\n")),
        ("unknown_top_key", content(mc + "seed = 1\nsamples = 1000\n[extra]\na = 1\n")),
        ("computation_is_string", content('computation = "monte-carlo"\n')),
        ("duplicate_key", content(mc + "seed = 1\nseed = 2\nsamples = 1000\n")),
        ("audit_nan", content("audit = nan\n" + mc + "seed = 1\nsamples = 1000\n")),
        ("retries_negative", content("retries = -1\n" + mc + "seed = 1\nsamples = 1000\n")),
        (
            "regression_steps_negative",
            content(
                '[computation]\nkind = "regression"\nseed = 1\nsamples = 1000\nrate = 0.5\n'
                "steps = -1\n"
            ),
        ),
        (
            "dense_data_missing",
            content('[computation]\nkind = "dense"\nseed = 1\ndata = "/nonexistent/x.csv"\n'),
        ),
        ("truncated", content((mc + "seed = 1\nsamples = 10")[:-12])),
        (
            "bad_utf8_in_string",
            content((mc + 'seed = 1\nsamples = 1000\noutput = "\xff"\n').encode("latin1")),
        ),
    ]


def search_contents() -> list[tuple[str, Maker]]:
    base = 'data = "digits"\nseed = 1\nfolds = 3\n'
    return [
        ("missing_seed", content('data = "digits"\nfolds = 3\n')),
        ("folds_string", content('data = "digits"\nseed = 1\nfolds = "five"\n')),
        ("folds_zero", content('data = "digits"\nseed = 1\nfolds = 0\n')),
        ("folds_1000", content('data = "digits"\nseed = 1\nfolds = 1000\n')),
        ("grid_not_table", content(base + "grid = 3\n")),
        ("grid_empty_list", content(base + "[grid]\nlr = []\n")),
        ("grid_unknown_key", content(base + "[grid]\ncolour = [1, 2]\n")),
        ("grid_and_top", content(base + "lr = 0.1\n[grid]\nlr = [0.1, 0.2]\n")),
        ("lr_nan", content(base + "lr = nan\n")),
        ("lr_inf", content(base + "lr = inf\n")),
        ("epochs_negative", content(base + "epochs = -1\n")),
        ("hidden_huge", content(base + "hidden = [100000000]\n")),
        ("unknown_key", content(base + "colour = 3\n")),
        ("data_is_fifo", lambda p: _search_with_data(p, fifo)),
        ("data_is_dev_zero", lambda p: _search_with_data(p, link("/dev/zero"))),
        ("data_is_directory", lambda p: _search_with_data(p, directory)),
        ("data_garbage_npz", lambda p: _search_with_data(p, content(b"garbage"), ".npz")),
        ("data_missing", content('data = "nope.csv"\nseed = 1\nfolds = 3\n')),
        (
            "grid_product_huge",
            content(
                base
                + "[grid]\n"
                + "".join(
                    f"{k} = [{', '.join(str(i + 1) for i in range(60))}]\n"
                    for k in ("epochs", "batch", "patience", "chunk")
                )
            ),
        ),
    ]


def _search_with_data(path: Path, make: Maker, suffix: str = ".csv") -> Path:
    make(path.with_name(path.stem + "-data" + suffix))
    return write(path, f'data = "{path.stem}-data{suffix}"\nseed = 1\nfolds = 3\n')


def experiment_contents() -> list[tuple[str, Maker]]:
    mc = '[computation]\nkind = "monte-carlo"\nseed = 1\nsamples = 100000\n'
    case = '[[case]]\nname = "a"\nworkers = 1\n'
    return [
        ("missing_computation", content('name = "x"\nrepetitions = 3\n' + case)),
        ("no_cases", content('name = "x"\nrepetitions = 3\n' + mc)),
        ("repetitions_2_63", content(f'name = "x"\nrepetitions = {2**63 - 1}\n' + mc + case)),
        ("repetitions_zero", content('name = "x"\nrepetitions = 0\n' + mc + case)),
        ("repetitions_string", content('name = "x"\nrepetitions = "3"\n' + mc + case)),
        (
            "cases_101",
            content(
                'name = "x"\nrepetitions = 3\n'
                + mc
                + "".join(f'[[case]]\nname = "c{i}"\nworkers = 1\n' for i in range(101))
            ),
        ),
        (
            "case_name_1MB",
            content(
                'name = "x"\nrepetitions = 3\n'
                + mc
                + f'[[case]]\nname = "{"n" * 1_000_000}"\nworkers = 1\n'
            ),
        ),
        (
            "case_chunk_1e13",
            content(
                'name = "x"\nrepetitions = 3\n'
                + mc
                + '[[case]]\nname = "a"\nworkers = 1\nchunk = 10000000000000\n'
            ),
        ),
        (
            "case_workers_zero",
            content('name = "x"\nrepetitions = 3\n' + mc + '[[case]]\nname = "a"\nworkers = 0\n'),
        ),
        (
            "case_both",
            content(
                'name = "x"\nrepetitions = 3\n'
                + mc
                + '[[case]]\nname = "a"\nworkers = 1\ncluster = "c"\n'
            ),
        ),
        ("case_cluster_fifo", lambda p: _experiment_with_cluster(p, fifo)),
        ("case_cluster_dev_zero", lambda p: _experiment_with_cluster(p, link("/dev/zero"))),
        ("case_cluster_garbage", lambda p: _experiment_with_cluster(p, content(b"\x00garbage"))),
        (
            "regression_steps_negative",
            content(
                'name = "x"\nrepetitions = 3\n[computation]\nkind = "regression"\nseed = 1\n'
                "samples = 1000\nrate = 0.5\nsteps = -1\n" + case
            ),
        ),
        (
            "samples_nan",
            content(
                'name = "x"\nrepetitions = 3\n'
                '[computation]\nkind = "monte-carlo"\nseed = 1\nsamples = nan\n' + case
            ),
        ),
        ("unknown_key", content('name = "x"\nrepetitions = 3\ncolour = 1\n' + mc + case)),
        ("case_is_table", content('name = "x"\nrepetitions = 3\n' + mc + '[case]\nname = "a"\n')),
    ]


def _experiment_with_cluster(path: Path, make: Maker) -> Path:
    make(path.with_name(path.stem + "-cluster"))
    text = (
        'name = "x"\nrepetitions = 3\n[computation]\nkind = "monte-carlo"\nseed = 1\n'
        f'samples = 100000\n[[case]]\nname = "a"\ncluster = "{path.stem}-cluster"\n'
    )
    return write(path, text)


def cluster_contents() -> list[tuple[str, Maker]]:
    header = "ANER_CLUSTER 1\n"
    record = 'worker "w1" local "-" "/bin/true" 1\n'
    return [
        ("no_header", content(record)),
        ("header_only", content(header)),
        ("wrong_version", content("ANER_CLUSTER 99\n" + record)),
        ("bad_kind", content(header + 'worker "w1" telepathy "-" "/bin/true" 1\n')),
        ("slots_zero", content(header + 'worker "w1" local "-" "/bin/true" 0\n')),
        (
            "slots_huge",
            content(header + 'worker "w1" local "-" "/bin/true" 99999999999999999999\n'),
        ),
        ("relative_executable", content(header + 'worker "w1" local "-" "aner" 1\n')),
        ("unclosed_quote", content(header + 'worker "w1 local "-" "/bin/true" 1\n')),
        ("duplicate_identity", content(header + record + record)),
        ("over_1MiB", content(header + "# " + "x" * (1 << 20) + "\n" + record)),
        ("mode_644", lambda p: _chmod(write(p, header + record), 0o644)),
    ]


def _chmod(path: Path, mode: int) -> Path:
    os.chmod(path, mode)
    return path


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    id: str
    argv: list[str]  # after `aner`; {in} is the input, {out} the output path
    make: Maker
    name: str  # the input's file name in the case directory
    swap_model: bool = False  # the input replaces model.npz in a copy of the trained job


COMMANDS: dict[str, list[tuple[str, list[str]]]] = {
    "csv": [
        (
            "train",
            [
                "parallel",
                "train",
                "--seed",
                "1",
                "--data",
                "{in}",
                "--epochs",
                "1",
                "--output",
                "{out}",
            ],
        ),
        (
            "cv",
            [
                "parallel",
                "cv",
                "--seed",
                "1",
                "--folds",
                "2",
                "--data",
                "{in}",
                "--epochs",
                "1",
                "--output",
                "{out}",
            ],
        ),
        (
            "predict",
            ["parallel", "predict", "--model", "{model}", "--data", "{in}", "--output", "{out}"],
        ),
    ],
    "npz": [],  # as csv, with a name ending .npz
    "model": [
        (
            "predict_model",
            ["parallel", "predict", "--model", "{in}", "--data", "{rows}", "--output", "{out}"],
        )
    ],
    "spec": [("run_spec", ["parallel", "run", "--spec", "{in}"])],
    "search": [("search_spec", ["parallel", "search", "--spec", "{in}", "--output", "{out}"])],
    "experiment": [
        (
            "scaling",
            ["parallel", "scaling", "--experiment", "{in}", "--output", "{out}", "--no-predict"],
        ),
        ("plan", ["parallel", "plan", "--experiment", "{in}"]),
    ],
    "cluster": [
        (
            "run_cluster",
            [
                "parallel",
                "run",
                "--seed",
                "1",
                "--samples",
                "1000",
                "--cluster",
                "{in}",
                "--output",
                "{out}",
            ],
        )
    ],
}
COMMANDS["npz"] = COMMANDS["csv"]

CONTENTS: dict[str, Callable[[], list[tuple[str, Maker]]]] = {
    "csv": csv_contents,
    "npz": npz_contents,
    "model": model_contents,
    "spec": spec_contents,
    "search": search_contents,
    "experiment": experiment_contents,
    "cluster": cluster_contents,
}
SUFFIX = {"csv": ".csv", "npz": ".npz", "model": ".npz", "spec": ".toml", "search": ".toml",
          "experiment": ".toml", "cluster": ""}  # fmt: skip


# Defects of the labels alone.
LABELS_ONLY = {"missing_y", "y_wrong_length", "y_two_d", "one_class", "1MB_label"}


def cases() -> list[Case]:
    """Every (slot, kind, command): the generic kinds for every slot (for `npz` and `model`
    only those that differ from `csv`'s by name), and each slot's own contents."""
    out: list[Case] = []
    for slot, commands in COMMANDS.items():
        kinds = [*generic(), *CONTENTS[slot]()]
        if slot == "npz":
            kinds = [
                *[k for k in generic() if k[0] in ("fifo", "garbage", "empty")],
                *npz_contents(),
            ]
        for kind, make in kinds:
            for command, argv in commands:
                if command == "predict" and kind in LABELS_ONLY:
                    continue  # predict reads no labels: these are good feature rows
                out.append(
                    Case(
                        id=f"{command}-{slot}-{kind}",
                        argv=argv,
                        make=make,
                        name=("model.npz" if slot == "model" else f"input{SUFFIX[slot]}"),
                        swap_model=slot == "model",
                    )
                )
    return out


# --------------------------------------------------------------------------- driving


# Runs in its own interpreter: python -c DRIVER CASES_JSON RESULTS_JSONL. One line of
# results per case, written as soon as the case ends, so a driver that dies names its case.
DRIVER = r"""
import contextlib, io, json, os, resource, signal, sys, time
cap = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

class Hang(BaseException):
    pass

def alarm(*_):
    raise Hang()

signal.signal(signal.SIGALRM, alarm)
from aner_coord.cli.main import main
cases = json.load(open(sys.argv[1]))
with open(sys.argv[2], "a") as results:
    for case in cases:
        os.chdir(case["cwd"])
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        signal.alarm(case["timeout"])
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = main(case["argv"])
                except SystemExit as exc:
                    rc = exc.code if isinstance(exc.code, int) else 2
        except Hang:
            rc = "hang"
        except BaseException as exc:
            rc = "raised " + type(exc).__name__ + ": " + str(exc)[:200]
        finally:
            signal.alarm(0)
        seconds = time.monotonic() - started
        line = {"id": case["id"], "rc": rc, "stderr": err.getvalue()[:8192], "seconds": seconds}
        results.write(json.dumps(line) + "\n")
        results.flush()
"""


def settle(case: Case, root: Path, model_job: Path, rows: Path) -> tuple[list[str], Path, Path]:
    """Make the case's input in its own directory; its argv, its --output path and its
    directory."""
    home = root / case.id
    home.mkdir()
    if case.swap_model:
        job = home / "job"
        job.mkdir()
        for entry in model_job.iterdir():
            if entry.is_file() and entry.name != "model.npz":
                (job / entry.name).write_bytes(entry.read_bytes())
        case.make(job / "model.npz")
        target = job
    else:
        target = case.make(home / case.name)
    out = home / "out"
    fill = {"{in}": str(target), "{out}": str(out), "{model}": str(model_job), "{rows}": str(rows)}
    return [fill.get(a, a) for a in case.argv], out, home


def problems(result: dict[str, object], out: Path) -> list[str]:
    """What is wrong with how a case was treated: not refused in exactly one line."""
    found = []
    rc, stderr = result["rc"], str(result["stderr"])
    if rc == "hang":
        found.append(f"hang: still running after {CASE_TIMEOUT_S} s")
    elif rc != 2:
        found.append(f"exit {rc}, expected 2")
    if "Traceback" in stderr or "MemoryError" in stderr:
        found.append("a traceback or a MemoryError")
    lines = stderr.splitlines()
    if len(lines) != 1 or not lines[0].startswith("aner: ") or len(stderr) > 4096:
        found.append(f"{len(lines)} stderr lines ({len(stderr)} bytes), expected one")
    if os.path.lexists(out):
        found.append(f"{out.name} exists after the refusal")
    if str(out.parent) not in stderr:  # the line names the file (each case has its folder)
        found.append("the line names no file of the case")
    if found:
        found.append(f"stderr: {stderr[:300]!r}")
    return found


def encode_cases(items: list[tuple[Case, list[str], Path]]) -> str:
    return json.dumps(
        [
            {"id": c.id, "argv": argv, "cwd": str(home), "timeout": CASE_TIMEOUT_S}
            for c, argv, home in items
        ]
    )
