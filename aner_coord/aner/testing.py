"""`aner.testing`: the conformance suite a plugin's own tests call (docs/contracts.md, section
15), `aner_coord.conformance`:

    from aner.testing import check_computation

    def test_my_plugin_conforms():
        check_computation("my-simulation")   # raises, one line per failed check
"""

from aner_coord.conformance import CHECKS, Conformance, ConformanceError, check_computation

__all__ = ["CHECKS", "Conformance", "ConformanceError", "check_computation"]
