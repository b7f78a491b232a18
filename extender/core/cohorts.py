"""Cohorts of VirtualClusters that share their nodes: borrowing, lending, reclaim and priorities
(issue 21 §3; Kueue's ClusterQueue cohorts are the reference).

VirtualClusters of one cohort place on the union of their nodes (``ClusterState.share_nodes``); a
member's ``gpu_quota`` (``nominal_gpus``) is its nominal share, by default the GPUs of its own nodes.
What a member's running jobs may hold is GPU accounting, not node ownership (as in Kueue): a job of A
within A's nominal share may run on B's idle node, and a job beyond it borrows.

**Borrowing cap.** For every member m: q_m its nominal share, held_m the GPUs its running jobs hold,
l_m its lending limit (None: ∞), b_m its borrowing limit (None: ∞), and

    room_m     = max(q_m − held_m, 0)                          its unused nominal share
    demand_m   = Σ gpus of m's waiting jobs with gpus ≤ room_m  its own waiting demand that fits its share
    spare_m    = min(l_m, max(room_m − demand_m, 0))            what it lends now
    borrowed_m = max(held_m − q_m, 0)

The pass of partition P lets its running jobs hold at most (``quota.effective_quota``)

    cap_P = q_P + max(0, min(b_P, Σ_{m ≠ P} spare_m − Σ_{m ≠ P} borrowed_m))

Why: Kueue admits a workload of a ClusterQueue while its usage stays within nominal + borrowingLimit
and the cohort has unused nominal quota for it, each lender lending at most its lendingLimit. Unused
quota that the lender's own waiting jobs could use is not lent (they would have to reclaim it at
once); a waiting job larger than the lender's unused share could not start on that share anyway, so
it does not hold it back. What the other members already borrow is taken from the same pool, so the
cohort never lends a GPU twice: Σ borrowed ≤ Σ spare over the lenders.

**Reclaim.** Only for the head of a lender's queue (the first job its policy would start) that is
within the lender's nominal share (held_P + gpus ≤ q_P) and does not fit the free nodes, when the
lender's ``preemption.reclaim_within_cohort`` is "Any". Candidates: running jobs of members that
borrow (held_m > q_m), taken only while their member still borrows. They are released one at a time
on a scratch copy, in order of *lost work* (the GPU-seconds of their running segment, (now − start) ×
GPUs held: what a stop without checkpoint throws away), ties to the one submitted last, until the
placer finds the head a placement; of those, only the jobs on the nodes it gets are preempted. If
every candidate released still leaves no placement (another GPU model, another topology), nobody is
preempted. The head then starts in the same pass on the freed GPUs (the pass releases the victims on
its books first), and the victims go back to their own queues.

**Priorities.** ``Job.priority`` (higher first) breaks ties of the partition's policy (the policies
sort stably after a stable sort by descending priority: equal priorities change no order). With
``preemption.within_partition`` "LowerPriority", a blocked head may preempt running jobs of its own
partition with a lower priority, the lowest priority first, then least lost work (ties: submitted
last), as few as the placer and the partition's cap need; checked the same way on a scratch copy
(stopping a job of priority 0 for one of 1 while a job of -1 runs made the stopped job preempt the -1
one at once). Jobs the pass itself started ahead of the head are candidates too (their start is taken
back): else the next pass would preempt what this one started. Reclaim is tried first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.quota import QuotaState, effective_quota
from qosmos.extender.core.types import Job

if TYPE_CHECKING:
    from qosmos.extender.core.admission import Partition, RunningJob
    from qosmos.extender.core.cluster import ClusterState

WITHIN_PARTITION = ("Never", "LowerPriority")  # Kueue's withinClusterQueue values we implement
RECLAIM_WITHIN_COHORT = ("Never", "Any")  # Kueue's reclaimWithinCohort values we implement


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """Who may preempt whom (``VirtualCluster.spec.preemption``, after Kueue's ClusterQueue).

    ``reclaim_within_cohort`` "Any" (the default here, unlike Kueue's "Never": issue 21 §3 makes a
    cohort reclaim) lets the partition's blocked head take its lent share back from borrowers;
    ``within_partition`` "LowerPriority" lets it preempt lower-priority jobs of its own partition."""

    within_partition: str = "Never"
    reclaim_within_cohort: str = "Any"

    def __post_init__(self) -> None:
        if self.within_partition not in WITHIN_PARTITION:
            raise InvalidInput(
                "within_partition", self.within_partition, f"expected one of {', '.join(WITHIN_PARTITION)}"
            )
        if self.reclaim_within_cohort not in RECLAIM_WITHIN_COHORT:
            raise InvalidInput(
                "reclaim_within_cohort",
                self.reclaim_within_cohort,
                f"expected one of {', '.join(RECLAIM_WITHIN_COHORT)}",
            )


@dataclass(frozen=True, slots=True)
class CohortMember:
    """Another member of the partition's cohort, as its admission pass needs it: its partition (share,
    limits), its running jobs (their GPUs count as held; borrowers' are reclaim candidates; a callable
    is called only when the pass needs them) and its waiting jobs (their demand keeps its share from
    being lent). A caller that keeps the figures anyway may give ``held`` (GPUs its running jobs hold)
    and ``waiting_gpus`` (GPUs asked -> number of waiting jobs asking that many) instead: the same
    numbers, without a walk over the queue at every pass (the simulator)."""

    partition: Partition
    running: Sequence[RunningJob] | Callable[[], Sequence[RunningJob]]
    waiting: Sequence[Job] = ()
    held: int | None = None
    waiting_gpus: Mapping[int, int] | None = None

    def running_jobs(self) -> Sequence[RunningJob]:
        r = self.running
        return r() if callable(r) else r

    def held_gpus(self) -> int:
        return self.held if self.held is not None else held_gpus(self.running_jobs())

    def state(self, nominal: int, could_start: Callable[[Job], bool] | None = None) -> QuotaState:
        """Its accounting (``quota.QuotaState``) with this nominal share; ``could_start`` leaves out of its
        demand the waiting jobs that can never start (they would keep its share from being lent for
        ever; ``waiting_gpus`` never counts them: the simulator rejects such jobs up front)."""
        held = self.held_gpus()
        if self.waiting_gpus is None:
            waiting = self.waiting if could_start is None else [j for j in self.waiting if could_start(j)]
            return quota_state(self.partition, nominal, held, waiting)
        room = max(nominal - held, 0)
        demand = sum(g * n for g, n in self.waiting_gpus.items() if 0 < g <= room)
        return _state(self.partition, nominal, held, demand)


def nominal_of(partition: Partition, cluster: ClusterState) -> int:
    """A member's nominal share: its ``gpu_quota``, else the GPUs of its own nodes."""
    q = partition.gpu_quota
    return q if q is not None else cluster.own_gpus(partition.name)


