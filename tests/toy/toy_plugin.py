"""The declaration the toy's entry point names: light, as discovery wants it (the halves are
in `toy_computation`, imported when a job first needs them)."""

from aner_worker.plugins import Plugin

TOY = Plugin(
    kernel="toy_computation:ToyKernel",
    computation="toy_computation:Toy",
    request="toy_computation:ToyRequest",
    contract="aner-test/toy/v1",
)
