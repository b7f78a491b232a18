"""The admission cycle: one pass over a partition's queue — order, place, backfill, preempt — and why
every job left waiting waits. The simulator's event loop and the operator's reconcile loop both call
:func:`admit`; neither decides anything itself.

A partition is a VirtualCluster (AnalySIM §3.1 logical partition): its own queue, ordering policy,
placer, backfilling mode and GPU quota. The pass is pure: it reads the cluster state, the waiting and
running jobs and ``now``, and returns decisions; the caller books them (allocate, create pods, ...).
It never mutates the ClusterState it is given (projections use a copy) unless the caller asks it to
book its starts there (``book``: the simulator, which books them anyway).

Backfilling (seed 004 §VI-B) is node-aware: when the head cannot start, it gets a reservation on the
nodes it will actually get, found by releasing running jobs in order of their expected end on a copy
of the cluster and placing the head there. A later job may start now only if the head still starts
by its *latest start* = reservation + relax factor × the head's expected wait, fixed when the head
first blocks and carried between passes in :class:`Carry` (the operator persists it on the
VirtualCluster). EASY is a relax factor of 0; adaptive scales the factor with the queue length.

Cohorts (``Partition.cohort``, ``core.cohorts``): the members of a cohort place on the union of their
nodes, a member's running jobs hold at most its nominal share plus what it may borrow (cohorts'
cap_P), a lender's blocked head reclaims GPUs from borrowers and, with ``LowerPriority``, a blocked
head preempts lower-priority jobs of its own partition; the pass returns those stops as
:class:`Preemption` with their reason, for the caller to execute.

A job that can never start as the partition is (more GPUs than its quota, or share plus what it may
borrow, could ever give it; a request its nodes could not hold even empty, or that the partition's
placer never places on them empty) waits as ``inadmissible`` and decides nothing else: it neither
blocks its queue, takes the head's reservation, counts in the adaptive queue length, keeps GPUs in a
preemptive policy's order, asks for a reclaim nor keeps a cohort member's share from being lent, so
the operator decides as the simulator does when it rejects such a job up front.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
from qosmos.extender.core import genie
from qosmos.extender.core.backfill import MODES as BACKFILL_MODES
from qosmos.extender.core.backfill import relax_factor
from qosmos.extender.core.cluster import FULL, ClusterState
from qosmos.extender.core.cohorts import (
    CohortMember,
    PreemptionPolicy,
    check_members,
    cohort_cap,
    held_gpus,
    max_cap,
    nominal_of,
    quota_state,
    victim_order,
)
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.ordering import Decision, OrderContext, OrderingPolicy, get_policy, reshaped, soda_array
from qosmos.extender.core.placement import Placer, default_shape, get_placer, places_on_empty
from qosmos.extender.core.types import Allocation, Job, PlacementRequest, Shape, shape_text

# Why a job waits (WaitReason.code).
BEHIND = "behind-head"  # a blocked job ahead of it in a non-backfilling queue
NO_FIT = "no-fit"  # does not fit the free resources now
RESERVED = "reserved"  # would fit now, but would delay the head's reservation
BLOCKED = "policy"  # the policy holds it (Capacity share, ...)
QUOTA = "quota"  # the partition's GPU quota is used up
HEAD = "head"  # the blocked head itself, with a reservation
# never starts as the partition is: more GPUs than it may ever hold, or a request its nodes could not
# hold even empty (Kueue: inadmissible, "request > maximum capacity"). It blocks nobody and wakes no
# node: it waits for the partition (quota, nodes) to change.
INADMISSIBLE = "inadmissible"
NOT_NOW = "does not fit the free resources now"  # why a NO_FIT job (or an unreserved head) waits

T = TypeVar("T")
DEFAULT_ARRAY_SPLIT = 0.5  # SODA: the 4-GPU resource array's share when none is given
# Times closer than this are one instant to backfilling: the operator's times are epoch seconds (a double's
# step there is 2.4e-7 s) carried between passes in RFC 3339 microseconds; the simulator's are exact
SAME_INSTANT_S = 1e-6


def check_array_split(field: str, value: object) -> float:
    """SODA's array split as a fraction in [0, 1], or InvalidInput naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput(field, value, "must be a fraction in [0, 1]")
    return float(value)


@dataclass(frozen=True, slots=True)
class Partition:
    """A VirtualCluster as the core sees it.

    ``cohort``: the cohort whose members share their nodes (``core.cohorts``); ``gpu_quota`` is then
    its nominal share (``nominal_gpus``; None: the GPUs of its own nodes), ``borrowing_limit`` what it
    may hold beyond it (None: no limit) and ``lending_limit`` what of its unused share it lends at
    most (None: all). ``preemption``: who may preempt whom for its jobs. Without a cohort the limits
    stay None and ``gpu_quota`` caps what its running jobs hold, as before.
    """

    name: str
    policy: str = "fifo"
    placement: str = "consolidate"
    backfill: str = "none"
    relax_factor: float = 0.1
    gpu_quota: int | None = None  # GPUs its running jobs may hold in all; None = its nodes
    theta: float = genie.DEFAULT_THETA
    # SODA (policies with job arrays): the share of the partition's GPUs in the >=4-GPU resource
    # array, "derived from historical statistical information" (seed 002 §V-C)
    array_split: float = DEFAULT_ARRAY_SPLIT
    cohort: str | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)

    @property
    def nominal_gpus(self) -> int | None:
        """Its nominal GPU share in a cohort (the quota field; None: its own nodes' GPUs)."""
        return self.gpu_quota

    def __post_init__(self) -> None:
        get_policy(self.policy)
        get_placer(self.placement)
        if self.backfill not in BACKFILL_MODES:
            raise InvalidInput("backfill", self.backfill, f"expected one of {', '.join(BACKFILL_MODES)}")
        if not (math.isfinite(self.relax_factor) and self.relax_factor >= 0):
            raise InvalidInput("relax_factor", self.relax_factor, "must be a finite number >= 0")
        if self.gpu_quota is not None and self.gpu_quota < 0:
            raise InvalidInput("gpu_quota", self.gpu_quota, "must be >= 0")
        check_array_split("array_split", self.array_split)
        if self.cohort is not None and not (isinstance(self.cohort, str) and self.cohort):
            raise InvalidInput("cohort", self.cohort, "must be a non-empty name")
        for name in ("borrowing_limit", "lending_limit"):
            v = getattr(self, name)
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidInput(name, v, "must be an integer >= 0")
            if self.cohort is None:
                raise InvalidInput(name, v, "borrowing and lending need a cohort")
        if not isinstance(self.preemption, PreemptionPolicy):
            raise InvalidInput("preemption", self.preemption, "must be a PreemptionPolicy")
        if self.cohort is not None and get_policy(self.policy).arrays:
            raise InvalidInput(
                "cohort", self.cohort, f"{self.policy} splits the partition's own nodes into arrays; it takes no cohort"
            )


@dataclass(slots=True)
class RunningJob:
    """A running job as the pass sees it: when it is expected to end (predicted, user estimate or
    oracle, as the caller chooses) and what it holds."""

    job: Job
    start: float
    expected_end: float
    allocation: Allocation | None


@dataclass(slots=True)
class HeadReservation:
    """The blocked head's promised start (seed 004 §VI-B)."""

    job_id: str
    start: float  # projected start on the reserved nodes
    latest: float  # start + factor × expected wait, fixed when the head first blocked (or was overtaken)
    allocation: Allocation | None  # the nodes/GPUs it is projected to get (None: never, with what runs)
    backfilled: tuple[str, ...] = ()  # jobs started behind it while it held the reservation


@dataclass(slots=True)
class Carry:
    """What one pass hands the next for a partition (persist it to survive restarts)."""

    reservation: HeadReservation | None = None
    max_queue_len: int = 0


@dataclass(frozen=True, slots=True)
class Start:
    job: Job
    allocation: Allocation | None  # None only for a job that needs nothing (no GPU, CPU or memory)
    shape: Shape | None  # the GENIE ⟨d_node, d_gpn⟩ it was placed with, when the policy chose one
    backfilled: bool = False


