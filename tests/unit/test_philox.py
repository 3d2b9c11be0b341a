"""The Philox4x64-10 kernel and the Monte Carlo hit count against Random123 and numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numba import njit

from aner_worker.kernels.philox import (
    RANGE_LIMIT,
    _count_hits_kernel,
    count_hits,
    philox4x64_10,
    philox_block,
    warm_up,
)
from aner_worker.oracle import oracle_hits, words

U64 = 2**64
MAX_COUNT = 5000

# Random123 kat_vectors, philox4x64 10: counter (4 words), key (2 words), expected output.
KAT = [
    (
        (0x0, 0x0, 0x0, 0x0),
        (0x0, 0x0),
        (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B),
    ),
    (
        (U64 - 1,) * 4,
        (U64 - 1,) * 2,
        (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0),
    ),
    (
        (0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89),
        (0x452821E638D01377, 0xBE5466CF34E90C6C),
        (0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6),
    ),
]


@njit
def _philox(c0, c1, c2, c3, k0, k1):  # type: ignore[no-untyped-def]
    return philox4x64_10(c0, c1, c2, c3, k0, k1)


@njit
def _block(b, k0, k1):  # type: ignore[no-untyped-def]
    return philox_block(b, k0, k1)


def _u64s(values: tuple[int, ...]) -> list[np.uint64]:
    return [np.uint64(v) for v in values]


def _ints(words_: tuple[np.uint64, ...]) -> tuple[int, ...]:
    return tuple(int(w) for w in words_)


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    # Compile (or load from cache) before hypothesis starts timing examples.
    warm_up()


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_known_answers_numba(
    counter: tuple[int, ...], key: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    assert _ints(_philox(*_u64s(counter), *_u64s(key))) == expected


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_known_answers_numpy(
    counter: tuple[int, ...], key: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    # The oracle's engine: numpy increments the counter before it computes a block.
    value = sum(c << (64 * i) for i, c in enumerate(counter))
    bit_generator = np.random.Philox(key=key[0] + (key[1] << 64), counter=(value - 1) % 2**256)
    assert tuple(int(w) for w in bit_generator.random_raw(4)) == expected


def test_known_answer_through_block_and_oracle() -> None:
    expected = KAT[0][2]
    assert _ints(_block(np.uint64(0), np.uint64(0), np.uint64(0))) == expected
    assert tuple(int(w) for w in words(0, 0, 0, 4)) == expected


@settings(max_examples=200, deadline=None)
@given(b=st.integers(0, U64 - 1), seed=st.integers(0, U64 - 1), stream=st.integers(0, U64 - 1))
@example(b=U64 - 1, seed=U64 - 1, stream=U64 - 1)
@example(b=0, seed=42, stream=0)
def test_block_matches_oracle(b: int, seed: int, stream: int) -> None:
    got = _ints(_block(np.uint64(b), np.uint64(seed), np.uint64(stream)))
    assert got == tuple(int(w) for w in words(seed, stream, 4 * b, 4))


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, U64 - 1),
    stream=st.integers(0, 3),
    first=st.integers(0, 64),
    n=st.integers(0, 40),
)
def test_oracle_words_unaligned(seed: int, stream: int, first: int, n: int) -> None:
    whole = words(seed, stream, 0, first + n)
    assert np.array_equal(words(seed, stream, first, n), whole[first:])


def test_reference_count_ten_million() -> None:
    # SPEC reference value for seed 42.
    assert count_hits(42, 0, 10_000_000) == 7_856_672
    assert oracle_hits(42, 0, 10_000_000) == 7_856_672


def test_single_samples_match_their_words() -> None:
    # Sample i reads W[2i] and W[2i+1], whichever half of a block those are.
    seed = 2024
    w = words(seed, 0, 0, 64)
    x = (w[0::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    y = (w[1::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    expected = (x * x + y * y < 1.0).astype(int)
    assert [count_hits(seed, i, 1) for i in range(32)] == expected.tolist()
    assert 0 < expected.sum() < 32


def _ranges(max_count: int) -> st.SearchStrategy[tuple[int, int]]:
    # (start, count) with start + count <= 2**62, starts spread over the whole range.
    return st.integers(0, max_count).flatmap(
        lambda count: st.tuples(
            st.one_of(
                st.integers(0, RANGE_LIMIT - count),
                st.integers(0, 10**6),
                st.integers(RANGE_LIMIT - count - 10**6, RANGE_LIMIT - count),
            ),
            st.just(count),
        )
    )


@settings(max_examples=1000, deadline=None)
@given(seed=st.integers(0, U64 - 1), span=_ranges(MAX_COUNT))
@example(seed=0, span=(0, 0))
@example(seed=U64 - 1, span=(0, 1))
@example(seed=U64 - 1, span=(RANGE_LIMIT - MAX_COUNT, MAX_COUNT))
@example(seed=U64 - 1, span=(RANGE_LIMIT - 1, 1))
def test_count_hits_matches_oracle(seed: int, span: tuple[int, int]) -> None:
    start, count = span
    assert count_hits(seed, start, count) == oracle_hits(seed, start, count)


@pytest.mark.parametrize(
    ("seed", "start", "count"),
    [
        (42, 0, 0),
        (42, 7, 0),
        (42, 0, 1),
        (42, 1, 1),
        (42, 3, 1),
        (42, 1, 2),
        (42, 1, 3),
        (42, 2, 9),
        (42, 3, 8),
        (42, 5, 16),
        (42, 1, 4999),
        (42, 12_345, 4_000),
        (7, 999_999_999, 5_000),
        (U64 - 1, 0, 4_097),
        (U64 - 1, 1, 4_096),
        (U64 - 2, 2**40 + 1, 1_001),
        (1, RANGE_LIMIT - 1, 1),
        (1, RANGE_LIMIT - 2, 2),
        (1, RANGE_LIMIT - 5_000, 5_000),
        (U64 - 1, RANGE_LIMIT - 4_999, 4_999),
        (0, 0, 0),
    ],
)
def test_count_hits_edges(seed: int, start: int, count: int) -> None:
    assert count_hits(seed, start, count) == oracle_hits(seed, start, count)


@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, U64 - 1),
    span=_ranges(20_000),
    cuts=st.lists(st.floats(0.0, 1.0), max_size=8),
)
def test_chunking_invariance(seed: int, span: tuple[int, int], cuts: list[float]) -> None:
    start, count = span
    bounds = sorted({start, start + count, *(start + int(c * count) for c in cuts)})
    pieces = sum(count_hits(seed, a, b - a) for a, b in itertools.pairwise(bounds))
    assert pieces == count_hits(seed, start, count)


@pytest.mark.parametrize(
    ("seed", "start", "count"),
    [
        (-1, 0, 1),
        (U64, 0, 1),
        (0, -1, 1),
        (0, 0, -1),
        (0, RANGE_LIMIT, 1),
        (0, RANGE_LIMIT - 10, 11),
    ],
)
def test_rejects_out_of_range(seed: int, start: int, count: int) -> None:
    with pytest.raises(ValueError):
        count_hits(seed, start, count)


@pytest.mark.parametrize(("seed", "start", "count"), [(1.0, 0, 1), (1, True, 1), (1, 0, "2")])
def test_rejects_non_integers(seed: object, start: object, count: object) -> None:
    with pytest.raises(TypeError):
        count_hits(seed, start, count)  # type: ignore[arg-type]


def test_accepts_numpy_integers_and_limits() -> None:
    # Typed as int, but numpy integers from a caller's arrays are accepted at run time.
    hits = count_hits(np.uint64(U64 - 1), np.int64(3), np.int32(5))  # type: ignore[arg-type]
    assert hits == oracle_hits(U64 - 1, 3, 5)
    assert count_hits(0, RANGE_LIMIT, 0) == 0


def test_kernel_releases_gil_without_fastmath() -> None:
    # The worker runs kernels on threads; without nogil they would serialise on the GIL.
    # fastmath would allow contraction into FMA and change which samples hit.
    assert _count_hits_kernel.targetoptions["nogil"] is True
    assert not _count_hits_kernel.targetoptions.get("fastmath")
