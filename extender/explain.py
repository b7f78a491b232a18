"""The answer to "why is my job pending / placed there": GENIE's placement table for one task.

Shared by ``qosmos explain`` and the gRPC ``Explain`` call so both print the same facts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Platform


def resolve_profile(
    model: str | None,
    coeffs: tuple[float, float, float] | None,
    gamma: float | None,
    lam: float | None,
    nu: float | None,
    db: ModelDB | None = None,
) -> tuple[genie.ThroughputProfile, str]:
    """A profile from the model database, or from explicit coefficients; returns (profile, provenance)."""
    if (model is None) == (coeffs is None):
        raise InvalidInput("model/coeffs", (model, coeffs), "give exactly one of --model or --coeffs")
    overrides = {k: v for k, v in (("gamma", gamma), ("lam", lam), ("nu", nu)) if v is not None}
    if model is not None:
        found = (db or ModelDB.builtin()).lookup(model)
        p = dataclasses.replace(found.profile, **overrides)
        return p, f"{found.how} match {found.matched!r}: {p.source}"
    assert coeffs is not None
    p = genie.ThroughputProfile("custom", *coeffs, source="explicit coefficients", **overrides)
    return p, p.source


def _num(x: float) -> float | None:
    """JSON has no infinity: an unreachable latency is reported as null."""
    return x if math.isfinite(x) else None


def decision_dict(decision: genie.GenieDecision) -> dict[str, Any]:
    """The JSON shape of ``qosmos explain --json`` (a contract: keys are checked)."""
    return {
        "placements": [
            {
                "d_node": r.shape.d_node,
                "d_gpn": r.shape.d_gpn,
                "pr": _num(r.pr),
                "lat": _num(r.lat),
                "cost": _num(r.cost),
                "cer": _num(r.cer),
                "feasible": ok,
            }
            for r, ok in zip(decision.table, decision.feasible, strict=True)
        ],
        "chosen": {"d_node": decision.chosen.shape.d_node, "d_gpn": decision.chosen.shape.d_gpn},
        "ect": _num(decision.ect),
        "deadline": _num(decision.deadline),
        "waiting_allowance": _num(decision.waiting_allowance),
    }


def explain(
    task: genie.Task,
    profile: genie.ThroughputProfile,
    platform: Platform,
    now: float,
    theta: float = genie.DEFAULT_THETA,
) -> dict[str, Any]:
    return decision_dict(genie.evaluate_placements(task, profile, platform, now, theta))
