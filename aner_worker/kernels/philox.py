"""Philox4x64-10 and the Monte Carlo hit-count kernel of stream ``aner-mc/philox4x64-10/v1``.

The generator is Philox4x64-10 exactly as Random123 and ``numpy.random.Philox`` define it
(docs/contracts.md, section 1): block ``b`` of stream ``(seed, stream)`` is the cipher applied to
counter ``(b, 0, 0, 0)`` with key ``(seed, stream)``. Because a block is a pure function of its
index, any range of samples can be computed anywhere without state, so the hit count of a
range never depends on how the range was split among workers.

Everything inside the kernels stays in ``uint64``: numba promotes ``uint64`` mixed with a
signed integer to ``float64``, which would silently corrupt the words, hence the
``np.uint64`` constants throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from aner_worker import startup

startup.prepare()  # every numba kernel module imports this one first

from llvmlite import ir  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

from aner_worker.kernels.base import Stopped  # noqa: E402
from aner_worker.kernels.identities import SEED_LIMIT  # noqa: E402

# Largest exclusive end of a sample (or row) range accepted by the public wrappers. It keeps
# every block index far inside uint64 and every range bound inside int64.
RANGE_LIMIT = 2**62

# Philox4x64 multipliers and Weyl key increments (Random123 philox.h).
_M0 = np.uint64(0xD2E7470EE14C6C93)
_M1 = np.uint64(0xCA5A826395121157)
_W0 = np.uint64(0x9E3779B97F4A7C15)
_W1 = np.uint64(0xBB67AE8584CAA73B)

_SHIFT = np.uint64(11)
_TWO_M53 = 2.0**-53


def _type_mulhilo64(typingctx: Any, a: Any, b: Any) -> Any:
    # Only uint64 x uint64: a signed or float operand here would mean a promotion slipped in.
    if a != types.uint64 or b != types.uint64:
        return None
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)  # type: ignore[no-untyped-call]

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        i128 = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], i128), builder.zext(args[1], i128))
        high = builder.trunc(builder.lshr(product, ir.Constant(i128, 64)), i64)
        low = builder.trunc(product, i64)
        return context.make_tuple(builder, signature.return_type, (high, low))

    return sig, codegen


# Full 64x64->128 product as ``(high, low)`` uint64 words, for nopython code only. Emitted as
# one i128 multiply, which LLVM lowers to a single ``mulx``/``mul`` on x86-64 (``umulh`` plus
# ``mul`` on AArch64), instead of four 32-bit multiplies with carries. Typed ``Any`` because
# numba's intrinsic wrapper does not describe its nopython call signature to type checkers.
mulhilo64: Any = intrinsic(_type_mulhilo64)


@njit(inline="always", nogil=True, cache=True)
def philox4x64_10(c0, c1, c2, c3, k0, k1):  # type: ignore[no-untyped-def]
    """Philox4x64-10 of counter ``(c0, c1, c2, c3)`` under key ``(k0, k1)``; all uint64."""
    for r in range(10):
        if r > 0:
            k0 = k0 + _W0
            k1 = k1 + _W1
        hi0, lo0 = mulhilo64(_M0, c0)
        hi1, lo1 = mulhilo64(_M1, c2)
        c0 = hi1 ^ c1 ^ k0
        c1 = lo1
        c2 = hi0 ^ c3 ^ k1
        c3 = lo0
    return c0, c1, c2, c3


@njit(inline="always", nogil=True, cache=True)
def philox_block(b, k0, k1):  # type: ignore[no-untyped-def]
    """Block ``b`` of stream key ``(k0, k1)``: Philox4x64-10 of counter ``(b, 0, 0, 0)``."""
    zero = np.uint64(0)
    return philox4x64_10(b, zero, zero, zero, k0, k1)


@njit(inline="always", nogil=True, cache=True)
def _is_hit(wx, wy):  # type: ignore[no-untyped-def]
    # w >> 11 < 2**53 fits int64 exactly; the signed conversion is cheaper than the unsigned
    # one on x86-64 and gives the same double. No fastmath, so x*x + y*y is not fused.
    x = np.float64(np.int64(wx >> _SHIFT)) * _TWO_M53
    y = np.float64(np.int64(wy >> _SHIFT)) * _TWO_M53
    return x * x + y * y < 1.0


@njit(nogil=True, cache=True)
def _count_hits_kernel(seed, start, count):  # type: ignore[no-untyped-def]
    """Hits among global samples ``[start, start + count)`` of stream 0 for ``seed``.

    Sample ``i`` reads words ``2i`` and ``2i + 1``, i.e. half of block ``i // 2``; a block
    therefore serves two samples, and an odd ``start`` or ``end`` uses half a block.
    """
    zero = np.uint64(0)
    hits = 0
    if count <= 0:
        return hits
    i = start
    end = start + count
    if i & 1:
        w = philox_block(np.uint64(i >> 1), seed, zero)
        hits += _is_hit(w[2], w[3])
        i += 1
    b = i >> 1
    b_end = b + ((end - i) >> 1)
    # Four independent blocks per iteration: one block is a serial chain of ten multiply
    # rounds, and interleaving four chains keeps the multiplier busy (about 1.5x over one
    # block per iteration on x86-64). The condition is written as `b + 3 < b_end` on purpose:
    # with the equivalent `b + 4 <= b_end` (or a range loop) LLVM 20 can compute the trip
    # count and its loop vectorizer turns the body into AVX2 code with scalarised 128-bit
    # multiplies, about 1.5x slower than this scalar loop.
    while b + 3 < b_end:
        w0 = philox_block(np.uint64(b), seed, zero)
        w1 = philox_block(np.uint64(b + 1), seed, zero)
        w2 = philox_block(np.uint64(b + 2), seed, zero)
        w3 = philox_block(np.uint64(b + 3), seed, zero)
        hits += _is_hit(w0[0], w0[1]) + _is_hit(w0[2], w0[3])
        hits += _is_hit(w1[0], w1[1]) + _is_hit(w1[2], w1[3])
        hits += _is_hit(w2[0], w2[1]) + _is_hit(w2[2], w2[3])
        hits += _is_hit(w3[0], w3[1]) + _is_hit(w3[2], w3[3])
        b += 4
    while b < b_end:
        w = philox_block(np.uint64(b), seed, zero)
        hits += _is_hit(w[0], w[1]) + _is_hit(w[2], w[3])
        b += 1
    if (end - i) & 1:
        w = philox_block(np.uint64(b_end), seed, zero)
        hits += _is_hit(w[0], w[1])
    return hits


def check_range(seed: int, start: int, count: int) -> None:
    """Raise unless ``(seed, start, count)`` is a valid kernel request.

    ``TypeError`` for a non-integer (``bool`` included), ``ValueError`` for a value out of
    range: ``0 <= seed < 2**64``, ``start >= 0``, ``count >= 0``, ``start + count <= 2**62``.
    """
    if not (type(seed) is int and type(start) is int and type(count) is int):  # usual: quick
        for name, value in (("seed", seed), ("start", start), ("count", count)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        seed, start, count = int(seed), int(start), int(count)
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must satisfy 0 <= seed < 2**64, got {seed}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if start + count > RANGE_LIMIT:
        raise ValueError(f"start + count must be <= 2**62, got {start + count}")


# Samples per uninterrupted kernel call when a caller may ask to stop: about 15 ms of one
# core, so a worker whose coordinator has gone stops within that, whatever the chunk.
SUB_SAMPLES = 1 << 22


def count_hits(
    seed: int, start: int, count: int, should_stop: Callable[[], bool] | None = None
) -> int:
    """Number of hits among samples ``[start, start + count)`` of stream 0 (docs/contracts.md,
    section 1).

    Releases the GIL while it runs, so threads can share a process. With ``should_stop``,
    the range is counted in sub-ranges of SUB_SAMPLES and ``Stopped`` is raised at the first
    boundary where it returns True (hits are integers: the split changes nothing).
    """
    check_range(seed, start, count)
    # Fixed argument types so exactly one specialisation is compiled and cached: the seed a
    # uint64, start and count Python ints, which numba types int64 as it would np.int64
    # (check_range keeps them below 2**62) but receives without a numpy scalar per call.
    key = np.uint64(int(seed))
    first, end = int(start), int(start) + int(count)
    if should_stop is None:
        return int(_count_hits_kernel(key, first, end - first))
    hits = 0
    while True:
        n = min(SUB_SAMPLES, end - first)
        hits += int(_count_hits_kernel(key, first, n))
        first += n
        if first >= end:
            return hits
        if should_stop():
            raise Stopped(f"stopped at sample {first} of [{start}, {end})")


def warm_up() -> None:
    """Compile or load from cache the hit-count kernel now, not during the first task."""
    count_hits(1, 1, 4)
