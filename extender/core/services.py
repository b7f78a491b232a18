"""Inference services before the training queues (seed 002 §V-D2): SODA admits a service's replicas
first, and "when resources lack, it preempts the last-submitted training or CPU job", which goes back
to the head of its queue.

:func:`place_services` runs before the partitions' admission passes, on the same ClusterState: the
replicas it places are booked there, so no DLJob admitted in the same pass takes their GPUs (or a
CPU replica's cores) while the replica pod waits for its node; the jobs it preempts are released
there. The operator calls it every pass with the replica pods not yet bound; the simulator calls it
when a service's replica count changes. Both then requeue the preempted jobs at the head of their
queue (``admit(first=...)``).

Victims: running training and CPU jobs (never another service's replicas), the last submitted
first, but only those that hold something on a node where the replica could run at all (a replica
never costs a job that cannot make room for it). They are released one at a time on a scratch copy
until the replica fits; then only those on the node it gets are preempted. If it cannot fit even with
every candidate gone, nothing is preempted and the replica stays unplaced (it waits, as its pod does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from qosmos.extender.core.admission import Preemption, RunningJob
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.types import Allocation, JobKind, PlacementRequest

GPU_NODES = "qosmos/gpu-nodes"  # the node pool of CPU replicas: a GPU node's spare cores (SODA's point)
PREEMPTIBLE = (JobKind.TRAINING, JobKind.CPU)  # seed 002 §V-D2: "training or CPU job"
REPLICA_PLACER = "consolidate"  # replicas pack like any small job, leaving whole nodes for gangs


@dataclass(frozen=True, slots=True)
class ServiceReplica:
    """One replica an inference service wants and that holds no node yet."""

    id: str  # the replica (its pod's key)
    service: str  # the InferenceService it serves
    since: float  # when it was asked for: replicas are placed in this order
    gpus: int = 0  # 1 for a GPU replica
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_nodes_only: bool = False  # a CPU replica runs on a GPU node's spare cores

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidInput("id", self.id, "must be a non-empty string")
        for name in ("gpus", "cpu_milli", "memory_mib"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise InvalidInput(name, v, "must be an integer >= 0")

    def request(self) -> PlacementRequest:
        return PlacementRequest(
            gpus=self.gpus,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            pool=GPU_NODES if self.gpu_nodes_only else None,
        )


@dataclass(slots=True)
class ServicePlacement:
    placed: list[tuple[ServiceReplica, Allocation]] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    unplaced: list[tuple[ServiceReplica, str]] = field(default_factory=list)  # (replica, why)


def place_services(
    replicas: Sequence[ServiceReplica], running: Sequence[RunningJob], cluster: ClusterState
) -> ServicePlacement:
    """Place the replicas (oldest request first) on ``cluster``, preempting as SODA says.

    Mutates ``cluster``: placed replicas are allocated, preempted jobs released (both callers keep
    that state for the admission passes that follow). ``running``: every running job of the cluster,
    whatever its partition; a preempted one is reported once.
    """
    out = ServicePlacement()
    if not replicas:
        return out
    if any(r.gpu_nodes_only for r in replicas):
        cluster.define_pool(GPU_NODES, cluster.gpu_cap > 0)
    placer = get_placer(REPLICA_PLACER)
    gone: set[str] = set()
    # the last-submitted first; ids break ties so both callers pick the same victim
    candidates = sorted(
        (r for r in running if r.job.kind in PREEMPTIBLE and r.allocation is not None),
        key=lambda r: (r.job.submit_time, r.job.id),
        reverse=True,
    )
    for rep in sorted(replicas, key=lambda r: (r.since, r.id)):
        req = rep.request()
        alloc = placer.place(req, cluster)
        if alloc is not None:
            cluster.allocate(alloc)
            out.placed.append((rep, alloc))
            continue
        never = cluster.could_ever_fit(req)
        if never:
            out.unplaced.append((rep, never))
            continue
        usable = cluster.eligible(None, (), req.pool) & (cluster.gpu_cap >= req.gpus)
        trial = cluster.copy()
        tried: list[RunningJob] = []
        for r in candidates:
            assert r.allocation is not None
            if r.job.id in gone or not any(usable[g.node] for g in r.allocation.grants):
                continue
            trial.release(r.allocation)
            tried.append(r)
            alloc = placer.place(req, trial)
            if alloc is not None:
                break
        if alloc is None:
            why = "it does not fit even with every training or CPU job on its nodes preempted"
            out.unplaced.append((rep, why if tried else "no training or CPU job runs where it may go"))
            continue
        node = alloc.grants[0].node  # a replica is one pod: one node
        for r in tried:
            assert r.allocation is not None
            if any(g.node == node for g in r.allocation.grants):
                gone.add(r.job.id)
                cluster.release(r.allocation)
                out.preemptions.append(
                    Preemption(
                        r.job,
                        f"preempted for inference replica {rep.id} of {rep.service}: SODA preempts the "
                        "last-submitted training or CPU job; it goes back to the head of its queue",
                    )
                )
        alloc = placer.place(req, cluster)  # on the real books: the same nodes are free as in the trial
        if alloc is None:  # defensive: the trial and the books disagree only if ``running`` overlaps
            out.unplaced.append((rep, "the preempted jobs did not free its node"))
            continue
        cluster.allocate(alloc)
        out.placed.append((rep, alloc))
    return out


__all__ = ["GPU_NODES", "PREEMPTIBLE", "ServicePlacement", "ServiceReplica", "place_services"]
