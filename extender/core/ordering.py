"""Queue ordering policies behind one interface and a registry.

A policy takes the waiting jobs of one queue and returns Decisions in the order the
scheduler should try them, each optionally carrying a GENIE shape to place it with.
``queue`` on a Decision names an independent sub-queue (SODA's job arrays): a blocked
head blocks only its own sub-queue. Policies are pure: the caller passes the clock and
the usage figures they need in an OrderContext.

Every policy is a stable sort (or a stable pass) over the queue after :func:`by_priority`: jobs of
equal standing under the policy go by ``Job.priority`` (higher first, Kueue's workload priority),
then in the caller's (arrival) order. With equal priorities that pre-sort is the identity, so no
order changes; a caller that keeps a static policy's queue sorted uses :func:`static_key`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Allocation, Job, JobKind, Platform, QoSClass, Shape, shape_text

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
    # when the policy would decide otherwise for the job if it still waits (SWAF: its chosen placement
    # stops meeting the deadline, Eq. 12, and another is chosen): a pass is due then
    choice_until: float = INF


class OrderingPolicy(Protocol):
    """``static``: the order is a sort by ``key(job, ctx)`` that never changes while a job waits, so
    callers may keep the queue sorted instead of calling ``order`` each pass. ``preemptive``: the
    admission cycle orders waiting and running jobs together and may stop running ones;
    ``requeue_after(job)`` then gives the run seconds until a running job's turn ends (an MLFQ
    demotion, a round-robin quantum), None when it never does. ``arrays``: Decisions name SODA job
    arrays (``Decision.queue``) that the admission cycle places on their own node pools, lending
    idle pools to other arrays and reclaiming them by preemption (seed 002 §V-C)."""

    name: str
    preemptive: bool
    static: bool
    arrays: bool
    uses_genie: bool
    tallies: bool  # ``order`` adds up the jobs it lets go (Capacity): it is given none that can never start
    reshapes: bool  # its Decisions give every GENIE task a shape from GENIE's table (SWAF, Tetris)
    revisits: bool  # its Decisions change with time alone (``Decision.choice_until``: SWAF)

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]: ...

    def key(self, job: Job, ctx: OrderContext) -> float: ...

    def requeue_after(self, job: Job) -> float | None: ...


def model_usage(job: Job, allocation: Allocation | None) -> tuple[str, int]:
    """Capacity's usage of a running job: its model type ('' for none, a type of its own, as Capacity's
    order counts it) and the GPUs it holds (a GENIE task Capacity shrank to its share holds the share)."""
    held = allocation.gpus if allocation is not None and job.gpu_milli == 1000 else job.gpus
    return job.model or "", held


def reshaped(policy: OrderingPolicy, job: Job) -> bool:
    """Whether ``policy`` chooses the job's shape from GENIE's table (a GENIE task the user gave no fixed
    shape): its request's GPU count is then no bound on what it runs with, nor on whether it can start."""
    return policy.reshapes and job.has_genie_task and job.fixed_shape is None


def by_priority(queue: Sequence[Job]) -> Sequence[Job]:
    """The queue with higher priorities first, a stable sort (the queue itself when all are equal):
    a stable sort by the policy's key after it leaves priority as the tie-breaker."""
    first = queue[0].priority if queue else 0
    if all(j.priority == first for j in queue):
        return queue
    return sorted(queue, key=lambda j: -j.priority)


def static_key(policy: OrderingPolicy, job: Job, ctx: OrderContext) -> tuple[float, int]:
    """The sort key of a ``static`` policy with priority as its tie-breaker, for callers that keep
    the queue sorted (``admit(presorted=True)``); ties after it: the caller's arrival order."""
    return (policy.key(job, ctx), -job.priority)


def _sorted(queue: Sequence[Job], key: Callable[[Job], float]) -> list[Decision]:
    # Python's sort is stable; ties go by priority, then keep the caller's (arrival) order.
    return [Decision(j) for j in sorted(by_priority(queue), key=key)]


