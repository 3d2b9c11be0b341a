"""Which workers compute with different BLAS kernel sets, in the words `capabilities`,
`plan`, `status` and `result.json` use (docs/contracts.md, section 6, "Kernel sets").

Dense and search bits are promised for one chunk on one kernel set: the `blas` a worker's
handshake reported (library, version, the kernel set it chose, threading layer). Workers
that reported different ones round a matrix product differently in its last bits, so a
group of them computes within the stated tolerance instead; `--strict-bits` refuses such a
group. A worker that reported no BLAS (an older one) counts as a kernel set of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

# The kernels whose bits a BLAS kernel set decides: their matrix products are numpy's
# (Dense chunks; search fits, which Dense replicates are too). Monte Carlo and the fixture
# are numba loops, bitwise the same on any kernel set.
BLAS_KERNELS = frozenset({"dense", "search"})
WARNING = "bits may differ between these workers; results are within the stated tolerance"
NOT_REPORTED = "BLAS not reported"


def kernel_sets(machines: Mapping[str, Mapping[str, str] | None]) -> dict[str, list[str]]:
    """The identities of `machines` (identity -> its handshake's machine identity) by the
    BLAS each reported, in the order each BLAS first appears."""
    sets: dict[str, list[str]] = {}
    for identity, machine in machines.items():
        blas = (machine or {}).get("blas") or NOT_REPORTED
        sets.setdefault(blas, []).append(identity)
    return sets


def describe(sets: Mapping[str, list[str]]) -> str:
    """`w1 + w2: openblas 0.3.31 Haswell pthreads; w3: openblas 0.3.31 SkylakeX pthreads`."""
    return "; ".join(f"{' + '.join(members)}: {blas}" for blas, members in sets.items())


def bits_note(machines: Mapping[str, Mapping[str, str] | None]) -> str | None:
    """The warning with the kernel sets named, where the workers report more than one;
    None where they all compute with one."""
    sets = kernel_sets(machines)
    if len(sets) < 2:
        return None
    return f"{WARNING} ({describe(sets)})"


def strict_refusal(machines: Mapping[str, Mapping[str, str] | None]) -> str | None:
    """Why `--strict-bits` refuses this group (one line, naming the option `{strict_bits}`
    for `RequestError` to spell as its caller does), or None where it may run."""
    sets = kernel_sets(machines)
    if len(sets) < 2:
        return None
    return (
        f"{{strict_bits}}: these workers compute with different BLAS kernel sets, so their "
        f"bits may differ ({describe(sets)}): give their records one coretype= "
        "(docs/contracts.md, section 5), or run without {strict_bits} to compute within "
        "the stated tolerance"
    )
