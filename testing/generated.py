"""Generated modules checked against a fresh generation (the built-in and measured profiles)."""

from __future__ import annotations

import ast
import math
import re

# a float literal as Python's repr writes one (1.5, -0.25, 1e-05, 2.5e+20)
FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def generated_apart(committed: str, fresh: str, rel_tol: float = 1e-9) -> list[str]:
    """How a committed generated module differs from a fresh generation: the two parsed (formatting
    and comments aside) must be the same with their numbers masked, and each number agree within
    ``rel_tol``. Not the text itself: fits by least squares differ in their last bits from one CPU
    to another (OpenBLAS picks its kernels by CPU); an AMD EPYC and the machine that generated the
    measured profiles disagree at 1e-15."""
    committed, fresh = ast.dump(ast.parse(committed)), ast.dump(ast.parse(fresh))
    if FLOAT.sub("<number>", committed) != FLOAT.sub("<number>", fresh):
        return ["the module differs beyond its numbers: generate it again"]
    pairs = zip(FLOAT.findall(committed), FLOAT.findall(fresh), strict=True)
    return [
        f"{a} (committed) != {b} (fresh)"
        for a, b in pairs
        if not math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=1e-12)
    ]