class _Base:
    name = ""
    preemptive = False
    static = False
    arrays = False  # SODA: independent job arrays over named node pools, lent and reclaimed
    uses_genie = False  # builds GENIE placement tables (its cost grows with the platform; callers bound it)
    tallies = False
    reshapes = False
    revisits = False

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        raise NotImplementedError

    def key(self, job: Job, ctx: OrderContext) -> float:
        raise InvalidInput("policy", self.name, "has no static sort key")

    def requeue_after(self, job: Job) -> float | None:
        return None


class _KeyPolicy(_Base):
    """A policy that is a sort by one key that never changes while a job waits."""

    static = True

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: self.key(j, ctx))


class FIFO(_KeyPolicy):
    name = "fifo"

    def key(self, job: Job, ctx: OrderContext) -> float:
        return job.submit_time


class Priority(_KeyPolicy):
    """Kueue's queueing order (a ClusterQueue's StrictFIFO and BestEffortFIFO): the higher
    ``Job.priority`` first, then arrival; what blocks behind a head is the backfill mode's."""

    name = "priority"

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return [Decision(j) for j in sorted(queue, key=lambda j: (-j.priority, j.submit_time))]

    def key(self, job: Job, ctx: OrderContext) -> float:  # a kept-sorted queue: arrival order within a priority
        return -float(job.priority)


class SJF(_KeyPolicy):
    """Shortest job first with oracle durations (Helios §4.2.3 upper bound)."""

    name = "sjf"

    def key(self, job: Job, ctx: OrderContext) -> float:
        return INF if job.duration is None else job.duration


class SRTF(_KeyPolicy):
    """Shortest remaining time first, preemptive, oracle durations."""

    name = "srtf"
    preemptive = True
    static = False  # the remaining time of running jobs changes

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


# A turn of round robin (and of preemptive LAS between arrivals) is LAS-MLFQ's first quantum, in
# GPU-seconds, so a 4-GPU job's turn is a quarter of a 1-GPU job's (AnalySIM §3.2 quantum units).
RR_QUANTUM = MLFQ_QUANTA[0]


def _turn(job: Job, quantum: float) -> float:
    """Run seconds left in the current turn of ``quantum`` GPU-seconds, counted from the last requeue."""
    gpus = max(job.gpus, 1)
    left = quantum - math.fmod(max(job.attained, 0.0), quantum)
    # attained is a float sum of run segments: 3 x 3250 may come out as 9749.999…; a turn that is
    # over up to rounding is a whole new turn, else the clock would stall on sub-ulp steps.
    if left <= quantum * 1e-9:
        left = quantum
    return left / gpus


class LAS(_Base):
    """Least attained service (GPU-seconds received so far), preemptive (AnalySIM §3.2, after Tiresias).

    Waiting and running jobs are ordered together by attained service; a newcomer (0 attained)
    displaces the job that has received the most. Between arrivals, running jobs are re-ranked
    after each quantum of service so the order follows attained service without thrashing.
    """

    name = "las"
    preemptive = True

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: (j.attained, j.queued_since))  # type: ignore[arg-type,return-value]

    def requeue_after(self, job: Job) -> float | None:
        return _turn(job, RR_QUANTUM)


class RoundRobin(_Base):
    """Round robin (AnalySIM §3.2, its preemptive example): jobs take turns of one quantum in the
    order they (re-)entered the queue; a job whose turn ends goes to the back when others wait."""

    name = "rr"
    preemptive = True

    def __init__(self, quantum: float = RR_QUANTUM) -> None:
        self.quantum = quantum

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: (j.queued_since, j.submit_time))  # type: ignore[arg-type,return-value]

    def requeue_after(self, job: Job) -> float | None:
        return _turn(job, self.quantum)


