"""The decision core: pure functions on domain types, shared by extender, operator and simulator.

Dependency rule: modules here import only the standard library, numpy and each other —
no kubernetes, kopf, grpc, HTTP, files or clocks (a unit test enforces it).
"""

from qosmos.extender.core.errors import InvalidInput

__all__ = ["InvalidInput"]
