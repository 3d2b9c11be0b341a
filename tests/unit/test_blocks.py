"""The worker's block cache (`aner_worker.blocks`) against a poisoned cache directory, in
process: a block that is a link to /dev/zero, a 3 GiB sparse file, a FIFO or of the wrong
size is missing (never read, never waited on) and is replaced by the good one; aner's own
directories are repaired to 0700 through their descriptors; an `aner` or `blocks` that is a
link to another directory refuses the cache, and that directory is never written or
chmod-ed. (tests/integration/test_poisoned_cache.py runs the same scenarios through a real
local-pipe worker.)"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from aner_worker.blocks import BLOCK_BYTES, BlockCache, CacheRefused, expected_sizes

DATA = b"aner block " * 1000
DIGEST = hashlib.sha256(DATA).hexdigest()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def in_time(call: Callable[[], object], seconds: float = 30) -> object:
    """`call()` on a thread, which must return within `seconds` (a blocked open fails)."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    return out[0]


def test_a_block_round_trips_owner_only(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "cache")
    assert cache.get(DIGEST) is None
    cache.put(DIGEST, DATA)
    assert cache.get(DIGEST) == DATA
    assert cache.get(DIGEST, len(DATA)) == DATA
    assert cache.get(DIGEST, len(DATA) + 1) is None  # not the size the staging says
    root = tmp_path / "cache" / "aner" / "blocks"
    assert (mode(root.parent), mode(root), mode(root / DIGEST)) == (0o700, 0o700, 0o600)
    assert os.listdir(root) == [DIGEST]  # no temporary file left


def test_expected_sizes_follow_the_split() -> None:
    assert expected_sizes(("a", "b", "c")) == {"a": BLOCK_BYTES, "b": BLOCK_BYTES, "c": None}
    assert expected_sizes(("a", "b", "a")) == {"a": BLOCK_BYTES, "b": BLOCK_BYTES}
    assert expected_sizes(()) == {}


def _sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(3 << 30)


POISONED_BLOCKS: list[tuple[str, Callable[[Path], object]]] = [
    ("symlink_dev_zero", lambda p: os.symlink("/dev/zero", p)),
    ("symlink_to_the_right_bytes", lambda p: os.symlink(p.with_name("elsewhere"), p)),
    ("sparse_3GiB", _sparse),
    ("fifo", lambda p: os.mkfifo(p, 0o600)),
    ("directory", lambda p: p.mkdir()),
    ("wrong_bytes", lambda p: p.write_bytes(DATA[:-1] + b"!")),
]


@pytest.mark.parametrize(("kind", "make"), POISONED_BLOCKS, ids=[k for k, _ in POISONED_BLOCKS])
def test_a_poisoned_block_is_missing_and_is_replaced(
    tmp_path: Path, kind: str, make: Callable[[Path], object]
) -> None:
    cache = BlockCache(tmp_path / "cache")
    cache.put(DIGEST, DATA)
    root = tmp_path / "cache" / "aner" / "blocks"
    (root / DIGEST).unlink()
    (root / "elsewhere").write_bytes(DATA)
    make(root / DIGEST)
    assert in_time(lambda: cache.get(DIGEST)) is None
    if kind == "directory":
        with pytest.raises(OSError):  # a directory is not replaced by a rename; still unread
            cache.put(DIGEST, DATA)
        return
    in_time(lambda: cache.put(DIGEST, DATA))
    assert stat.S_ISREG(os.lstat(root / DIGEST).st_mode)
    assert (root / DIGEST).read_bytes() == DATA and mode(root / DIGEST) == 0o600
    assert cache.get(DIGEST) == DATA


def test_a_block_of_another_size_than_the_staging_says_is_missing(tmp_path: Path) -> None:
    big = os.urandom(BLOCK_BYTES + 1)
    digest = hashlib.sha256(big).hexdigest()
    cache = BlockCache(tmp_path / "cache")
    cache.put(digest, big)  # stored, but no block of a staging is that large
    assert cache.get(digest) is None
    assert cache.get(digest, BLOCK_BYTES) is None


@pytest.mark.parametrize("which", ["aner", "blocks"])
def test_an_own_directory_open_to_others_is_repaired_through_its_descriptor(
    tmp_path: Path, which: str
) -> None:
    cache = BlockCache(tmp_path / "cache")
    cache.put(DIGEST, DATA)
    target = tmp_path / "cache" / "aner" / ("blocks" if which == "blocks" else "")
    os.chmod(target, 0o777)
    assert cache.get(DIGEST) == DATA
    assert mode(target) == 0o700


@pytest.mark.parametrize("which", ["aner", "blocks"])
def test_an_own_directory_that_is_a_link_refuses_the_cache_and_the_other_is_untouched(
    tmp_path: Path, which: str
) -> None:
    other = tmp_path / "other"
    other.mkdir(mode=0o755)
    os.chmod(other, 0o755)
    (other / "keep").write_bytes(b"theirs")
    base = tmp_path / "cache"
    if which == "aner":
        base.mkdir()
        os.symlink(other, base / "aner")
    else:
        (base / "aner").mkdir(parents=True, mode=0o700)
        os.symlink(other, base / "aner" / "blocks")
    cache = BlockCache(base)
    assert cache.get(DIGEST) is None
    with pytest.raises(CacheRefused, match="is a symbolic link or not a directory: not used"):
        cache.put(DIGEST, DATA)
    assert sorted(os.listdir(other)) == ["keep"] and mode(other) == 0o755


def test_the_base_may_be_a_link_of_the_users_choosing(tmp_path: Path) -> None:
    real = tmp_path / "disk"
    real.mkdir()
    os.symlink(real, tmp_path / "cache")
    cache = BlockCache(tmp_path / "cache")
    cache.put(DIGEST, DATA)
    assert cache.get(DIGEST) == DATA
    assert (real / "aner" / "blocks" / DIGEST).read_bytes() == DATA


def test_a_name_that_is_not_a_digest_is_neither_read_nor_written(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "cache")
    assert cache.get("../../etc/passwd") is None
    with pytest.raises(CacheRefused):
        cache.put("../x", DATA)