# Preemption.cause of the stops a cohort pass decides (``core.cohorts``); "" for a policy's own
RECLAIM = "reclaim"  # a lender takes its share back from a borrower
LOWER_PRIORITY = "lower-priority"  # a higher-priority head of the same partition


@dataclass(frozen=True, slots=True)
class Preemption:
    job: Job
    reason: str
    cause: str = ""  # RECLAIM, LOWER_PRIORITY, or "" (a preemptive policy, SODA's arrays)


@dataclass(frozen=True, slots=True)
class WaitReason:
    """Why a job is still waiting after the pass, structured and as one readable line."""

    job: Job
    code: str
    message: str
    position: int  # 0-based position in the policy's order
    needs: str = ""
    blocking: str = ""  # the job or rule that blocks it
    waiting_allowance: float | None = None  # GENIE Eq. 13, for SWAF-ordered jobs


@dataclass(slots=True)
class AdmissionResult:
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: list[WaitReason] = field(default_factory=list)
    carry: Carry = field(default_factory=Carry)
    order: list[str] = field(default_factory=list)  # job ids in policy order (explain only)
    booked: bool = False  # the starts are booked on the caller's ClusterState (admit's ``book``)
    # starts this pass took back for a higher-priority head (LowerPriority): the jobs wait again, and a
    # pass at the same instant sees them as the blocked heads they now are (the operator's next pass)
    unstarted: list[str] = field(default_factory=list)
    # when a job left waiting gets another decision from its policy (SWAF: a waiting allowance runs
    # out, ``Decision.choice_until``): the partition is due a pass then though nothing else happens
    revisit_at: float = math.inf


class FitMemo:
    """Remembers, per partition, placement refusals until the partition releases something.

    Allocations only shrink free space, so a plain whole-GPU request refused since the last release
    is refused again; single-node requests are monotone in the GPU count (no node with g free means
    none with g' > g), multi-node ones are remembered exactly. A pure speed-up: dropping it changes
    no decision.
    """

    __slots__ = ("exact", "release", "smallest")

    def __init__(self) -> None:
        self.release: tuple[int, int] = (-1, -1)  # (the books' lineage, their release counter)
        self.smallest = 1 << 62
        self.exact: set[int] = set()

    @staticmethod
    def plain(job: Job) -> bool:
        return (
            job.gpu_milli == 1000
            and job.gpus > 0
            and not job.cpu_milli
            and not job.memory_mib
            and not job.gpu_models
            and not job.nodes
        )

    def _sync(self, cluster: ClusterState, vc: int | tuple[int, ...]) -> None:
        # a cohort places on its members' nodes: a release on any of them counts (the counters only grow)
        n = int(cluster.vc_releases[vc]) if isinstance(vc, int) else int(sum(cluster.vc_releases[v] for v in vc))
        rel = (cluster.lineage, n)
        if rel != self.release:
            self.release, self.smallest, self.exact = rel, 1 << 62, set()

    def refused(self, job: Job, cluster: ClusterState, vc: int | tuple[int, ...], biggest: int) -> bool:
        self._sync(cluster, vc)
        g = job.gpus
        return (self.smallest <= g <= biggest) or g in self.exact

    def note(self, job: Job, cluster: ClusterState, vc: int | tuple[int, ...], biggest: int) -> None:
        self._sync(cluster, vc)
        if job.gpus <= biggest:
            self.smallest = min(self.smallest, job.gpus)
        else:
            self.exact.add(job.gpus)


def _any(r: RunningJob) -> bool:
    """Every candidate may be taken (``_Pass._room``)."""
    return True


class PartitionRuntime:
    """A partition's policy, placer and caches (GENIE tables, fit memo): what the caller keeps per
    partition between passes. Losing it changes no decision, only speed."""

    def __init__(self, partition: Partition, ctx: OrderContext | None = None) -> None:
        self.partition = partition
        self.policy: OrderingPolicy = get_policy(partition.policy)
        self.placer: Placer = get_placer(partition.placement)
        self.ctx = ctx or OrderContext(theta=partition.theta)
        self.memo = FitMemo()
        self.pool_memos: dict[str, FitMemo] = {}  # the same per SODA array (node pool name)
        self.pools: dict[str, str] = {}  # SODA job array -> node pool name (set per cluster)
        self._pools_of: dict[str, np.ndarray] | None = None

    def array_pools(self, cluster: ClusterState) -> dict[str, str]:
        """SODA's resource arrays as node pools on ``cluster`` (defined once per cluster). Known by the
        cluster's pools themselves, held, and by their names there: the operator builds a cluster every
        pass, and a freed pools dict's id may come back as the next one's."""
        pools = cluster.pools
        if self._pools_of is not pools or any(name not in pools for name in self.pools.values()):
            self.pools = soda_pools(self.partition, cluster)
            self._pools_of = pools
        return self.pools


SODA_ARRAYS = ("cpu", "gpu-1", "gpu-4")
# Where each job array may run, own resource array first (seed 002 §V-C, Fig. 11): CPU jobs borrow
# the cores reserved on GPU nodes; the 1-GPU and 4-GPU arrays overflow into each other.
SODA_LENDERS = {"cpu": ("cpu", "gpu-1", "gpu-4"), "gpu-1": ("gpu-1", "gpu-4"), "gpu-4": ("gpu-4", "gpu-1")}


def soda_pools(partition: Partition, cluster: ClusterState) -> dict[str, str]:
    """Split the partition's nodes into SODA's resource arrays (seed 002 §V-C, Fig. 11): GPU-less
    nodes for CPU jobs; GPU nodes between the 1-GPU and the 4-GPU array, the largest nodes to the
    4-GPU array until it holds ``array_split`` of the GPUs (both non-empty given two GPU nodes and
    a split strictly between 0 and 1). Defined on the cluster as node pools ``<partition>/<array>``."""
    mine = cluster.eligible(partition.name)
    cap = cluster.gpu_cap
    gpu_nodes = np.flatnonzero(mine & (cap > 0))
    ranked = gpu_nodes[np.argsort(-cap[gpu_nodes], kind="stable")]
    want = partition.array_split * float(cap[gpu_nodes].sum())
    four = np.zeros(len(cluster.nodes), dtype=bool)
    held = 0
    for n in ranked:
        if held >= want:
            break
        four[n] = True
        held += int(cap[n])
    if 0 < partition.array_split < 1 and len(ranked) > 1:
        if four[ranked].all():
            four[ranked[-1]] = False
        if not four[ranked].any():
            four[ranked[0]] = True
    one = mine & (cap > 0) & ~four
    names = {a: f"{partition.name}/{a}" for a in SODA_ARRAYS}
    cluster.define_pool(names["cpu"], mine & (cap == 0))
    cluster.define_pool(names["gpu-1"], one)
    cluster.define_pool(names["gpu-4"], four)
    return names


# Expected run seconds of a job if started now on ``allocation`` (backfilling's estimate).
Estimate = Callable[[Job, Allocation | None], float]


def _request(job: Job, shape: Shape | None) -> PlacementRequest:
    return PlacementRequest.for_job(job, shape)


def _request_key(job: Job, shape: Shape | None) -> tuple[Any, ...]:
    """What placing ``job`` as ``shape`` depends on besides the nodes (a pass's memo key)."""
    return (job.vc, job.gpus, job.gpu_models, job.gpu_milli, job.cpu_milli, job.memory_mib, job.nodes, job.pool, shape)


def _needs(job: Job, shape: Shape | None) -> str:
    if job.gpus == 0:
        return f"{job.cpu_milli}m CPU"
    if job.gpu_milli < 1000:
        return f"{job.gpu_milli / 1000:g} of a GPU"
    what = shape_text(shape) if shape is not None else f"{job.gpus} GPUs"
    if shape is not None and shape == job.fixed_shape:
        what += " (fixed)"
    if job.gpu_models:
        what += " of " + "|".join(job.gpu_models)
    return what