def mlfq_level(job: Job, quanta: Sequence[float] = MLFQ_QUANTA) -> int:
    """LAS-MLFQ queue of a job: demoted after each queue's quantum of attained GPU-seconds.

    A quantum in run time is quantum / GPUs (AnalySIM §3.2: a 4-GPU job's unit is 1/4 of a
    1-GPU job's), i.e. the quantum itself in GPU-seconds of attained service.
    """
    spent = 0.0
    for level, q in enumerate(quanta[:-1]):
        spent += q
        # attained is a float sum of run segments (3249.9999999999964 for 3250): a quantum used up
        # to rounding is used, else the next demotion is 1e-13 s away and the clock cannot move
        if job.attained < spent * (1 - 1e-9):
            return level
    return len(quanta) - 1


def mlfq_next_demotion(job: Job, quanta: Sequence[float] = MLFQ_QUANTA) -> float | None:
    """Run seconds until this job's next demotion, or None in the last queue."""
    bound = sum(quanta[: mlfq_level(job, quanta) + 1])
    if mlfq_level(job, quanta) == len(quanta) - 1:
        return None
    return (bound - job.attained) / max(job.gpus, 1)


class MLFQ(_Base):
    """LAS-MLFQ (AnalySIM §3.2): 3 queues with quanta of 3250, 7200 and 18000 GPU-seconds; a job is
    demoted when it used its queue's quantum and, in the last queue, goes to the back of it after
    each 18000 (round robin). Within a queue, the order jobs entered it; preemptive across queues."""

    name = "mlfq"
    preemptive = True

    def __init__(self, quanta: Sequence[float] = MLFQ_QUANTA) -> None:
        self.quanta = tuple(quanta)

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        return _sorted(queue, lambda j: (mlfq_level(j, self.quanta), j.queued_since, j.submit_time))  # type: ignore[arg-type,return-value]

    def requeue_after(self, job: Job) -> float | None:
        d = mlfq_next_demotion(job, self.quanta)
        if d is not None:
            return d
        floor = sum(self.quanta[:-1])  # the last queue: turns of its own quantum
        return _turn(Job(job.id, job.submit_time, job.gpus, attained=max(job.attained - floor, 0.0)), self.quanta[-1])


class _Table(NamedTuple):
    """What GENIE knows of a task type, whenever it was submitted: the profile it is estimated on, its
    placements ranked by CER (Alg. 1 lines 3-7), the rows its choice can fall on
    (``genie.choice_candidates``) and its ECT e (Eq. 9)."""

    profile: genie.ThroughputProfile
    rows: list[genie.PlacementRow]
    candidates: tuple[int, ...]
    ect: float

    def deadline(self, submit: float) -> float:
        """A task of this type submitted at ``submit``: its deadline submit + e (``genie.deadline``, Eq. 12)."""
        return submit + self.ect


_TableKey = tuple[str, int, int, JobKind, QoSClass, Platform, float, Shape | None, ModelDB, int]


class _GeniePolicy(_Base):
    """Shared machinery for the policies that use GENIE's model (seed 001 §5, §7.1).

    Caches each task type's now-independent placement table ranked by CER (and its ECT): a long queue's
    tasks are ranked anew at every pass, and most share a few types. A job whose shape the user fixed
    (``Job.fixed_shape``) has that one shape as its only candidate: the policies still rank and estimate
    it (Lat, waiting allowance), but never place it with another shape or GPU count.
    """

    uses_genie = True

    def __init__(self) -> None:
        self._cache: dict[_TableKey, _Table] = {}

    def _need(self, ctx: OrderContext) -> tuple[Platform, ModelDB]:
        if ctx.platform is None or ctx.modeldb is None:
            raise InvalidInput("context", self.name, "GENIE policies need a platform and a model database")
        return ctx.platform, ctx.modeldb

    def _key(self, job: Job, ctx: OrderContext) -> _TableKey:
        """The task type: what its table depends on (the model database as of its last change)."""
        platform, db = self._need(ctx)
        return job.model, job.batch, job.iters, job.kind, job.qos, platform, ctx.theta, job.fixed_shape, db, db.version

    def table(self, job: Job, ctx: OrderContext) -> _Table:
        key = self._key(job, ctx)
        out = self._cache.get(key)
        if out is None:
            (platform, db), fixed = self._need(ctx), job.fixed_shape
            task = genie.Task.from_job(job)
            profile = db.get(job.model, platform.gpu_model)
            if fixed is not None:  # the user's shape, even one larger than the platform: Alg. 1 lines 3-7 on it alone
                rows = [genie.placement_row(task, fixed, profile, platform, ctx.theta)]
            else:
                rows = genie.by_cer(genie.placement_table(task, profile, platform, ctx.theta))
            out = _Table(profile, rows, genie.choice_candidates(rows), genie.ect(task, profile))
            self._cache[key] = out
        return out

    def deadline(self, job: Job, ctx: OrderContext) -> float:
        if not job.has_genie_task:
            return INF
        return self.table(job, ctx).deadline(job.submit_time)


