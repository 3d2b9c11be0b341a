"""Every command that reads a file a user names, fed the generated corpus of
`malformed_inputs` (a few hundred cases: files that are not files, contents that are not
what the command reads): each must be refused with exactly one line on stderr and exit 2,
nothing made at `--output`, within a generous per-case time, never a hang, a traceback or
a runaway read.

Most cases run in one interpreter that calls the CLI's `main(argv)` in a loop (start-up
would otherwise be most of the time); a sample of the kinds that could hang or grow a
process (a FIFO, a link to /dev/zero, a 3 GiB sparse file) also runs through the real
`aner` program, each in its own session under the same caps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from malformed_inputs import (
    CASE_TIMEOUT_S,
    DRIVER,
    MEM_CAP,
    cases,
    encode_cases,
    problems,
    settle,
)
from predict_inputs import cli_env, run_cli
from support import run_aner

CASES = {case.id: case for case in cases()}
# Through the real program: the kinds that would hang or grow a process, for every command.
SAMPLE = [
    cid
    for cid in CASES
    if cid.endswith(("-fifo", "-symlink_dev_zero", "-sparse_3GiB")) and "-npz-" not in cid
]


def _base(root: Path) -> tuple[Path, Path]:
    """A trained model's job directory, and feature rows it accepts."""
    job = root / "_model"
    made = run_aner(
        "parallel", "train", "--teacher", "200,3,2", "--epochs", "1", "--seed", "1",
        "--workers", "1", "--output", str(job), timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    rows = root / "_rows.csv"
    rows.write_text("x0,x1,x2\n0.1,0.2,0.3\n")
    return job, rows


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, list[str]]]:
    with tempfile.TemporaryDirectory(prefix="aner-malformed-inputs-") as tmp:
        root = Path(tmp)
        model, rows = _base(root)
        env = cli_env(root)
        (root / "in-process").mkdir()
        settled = {
            cid: settle(case, root / "in-process", model, rows) for cid, case in CASES.items()
        }
        cases_file, results_file = root / "cases.json", root / "results.jsonl"
        cases_file.write_text(encode_cases([(CASES[c], a, h) for c, (a, _o, h) in settled.items()]))
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER, str(cases_file), str(results_file), str(MEM_CAP)],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=CASE_TIMEOUT_S * 20 + 600,
        )  # fmt: skip
        results = {}
        if results_file.exists():
            for line in results_file.read_text().splitlines():
                result = json.loads(line)
                results[result["id"]] = result
        found: dict[str, list[str]] = {}
        for cid, (_argv, out, _home) in settled.items():
            if cid in results:
                found[cid] = problems(results[cid], out)
            else:
                found[cid] = [f"no result: the driver ended (exit {driver.returncode}): "
                              f"{driver.stderr[-500:]!r}"]  # fmt: skip

        def real(cid: str) -> tuple[str, list[str]]:
            argv, out, _home = settle(CASES[cid], root / "program", model, rows)
            got = run_cli(argv, env)
            result = {"rc": "hang" if got.rc is None else got.rc, "stderr": got.stderr}
            return cid, problems(result, out)

        (root / "program").mkdir()
        with ThreadPoolExecutor(4) as pool:
            for cid, more in pool.map(real, SAMPLE):
                found[cid + "@program"] = more
        yield found


@pytest.mark.parametrize("case_id", list(CASES))
def test_a_malformed_input_is_refused_in_one_line(
    case_id: str, outcomes: dict[str, list[str]]
) -> None:
    found = outcomes[case_id]
    assert not found, f"{case_id}: {'; '.join(found)}"


@pytest.mark.parametrize("case_id", SAMPLE)
def test_the_real_program_refuses_what_would_hang_or_grow(
    case_id: str, outcomes: dict[str, list[str]]
) -> None:
    found = outcomes[case_id + "@program"]
    assert not found, f"{case_id}: {'; '.join(found)}"


def test_the_corpus_reaches_every_command_that_reads_a_file() -> None:
    assert len(CASES) >= 300
    commands = {cid.split("-")[0] for cid in CASES}
    assert commands == {"train", "cv", "predict", "predict_model", "run_spec", "search_spec",
                        "scaling", "plan", "run_cluster"}  # fmt: skip