def _free_text(cluster: ClusterState, job: Job, shape: Shape | None) -> str:
    """What is free where, for a waiting job's message."""
    free = int(sum(cluster.vc_free[v] for v in cluster.vc_group(job.vc)))
    if job.gpus == 0 or job.gpu_milli < 1000:
        return f"{free} whole GPUs free in {job.vc}"
    per = shape.d_gpn if shape is not None else min(job.gpus, max(cluster.biggest_node(job.vc, job.gpu_models), 1))
    req = _request(job, shape)
    nodes = int(cluster.fit_mask(req, per, req.gpus).sum())
    return f"{free} GPUs free in {job.vc}; {nodes} node(s) have {per} free"


def _most_held(part: Partition, nominal: int | None, ceiling: int) -> str:
    """What makes up a cohort member's ceiling, for a waiting message."""
    if part.borrowing_limit is not None and ceiling == (nominal or 0) + part.borrowing_limit:
        return f"its nominal share of {nominal} plus its borrowing limit of {part.borrowing_limit}"
    return f"its nominal share of {nominal} plus all that cohort {part.cohort} could lend it"


class _Pass:
    """State of one admission pass (kept off the public function for readability)."""

    def __init__(
        self,
        rt: PartitionRuntime,
        cluster: ClusterState,
        now: float,
        running: Sequence[RunningJob] | Callable[[], Sequence[RunningJob]],
        estimate: Estimate | None,
        carry: Carry,
        queue_len: int,
        explain: bool,
        book: bool = False,
        members: Sequence[CohortMember] = (),
    ) -> None:
        self.rt = rt
        self.part = rt.partition
        self.cluster = cluster
        self.now = now
        self._running = running
        self._running_list: Sequence[RunningJob] | None = None
        self.estimate = estimate
        self.explain = explain
        self.result = AdmissionResult(carry=Carry(carry.reservation, carry.max_queue_len))
        self.count_queue(queue_len)
        self.backfill = self.part.backfill != "none"
        self.vc = cluster.vc_index(self.part.name)
        # the VCs whose nodes its jobs may use (the fit memo's key): its own, or its cohort's
        self.group: int | tuple[int, ...] = self.vc
        self.has_nodes = self.vc >= 0
        self.members = members
        self.nominal = self.part.gpu_quota
        if self.part.cohort is not None:
            g = cluster.vc_group(self.part.name)
            self.group = g[0] if len(g) == 1 else g
            self.has_nodes = bool(g)
            self.nominal = nominal_of(self.part, cluster)
        self.biggest = cluster.biggest_node(self.part.name) if self.has_nodes else 0
        self.held = -1  # GPUs held by the partition's running jobs (computed on demand, for quotas)
        self._cap: int | None = None
        self._cap_known = False
        self._never: dict[tuple[Any, ...], str | None] = {}
        self._spans: dict[tuple[Any, ...], bool] = {}
        self._lent: dict[str, list[RunningJob]] = {}  # SODA array -> running jobs of others on its nodes
        self._pools: dict[str, str] | None = None
        self.head_queue: str | None = None  # the sub-queue (SODA: job array) of the head reserved in this pass
        pre = self.part.preemption
        # whether a blocked head may preempt (cohort reclaim, lower-priority jobs of its own)
        self.may_preempt = (self.part.cohort is not None and pre.reclaim_within_cohort == "Any") or (
            pre.within_partition == "LowerPriority"
        )
        self.tracks_held = self.part.gpu_quota is not None or self.part.cohort is not None or self.may_preempt
        self.started: list[tuple[Job, Allocation | None, float]] = []  # (job, allocation, expected end)
        # the cluster with this pass's starts booked: a copy made at the first start, or with ``book``
        # the caller's own (so a caller that books the starts anyway copies and books nothing twice)
        self.scratch: ClusterState | None = cluster if book else None
        self.result.booked = book
        self.reclaimed: set[str] = set()  # running jobs this pass preempts to reclaim lent resources
        # starts this pass took back, for ``undo``: (its ``started`` entry and index, its Start and index)
        self.taken_back: list[tuple[tuple[Job, Allocation | None, float], int, Start, int]] = []
        # waiting messages' "what is free" per (books, request): a 500-job queue asks the same few
        self._free: dict[tuple[Any, ...], str] = {}

    def count_queue(self, queue_len: int) -> None:
        """The queue length adaptive relaxation reads (004 §VI-B (1)), and the longest seen."""
        self.queue_len = queue_len
        self.result.carry.max_queue_len = max(self.result.carry.max_queue_len, queue_len)

    # -- helpers -------------------------------------------------------------------------------
    def running(self) -> Sequence[RunningJob]:
        if self._running_list is None:
            r = self._running
            self._running_list = r() if callable(r) else r
        return self._running_list

    def state(self) -> ClusterState:
        """The cluster with this pass's starts booked (a copy once the first job starts)."""
        return self.scratch if self.scratch is not None else self.cluster

    def _book(self, alloc: Allocation | None) -> None:
        if alloc is None:
            return
        if self.scratch is None:
            self.scratch = self.cluster.copy()
        self.scratch.allocate(alloc)

    def held_now(self) -> int:
        """GPUs the partition's running jobs hold, this pass's starts and preemptions included."""
        if self.held < 0:
            self.held = held_gpus(self.running())
        return self.held

    @cached_property
    def ceiling(self) -> int | None:
        """The most GPUs its running jobs could ever hold (``core.cohorts.max_cap``; without a cohort
        its quota); None: no cap. A job asking more waits for its quota to change, not for GPUs."""
        if self.part.cohort is None or self.nominal is None:
            return self.part.gpu_quota
        return max_cap(
            self.part, self.nominal, [(m.partition, nominal_of(m.partition, self.cluster)) for m in self.members]
        )

    def inadmissible(self, job: Job, shape: Shape | None = None) -> str | None:
        """Why the job can never start as the partition is (over its ceiling, or never fits its nodes);
        None when it could. Asked only of a job about to wait: such a job blocks nobody. A GENIE task
        whose policy chooses its shape is judged by the shape it was given (``shape``; none: it could)."""
        if reshaped(self.rt.policy, job):
            if shape is None:
                return None
            gpus, what = shape.gpus, f"its shape {shape_text(shape)}"
        else:
            shape, gpus = job.fixed_shape, job.gpus
            what = "its fixed shape" if shape is not None else "it"
        ceiling = self.ceiling
        if ceiling is not None and gpus > ceiling:  # Kueue's "request > maximum capacity"
            part = self.part
            limit = "its GPU quota" if part.cohort is None else _most_held(part, self.nominal, ceiling)
            why = f"asks {gpus} GPUs, more than the {ceiling} {part.name} may ever hold ({limit})"
            return f"{why}: it waits for its quota to change"
        never = self.never_fits(job, shape)
        if never is None:
            return None
        return f"{what} can never fit in {job.vc}: {never}"

    def could_start(self, job: Job) -> bool:
        """Whether some placement could ever hold the job (of this partition or a cohort member's)."""
        return self.never_fits(job) is None

    def never_fits(self, job: Job, shape: Shape | None = None) -> str | None:
        """Why no placement of the job fits even the partition's empty nodes (its fixed shape, or its
        GPUs in all); None when one could. Such a job neither blocks its queue, takes the head's
        reservation nor keeps a cohort member's share from being lent: it would hold them for ever (the
        simulator rejects it up front instead). ``shape``: the one it was given, else its fixed one."""
        shape = shape if shape is not None else job.fixed_shape
        key = _request_key(job, shape)
        if key not in self._never:  # a long queue asks the same few requests
            req = PlacementRequest.for_job(job, shape)
            why = self.cluster.could_ever_fit(req)
            # could_ever_fit is necessary only: the partition's placer may still never place it (a
            # first-fit gang of 2 x 2 for 3 GPUs whose CPU share no node holds twice); the simulator
            # rejects such a job up front, asking its placer on the empty cluster the same way
            if why is None and job.gpus and job.gpu_milli == FULL and not self.places_on_empty(job, req, shape):
                why = f"the {self.part.placement} placement finds it no room even on the empty nodes"
            self._never[key] = why
        return self._never[key]

    def places_on_empty(self, job: Job, req: PlacementRequest, shape: Shape | None = None) -> bool:
        """Whether the partition's placer finds the job (as ``req``, of ``shape``: else its fixed one) a
        placement on its nodes with nothing running (SODA: in one of its GPU arrays, or over the
        partition's GPU nodes together)."""
        if self._on_empty(req):
            return True
        return self.rt.policy.arrays and self._an_array_on_empty(job, shape if shape is not None else job.fixed_shape)

    def _on_empty(self, req: PlacementRequest) -> bool:
        return places_on_empty(self.rt.placer, req, self.cluster)

    def _an_array_on_empty(self, job: Job, shape: Shape | None) -> bool:
        """Whether the placer places the job in one of SODA's GPU arrays with nothing running."""
        pools = self.array_pools()
        return any(self._on_empty(PlacementRequest.for_job(job, shape, pool=pools[a])) for a in ("gpu-1", "gpu-4"))

    def cap(self) -> int | None:
        """GPUs its running jobs may hold in all: the quota, or in a cohort its nominal share plus what
        it may borrow now (``core.cohorts``' cap_P, fixed at the start of the pass); None: no cap."""
        if not self._cap_known:
            self._cap_known = True
            if self.part.cohort is None:
                self._cap = self.part.gpu_quota
            else:
                assert self.nominal is not None
                c = self.cluster
                others = [m.state(nominal_of(m.partition, c), self.could_start) for m in self.members]
                self._cap = cohort_cap(quota_state(self.part, self.nominal, self.held_now(), ()), others)
        return self._cap

    def quota_says(self, left: int) -> str:
        """A QUOTA wait's reason: the cap and what is left of it."""
        part = self.part
        what = (
            f"the partition's GPU quota of {part.gpu_quota}"
            if part.cohort is None
            else f"its nominal share of {self.nominal} GPUs plus what it may borrow in cohort {part.cohort}, {self.cap()},"
        )
        return f"{what} has {max(left, 0)} left"

    def quota_left(self) -> int | None:
        q = self.cap()
        if q is None:
            return None
        return q - self.held_now()

    def free_gpus(self, st: ClusterState) -> int:
        """Wholly free GPUs on the nodes its jobs may use."""
        g = self.group
        return int(st.vc_free[g]) if isinstance(g, int) else int(sum(st.vc_free[v] for v in g))

    def place(self, job: Job, shape: Shape | None) -> Allocation | None:
        """The partition placer's allocation now, or None (fit memo first for plain requests)."""
        if self.rt.policy.arrays:
            return self.place_arrays(job, shape)
        st = self.state()
        memo = self.rt.memo if shape is None and self.has_nodes and FitMemo.plain(job) else None
        if memo is not None and (job.gpus > self.free_gpus(st) or memo.refused(job, st, self.group, self.biggest)):
            return None
        alloc = self.rt.placer.place(_request(job, shape), st)
        if alloc is None and memo is not None:
            memo.note(job, st, self.group, self.biggest)
        return alloc

    # -- preemption for a blocked head (core.cohorts) ------------------------------------------
    def make_room(self, d: Decision, short: int) -> Allocation | None:
        """Room for the blocked head ``d`` by preemption, None when none is allowed or none helps:
        first reclaim from the cohort's borrowers (only within its nominal share: ``short``, the GPUs
        its cap lacks for it, is 0), then, with LowerPriority, its own lower-priority jobs. The victims
        are preempted (released on this pass's books, reported with their reason) and the head's
        allocation on the freed GPUs is returned, for the caller to start it."""
        job, pre, now = d.job, self.part.preemption, self.now
        if (
            self.part.cohort is not None
            and pre.reclaim_within_cohort == "Any"
            and short <= 0
            and job.gpus > 0
            and self.nominal is not None
            and self.held_now() + job.gpus <= self.nominal
        ):
            owner: dict[str, str] = {}
            borrowed: dict[str, int] = {}
            cands: list[RunningJob] = []
            for m in self.members:
                name = m.partition.name
                over = m.held_gpus() - nominal_of(m.partition, self.cluster)
                if over <= 0:
                    continue
                borrowed[name] = over
                for r in m.running_jobs():
                    if r.allocation is not None and r.allocation.gpus and r.job.id not in self.reclaimed:
                        owner[r.job.id] = name
                        cands.append(r)

            def still_borrows(r: RunningJob) -> bool:  # a member stops being a candidate once at its share
                name = owner[r.job.id]
                if borrowed[name] <= 0:
                    return False
                borrowed[name] -= r.allocation.gpus if r.allocation is not None else 0
                return True

            found = self._room(_request(job, d.shape), victim_order(cands, now), still_borrows, 0)
            if found is not None:
                alloc, victims = found
                for r in victims:
                    why = (
                        f"reclaimed by VC {self.part.name} for job {job.id}: {owner[r.job.id]} holds GPUs beyond "
                        f"its nominal share of cohort {self.part.cohort} and {self.part.name} needs its own share"
                    )
                    self._preempt(r, why, RECLAIM)
                return alloc
        if pre.within_partition == "LowerPriority":
            lower = [
                r
                for r in self.running()
                if r.job.priority < job.priority and r.allocation is not None and r.job.id not in self.reclaimed
            ]
            # and the lower-priority jobs this pass started ahead of it (no work lost: the first taken): else
            # the next pass would preempt what this one just started
            fresh = {
                j.id: RunningJob(j, now, e, a)
                for j, a, e in self.started
                if j.priority < job.priority and a is not None
            }
            found = self._room(
                _request(job, d.shape), victim_order([*lower, *fresh.values()], now, lowest_first=True), _any, short
            )
            if found is not None:
                alloc, victims = found
                for r in victims:
                    assert r.allocation is not None
                    self._hold(-r.allocation.gpus)
                    if r.job.id in fresh:
                        why = f"left for {job.id} of higher priority ({job.priority} > {r.job.priority}): the preemption is LowerPriority"
                        self._unstart(r, job, why)
                        continue
                    why = (
                        f"preempted in {self.part.name} for job {job.id} of higher priority "
                        f"({job.priority} > {r.job.priority}): its preemption is LowerPriority"
                    )
                    self._preempt(r, why, LOWER_PRIORITY)
                return alloc
        return None

    def _unstart(self, r: RunningJob, head: Job, why: str) -> None:
        """Take back this pass's start of ``r``: its resources go to ``head`` (``why``: the waiting reason)."""
        assert r.allocation is not None and self.scratch is not None  # the start booked it there
        self.scratch.release(r.allocation)
        at = next(k for k, s in enumerate(self.started) if s[0].id == r.job.id)
        pos = next(k for k, s in enumerate(self.result.starts) if s.job.id == r.job.id)
        self.taken_back.append((self.started.pop(at), at, self.result.starts.pop(pos), pos))
        self.result.unstarted.append(r.job.id)
        if self.explain:
            job = r.job
            needs = _needs(job, None)
            order = self.result.order.index(job.id) if job.id in self.result.order else -1
            self.result.waiting.append(
                WaitReason(job, NO_FIT, f"needs {needs} in {job.vc}; {why}", order, needs, head.id)
            )

    def _room(
        self, req: PlacementRequest, order: Sequence[RunningJob], take: Callable[[RunningJob], bool], short: int
    ) -> tuple[Allocation, list[RunningJob]] | None:
        """Release candidates in ``order`` (those ``take`` accepts) on a scratch copy until the head (its
        request ``req``) has a placement and ``short`` GPUs are freed; then keep as victims those on the
        nodes it gets, plus, while the cap still needs them, the first others. None when no prefix makes
        room."""
        if not order:
            return None
        trial = self.state().copy()
        tried: list[RunningJob] = []
        freed = 0
        alloc: Allocation | None = None
        for r in order:
            if not take(r):
                continue
            assert r.allocation is not None
            trial.release(r.allocation)
            tried.append(r)
            freed += r.allocation.gpus
            if freed >= short:
                alloc = self.rt.placer.place(req, trial)
                if alloc is not None:
                    break
        if alloc is None:
            return None
        nodes = {g.node for g in alloc.grants}
        held = [(r, r.allocation) for r in tried if r.allocation is not None]
        victims = [r for r, a in held if any(g.node in nodes for g in a.grants)]
        chosen = {id(r) for r in victims}
        need = short - sum(a.gpus for r, a in held if id(r) in chosen)
        for r, a in held:  # the cap's shortfall, from the cheapest of the others
            if need <= 0:
                break
            if id(r) not in chosen:
                victims.append(r)
                need -= a.gpus
        # the head's nodes are in the same state with the victims gone as in the trial: ``alloc`` holds
        return alloc, victims

    def _preempt(self, r: RunningJob, why: str, cause: str) -> None:
        assert r.allocation is not None
        if self.scratch is None:
            self.scratch = self.cluster.copy()
        self.scratch.release(r.allocation)
        self.reclaimed.add(r.job.id)
        self.result.preemptions.append(Preemption(r.job, why, cause))

    def mark(self) -> tuple[int, int]:
        """Where the pass's preemptions and taken-back starts stand (``undo`` returns to it)."""
        return len(self.result.preemptions), len(self.taken_back)

    def undo(self, mark: tuple[int, int]) -> None:
        """Take back the preemptions and start take-backs decided since ``mark``: a placement that
        reclaimed them for a job that does not start there (the victims stay running, on this pass's
        books too; the starts stand)."""
        taken, back = mark
        undone = self.result.preemptions[taken:]
        restored = self.taken_back[back:]
        if not undone and not restored:
            return
        assert self.scratch is not None  # a preemption or take-back released its victim there
        del self.result.preemptions[taken:]
        by_id = {r.job.id: r for r in self.running()}
        for pr in undone:
            r = by_id[pr.job.id]
            self.reclaimed.discard(r.job.id)
            if r.allocation is not None:
                self.scratch.allocate(r.allocation)
                self._hold(r.allocation.gpus)
        for started, at, start, pos in reversed(restored):
            self.started.insert(at, started)
            self.result.starts.insert(pos, start)
            if start.allocation is not None:
                self.scratch.allocate(start.allocation)
                self._hold(start.allocation.gpus)
        gone = {start.job.id for _, _, start, _ in restored}
        del self.taken_back[back:]
        del self.result.unstarted[len(self.result.unstarted) - len(restored) :]
        if self.explain:
            self.result.waiting = [w for w in self.result.waiting if w.job.id not in gone]

    def _hold(self, gpus: int) -> None:
        """The partition's running jobs hold ``gpus`` more (fewer: negative), when it counts them."""
        if self.tracks_held:
            self.held_now()
            self.held += gpus

    def in_arrays(self, job: Job, shape: Shape | None, st: ClusterState) -> Iterator[Allocation]:
        """SODA's placements of the job on ``st`` without reclaiming, in the order it takes them: its own
        resource array, then the arrays that lend to it; a job no GPU array can ever hold spans them
        (the partition's GPU nodes together). Without job arrays, the partition placer's one placement."""
        if not self.rt.policy.arrays:
            alloc = self.rt.placer.place(_request(job, shape), st)
            if alloc is not None:
                yield alloc
            return
        pools = self.array_pools()
        array = soda_array(job)
        # refusals on the pass's own books are remembered per array (as ``place`` does per partition): a
        # long queue asks each array for the same few sizes at every placement. Not on the copies that
        # backfilling and projection place on (their books are not the caller's)
        memos = self.rt.pool_memos if st is self.state() and shape is None and FitMemo.plain(job) else None
        for lender in SODA_LENDERS[array]:
            if job.gpus and lender == "cpu":
                continue
            pool = pools[lender]
            memo = biggest = None
            if memos is not None:
                memo = memos.get(pool)
                if memo is None:
                    memo = memos[pool] = FitMemo()
                biggest = st.biggest_node(job.vc, (), pool)
                if memo.refused(job, st, self.group, biggest):
                    continue
            alloc = self.rt.placer.place(PlacementRequest.for_job(job, shape, pool=pool), st)
            if alloc is not None:
                yield alloc
            elif memo is not None and biggest is not None:
                memo.note(job, st, self.group, biggest)
        if array != "cpu" and self._spans_arrays(job, shape):
            # larger than any one array can ever hold (16 GPUs over two 8-GPU arrays): the arrays are
            # the partition's GPU nodes together for it, else it would block its array's queue for ever
            alloc = self.rt.placer.place(PlacementRequest.for_job(job, shape), st)
            if alloc is not None:
                yield alloc

    def place_arrays(self, job: Job, shape: Shape | None) -> Allocation | None:
        """SODA: the job's own resource array, then the arrays that lend to it; a GPU job that fits
        nowhere reclaims its own array from borrowers, which are preempted and re-enter the head of
        their job array (seed 002 §V-C)."""
        st = self.state()
        alloc = next(self.in_arrays(job, shape, st), None)
        array = soda_array(job)
        # CPU jobs only borrow, they never reclaim; nor does a job that spans the arrays
        if alloc is not None or array == "cpu" or self._spans_arrays(job, shape):
            return alloc
        pools = self.array_pools()
        own = self.cluster.pools[pools[array]]
        # with LowerPriority preemption a job of higher priority keeps what it borrowed: else it would
        # take it back by its priority at the next pass
        ranked = self.part.preemption.within_partition == "LowerPriority"
        # behind a reserved head, nothing of the head's array or one ordered before it (arrays go in name
        # order): stopped, it would re-enter its array's head ahead of the reserved head and delay it
        ahead = self.head_queue

        def may_take(j: Job) -> bool:
            return not (ranked and j.priority > job.priority) and (ahead is None or soda_array(j) > ahead)

        borrowers = [r for r in self._lent_by(array, own) if r.job.id not in self.reclaimed and may_take(r.job)]
        # and what this pass lent ahead of it (its array's queue comes later in the order): lent idle
        # resources are the owner's again, else the next pass at this instant would reclaim them
        fresh = [
            RunningJob(j, self.now, e, a)
            for j, a, e in self.started
            if a is not None and soda_array(j) != array and any(own[g.node] for g in a.grants) and may_take(j)
        ]
        # released one at a time, as a cohort's reclaim does: this pass's own starts first (taking one back
        # loses nothing), then the least lost work; of those, only the ones on the nodes it then gets lose
        # what they borrowed (all of them on a node did, even those whose GPUs it did not need)
        req = PlacementRequest.for_job(job, shape, pool=pools[array])
        found = self._room(req, [*victim_order(fresh, self.now), *victim_order(borrowers, self.now)], _any, 0)
        if found is None:
            return None
        alloc, victims = found
        taken_back = {r.job.id for r in fresh}
        for r in victims:
            assert r.allocation is not None
            self._hold(-r.allocation.gpus)
            if r.job.id in taken_back:
                why = f"left for {job.id}: the {array} array takes back what it would lend to {soda_array(r.job)}"
                self._unstart(r, job, why)
            else:
                self._preempt(r, f"{array} array reclaims what it lent to {soda_array(r.job)} for {job.id}", "")
        return alloc

    def array_pools(self) -> dict[str, str]:
        """SODA's resource arrays as node pools (``PartitionRuntime.array_pools``), once per pass."""
        if self._pools is None:
            self._pools = self.rt.array_pools(self.cluster)
        return self._pools

    def _lent_by(self, array: str, own: np.ndarray) -> list[RunningJob]:
        """The running jobs of other arrays on ``array``'s nodes (``own``), once per pass: every job of
        a long queue that fits nowhere asks."""
        lent = self._lent.get(array)
        if lent is None:
            lent = self._lent[array] = [
                r
                for r in self.running()
                if r.allocation is not None
                and soda_array(r.job) != array
                and any(own[g.node] for g in r.allocation.grants)
            ]
        return lent

    def _spans_arrays(self, job: Job, shape: Shape | None) -> bool:
        """No GPU array could hold the job even empty, while the partition could: asked of the placer
        on the empty nodes (could_ever_fit alone let a job wait for ever on an array the placer never
        places it in). Kept per request: a long queue asks the same few, at every placement."""
        key = _request_key(job, shape)
        spans = self._spans.get(key)
        if spans is None:
            spans = self._spans[key] = not self._an_array_on_empty(job, shape) and self._on_empty(
                PlacementRequest.for_job(job, shape)
            )
        return spans

    def start(self, job: Job, alloc: Allocation | None, shape: Shape | None, backfilled: bool) -> None:
        self._book(alloc)
        if alloc is not None:
            self._hold(alloc.gpus)
        # expected ends of this pass's starts matter only to backfilling's projections
        end = self.now + self.estimate(job, alloc) if self.estimate is not None and self.backfill else math.inf
        self.started.append((job, alloc, end))
        self.result.starts.append(Start(job, alloc, shape, backfilled))

    def wait(self, d: Decision, pos: int, code: str, why: str, blocking: str = "") -> None:
        if not self.explain:
            return
        job = d.job
        fixed = job.fixed_shape
        shape = d.shape if d.shape is not None else fixed
        if fixed is not None and code in (NO_FIT, HEAD):
            # the user's shape is what does not fit: say so, and whether it ever can in the partition
            never = self.never_fits(job)
            said = "its fixed shape " + (f"can never fit in {job.vc}: {never}" if never else NOT_NOW)
            why = said if why == NOT_NOW else f"{said}; {why}"
        needs = _needs(job, shape)
        st = self.state()
        key = (id(st), st.books, job.vc, shape, job.gpus, job.gpu_models, job.gpu_milli, job.cpu_milli,
               job.memory_mib, job.nodes, job.pool)  # fmt: skip
        free = self._free.get(key)
        if free is None:
            free = self._free[key] = _free_text(st, job, shape)
        msg = f"needs {needs} in {job.vc}; {free}; {why}"
        if d.waiting_allowance is not None and math.isfinite(d.waiting_allowance):
            msg += f"; waiting allowance {d.waiting_allowance:+.0f} s"
        self.result.waiting.append(WaitReason(job, code, msg, pos, needs, blocking, d.waiting_allowance))

    # -- backfilling ---------------------------------------------------------------------------
    def project(
        self,
        head: Job,
        shape: Shape | None,
        extra: Iterable[tuple[Allocation | None, float]] = (),
        *,
        unstarted: bool = False,
    ) -> tuple[float, Allocation | None]:
        """When and where the head could start: release running jobs (and ``extra`` hypothetical
        ones) in order of expected end on a copy of the cluster, placing the head after each.
        ``unstarted``: as if this pass had started nothing."""
        st = self.state().copy()
        started = self.started
        if unstarted:
            for _, a, _ in started:
                if a is not None:
                    st.release(a)
            started = []
        # where the head would go as it is placed (SODA: in its arrays), never reclaiming: a head that
        # could reclaim was placed already
        if self.rt.policy.arrays:

            def place(st: ClusterState) -> Allocation | None:
                return next(self.in_arrays(head, shape, st), None)
        else:
            req, placer = _request(head, shape), self.rt.placer

            def place(st: ClusterState) -> Allocation | None:
                return placer.place(req, st)

        # jobs this pass reclaimed from (SODA) are released in the state already
        releases = [
            (max(r.expected_end, self.now), r.allocation) for r in self.running() if r.job.id not in self.reclaimed
        ]
        for m in self.members:  # a cohort's nodes are shared: its other members' jobs release them too
            releases += [
                (max(r.expected_end, self.now), r.allocation)
                for r in m.running_jobs()
                if r.job.id not in self.reclaimed
            ]
        releases += [(max(e, self.now), a) for _, a, e in started]
        releases += [(max(e, self.now), a) for a, e in extra]
        # allocations started in this pass are booked in ``st`` already (state() includes them);
        # hypothetical extras are not: book them so their release is meaningful.
        for a, _ in extra:
            if a is not None:
                st.allocate(a)
        releases.sort(key=lambda x: x[0])
        alloc = place(st)
        if alloc is not None:
            return self.now, alloc
        k = 0
        while k < len(releases):
            t = releases[k][0]
            while k < len(releases) and releases[k][0] == t:  # everything ending at t is released at t
                a = releases[k][1]
                if a is not None:
                    st.release(a)
                k += 1
            alloc = place(st)
            if alloc is not None:
                return t, alloc
        return math.inf, None

    def reserve(self, d: Decision, pos: int) -> HeadReservation:
        """The head's reservation: kept (latest start fixed) when it already held one with a known start.
        A head that blocked while its start was unknown (what runs had no expected end yet) gets its
        latest start once the start is known: an infinite bound kept would let every job backfill past it.
        A head that jobs ahead of it in the policy's order, started in this pass, delay (SJF's shorter
        newcomer, a requeued job) is reserved anew, never earlier than before: the policy delayed it, not
        backfilling, and its old bound would keep every later backfill out."""
        head = d.job
        start, alloc = self.project(head, d.shape)
        prev = self.result.carry.reservation
        mine = prev is not None and prev.job_id == head.id
        # (before the head blocks, no start of the pass is a backfill: all are ahead of it in the order)
        overtaken = (
            mine and bool(self.started) and self.project(head, d.shape, unstarted=True)[0] < start - SAME_INSTANT_S
        )
        if prev is not None and mine and math.isfinite(prev.latest) and not overtaken:
            res = HeadReservation(head.id, start, prev.latest, alloc, prev.backfilled)
        else:
            factor = relax_factor(
                self.part.backfill, self.part.relax_factor, self.queue_len, max(self.result.carry.max_queue_len, 1)
            )
            # relaxed bound: a fraction of the head's expected wait (004 §VI-B, after Ward et al.)
            slack = factor * max(start - head.submit_time, 0.0) if math.isfinite(start) else 0.0
            latest = start + slack
            if prev is not None and overtaken and math.isfinite(prev.latest):
                latest = max(latest, prev.latest)
            backfilled = prev.backfilled if prev is not None and mine and not overtaken else ()
            res = HeadReservation(head.id, start, latest, alloc, backfilled)
        self.result.carry.reservation = res
        return res

    def may_backfill(self, res: HeadReservation, head: Decision, job: Job, alloc: Allocation) -> bool:
        """Whether starting ``job`` on ``alloc`` now keeps the head's start by its latest start."""
        if not math.isfinite(res.start):
            return True  # the head cannot start with what runs now; nothing to protect yet
        end = self.now + (self.estimate(job, alloc) if self.estimate is not None else math.inf)
        if end <= res.start + SAME_INSTANT_S:
            return True  # released before the head needs anything
        # Not "takes none of the head's projected GPUs, so fine": a placer may still need those other
        # GPUs free to choose that allocation (a gang of 7 over 4-GPU nodes wants two nodes with 4
        # free). Re-projecting is exact whatever the placer.
        start, head_alloc = self.project(head.job, head.shape, [(alloc, end)])
        if start > res.latest + SAME_INSTANT_S:
            return False
        if start > res.start:  # allowed, and the head now starts later (still by its latest start)
            res.start = start
        # where the head now goes: the next job is placed away from these GPUs (``avoid``), as in a pass
        # that finds this job running (it kept the placement projected before this start)
        res.allocation = head_alloc
        return True

    def avoid(self, res: HeadReservation, head: Decision, job: Job, shape: Shape | None) -> Allocation | None:
        """A placement of ``job`` away from the head's reserved GPUs (those free now are held aside) that
        may backfill; SODA tries each array the job may use, in its order."""
        if res.allocation is None:
            return None
        st = self.state().copy()
        for g in res.allocation.grants:
            free = [i for i in g.gpu_ids if st.gpu_free_milli[g.node, i] == 1000]
            if free:
                st.allocate(Allocation((type(g)(g.node, tuple(free), 1000, 0, 0),)))
        for alloc in self.in_arrays(job, shape, st):
            if self.may_backfill(res, head, job, alloc):
                return alloc
        return None


