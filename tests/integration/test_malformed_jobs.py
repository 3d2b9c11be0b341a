"""Every job file broken every way, fed to the commands that read job files (`status`,
`cancel`, `resume`), and experiment and registry files over their limits fed to `scaling`
and `plan`: a generated set of a few hundred cases (ported from the corpus of malformed
inputs that found them).

Each case runs the real CLI in its own session, under an address-space cap (RLIMIT_AS set
in the child, so a runaway read fails at once rather than eating the machine) and a hard
timeout, and must: not hang; print no traceback and no MemoryError; exit with its expected
code; when it refuses (exit 2), write exactly one short line naming the job, file or
option; leave a job directory as it was (names, sizes, times) when it refuses; and a
resumed job must end with the uninterrupted run's hits.

The cases run concurrently in a module fixture (most of a case is interpreter start-up);
each parametrized test then asserts on its own case's outcome, so `-k` selects as usual.

Outcomes fixed here where the contract leaves a choice: `status`/`cancel` refuse (2) a
`status.json` that cannot be read as one and report a broken `result.json` of a COMPLETED
job as a note (0); a lock file that is not a regular file is nobody's lock; `resume` refuses
(2) any job file it cannot read or trust, including a ledger damaged before its tail (only a
torn tail is forgiven, and then the job resumes to the same hits).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from suite_env import child_env
from support import ANER, HANG_S, unix_socket

from aner_coord.jobdir import jobkey
from aner_coord.jobdir.ledger import Accepted, Committed, frame
from aner_worker.kernels.base import encode
from aner_worker.kernels.montecarlo import McStats

SEED = 20261203
MEM_CAP = 2 << 30
TIMEOUT_S = HANG_S  # a hang's bound: every case ends in about a second on an idle machine
JOBS = 4
MAX_LINE = 4096
GiB = 1 << 30

Tamper = Callable[[Path], object]


# --------------------------------------------------------------------------- file makers


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, 0o600)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


def sparse(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(3 * GiB)
    return path


def directory(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def symlink(path: Path, target: str | Path) -> Path:
    os.symlink(target, path)
    return path


def replaced(name: str, how: Callable[[Path], object]) -> Tamper:
    def tamper(job: Path) -> None:
        p = job / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif os.path.lexists(p):
            p.unlink()
        how(p)

    return tamper


def content(name: str, make: Callable[[bytes], bytes]) -> Tamper:
    def tamper(job: Path) -> None:
        p = job / name
        old = p.read_bytes() if p.exists() else b""
        write(p, make(old))

    return tamper


def variants(name: str) -> list[tuple[str, Tamper]]:
    """The ways one job file may be broken, by content and by kind."""
    stem = name.replace(".json", "").replace("-", "_").replace(".", "_")
    noise = random.Random(f"{SEED}:{name}").randbytes(3000)
    return [
        (f"{stem}_garbage", content(name, lambda _old: noise)),
        (f"{stem}_empty", content(name, lambda _old: b"")),
        (f"{stem}_truncated", content(name, lambda old: old[: max(1, len(old) // 2)])),
        (f"{stem}_json_list", content(name, lambda _old: b"[1, 2, 3]\n")),
        (f"{stem}_json_wrong_object", content(name, lambda _old: b'{"schema": 7, "seq": "x"}')),
        (f"{stem}_deep_json", content(name, lambda _old: b"[" * 200_000 + b"]" * 200_000)),
        (f"{stem}_bad_utf8", content(name, lambda old: old.replace(b'"', b'"\xff', 1))),
        (f"{stem}_fifo", replaced(name, fifo)),
        (f"{stem}_directory", replaced(name, directory)),
        (f"{stem}_symlink_dev_zero", replaced(name, lambda p: symlink(p, "/dev/zero"))),
        (f"{stem}_symlink_to_a_copy", replaced(name, lambda p: symlink(p, p.parent / "copy"))),
        (f"{stem}_socket", replaced(name, unix_socket)),
        (f"{stem}_sparse_3GiB", replaced(name, sparse)),
    ]


def edit_json(name: str, edit: Callable[[dict[str, object]], object]) -> Tamper:
    def tamper(job: Path) -> None:
        data = json.loads((job / name).read_text())
        edit(data)
        write(job / name, json.dumps(data))

    return tamper


def job_key(job: Path) -> bytes:
    return bytes.fromhex(json.loads((job / "run-manifest.json").read_text())["job"])


def ledger_of(*records: object) -> Tamper:
    """A ledger of the job's own identity holding `records` after its opening record (the
    opening record the job wrote is kept), keyed as its owner's aner keys them: what the
    checks behind the MACs refuse (a record written without the key: tests/unit/test_ledger.py)."""

    def tamper(job: Path) -> None:
        data = (job / "ledger").read_bytes()
        opened = data[: 12 + int.from_bytes(data[:4], "big")]
        key = job_key(job)
        secret = jobkey.user_secret(create=False)
        assert secret is not None
        mac_key, framed = jobkey.job_mac_key(secret, key), [opened]
        for record in records:
            framed.append(frame(key, record, mac_key, sum(map(len, framed))))  # type: ignore[arg-type]
        write(job / "ledger", b"".join(framed))

    return tamper


def from_other_job(name: str) -> Tamper:
    """The file of the seed-2 job (the bases live in `_bases` beside every case)."""
    return lambda job: shutil.copyfile(job.parent.parent / "_bases" / "other" / name, job / name)


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    id: str
    argv: list[str]  # after `aner`; "{job}" stands for the job path
    rc: tuple[int, ...]
    base: str = "none"  # "done", "offline" or "none" (no job directory is made)
    tamper: Tamper | None = None
    job_path: Callable[[Path], Path] | None = None  # what --job names, if not the job
    words: str = ""  # a refusal's line must contain this (besides naming the job or file)
    same_hits: bool = False  # exit 0 must come with the uninterrupted run's hits
    files: Callable[[Path], None] | None = None  # other files the command reads
    unchanged: bool = True


@dataclass
class Outcome:
    rc: int | None
    stderr: str
    seconds: float
    problems: list[str] = field(default_factory=list)


class _Cases:
    """The job-file cases, command by command."""

    def __init__(self) -> None:
        self.out: list[Case] = []

    def add(
        self,
        cid: str,
        command: str,
        base: str,
        tamper: Tamper | None,
        rc: tuple[int, ...],
        *extra: str,
        words: str = "",
        same_hits: bool = False,
    ) -> None:
        argv = ["parallel", command, "--job", "{job}", *extra]
        unchanged = not same_hits  # a resumed job writes its files, as it should
        self.out.append(
            Case(cid, argv, rc, base, tamper, words=words, same_hits=same_hits, unchanged=unchanged)
        )

    def status(self) -> None:
        # A status.json that cannot be read as one is refused; a broken result.json,
        # manifest or ledger of a completed job is not what status reports from.
        for cid, tamper in variants("status.json"):
            self.add(f"status-{cid}", "status", "done", tamper, (2,), words="status.json")
        for name in ("result.json", "run-manifest.json", "ledger", "request.json"):
            for cid, tamper in variants(name):
                self.add(f"status-{cid}", "status", "done", tamper, (0,))
        for cid, tamper in variants("coordinator.lock"):
            self.add(f"status-done-{cid}", "status", "done", tamper, (0,))
            self.add(f"status-offline-{cid}", "status", "offline", tamper, (5,))
        for cid, tamper in variants("status.json")[:1] + variants("status.json")[7:9]:
            self.add(f"status-json-{cid}", "status", "done", tamper, (2,), "--json")
            self.add(f"status-watch-{cid}", "status", "offline", tamper, (2,), "--watch")
        unknown = edit_json("status.json", lambda d: d.__setitem__("state", "EXPLODED"))
        self.add("status-state_unknown", "status", "done", unknown, (2,))
        huge = edit_json("status.json", lambda d: d.__setitem__("seq", -(10**30)))
        self.add("status-seq_huge_negative", "status", "done", huge, (0, 2))  # shown or refused
        gone = lambda job: (job / "status.json").unlink()  # noqa: E731
        self.add("status-missing_offline", "status", "offline", gone, (5,))

    def cancel(self) -> None:
        # Of an offline job (a broken status refused) and of a completed one (nothing to do).
        for cid, tamper in variants("status.json"):
            self.add(f"cancel-{cid}", "cancel", "offline", tamper, (2,), words="status.json")
        for cid, tamper in variants("result.json") + variants("coordinator.lock"):
            self.add(f"cancel-{cid}", "cancel", "done", tamper, (0,))
        for cid, tamper in variants("cancel-request"):
            self.add(f"cancel-offline-{cid}", "cancel", "offline", tamper, (5,))

    def resume(self) -> None:
        self.add("resume-control_offline", "resume", "offline", None, (0,), same_hits=True)
        for name in ("run-manifest.json", "request.json", "status.json"):
            for cid, tamper in variants(name):
                self.add(f"resume-{cid}", "resume", "offline", tamper, (2,), words=name)
        torn = ("_empty", "_truncated", "_json_list")  # shorter than a record: a torn tail
        for cid, tamper in variants("ledger"):
            if cid.endswith(torn):
                self.add(f"resume-{cid}", "resume", "offline", tamper, (0,), same_hits=True)
            elif not cid.endswith("_bad_utf8"):  # (a ledger has no text)
                self.add(f"resume-{cid}", "resume", "offline", tamper, (2,), words="ledger")
        for cid, tamper in variants("cancel-request"):
            if cid.endswith("_directory"):
                words = "cannot remove"
                self.add(f"resume-{cid}", "resume", "offline", tamper, (2,), words=words)
            else:  # whatever it holds, it goes: the user asked to resume
                self.add(f"resume-{cid}", "resume", "offline", tamper, (0,), same_hits=True)
        for cid, tamper, words in RESUME_REFUSALS:
            self.add(f"resume-{cid}", "resume", "offline", tamper, (2,), words=words)
        zeros = lambda job: write(job / "ledger", bytes(5000))  # noqa: E731
        self.add("resume-ledger_zeros", "resume", "offline", zeros, (0,), same_hits=True)
        self.add("resume-completed", "resume", "done", None, (2,), words="has COMPLETED")

    def paths(self) -> None:
        paths: list[tuple[str, Callable[[Path], Path]]] = [
            ("path_missing", lambda p: p),
            ("path_regular_file", lambda p: write(p, b"{}")),
            ("path_fifo", fifo),
            ("path_dev_zero", lambda p: Path("/dev/zero")),
            ("path_socket", unix_socket),
            ("path_symlink_to_job", lambda p: symlink(p, p.parent / "base")),
            ("path_dangling_symlink", lambda p: symlink(p, p.parent / "gone")),
            ("path_empty_directory", directory),
        ]
        for command in ("status", "cancel", "resume"):
            for cid, maker in paths:
                argv = ["parallel", command, "--job", "{job}"]
                case = Case(f"{command}-{cid}", argv, (2,), "done", job_path=maker)
                self.out.append(dataclasses.replace(case, unchanged=False))


def _computation(key: str, value: object) -> Tamper:
    return edit_json("request.json", lambda d: d["computation"].__setitem__(key, value))  # type: ignore[index]


OTHER_CLUSTER = {"kind": "cluster", "config": "/nonexistent/c", "chunk": 1000}
RESUME_REFUSALS: list[tuple[str, Tamper, str]] = [
    ("ledger_from_other_job", from_other_job("ledger"), "belongs to another job"),
    ("manifest_from_other_job", from_other_job("run-manifest.json"),
     "seed: 2 when it began, 1 now"),
    ("request_edited_seed", _computation("seed", 2), "seed: 1 when it began, 2 now"),
    ("request_edited_samples", _computation("samples", 5000),
     "samples: 1000 when it began, 5000 now"),
    ("request_edited_chunk",
     edit_json("request.json", lambda d: d["execution"].__setitem__("chunk", 100)),  # type: ignore[index]
     "plan.chunk: 65536 when it began, 100 now"),
    ("request_edited_cluster",
     edit_json("request.json", lambda d: d.__setitem__("execution", OTHER_CLUSTER)),
     "its request no longer admits: cluster file /nonexistent/c"),
    ("request_missing", lambda job: (job / "request.json").unlink(), "it has no request.json"),
    ("manifest_fingerprint_edited",
     edit_json("run-manifest.json", lambda d: d.__setitem__("source_fingerprint", "0" * 64)),
     "was started by a different aner"),
    ("manifest_without_identity",
     edit_json("run-manifest.json", lambda d: d.__setitem__("job", "")),
     "records no job identity"),
    ("ledger_record_implausible",
     ledger_of(Accepted(0, 0, encode(McStats(1000))), Committed(0)),
     "1,000 hits in 1,000 samples is more than 12 standard deviations"),
    ("ledger_record_impossible", ledger_of(Accepted(0, 0, encode(McStats(1001)))),
     "1001 hits is impossible for 1000 samples"),
    ("ledger_record_pass_out_of_range", ledger_of(Accepted(99, 10**9, encode(McStats(1)))),
     "records pass 99; this job has 1"),
    ("ledger_record_chunk_out_of_range", ledger_of(Accepted(0, 10**9, encode(McStats(1)))),
     "chunk 1000000000 of pass 0 is refused: that pass has 1 chunks"),
    ("ledger_record_not_statistics", ledger_of(Accepted(0, 0, b"\xc1")),
     "holds statistics this job cannot read"),
    ("ledger_record_length_4GiB",
     lambda job: write(job / "ledger", (0xFFFFFFFF).to_bytes(4, "big") + bytes(4) + b"x" * 100),
     "is damaged (its header's checksum is wrong)"),
]  # fmt: skip


def _job_cases() -> list[Case]:
    cases = _Cases()
    cases.status()
    cases.cancel()
    cases.resume()
    cases.paths()
    return cases.out


EXPERIMENT = (
    'name = "malformed"\nrepetitions = {reps}\n'
    '[computation]\nkind = "monte-carlo"\nsamples = 1000\nseed = 1\n{cases}'
)
ONE = '[[case]]\nname = "local-1"\nworkers = 1\n'


def _experiment_cases() -> list[Case]:
    out: list[Case] = []
    bodies = {
        "repetitions_2_63_minus_1": EXPERIMENT.format(reps=2**63 - 1, cases=ONE),
        "repetitions_101": EXPERIMENT.format(reps=101, cases=ONE),
        "case_name_1MiB": EXPERIMENT.format(reps=3, cases=ONE.replace("local-1", "n" * (1 << 20))),
        "name_4MiB": EXPERIMENT.format(reps=3, cases=ONE).replace("malformed", "m" * (4 << 20)),
        "cases_1000": EXPERIMENT.format(
            reps=3, cases="".join(ONE.replace("local-1", f"c{i}") for i in range(1000))
        ),
    }
    for cid, body in bodies.items():

        def files(root: Path, body: str = body) -> None:
            write(root / "experiment.toml", body)

        out.append(Case(
            f"experiment-scaling-{cid}",
            ["parallel", "scaling", "--experiment", "{root}/experiment.toml", "--output",
             "{root}/out", "--registry", "{root}/registry.json", "--no-predict"],
            (2,), files=files, words="experiment", unchanged=False,
        ))  # fmt: skip
        out.append(Case(
            f"experiment-plan-{cid}",
            ["parallel", "plan", "--experiment", "{root}/experiment.toml", "--save",
             "{root}/probe.json"],
            (2,), files=files, words="experiment", unchanged=False,
        ))  # fmt: skip
    for cid, tamper in variants("registry.json"):
        if cid.endswith(("_truncated", "_bad_utf8", "_symlink_to_a_copy")):
            continue  # (of an empty file: nothing to cut)

        def registry(root: Path, tamper: Tamper = tamper) -> None:
            write(root / "experiment.toml", EXPERIMENT.format(reps=3, cases=ONE))
            tamper(root)

        out.append(Case(
            f"scaling-{cid}",
            ["parallel", "scaling", "--experiment", "{root}/experiment.toml", "--output",
             "{root}/out", "--registry", "{root}/registry.json", "--no-predict"],
            (2,), files=registry, words="registry", unchanged=False,
        ))  # fmt: skip
    return out


SPEC = '[computation]\nkind = "monte-carlo"\nsamples = {samples}\nseed = 1\n{more}'


def _spec_cases() -> list[Case]:
    """`run --spec FILE` (and `--resume`, the systemd unit's): the file by kind and size,
    and values named by their keys in it."""
    out: list[Case] = []
    kinds: list[tuple[str, Callable[[Path], object], str]] = [
        ("fifo", fifo, "it is a FIFO, not a regular file"),
        ("directory", directory, "it is a directory, not a regular file"),
        ("symlink_dev_zero", lambda p: symlink(p, "/dev/zero"), "a character device"),
        ("symlink_urandom", lambda p: symlink(p, "/dev/urandom"), "a character device"),
        ("sparse_3GiB", sparse, "over the limit of 1,048,576 bytes"),
        ("socket", unix_socket, "a socket or a device"),
        ("deep_arrays", lambda p: write(p, "x = " + "[" * 10_000 + "]" * 10_000), "too deeply"),
        ("samples_negative", lambda p: write(p, SPEC.format(samples=-5, more="")),
         "`samples` must be positive, got -5"),
        ("workers_huge", lambda p: write(p, SPEC.format(
            samples=1000, more='[execution]\nkind = "local"\nworkers = 9999999\n')),
         "use at most"),
        ("chunk_zero", lambda p: write(p, SPEC.format(
            samples=1000, more='[execution]\nkind = "local"\nchunk = 0\n')),
         "`chunk` must be positive, got 0"),
    ]  # fmt: skip
    for cid, make, words in kinds:
        for resume in ((), ("--resume",)):

            def files(root: Path, make: Callable[[Path], object] = make) -> None:
                make(root / "job.toml")

            name = f"spec-{cid}" + ("-resume" if resume else "")
            argv = ["parallel", "run", "--spec", "{root}/job.toml", *resume]
            out.append(Case(name, argv, (2,), files=files, words=words, unchanged=False))
    return out


CASES = _job_cases() + _experiment_cases() + _spec_cases()
BY_ID = {c.id: c for c in CASES}


# --------------------------------------------------------------------------- running


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEM_CAP, MEM_CAP))


def run_cli(argv: list[str], cwd: Path, env: dict[str, str]) -> Outcome:
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [ANER, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            cwd=cwd, env=env, start_new_session=True, preexec_fn=_cap,
        )  # fmt: skip
        try:
            rc: int | None = proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: whatever it left
            proc.wait()
        err.seek(0)
        stderr = err.read(1 << 20).decode("utf-8", "replace")
    return Outcome(rc, stderr, time.monotonic() - start)


def listing(path: Path) -> list[tuple[str, int, int, int]]:
    out = []
    for name in sorted(os.listdir(path)):
        info = os.lstat(path / name)
        out.append((name, stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns))
    return out


class Bases:
    """Completed Monte Carlo jobs made once with the CLI: 1,000 samples, seeds 1 and 2."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        root.mkdir()
        for name, seed in (("done", "1"), ("other", "2")):
            done = subprocess.run(
                [ANER, "parallel", "run", "--samples", "1000", "--seed", seed, "--workers", "1",
                 "--output", str(root / name)],
                capture_output=True, text=True, env=env, timeout=300, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        self.hits = json.loads((root / "done" / "result.json").read_text())["hits"]

    def copy(self, base: str, dest: Path) -> Path:
        shutil.copytree(self.root / "done", dest, symlinks=True)
        shutil.copyfile(dest / "status.json", dest / "copy")
        if base == "offline":  # as a coordinator killed before its end would leave it
            (dest / "result.json").unlink()
            status = json.loads((dest / "status.json").read_text())
            status["state"] = "RUNNING"
            write(dest / "status.json", json.dumps(status))
        return dest


def run_case(case: Case, root: Path, bases: Bases, env: dict[str, str]) -> Outcome:
    where = root / case.id
    where.mkdir()
    job = where / "job"
    if case.base != "none":
        bases.copy(case.base, job if case.job_path is None else where / "base")
    if case.tamper is not None:
        case.tamper(job)
    if case.files is not None:
        case.files(where)
    named = case.job_path(job) if case.job_path is not None else job
    before = listing(job) if case.base != "none" and case.job_path is None else None
    argv = [a.replace("{job}", str(named)).replace("{root}", str(where)) for a in case.argv]
    got = run_cli(argv, where, env)
    got.problems.extend(_judged(case, got, where, named))
    if got.rc == 2 and before is not None and case.unchanged and listing(job) != before:
        got.problems.append("left behind: the job directory changed")
    if got.rc == 0 and case.same_hits:
        got.problems.extend(_same_hits(job, bases.hits))
    return got


def _judged(case: Case, got: Outcome, where: Path, named: Path) -> list[str]:
    problems = []
    if got.rc is None:
        problems.append(f"hang: still running after {TIMEOUT_S:g} s")
    if "Traceback" in got.stderr or "MemoryError" in got.stderr:
        problems.append("traceback: " + got.stderr.strip().splitlines()[-1][:300])
    if got.rc is not None and got.rc not in case.rc:
        problems.append(f"exit code: {got.rc}, expected {case.rc}")
    if got.rc != 2:
        return problems
    lines = got.stderr.splitlines()
    if len(lines) != 1 or len(got.stderr) > MAX_LINE:
        problems.append(f"stderr: {len(lines)} lines, {len(got.stderr)} bytes")
    elif not any(n in lines[0] for n in (str(named), str(where), "--job")):
        problems.append("names: the line names neither the job nor the file")
    elif case.words and case.words not in lines[0]:
        problems.append(f"words: {case.words!r} not in the line")
    if any(os.path.lexists(where / n) for n in ("out", "probe.json")):
        problems.append("left behind: an output after a refusal")
    return problems


def _same_hits(job: Path, want: int) -> list[str]:
    try:
        hits = json.loads((job / "result.json").read_text())["hits"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"check: exit 0 but no result ({exc})"]
    return [] if hits == want else [f"check: {hits} hits; the uninterrupted run gives {want}"]


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Outcome]]:
    wanted = [
        BY_ID[item.callspec.params["case_id"]]
        for item in request.session.items
        if getattr(item, "callspec", None) is not None
        and "case_id" in item.callspec.params
        and item.module is not None
        and Path(str(item.module.__file__)).resolve() == Path(__file__).resolve()
    ]
    root = tmp_path_factory.mktemp("malformed")
    home = root / "home"
    (home / ".cache").mkdir(parents=True)
    keep = ("PATH", "LANG", "TMPDIR")
    env = child_env({k: os.environ[k] for k in keep if k in os.environ})
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_DATA_HOME=str(home / "data"), PYTHONDONTWRITEBYTECODE="1")  # fmt: skip
    for name in ("NUMBA_CACHE_DIR",):
        if name in os.environ:
            env[name] = os.environ[name]
    bases = Bases(root / "_bases", env) if wanted else None  # cases find it there
    results: dict[str, Outcome] = {}
    if wanted:
        assert bases is not None
        with ThreadPoolExecutor(JOBS) as pool:
            futures = {c.id: pool.submit(run_case, c, root, bases, env) for c in wanted}
            results = {cid: f.result() for cid, f in futures.items()}
    yield results


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_a_malformed_job_file_or_experiment_is_one_line_and_its_exit_code(
    case_id: str, outcomes: dict[str, Outcome]
) -> None:
    got = outcomes[case_id]
    assert not got.problems, f"{case_id}: {got.problems}\nstderr: {got.stderr[:1500]}"
