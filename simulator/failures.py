"""Failures of running jobs in a replay: when a job's run is cut short, so that the engine restarts it as
the operator restarts a DLJob whose pod failed (``core.failures``: back-off, backoff limit, progress kept
up to the last checkpoint).

A model answers one question at each start of a run segment: when does the first failure after it cut
the job? :class:`GpuFailures` draws failures at a rate per GPU-hour of run on the job's own clock (its
GPU-seconds run so far), so that two policies replaying one trace and seed meet the same failures in each
job's run, whenever they schedule it (common random numbers: the comparison shows the schedules, not
the draws). :class:`ScriptedFailures` fails named jobs at given times, when they run then.

Node outages (:class:`NodeOutages`) take a whole node away: nothing is placed on it until it is back, and
a gang with a node there stalls and goes back to its queue as the operator requeues a DLJob whose node
stopped being Ready (reason NodeLost, ``core.failures.node_lost_at``). :class:`RandomOutages` draws each
node's failures (MTBF) and repairs (MTTR) from the seed and the node's name alone; :class:`ScriptedOutages`
takes them from a file (``node,down,up[,kind]`` rows). A scripted outage may be a drain instead (``kind``
``drain``: ``kubectl drain`` for maintenance): the node is cordoned, and each gang on it is requeued at once
as the operator requeues a DLJob whose pod was evicted (reason Disrupted: its run kept, no restart).
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job

DEFAULT_NODE_MTTR_H = 1.0  # hours a failed node takes to come back when only its MTBF is given
SERVED_TOLERANCE = 1e-3  # GPU-seconds: a failure at the instant a segment resumes was that segment's last


class FailureModel(Protocol):
    def next_failure(self, job: Job, index: int, start: float, gpus: float, served: float) -> float | None:
        """When the first failure after ``start`` cuts the run segment of ``job`` (trace index ``index``)
        that begins then on ``gpus`` GPUs, ``served`` GPU-seconds into its run (None: none)."""
        ...


class GpuFailures:
    """A job fails once per ``mtbf_gpu_hours`` GPU-hours of run on average (exponential, memoryless: a
    job on 8 GPUs fails 8 times as often as one on a single GPU). The k-th failure of job ``index`` comes
    at a fixed point of its GPU-seconds run, drawn from ``seed`` and the index alone. Jobs that hold no
    whole GPU (CPU jobs) do not fail."""

    def __init__(self, mtbf_gpu_hours: float, seed: int = 0) -> None:
        if not (math.isfinite(mtbf_gpu_hours) and mtbf_gpu_hours > 0):
            raise InvalidInput("mtbf_gpu_hours", mtbf_gpu_hours, "must be a finite number > 0")
        self.mtbf_gpu_hours = mtbf_gpu_hours
        self.seed = seed
        self._rate = 1.0 / (mtbf_gpu_hours * 3600.0)  # failures per GPU-second
        # per job index: its draws and the failure points drawn so far (GPU-seconds, increasing), so each
        # segment start reads on from them instead of drawing the job's failures again from its first
        self._points: dict[int, tuple[random.Random, list[float]]] = {}

    def next_failure(self, job: Job, index: int, start: float, gpus: float, served: float) -> float | None:
        if gpus < 1:
            return None
        found = self._points.get(index)
        if found is None:  # (a str seed is hashed: stable across processes)
            found = self._points[index] = (random.Random(f"qosmos-failures:{self.seed}:{index}"), [])
        draws, points = found
        after = served + SERVED_TOLERANCE
        while not points or points[-1] <= after:
            points.append((points[-1] if points else 0.0) + draws.expovariate(self._rate))
        at = points[bisect.bisect_right(points, after)]
        return start + (at - served) / gpus

    def __repr__(self) -> str:
        return f"GpuFailures(mtbf_gpu_hours={self.mtbf_gpu_hours:g}, seed={self.seed})"


class ScriptedFailures:
    """Job ``id`` fails at each of ``times[id]`` (the replay's seconds) at which it runs: a time within a
    back-off, a wait or after its end cuts nothing."""

    def __init__(self, times: Mapping[str, Sequence[float]]) -> None:
        self.times = {k: sorted(float(t) for t in v) for k, v in times.items()}

    def next_failure(self, job: Job, index: int, start: float, gpus: float, served: float) -> float | None:
        return next((t for t in self.times.get(job.id, ()) if t > start), None)

    def __repr__(self) -> str:
        return f"ScriptedFailures({len(self.times)} jobs)"


class Outage(NamedTuple):
    down: float  # the replay's seconds
    up: float  # > down; inf: it never comes back
    drain: bool = False  # a drain (cordoned, its gangs evicted) rather than a failure


OUTAGE_KINDS = ("down", "drain")


class NodeOutages(Protocol):
    def next_outage(self, node: str, after: float) -> Outage | None:
        """The first outage of ``node`` that begins after ``after`` (the replay's seconds); None: no more."""
        ...


class RandomOutages:
    """Each node fails once per ``mtbf_hours`` of being up on average and is back after ``mttr_hours`` on
    average (both exponential), from ``origin`` on; the draws depend on the seed and the node's name only,
    so every policy replaying a trace meets the same outages."""

    def __init__(self, mtbf_hours: float, mttr_hours: float, seed: int = 0, origin: float = 0.0) -> None:
        for name, v in (("node_mtbf_hours", mtbf_hours), ("node_mttr_hours", mttr_hours)):
            if not (math.isfinite(v) and v > 0):
                raise InvalidInput(name, v, "must be a finite number > 0")
        self.mtbf_hours, self.mttr_hours, self.seed, self.origin = mtbf_hours, mttr_hours, seed, origin
        self._drawn: dict[str, tuple[random.Random, list[Outage]]] = {}

    def next_outage(self, node: str, after: float) -> Outage | None:
        found = self._drawn.get(node)
        if found is None:
            found = self._drawn[node] = (random.Random(f"qosmos-outages:{self.seed}:{node}"), [])
        draws, seen = found
        while not seen or seen[-1][0] <= after:
            up = seen[-1][1] if seen else self.origin
            down = up + draws.expovariate(1.0 / (self.mtbf_hours * 3600.0))
            seen.append(Outage(down, down + draws.expovariate(1.0 / (self.mttr_hours * 3600.0))))
        return next(o for o in seen if o[0] > after)

    def __repr__(self) -> str:
        return f"RandomOutages(mtbf_hours={self.mtbf_hours:g}, mttr_hours={self.mttr_hours:g}, seed={self.seed})"


class ScriptedOutages:
    """Outages per node name: ``outages[node]`` is a list of (down, up[, drain]) in the replay's seconds."""

    def __init__(self, outages: Mapping[str, Sequence[tuple[float, float] | tuple[float, float, bool]]]) -> None:
        self.outages: dict[str, list[Outage]] = {}
        for node, spans in outages.items():
            ordered = sorted(Outage(float(o[0]), float(o[1]), bool(o[2]) if len(o) > 2 else False) for o in spans)
            for k, o in enumerate(ordered):
                if not (math.isfinite(o.down) and o.up > o.down):
                    raise InvalidInput(f"outages[{node}]", tuple(o), "needs a finite down and up > down")
                if k and o.down < ordered[k - 1].up:
                    raise InvalidInput(f"outages[{node}]", tuple(o), f"overlaps {tuple(ordered[k - 1])}")
            self.outages[node] = ordered

    @classmethod
    def read(cls, path: Path) -> ScriptedOutages:
        """``node,down,up`` rows with a header (seconds from the trace's first submission; ``up`` empty or
        ``inf``: the node never comes back), and an optional ``kind`` column: ``down`` (the default: the
        node fails) or ``drain``. A bad row is named by its line."""
        spans: dict[str, list[tuple[float, float, bool]]] = {}
        with open(path, newline="") as f:
            rows = csv.DictReader(f)
            missing = {"node", "down", "up"} - set(rows.fieldnames or ())
            if missing:
                raise InvalidInput(f"{path}", ",".join(rows.fieldnames or ()), "needs columns node,down,up")
            for row in rows:
                where = f"{path}:{rows.line_num}"
                node = (row["node"] or "").strip()
                if not node:
                    raise InvalidInput(f"{where} node", row["node"], "a node name is required")
                try:
                    down = float(row["down"])
                    up = float(row["up"]) if (row["up"] or "").strip() else math.inf
                except (TypeError, ValueError):
                    raise InvalidInput(f"{where} down/up", f"{row['down']},{row['up']}", "expected numbers") from None
                if not (math.isfinite(down) and up > down):
                    raise InvalidInput(f"{where} up", f"{row['down']},{row['up']}", "needs a finite down and up > down")
                kind = (row.get("kind") or "").strip() or "down"
                if kind not in OUTAGE_KINDS:
                    raise InvalidInput(f"{where} kind", kind, f"expected one of: {', '.join(OUTAGE_KINDS)}")
                spans.setdefault(node, []).append((down, up, kind == "drain"))
        return cls(spans)

    def next_outage(self, node: str, after: float) -> Outage | None:
        return next((o for o in self.outages.get(node, ()) if o.down > after), None)

    def __repr__(self) -> str:
        return f"ScriptedOutages({sum(map(len, self.outages.values()))} outages on {len(self.outages)} nodes)"


def node_outage_model(mtbf_hours: float | None, mttr_hours: float, path: Path | None, seed: int) -> NodeOutages | None:
    """The outages a replay's options ask for (``--node-mtbf-hours`` or ``--node-outages``), or None."""
    if mtbf_hours is not None and path is not None:
        raise InvalidInput("node_outages", str(path), "give --node-mtbf-hours or --node-outages, not both")
    if path is not None:
        return ScriptedOutages.read(path)
    return None if mtbf_hours is None else RandomOutages(mtbf_hours, mttr_hours, seed)


__all__ = [
    "DEFAULT_NODE_MTTR_H",
    "OUTAGE_KINDS",
    "FailureModel",
    "GpuFailures",
    "NodeOutages",
    "Outage",
    "RandomOutages",
    "ScriptedFailures",
    "ScriptedOutages",
    "node_outage_model",
]
