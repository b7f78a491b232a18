"""``qosmos simulate --partitions FILE``: the trace's VirtualClusters as partitions with cohorts,
shares, borrowing and lending limits, policies and preemption (issue 21 §3), as the operator's
VirtualCluster spec has them. The simulator turns each entry into the core's ``Partition``; the
decisions are the core's (``core.cohorts`` through ``admit``).

The file is YAML or JSON: a list (or ``{partitions: [...]}``) of entries keyed by the trace's VC
names::

    - name: vc-a            # a VC of the trace (a node's vc)
      cohort: shared        # optional: VCs of one cohort place on the union of their nodes
      nominalGpus: 16       # optional: its share (default: its own nodes' GPUs)
      borrowingLimit: 8     # optional, cohort only: GPUs beyond its share (default: no limit)
      lendingLimit: 4       # optional, cohort only: GPUs of its idle share it lends (default: all)
      policy: fifo          # optional: its ordering policy (default: --policy / --partition-policy)
      arraySplit: 0.6       # optional, soda: its 4-GPU resource array's share (default: the trace's)
      preemption:           # optional (Kueue's names)
        withinVirtualCluster: Never        # or LowerPriority
        reclaimWithinCohort: Any           # or Never
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from qosmos.extender.core.admission import check_array_split
from qosmos.extender.core.cohorts import RECLAIM_WITHIN_COHORT, WITHIN_PARTITION
from qosmos.extender.core.errors import InvalidInput

KEYS = ("name", "cohort", "nominalGpus", "borrowingLimit", "lendingLimit", "policy", "arraySplit", "preemption")
PREEMPTION_KEYS = {"withinVirtualCluster": WITHIN_PARTITION, "reclaimWithinCohort": RECLAIM_WITHIN_COHORT}


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """One VC's entry of the partitions file."""

    name: str
    cohort: str | None = None
    nominal_gpus: int | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    policy: str | None = None
    within_partition: str = "Never"
    reclaim_within_cohort: str = "Any"
    array_split: float | None = None  # SODA's 4-GPU array share (None: derived from the trace)


def _count(where: str, key: str, v: object) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InvalidInput(f"{where}.{key}", v, "must be an integer >= 0")
    return v


def _name(where: str, key: str, v: object, *, optional: bool) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v.strip():
        raise InvalidInput(f"{where}.{key}", v, "must be a non-empty name")
    return v.strip()


def parse_partitions(data: object, source: str, policies: Collection[str] = ()) -> tuple[PartitionSpec, ...]:
    """The entries of a loaded partitions file; errors name ``source`` and the entry's field."""
    if isinstance(data, Mapping) and set(data) == {"partitions"}:
        data = data["partitions"]
    if not isinstance(data, list) or not data:
        raise InvalidInput(f"{source}", type(data).__name__, "expected a non-empty list of partitions")
    out: list[PartitionSpec] = []
    seen: set[str] = set()
    for k, entry in enumerate(data):
        where = f"{source}[{k}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(where, entry, "expected a mapping with name, cohort, nominalGpus, ...")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise InvalidInput(f"{where}.{unknown[0]}", entry[unknown[0]], f"unknown field; expected {', '.join(KEYS)}")
        name = _name(where, "name", entry.get("name"), optional=False)
        assert name is not None
        where = f"{source}[{k}] ({name})"
        if name in seen:
            raise InvalidInput(f"{where}.name", name, "named twice")
        seen.add(name)
        cohort = _name(where, "cohort", entry.get("cohort"), optional=True)
        limits = {key: _count(where, key, entry.get(key)) for key in ("nominalGpus", "borrowingLimit", "lendingLimit")}
        for key in ("borrowingLimit", "lendingLimit"):
            if limits[key] is not None and cohort is None:
                raise InvalidInput(f"{where}.{key}", limits[key], "borrowing and lending need a cohort")
        policy = _name(where, "policy", entry.get("policy"), optional=True)
        if policy is not None and policies and policy not in policies:
            raise InvalidInput(f"{where}.policy", policy, f"expected one of {', '.join(policies)}")
        split = entry.get("arraySplit")
        split = None if split is None else check_array_split(f"{where}.arraySplit", split)
        pre: Any = entry.get("preemption") or {}
        if not isinstance(pre, Mapping):
            raise InvalidInput(f"{where}.preemption", pre, "expected a mapping")
        for key, v in pre.items():
            if key not in PREEMPTION_KEYS:
                raise InvalidInput(f"{where}.preemption.{key}", v, f"expected {' or '.join(PREEMPTION_KEYS)}")
            if v not in PREEMPTION_KEYS[key]:
                raise InvalidInput(f"{where}.preemption.{key}", v, f"expected one of {', '.join(PREEMPTION_KEYS[key])}")
        out.append(
            PartitionSpec(
                name,
                cohort,
                limits["nominalGpus"],
                limits["borrowingLimit"],
                limits["lendingLimit"],
                policy,
                pre.get("withinVirtualCluster", "Never"),
                pre.get("reclaimWithinCohort", "Any"),
                split,
            )
        )
    return tuple(out)


def load_partitions(path: Path, policies: Collection[str] = ()) -> tuple[PartitionSpec, ...]:
    """Read a YAML or JSON partitions file (JSON is YAML; a .json file is read as JSON)."""
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InvalidInput(
            "partitions", str(path), f"not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {exc}"
        ) from None
    return parse_partitions(data, str(path), policies)


def check_names(specs: tuple[PartitionSpec, ...], vcs: Collection[str], source: str = "partitions") -> None:
    """Every entry must name a VC that has nodes in the trace's cluster."""
    for k, s in enumerate(specs):
        if s.name not in vcs:
            raise InvalidInput(
                f"{source}[{k}].name", s.name, f"no such VC with nodes in the trace; its VCs: {', '.join(sorted(vcs))}"
            )


__all__ = ["PartitionSpec", "check_names", "load_partitions", "parse_partitions"]
