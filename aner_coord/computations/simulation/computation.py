"""The coordinator half of a plugin's `Simulation` (docs/contracts.md, section 15): admission
(the seed, samples, replicates and every parameter within its declared range; the
function's number of outputs, from one sample computed here, before any worker starts),
the chunking the reduction needs (`check_chunk`), and its run (`run.SimulationRun`)."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from aner_coord.computations.base import Admitted
from aner_coord.computations.replicates import WHOLE_REPLICATE, check_replicates
from aner_coord.computations.simulation.request import check_params, request_type
from aner_coord.computations.simulation.result import summarize
from aner_coord.errors import RequestError
from aner_coord.limits import check_items, check_seed
from aner_worker.kernels.simulation import BLOCK, SimulationKernel
from aner_worker.plugins import Simulation, identity
from protocol.connection import plugin_digest


class SimulationComputation:
    unit: ClassVar[str] = "samples"
    default_chunk: ClassVar[int] = 16 * BLOCK
    # Rough: a function of a few draws; only sizes the in-flight windows.
    seconds_per_item: ClassVar[float] = 1 / 20e6

    def __init__(self, name: str, distribution: str, simulation: Simulation) -> None:
        self.kind = name
        self.name = name
        self.simulation = simulation
        self.outputs = simulation.outputs
        self.contract = simulation.contract
        self.request_type = request_type(name, simulation)
        found = identity(name)
        self.plugin = {
            "distribution": distribution,
            "version": found.version if found else "",
            "digest": plugin_digest(found) if found else "",
        }
        self.label = f"{name} (plugin {distribution} {self.plugin['version']})"
        self.kernel = SimulationKernel(
            name, simulation, f"plugin {distribution} {self.plugin['version']}"
        )

    def admit(self, request: Any) -> Admitted:
        check_seed(request.seed)
        samples = check_items("samples", request.samples, self.unit)
        replicates = check_replicates(request.replicates)
        check_items("samples", samples * replicates, f"{self.unit} in all replicates")
        values = check_params(self.name, self.simulation, request.params, self.label)
        began = time.perf_counter()
        self._probe()
        describe: dict[str, Any] = {
            "samples": samples,
            "seed": request.seed,
            "params": dict(zip((p.name for p in self.simulation.params), values, strict=True)),
            "plugin": self.plugin,
        }
        whole = replicates > 1 and (samples <= WHOLE_REPLICATE or samples % BLOCK)
        if replicates > 1:
            describe["replicates"] = replicates
        return Admitted(
            items=samples * replicates,
            passes=1,
            identity=self.contract,
            describe=describe,
            chunk=samples if whole else None,
            load_s=time.perf_counter() - began,
        )

    def _probe(self) -> None:
        """Compile the function and count its outputs here: a wrong declaration is the
        request's one line, before any worker starts."""
        from aner_worker.kernels.simulation.loop import SimulationError

        try:
            self.kernel.warm_up()
        except SimulationError as exc:
            raise RequestError(f"{self.label}: {exc}") from None
        except Exception as exc:  # the plugin's code: say whose it is
            raise RequestError(
                f"{self.label}: cannot load {self.simulation.function}: {type(exc).__name__}: {exc}"
            ) from None

    def check_chunk(self, request: Any, chunk: int) -> str | None:
        from aner_coord.computations.simulation.run import chunk_problem

        return chunk_problem(request.samples, request.replicates, chunk)

    def start(self, request: Any, chunk: int) -> Any:
        from aner_coord.computations.simulation.run import SimulationRun

        values = check_params(self.name, self.simulation, request.params, self.label)
        return SimulationRun(self, request, values, chunk)

    def summarize(self, result: dict[str, Any]) -> list[str]:
        return summarize(result)
