"""The identities and sizes that docs/contracts.md, sections 1 and 2 fix for the Monte Carlo
stream and the training fixture, stated once: the numba kernels compute them and the
coordinator's request, result and manifest name them. Light (no numpy, no numba), so the
coordinator imports them without loading a kernel.
"""

from __future__ import annotations

STREAM_ID = "aner-mc/philox4x64-10/v1"
FIXTURE_ID = "aner-fixture/logistic/v1"
N_PARAMS = 9  # the fixture's parameters: eight feature weights and the bias
SEED_LIMIT = 2**64  # a seed (and a stream) is a 64-bit key word: 0 <= seed < SEED_LIMIT