class SWAF(_GeniePolicy):
    """Shortest waiting allowance first with CER placements (seed 001 Alg. 1, Eq. 12-13)."""

    name = "swaf"
    reshapes = True
    revisits = True

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        out: list[Decision] = []
        for job in by_priority(queue):
            if not job.has_genie_task:
                out.append(Decision(job, waiting_allowance=INF))
                continue
            t = self.table(job, ctx)
            dl = t.deadline(job.submit_time)
            row = genie.choose(t.rows, ctx.now, dl, t.candidates)
            until = genie.feasible_until(row.lat, dl) if genie.is_feasible(row.lat, ctx.now, dl) else INF
            w = genie.waiting_allowance(t.ect, row.lat, ctx.now - job.submit_time)
            out.append(Decision(job, row.shape, w, choice_until=until))
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
    reshapes = True

    def __init__(self) -> None:
        super().__init__()
        self._best: dict[_TableKey, Shape] = {}  # each task type's shape: it does not change with time

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        out = []
        for job in sorted(by_priority(queue), key=lambda j: j.submit_time):
            shape = None
            if job.has_genie_task:
                key = self._key(job, ctx)
                shape = self._best.get(key)
                if shape is None:
                    shape = self._best[key] = max(self.table(job, ctx).rows, key=type(self).metric).shape
            out.append(Decision(job, shape))
        return out


class TetrisPerf(_Tetris):
    name = "tetris-perf"

    @staticmethod
    def metric(r: genie.PlacementRow) -> tuple[float, int, int]:
        return (r.pr, -r.shape.gpus, -r.shape.d_node)


class TetrisCER(_Tetris):
    name = "tetris-cer"

    @staticmethod
    def metric(r: genie.PlacementRow) -> tuple[float, int, int]:
        return (r.cer, -r.shape.gpus, -r.shape.d_node)


