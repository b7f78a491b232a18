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
    require_node_terms,
)
from qosmos.extender.core.admission import Carry, HeadReservation
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant
from qosmos.operator.crds import API_VERSION, LABEL_JOB, LABEL_VC, DLJobPlacement, DLJobSpec

GATE = "qosmos.io/admission"  # the scheduling gate every gang pod is created with
SCHEDULER_NAME = "qosmos-scheduler"
LABEL_ATTEMPT = "qosmos.io/attempt"  # which gang a pod belongs to: status.restarts + status.preemptions
LABEL_REPLICA_INDEX = "qosmos.io/replica-index"  # a gang pod's rank (RANK, PET_NODE_RANK, its hostname's index)
RENDEZVOUS_PORT_NAME = "rendezvous"  # rank 0's containerPort and the headless Service's port
NODE_STATE_TAINT = "node.kubernetes.io/"  # taints the node lifecycle controller writes from its conditions
# taints of a node's passing state: it is unusable for now (not Ready, cordoned, asleep), whoever the pod
PASSING_TAINTS = (NODE_STATE_TAINT, "qosmos.io/power")
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
    """``t`` in RFC 3339, to the microsecond where it has a fraction: a time the operator writes (a start, a
    requeue, a finish, a partition's last event) is read back as the service a job received, and a start
    at a turn end 813.5 s written as 813 s gave it half a second of service before it ran (the next pass
    preempted it again under LAS)."""
    fmt = "%Y-%m-%dT%H:%M:%SZ" if t == int(t) else "%Y-%m-%dT%H:%M:%S.%fZ"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


# --------------------------------------------------------------------------- DLJob -> Job


def job_key(namespace: str, name: str) -> str:
    """The core's job id of a DLJob (also the extender's gang key of its pods)."""
    return f"{namespace}/{name}"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return job_key(m.get("namespace", "default"), m.get("name", ""))


def job_from_dljob(
    obj: Mapping[str, Any], predicted_duration: float | None = None, *, spec: DLJobSpec | None = None
) -> Job:
    """A DLJob as the core's Job: GENIE's task, QoS class, GPUs (with gpusPerNode: that many nodes),
    CPU and memory of the whole gang (every pod's), submitted at its creation; the namespace is the user (tenant).
    The service of its finished run segments (``attained``, ``executed``, a GENIE task's ``work_left``) and
    when it last went back to its queue (``enqueued``) come from its status; the current segment is :func:`with_service`'s.
    ``spec``: the object's spec, already validated."""
    m = meta(obj)
    st = obj.get("status") or {}
    requeued = parse_time(st.get("queuedSince"))
    if spec is None:
        spec = DLJobSpec.model_validate(obj.get("spec") or {})
    submit = parse_time(m.get("creationTimestamp"))
    if submit is None:
        raise InvalidInput("metadata.creationTimestamp", m.get("creationTimestamp"), "expected an RFC 3339 time")
    pods = pods_of(spec)
    return Job(
        id=key_of(obj),
        submit_time=submit,
        gpus=spec.gpus,
        kind=spec.kind,
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
        nodes=nodes_of(spec) if spec.gpus and spec.gpus_per_node else 0,
        category=spec.model_type or "",
        executed=float(st.get("executedSeconds") or 0.0),
        attained=float(st.get("attainedServiceGpuSeconds") or 0.0),
        work_left=1.0 if st.get("workLeft") is None else float(st["workLeft"]),
        enqueued=math.nan if requeued is None else requeued,
        priority=spec.priority,  # Kueue's workload priority: ties of the VC's policy, LowerPriority preemption
        checkpoint_interval=spec.checkpoint_interval_seconds,
    )


def attempt_of(status: Mapping[str, Any] | None) -> int:
    """Which gang of the DLJob is current (its pods' names and ``qosmos.io/attempt`` label): a new one
    after each failed-pod restart and each requeue, so a re-admitted gang never meets the pods of the
    last one still terminating under the same names."""
    st = status or {}
    return int(st.get("restarts") or 0) + int(st.get("preemptions") or 0) + int(st.get("ignoredFailures") or 0)


