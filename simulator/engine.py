"""Discrete-event engine replaying a trace through the core's decision code (AnalySIM §3).

A tiny SimPy-like core: a heap of ``(time, kind, seq, job, generation)`` events plus a
cursor over the submit-sorted arrivals. Events at one instant are applied first, then
every touched queue gets one scheduling pass. Ordering, placement and backfilling are the
core's (``qosmos.extender.core``): this module only keeps the clock and the books.

Semantics (seed sections in brackets):
- logical partitions: one queue per VC with its own policy [AnalySIM §3.1];
- gang scheduling: all GPUs of a job start together (one Allocation);
- run time = recorded duration (cancelled/failed jobs run what they ran), or, for jobs with
  a GENIE task, genie.latency(task, realised shape) [GENIE Eq. 4]; times the cross-switch
  penalty when a multi-node job spans switches [AnalySIM §3.1];
- every scheduling pass is the core's admission cycle (``core.admission.admit``), the same
  function the operator calls: ordering, placement, backfilling, preemption;
- preemptive policies (srtf, las, rr, mlfq) may stop running jobs; resuming costs ``overhead`` s
  [AnalySIM §4, 8 s from Gandiva]; the end of a turn (MLFQ demotion, round-robin quantum) is an
  event [AnalySIM §3.2];
- durations are predicted causally by a DurationPredictor: ``predict`` at submission,
  ``observe`` at the simulated end (never the recorded one) [Helios §4.2];
- migration on completion vacates partially used nodes when it frees a whole node [§3.1];
- backfill none/easy/relaxed/adaptive via core.backfill [seed 004 §VI-B];
- ``recorded`` (fidelity) starts every job at its recorded start for its recorded time;
- inference services (``SimConfig.services``, seed 002 §V-D2): each timeline row is an event; the
  replicas asked for are placed by the core's ``place_services`` (the operator's function) before
  the queues' passes, retried at every later instant while unplaced; a job it preempts stops as
  any preempted job does and goes back to the head of its queue (``admit(first=...)``).
- partitions with cohorts (``SimConfig.partitions``, ``--partitions``, issue 21 §3): the members of a
  cohort place on the union of their nodes, each within its share plus what it may borrow; a
  lender's blocked head reclaims from borrowers and a LowerPriority partition preempts for a higher
  priority, all decided by ``admit`` (``core.cohorts``); the stopped jobs go through the same
  preemption path (progress kept, overhead on resume) and their queues get a pass at once.
- failures (``SimConfig.failures``): a failure cuts a running job's segment; the run keeps its whole
  checkpoint intervals and the job holds its GPUs through the back-off, then resumes, or past the
  backoff limit fails for good (``core.failures``, the operator's rules for a failed gang's pod).
- node outages (``SimConfig.outages``): a node that goes down is booked full and unusable until it is
  back (as the operator books a node that is not Ready); a gang with a node there stalls, holding its
  GPUs, its run counted to the stall and its work kept to its last checkpoint: it goes back to its queue
  once that node has been down ``node_lost_seconds`` (``core.failures.node_lost_at``, the operator's
  NodeLost), or, when the node is back sooner, its pods there failed and it restarts as after a failure;
  an inference replica there is asked for again.
Static orders (the policy declares ``static``: fifo, sjf, qssf) keep a sorted structure per
queue: no re-sorting per event, and a blocked head ends the pass when backfill is off.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from qosmos.extender.core import genie
from qosmos.extender.core.admission import (
    LOWER_PRIORITY,
    RECLAIM,
    Carry,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.backfill import MODES as BACKFILL_MODES
from qosmos.extender.core.backfill import allocation_latency, expected_run, remaining_run
from qosmos.extender.core.cluster import FULL, ClusterState
from qosmos.extender.core.cohorts import CohortMember, PreemptionPolicy, max_cap, nominal_of
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.failures import (
    DEFAULT_BACKOFF_LIMIT,
    DEFAULT_NODE_LOST_S,
    consecutive_failures,
    kept_run,
    node_lost_at,
    restart_delay,
)
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import POLICIES as ORDERING_POLICIES
from qosmos.extender.core.ordering import OrderContext, OrderingPolicy, get_policy, model_usage, reshaped, static_key
from qosmos.extender.core.placement import get_placer, places_on_empty
from qosmos.extender.core.services import ServiceReplica, place_services
from qosmos.extender.core.types import (
    Allocation,
    DurationPredictor,
    Job,
    PlacementRequest,
    Shape,
    SubmissionPredictions,
)
from qosmos.predictors.readers import paused_gc
from qosmos.simulator.failures import FailureModel, NodeOutages, ScriptedOutages
from qosmos.simulator.partitions import PartitionSpec, check_names
from qosmos.simulator.services import CPU, GPU, ServiceTimeline
from qosmos.simulator.traces import Trace
from sortedcontainers import SortedList

POLICIES = (*ORDERING_POLICIES, "recorded")  # "recorded": the trace's own start times
PLACEMENTS = ("consolidate", "first-fit", "best-fit", "free-gpu", "cer")
BACKFILL_ESTIMATES = ("predicted", "requested", "oracle")

# job states (FAILED: its run failed more often than the backoff limit allows)
FUTURE, WAITING, RUNNING, DONE, WITHDRAWN, REJECTED, FAILED = range(7)
# event kinds, in the order they apply at one instant
# EV_FAIL: a failure cuts a running job's segment (``SimConfig.failures``), after its finish at that instant;
# EV_LOST: a gang stalled on a node that went down goes back to its queue (NodeLost);
# from EV_TICK on: no job's event; EV_SEEN: a rejected job's arrival or withdrawal (its partition passes, as the
# operator's does when the DLJob is created, and waits Inadmissible, or deleted); EV_REVISIT: partition i's
# policy decides otherwise for a waiting job with time alone (SWAF: a waiting allowance runs out)
EV_FINISH, EV_WITHDRAW, EV_FAIL, EV_REQUEUE, EV_RSTART, EV_LOST, EV_TICK, EV_SERVICE, EV_SEEN, EV_REVISIT = range(10)
SAME_INSTANT_ROUNDS = 8  # passes again at one instant beyond one per queue (see the event loop)


@dataclass
class SimConfig:
    policy: str = "fifo"
    placement: str = "consolidate"
    backfill: str = "none"
    relax_factor: float = 0.1
    preemption_overhead: float = 8.0
    migration: bool = False
    cross_switch_penalty: float = 1.1
    partition_policy: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    tick: float = 0.0  # periodic scheduling pass (s); 0 = none
    qssf_error_sigma: float = 0.8  # the log-normal stand-in's σ (only with predictor_fallback)
    record_segments: bool = True
    theta: float = genie.DEFAULT_THETA
    # expected run times behind a blocked head (seed 004 assumes predictions or user estimates)
    backfill_estimates: str = "predicted"
    truth_noise: float = 0.0  # σ of a seeded per-job log-normal factor on realised GENIE throughput
    # a qosmos.predictors.make_duration_predictor name, or any DurationPredictor (a fresh one per run)
    predictor: str | DurationPredictor = "qssf"
    predictor_fallback: bool = False  # on predictor failure use the log-normal stand-in (said in notes)
    # inference services replayed beside the jobs (times from the trace's first submission)
    services: tuple[ServiceTimeline, ...] = ()
    # the VCs as partitions with cohorts, shares, limits and preemption (``--partitions``)
    partitions: tuple[PartitionSpec, ...] = ()
    # failures of running jobs (``simulator.failures``): each restarts as a DLJob's failed gang does
    failures: FailureModel | None = None
    checkpoint_interval: float | None = None  # for jobs whose own ``checkpoint_interval`` is None
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT  # counted restarts before a job fails for good
    # nodes going down and coming back (``simulator.failures``): their gangs are requeued as NodeLost
    outages: NodeOutages | None = None
    node_lost_seconds: float = DEFAULT_NODE_LOST_S  # a stalled gang's grace before it is requeued

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise InvalidInput("policy", self.policy, f"expected one of {', '.join(POLICIES)}")
        for vc, p in self.partition_policy.items():
            if p not in POLICIES or p == "recorded":
                raise InvalidInput("partition_policy", f"{vc}={p}", f"expected one of {', '.join(POLICIES[:-1])}")
        if self.placement not in PLACEMENTS:
            raise InvalidInput("placement", self.placement, f"expected one of {', '.join(PLACEMENTS)}")
        if self.backfill not in BACKFILL_MODES:
            raise InvalidInput("backfill", self.backfill, f"expected one of {', '.join(BACKFILL_MODES)}")
        if self.preemption_overhead < 0:
            raise InvalidInput("preemption_overhead", self.preemption_overhead, "must be >= 0")
        if self.cross_switch_penalty < 1:
            raise InvalidInput("cross_switch_penalty", self.cross_switch_penalty, "must be >= 1")
        if self.relax_factor < 0:
            raise InvalidInput("relax_factor", self.relax_factor, "must be >= 0")
        if self.backfill_estimates not in BACKFILL_ESTIMATES:
            raise InvalidInput(
                "backfill_estimates", self.backfill_estimates, f"expected one of {', '.join(BACKFILL_ESTIMATES)}"
            )
        if not (math.isfinite(self.truth_noise) and self.truth_noise >= 0):
            raise InvalidInput("truth_noise", self.truth_noise, "must be a finite number >= 0")
        names = [s.name for s in self.services]
        if len(set(names)) != len(names):
            raise InvalidInput("services", ",".join(names), "service names must be unique")
        if self.services and self.policy == "recorded":
            raise InvalidInput("services", ",".join(names), "the recorded replay starts jobs as recorded: no services")
        for k, part in enumerate(self.partitions):
            if part.policy is not None and (part.policy not in POLICIES or part.policy == "recorded"):
                raise InvalidInput(
                    f"partitions[{k}].policy", part.policy, f"expected one of {', '.join(POLICIES[:-1])}"
                )
        if self.partitions and self.policy == "recorded":
            raise InvalidInput("partitions", len(self.partitions), "the recorded replay starts jobs as recorded")
        if self.checkpoint_interval is not None and not (
            math.isfinite(self.checkpoint_interval) and self.checkpoint_interval >= 0
        ):
            raise InvalidInput("checkpoint_interval", self.checkpoint_interval, "must be a finite number >= 0")
        if isinstance(self.backoff_limit, bool) or not isinstance(self.backoff_limit, int) or self.backoff_limit < 0:
            raise InvalidInput("backoff_limit", self.backoff_limit, "must be an integer >= 0")
        if self.failures is not None and self.policy == "recorded":
            raise InvalidInput("failures", repr(self.failures), "the recorded replay runs jobs as recorded")
        if not (math.isfinite(self.node_lost_seconds) and self.node_lost_seconds >= 0):
            raise InvalidInput("node_lost_seconds", self.node_lost_seconds, "must be a finite number >= 0")
        if self.outages is not None and self.policy == "recorded":
            raise InvalidInput("outages", repr(self.outages), "the recorded replay runs jobs as recorded")

    def uses_qssf(self) -> bool:
        return (
            self.policy == "qssf"
            or "qssf" in self.partition_policy.values()
            or any(p.policy == "qssf" for p in self.partitions)
        )

    def uses_predictions(self) -> bool:
        qssf = self.uses_qssf()
        return qssf or (self.backfill != "none" and self.backfill_estimates == "predicted")


SERVICE_STATS = (
    "gpu_seconds",
    "cpu_core_seconds",
    "pending_replica_seconds",
    "replicas_placed",
    "replicas_pending_at_end",
    "replicas_lost",  # placed on a node that went down: asked for again
)


class _Replica:
    """One replica of a service in the replay: its request, where it runs (None: pending) and since when."""

    __slots__ = ("alloc", "key", "placed", "rep", "service")

    def __init__(self, key: int, service: int, rep: ServiceReplica) -> None:
        self.key = key  # negative: it shares node_jobs with the jobs' indices
        self.service = service
        self.rep = rep
        self.alloc: Allocation | None = None
        self.placed = math.nan


class _Queue:
    """One partition's waiting jobs, its admission runtime and what its passes carry."""

    __slots__ = (
        "carry",
        "ctx",
        "first",
        "gpu_hist",
        "items",
        "max_len",
        "name",
        "policy",
        "preemptive",
        "revisit",
        "rt",
        "running",
        "static",
        "waiting",
    )

    def __init__(self, rt: PartitionRuntime) -> None:
        self.name = rt.partition.name
        self.rt = rt
        self.policy: OrderingPolicy = rt.policy
        self.static = rt.policy.static
        self.preemptive = rt.policy.preemptive
        self.items: SortedList = SortedList()  # static: (key, seq, idx)
        self.waiting: dict[int, None] = {}  # dynamic: arrival-ordered set of idx
        self.running: set[int] = set()
        self.ctx = rt.ctx
        self.carry = Carry()
        self.max_len = 0
        self.first: set[str] = set()  # waiting jobs preempted for a service: the head of the queue
        self.gpu_hist: dict[int, int] = {}  # GPUs asked -> waiting jobs asking that many (cohorts only)
        self.revisit = math.inf  # when its EV_REVISIT pending is due

    def __len__(self) -> int:
        return len(self.items) if self.static else len(self.waiting)