def admit(
    runtime: PartitionRuntime,
    waiting: Iterable[Job],
    running: Sequence[RunningJob] | Callable[[], Sequence[RunningJob]],
    cluster: ClusterState,
    now: float,
    *,
    carry: Carry | None = None,
    estimate: Estimate | None = None,
    presorted: bool = False,
    queue_len: int | None = None,
    explain: bool = True,
    book: bool = False,
    first: Collection[str] = (),
    cohort: Sequence[CohortMember] = (),
) -> AdmissionResult:
    """One admission pass over a partition's queue.

    ``waiting``: the partition's waiting jobs; in the policy's order when ``presorted`` (callers of a
    ``static`` policy keep it sorted by ``policy.key``), else in arrival order. ``running``: its
    running jobs, or a callable producing them (only backfilling and preemption need them).
    ``estimate``: expected run seconds of a job if started now on an allocation (backfilling and the
    expected ends of jobs started in this pass); required when the partition backfills.
    ``carry``: what the previous pass returned (the head's reservation, the longest queue seen).
    ``explain``: build a WaitReason for every job left waiting (the operator; the simulator skips it).
    ``book``: book the starts on ``cluster`` itself, for a caller that would book them anyway (the
    simulator); ignored by preemptive and job-array policies, whose passes also release. The result's
    ``booked`` says whether it happened. Otherwise ``cluster`` is never changed.
    ``first``: ids of waiting jobs that go back to the head of their queue, ahead of the policy's
    order (jobs preempted for an inference service, ``core.services``); preemptive policies, which
    order waiting and running jobs together anyway, ignore it.
    ``cohort``: every other member of the partition's cohort (``core.cohorts``), with its running and
    waiting jobs; the members' nodes are then shared on ``cluster`` (``ClusterState.share_nodes``, a
    static setting like a node pool). The result's preemptions may then stop jobs of other members
    (reclaim); with ``booked`` they are released on ``cluster`` already, else only on the pass's copy.
    Presorted static queues are sorted by ``ordering.static_key`` (the policy's key, then priority).
    """
    rt = runtime
    part = rt.partition
    policy = rt.policy
    carry = carry or Carry()
    if part.backfill != "none" and estimate is None:
        raise InvalidInput("estimate", None, "backfilling needs expected run times")
    check_members(part, cohort)
    if part.cohort is not None:
        cluster.share_nodes([part.name, *(m.partition.name for m in cohort)])
    ctx = rt.ctx
    ctx.now = now
    if policy.preemptive:
        return _preemptive(rt, list(waiting), running, cluster, now, carry, estimate, explain, cohort)
    if presorted:
        if not policy.static:
            raise InvalidInput("presorted", policy.name, "only a static policy's queue can be kept sorted")
        if first:
            waiting = _heads_first(list(waiting), first, lambda j: j.id)
        n = queue_len if queue_len is not None else -1
    else:
        jobs = list(waiting)
        n = len(jobs)
    # a job that can never start is no load: it would relax every head's bound for ever (the simulator,
    # whose queues never hold one, counts the same); counted once the pass can tell
    recount = part.backfill == "adaptive" and not presorted
    p = _Pass(rt, cluster, now, running, estimate, carry, 0 if recount else max(n, 0), explain, book and not policy.arrays, cohort)  # fmt: skip
    tallies = policy.tallies and not presorted
    unstartable = [j for j in jobs if p.inadmissible(j) is not None] if recount or tallies else []
    if recount:
        p.count_queue(len(jobs) - len(unstartable))
    if presorted:
        decisions: Iterable[Decision] = (Decision(j) for j in waiting)
    else:
        if not tallies:
            unstartable = []
        elif unstartable:  # its order adds up what the jobs it lets go hold: a job that never starts holds
            # nothing (it would keep its model type's share from the others; the simulator's queues hold none)
            gone = {j.id for j in unstartable}
            jobs = [j for j in jobs if j.id not in gone]
        decisions = [*policy.order(jobs, ctx), *(Decision(j) for j in unstartable)]
        if first:
            decisions = _heads_first(decisions, first, lambda d: d.job.id)
    backfill = part.backfill != "none"
    if presorted and not (backfill or explain or policy.arrays or p.may_preempt or p.tracks_held):
        # A kept-sorted static order that does not backfill (the simulator's FIFO, SJF, QSSF): the loop
        # below then starts jobs in order up to the first that does not fit, and stops. The same, spelt
        # out: O(starts) work, no Decision per job.
        for job in waiting:
            alloc = p.place(job, None)
            if alloc is None:
                break
            p.start(job, alloc, None, False)
        p.result.carry.reservation = None
        return p.result
    blocked_sub: dict[str, str] = {}  # sub-queue -> the job blocking it (no backfilling)
    res: HeadReservation | None = None
    head: Decision | None = None
    head_pos = head_at = 0
    heads_tried: set[str] = set()  # sub-queues whose blocked head has tried preemption (make_room)
    for pos, d in enumerate(decisions):
        job = d.job
        if explain:
            p.result.order.append(job.id)
        if d.blocked is not None:
            p.wait(d, pos, BLOCKED, d.blocked, part.policy)
            continue
        if d.queue in blocked_sub:
            if not explain:
                if d.queue == "" and not backfill:
                    break
                continue
            p.wait(d, pos, BEHIND, f"behind {blocked_sub[d.queue]} (the queue does not backfill)", blocked_sub[d.queue])
            continue
        left = p.quota_left()
        gpus = d.shape.gpus if d.shape is not None else job.gpus  # (a GENIE shape its policy gave it)
        if left is not None and gpus > left:
            never = p.inadmissible(job, d.shape)
            if never is not None:  # it preempts nobody and blocks nobody: no GPUs freed would let it start
                p.wait(d, pos, INADMISSIBLE, never, part.name)
                continue
            room = None
            if p.may_preempt and res is None and d.queue not in heads_tried:
                heads_tried.add(d.queue)
                room = p.make_room(d, gpus - left)
            if room is not None:
                p.start(job, room, d.shape, False)
                continue
            p.wait(d, pos, QUOTA, p.quota_says(left), part.name)
            if not backfill:
                blocked_sub[d.queue] = job.id
            continue
        taken = p.mark()  # SODA's arrays may reclaim for the placement: kept only if it starts
        alloc = p.place(job, d.shape)
        # before it blocks its queue or takes the head's reservation (and to say so behind a head)
        if alloc is None and (res is None or explain):
            never = p.inadmissible(job, d.shape)
            if never is not None:
                p.wait(d, pos, INADMISSIBLE, never)
                continue
        if alloc is None and p.may_preempt and res is None and d.queue not in heads_tried:
            heads_tried.add(d.queue)  # the head of its queue: reclaim / preempt for it, once
            alloc = p.make_room(d, 0)
            if alloc is not None:
                p.start(job, alloc, d.shape, False)
                continue
        if res is not None and head is not None:  # behind a reserved head: backfill or wait
            if alloc is not None and not p.may_backfill(res, head, job, alloc):
                p.undo(taken)  # what it reclaimed for that placement stays running (or starts)
                alloc = p.avoid(res, head, job, d.shape)
                if alloc is None:
                    p.wait(
                        d,
                        pos,
                        RESERVED,
                        f"would delay {head.job.id} past its latest start {res.latest:g} s",
                        head.job.id,
                    )
                    continue
            if alloc is None:
                p.wait(d, pos, NO_FIT, NOT_NOW)
                continue
            p.start(job, alloc, d.shape, True)
            res.backfilled = (*res.backfilled, job.id)
            continue
        if alloc is None:
            if not backfill:
                blocked_sub[d.queue] = job.id
                p.wait(d, pos, HEAD, NOT_NOW)
                if not explain and d.queue == "":
                    break
                continue
            res = p.reserve(d, pos)
            head, head_pos, head_at = d, pos, len(p.result.waiting)
            p.head_queue = d.queue
            continue
        p.start(job, alloc, d.shape, False)
    if res is None:  # no head is blocked after this pass: any earlier reservation is over
        p.result.carry.reservation = None
    elif explain and head is not None:  # said last: backfills may have moved its projected start
        when = (
            f"reserved to start at {res.start:g} s, at the latest {res.latest:g} s"
            if math.isfinite(res.start)
            else "cannot start until more is released"
        )
        p.wait(head, head_pos, HEAD, f"head of the queue; {when}")
        p.result.waiting.insert(head_at, p.result.waiting.pop())
    if policy.revisits and not presorted:
        started = {s.job.id for s in p.result.starts}
        p.result.revisit_at = min((d.choice_until for d in decisions if d.job.id not in started), default=math.inf)
    return p.result


