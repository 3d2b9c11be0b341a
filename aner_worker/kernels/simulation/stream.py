"""The simulation kit's stream and blocks, stated once (docs/contracts.md, section 15): light,
so that the kernel, its numba loop and the coordinator's reduction all import them.

Sample `i` of the stream of `seed` draws its uniforms from blocks `(i, j, 0, 0)`,
`j = 0, 1, ...`, of Philox4x64-10 keyed `(seed, KIT_STREAM)`, four words a block, each
`(w >> 11) * 2**-53`; samples are reduced in blocks of BLOCK from the stream's start.
"""

from __future__ import annotations

BLOCK = 1 << 16  # samples a block: the unit of the reduction
# The Philox key's second word for every simulation's samples: far from the streams aner's
# own computations read (0 to 9, 16 + layer, 2**32 + epoch) and from replicate seeds' (2**40).
KIT_STREAM = 2**41
