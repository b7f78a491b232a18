"""Kubernetes objects <-> the core's types, for the operator (the edge; no decision here).

DLJob -> :class:`Job`; Nodes + VirtualClusters -> :class:`ClusterState` (each node in the first
VirtualCluster, by name, whose ``nodeSelector`` matches it); admitted DLJobs -> :class:`RunningJob`
booked on that state from their status placement; the admission :class:`Carry` <-> a JSON
annotation on the VirtualCluster; a :class:`Start` -> the status placement and the gang's pods.
Nodes and foreign pods go through the extender's own translation (``qosmos.extender.cache``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from qosmos.extender.cache import (
    ANN_GPU_MODELS,
    ANN_NODES,
    ANN_PLACEMENT,
    GPU_RESOURCE,
    PodInfo,
    node_from_object,
)
from qosmos.extender.core.admission import Carry, HeadReservation, RunningJob
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant
from qosmos.operator.crds import API_VERSION, LABEL_JOB, LABEL_VC, DLJobPlacement, DLJobSpec

GATE = "qosmos.io/admission"  # the scheduling gate every gang pod is created with
SCHEDULER_NAME = "qosmos-scheduler"
LABEL_ATTEMPT = "qosmos.io/attempt"  # which gang a pod belongs to: status.restarts + status.preemptions
ANN_CARRY = "qosmos.io/carry"  # the VirtualCluster's admission carry (head reservation), JSON
NO_VC = ""  # the partition of nodes no VirtualCluster selects
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"


# --------------------------------------------------------------------------- times


def parse_time(value: object) -> float | None:
    """An RFC 3339 timestamp as Unix seconds (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- DLJob -> Job


def job_key(namespace: str, name: str) -> str:
    """The core's job id of a DLJob (also the extender's gang key of its pods)."""
    return f"{namespace}/{name}"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return job_key(m.get("namespace", "default"), m.get("name", ""))


def job_from_dljob(obj: Mapping[str, Any], predicted_duration: float | None = None) -> Job:
    """A DLJob as the core's Job: GENIE's task, QoS class, GPUs (with gpusPerNode: that many nodes),
    CPU and memory of the whole gang, submitted at its creation; the namespace is the user (tenant).
    The service of its finished run segments (``attained``, ``executed``) and when it last went back
    to its queue (``enqueued``) come from its status; the current segment is :func:`with_service`'s."""
    m = meta(obj)
    st = obj.get("status") or {}
    requeued = parse_time(st.get("queuedSince"))
    spec = DLJobSpec.model_validate(obj.get("spec") or {})
    submit = parse_time(m.get("creationTimestamp"))
    if submit is None:
        raise InvalidInput("metadata.creationTimestamp", m.get("creationTimestamp"), "expected an RFC 3339 time")
    pods = pods_of(spec)
    return Job(
        id=key_of(obj),
        submit_time=submit,
        gpus=spec.gpus,
        kind=spec.kind,  # type: ignore[arg-type]
        user=m.get("namespace", "default"),
        vc=spec.virtual_cluster,
        model=spec.model_type or "",
        batch=spec.global_batch_size or 0,
        iters=spec.iterations or 0,
        # per-pod requests times the pods when their number is fixed; else one pod's (the placer
        # spreads a job's CPU over its nodes in proportion to their GPUs)
        cpu_milli=spec.cpu_milli * (pods or 1),
        memory_mib=spec.memory_mib * (pods or 1),
        qos=spec.qos,
        name=m.get("name", ""),
        predicted_duration=predicted_duration,
        gpu_models=tuple(spec.gpu_models or ()),
        nodes=pods if spec.gpus and spec.gpus_per_node else 0,
        category=spec.model_type or "",
        executed=float(st.get("executedSeconds") or 0.0),
        attained=float(st.get("attainedServiceGpuSeconds") or 0.0),
        enqueued=math.nan if requeued is None else requeued,
    )


def attempt_of(status: Mapping[str, Any] | None) -> int:
    """Which gang of the DLJob is current (its pods' names and ``qosmos.io/attempt`` label): a new one
    after each failed-pod restart and each requeue, so a re-admitted gang never meets the pods of the
    last one still terminating under the same names."""
    st = status or {}
    return int(st.get("restarts") or 0) + int(st.get("preemptions") or 0)


def segment_start(status: Mapping[str, Any] | None) -> float | None:
    """When the current run segment began: ``startTime`` (all pods Running) of an admitted DLJob; None
    while its gang is not running yet (no service is received before every pod runs)."""
    st = status or {}
    if st.get("phase") not in ("Admitted", "Running"):
        return None
    return parse_time(st.get("startTime"))


def with_service(job: Job, start: float | None, at: float) -> Job:
    """``job`` (the service of its finished segments) plus its current segment, running since ``start``,
    up to ``at``: ``executed`` + run seconds, ``attained`` + run seconds × GPUs (the simulator's
    ``_sync_progress``)."""
    ran = 0.0 if start is None else max(at - start, 0.0)
    if ran == 0.0:
        return dataclasses.replace(job)
    return dataclasses.replace(job, executed=job.executed + ran, attained=job.attained + ran * job.gpus)


def service_status(job: Job, start: float | None, now: float) -> dict[str, float]:
    """Status fields folding the current segment into the service of the finished ones, written when the
    segment ends without the job finishing (a requeue, a gang restart)."""
    j = with_service(job, start, now)
    return {"attainedServiceGpuSeconds": round(j.attained, 3), "executedSeconds": round(j.executed, 3)}


def pods_of(spec: DLJobSpec) -> int:
    """Pods of the gang when the spec fixes them (0: the placer chooses)."""
    if spec.kind == "cpu":
        return 1
    if spec.gpus_per_node:
        return spec.gpus // spec.gpus_per_node
    return 0


# --------------------------------------------------------------------------- nodes -> ClusterState


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A VirtualCluster's nodeSelector matches a node (an empty selector matches every node)."""
    return all(labels.get(k) == v for k, v in selector.items())


def assign_nodes(nodes: Sequence[Mapping[str, Any]], vcs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> the VirtualCluster it belongs to: the first by name whose selector matches
    (a node is in one partition; the label ``qosmos.io/vc`` can hold one name). Unselected: NO_VC."""
    ordered = sorted(vcs, key=lambda v: meta(v).get("name", ""))
    out: dict[str, str] = {}
    for n in nodes:
        labels = meta(n).get("labels") or {}
        out[meta(n).get("name", "")] = next(
            (meta(v)["name"] for v in ordered if selects((v.get("spec") or {}).get("nodeSelector") or {}, labels)),
            NO_VC,
        )
    return out


def core_nodes(nodes: Sequence[Mapping[str, Any]], assignment: Mapping[str, str]) -> list[Node]:
    """The extender's Node translation, with the partition the operator assigns."""
    out = []
    for obj in nodes:
        node = node_from_object(obj)
        out.append(dataclasses.replace(node, vc=assignment.get(node.name, NO_VC)))
    return out


def book_pods(cluster: ClusterState, pods: Iterable[PodInfo]) -> None:
    """What other (non-DLJob) bound pods hold, booked as far as it fits (the truth is the node)."""
    for p in pods:
        i = cluster.index.get(p.node_name)
        if i is None or p.terminal:
            continue
        gpus = min(p.gpus, int(cluster.free_gpus[i]))
        cpu = p.cpu_milli if cluster.cpu_untracked[i] else min(p.cpu_milli, int(cluster.free_cpu[i]))
        mem = p.memory_mib if cluster.mem_untracked[i] else min(p.memory_mib, int(cluster.free_mem[i]))
        ids = _free_ids(cluster, i, gpus)
        if ids or cpu or mem:
            cluster.allocate(Allocation((NodeGrant(i, ids, 1000, max(cpu, 0), max(mem, 0)),)))


def book_cordoned(cluster: ClusterState, nodes: Iterable[Mapping[str, Any]]) -> None:
    """Whatever is still free on a cordoned node (``spec.unschedulable``: CES asleep or waking,
    ``kubectl cordon``) booked, so the core places nothing new there; what already runs there stays
    booked as its own (call this after booking the gangs and other pods)."""
    for obj in nodes:
        if not (obj.get("spec") or {}).get("unschedulable"):
            continue
        i = cluster.index.get(str(meta(obj).get("name", "")))
        if i is None:
            continue
        ids = _free_ids(cluster, i, int(cluster.free_gpus[i]))
        cpu = 0 if cluster.cpu_untracked[i] else max(int(cluster.free_cpu[i]), 0)
        mem = 0 if cluster.mem_untracked[i] else max(int(cluster.free_mem[i]), 0)
        if ids or cpu or mem:
            cluster.allocate(Allocation((NodeGrant(i, ids, 1000, cpu, mem),)))


def _free_ids(cluster: ClusterState, node: int, gpus: int) -> tuple[int, ...]:
    row = cluster.gpu_free_milli[node, : int(cluster.gpu_cap[node])]
    return tuple(int(g) for g in (row == 1000).nonzero()[0][:gpus])


# --------------------------------------------------------------------------- placement <-> status


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The pods of an admitted DLJob: one per node, with its GPUs (and the pod's CPU and memory)."""

    node_names: tuple[str, ...]
    gpus: tuple[int, ...]  # per pod

    @property
    def uniform(self) -> int | None:
        return self.gpus[0] if self.gpus and len(set(self.gpus)) == 1 else None

    def placement(self) -> DLJobPlacement:
        gpn = self.uniform
        return DLJobPlacement(
            nodes=len(self.node_names),
            gpus_per_node=gpn if gpn is not None else max(self.gpus, default=0),
            node_names=list(self.node_names),
            gpus_by_node=None if gpn is not None else list(self.gpus),
            shape=f"{len(self.node_names)}x{gpn}" if gpn is not None else "+".join(map(str, self.gpus)),
        )

    @classmethod
    def of_status(cls, status: Mapping[str, Any] | None) -> Gang | None:
        p = (status or {}).get("placement") or {}
        names = tuple(p.get("nodeNames") or ())
        if not names:
            return None
        by_node = p.get("gpusByNode")
        gpus = tuple(int(g) for g in by_node) if by_node else (int(p.get("gpusPerNode") or 0),) * len(names)
        return cls(names, gpus)

    @classmethod
    def of_allocation(cls, alloc: Allocation | None, cluster: ClusterState) -> Gang:
        if alloc is None or not alloc.grants:
            return cls((), ())
        return cls(tuple(cluster.nodes[g.node].name for g in alloc.grants), tuple(len(g.gpu_ids) for g in alloc.grants))


def book_gang(
    cluster: ClusterState, gang: Gang, spec: DLJobSpec, bound: Mapping[int, str] | None = None
) -> Allocation | None:
    """Book an admitted gang on ``cluster`` (pod i on its bound node, else the planned one): each pod's
    GPUs (the first free ids), CPU and memory. What no longer fits is left out (a node gone, or taken
    by something the operator does not know); the bound pods are the truth."""
    grants: list[NodeGrant] = []
    for i, (name, gpus) in enumerate(zip(gang.node_names, gang.gpus, strict=True)):
        node = cluster.index.get((bound or {}).get(i, name))
        if node is None:
            continue
        ids = _free_ids(cluster, node, gpus)
        if len(ids) < gpus or not cluster.cpu_fits(node, spec.cpu_milli, spec.memory_mib):
            continue
        grant = NodeGrant(node, ids, 1000, spec.cpu_milli, spec.memory_mib)
        alloc = Allocation((grant,))
        cluster.allocate(alloc)
        grants.append(grant)
    if not grants:
        return None
    return Allocation(tuple(grants), cluster.cross_switch([g.node for g in grants]))


def running_job(job: Job, start: float, alloc: Allocation | None, predicted: float | None) -> RunningJob:
    """An admitted DLJob as the pass sees it: expected to end after its predicted run time."""
    end = start + predicted if predicted is not None else math.inf
    return RunningJob(job, start, end, alloc)


# --------------------------------------------------------------------------- carry <-> annotation


def carry_to_json(carry: Carry, cluster: ClusterState, offset: float = 0.0) -> str:
    """The carry as stored: its times plus ``offset`` (the pass's clock: the core runs on times
    relative to the pass, the annotation keeps Unix seconds)."""
    r = carry.reservation
    res: dict[str, Any] | None = None
    if r is not None:
        res = {
            "job": r.job_id,
            "start": r.start + offset if math.isfinite(r.start) else None,
            "latest": r.latest + offset if math.isfinite(r.latest) else None,
            "grants": [[cluster.nodes[g.node].name, list(g.gpu_ids)] for g in r.allocation.grants]
            if r.allocation is not None
            else None,
            "backfilled": list(r.backfilled),
        }
    return json.dumps({"maxQueueLen": carry.max_queue_len, "reservation": res}, separators=(",", ":"))


def carry_from_json(text: str | None, cluster: ClusterState, offset: float = 0.0) -> Carry:
    """The carry a previous pass persisted, its times less ``offset``; an unreadable one (or one naming
    gone nodes) starts afresh (losing it only moves a reserved head's latest start)."""
    if not text:
        return Carry()
    try:
        raw = json.loads(text)
        res = raw.get("reservation")
        reservation = None
        if res:
            alloc = None
            if res.get("grants"):
                grants = []
                for name, ids in res["grants"]:
                    if name not in cluster.index:
                        raise KeyError(name)
                    grants.append(NodeGrant(cluster.index[name], tuple(int(x) for x in ids)))
                alloc = Allocation(tuple(grants))
            start = math.inf if res.get("start") is None else float(res["start"]) - offset
            latest = math.inf if res.get("latest") is None else float(res["latest"]) - offset
            reservation = HeadReservation(str(res["job"]), start, latest, alloc, tuple(res.get("backfilled") or ()))
        return Carry(reservation, int(raw.get("maxQueueLen", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Carry()


# --------------------------------------------------------------------------- gang pods


def pod_name(dljob: str, attempt: int, index: int) -> str:
    """Deterministic: a restarted operator recreating a pod gets AlreadyExists, never a duplicate."""
    return f"{dljob}-{attempt}-{index}"


def gang_pods(obj: Mapping[str, Any], gang: Gang, attempt: int) -> list[dict[str, Any]]:
    """The gang's pods of one attempt: the template (its labels and annotations copied), one pod per
    node with that node's GPUs and the pod's CPU and memory, gated by ``qosmos.io/admission``, owned by
    the DLJob, for the qosmos-scheduler, with the annotations the extender honours."""
    m = meta(obj)
    spec = DLJobSpec.model_validate(obj.get("spec") or {})
    name, ns = m["name"], m.get("namespace", "default")
    template = copy.deepcopy(spec.template or {})
    tmeta = template.get("metadata") or {}
    labels = {
        **(tmeta.get("labels") or {}),
        LABEL_JOB: name,
        LABEL_VC: spec.virtual_cluster,
        LABEL_ATTEMPT: str(attempt),
    }
    base_ann = dict(tmeta.get("annotations") or {})
    base_ann[ANN_NODES] = ",".join(gang.node_names)
    gpn = gang.uniform
    if spec.gpus and gpn:
        base_ann[ANN_PLACEMENT] = f"{len(gang.node_names)}x{gpn}"
    if spec.gpu_models:
        base_ann[ANN_GPU_MODELS] = "|".join(spec.gpu_models)
    owner = {
        "apiVersion": API_VERSION,
        "kind": "DLJob",
        "name": name,
        "uid": m.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pods = []
    for i, gpus in enumerate(gang.gpus):
        pspec = copy.deepcopy(template.get("spec") or {})
        containers = pspec.get("containers") or [{"name": "main", "image": DEFAULT_IMAGE}]
        first = containers[0]
        res = first.setdefault("resources", {})
        req = res.setdefault("requests", {})
        lim = res.setdefault("limits", {})
        if gpus:
            req[GPU_RESOURCE] = lim[GPU_RESOURCE] = str(gpus)
        if spec.cpus is not None:
            req.setdefault("cpu", str(spec.cpus))
        if spec.memory is not None:
            req.setdefault("memory", str(spec.memory))
        pspec["containers"] = containers
        pspec["schedulerName"] = SCHEDULER_NAME
        pspec.setdefault("restartPolicy", "Never")  # a failed pod fails the gang; the operator restarts it
        if len(gang.gpus) > 1:  # the gate holds a pod until its peers exist; a gang of one has none
            pspec["schedulingGates"] = [*(pspec.get("schedulingGates") or []), {"name": GATE}]
        # pod i on the core's node i, a hard constraint for every scheduler profile (CPU pods skip the
        # extender; GPU pods ungated together could otherwise race onto one planned node)
        pspec.setdefault(
            "affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [gang.node_names[i]]}
                                ]
                            }
                        ]
                    }
                }
            },
        )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name(name, attempt, i),
                    "namespace": ns,
                    "labels": dict(labels),
                    "annotations": dict(base_ann),
                    "ownerReferences": [owner],
                },
                "spec": pspec,
            }
        )
    return pods


__all__ = [
    "ANN_CARRY",
    "GATE",
    "LABEL_ATTEMPT",
    "NO_VC",
    "SCHEDULER_NAME",
    "Gang",
    "assign_nodes",
    "attempt_of",
    "book_gang",
    "book_pods",
    "carry_from_json",
    "carry_to_json",
    "core_nodes",
    "gang_pods",
    "job_from_dljob",
    "job_key",
    "parse_time",
    "pod_name",
    "pods_of",
    "rfc3339",
    "running_job",
    "segment_start",
    "selects",
    "service_status",
    "with_service",
]