def _heads_first(items: list[T], first: Collection[str], key: Callable[[T], str]) -> list[T]:
    """``items`` with those whose id is in ``first`` moved ahead, both parts in their order (for a
    policy with job arrays each goes to the head of its own array's queue: decisions keep it)."""
    return [x for x in items if key(x) in first] + [x for x in items if key(x) not in first]


def _preemptive(
    rt: PartitionRuntime,
    waiting: list[Job],
    running: Sequence[RunningJob] | Callable[[], Sequence[RunningJob]],
    cluster: ClusterState,
    now: float,
    carry: Carry,
    estimate: Estimate | None,
    explain: bool,
    cohort: Sequence[CohortMember] = (),
) -> AdmissionResult:
    """Preemptive policies (SRTF, LAS, RR, MLFQ): order waiting and running jobs together; keep the
    prefix that fits the partition's GPUs; preempt running jobs outside it; start the waiting ones in
    it; then fill what still fits in policy order (work-conserving: fragmentation may keep a desired
    job out, and its GPUs should not idle until the next event). A running job outside the prefix is
    stopped only where that lets a job start on its GPUs: stopped for nothing, its GPUs would idle and
    the operator's next pass would start it again as a waiting job (then stop it again)."""
    p = _Pass(rt, cluster, now, running, estimate, carry, len(waiting), explain, members=cohort)
    # in the order they started (then by id): among running jobs of equal keys the one started last is
    # stopped first, whatever order the caller lists them in (the simulator's by start, the operator's by name)
    run = sorted(p.running(), key=lambda r: (r.start, r.job.id))
    if not waiting:
        return p.result
    by_id = {r.job.id: r for r in run}
    # a waiting job that can never start keeps no GPUs and so preempts nobody (it waits Inadmissible)
    never = {j.id: why for j in waiting if (why := p.inadmissible(j)) is not None}
    # running jobs first: the policies' sorts are stable, so a tie keeps what runs (a waiting job
    # preempts only what it strictly outranks; else equal keys would swap the two at every pass)
    ds = rt.policy.order([r.job for r in run] + waiting, rt.ctx)
    if explain:  # the order of waiting and running jobs together: what the positions refer to
        p.result.order = [d.job.id for d in ds]
    g = p.group
    budget = int(cluster.gpu_cap[np.isin(cluster.vc_id, g)].sum()) if p.has_nodes else 0
    cap = p.cap()  # the quota, or in a cohort its share plus what it may borrow (no reclaim here)
    if cap is not None:
        budget = min(budget, cap)
    keep: set[str] = set()
    for d in ds:
        if d.job.gpus <= budget and d.job.id not in never:
            budget -= d.job.gpus
            keep.add(d.job.id)
    if not any(j.id in keep for j in waiting):
        for pos, d in enumerate(ds):
            if d.job.id in never:
                p.wait(d, pos, INADMISSIBLE, never[d.job.id])
            elif d.job.id not in by_id:
                p.wait(d, pos, NO_FIT, "the jobs ahead of it in the policy's order hold the partition's GPUs")
        return p.result
    # Running jobs outside the kept prefix are outranked. They are stopped (on a scratch copy: the caller
    # books for real) only where that lets a job start: for a job of the prefix, or in the fill for a job
    # ranked above them; stopping them for a job that still cannot start is taken back.
    outranked = {r.job.id: r for r in run if r.job.id not in keep}
    booked = dict(outranked)  # outranked jobs whose GPUs this pass still books: they run on
    rank = {d.job.id: k for k, d in enumerate(ds)}
    started: set[str] = set()
    over: set[str] = set()  # left waiting by the cap, not by the nodes

    def rebook(rs: Iterable[RunningJob], sign: int) -> None:
        """Stop (-1) or keep running (+1) outranked jobs on this pass's books."""
        if p.scratch is None:
            p.scratch = cluster.copy()
        for r in rs:
            if r.allocation is None:
                continue
            if sign < 0:
                p.scratch.release(r.allocation)
                del booked[r.job.id]
            else:
                p.scratch.allocate(r.allocation)
                booked[r.job.id] = r
            if p.tracks_held:
                p.held_now()
                p.held += sign * r.allocation.gpus

    def within_cap(gpus: int) -> bool:  # the fill below is work-conserving, within the quota or cohort cap
        left = p.quota_left()
        return left is None or gpus <= left

    def try_start(d: Decision) -> bool:
        if not within_cap(d.job.gpus):
            over.add(d.job.id)
            return False
        alloc = p.place(d.job, d.shape)
        if alloc is None:
            return False
        over.discard(d.job.id)
        p.start(d.job, alloc, d.shape, False)
        started.add(d.job.id)
        return True

    def fits(d: Decision) -> bool:
        return within_cap(d.job.gpus) and p.place(d.job, d.shape) is not None

    def start(d: Decision, stoppable: list[RunningJob]) -> None:
        if try_start(d) or not stoppable:
            return
        low = sorted(stoppable, key=lambda r: -rank[r.job.id])  # the lowest-ranked first
        rebook(low, -1)
        if not fits(d):
            try_start(d)  # (says why it waits)
            rebook(low, +1)  # stopping them starts nothing: they run on
            return
        # Stop the fewest lowest-ranked jobs that let it start (a binary search: stopping more never
        # hurts), not whichever the placement finds among all of them: the GPU ids each job holds, which
        # the simulator and the operator's books number apart, decide nothing.
        lo, hi = 1, len(low)  # stopping low[:hi] lets it start
        while lo < hi:
            mid = (lo + hi) // 2
            rebook(low[mid:hi], +1)
            if fits(d):
                hi = mid
            else:
                rebook(low[mid:hi], -1)
                lo = mid + 1
        try_start(d)  # (those of low[:hi] whose GPUs it does not take run on: ``resume``)

    def resume(r: RunningJob) -> None:
        """A stopped job whose GPUs nobody took runs on (within the cap)."""
        a = r.allocation
        if a is not None and within_cap(a.gpus) and p.state().refusal(a) is None:
            rebook([r], +1)

    for d in ds:
        if d.job.id in keep and d.job.id not in by_id:
            start(d, [r for r in booked.values() if r.allocation is not None])
    for d in ds:
        if d.job.id in outranked:
            if d.job.id not in booked:
                resume(outranked[d.job.id])
        elif d.job.id not in by_id and d.job.id not in started and d.job.id not in never:
            below = rank[d.job.id]
            start(d, [r for r in booked.values() if r.allocation is not None and rank[r.job.id] > below])
    why = f"outranked under {rt.policy.name}"
    p.result.preemptions += [Preemption(r.job, why) for r in run if r.job.id in outranked and r.job.id not in booked]
    for pos, d in enumerate(ds):
        if d.job.id in never:
            p.wait(d, pos, INADMISSIBLE, never[d.job.id])
        elif d.job.id in over:
            p.wait(d, pos, QUOTA, p.quota_says(p.quota_left() or 0), rt.partition.name)
        elif d.job.id not in by_id and d.job.id not in started:
            p.wait(d, pos, NO_FIT, NOT_NOW)
    return p.result


def gang_shape(job: Job, cluster: ClusterState, shape: Shape | None = None) -> Shape | None:
    """The ⟨nodes, GPUs per node⟩ a whole-GPU job is placed with (the operator's gang size)."""
    if job.gpus == 0 or job.gpu_milli < 1000:
        return None
    return default_shape(_request(job, shape), cluster)


__all__ = [
    "BEHIND",
    "BLOCKED",
    "HEAD",
    "INADMISSIBLE",
    "LOWER_PRIORITY",
    "NO_FIT",
    "QUOTA",
    "RECLAIM",
    "RESERVED",
    "AdmissionResult",
    "Carry",
    "CohortMember",
    "FitMemo",
    "HeadReservation",
    "Partition",
    "PartitionRuntime",
    "Preemption",
    "PreemptionPolicy",
    "RunningJob",
    "Start",
    "WaitReason",
    "admit",
    "gang_shape",
]
