"""Queue ordering policies behind one interface and a registry.

A policy takes the waiting jobs of one queue and returns Decisions in the order the
scheduler should try them, each optionally carrying a GENIE shape to place it with.
``queue`` on a Decision names an independent sub-queue (SODA's job arrays): a blocked
head blocks only its own sub-queue. Policies are pure: the caller passes the clock and
the usage figures they need in an OrderContext.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Job, JobKind, Platform, Shape

INF = math.inf
MLFQ_QUANTA = (3250.0, 7200.0, 18000.0)  # AnalySIM §4 (from Tiresias), GPU-seconds per queue


@dataclass(slots=True)
class OrderContext:
    """What a policy may read besides the queue. All optional unless a policy needs it."""

    now: float = 0.0
    platform: Platform | None = None
    modeldb: ModelDB | None = None
    theta: float = genie.DEFAULT_THETA
    # GPUs in use by running jobs, per model type (Capacity) and per user (DRF).
    usage_by_model: Mapping[str, int] = field(default_factory=dict)
    usage_by_user: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # (gpus, cpu_milli)
    total_gpus: int = 0
    total_cpu_milli: int = 0
    # Capacity shares per model type (fractions summing to <= 1); default: equal shares.
    capacity_shares: Mapping[str, float] | None = None
    wfair_alpha: float = 0.5


@dataclass(slots=True)
class Decision:
    job: Job
    shape: Shape | None = None
    waiting_allowance: float | None = None
    blocked: str | None = None  # why this job may not start now (e.g. over its capacity share)
    queue: str = ""


class OrderingPolicy(Protocol):
    name: str
    preemptive: bool

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]: ...


def _sorted(queue: Sequence[Job], key: Callable[[Job], float]) -> list[Decision]:
    # Python's sort is stable; ties keep the caller's (arrival) order.
    return [Decision(j) for j in sorted(queue, key=key)]


class _KeyPolicy:
    """A policy that is a sort by one key."""

    name = ""
    preemptive = False

    def key(self, job: Job, ctx: OrderContext) -> float:
        raise NotImplementedError

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: self.key(j, ctx))


class FIFO(_KeyPolicy):
    name = "fifo"

    def key(self, job: Job, ctx: OrderContext) -> float:
        return job.submit_time


class SJF(_KeyPolicy):
    """Shortest job first with oracle durations (Helios §4.2.3 upper bound)."""

    name = "sjf"

    def key(self, job: Job, ctx: OrderContext) -> float:
        return INF if job.duration is None else job.duration


class SRTF(_KeyPolicy):
    """Shortest remaining time first, preemptive, oracle durations."""

    name = "srtf"
    preemptive = True

    def key(self, job: Job, ctx: OrderContext) -> float:
        return INF if job.duration is None else job.duration - job.executed


class QSSF(_KeyPolicy):
    """Quasi-shortest-service-first: predicted GPU time N x (λP_R + (1-λ)P_M) (Helios Alg. 1 line 20).

    The duration prediction comes from qosmos.predictors and is carried on the job;
    jobs without one go last, in arrival order.
    """

    name = "qssf"

    def key(self, job: Job, ctx: OrderContext) -> float:
        if job.predicted_duration is None:
            return INF
        return max(job.gpus, 1) * job.predicted_duration


class LAS(_KeyPolicy):
    """Least attained service (GPU-seconds received so far), non-preemptive (AnalySIM §3.2)."""

    name = "las"

    def key(self, job: Job, ctx: OrderContext) -> float:
        return job.attained


def mlfq_level(job: Job, quanta: Sequence[float] = MLFQ_QUANTA) -> int:
    """LAS-MLFQ queue of a job: demoted after each queue's quantum of attained GPU-seconds.

    A quantum in run time is quantum / GPUs (AnalySIM §3.2: a 4-GPU job's unit is 1/4 of a
    1-GPU job's), i.e. the quantum itself in GPU-seconds of attained service.
    """
    spent = 0.0
    for level, q in enumerate(quanta[:-1]):
        spent += q
        if job.attained < spent:
            return level
    return len(quanta) - 1


def mlfq_next_demotion(job: Job, quanta: Sequence[float] = MLFQ_QUANTA) -> float | None:
    """Run seconds until this job's next demotion, or None in the last queue."""
    bound = sum(quanta[: mlfq_level(job, quanta) + 1])
    if mlfq_level(job, quanta) == len(quanta) - 1:
        return None
    return (bound - job.attained) / max(job.gpus, 1)


class MLFQ:
    """LAS-MLFQ (AnalySIM §3.2): 3 queues, FIFO inside a queue, preemptive across queues."""

    name = "mlfq"
    preemptive = True

    def __init__(self, quanta: Sequence[float] = MLFQ_QUANTA) -> None:
        self.quanta = tuple(quanta)

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: (mlfq_level(j, self.quanta), j.submit_time))  # type: ignore[arg-type,return-value]