def _predictor(spec: str | DurationPredictor) -> DurationPredictor:
    if not isinstance(spec, str):
        return spec
    from qosmos.predictors import make_duration_predictor

    return make_duration_predictor(spec)


class _Fallback:
    """The configured predictor, or — once it fails, and only when ``predictor_fallback`` is set —
    the recorded duration times a seeded log-normal error (Helios §4.2.3's stand-in for Philly)."""

    name = "fallback"

    def __init__(self, cfg: SimConfig, notes: list[str]) -> None:
        self.rng = random.Random(cfg.seed)
        self.sigma = cfg.qssf_error_sigma
        self.notes = notes
        self.inner: DurationPredictor | None = None
        try:
            self.inner = _predictor(cfg.predictor)
            self.name = self.inner.name
        except Exception as exc:  # asked for: fall back and say so
            self._fail("creating", exc)

    def _fail(self, what: str, exc: Exception) -> None:
        self.inner = None
        self.notes.append(
            f"predictor fallback: {what} the predictor failed ({type(exc).__name__}: {exc}); "
            f"log-normal stand-in (σ={self.sigma}) around recorded durations from then on"
        )

    def predict(self, job: Job, now: float) -> float | None:
        if self.inner is not None:
            try:
                return self.inner.predict(job, now)
            except Exception as exc:  # asked for: fall back and say so
                self._fail("predicting with", exc)
        return None if job.duration is None else job.duration * math.exp(self.rng.gauss(0.0, self.sigma))

    def observe(self, job: Job, duration: float, end: float) -> None:
        if self.inner is not None:
            try:
                self.inner.observe(job, duration, end)
            except Exception as exc:  # asked for: fall back and say so
                self._fail("observing with", exc)


@dataclass
class SimResult:
    """Everything the metrics and reports need, as per-job lists (index = trace order)."""

    trace: Trace
    config: SimConfig
    state: list[int]
    start: list[float]  # first start (nan when never started)
    end: list[float]
    run_time: list[float]  # seconds actually run (without waiting), including overheads
    gpu_seconds: list[float]
    nodes_used: list[int]
    preemptions: list[int]
    overhead_s: list[float]
    cross_switch: list[bool]
    shape: list[tuple[int, int] | None]
    reservation: list[float]
    backfilled: list[bool]
    segments: list[tuple[int, int, float, float, int]]  # (job, node, start, end, gpus)
    samples: dict[str, list[float]]
    total_gpus: int
    node_names: list[str]
    node_gpus: list[int]
    node_vc: list[str]
    rejected_reasons: dict[str, int]
    violations: int
    overcommitted: int
    migrations: int
    wall_s: float
    frag_integral: float
    frag_time: float
    notes: list[str]
    # inference services: per service its GPU-seconds, CPU core-seconds, pending replica-seconds, ...
    services: dict[str, dict[str, float]] = field(default_factory=dict)
    service_segments: list[tuple[int, int, float, float, int]] = field(default_factory=list)  # (service, node, ...)
    service_preemptions: int = 0  # jobs preempted for replicas (also in ``preemptions``)
    # ``--partitions``: per partition its cohort, nominal share, most GPUs borrowed at once, GPU-hours
    # borrowed, reclaims it made, its jobs reclaimed and its jobs preempted for a higher priority
    partitions: dict[str, dict[str, object]] = field(default_factory=dict)
    # failures (``SimConfig.failures``): per job its restarts and the run seconds lost since a checkpoint
    restarts: list[int] = field(default_factory=list)
    lost_s: list[float] = field(default_factory=list)
    lost_gpu_seconds: float = 0.0
    # node outages (``SimConfig.outages``): per job its NodeLost requeues; outages begun, GPU-seconds down
    node_lost: list[int] = field(default_factory=list)
    outages: int = 0
    down_gpu_seconds: float = 0.0
    drains: int = 0  # outages that were drains (among ``outages``)
    drain_requeues: int = 0  # gangs a drain requeued (counted among their preemptions)


class _Sampler:
    """Time series with bounded size: keeps every k-th point, doubling k when full."""

    def __init__(self, cap: int = 20000) -> None:
        self.cap = cap
        self.stride = 1
        self.count = 0
        self.data: dict[str, list[float]] = {"t": [], "used_gpus": [], "used_nodes": [], "waiting": [], "running": []}

    def add(self, t: float, used: int, nodes: int, waiting: int, running: int) -> None:
        self.count += 1
        if self.count % self.stride:
            return
        d = self.data
        d["t"].append(t)
        d["used_gpus"].append(used)
        d["used_nodes"].append(nodes)
        d["waiting"].append(waiting)
        d["running"].append(running)
        if len(d["t"]) >= self.cap:
            for k in d:
                d[k] = d[k][::2]
            self.stride *= 2


