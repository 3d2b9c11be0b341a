"""The simulation kit's worker half (docs/contracts.md, section 15): one kernel for each
`Simulation` a plugin declares.

- `stream`: the stream each sample's uniforms come from, and the block of the reduction;
- `kernel`: the kernel, its parameters and statistics (light: no numpy, no numba);
- `loop`: the numba loop that draws each sample's uniforms from the Philox stream, calls
  the plugin's function and keeps each block's mean and sum of squared deviations.
"""

from __future__ import annotations

from aner_worker.kernels.simulation.kernel import SimParams, SimStats, SimulationKernel
from aner_worker.kernels.simulation.stream import BLOCK, KIT_STREAM

__all__ = ["BLOCK", "KIT_STREAM", "SimParams", "SimStats", "SimulationKernel"]