class _GeniePolicy:
    """Shared machinery for the policies that use GENIE's model (seed 001 §5, §7.1).

    Caches each task's now-independent placement table ranked by CER.
    """

    name = ""
    preemptive = False

    def __init__(self) -> None:
        self._cache: dict[tuple, list[genie.PlacementRow]] = {}

    def _need(self, ctx: OrderContext) -> tuple[Platform, ModelDB]:
        if ctx.platform is None or ctx.modeldb is None:
            raise InvalidInput("context", self.name, "GENIE policies need a platform and a model database")
        return ctx.platform, ctx.modeldb

    def ranked(
        self, job: Job, ctx: OrderContext
    ) -> tuple[genie.Task, genie.ThroughputProfile, list[genie.PlacementRow]]:
        platform, db = self._need(ctx)
        task = genie.Task.from_job(job)
        profile = db.get(job.model)
        key = (job.model, job.batch, job.iters, job.kind, platform, ctx.theta)
        rows = self._cache.get(key)
        if rows is None:
            rows = genie.by_cer(genie.placement_table(task, profile, platform, ctx.theta))
            self._cache[key] = rows
        return task, profile, rows

    def deadline(self, job: Job, ctx: OrderContext) -> float:
        if not job.has_genie_task:
            return INF
        task, profile, _ = self.ranked(job, ctx)
        return genie.deadline(task, profile)


class SWAF(_GeniePolicy):
    """Shortest waiting allowance first with CER placements (seed 001 Alg. 1, Eq. 12-13)."""

    name = "swaf"

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        out: list[Decision] = []
        for job in queue:
            if not job.has_genie_task:
                out.append(Decision(job, waiting_allowance=INF))
                continue
            task, profile, ranked = self.ranked(job, ctx)
            dl = genie.deadline(task, profile)
            row = genie.choose(ranked, ctx.now, dl)
            out.append(Decision(job, row.shape, genie.waiting_allowance(dl, row.lat, ctx.now)))
        order = genie.swaf_order(d.waiting_allowance for d in out)  # type: ignore[misc]
        return [out[i] for i in order]


class MinMin(_GeniePolicy):
    """Earliest ECT first, the job's own GPU request (seed 001 §7.1 Min-Min)."""

    name = "minmin"

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: self.deadline(j, ctx))


class WeightedFair(_GeniePolicy):
    """Weighted average of arrival time and ECT deadline, smallest first (seed 001 §7.1)."""

    name = "wfair"

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        a = ctx.wfair_alpha

        def key(j: Job) -> float:
            dl = self.deadline(j, ctx)
            return a * j.submit_time + (1 - a) * (dl if math.isfinite(dl) else j.submit_time)

        return _sorted(queue, key)


