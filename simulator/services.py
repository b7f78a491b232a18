"""Inference services beside a training replay (seed 002 §V-D2, issue 12): their timelines and the CSV.

A service timeline is what one InferenceService asks for over time: rows of (time_s, GPU replicas,
CPU replicas), as ``qosmos simulate inference`` decides them slot by slot from a query-rate series
(it writes them to ``timeline.csv``). The engine replays them beside the jobs: every row is an
event, and the replicas it adds are placed by the core's ``place_services`` (the operator's
function) before the queues' passes, preempting the last-submitted training or CPU job where
resources lack.

A GPU replica holds one GPU (plus ``gpu_cpu_milli`` and ``memory_mib``); a CPU replica holds
``cpu_milli_per_replica`` on a GPU node's spare cores (``ServiceReplica(gpu_nodes_only=True)``: SODA
serves on the cores a GPU node leaves). ``time_s`` counts from the training trace's first submission,
so a timeline written from a series (its 0 is the series' start) lines up with any trace.

CSV: ``time_s,service,gpu_replicas,cpu_replicas`` and optional ``cpu_milli_per_replica`` (default
SODA's 16 cores), ``gpu_cpu_milli``, ``memory_mib`` (default 0), which hold for every replica of the
service (the same on all its rows). Rows of one service need increasing times; services may be
interleaved and spread over several files.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference import SODA_CPU_CORES
from qosmos.extender.core.services import ServiceReplica
from qosmos.predictors.readers import CsvRows

COLUMNS = ("time_s", "service", "gpu_replicas", "cpu_replicas")
PER_REPLICA = ("cpu_milli_per_replica", "gpu_cpu_milli", "memory_mib")
DEFAULT_CPU_MILLI = SODA_CPU_CORES * 1000  # seed 002 §IV-E: the 16 cores a GPU node leaves
GPU, CPU = "gpu", "cpu"


@dataclass(frozen=True, slots=True)
class ServiceTimeline:
    """One service's replica counts over time: ``points`` = (time_s, gpu_replicas, cpu_replicas), by time."""

    name: str
    points: tuple[tuple[float, int, int], ...]
    cpu_milli_per_replica: int = DEFAULT_CPU_MILLI
    gpu_cpu_milli: int = 0
    memory_mib: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidInput("service", self.name, "a service needs a name")
        if not self.points:
            raise InvalidInput("service", self.name, "a timeline needs at least one point")
        for name in PER_REPLICA:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInput(name, v, "must be an integer >= 0")
        prev = -math.inf
        for t, g, c in self.points:
            if not (math.isfinite(t) and t >= 0):
                raise InvalidInput("time_s", t, f"{self.name}: must be a finite number of seconds >= 0")
            if t <= prev:
                raise InvalidInput("time_s", t, f"{self.name}: times must increase (after {prev:g})")
            prev = t
            for name, v in (("gpu_replicas", g), ("cpu_replicas", c)):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise InvalidInput(name, v, f"{self.name}: must be an integer >= 0")
            if c and not self.cpu_milli_per_replica:
                raise InvalidInput("cpu_milli_per_replica", 0, f"{self.name}: a CPU replica needs cores")

    def modes(self) -> list[str]:
        """The modes this service ever asks replicas in."""
        return [m for k, m in ((1, GPU), (2, CPU)) if any(p[k] for p in self.points)]

    def replica(self, mode: str, serial: int, since: float) -> ServiceReplica:
        """A new replica of ``mode``, asked for at ``since`` (the core places the older first)."""
        rid = f"{self.name}/{mode}-{serial:06d}"  # zero-padded: ties at one instant go in creation order
        if mode == GPU:
            return ServiceReplica(
                rid, self.name, since, gpus=1, cpu_milli=self.gpu_cpu_milli, memory_mib=self.memory_mib
            )
        return ServiceReplica(
            rid, self.name, since, cpu_milli=self.cpu_milli_per_replica, memory_mib=self.memory_mib, gpu_nodes_only=True
        )


def read_services(paths: Sequence[Path]) -> list[ServiceTimeline]:
    """Timelines from CSV files (see the module notes); a bad row raises ``TraceFormatError`` naming
    file, line and field. A service is in one file (its rows may be interleaved with others')."""
    found: dict[str, tuple[str, list[tuple[float, int, int]], tuple[int, ...], int]] = {}  # name -> file, points, ...
    last_line: dict[str, int] = {}
    for path in paths:
        rows = CsvRows(Path(path), COLUMNS, what="services")
        has = [c in rows.header for c in PER_REPLICA]
        count = 0
        for line, row in rows:
            count += 1
            name = rows.text(row, "service")
            if not name:
                raise rows.err(line, "service", "", "missing value")
            t = rows.num(line, row, "time_s")
            g = rows.int_(line, row, "gpu_replicas")
            c = rows.int_(line, row, "cpu_replicas")
            defaults = (DEFAULT_CPU_MILLI, 0, 0)
            per = tuple(
                rows.int_(line, row, col, default=d) if h else d
                for col, h, d in zip(PER_REPLICA, has, defaults, strict=True)
            )
            if c and not per[0]:
                raise rows.err(
                    line, "cpu_milli_per_replica", rows.text(row, PER_REPLICA[0]), "a CPU replica needs cores"
                )
            entry = found.get(name)
            if entry is None:
                found[name] = (rows.name, [(t, g, c)], per, line)
            else:
                file, points, per0, first = entry
                if file != rows.name:
                    raise rows.err(line, "service", name, f"already defined in {file}")
                if t <= points[-1][0]:
                    why = f"must be after {points[-1][0]:g}, the service's time on line {last_line[name]}"
                    raise rows.err(line, "time_s", rows.text(row, "time_s"), why)
                for col, v, v0 in zip(PER_REPLICA, per, per0, strict=True):
                    if v != v0:
                        why = f"differs from line {first} ({v0}): it holds for every replica of the service"
                        raise rows.err(line, col, rows.text(row, col), why)
                points.append((t, g, c))
            last_line[name] = line
        if not count:
            raise InvalidInput("services", str(path), "no rows")
    return [ServiceTimeline(name, tuple(points), per[0], per[1], per[2]) for name, (_, points, per, _) in found.items()]


def write_timeline(
    path: Path,
    service: str,
    times: np.ndarray,
    gpu_replicas: np.ndarray,
    cpu_replicas: np.ndarray,
    cpu_milli_per_replica: int,
) -> None:
    """One row per time in the format ``read_services`` reads."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow((*COLUMNS, PER_REPLICA[0]))
        for t, g, c in zip(times.tolist(), gpu_replicas.tolist(), cpu_replicas.tolist(), strict=True):
            w.writerow((f"{t:.3f}", service, int(g), int(c), cpu_milli_per_replica))


__all__ = ["COLUMNS", "CPU", "GPU", "PER_REPLICA", "ServiceTimeline", "read_services", "write_timeline"]