class Capacity(_Base):
    """Capacity scheduler: a model type never holds more GPUs than its share (seed 001 §7.1).

    Arrival order; a job that would push its model type past its share waits. A GENIE task larger
    than the whole share runs on the share; any other such job can never start (its reason says so).
    """

    name = "capacity"
    tallies = True  # (it reshapes only a task over its type's share: the request binds the others)

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        if ctx.total_gpus <= 0:
            raise InvalidInput("total_gpus", ctx.total_gpus, "Capacity needs the cluster's GPU count")
        # the model types waiting or holding GPUs (a caller's running tally may keep types at 0)
        types = sorted({j.model or "" for j in queue} | {m for m, g in ctx.usage_by_model.items() if g > 0})
        shares = ctx.capacity_shares or {t: 1.0 / len(types) for t in types}
        used = dict(ctx.usage_by_model)
        out = []
        for job in sorted(by_priority(queue), key=lambda j: j.submit_time):
            model = job.model or ""
            cap = math.floor(shares.get(model, 0.0) * ctx.total_gpus)
            cap = max(cap, 1)  # a share smaller than one GPU still lets single-GPU jobs run
            shape = None
            gpus = job.gpus
            if gpus > cap:
                shape = self._within(job, cap, ctx)
                if shape is None:
                    fixed = job.fixed_shape
                    needs = f"its fixed shape {shape_text(fixed)}" if fixed is not None else f"{gpus} GPUs"
                    out.append(Decision(job, blocked=f"needs {needs}, more than model type {model!r}'s share of {cap}"))
                    continue
                gpus = shape.gpus
            if used.get(model, 0) + gpus > cap:
                out.append(
                    Decision(job, blocked=f"model type {model!r} holds {used.get(model, 0)} of its {cap}-GPU share")
                )
                continue
            used[model] = used.get(model, 0) + gpus
            out.append(Decision(job, shape))
        return out

    @staticmethod
    def _within(job: Job, cap: int, ctx: OrderContext) -> Shape | None:
        """A GENIE task (its work is batch × iterations, not a GPU count) runs on at most its type's
        share: one node when the share fits one, else whole nodes; on no more GPUs than its batch has
        samples (b' >= 1, Eq. 6: a batch of 1 runs on 1 GPU, where it waited for ever for a share of 4)
        and on a shape the platform's nodes hold. Other jobs, and a task whose shape the user fixed,
        cannot shrink."""
        platform = ctx.platform
        if not job.has_genie_task or job.fixed_shape is not None or platform is None or cap < 1:
            return None
        g = platform.gpus_per_node
        for n in range(min(cap, job.batch), 0, -1):
            shape = Shape(1, n) if n <= g else Shape(n // g, g)
            if platform.holds(shape):
                return shape
        return None


def soda_array(job: Job) -> str:
    """SODA's job arrays (seed 002 §V-C): CPU jobs; GPU jobs under 4 GPUs; 4 GPUs and more."""
    if job.kind is JobKind.CPU or job.gpus == 0:
        return "cpu"
    return "gpu-1" if job.gpus < 4 else "gpu-4"


class MultiArray(_Base):
    """SODA multi-array scheduling: independent job arrays, DRF inside each (seed 002 §V-C).

    Dominant share of a user = max(GPUs used / total GPUs, CPU used / total CPU); the user
    with the smallest dominant share goes first, arrival order within a user. A job that lost
    borrowed resources re-enters its array's head. The resource arrays, lending and reclaiming
    are the admission cycle's (``arrays``).
    """

    name = "soda"
    arrays = True

    def order(self, queue: Sequence[Job], ctx: OrderContext) -> list[Decision]:
        if ctx.total_gpus <= 0 and ctx.total_cpu_milli <= 0:
            raise InvalidInput("context", "totals", "DRF needs the cluster's GPU or CPU totals")
        # a resource the cluster does not count (traces without CPU figures) is no one's dominant one
        gpus, cpus = max(ctx.total_gpus, 0) or math.inf, max(ctx.total_cpu_milli, 0) or math.inf

        def dominant(user: str) -> float:
            g, c = ctx.usage_by_user.get(user, (0, 0))
            return max(g / gpus, c / cpus)

        def requeued(j: Job) -> bool:  # aborted when its borrowed resources were reclaimed
            return j.enqueued > j.submit_time  # NaN (never requeued) compares False

        decided = sorted(
            by_priority(queue), key=lambda j: (soda_array(j), not requeued(j), dominant(j.user), j.submit_time)
        )
        return [Decision(j, queue=soda_array(j)) for j in decided]


POLICIES: dict[str, Callable[[], OrderingPolicy]] = {
    "fifo": FIFO,
    "priority": Priority,
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
    "rr": RoundRobin,
    "mlfq": MLFQ,
    "soda": MultiArray,
}


def get_policy(name: str) -> OrderingPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise InvalidInput("policy", name, f"expected one of {', '.join(POLICIES)}") from None