class _Tetris(_GeniePolicy):
    """Arrival order; each task placed at the shape maximising one metric (seed 001 §7.1)."""

    metric: Callable[[genie.PlacementRow], tuple[float, int, int]]

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        out = []
        for job in sorted(queue, key=lambda j: j.submit_time):
            shape = None
            if job.has_genie_task:
                _, _, ranked = self.ranked(job, ctx)
                shape = max(ranked, key=type(self).metric).shape
            out.append(Decision(job, shape))
        return out


class TetrisPerf(_Tetris):
    name = "tetris-perf"

    @staticmethod
    def metric(r: genie.PlacementRow) -> tuple[float, int, int]:  # type: ignore[override]
        return (r.pr, -r.shape.gpus, -r.shape.d_node)


class TetrisCER(_Tetris):
    name = "tetris-cer"

    @staticmethod
    def metric(r: genie.PlacementRow) -> tuple[float, int, int]:  # type: ignore[override]
        return (r.cer, -r.shape.gpus, -r.shape.d_node)


class Capacity:
    """Capacity scheduler: each model type may hold at most its share of GPUs (seed 001 §7.1).

    Arrival order; a job that would push its model type past its share is blocked.
    """

    name = "capacity"
    preemptive = False

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        if ctx.total_gpus <= 0:
            raise InvalidInput("total_gpus", ctx.total_gpus, "Capacity needs the cluster's GPU count")
        types = sorted({j.model or "" for j in queue} | set(ctx.usage_by_model))
        shares = ctx.capacity_shares or {t: 1.0 / len(types) for t in types}
        used = dict(ctx.usage_by_model)
        out = []
        for job in sorted(queue, key=lambda j: j.submit_time):
            cap = math.floor(shares.get(job.model or "", 0.0) * ctx.total_gpus)
            cap = max(cap, 1)  # a share smaller than one GPU still lets single-GPU jobs run
            if used.get(job.model or "", 0) + job.gpus > cap and job.gpus <= cap:
                out.append(Decision(job, blocked=f"model type {job.model!r} is at its capacity of {cap} GPUs"))
                continue
            used[job.model or ""] = used.get(job.model or "", 0) + job.gpus
            out.append(Decision(job))
        return out


def soda_array(job: Job) -> str:
    """SODA's job arrays (seed 002 §V-C): CPU jobs; GPU jobs under 4 GPUs; 4 GPUs and more."""
    if job.kind is JobKind.CPU or job.gpus == 0:
        return "cpu"
    return "gpu-1" if job.gpus < 4 else "gpu-4"


class MultiArray:
    """SODA multi-array scheduling: independent job arrays, DRF inside each (seed 002 §V-C).

    Dominant share of a user = max(GPUs used / total GPUs, CPU used / total CPU); the user
    with the smallest dominant share goes first, arrival order within a user.
    """

    name = "soda"
    preemptive = False

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        if ctx.total_gpus <= 0 or ctx.total_cpu_milli <= 0:
            raise InvalidInput("context", "totals", "DRF needs the cluster's GPU and CPU totals")

        def dominant(user: str) -> float:
            g, c = ctx.usage_by_user.get(user, (0, 0))
            return max(g / ctx.total_gpus, c / ctx.total_cpu_milli)

        decided = sorted(queue, key=lambda j: (soda_array(j), dominant(j.user), j.submit_time))
        return [Decision(j, queue=soda_array(j)) for j in decided]


POLICIES: dict[str, Callable[[], OrderingPolicy]] = {
    "fifo": FIFO,
    "sjf": SJF,
    "srtf": SRTF,
    "qssf": QSSF,
    "swaf": SWAF,
    "minmin": MinMin,
    "wfair": WeightedFair,
    "tetris-perf": TetrisPerf,
    "tetris-cer": TetrisCER,
    "capacity": Capacity,
    "las": LAS,
    "mlfq": MLFQ,
    "soda": MultiArray,
}


def get_policy(name: str) -> OrderingPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise InvalidInput("policy", name, f"expected one of {', '.join(POLICIES)}") from None