def segment_start(status: Mapping[str, Any] | None) -> float | None:
    """When the current run segment began: ``startTime`` (all pods Running) of an admitted DLJob; None
    while its gang is not running yet (no service is received before every pod runs)."""
    st = status or {}
    if st.get("phase") not in ("Admitted", "Running"):
        return None
    return parse_time(st.get("startTime"))


def turn_start(status: Mapping[str, Any] | None) -> float | None:
    """Since when an admitted DLJob's gang holds the turn a preemptive policy counts (its service and
    turn ends): its :func:`segment_start`; or, for a gang stalled before its pods all ran (a node of its
    placement went down while it backed off after a failure, or while its pods started), its
    :func:`run_start`: the simulator's stalled gang holds its GPUs from there, its turn running, so a
    turn end gives them to the queue instead of the stall keeping them to its grace's end."""
    start = segment_start(status)
    if start is None and (status or {}).get("stalledSince"):
        return run_start(status)
    return start


def run_start(status: Mapping[str, Any] | None) -> float | None:
    """When an admitted DLJob's current run began or begins, the rest of its run counted from there (as
    the simulator's segment start): ``startTime`` once its gang runs; a gang restarted after a failure
    waiting for ``restartAfter``, then; else its admission (``admittedAt``: its pods are starting)."""
    st = status or {}
    for key in ("startTime", "restartAfter", "admittedAt"):
        if (at := parse_time(st.get(key))) is not None:
            return at
    return None


def with_service(job: Job, start: float | None, at: float) -> Job:
    """``job`` (the service of its finished segments) plus its current segment, running since ``start``,
    up to ``at``: ``executed`` + run seconds, ``attained`` + run seconds × GPUs (the simulator's
    ``_sync_progress``)."""
    ran = 0.0 if start is None else max(at - start, 0.0)
    if ran == 0.0:
        return dataclasses.replace(job)
    return dataclasses.replace(job, executed=job.executed + ran, attained=job.attained + ran * job.gpus)


def service_status(
    job: Job, start: float | None, now: float, kept: float | None = None, lost: float = 0.0
) -> dict[str, float]:
    """Status fields folding the current segment into the service of the finished ones, written when the
    segment ends without the job finishing (a requeue, a gang restart). ``kept``: the run seconds its
    progress keeps when that is less than the segment's run (:func:`kept_run`), the rest added to
    ``lost`` (``lostRunSeconds`` so far); the service received (``attainedServiceGpuSeconds``) is the
    whole run's."""
    j = with_service(job, start, now)
    out = {"attainedServiceGpuSeconds": round(j.attained, 3), "executedSeconds": round(j.executed, 3)}
    ran = 0.0 if start is None else max(now - start, 0.0)
    if kept is not None and kept < ran:
        out["executedSeconds"] = round(job.executed + kept, 3)
        out["lostRunSeconds"] = round(lost + ran - kept, 3)
    return out


def nodes_of(spec: DLJobSpec) -> int:
    """Nodes of the gang when the spec fixes them (0: the placer chooses)."""
    if spec.kind == "cpu":
        return 1
    if spec.gpus_per_node:
        return spec.gpus // spec.gpus_per_node
    return 0


def pods_of(spec: DLJobSpec) -> int:
    """Pods of the gang when the spec fixes them (0: the placer chooses): one per node, or with
    ``gpusPerPod`` that many GPUs each."""
    if spec.gpus_per_pod and spec.gpus_per_node and spec.kind != "cpu":
        return spec.gpus // spec.gpus_per_pod
    return nodes_of(spec)


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
    """Whatever is still free on a node nothing new may go to (:func:`node_usable`: cordoned, as CES
    asleep or waking and ``kubectl cordon`` leave it, or not Ready) booked, so the core places nothing
    new there; what already runs there stays booked as its own (call this after booking the gangs and
    other pods)."""
    for obj in nodes:
        if node_usable(obj):
            continue
        i = cluster.index.get(str(meta(obj).get("name", "")))
        if i is not None:
            cluster.book_free(i)


def _free_ids(cluster: ClusterState, node: int, gpus: int) -> tuple[int, ...]:
    row = cluster.gpu_free_milli[node, : int(cluster.gpu_cap[node])]
    return tuple(int(g) for g in (row == 1000).nonzero()[0][:gpus])