class Simulator:
    """Run ``trace`` under ``config``; ``run()`` returns a SimResult. Deterministic per seed."""

    def __init__(
        self,
        trace: Trace,
        config: SimConfig,
        modeldb: ModelDB | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        config.validate()
        self.trace = trace
        self.cfg = config
        self.modeldb = modeldb or ModelDB.builtin()
        self.progress = progress
        self.cluster = ClusterState(trace.nodes)
        self.placer = get_placer(config.placement)
        self.jobs = trace.jobs
        n = len(self.jobs)
        self.n = n
        nan = math.nan
        self.state = [FUTURE] * n
        self.start = [nan] * n
        self.end = [nan] * n
        self.run_time = [0.0] * n
        self.gpu_sec = [0.0] * n
        self.nodes_used = [0] * n
        self.preempt = [0] * n
        self.overhead = [0.0] * n
        self.xswitch = [False] * n
        self.shape: list[tuple[int, int] | None] = [None] * n
        self.reservation = [nan] * n
        self.backfilled = [False] * n
        self.alloc: list[Allocation | None] = [None] * n
        self.seg_start = [0.0] * n
        self.seg_len = [0.0] * n  # seconds of the current segment, its resume overhead included
        self.seg_over = [0.0] * n  # the current segment's resume overhead
        self.restarts = [0] * n  # restarts after failures (counted against the backoff limit)
        self.consecutive = [0] * n  # failed runs in a row (the back-off's)
        self.lost = [0.0] * n  # run seconds lost to failures since the last checkpoint
        self.lost_gpu_s = 0.0
        self.node_lost = [0] * n  # requeues because a node of its placement went down (NodeLost)
        self.stalled = [nan] * n  # when its gang stalled on a node that went down (nan: it runs)
        self.frac_left = [1.0] * n  # fraction of the job's work still to do
        self.gen = [0] * n
        self.base_exec = [0.0] * n
        self.base_att = [0.0] * n
        self.qentry: list[tuple[float, int, int] | None] = [None] * n  # static: its entry in items
        self.req: list[PlacementRequest | None] = [None] * n
        self.segments: list[tuple[int, int, float, float, int]] = []
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        self.violations = 0
        self.migrations = 0
        self.external = False
        self.job_time = 0.0  # integral of jobs in the system over time (gym reward)
        self.overcommitted = 0
        self.rejected: dict[str, int] = {}
        self.notes: list[str] = list(trace.notes)
        self.sampler = _Sampler()
        self.recorded = config.policy == "recorded"
        cl = self.cluster
        self.node_jobs: list[set[int]] = [set() for _ in cl.nodes]
        # node outages: per down node what was free on it, booked (so nothing new goes there); when each
        # went down and when its next outage ends; outages begun and the GPU-seconds they took away
        self.cordons: dict[int, list[Allocation]] = {}
        self.down_since = [math.nan] * len(cl.nodes)
        self.up_at = [math.inf] * len(cl.nodes)
        self.drain_next = [False] * len(cl.nodes)  # the next outage (pushed) is a drain
        self.drained: set[int] = set()  # nodes cordoned for a drain (down for placements, never lost)
        self.drains = self.drain_requeues = 0
        # (time, 0 when it brings the node back else 1, seq, node): at one instant a node comes back before
        # its gangs' grace runs out (EV_LOST) and goes down after what finished or failed then
        self.node_events: list[tuple[float, int, int, int]] = []
        self.outages = 0
        self.down_gpu_s = 0.0
        self.out_origin = 0.0
        self.ups_pending = 0  # node events that bring a node back
        self.done_now = 0  # jobs that ended outside the event loop's own handlers this instant (progress)
        self.used_gpus = 0
        self.used_nodes = 0
        self.frag_integral = 0.0
        self.frag_time = 0.0
        self.n_waiting = 0
        self.n_running = 0
        self._tasks: dict[int, genie.Task] = {}
        # partitions
        self.vc_names = list(cl.vcs)
        self.vc_index = {v: i for i, v in enumerate(self.vc_names)}
        node_vc = cl.vc_id
        self.node_vcidx = [int(x) for x in node_vc]
        self.queues: list[_Queue] = []
        total_cpu = int(cl.cpu_cap.sum())
        check_names(config.partitions, self.vc_names)
        specs = {p.name: (k, p) for k, p in enumerate(config.partitions)}
        for i, vc in enumerate(self.vc_names):
            mask = node_vc == i
            pname = config.partition_policy.get(vc, "fifo" if self.recorded else config.policy)
            k, spec = specs.get(vc, (-1, None))
            if spec is not None and spec.policy is not None:
                pname = spec.policy
            if spec is not None and spec.array_split is not None and not get_policy(pname).arrays:
                why = f"applies only to a policy with job arrays (soda), not {pname}"
                raise InvalidInput(f"partitions[{k}] ({vc}).arraySplit", spec.array_split, why)
            ctx = OrderContext(
                platform=cl.platform(mask),
                modeldb=self.modeldb,
                theta=config.theta,
                usage_by_model={},
                usage_by_user={},
                total_gpus=max(int(cl.gpu_cap[mask].sum()), 1),
                total_cpu_milli=max(total_cpu, 1),
            )
            part = Partition(
                vc,
                policy=pname,
                placement=config.placement,
                backfill=config.backfill,
                relax_factor=config.relax_factor,
                theta=config.theta,
                array_split=self._array_split(vc, spec) if get_policy(pname).arrays else 0.5,
            )
            if spec is not None:
                part = self._with_spec(part, spec, k)
            self.queues.append(_Queue(PartitionRuntime(part, ctx)))
        self.drf = any(q.policy.name == "soda" for q in self.queues)
        self._cohorts(specs)
        self.track_progress = (  # (a failed run keeps what it checkpointed: executed adds up over segments)
            any(q.preemptive or q.policy.arrays for q in self.queues)
            or config.migration
            or self.may_preempt
            or config.failures is not None
            or config.outages is not None
        )
        # by submit time, ties in trace order (a stable sort)
        submit = np.fromiter((j.submit_time for j in self.jobs), float, n)
        self.order: list[int] = np.argsort(submit, kind="stable").tolist()
        self.withdraw = trace.withdraw_at
        self.exp_end = [nan] * n  # expected end of the current segment (backfilling's view)
        self.res_latest = [nan] * n  # a reserved head's latest start (seed 004 §VI-B)
        self.res_start = [nan] * n  # its reservation's first projected start (``reservation``: its very first)
        self.res_backfilled: dict[int, tuple[str, ...]] = {}
        self.supplied = [j.predicted_duration is not None for j in self.jobs]
        self.noise = self._truth_noise()
        self.predictor = self._make_predictor()
        self.predictions = None if self.predictor is None else SubmissionPredictions(self.predictor)
        self.unpredicted: set[int] = set()  # unfinished jobs the predictor could not answer yet: asked again
        self.observed = False  # the predictor observed a finish at this instant
        # inference services (seed 002 §V-D2): replicas live per service and mode, oldest first
        self.services = list(config.services)
        self.svc_live: list[dict[str, list[_Replica]]] = [{GPU: [], CPU: []} for _ in self.services]
        self.svc_pending: list[_Replica] = []  # asked for, not placed: retried before every pass
        self.svc_stats = [dict.fromkeys(SERVICE_STATS, 0.0) for _ in self.services]
        self.svc_segments: list[tuple[int, int, float, float, int]] = []
        self.svc_serial = 0
        self.svc_preemptions = 0
        self.svc_origin = 0.0
        if self.services:
            self.track_progress = True  # a preempted job's executed time must add up over segments
            self._check_services()
        if isinstance(config.outages, ScriptedOutages):  # a misspelt node would silently never go down
            unknown = sorted(set(config.outages.outages) - set(cl.index))
            if unknown:
                raise InvalidInput("node_outages", ", ".join(unknown[:5]), "names no node of the trace's cluster")

    # ---- set-up ------------------------------------------------------------------------------
    def _make_predictor(self) -> DurationPredictor | None:
        """The duration predictor (QSSF ordering, predicted backfill estimates), from qosmos.predictors.

        Causal by construction: a job is predicted at its submission from jobs observed before,
        and observed at its simulated end. Failures propagate unless ``predictor_fallback`` asks for
        the log-normal stand-in around the recorded duration (Helios §4.2.3 did that for Philly),
        which the summary's notes then say.
        """
        cfg = self.cfg
        if not cfg.uses_predictions() or all(self.supplied):
            return None
        if not cfg.predictor_fallback:
            pred = _predictor(cfg.predictor)
            self.notes.append(
                f"durations predicted online by {pred.name} (predict at submit, observe at simulated end)"
            )
            return pred
        return _Fallback(cfg, self.notes)

    @staticmethod
    def _with_spec(part: Partition, spec: PartitionSpec, k: int) -> Partition:
        """The trace's partition with its ``--partitions`` entry: share, cohort, limits, preemption."""
        try:
            return Partition(
                part.name,
                part.policy,
                part.placement,
                part.backfill,
                part.relax_factor,
                spec.nominal_gpus,
                part.theta,
                part.array_split,
                cohort=spec.cohort,
                borrowing_limit=spec.borrowing_limit,
                lending_limit=spec.lending_limit,
                preemption=PreemptionPolicy(spec.within_partition, spec.reclaim_within_cohort),
            )
        except InvalidInput as exc:
            raise InvalidInput(f"partitions[{k}] ({spec.name}).{exc.field}", exc.value, exc.reason) from None

    def _cohorts(self, specs: dict[str, tuple[int, PartitionSpec]]) -> None:
        """Share the nodes of each cohort's members on the books (before admissibility: a job may fit
        only the cohort's nodes), and set up the per-partition usage figures of the summary."""
        cl = self.cluster
        groups: dict[str, list[int]] = {}
        for i, q in enumerate(self.queues):
            c = q.rt.partition.cohort
            if c is not None:
                groups.setdefault(c, []).append(i)
        self.mates: list[list[int]] = [[] for _ in self.queues]  # the other members of its cohort
        for members in groups.values():
            cl.share_nodes([self.vc_names[i] for i in members])
            for i in members:
                self.mates[i] = [j for j in members if j != i]
        self.may_preempt = any(
            q.rt.partition.cohort is not None or q.rt.partition.preemption.within_partition != "Never"
            for q in self.queues
        )
        self.redo: set[int] = set()  # queues to pass again at this instant: a cohort mate's pass changed them
        self.part_held = [0] * len(self.queues)  # whole GPUs held by each partition's running jobs
        # per partition of the file: its share, what it borrowed (most at once, GPU-seconds), reclaims
        self.tracked: list[tuple[int, int]] = []  # (queue, nominal share)
        self.part_stats: dict[str, dict[str, float]] = {}
        self.part_cohort: dict[str, str | None] = {}
        for i, q in enumerate(self.queues):
            if q.name not in specs:
                continue
            nominal = nominal_of(q.rt.partition, cl)
            self.tracked.append((i, nominal))
            self.part_cohort[q.name] = q.rt.partition.cohort
            self.part_stats[q.name] = {
                "nominal_gpus": nominal,
                "max_borrowed_gpus": 0,
                "borrowed_gpu_hours": 0.0,
                "reclaims": 0,  # jobs of others it preempted to take its share back
                "reclaimed_jobs": 0,  # its jobs preempted by a lender
                "priority_preemptions": 0,  # its jobs preempted for a higher priority
            }
        # the most GPUs a partition with a share may ever hold: a job asking more never starts
        self.max_gpus: dict[str, int] = {}
        for i, q in enumerate(self.queues):
            p = q.rt.partition
            if p.cohort is not None:
                mates = [
                    (self.queues[j].rt.partition, nominal_of(self.queues[j].rt.partition, cl)) for j in self.mates[i]
                ]
                self.max_gpus[q.name] = max_cap(p, nominal_of(p, cl), mates)
            elif p.gpu_quota is not None:
                self.max_gpus[q.name] = p.gpu_quota
        if groups:
            names = "; ".join(f"{c}: {', '.join(self.vc_names[i] for i in m)}" for c, m in sorted(groups.items()))
            self.notes.append(f"cohorts sharing their nodes ({names})")

    def _array_split(self, vc: str, spec: PartitionSpec | None) -> float:
        """SODA's 4-GPU resource array share: its partitions entry's, else from the trace's statistics
        (seed 002 §V-C: "derived from historical statistical information"): the share of requested GPUs
        in >=4-GPU jobs."""
        if spec is not None and spec.array_split is not None:
            self.notes.append(
                f"SODA arrays in {vc}: {spec.array_split:.0%} of its GPUs in the >=4-GPU array (its arraySplit)"
            )
            return spec.array_split
        big = total = 0
        for j in self.jobs:
            if j.vc == vc and j.gpus and j.gpu_milli == 1000:
                total += j.gpus
                big += j.gpus if j.gpus >= 4 else 0
        split = big / total if total else 0.5
        self.notes.append(
            f"SODA arrays in {vc}: {split:.0%} of its GPUs in the >=4-GPU array "
            "(the trace's share of GPUs requested by >=4-GPU jobs)"
        )
        return split

    def _truth_noise(self) -> list[float] | None:
        """Per-job factor on realised GENIE throughput (seeded), so GENIE's model can be wrong."""
        sigma = self.cfg.truth_noise
        if sigma <= 0:
            return None
        rng = np.random.default_rng([self.cfg.seed, 0x7275])
        noise: list[float] = np.exp(rng.normal(0.0, sigma, self.n)).tolist()
        return noise

    def _request(self, i: int, shape: Shape | None = None) -> PlacementRequest:
        if shape is not None:
            return PlacementRequest.for_job(self.jobs[i], shape)
        r = self.req[i]
        if r is None:
            r = self.req[i] = PlacementRequest.for_job(self.jobs[i])
        return r

    def _admissible(self) -> None:
        """Reject, before running, jobs that no partition could ever host (reason counted)."""
        # one per distinct request: a million jobs have few
        verdicts: dict[tuple[str, int, tuple[str, ...], int, int, int, int], str | None] = {}
        for i, j in enumerate(self.jobs):
            if j.vc not in self.vc_index:
                reason: str | None = f"no nodes in vc {j.vc!r}"
            elif self._reshaped(j):
                # its policy chooses its shape (GENIE's table): its request's GPUs are no bound, and the
                # admission cycle tells, as in the operator, whether the shape it gets can start
                reason = None
            else:
                key = (j.vc, j.gpus, j.gpu_models, j.gpu_milli, j.cpu_milli, j.memory_mib, j.nodes)
                if key in verdicts:
                    reason = verdicts[key]
                else:
                    try:
                        reason = self.cluster.could_ever_fit(self._request(i))
                    except InvalidInput as exc:
                        reason = str(exc)
                    if reason is None and j.gpus > 0 and j.gpu_milli == 1000:
                        reason = self._fits_empty(i)
                    verdicts[key] = reason
            if reason is None and j.gpus > self.max_gpus.get(j.vc, j.gpus) and not self._reshaped(j):
                reason = f"needs {j.gpus} GPUs; its share plus what it may borrow is {self.max_gpus[j.vc]} at most"
            if reason is None and j.duration is None and not j.has_genie_task:
                reason = "no duration and no GENIE task"
            if reason is not None and self.recorded and self.trace.recorded_start[i] is not None:
                reason = None  # fidelity: it ran, so it runs (unplaced if need be)
            if reason is not None:
                self.state[i] = REJECTED
                short = reason.split(";")[0][:80]
                self.rejected[short] = self.rejected.get(short, 0) + 1

    def _reshaped(self, job: Job) -> bool:
        """A GENIE task whose partition's policy chooses its shape (the request's GPUs are no bound)."""
        return reshaped(self.queues[self.vc_index[job.vc]].policy, job)

    def _fits_empty(self, i: int) -> str | None:
        """Whole-GPU jobs: would the placer find room on the empty cluster (cpu/memory shares too)?
        Asked once per distinct request (``_admissible``'s verdicts)."""
        try:
            return (
                None
                if places_on_empty(self.placer, self._request(i), self.cluster)
                else "does not fit the empty partition"
            )
        except InvalidInput as exc:
            return str(exc)

    # ---- events ------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, i, self.gen[i]))

    # ---- run time ----------------------------------------------------------------------------
    def _task(self, i: int) -> genie.Task:
        t = self._tasks.get(i)
        if t is None:
            t = self._tasks[i] = genie.Task.from_job(self.jobs[i])
        return t

    def _full_runtime(self, i: int, alloc: Allocation | None) -> float:
        """Run time of the whole job at this allocation (GENIE Eq. 4 for GENIE tasks)."""
        job = self.jobs[i]
        multi = alloc is not None and len(alloc.grants) > 1
        if job.model and alloc is not None and job.has_genie_task:
            shape = genie.run_shape([len(g.gpu_ids) for g in alloc.grants])
            self.shape[i] = (shape.d_node, shape.d_gpn)
            cl = self.cluster  # the profile of the GPU model the job runs on (the first grant's node)
            gpu_model = cl.gpu_models[cl.model_id[alloc.grants[0].node]]
            rt = genie.latency(self._task(i), shape, self.modeldb.get(job.model, gpu_model))
            if self.noise is not None:
                rt /= self.noise[i]  # realised throughput = modelled × factor
        else:
            rt = job.duration or 0.0
        if multi and alloc is not None and alloc.cross_switch and not self.recorded:
            rt *= self.cfg.cross_switch_penalty
        return rt

    def _estimate(self, job: Job, alloc: Allocation | None) -> float:
        """Expected run seconds of ``job`` from now on ``alloc``, as backfilling sees it
        (``backfill_estimates``: predicted, requested by the user, or the oracle); inf when unknown."""
        i = self._idx_of[job.id]
        mode = self.cfg.backfill_estimates
        if mode == "oracle":
            shape = self.shape[i]
            full = self._full_runtime(i, alloc)
            self.shape[i] = shape
            return full * self.frac_left[i]
        if mode == "requested":
            d = job.requested_duration
            return math.inf if d is None else remaining_run(d, job)
        return expected_run(job, alloc, job.predicted_duration, self.cluster, self.modeldb)

    # ---- starting and stopping ---------------------------------------------------------------
    def _book(self, i: int, alloc: Allocation, sign: int, booked: bool = False) -> None:
        """Allocate or release on the ClusterState (unless the core ``booked`` it already: an admission
        pass its starts, ``place_services`` its preemptions), and keep the engine's counters in step."""
        cl = self.cluster
        job = self.jobs[i]
        whole = job.gpu_milli == 1000
        if not booked:
            if sign < 0:
                cl.release(alloc)
            else:
                cl.allocate(alloc)
        node_vcidx = self.node_vcidx
        node_jobs = self.node_jobs
        for g in alloc.grants:
            node = g.node
            if whole:
                self.used_gpus += sign * len(g.gpu_ids)
            elif g.gpu_milli:  # a shared GPU is used while any share is held: count the ones that flipped
                row = cl.gpu_free_milli[node]
                flipped = FULL - g.gpu_milli if sign > 0 else FULL
                self.used_gpus += sign * sum(1 for x in g.gpu_ids if row[x] == flipped)
            nj = node_jobs[node]
            if sign > 0:
                if not nj:
                    self.used_nodes += 1
                nj.add(i)
            else:
                nj.discard(i)
                if not nj:
                    self.used_nodes -= 1
        qi = self.vc_index.get(job.vc)
        if qi is None:  # fidelity replays place jobs of VCs without nodes anywhere: their node's queue
            qi = node_vcidx[alloc.grants[0].node]
        if whole:
            held = self.part_held[qi] = self.part_held[qi] + sign * alloc.gpus
            if sign > 0 and self.tracked:
                st = self.part_stats.get(self.vc_names[qi])
                if st is not None and held - st["nominal_gpus"] > st["max_borrowed_gpus"]:
                    st["max_borrowed_gpus"] = held - st["nominal_gpus"]
        ctx = self.queues[qi].ctx
        model, held = model_usage(job, alloc)
        m = ctx.usage_by_model
        m[model] = m.get(model, 0) + sign * held  # type: ignore[index]
        if self.drf:  # DRF from actual usage (SODA §V-C)
            u = ctx.usage_by_user
            g0, c0 = u.get(job.user, (0, 0))
            u[job.user] = (g0 + sign * job.gpus, c0 + sign * job.cpu_milli)  # type: ignore[index]

    def _start(self, i: int, alloc: Allocation | None, q: _Queue, booked: bool = False) -> None:
        now = self.now
        if alloc is not None:
            self._book(i, alloc, +1, booked)
        self.alloc[i] = alloc
        if math.isnan(self.start[i]):
            self.start[i] = now
            self._check_violation(i)
        self.state[i] = RUNNING
        self.n_running += 1
        q.running.add(i)
        if q.first:  # started again: no longer held at the head
            q.first.discard(self.jobs[i].id)
        self._segment(i, now, q)
        if alloc is not None:
            self.nodes_used[i] = max(self.nodes_used[i], len(alloc.grants))
            if alloc.cross_switch:
                self.xswitch[i] = True

    def _segment(self, i: int, at: float, q: _Queue) -> None:
        """A run segment of running job ``i`` on its allocation from ``at`` (now, or the end of a failed
        run's back-off): its end, a turn's end and a failure, as events. A resumed run (after a preemption
        or a failure) first pays the resume overhead."""
        alloc = self.alloc[i]
        seg = self._full_runtime(i, alloc) * self.frac_left[i]
        extra = self.cfg.preemption_overhead if self.preempt[i] or self.restarts[i] or self.node_lost[i] else 0.0
        self.overhead[i] += extra
        end = at + seg + extra
        wd = self.withdraw[i]
        if wd is not None:
            seg = max(0.0, min(seg, wd - at))
            end = at + seg + extra if wd >= at else max(wd, self.now)  # (deleted within its back-off)
        self.seg_start[i] = at
        self.seg_len[i] = seg + extra
        self.seg_over[i] = extra
        job = self.jobs[i]
        if q.rt.partition.backfill != "none":
            self.exp_end[i] = at + extra + self._estimate(job, alloc)
        if self.track_progress:
            self.base_exec[i] = job.executed
            self.base_att[i] = job.attained
        self.gen[i] += 1
        self._push(end, EV_FINISH, i)
        if q.preemptive:
            d = q.policy.requeue_after(job)
            if d is not None and d < seg:
                self._push(at + extra + max(d, 0.0), EV_REQUEUE, i)
        failures = self.cfg.failures
        if failures is not None:
            t = failures.next_failure(job, i, at, self._held_gpus(i, alloc), self.gpu_sec[i])
            if t is not None and at < t < end:
                self._push(t, EV_FAIL, i)

    def _held_gpus(self, i: int, alloc: Allocation | None) -> float:
        """GPUs job ``i`` holds on ``alloc`` (a share's fraction; a reshaped GENIE task's own count)."""
        job = self.jobs[i]
        gpus = job.gpus if job.gpu_milli == 1000 else job.gpu_milli / 1000.0
        if alloc is not None:
            held = alloc.gpus
            gpus = max(held, gpus if held == 0 else 0)
        return gpus

    def _stop(
        self, i: int, finished: bool, released: bool = False, failed: bool = False, node_lost: bool = False
    ) -> None:
        """End the current run segment (completion or preemption; ``released``: the core has released
        its allocation on the books already; ``failed``: its failed run ended it for good; ``node_lost``:
        requeued because a node of it went down). A stalled gang's run ends at its stall and keeps its
        work to its last checkpoint only (no grace: its pods there are gone)."""
        now = self.now
        alloc = self.alloc[i]
        ran = self._ran(i, alloc)  # (0 within a failed run's back-off)
        stalled = self.stalled[i] == self.stalled[i]
        self.stalled[i] = math.nan
        job = self.jobs[i]
        q = self.queues[self.vc_index[job.vc]]
        q.running.discard(i)
        self.n_running -= 1
        if alloc is not None:
            self._book(i, alloc, -1, released)
        self.alloc[i] = None
        self.gen[i] += 1
        if finished or failed:
            self.state[i] = FAILED if failed else DONE
            self.end[i] = now
            self.frac_left[i] = 0.0
            if failed:
                self._forget_prediction(i)  # not a run time the history learns from
            elif self.predictor is not None:
                wd = self.withdraw[i]
                if wd is None or now < wd:  # a job withdrawn while it ran did not finish: not history
                    # (its run without what failures lost: the work, as the operator observes it)
                    self.predictor.observe(job, self.run_time[i] - self.lost[i], now)
                    self.observed = True
                self._forget_prediction(i)
        else:
            useful = max(0.0, ran - self.seg_over[i])
            kept = useful
            if stalled:  # no grace period: its work to its last checkpoint
                kept = kept_run(useful, self._checkpoints(job))
                self.lost[i] += useful - kept
                self.lost_gpu_s += (useful - kept) * self._held_gpus(i, alloc)
            self._progress(i, alloc, kept, useful)
            if node_lost:
                self.node_lost[i] += 1
            else:
                self.preempt[i] += 1
            self.state[i] = WAITING
            self.n_waiting += 1
            job.enqueued = now
            self._enqueue(i, q)

    def _until(self, i: int) -> float:
        """Now, or when running job ``i``'s gang stalled on a node that went down (it ran no further)."""
        stalled = self.stalled[i]
        return self.now if stalled != stalled else min(self.now, stalled)

    def _checkpoints(self, job: Job) -> float | None:
        """The checkpoint interval ``job``'s run keeps its work by (``core.failures.kept_run``)."""
        return job.checkpoint_interval if job.checkpoint_interval is not None else self.cfg.checkpoint_interval

    def _ran(self, i: int, alloc: Allocation | None) -> float:
        """Seconds the current segment of job ``i`` ran up to now (or its stall), as the run time and
        GPU-seconds count them (its GPUs' time and its segments')."""
        now = self._until(i)
        start = self.seg_start[i]
        ran = max(now - start, 0.0)
        self.run_time[i] += ran
        self.gpu_sec[i] += ran * self._held_gpus(i, alloc)
        if alloc is not None and ran > 0 and self.cfg.record_segments:
            self.segments.extend((i, g.node, start, now, len(g.gpu_ids)) for g in alloc.grants)
        return ran

    def _progress(self, i: int, alloc: Allocation | None, kept: float, useful: float) -> None:
        """The current segment's ``useful`` run (after its resume overhead) served job ``i``; its work
        keeps ``kept`` of it (all of a stopped run, a failed run's checkpointed part)."""
        job = self.jobs[i]
        work = max(self.seg_len[i] - self.seg_over[i], 1e-12)
        self.frac_left[i] *= max(0.0, 1.0 - kept / work)
        if job.has_genie_task:  # the work left as GENIE's model (not the noise) counts it: the estimates'
            lat = allocation_latency(job, alloc, self.cluster, self.modeldb)
            job.work_left = job.work_left if lat is None else genie.work_left_after(job.work_left, kept, lat)
        job.executed = self.base_exec[i] + kept
        job.attained = self.base_att[i] + useful * job.gpus

    def _fail(self, i: int) -> None:
        """A failure cut running job ``i``'s segment now (as a failed pod fails a DLJob's gang): its run
        keeps the progress of its whole checkpoint intervals, the rest is lost; it runs again on its
        allocation after the back-off, or, past the backoff limit, fails for good (core.failures)."""
        now = self.now
        job = self.jobs[i]
        alloc = self.alloc[i]
        started = self.seg_start[i]
        ran = self._until(i) - started  # (a gang stalled on a node that went down ran to the stall)
        useful = max(0.0, ran - self.seg_over[i])
        kept = kept_run(useful, self._checkpoints(job))
        k = self.consecutive[i] = consecutive_failures(self.consecutive[i], ran)
        if self.restarts[i] >= self.cfg.backoff_limit:
            self._progress(i, alloc, kept, useful)
            self._stop(i, finished=False, failed=True)
            return
        # lost: the run a restart does again (as the DLJob's status.lostRunSeconds counts it)
        self.lost[i] += useful - kept
        self.lost_gpu_s += (useful - kept) * self._held_gpus(i, alloc)
        self.restarts[i] += 1
        self._ran(i, alloc)  # (its segment ends: its figures, before the next begins)
        self._progress(i, alloc, kept, useful)
        self.stalled[i] = math.nan
        self._segment(i, now + restart_delay(k), self.queues[self.vc_index[job.vc]])

    def _forget_prediction(self, i: int) -> None:
        """Job ``i`` is done (finished or withdrawn): its prediction is not asked for again."""
        if self.predictions is not None:
            self.predictions.forget(self.jobs[i].id)
            self.unpredicted.discard(i)

    def _ask_again(self, now: float, dirty: set[int]) -> None:
        """The history grew: the jobs without a prediction are asked again (as the operator's next pass
        asks); a waiting one that gets it takes its place in QSSF's order, a running one's expected end
        follows, and their partitions pass again."""
        assert self.predictions is not None
        jobs = self.jobs
        for i in sorted(self.unpredicted):
            p = self.predictions.predict(jobs[i], now)
            if p is None:
                continue
            self.unpredicted.discard(i)
            qi = self.vc_index.get(jobs[i].vc, 0)
            q = self.queues[qi]
            static = self.state[i] == WAITING and q.static
            if static:  # its key changes: out of the sorted queue, and in again with it
                self._dequeue(i, q)
                self.n_waiting += 1
            jobs[i].predicted_duration = p
            if static:
                self._enqueue(i, q)
            elif self.state[i] == RUNNING and q.rt.partition.backfill != "none":
                self.exp_end[i] = self.seg_start[i] + self.seg_over[i] + self._estimate(jobs[i], self.alloc[i])
            dirty.add(qi)

    def _sync_progress(self, q: _Queue) -> None:
        """Refresh executed/attained of running jobs before a preemptive policy orders them."""
        now = self.now
        for i in q.running:
            job = self.jobs[i]
            # (a stalled gang's too, as the operator's view of it: its GPUs are held; its fold ends at the stall)
            useful = max(0.0, now - self.seg_start[i] - self.seg_over[i])
            job.executed = self.base_exec[i] + useful
            job.attained = self.base_att[i] + useful * job.gpus

    # ---- queues ------------------------------------------------------------------------------
    def _enqueue(self, i: int, q: _Queue) -> None:
        if q.static:
            entry = (*static_key(q.policy, self.jobs[i], q.ctx), i)  # the policy's key, then priority
            self.qentry[i] = entry
            q.items.add(entry)
        else:
            self._enqueue_in_arrival_order(i, q.waiting)
        if self.mates[self.vc_index[q.name]]:  # a cohort member's demand, for the others' caps
            g = self.jobs[i].gpus
            q.gpu_hist[g] = q.gpu_hist.get(g, 0) + 1
        ln = len(q)
        if ln > q.max_len:
            q.max_len = ln

    def _arrival_key(self, i: int) -> tuple[float, bool, float, int]:
        """A waiting job's place in an unsorted queue: ``Job.arrival_order``, then the trace's order."""
        return (*self.jobs[i].arrival_order, i)

    def _enqueue_in_arrival_order(self, i: int, waiting: dict[int, None]) -> None:
        """Append ``i``, keeping ``waiting`` in :meth:`_arrival_key` order: only jobs sent back at this
        instant, by a pass before this one or earlier in this one, can stand behind it."""
        key, later = self._arrival_key(i), []
        while waiting and self._arrival_key(last := next(reversed(waiting))) > key:
            later.append(last)
            del waiting[last]
        waiting[i] = None
        for j in reversed(later):
            waiting[j] = None

    def _dequeue(self, i: int, q: _Queue) -> None:
        if q.static:
            items, entry = q.items, self.qentry[i]
            head = items.pop(0)  # the head, as a pass without backfilling starts them: no search
            if head != entry:
                items.add(head)
                items.remove(entry)
            self.qentry[i] = None
        else:
            del q.waiting[i]
        if q.gpu_hist:
            g = self.jobs[i].gpus
            q.gpu_hist[g] -= 1
        self.n_waiting -= 1

    def _check_violation(self, i: int) -> None:
        """A backfill violation (004 §VI-B): a reserved head starts after its latest start while a job
        backfilled behind it still ran at its reserved start, i.e. backfilling caused the delay."""
        latest = self.res_latest[i]
        if latest != latest or self.now <= latest + 1e-6:
            return
        reserved = self.res_start[i]
        idx = self._idx_of
        for b in self.res_backfilled.get(i, ()):
            e = self.end[idx[b]]
            if e != e or e > reserved + 1e-6:
                self.violations += 1
                return

    def _running(self, q: _Queue) -> list[RunningJob]:
        jobs, exp_end, alloc, start = self.jobs, self.exp_end, self.alloc, self.seg_start
        return [RunningJob(jobs[r], start[r], exp_end[r], alloc[r]) for r in q.running]

    def _schedule(self, qi: int) -> None:
        """One admission pass of partition ``qi`` (the core's cycle), then book its decisions."""
        q = self.queues[qi]
        if not len(q):
            return
        jobs = self.jobs
        if q.preemptive:
            self._sync_progress(q)
        waiting = (jobs[e[-1]] for e in q.items) if q.static else (jobs[i] for i in q.waiting)
        held = q.carry.reservation  # the head that held the reservation before this pass
        cohort = [
            CohortMember(
                self.queues[j].rt.partition,
                lambda m=self.queues[j]: self._running(m),  # type: ignore[misc]
                held=self.part_held[j],
                waiting_gpus=self.queues[j].gpu_hist,
            )
            for j in self.mates[qi]
        ]
        res = admit(
            q.rt,
            waiting,
            lambda: self._running(q),
            self.cluster,
            self.now,
            carry=q.carry,
            estimate=self._estimate,
            presorted=q.static,
            queue_len=len(q),
            explain=False,
            book=True,
            first=q.first,
            cohort=cohort,
        )
        q.carry = res.carry
        if self.now < res.revisit_at < math.inf and not self.now < q.revisit <= res.revisit_at:
            q.revisit = res.revisit_at  # (one pending before it: its pass asks again)
            self.seq += 1
            heapq.heappush(self.events, (res.revisit_at, EV_REVISIT, self.seq, qi, 0))
        idx = self._idx_of
        if res.starts or res.preemptions:
            # what its members hold and still ask changed their caps (a start can leave a waiting job
            # larger than its member's unused share: that share is lent now): their passes at this
            # instant again, as the operator's next pass makes them
            self.redo.update(j for j in self.mates[qi] if len(self.queues[j]))
        if res.preemptions or res.unstarted:
            # and its own: a job stopped because its GPUs went to another may start on others now (the
            # pass took it as running; the operator's next pass sees it waiting), and one whose start
            # was taken back is the blocked head it now is (its reservation is made at this instant)
            self.redo.add(qi)
        for pr in res.preemptions:
            # a booking pass released them on the books already (a cohort's reclaim)
            self._stop(idx[pr.job.id], finished=False, released=res.booked)
            if pr.cause:
                self._count_preemption(qi, pr.job, pr.cause)
        for st in res.starts:
            i = idx[st.job.id]
            self._dequeue(i, q)
            if st.backfilled:
                self.backfilled[i] = True
            self._start(i, st.allocation, q, res.booked)
        r = res.carry.reservation
        if held is not None and (r is None or r.job_id != held.job_id) and self.state[idx[held.job_id]] == WAITING:
            # no longer the head, the policy put another ahead of it (SJF's shorter newcomer, blocked too):
            # its promise is void, and what delays it from here on is no backfill's doing
            p = idx[held.job_id]
            self.res_latest[p] = self.res_start[p] = math.nan
            self.res_backfilled.pop(p, None)
        if r is not None:
            h = idx[r.job_id]
            if self.reservation[h] != self.reservation[h] and math.isfinite(r.start):
                self.reservation[h] = r.start
            if (self.res_start[h] != self.res_start[h] or r.latest != self.res_latest[h]) and math.isfinite(r.start):
                self.res_start[h] = r.start  # a reservation made (anew: a policy overtook it): its promise
            self.res_latest[h] = r.latest
            if r.backfilled:
                self.res_backfilled[h] = r.backfilled
            else:  # (none yet, or none since it was reserved anew)
                self.res_backfilled.pop(h, None)

    def _count_preemption(self, qi: int, job: Job, cause: str) -> None:
        """A cohort pass of queue ``qi`` stopped ``job``: its queue gets a pass at this instant too, and
        the summary's partition figures count it."""
        vq = self.vc_index[job.vc]
        if vq != qi:
            self.redo.add(vq)
        stats = self.part_stats
        if cause == RECLAIM:
            if self.vc_names[qi] in stats:
                stats[self.vc_names[qi]]["reclaims"] += 1
            if job.vc in stats:
                stats[job.vc]["reclaimed_jobs"] += 1
        elif cause == LOWER_PRIORITY and job.vc in stats:
            stats[job.vc]["priority_preemptions"] += 1

    def _place_now(self, i: int, books: ClusterState | None = None) -> Allocation | None:
        """Room for waiting job ``i`` now (on ``books``, else the cluster), by its partition's placer
        (external deciders, fidelity, a migration's trial)."""
        q = self.queues[self.vc_index[self.jobs[i].vc]]
        return q.rt.placer.place(self._request(i), self.cluster if books is None else books)

    # ---- migration (AnalySIM §3.1) -----------------------------------------------------------
    def _migrate(self, qi: int) -> None:
        """After a completion: try to empty the least-used partially used node of this partition by moving
        its (single-node) jobs with best fit onto other nodes in use, so one node fewer is used (§3.1: "if the
        migration can improve the overall node utilization"); nothing moves unless all of them can."""
        cl = self.cluster
        part = (cl.vc_id == qi) & (cl.free_gpus > 0) & (cl.free_gpus < cl.gpu_cap)
        nodes = [int(n) for n in np.flatnonzero(part) if self.node_jobs[n] and n not in self.cordons]
        if len(nodes) < 2:
            return
        target = min(nodes, key=lambda n: (int(cl.gpu_cap[n] - cl.free_gpus[n]), n))
        movers = sorted(self.node_jobs[target])
        if movers[0] < 0:  # an inference replica runs there (negative keys): it is not moved
            return
        if any(self.alloc[i] is None or len(self.alloc[i].grants) != 1 for i in movers):  # type: ignore[union-attr]
            return
        if any(self.seg_start[i] > self.now for i in movers):  # a failed run's gang waits out its back-off there
            return
        if any(self.stalled[i] == self.stalled[i] for i in movers):  # stalled on a lost node elsewhere
            return
        # onto nodes already in use (a job moved onto an idle node frees none), away from the nodes a blocked
        # head is reserved on (a move's overhead there would delay its start; 004 §VI-B) unless the move
        # lets this partition's head start now
        idle = [target, *(n for n, on in enumerate(self.node_jobs) if not on)]
        reserved: dict[int, set[str]] = {}  # node -> the heads reserved on it (a cohort's nodes are shared)
        for q in self.queues:
            r = q.carry.reservation
            if r is not None and r.allocation is not None:
                for n in r.allocation.nodes:
                    reserved.setdefault(n, set()).add(r.job_id)
        new = self._moves(movers, [*idle, *reserved])
        if new is None and reserved:
            new = self._moves(movers, idle)
            if new is not None and not self._head_starts_now(qi, reserved, movers, new):
                return
        if new is None:
            return
        for i in movers:  # stop and restart on the new nodes, paying the overhead (a cohort's: any member's)
            q = self.queues[self.vc_index[self.jobs[i].vc]]
            self._stop(i, finished=False)
            self._dequeue(i, q)
            self.migrations += 1
            self._start(i, new[i], q)

    def _moves(self, movers: list[int], closed: list[int]) -> dict[int, Allocation] | None:
        """Best-fit places for all of ``movers`` outside the ``closed`` nodes, or None."""
        trial = self.cluster.copy()
        for books in (trial.free_gpus, trial.gpu_free_milli, trial.free_cpu, trial.free_mem):
            books[closed] = 0
        shut = set(closed)
        bestfit = get_placer("best-fit")
        new: dict[int, Allocation] = {}
        for i in movers:
            a = bestfit.place(self._request(i), trial)
            if a is None or not shut.isdisjoint(a.nodes):  # (a CPU job on a node with untracked CPU)
                return None
            trial.allocate(a)
            new[i] = a
        return new

    def _head_starts_now(
        self, qi: int, reserved: dict[int, set[str]], movers: list[int], new: dict[int, Allocation]
    ) -> bool:
        """Whether moving ``movers`` to ``new`` (onto ``reserved`` nodes: node -> the head reserved there)
        touches no head's nodes but those of partition ``qi``'s head, and that head fits at once after it
        (it then starts in this instant's pass). SODA's arrays place a head otherwise: never assumed."""
        heads = {h for a in new.values() for n in a.nodes for h in reserved.get(n, ())}
        if not heads:
            return True
        own = self.queues[qi].carry.reservation
        if own is None or heads != {own.job_id} or self.queues[qi].policy.arrays:
            return False
        h = self._idx_of[own.job_id]
        if self.state[h] != WAITING:
            return False
        trial = self.cluster.copy()
        for i in movers:
            trial.release(self.alloc[i])  # type: ignore[arg-type]
            trial.allocate(new[i])
        return self._place_now(h, trial) is not None

    # ---- node outages (``SimConfig.outages``) ----------------------------------------------------
    def _next_outage(self, k: int, after: float) -> None:
        """Node ``k``'s first outage beginning after ``after`` as an event (the models count their times
        from the first submission, as the services' timelines do)."""
        outages = self.cfg.outages
        assert outages is not None
        got = outages.next_outage(self.cluster.nodes[k].name, after - self.out_origin)
        if got is not None:  # (down, up[, drain]): a model of one's own may answer a plain pair
            self.up_at[k] = self.out_origin + got[1]
            self.drain_next[k] = len(got) > 2 and bool(got[2])
            self._push_node(self.out_origin + got[0], k, up=False)

    def _push_node(self, t: float, k: int, up: bool) -> None:
        self.seq += 1
        self.ups_pending += up
        heapq.heappush(self.node_events, (t, 0 if up else 1, self.seq, k))

    def _stall(self, i: int) -> None:
        """Running job ``i`` has a node that is down: its gang stalls from now (its end and failures will not
        come; its turns still end, as the operator's view of a gang holding its GPUs counts them) and goes
        back to its queue when the first of its nodes down now has been down for ``node_lost_seconds``
        (``node_lost_at``, as the operator's NodeLost reads the nodes' Ready conditions), or ends then if
        it is deleted before."""
        alloc = self.alloc[i]
        assert alloc is not None
        if self.stalled[i] != self.stalled[i]:
            self.stalled[i] = self.now
        at = self._lost_at(i)
        if at <= self.now:  # (no grace: before this instant's passes, as the operator's lifecycle goes first)
            self._lose(i)
        else:
            self._push(at, EV_LOST, i)

    def _lost_at(self, i: int) -> float:
        """When stalled job ``i`` is lost: its deletion, or the first of its nodes down now down its grace
        (inf: neither)."""
        alloc = self.alloc[i]
        assert alloc is not None
        downs = [self.down_since[g.node] for g in alloc.grants if g.node in self.cordons and g.node not in self.drained]
        at = node_lost_at(min(downs), self.cfg.node_lost_seconds) if downs else math.inf
        wd = self.withdraw[i]
        return at if wd is None else min(at, wd)

    def _lose(self, i: int) -> None:
        """Stalled job ``i`` goes back to its queue (NodeLost), or ends if it was deleted meanwhile."""
        wd = self.withdraw[i]
        if wd is not None and wd <= self.now:  # deleted while it stalled: it ends as deleted while running
            self._stop(i, finished=True)
            self.done_now += 1
        else:
            self._stop(i, finished=False, node_lost=True)

    def _node_down(self, k: int, dirty: set[int]) -> None:
        """Node ``k`` goes down until ``up_at[k]``: each gang on it stalls (:meth:`_stall`), or, for a drain,
        goes back to its queue at once, its run kept as a preemption's (the operator requeues a DLJob whose
        pod was evicted, reason Disrupted; one backing off there, reason Disrupted too, with no pods to
        evict); its replicas are asked for again; what is free on it is booked (``_cordon``), as the
        operator books a node that is not Ready or is cordoned."""
        now, up = self.now, self.up_at[k]
        self.down_since[k] = now
        self.outages += 1
        self.cordons[k] = []
        if up < math.inf:
            self._push_node(up, k, up=True)
        drain = self.drain_next[k]
        if drain:  # cordoned and its gangs evicted: each back to its queue (the operator's Disrupted)
            self.drained.add(k)
            self.drains += 1
        for i in sorted(self.node_jobs[k]):
            if i < 0:  # (an inference replica: below)
                continue
            if drain:  # its run kept as a preemption's (its pods had their grace), or to its stall
                self._stop(i, finished=False)
                self.drain_requeues += 1
            else:
                self._stall(i)
        for s, lives in enumerate(self.svc_live):
            for mode, live in lives.items():
                for r in [r for r in live if r.alloc is not None and any(g.node == k for g in r.alloc.grants)]:
                    self._release_replica(r, dirty)
                    live.remove(r)
                    self.svc_serial += 1
                    r.rep = self.services[s].replica(mode, self.svc_serial, now)
                    live.append(r)  # pending: among the newest, which fewer replicas release first
                    self.svc_pending.append(r)
                    self.svc_stats[s]["replicas_lost"] += 1
        self._cordon(k)
        dirty.update(range(len(self.queues)))  # an event of every partition, as the operator reads it

    def _node_up(self, k: int, dirty: set[int]) -> None:
        """Node ``k`` is back before its gangs' grace ran out: the machine restarted, so their pods there
        failed, and each gang restarts as after a failure (``_fail``: back-off, backoff limit; stalled
        again at once if another of its nodes is still down), unless another of its nodes has been down
        its grace by now (NodeLost: the operator's lifecycle asks that first). Its booked free space is
        released and every partition passes again."""
        for booked in self.cordons.pop(k):
            self.cluster.release(booked)
        self.cluster.set_usable(k, True)
        self.down_gpu_s += (self.now - self.down_since[k]) * int(self.cluster.gpu_cap[k])
        self.down_since[k], self.up_at[k] = math.nan, math.inf
        self.drained.discard(k)
        self._next_outage(k, self.now)
        for i in sorted(self.node_jobs[k]):
            if i < 0 or self.state[i] != RUNNING or self.stalled[i] != self.stalled[i]:
                continue
            alloc = self.alloc[i]
            assert alloc is not None
            others = any(g.node in self.cordons for g in alloc.grants)
            if self._lost_at(i) <= self.now:  # another node of it down its grace by now
                self._lose(i)
            elif self.seg_start[i] > self.now:  # backing off after a failure: it had no pods there to fail
                if others:
                    self._stall(i)  # (its grace now from the nodes still down)
                else:
                    self.stalled[i] = math.nan
            else:
                self._fail(i)
                if self.state[i] == FAILED:
                    self.done_now += 1
                elif others:
                    self._stall(i)
        dirty.update(range(len(self.queues)))

    def _cordon(self, k: int) -> None:
        """Book what is free on down node ``k`` (a stalled gang or replica released there, say)."""
        alloc = self.cluster.book_free(k)
        if alloc is not None:
            self.cordons[k].append(alloc)

    # ---- inference services (seed 002 §V-D2) -------------------------------------------------
    def _check_services(self) -> None:
        """Refuse, before running, a service whose replica no node could ever host (it would wait for
        ever, retried at every instant): the core's own verdict on the empty cluster."""
        for tl in self.services:
            for mode in tl.modes():
                out = place_services([tl.replica(mode, 0, 0.0)], [], self.cluster.copy())
                if out.unplaced:
                    why = out.unplaced[0][1]
                    raise InvalidInput(
                        "services", tl.name, f"its {mode.upper()} replica never fits this cluster: {why}"
                    )

    def _push_services(self, origin: float) -> None:
        """Each timeline's first point as an event (times count from ``origin``, the first submission);
        a point pushes the next when it applies, so the heap holds one per service."""
        self.svc_origin = origin
        for s in range(len(self.services)):
            self._push_point(s, 0)

    def _push_point(self, s: int, k: int) -> None:
        self.seq += 1
        t = self.svc_origin + self.services[s].points[k][0]
        heapq.heappush(self.events, (t, EV_SERVICE, self.seq, s, k))

    def _scale_service(self, s: int, k: int, dirty: set[int]) -> None:
        """Service ``s`` asks for its ``k``-th point's replica counts. New replicas wait to be placed
        (before this instant's passes); fewer releases the newest (pending ones first)."""
        tl = self.services[s]
        _, gpu, cpu = tl.points[k]
        for mode, n in ((GPU, gpu), (CPU, cpu)):
            live = self.svc_live[s][mode]
            while len(live) < n:
                self.svc_serial += 1
                r = _Replica(~self.svc_serial, s, tl.replica(mode, self.svc_serial, self.now))
                live.append(r)
                self.svc_pending.append(r)
            # fewer: the newest go; a mode's pending replicas are its newest (the core places the oldest
            # first, and when one of identical requests fails, the later ones fail too)
            for r in live[n:]:
                self._release_replica(r, dirty)
            del live[n:]
        if k + 1 < len(tl.points):
            self._push_point(s, k + 1)

    def _place_replicas(self, dirty: set[int]) -> None:
        """The pending replicas through the core's ``place_services`` (the operator's call): placed on
        the engine's books, preempting the last-submitted training or CPU job where resources lack.
        A victim stops as any preempted job (progress kept, overhead on resume) and waits at the head
        of its queue until it starts again; what stays unplaced is retried at the next instant."""
        cl, now, pending = self.cluster, self.now, self.svc_pending
        running = [r for q in self.queues if q.running for r in self._running(q)]
        used0, books0 = self.used_gpus, cl.used_gpus
        out = place_services([r.rep for r in pending], running, cl)
        idx = self._idx_of
        for pr in out.preemptions:
            qi = self.vc_index[pr.job.vc]
            self._stop(idx[pr.job.id], finished=False, released=True)
            self.queues[qi].first.add(pr.job.id)
            dirty.add(qi)
        self.svc_preemptions += len(out.preemptions)
        placed = {rep.id: alloc for rep, alloc in out.placed}
        for r in pending:
            alloc = placed.get(r.rep.id)
            if alloc is not None:
                r.alloc, r.placed = alloc, now
                st = self.svc_stats[r.service]
                st["pending_replica_seconds"] += now - r.rep.since
                st["replicas_placed"] += 1
                self._hold_replica(r, +1)
        if placed:
            pending[:] = [r for r in pending if r.alloc is None]
        # used GPUs from the books' own change: a shared GPU a victim left may be a replica's now
        self.used_gpus = used0 + cl.used_gpus - books0

    def _release_replica(self, r: _Replica, dirty: set[int]) -> None:
        if r.alloc is None:
            self.svc_pending.remove(r)
            self.svc_stats[r.service]["pending_replica_seconds"] += self.now - r.rep.since
            return
        self.cluster.release(r.alloc)
        dirty.update(self.node_vcidx[g.node] for g in r.alloc.grants)
        self._hold_replica(r, -1)
        r.alloc = None

    def _hold_replica(self, r: _Replica, sign: int) -> None:
        """A placed replica on the engine's counters (the books are the core's or ``_release_replica``'s);
        on release (``sign`` -1) its held time goes to the service's figures."""
        alloc = r.alloc
        assert alloc is not None
        node_jobs = self.node_jobs
        for g in alloc.grants:
            nj = node_jobs[g.node]
            if sign > 0:
                if not nj:
                    self.used_nodes += 1
                nj.add(r.key)
            else:
                nj.discard(r.key)
                if not nj:
                    self.used_nodes -= 1
            self.used_gpus += sign * len(g.gpu_ids)  # whole GPUs
        if sign < 0:
            self._account_replica(r)

    def _account_replica(self, r: _Replica) -> None:
        """Held time of a placed replica, up to now, into its service's figures and the segments."""
        alloc, now = r.alloc, self.now
        assert alloc is not None
        held = now - r.placed
        st = self.svc_stats[r.service]
        st["gpu_seconds"] += held * alloc.gpus
        st["cpu_core_seconds"] += held * r.rep.cpu_milli / 1000.0
        self.svc_segments.extend((r.service, g.node, r.placed, now, len(g.gpu_ids)) for g in alloc.grants)

    def _end_services(self) -> None:
        """The replay ends: replicas still held count up to its last instant, pending ones too."""
        for lives in self.svc_live:
            for live in lives.values():
                for r in live:
                    if r.alloc is not None:
                        self._account_replica(r)
        for r in self.svc_pending:
            st = self.svc_stats[r.service]
            st["pending_replica_seconds"] += self.now - r.rep.since
            st["replicas_pending_at_end"] += 1

    # ---- main loop ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        # The loop makes millions of short-lived acyclic objects (passes, allocations, events); the cyclic
        # collector would keep walking them (about a tenth of the run). Reference counting frees them.
        with paused_gc():
            for _ in self.loop():
                pass
        return self.result

    def loop(self) -> Iterator[float]:
        """The event loop as a generator. With ``external=True`` it yields at each instant where
        jobs wait instead of calling the policy (the gym environment decides); else never yields."""
        t_wall = time.perf_counter()
        self._admissible()
        jobs = self.jobs
        self._idx_of = {j.id: i for i, j in enumerate(jobs)}
        if len(self._idx_of) != len(jobs):
            raise InvalidInput("trace", "job ids", "job ids must be unique")
        order = [i for i in self.order if self.state[i] != REJECTED]
        rec_start = self.trace.recorded_start
        if self.recorded:
            for i in order:
                s = rec_start[i]
                if s is not None:
                    self._push(s, EV_RSTART, i)
                elif self.withdraw[i] is not None:
                    self._push(self.withdraw[i], EV_WITHDRAW, i)  # type: ignore[arg-type]
        if self.cfg.tick > 0 and order:
            self._push(jobs[order[0]].submit_time + self.cfg.tick, EV_TICK, -1)
        if not self.recorded:
            for i in self.order:
                if self.state[i] == REJECTED and jobs[i].vc in self.vc_index:
                    self._push(jobs[i].submit_time, EV_SEEN, i)
                    wd = self.withdraw[i]
                    if wd is not None and wd > jobs[i].submit_time:  # its deletion too
                        self._push(wd, EV_SEEN, i)
        ev = self.events
        pos = 0
        n_order = len(order)
        dirty: set[int] = set()
        qidx = [self.vc_index.get(j.vc, 0) for j in jobs]
        last_t = jobs[order[0]].submit_time if order else 0.0
        if self.events:  # a rejected job's arrival (EV_SEEN) may come first
            last_t = min(last_t, self.events[0][0])
        done_count = 0
        prog_every = max(1, n_order // 200)
        next_report = 0  # report progress when done_count reaches it (not at every instant)
        migrate = self.cfg.migration
        recorded = self.recorded
        state, gen, queues = self.state, self.gen, self.queues
        svc_pending = self.svc_pending  # mutated in place, never rebound
        # services' and outages' times count from the trace's first submission (a job refused up front's too)
        first = jobs[self.order[0]].submit_time if self.order else 0.0
        self._push_services(first)
        node_ev = self.node_events
        if self.cfg.outages is not None:
            self.out_origin = first
            for k in range(len(self.cluster.nodes)):
                self._next_outage(k, -math.inf)
        predictions, supplied, withdraw = self.predictions, self.supplied, self.withdraw
        heappop = heapq.heappop
        n_arrivals = 0 if recorded else n_order  # recorded runs start jobs by their recorded-start events
        while True:
            t_arr = jobs[order[pos]].submit_time if pos < n_arrivals else math.inf
            t_ev = ev[0][0] if ev else math.inf
            t = t_arr if t_arr < t_ev else t_ev
            # a node's outage matters while anything else may happen, or when it brings a node back that
            # waiting jobs may need: else the replay is over (outages would go on for ever)
            if node_ev and (t < math.inf or svc_pending or (self.n_waiting and self.ups_pending)):
                t = min(t, node_ev[0][0])
            if t == math.inf:
                break
            # time-weighted fragmentation (used GPUs / used nodes, AnalySIM §4.2)
            if self.used_nodes:
                dt = t - last_t
                self.frag_integral += dt * self.used_gpus / self.used_nodes
                self.frag_time += dt
            self.job_time += (t - last_t) * (self.n_waiting + self.n_running)
            if self.tracked:
                self._borrowed_until(t - last_t)
            last_t = t
            self.now = t
            finished_q: set[int] | None = set() if migrate else None
            while node_ev and node_ev[0][0] == t and node_ev[0][1] == 0:  # nodes back
                k = heappop(node_ev)[3]
                self.ups_pending -= 1
                self._node_up(k, dirty)
            while ev and ev[0][0] == t:
                _, kind, _, i, g = heappop(ev)
                if kind >= EV_TICK:
                    if kind == EV_TICK:
                        dirty.update(range(len(self.queues)))
                        if pos < n_order or self.n_running or self.n_waiting:
                            self._push(t + self.cfg.tick, EV_TICK, -1)
                    elif kind == EV_SEEN:
                        dirty.add(qidx[i])
                    elif kind == EV_REVISIT:
                        dirty.add(i)
                        if self.queues[i].revisit == t:
                            self.queues[i].revisit = math.inf
                    else:  # service i's g-th timeline point
                        self._scale_service(i, g, dirty)
                    continue
                if g != gen[i] and kind != EV_RSTART and kind != EV_WITHDRAW:
                    continue
                qi = qidx[i]
                stalled = self.stalled[i] == self.stalled[i]  # (on a node that went down: it neither ends nor fails)
                if kind == EV_FINISH:
                    if state[i] != RUNNING or stalled:
                        continue
                    self._stop(i, finished=True)
                    done_count += 1
                    dirty.add(qi)
                    if finished_q is not None:
                        finished_q.add(qi)
                elif kind == EV_FAIL:  # a failure: restarted after its back-off, or failed for good
                    if state[i] != RUNNING or stalled:
                        continue
                    self._fail(i)
                    if state[i] == FAILED:
                        done_count += 1
                        if finished_q is not None:
                            finished_q.add(qi)
                    dirty.add(qi)  # its run left to do grew: the policy may order it otherwise now
                elif kind == EV_REQUEUE:  # a turn ended: back of its queue (MLFQ, RR, LAS)
                    if self.state[i] == RUNNING:
                        self._sync_progress(self.queues[qi])
                        jobs[i].enqueued = t
                        d = self.queues[qi].policy.requeue_after(jobs[i])
                        left = math.inf if stalled else self.seg_start[i] + self.seg_len[i] - t
                        if d is not None and 0 < d < left:
                            self._push(t + d, EV_REQUEUE, i)
                        dirty.add(qi)
                elif kind == EV_WITHDRAW:
                    if self.state[i] == WAITING:
                        self._dequeue(i, self.queues[qi])
                        self.queues[qi].first.discard(jobs[i].id)
                        self.state[i] = WITHDRAWN
                        self._forget_prediction(i)
                        done_count += 1
                        dirty.add(qi)  # a blocked head withdrawn lets the jobs behind it start now
                    elif self.state[i] == FUTURE and self.recorded:
                        self.state[i] = WITHDRAWN
                        done_count += 1
                elif kind == EV_LOST:  # its gang stalled on a node that went down: back to its queue
                    if state[i] != RUNNING or not stalled or self._lost_at(i) > t:
                        continue  # (its nodes came back meanwhile, or the one down now went later)
                    self._lose(i)
                    dirty.add(qi)
                elif kind == EV_RSTART:
                    self._recorded_start(i)
            while node_ev and node_ev[0][0] == t:  # nodes down (one back at this instant came first)
                self._node_down(heappop(node_ev)[3], dirty)
            for k in self.cordons:  # what was released on a down node this instant: booked too
                self._cordon(k)
            done_count += self.done_now
            self.done_now = 0
            while pos < n_arrivals and jobs[order[pos]].submit_time == t:
                i = order[pos]
                pos += 1
                qi = qidx[i]
                if predictions is not None and not supplied[i]:
                    jobs[i].predicted_duration = p = predictions.predict(jobs[i], t)
                    if p is None:
                        self.unpredicted.add(i)
                state[i] = WAITING
                self.n_waiting += 1
                self._enqueue(i, queues[qi])
                if withdraw[i] is not None:
                    self._push(withdraw[i], EV_WITHDRAW, i)  # type: ignore[arg-type]
                dirty.add(qi)
            if self.observed:
                self.observed = False
                if self.unpredicted:
                    self._ask_again(t, dirty)
            if finished_q:
                for qi in finished_q:
                    self._migrate(qi)
            if svc_pending:  # SODA admits a service's replicas before the training queues
                self._place_replicas(dirty)
            if self.external:
                if self.n_waiting:
                    yield t
            elif not recorded:
                if self.may_preempt:  # a cohort shares nodes and shares: what frees one member's may start another's
                    dirty.update([j for qi in dirty for j in self.mates[qi]])
                for qi in sorted(dirty) if len(dirty) > 1 else dirty:
                    self._schedule(qi)
                # bounded: each round follows a preemption, by another queue's pass or by its own (SODA:
                # a reclaimed borrower's array reclaims in turn, a chain as long as its arrays)
                rounds = len(self.queues) + SAME_INSTANT_ROUNDS
                while self.redo and rounds:
                    todo = sorted(self.redo)
                    self.redo.clear()
                    rounds -= 1
                    for qi in todo:
                        self._schedule(qi)
                self.redo.clear()
            dirty.clear()
            self.sampler.add(t, self.used_gpus, self.used_nodes, self.n_waiting, self.n_running)
            if self.progress is not None and done_count >= next_report:
                self.progress(done_count, n_order)
                next_report = done_count + prog_every
        if self.progress is not None:
            self.progress(n_order, n_order)
        for i in range(self.n):
            if self.state[i] == WAITING:
                self.notes.append(f"job {jobs[i].id} never started (stuck in queue)")
                break
        self._end_services()
        for k, since in enumerate(self.down_since):  # nodes still down at the end
            if since == since:
                self.down_gpu_s += (self.now - since) * int(self.cluster.gpu_cap[k])
        self.result = SimResult(
            trace=self.trace,
            config=self.cfg,
            state=self.state,
            start=self.start,
            end=self.end,
            run_time=self.run_time,
            gpu_seconds=self.gpu_sec,
            nodes_used=self.nodes_used,
            preemptions=self.preempt,
            overhead_s=self.overhead,
            cross_switch=self.xswitch,
            shape=self.shape,
            reservation=self.reservation,
            backfilled=self.backfilled,
            segments=self.segments,
            samples=self.sampler.data,
            total_gpus=int(self.cluster.gpu_cap.sum()),
            node_names=[nd.name for nd in self.cluster.nodes],
            node_gpus=[nd.gpus for nd in self.cluster.nodes],
            node_vc=[nd.vc for nd in self.cluster.nodes],
            rejected_reasons=self.rejected,
            violations=self.violations,
            overcommitted=self.overcommitted,
            migrations=self.migrations,
            wall_s=time.perf_counter() - t_wall,
            frag_integral=self.frag_integral,
            frag_time=self.frag_time,
            notes=self.notes,
            services={tl.name: st for tl, st in zip(self.services, self.svc_stats, strict=True)},
            service_segments=self.svc_segments,
            service_preemptions=self.svc_preemptions,
            partitions={name: {"cohort": self.part_cohort[name], **st} for name, st in self.part_stats.items()},
            restarts=self.restarts,
            lost_s=self.lost,
            lost_gpu_seconds=self.lost_gpu_s,
            node_lost=self.node_lost,
            outages=self.outages,
            down_gpu_seconds=self.down_gpu_s,
            drains=self.drains,
            drain_requeues=self.drain_requeues,
        )

    def _borrowed_until(self, dt: float) -> None:
        """GPU-time borrowed by each partition of the file over the last ``dt`` seconds."""
        if dt <= 0:
            return
        held, stats, names = self.part_held, self.part_stats, self.vc_names
        for qi, nominal in self.tracked:
            over = held[qi] - nominal
            if over > 0:
                stats[names[qi]]["borrowed_gpu_hours"] += over * dt / 3600.0

    def waiting_jobs(self) -> list[int]:
        """Indices of waiting jobs, arrival order per partition (for external deciders)."""
        out: list[int] = []
        for q in self.queues:
            out += [e[-1] for e in q.items] if q.static else list(q.waiting)
        return out

    def try_start(self, i: int) -> bool:
        """Start waiting job ``i`` now if the placer finds room (external deciders, gym)."""
        if self.state[i] != WAITING:
            return False
        qi = self.vc_index[self.jobs[i].vc]
        q = self.queues[qi]
        alloc = self._place_now(i)
        if alloc is None:
            return False
        self._dequeue(i, q)
        self._start(i, alloc, q)
        return True

    def _recorded_start(self, i: int) -> None:
        """Fidelity mode: start at the recorded time on any nodes the placer finds, else unplaced."""
        q = self.queues[self.vc_index[self.jobs[i].vc]]
        self.state[i] = WAITING
        self.n_waiting += 1
        self._enqueue(i, q)
        self._dequeue(i, q)
        alloc = self._place_now(i)
        if alloc is None:
            self.overcommitted += 1
        end = self.trace.recorded_end[i]
        self._start(i, alloc, q)
        if end is not None:  # run exactly the recorded time
            self.gen[i] += 1
            self.seg_len[i] = end - self.now
            self._push(end, EV_FINISH, i)


def simulate(
    trace: Trace, config: SimConfig, modeldb: ModelDB | None = None, progress: Callable[[int, int], None] | None = None
) -> SimResult:
    return Simulator(trace, config, modeldb, progress).run()


__all__ = ["PLACEMENTS", "POLICIES", "SimConfig", "SimResult", "Simulator", "np", "simulate"]
