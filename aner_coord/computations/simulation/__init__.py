"""The simulation kit's coordinator half (docs/contracts.md, section 15): what aner derives
from a plugin's `Simulation` declaration.

- `request`: the request type (typed, bounded parameters) and the check of parameters given;
- `computation`: admission and the chunking the reduction needs;
- `run`: the pass, the placement-independent reduction of the blocks, replicates;
- `result`: each output's mean, sample standard deviation, standard error and 95%
  confidence interval, and how `status` shows it (light).
"""