# --------------------------------------------------------------------------- placement <-> status


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The pods of an admitted DLJob: one per node (or, :meth:`split`, several on a node), each with its
    node and GPUs (and the pod's CPU and memory)."""

    node_names: tuple[str, ...]
    gpus: tuple[int, ...]  # per pod

    @property
    def uniform(self) -> int | None:
        return self.gpus[0] if self.gpus and len(set(self.gpus)) == 1 else None

    def placement(self) -> DLJobPlacement:
        gpn = self.uniform
        return DLJobPlacement(
            nodes=len(set(self.node_names)),
            gpus_per_node=gpn if gpn is not None else max(self.gpus, default=0),
            node_names=list(self.node_names),
            gpus_by_node=None if gpn is not None else list(self.gpus),
            shape=f"{len(self.node_names)}x{gpn}" if gpn is not None else "+".join(map(str, self.gpus)),
        )

    def per_node(self) -> list[int]:
        """GPUs of each node the gang is on, in the order of its pods (a node's pods summed: ``split``)."""
        by_node: dict[str, int] = {}
        for node, g in zip(self.node_names, self.gpus, strict=True):
            by_node[node] = by_node.get(node, 0) + g
        return list(by_node.values())

    @classmethod
    def of_status(cls, status: Mapping[str, Any] | None) -> Gang | None:
        p = (status or {}).get("placement") or {}
        names = tuple(p.get("nodeNames") or ())
        if not names:
            return None
        by_node = p.get("gpusByNode")
        gpus = tuple(int(g) for g in by_node) if by_node else (int(p.get("gpusPerNode") or 0),) * len(names)
        return cls(names, gpus)

    def split(self, gpus_per_pod: int | None) -> Gang:
        """Each node's GPUs over pods of ``gpus_per_pod`` (``spec.gpusPerPod``: the placement is the core's,
        the pods are Kubernetes'); unchanged without it. A remainder (a grant it does not divide, which
        the CRD's rules rule out) is one smaller pod."""
        if not gpus_per_pod:
            return self
        names: list[str] = []
        gpus: list[int] = []
        for node, g in zip(self.node_names, self.gpus, strict=True):
            k, rest = divmod(g, gpus_per_pod)
            names += [node] * k + ([node] if rest else [])
            gpus += [gpus_per_pod] * k + ([rest] if rest else [])
        return Gang(tuple(names), tuple(gpus))

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


# --------------------------------------------------------------------------- node eligibility


def node_ready(node: Mapping[str, Any]) -> bool:
    """False when the node's Ready condition is False or Unknown (its kubelet is down or unreachable);
    a node that reports no Ready condition yet counts as ready."""
    conds = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conds if c.get("type") == "Ready"), "True")
    return ready == "True"


def node_usable(node: Mapping[str, Any]) -> bool:
    """A node anything new may be placed on now: Ready, not cordoned (``spec.unschedulable``) and without
    a NoSchedule/NoExecute taint of the node's state (``node.kubernetes.io/*``: unreachable, not ready,
    under memory, disk or PID pressure)."""
    return unusable_because(node) is None


