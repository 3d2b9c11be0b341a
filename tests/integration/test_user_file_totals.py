"""What a command may read of a user's file and inflate from it is bounded in total, and a
file whose size `fstat` cannot vouch for is refused (issue 25 item 14; `aner_worker.npzfile`,
`aner_worker.files`).

Real commands, measured from outside: the peak resident memory of the `aner` process (its
`ru_maxrss`, reported by a wrapper whose only child it is) must stay below the bytes the
archive would inflate to, and the refusal is one line naming the file and the limit. The
archives are honest (members as large as they say, zeros deflated), built quickly by
repeating one fully flushed deflate block.
"""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import ANER, run_aner

PIECE = bytes(16 << 20)  # 16 MiB of zeros: one repeated deflate block


class _RepeatingCompressor:
    """Deflates PIECE once and repeats its bytes (a full flush makes each block stand alone);
    anything else is deflated as it comes."""

    _piece = zlib.compressobj(1, zlib.DEFLATED, -15)
    PIECE_DEFLATED = _piece.compress(PIECE) + _piece.flush(zlib.Z_FULL_FLUSH)

    def compress(self, data: Any) -> bytes:
        if data is PIECE:
            return self.PIECE_DEFLATED
        other = zlib.compressobj(1, zlib.DEFLATED, -15)
        return other.compress(data) + other.flush(zlib.Z_FULL_FLUSH)

    def flush(self) -> bytes:
        return zlib.compressobj(1, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)  # the final block


def zero_npz(path: Path, members: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> Path:
    """An NPZ whose members are float64 zeros of the given sizes (multiples of PIECE)."""
    with monkeypatch.context() as patch:
        # zipfile's writer asks this for its compressor (CPython's private helper).
        patch.setattr(zipfile, "_get_compressor", lambda *_: _RepeatingCompressor())
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, nbytes in members.items():
                assert nbytes % len(PIECE) == 0
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    header, {"descr": "<f8", "fortran_order": False, "shape": (nbytes // 8,)}
                )
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    member.write(header.getvalue())
                    for _ in range(nbytes // len(PIECE)):
                        member.write(PIECE)
    return path


def peak_of(*argv: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `aner argv` and return it with its peak resident memory in bytes."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
        "sys.exit(done.returncode)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, ANER, *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )
    peak = int(done.stdout.splitlines()[-1])
    return done, peak


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


GIB = 1 << 30


def test_data_whose_members_inflate_past_the_total_is_refused_before_inflating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = {"X": 800 << 20, "y": 800 << 20, "Z": 800 << 20}  # 2.3 GiB together
    data = zero_npz(tmp_path / "data.npz", members, monkeypatch)
    assert data.stat().st_size < 64 << 20
    for command in (
        ("train", "--data", str(data), "--seed", "1", "--output", str(tmp_path / "t")),
        ("cv", "--data", str(data), "--folds", "2", "--seed", "1", "--output", str(tmp_path / "c")),
    ):
        done, peak = peak_of("parallel", *command)
        assert done.returncode == 2, done.stderr
        line = _one_line(done.stderr)
        held = sum(members.values()) + 128 * len(members)  # and a .npy header each
        assert f"members hold {held:,} bytes in all; the limit is 2,147,483,648" in line, line
        assert peak < sum(members.values()) // 2, peak
        assert not (tmp_path / "t").exists() and not (tmp_path / "c").exists()


def test_a_model_whose_members_inflate_past_the_total_is_refused_by_predict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    done = run_aner(
        "parallel", "train", "--teacher", "400,4,2", "--epochs", "1", "--seed", "1",
        "--output", str(job), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b,c,d\n0,0,0,0\n")
    members = {f"W{i}": 128 << 20 for i in range(1, 6)}  # 640 MiB together
    zero_npz(job / "model.npz", members, monkeypatch)
    done, peak = peak_of("parallel", "predict", "--model", str(job), "--data", str(rows))
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    held = sum(members.values()) + 128 * len(members)  # and a .npy header each
    assert f"members hold {held:,} bytes in all; the limit is 268,435,456" in line, line
    assert peak < sum(members.values()) // 2, peak


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="no /proc/self/pagemap")
def test_a_file_that_holds_more_than_its_size_says_is_refused_within_one_piece(
    tmp_path: Path,
) -> None:
    out = tmp_path / "job"
    done, peak = peak_of(
        "parallel", "train", "--data", "/proc/self/pagemap", "--seed", "1", "--output", str(out)
    )
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)
    assert "/proc/self/pagemap" in line and "holds more than the 0 bytes its size says" in line
    assert peak < GIB, peak
    assert not out.exists()
