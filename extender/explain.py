"""The answer to "why is my job pending / placed there": GENIE's placement table for one task.

Shared by ``qosmos explain`` and the gRPC ``Explain`` call so both print the same facts,
with the same limits: absurd inputs are refused (:func:`check_limits`), the enumeration of
placements is bounded (``genie.MAX_PLACEMENT_GPUS``) and the output says when it was.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.throughput import QUADRATIC
from qosmos.extender.core.types import Platform

# Inputs past these are not a job of this world; they are refused rather than computed.
MAX_BATCH = 2**24  # global batch, samples
MAX_ITERS = 10**9
MAX_NODES = 100_000  # platform N
MAX_GPUS_PER_NODE = 32  # platform G (DGX/HGX nodes hold 8 or 16)
MAX_LATENCY_S = 366 * 86400.0  # a task that needs more than a year on its fastest placement
MAX_ABS_TIME_S = 1e12  # submit / now, seconds


class _CommOverrides(TypedDict, total=False):
    """Comm's γ, λ and ν where given: they replace the profile's own."""

    gamma: float
    lam: float
    nu: float


@dataclass(frozen=True, slots=True)
class Profiles:
    """The model database explain and the extender read: built-ins overlaid with ``file``."""

    db: ModelDB
    file: str | None = None  # the database file read, if any

    @classmethod
    def builtin(cls) -> Profiles:
        return cls(ModelDB.builtin(), None)


def load_profiles(db: str | Path | None = None) -> Profiles:
    """The one model database: ``db`` > $QOSMOS_MODELDB > ~/.config/qosmos/models.json, over the built-ins.

    An explicit ``db`` must be a readable file; the default locations may be absent.
    """
    from qosmos.predictors.profiler import load_modeldb, modeldb_path

    explicit = Path(db).expanduser() if db is not None else None
    path = modeldb_path(explicit)
    if path.exists() and not path.is_file():
        raise InvalidInput("db", str(path), "is not a file")
    try:
        models = load_modeldb(explicit, resolve=True)
    except UnicodeDecodeError as exc:
        raise InvalidInput("db", str(path), f"not a UTF-8 JSON model database ({exc.reason})") from None
    return Profiles(models, str(path) if path.is_file() else None)


def resolve_profile(
    model: str | None,
    coeffs: tuple[float, float, float] | None,
    gamma: float | None,
    lam: float | None,
    nu: float | None,
    profiles: Profiles | None = None,
    gpu_model: str = "",
) -> tuple[genie.ThroughputProfile, dict[str, Any]]:
    """A profile from the model database, or from explicit coefficients; returns (profile, provenance).

    provenance: ``origin`` builtin | file | coefficients, ``match`` exact | alias | similar
    (how the requested name was matched), the requested and matched names, the profile's
    ``source`` and the database ``file``, and the overridden Comm/ν parameters.
    """
    if (model is None) == (coeffs is None):
        raise InvalidInput("model/coeffs", (model, coeffs), "give exactly one of --model or --coeffs")
    # a _CommOverrides: the keys are the field names spelled out here
    overrides = cast(_CommOverrides, {k: v for k, v in (("gamma", gamma), ("lam", lam), ("nu", nu)) if v is not None})
    if model is not None:
        profiles = profiles or Profiles.builtin()
        found = profiles.db.lookup(model, gpu_model)
        builtin = ModelDB.builtin()
        own = found.profile.gpu_model
        origin = "builtin" if found.matched in builtin and builtin.get(found.matched, own) == found.profile else "file"
        p = dataclasses.replace(found.profile, **overrides)
        return p, {
            "origin": origin,
            "match": found.how,
            "requested": model,
            "matched": found.matched,
            "source": p.source,
            "file": profiles.file if origin == "file" else None,
            "overrides": sorted(overrides),
            "gpu_model": found.profile.gpu_model or None,
            "gpu_match": found.gpu,
            "gpu_note": found.gpu_note,
        }
    assert coeffs is not None
    p = genie.ThroughputProfile("custom", *coeffs, source="explicit coefficients", **overrides)
    return p, {
        "origin": "coefficients",
        "match": None,
        "requested": None,
        "matched": None,
        "source": p.source,
        "file": None,
        "overrides": sorted(overrides),
        "gpu_model": None,
        "gpu_match": None,
        "gpu_note": None,
    }


def describe(provenance: dict[str, Any]) -> str:
    """One readable line for a provenance dict."""
    if provenance["origin"] == "coefficients":
        return "explicit coefficients (Eq. 7 evaluated as given)"
    where = "built-in profile" if provenance["origin"] == "builtin" else f"profile from {provenance['file']}"
    how = {
        "exact": "",
        "alias": f" (stand-in for {provenance['requested']!r})",
        "similar": f" (closest name to {provenance['requested']!r})",
    }
    text = f"{where} {provenance['matched']!r}{how[provenance['match']]}: {provenance['source']}"
    if provenance["overrides"]:
        text += f"; overridden: {', '.join(provenance['overrides'])}"
    if provenance.get("gpu_note"):
        text += f" [{provenance['gpu_note']}]"
    return text


def check_limits(task: genie.Task, platform: Platform, now: float) -> None:
    """Refuse inputs no real job has (InvalidInput naming the field)."""
    for field, value, limit in (
        ("batch", task.batch, MAX_BATCH),
        ("iters", task.iters, MAX_ITERS),
        ("nodes", platform.nodes, MAX_NODES),
        ("gpus_per_node", platform.gpus_per_node, MAX_GPUS_PER_NODE),
    ):
        if value > limit:
            raise InvalidInput(field, value, f"must be <= {limit:,}")
    for field, t in (("submit", task.submit), ("now", now)):
        if not math.isfinite(t) or abs(t) > MAX_ABS_TIME_S:
            raise InvalidInput(field, t, f"must be a time within ±{MAX_ABS_TIME_S:.0e} s")


def _num(x: float) -> float | None:
    """JSON has no infinity: an unreachable latency is reported as null."""
    return x if math.isfinite(x) else None


def decision_dict(
    decision: genie.GenieDecision,
    task: genie.Task,
    profile: genie.ThroughputProfile,
    platform: Platform,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON shape of ``qosmos explain --json`` (a contract: keys are checked)."""
    cap = genie.placement_gpu_cap(platform, task.batch)
    capped = min(platform.gpus, task.batch) > genie.MAX_PLACEMENT_GPUS
    rows = [
        {
            "d_node": r.shape.d_node,
            "d_gpn": r.shape.d_gpn,
            "pr": _num(r.pr),
            "lat": _num(r.lat),
            "cost": _num(r.cost),
            "cer": _num(r.cer),
            "feasible": ok,
            "extrapolated": profile.extrapolated(task.batch / r.shape.gpus),
        }
        for r, ok in zip(decision.table, decision.feasible, strict=True)
    ]
    notes = []
    if capped:
        notes.append(
            f"placements limited to {cap:,} GPUs: the platform has {platform.gpus:,} and the batch allows "
            f"{task.batch:,}, but one task never spans more than {genie.MAX_PLACEMENT_GPUS:,}"
        )
    if any(r["extrapolated"] for r in rows):
        how = (
            f"sPR is held at sPR({profile.b_max:g}) above it and scaled down linearly below it"
            if profile.form == QUADRATIC
            else "the iteration time follows the first or last measured segment's slope outside it "
            f"(sPR never above sPR({profile.b_min:g}) below it)"
        )
        notes.append(
            f"extrapolated rows: the local batch b' is outside the profile's measured range "
            f"[{profile.b_min:g}, {profile.b_max:g}]; {how}"
        )
    if any(r["pr"] == 0 for r in rows):
        notes.append("rows with PR 0: sPR(b') of Eq. 7 is not positive at that local batch, the task makes no progress")
    return {
        "placements": rows,
        "chosen": {"d_node": decision.chosen.shape.d_node, "d_gpn": decision.chosen.shape.d_gpn},
        "ect": _num(decision.ect),
        "deadline": _num(decision.deadline),
        "waiting_allowance": _num(decision.waiting_allowance),
        "max_placement_gpus": cap,
        "notes": notes,
        "profile": provenance,
        "throughput": throughput_dict(profile, task.batch),
    }


