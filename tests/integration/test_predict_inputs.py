"""`aner parallel predict` fed the malformed and hostile inputs of `predict_inputs`: tampered
model files, feature files of every malformed kind, paths that are not regular files. Each
must end without a hang, a traceback or a runaway read; a refusal is one line on stderr that
names the file or option, exit 2, and no predictions file; a success writes no warning.

The cases run concurrently in one module fixture (most of a case is the interpreter's start);
each parametrized test then asserts on its own case, so `-k` selects cases as usual."""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from predict_inputs import IS_ROOT, Case, cases, cli_env, problems, run_cli, settle
from support import run_aner

CASES = {case.id: case for case in cases()}


@pytest.fixture(scope="module")
def outcomes() -> Iterator[dict[str, list[str]]]:
    with tempfile.TemporaryDirectory(prefix="aner-predict-inputs-") as tmp:
        root = Path(tmp)
        base = root / "_base"
        made = run_aner(
            "parallel", "train", "--teacher", "200,4,2", "--epochs", "1", "--seed", "1",
            "--workers", "1", "--output", str(base), timeout=300,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        env = cli_env(root)

        def one(case: Case) -> tuple[str, list[str]]:
            argv, out = settle(case, base, root)
            return case.id, problems(case, run_cli(argv, env), out)

        with ThreadPoolExecutor(4) as pool:
            yield dict(pool.map(one, CASES.values()))


@pytest.mark.parametrize("case_id", list(CASES))
def test_a_malformed_input_is_refused_in_one_line(
    case_id: str, outcomes: dict[str, list[str]]
) -> None:
    found = outcomes[case_id]
    assert not found, f"{case_id} ({CASES[case_id].note}): {'; '.join(found)}"


def test_the_corpus_covers_what_the_report_found() -> None:
    # 97 cases of the report (one, mode 000, does not bind root), and the new ones.
    assert len(CASES) >= 96 + (0 if IS_ROOT else 1)
    assert {"model-W3_all_huge", "npz-zip_bomb_X_1e12", "kind_csv-fifo"} <= set(CASES)


def test_columns_are_mapped_by_name_whatever_their_order(tmp_path: Path) -> None:
    base = tmp_path / "job"
    made = run_aner(
        "parallel", "train", "--teacher", "300,3,2", "--epochs", "1", "--seed", "2",
        "--workers", "1", "--output", str(base),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    rows = [["0.1", "-0.5", "0.9"], ["0.7", "0.2", "-0.3"], ["-0.8", "0.6", "0.0"]]
    plain = tmp_path / "plain.csv"
    plain.write_text("x0,x1,x2\n" + "".join(",".join(r) + "\n" for r in rows))
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text(
        "id,x2,x0,note,x1\n" + "".join(f"{i},{r[2]},{r[0]},n,{r[1]}\n" for i, r in enumerate(rows))
    )
    outputs = []
    for name, data in (("a.csv", plain), ("b.csv", shuffled)):
        out = tmp_path / name
        done = run_aner(
            "parallel", "predict", "--model", str(base), "--data", str(data), "--output", str(out)
        )
        assert done.returncode == 0 and done.stderr == "", done.stderr
        outputs.append(list(csv.reader(out.read_text().splitlines())))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 4
    missing = tmp_path / "missing.csv"
    missing.write_text("x0,x2\n0.1,0.2\n")
    refused = run_aner("parallel", "predict", "--model", str(base), "--data", str(missing))
    assert refused.returncode == 2
    assert refused.stderr == (
        f"aner: --data {missing}: no column named 'x1' (the model's features: x0, x1, x2)\n"
    )
    again = run_aner(
        "parallel", "predict", "--model", str(base), "--data", str(plain),
        "--output", str(tmp_path / "a.csv"),
    )  # fmt: skip
    assert again.returncode == 2
    assert again.stderr == f"aner: --output {tmp_path / 'a.csv'} exists: give a new file name\n"
    assert list(csv.reader((tmp_path / "a.csv").read_text().splitlines())) == outputs[0]
