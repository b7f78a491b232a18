"""Failures of running jobs in a replay: when a job's run is cut short, so that the engine restarts it as
the operator restarts a DLJob whose pod failed (``core.failures``: back-off, backoff limit, progress kept
up to the last checkpoint).

A model answers one question at each start of a run segment: when does the first failure after it cut
the job? :class:`GpuFailures` draws failures at a rate per GPU-hour of run on the job's own clock (its
GPU-seconds run so far), so that two policies replaying one trace and seed meet the same failures in each
job's run, whenever they schedule it (common random numbers: the comparison shows the schedules, not
the draws). :class:`ScriptedFailures` fails named jobs at given times, when they run then.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job

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


__all__ = ["FailureModel", "GpuFailures", "ScriptedFailures"]