def throughput_dict(profile: genie.ThroughputProfile, batch: int) -> dict[str, Any]:
    """Which sPR(b') form the profile uses, its held-out error and whether ``batch`` (on one GPU) is measured.

    ``heldout_error`` is the leave-one-out mean abs % error of sPR that chose the form (None when
    not measured: built-in and explicit profiles); ``measured_range`` is None for explicit coefficients.
    """
    return {
        "form": profile.form,
        "heldout_error": profile.heldout_error,
        "measured_range": [profile.b_min, profile.b_max] if profile.measured else None,
        "batch_outside_range": profile.extrapolated(batch),
        "measured_on": dict(profile.measured_on),
    }


def describe_throughput(info: dict[str, Any], batch: int) -> str:
    """One readable line for :func:`throughput_dict`."""
    err = info["heldout_error"]
    text = f"sPR form {info['form']}, held-out error " + ("not measured" if err is None else f"{err:.2f} %")
    rng = info["measured_range"]
    if rng is None:
        return text + "; no measured batch range (Eq. 7 as given)"
    text += f"; measured b' {rng[0]:g}..{rng[1]:g}"
    if info["batch_outside_range"]:
        text += f"; batch {batch} on one GPU lies outside it (extrapolated)"
    if info["measured_on"]:
        text += "; measured on " + ", ".join(f"{k} {v}" for k, v in info["measured_on"].items())
    return text


def explain(
    task: genie.Task,
    profile: genie.ThroughputProfile,
    platform: Platform,
    now: float,
    theta: float = genie.DEFAULT_THETA,
    provenance: dict[str, Any] | None = None,
    cancel: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """GENIE's table and choice for one task, after :func:`check_limits`; ``cancel`` as in ``genie.placement_table``."""
    check_limits(task, platform, now)
    decision = genie.evaluate_placements(task, profile, platform, now, theta, cancel=cancel)
    fastest = min(r.lat for r in decision.table)
    if not math.isfinite(fastest):
        raise InvalidInput(
            "coeffs", (profile.k0, profile.k1, profile.k2), "sPR(b') is not positive at any local batch of this task"
        )
    if fastest > MAX_LATENCY_S:
        raise InvalidInput(
            "batch/iters",
            (task.batch, task.iters),
            f"the task needs at least {fastest:.3g} s (more than a year) on every placement of this platform",
        )
    return decision_dict(decision, task, profile, platform, provenance)