def held_gpus(running: Iterable[RunningJob]) -> int:
    """Whole GPUs held by these running jobs."""
    return sum(r.allocation.gpus for r in running if r.allocation is not None)


def demand_that_fits(waiting: Iterable[Job], room: int) -> int:
    """GPUs asked by the waiting jobs that could each start within ``room`` GPUs of unused share."""
    return sum(j.gpus for j in waiting if 0 < j.gpus <= room)


def quota_state(partition: Partition, nominal: int, held: int, waiting: Iterable[Job]) -> QuotaState:
    """One member's accounting (``quota.QuotaState``) from its share, held GPUs and waiting jobs."""
    return _state(partition, nominal, held, demand_that_fits(waiting, max(nominal - held, 0)))


def _state(partition: Partition, nominal: int, held: int, demand: int) -> QuotaState:
    return QuotaState(
        partition.name,
        nominal,
        borrowing_limit=partition.borrowing_limit,
        held=held,
        demand=demand,
        lending_limit=partition.lending_limit,
    )


def cohort_cap(me: QuotaState, others: Sequence[QuotaState]) -> int:
    """cap_P of the module docstring: GPUs the partition's running jobs may hold in all."""
    return effective_quota([me, *others], me.name)


def max_cap(partition: Partition, nominal: int, others: Iterable[tuple[Partition, int]]) -> int:
    """The most GPUs the partition's running jobs could ever hold: its share plus its borrowing limit,
    at most every other member's whole share (or lending limit) lent to it. A job asking more never
    starts (the simulator rejects it up front, as it does a job no node could hold)."""
    lendable = sum(q if p.lending_limit is None else min(q, p.lending_limit) for p, q in others)
    b = partition.borrowing_limit
    return nominal + (lendable if b is None else min(b, lendable))


def lost_work(r: RunningJob, now: float) -> float:
    """GPU-seconds of the running segment: what stopping it without a checkpoint loses."""
    gpus = r.allocation.gpus if r.allocation is not None else 0
    return max(now - r.start, 0.0) * gpus


def victim_order(candidates: Iterable[RunningJob], now: float, lowest_first: bool = False) -> list[RunningJob]:
    """Least lost work first (``lowest_first``: the lowest priority first, then least lost work); ties:
    submitted last first, then the larger id (deterministic)."""
    by_id = sorted(candidates, key=lambda r: r.job.id, reverse=True)
    if lowest_first:
        return sorted(by_id, key=lambda r: (r.job.priority, lost_work(r, now), -r.job.submit_time))
    return sorted(by_id, key=lambda r: (lost_work(r, now), -r.job.submit_time))


def check_members(partition: Partition, members: Sequence[CohortMember]) -> None:
    """The members given to a pass: of the partition's cohort, each once, the partition not among them."""
    if partition.cohort is None:
        if members:
            raise InvalidInput("cohort", partition.name, "has no cohort, yet cohort members were given")
        return
    seen = {partition.name}
    for m in members:
        p = m.partition
        if p.cohort != partition.cohort:
            raise InvalidInput("cohort", p.name, f"is in cohort {p.cohort!r}, not {partition.cohort!r}")
        if p.name in seen:
            raise InvalidInput("cohort", p.name, "is given twice (or is the partition itself)")
        seen.add(p.name)


__all__ = [
    "RECLAIM_WITHIN_COHORT",
    "WITHIN_PARTITION",
    "CohortMember",
    "PreemptionPolicy",
    "check_members",
    "cohort_cap",
    "demand_that_fits",
    "held_gpus",
    "lost_work",
    "max_cap",
    "nominal_of",
    "quota_state",
    "victim_order",
]