def unusable_because(node: Mapping[str, Any]) -> str | None:
    """Why nothing new may be placed on the node now (:func:`node_usable`), in a waiting job's words; None
    when it is usable."""
    if not node_ready(node):
        return "not Ready"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    tainted = [
        str(t["key"]).removeprefix(NODE_STATE_TAINT)
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and str(t.get("key", "")).startswith(NODE_STATE_TAINT)
    ]
    return f"tainted {tainted[0]}" if tainted else None


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ToleratesTaint: a toleration matches the taint's effect (empty: any), its key (empty with
    Exists: every key) and, with operator Equal (the default), its value."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        if (t.get("operator") or "Equal") == "Exists":
            return True
        if t.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement(req: Mapping[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement against the node's value of its key (None: the node lacks it)."""
    op, values = req.get("operator"), [str(v) for v in req.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    """A NodeSelectorTerm: all its requirements hold (an empty term matches no node)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_requirement(r, labels.get(r.get("key", ""))) for r in exprs) and all(
        _requirement(r, name if r.get("key") == "metadata.name" else None) for r in fields
    )


def pod_tolerations(pspec: Mapping[str, Any], gpus: bool) -> list[dict[str, Any]]:
    """The tolerations a gang pod carries: the template's, and for a pod with GPUs the one
    ExtendedResourceToleration gives it (``nvidia.com/gpu`` Exists: GPU nodes are often tainted with it
    to keep other pods off), written on the pod so it holds without that admission plugin too."""
    own = [dict(t) for t in pspec.get("tolerations") or []]
    if gpus and not all(tolerates(own, {"key": GPU_RESOURCE, "effect": e}) for e in ("NoSchedule", "NoExecute")):
        own.append({"key": GPU_RESOURCE, "operator": "Exists"})
    return own


def narrowing_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints that keep a pod off unless tolerated (NoSchedule, NoExecute), but for the passing
    ones the node's state puts there (``node.kubernetes.io/*``: not Ready, unreachable, cordoned, under
    pressure; ``qosmos.io/power``: CES asleep): those make a node unusable for now (:func:`node_usable`),
    not a template's business."""
    return [
        t
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not str(t.get("key", "")).startswith(PASSING_TAINTS)
    ]


def taints_narrow(node: Mapping[str, Any]) -> bool:
    """Whether some pods may be kept off the node by a taint (then templates are checked against it)."""
    return bool(narrowing_taints(node))


def template_allows(pspec: Mapping[str, Any], node: Mapping[str, Any], gpus: bool) -> bool:
    """Whether a pod of this template may run on ``node`` as the default scheduler's filters judge it:
    its ``nodeSelector``, its required node affinity (terms ORed, requirements ANDed), and every
    NoSchedule/NoExecute taint tolerated (:func:`pod_tolerations`)."""
    m = meta(node)
    labels, name = m.get("labels") or {}, str(m.get("name", ""))
    if any(labels.get(k) != str(v) for k, v in (pspec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((pspec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if required is not None and not any(_term_matches(t, labels, name) for t in required):
        return False
    taints = narrowing_taints(node)
    if taints:
        tols = pod_tolerations(pspec, gpus)
        return all(tolerates(tols, t) for t in taints)
    return True


def constraints_of(spec: DLJobSpec) -> str | None:
    """The part of a DLJob's pod template that narrows its nodes, as a key (None: it narrows nothing
    but taints, the same for every DLJob with or without GPUs)."""
    pspec = (spec.template or {}).get("spec") or {}
    required = ((pspec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    narrowing = {
        "nodeSelector": pspec.get("nodeSelector"),
        "required": required,
        "tolerations": pspec.get("tolerations"),
    }
    if not any(narrowing.values()):
        return None
    return json.dumps(narrowing, sort_keys=True, separators=(",", ":"))


def allowed_nodes(spec: DLJobSpec, nodes: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Per node (in ``nodes`` order): may this DLJob's pods run there (:func:`template_allows`)."""
    pspec = (spec.template or {}).get("spec") or {}
    return [template_allows(pspec, n, spec.gpus > 0) for n in nodes]


# --------------------------------------------------------------------------- rendezvous


LOCAL_RANK0 = "localhost"  # a one-pod gang's rendezvous address (also right for hostNetwork pods)


def has_headless_service(pods: int) -> bool:
    """Whether a gang of ``pods`` pods finds rank 0 through the DLJob's headless Service. A gang of one
    pod does not (its rank 0 is itself, :data:`LOCAL_RANK0`): the Service would only cost writes, the
    Service and the endpoint controllers' Endpoints and EndpointSlice of every such job."""
    return pods > 1


def rank0_address(dljob: str, namespace: str) -> str:
    """Rank 0's DNS name through the DLJob's headless Service (no cluster domain assumed: the pods'
    resolv.conf search path completes it)."""
    return f"{hostname(dljob, 0)}.{service_name(dljob)}.{namespace}.svc"


def service_name(dljob: str) -> str:
    """The DLJob's headless Service: its own name (the CRD keeps DLJob names DNS-1035 labels)."""
    return dljob


def hostname(dljob: str, index: int) -> str:
    """Pod i's hostname, the same across attempts (its name carries the attempt)."""
    return f"{dljob}-{index}"


def procs_per_pod(spec: DLJobSpec, gpus: int) -> int:
    """Processes a pod runs: ``spec.rendezvous.procsPerPod``, else one per GPU of the pod (1 without)."""
    return spec.rendezvous.procs_per_pod or max(gpus, 1)


def rendezvous_env(
    name: str, namespace: str, spec: DLJobSpec, pods: int, index: int, gpus: int, attempt: int
) -> list[dict[str, str]]:
    """What every container of pod ``index`` is told: rank 0's address and port, one process per pod for
    WORLD_SIZE/RANK (PyTorch's env:// init), torchrun's PET_* (its arguments' defaults: ``torchrun
    train.py`` runs ``PET_NPROC_PER_NODE`` workers per pod, ranks numbered across pods), JAX's coordinator,
    process count and id, and the gang's own figures."""
    addr = rank0_address(name, namespace) if has_headless_service(pods) else LOCAL_RANK0
    port = str(spec.rendezvous.port)
    values = {
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(pods),
        "RANK": str(index),
        "PET_NNODES": str(pods),
        "PET_NPROC_PER_NODE": str(procs_per_pod(spec, gpus)),
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": port,
        "JAX_COORDINATOR_ADDRESS": f"{addr}:{port}",
        "JAX_NUM_PROCESSES": str(pods),
        "JAX_PROCESS_ID": str(index),
        "QOSMOS_REPLICAS": str(pods),
        "QOSMOS_REPLICA_INDEX": str(index),
        "QOSMOS_ATTEMPT": str(attempt),
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def _with_env(container: dict[str, Any], env: list[dict[str, str]]) -> None:
    """Ours first (a template variable may refer to them as $(MASTER_ADDR)), then the template's; a name
    the template sets keeps the template's value."""
    own = list(container.get("env") or [])
    taken = {e.get("name") for e in own}
    container["env"] = [e for e in env if e["name"] not in taken] + own


def _with_port(container: dict[str, Any], port: int) -> None:
    """Rank 0's rendezvous port declared on its first container (unless it declares that port already)."""
    ports = list(container.get("ports") or [])
    if any(int(p.get("containerPort") or 0) == port and (p.get("protocol") or "TCP") == "TCP" for p in ports):
        return
    entry: dict[str, Any] = {"containerPort": port, "protocol": "TCP"}
    if not any(p.get("name") == RENDEZVOUS_PORT_NAME for p in ports):
        entry["name"] = RENDEZVOUS_PORT_NAME
    container["ports"] = [*ports, entry]


def _pin(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """The template's affinity with pod i pinned to the core's node i: the pin ANDed into each of the
    template's required node-selector terms (terms are ORed, so each must carry it), or the only term
    when there is none; preferred node affinity and pod (anti-)affinity kept as they are."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    return require_node_terms(affinity, [{"matchFields": [pin]}])


def headless_service(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The DLJob's headless Service: with the pods' ``subdomain`` it, each pod's ``hostname`` gets the DNS
    name ``<hostname>.<dljob>.<namespace>.svc``, published before the pods are Ready
    (``publishNotReadyAddresses``: rank 0 must be found while the gang starts). Owned by the DLJob."""
    m = meta(obj)
    spec = DLJobSpec.model_validate(obj.get("spec") or {})
    name = m["name"]
    port = spec.rendezvous.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": m.get("namespace", "default"),
            "labels": {LABEL_JOB: name},
            "ownerReferences": [owner_of(obj)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: name},
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def owner_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The DLJob as the controlling owner: deleting it lets the garbage collector remove what it owns."""
    m = meta(obj)
    return {
        "apiVersion": API_VERSION,
        "kind": "DLJob",
        "name": m["name"],
        "uid": m.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --------------------------------------------------------------------------- gang pods


def pod_name(dljob: str, attempt: int, index: int) -> str:
    """Deterministic: a restarted operator recreating a pod gets AlreadyExists, never a duplicate."""
    return f"{dljob}-{attempt}-{index}"


def probe_gang(spec: DLJobSpec) -> Gang:
    """A gang of the job's shape on a placeholder node, for the dry run of its pod template (the node
    need not exist: a dry run binds nothing)."""
    if spec.gpus and spec.gpus_per_node:
        n = spec.gpus // spec.gpus_per_node
        gang = Gang(tuple(f"dry-run-{i}.invalid" for i in range(n)), (spec.gpus_per_node,) * n)
        return gang.split(spec.gpus_per_pod)
    return Gang(("dry-run-0.invalid",), (spec.gpus,))


def gang_pods(
    obj: Mapping[str, Any], gang: Gang, attempt: int, node_vc: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The gang's pods of one attempt: the template (its labels and annotations copied), one pod per
    node with that node's GPUs and the pod's CPU and memory, gated by ``qosmos.io/admission``, owned by
    the DLJob, for the qosmos-scheduler, with the annotations the extender honours. Pod i has the
    hostname ``<dljob>-<i>`` under the DLJob's headless Service (:func:`headless_service`), the label
    ``qosmos.io/replica-index=i``, the rendezvous variables in every container (:func:`rendezvous_env`;
    the template's own values win) and, on rank 0, the rendezvous port. A pod on a node of another
    member of its VirtualCluster's cohort (``node_vc``: node name -> the VirtualCluster it belongs to)
    carries that VirtualCluster as its ``qosmos.io/vc``, whose nodes the extender then lets it use;
    the DLJob's own VirtualCluster stays in its spec."""
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
    per_node: dict[str, int] = {}
    for node, g in zip(gang.node_names, gang.gpus, strict=True):
        per_node[node] = per_node.get(node, 0) + g  # a split gang's pods of one node together
    if spec.gpus and len(set(per_node.values())) == 1 and next(iter(per_node.values())):
        base_ann[ANN_PLACEMENT] = f"{len(per_node)}x{next(iter(per_node.values()))}"  # the extender's shape
    if spec.gpu_models:
        base_ann[ANN_GPU_MODELS] = "|".join(spec.gpu_models)
    owner = owner_of(obj)
    pods = []
    size = len(gang.gpus)
    for i, gpus in enumerate(gang.gpus):
        on = (node_vc or {}).get(gang.node_names[i]) if i < len(gang.node_names) else None
        pod_labels = {**labels, LABEL_VC: on} if on else labels  # borrowed: the lender's nodes
        pspec = copy.deepcopy(template.get("spec") or {})
        containers = pspec.get("containers") or [{"name": "main", "image": DEFAULT_IMAGE}]
        env = rendezvous_env(name, ns, spec, size, i, gpus, attempt)
        for c in [*containers, *(pspec.get("initContainers") or [])]:
            _with_env(c, env)
            # a failed container's log tail becomes its termination message: the DLJob's condition says why
            c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
        first = containers[0]
        if i == 0:
            _with_port(first, spec.rendezvous.port)
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
        pspec["hostname"], pspec["subdomain"] = hostname(name, i), service_name(name)
        tolerations = pod_tolerations(pspec, gpus > 0)
        if tolerations:
            pspec["tolerations"] = tolerations
        if len(gang.gpus) > 1:  # the gate holds a pod until its peers exist; a gang of one has none
            pspec["schedulingGates"] = [*(pspec.get("schedulingGates") or []), {"name": GATE}]
        # pod i on the core's node i, a hard constraint for every scheduler profile (CPU pods skip the
        # extender; GPU pods ungated together could otherwise race onto one planned node), within the
        # template's own affinity
        pspec["affinity"] = _pin(pspec.get("affinity"), gang.node_names[i])
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name(name, attempt, i),
                    "namespace": ns,
                    "labels": {**pod_labels, LABEL_REPLICA_INDEX: str(i)},
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
    "LABEL_REPLICA_INDEX",
    "NO_VC",
    "SCHEDULER_NAME",
    "Gang",
    "allowed_nodes",
    "assign_nodes",
    "attempt_of",
    "book_cordoned",
    "book_gang",
    "book_pods",
    "carry_from_json",
    "carry_to_json",
    "constraints_of",
    "core_nodes",
    "gang_pods",
    "has_headless_service",
    "headless_service",
    "hostname",
    "job_from_dljob",
    "job_key",
    "node_ready",
    "node_usable",
    "nodes_of",
    "parse_time",
    "pod_name",
    "pod_tolerations",
    "pods_of",
    "rank0_address",
    "rendezvous_env",
    "rfc3339",
    "segment_start",
    "selects",
    "service_name",
    "service_status",
    "taints_narrow",
    "template_allows",
    "tolerates",
    "turn_start",
    "unusable_because",
    "with_service",
]
