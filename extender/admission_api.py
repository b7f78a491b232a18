"""Admit and ExplainQueue: the one translation between the API (protobuf, or its JSON form) and the
core's admission cycle (:func:`qosmos.extender.core.admission.admit`).

The gRPC calls and ``qosmos explain queue`` both go through here: a JSON queue description is parsed
into the same ``AdmitRequest`` message (protobuf's JSON mapping), translated by :func:`admit_input`
into core types, passed to ``admit`` once, and its result translated back. Nothing is booked.

The cluster: the request's ``nodes`` when given (with what others hold on them, ``used_*``), with the
running jobs' allocations booked on top. Without ``nodes`` the server's node cache supplies the nodes,
and what the cache sees in use on a node beyond the request's running jobs counts as held by others
(the caller's running jobs are the truth about the partition's own GPU ids).

Expected run times (backfilling): a running job's ``expected_end``, else start + its predicted
duration, else start + its requested duration; a waiting job's predicted, else requested duration,
less what it has run. A backfilling request without them is refused, naming the job and field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from google.protobuf import json_format
from qosmos.extender.core import genie
from qosmos.extender.core.admission import (
    AdmissionResult,
    Carry,
    Estimate,
    HeadReservation,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.cluster import ClusterState, share
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext, get_policy, model_usage
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant, PlacementRequest, Platform
from qosmos.extender.explain import MAX_ABS_TIME_S, MAX_BATCH, MAX_GPUS_PER_NODE, MAX_ITERS, MAX_NODES
from qosmos.extender.proto import qosmos_pb2 as pb

MAX_JOBS = 10_000  # jobs (waiting + running) one Rank / Admit may carry
MAX_GENIE_ROWS = 200_000  # GENIE placement rows one call may evaluate (jobs x shapes)
NO_CACHE = "the request names no nodes and there is no node cache to use instead"


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _renamed(exc: InvalidInput, where: str) -> InvalidInput:
    """The core's error with the request path in front of its field (``waiting[H].gpus``)."""
    return InvalidInput(f"{where}.{exc.field}", exc.value, exc.reason)


def job_from_spec(spec: pb.JobSpec, where: str = "job", vc: str | None = None) -> Job:
    """A JobSpec as a core Job; ``vc`` (a partition's name) replaces the spec's own."""
    if vc is not None and spec.vc and spec.vc != vc:
        raise InvalidInput(f"{where}.vc", spec.vc, f"the request is for partition {vc!r}")
    nodes = 0
    gpn = _opt(spec, "gpus_per_node")
    if gpn is not None:
        if gpn < 1 or spec.gpus % gpn:
            raise InvalidInput(f"{where}.gpus_per_node", gpn, f"must be >= 1 and divide its {spec.gpus} GPUs")
        nodes = spec.gpus // gpn
    enqueued = _opt(spec, "enqueued")
    try:
        return Job(
            id=spec.id,
            submit_time=spec.submit_time,
            gpus=spec.gpus,
            kind=spec.kind or "training",  # type: ignore[arg-type]
            user=spec.user,
            vc=vc or spec.vc or "default",
            model=spec.model,
            batch=int(spec.batch),
            iters=int(spec.iters),
            cpu_milli=int(spec.cpu_milli),
            memory_mib=int(spec.memory_mib),
            qos=spec.qos or "normal",  # type: ignore[arg-type]
            predicted_duration=_opt(spec, "predicted_duration"),
            duration=_opt(spec, "duration"),
            requested_duration=_opt(spec, "requested_duration"),
            gpu_models=tuple(spec.gpu_models),
            nodes=nodes,
            attained=spec.attained,
            executed=spec.executed,
            enqueued=math.nan if enqueued is None else enqueued,
        )
    except InvalidInput as exc:
        raise _renamed(exc, where) from None


def check_queue(jobs: Sequence[Job], platform: Platform, where: str = "jobs", genie_rows: bool = True) -> None:
    """The caps a queue call shares (Rank, Admit): job count, batch/iteration limits, and with
    ``genie_rows`` the GENIE placement rows its jobs need."""
    if len(jobs) > MAX_JOBS:
        raise InvalidInput(where, len(jobs), f"at most {MAX_JOBS:,} jobs per call")
    rows = 0
    for j in jobs:
        if j.batch > MAX_BATCH or j.iters > MAX_ITERS:
            raise InvalidInput(f"{where}[{j.id}].batch/iters", (j.batch, j.iters), "past the explain limits")
        if genie_rows and j.gpus > 0 and j.batch > 0:
            rows += genie.count_shapes(platform, j.batch)
    if rows > MAX_GENIE_ROWS:
        raise InvalidInput(where, len(jobs), f"{rows:,} GENIE placements to evaluate; split the queue")


def _time(value: float, where: str) -> float:
    if not math.isfinite(value) or abs(value) > MAX_ABS_TIME_S:
        raise InvalidInput(where, value, f"must be a time within ±{MAX_ABS_TIME_S:.0e} s")
    return value


# ---- the cluster -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCacheView:
    """The server's node cache at one moment: its nodes and what is in use on each."""

    nodes: list[Node]
    used_gpus: list[int]
    used_cpu_milli: list[int]
    used_memory_mib: list[int]

    @classmethod
    def of(cls, state: ClusterState) -> NodeCacheView:
        """Read ``state`` (call with the cache's lock held). A shared GPU counts as used."""
        return cls(
            list(state.nodes),
            (state.gpu_cap - state.free_gpus).tolist(),
            (state.cpu_cap - state.free_cpu).tolist(),
            (state.mem_cap - state.free_mem).tolist(),
        )


def _nodes_from_specs(specs: Sequence[pb.NodeSpec], partition: str) -> tuple[list[Node], list[Allocation | None]]:
    if len(specs) > MAX_NODES:
        raise InvalidInput("nodes", len(specs), f"at most {MAX_NODES:,} nodes")
    nodes: list[Node] = []
    used: list[Allocation | None] = []
    seen: set[str] = set()
    for i, s in enumerate(specs):
        where = f"nodes[{s.name or i}]"
        if s.name in seen:
            raise InvalidInput("nodes", s.name, "duplicate node name")
        seen.add(s.name)
        if s.gpus > MAX_GPUS_PER_NODE:
            raise InvalidInput(f"{where}.gpus", s.gpus, f"must be <= {MAX_GPUS_PER_NODE}")
        try:
            node = Node(s.name, s.gpus, s.gpu_model, s.cpu_milli, s.memory_mib, s.vc or partition, s.switch, s.rack)
        except InvalidInput as exc:
            raise _renamed(exc, where) from None
        ids = list(s.used_gpu_ids)
        if any(g < 0 or g >= s.gpus for g in ids) or len(set(ids)) != len(ids):
            raise InvalidInput(f"{where}.used_gpu_ids", ids, f"must be distinct GPU ids in [0, {s.gpus})")
        for name, value, cap in (
            ("used_cpu_milli", s.used_cpu_milli, s.cpu_milli),
            ("used_memory_mib", s.used_memory_mib, s.memory_mib),
        ):
            if value < 0 or (cap and value > cap):
                raise InvalidInput(f"{where}.{name}", value, f"must be in [0, {cap}]" if cap else "must be >= 0")
        nodes.append(node)
        held = ids or s.used_cpu_milli or s.used_memory_mib
        used.append(
            Allocation((NodeGrant(i, tuple(ids), 1000, int(s.used_cpu_milli), int(s.used_memory_mib)),))
            if held
            else None
        )
    return nodes, used


def _allocation(spec: pb.AllocationSpec, cluster: ClusterState, job: Job | None, where: str) -> Allocation | None:
    """An AllocationSpec as a core Allocation; CPU and memory default to the job's share per node."""
    if not spec.grants:
        return None
    total = sum(len(g.gpu_ids) for g in spec.grants)
    grants = []
    for k, g in enumerate(spec.grants):
        node = cluster.index.get(g.node)
        if node is None:
            raise InvalidInput(f"{where}.grants[{k}].node", g.node, "is not a node of the cluster")
        ids = tuple(int(x) for x in g.gpu_ids)
        cap = int(cluster.gpu_cap[node])
        if any(x < 0 or x >= cap for x in ids) or len(set(ids)) != len(ids):
            raise InvalidInput(f"{where}.grants[{k}].gpu_ids", list(ids), f"must be distinct GPU ids in [0, {cap})")
        # the job's share per node as the core grants it: by GPUs, or evenly over a CPU job's grants
        part, whole = (len(ids), total) if total else (1, len(spec.grants))
        cpu, mem = _opt(g, "cpu_milli"), _opt(g, "memory_mib")
        if cpu is None:
            cpu = share(job.cpu_milli, part, whole) if job is not None else 0
        if mem is None:
            mem = share(job.memory_mib, part, whole) if job is not None else 0
        if cpu < 0 or mem < 0:
            raise InvalidInput(f"{where}.grants[{k}]", (cpu, mem), "CPU and memory must be >= 0")
        grants.append(NodeGrant(node, ids, 1000, int(cpu), int(mem)))
    return Allocation(tuple(grants), cluster.cross_switch([g.node for g in grants]))


def _book(cluster: ClusterState, alloc: Allocation, where: str) -> None:
    try:
        cluster.allocate(alloc)
    except InvalidInput as exc:
        raise InvalidInput(where, exc.value, f"{exc.reason} (held twice in the request)") from None


def _book_others(cluster: ClusterState, view: NodeCacheView) -> None:
    """What the cache sees in use beyond the request's running jobs is held by others."""
    for i in range(len(view.nodes)):
        gpus = max(view.used_gpus[i] - int(cluster.gpu_cap[i] - cluster.free_gpus[i]), 0)
        cpu = max(view.used_cpu_milli[i] - int(cluster.cpu_cap[i] - cluster.free_cpu[i]), 0)
        mem = max(view.used_memory_mib[i] - int(cluster.mem_cap[i] - cluster.free_mem[i]), 0)
        if gpus or cpu or mem:
            req = PlacementRequest(gpus, cpu_milli=cpu, memory_mib=mem)
            cluster.allocate(Allocation((cluster.grant(i, gpus, req, gpus),)))


# ---- the request -----------------------------------------------------------------------------------


@dataclass(slots=True)
class AdmitInput:
    """An AdmitRequest in the core's types: the arguments of one ``admit`` call."""

    runtime: PartitionRuntime
    waiting: list[Job]
    running: list[RunningJob]
    cluster: ClusterState
    now: float
    carry: Carry
    estimate: Estimate | None

    def admit(self, explain: bool = True) -> AdmissionResult:
        return admit(
            self.runtime,
            self.waiting,
            self.running,
            self.cluster,
            self.now,
            carry=self.carry,
            estimate=self.estimate,
            explain=explain,
        )


def _partition(spec: pb.PartitionSpec) -> Partition:
    quota = _opt(spec, "gpu_quota")
    try:
        return Partition(
            spec.name or "default",
            policy=spec.policy or "fifo",
            placement=spec.placement or "consolidate",
            backfill=spec.backfill or "none",
            relax_factor=0.1 if not spec.HasField("relax_factor") else spec.relax_factor,
            gpu_quota=None if quota is None else int(quota),
            theta=genie.DEFAULT_THETA if not spec.HasField("theta") else spec.theta,
        )
    except InvalidInput as exc:
        raise _renamed(exc, "partition") from None


def _expected_run(job: Job) -> float | None:
    d = job.predicted_duration if job.predicted_duration is not None else job.requested_duration
    return None if d is None else d


def _carry(spec: pb.CarrySpec, cluster: ClusterState) -> Carry:
    if spec.max_queue_len < 0:
        raise InvalidInput("carry.max_queue_len", spec.max_queue_len, "must be >= 0")
    res = None
    if spec.HasField("reservation"):
        r = spec.reservation
        if not r.job_id:
            raise InvalidInput("carry.reservation.job_id", r.job_id, "must name the reserved head")
        for name, value in (("start", r.start), ("latest", r.latest)):
            if math.isnan(value):
                raise InvalidInput(f"carry.reservation.{name}", value, "must be a number")
        alloc = _allocation(r.allocation, cluster, None, "carry.reservation.allocation")
        res = HeadReservation(r.job_id, r.start, r.latest, alloc, tuple(r.backfilled))
    return Carry(res, int(spec.max_queue_len))


def order_context(
    part: Partition, cluster: ClusterState, running: Sequence[RunningJob], now: float, modeldb: ModelDB
) -> OrderContext:
    """The ordering context of a partition as the simulator keeps it: the platform is the partition's
    nodes (``ClusterState.platform``); Capacity's usage is the GPUs the running jobs hold by model type,
    DRF's their requests by user. The operator builds its contexts here too."""
    mask = cluster.vc_id == cluster.vc_index(part.name)
    by_model: dict[str, int] = {}
    by_user: dict[str, tuple[int, int]] = {}
    for r in running:  # usage as the simulator keeps it: GPUs held (by type), requested GPUs and CPU (by user)
        j = r.job
        model, held = model_usage(j, r.allocation)
        by_model[model] = by_model.get(model, 0) + held
        g, c = by_user.get(j.user, (0, 0))
        by_user[j.user] = (g + j.gpus, c + j.cpu_milli)
    return OrderContext(
        now=now,
        platform=cluster.platform(mask),
        modeldb=modeldb,
        theta=part.theta,
        usage_by_model=by_model,
        usage_by_user=by_user,
        total_gpus=max(int(cluster.gpu_cap[mask].sum()), 1),
        total_cpu_milli=max(int(cluster.cpu_cap.sum()), 1),
    )


def admit_input(
    req: pb.AdmitRequest,
    modeldb: ModelDB,
    cache: Callable[[], NodeCacheView | None] | None = None,
    cancel: Callable[[], None] | None = None,
) -> AdmitInput:
    """Validate and translate a request; bad input raises InvalidInput naming the field.

    ``cache``: the server's node cache, read only when the request has no nodes.
    """
    if len(req.waiting) + len(req.running) > MAX_JOBS:  # refused before any work
        raise InvalidInput("jobs", len(req.waiting) + len(req.running), f"at most {MAX_JOBS:,} jobs per call")
    part = _partition(req.partition)
    now = _time(req.now, "now")
    if req.nodes:
        nodes, used = _nodes_from_specs(req.nodes, part.name)
        view = None
    else:
        view = cache() if cache is not None else None
        if view is None:
            raise InvalidInput("nodes", [], NO_CACHE)
        nodes, used = view.nodes, []
    cluster = ClusterState(nodes)
    for alloc in used:
        if alloc is not None:
            _book(cluster, alloc, f"nodes[{nodes[alloc.grants[0].node].name}].used_gpu_ids")
    mask = cluster.vc_id == cluster.vc_index(part.name)
    if cluster.vc_index(part.name) < 0:
        raise InvalidInput("partition.name", part.name, "no node of the cluster is in this partition (node vc)")
    if cancel is not None:
        cancel()

    ids: set[str] = set()

    def unique(job: Job, where: str) -> Job:
        if job.id in ids:
            raise InvalidInput(where, job.id, "duplicate job id")
        ids.add(job.id)
        return job

    waiting = [
        unique(job_from_spec(s, f"waiting[{s.id or i}]", part.name), "waiting") for i, s in enumerate(req.waiting)
    ]
    backfill = part.backfill != "none"
    running: list[RunningJob] = []
    for i, r in enumerate(req.running):
        where = f"running[{r.job.id or i}]"
        job = unique(job_from_spec(r.job, f"{where}.job", part.name), "running")
        start = _time(r.start, f"{where}.start")
        end = _opt(r, "expected_end")
        if end is None:
            d = _expected_run(job)
            if d is None and backfill:
                raise InvalidInput(
                    f"{where}.expected_end", None, "backfilling needs it, or the job's predicted or requested duration"
                )
            end = math.inf if d is None else start + d
        elif math.isnan(end):
            raise InvalidInput(f"{where}.expected_end", end, "must be a number")
        alloc = _allocation(r.allocation, cluster, job, f"{where}.allocation")
        if alloc is not None:
            _book(cluster, alloc, f"{where}.allocation")
        running.append(RunningJob(job, start, end, alloc))
    if view is not None:
        _book_others(cluster, view)
    estimate: Estimate | None = None
    if backfill:
        runs: dict[str, float] = {}
        for job in waiting:
            d = _expected_run(job)
            if d is None:
                raise InvalidInput(
                    f"waiting[{job.id}].predicted_duration",
                    None,
                    "backfilling needs an expected run time: give predicted_duration or requested_duration",
                )
            runs[job.id] = max(d - job.executed, 0.0)
        estimate = lambda job, alloc: runs[job.id]  # noqa: E731

    platform = cluster.platform(mask)
    # GENIE rows bound only the policies that build GENIE placement tables
    ranks = get_policy(part.policy).uses_genie
    check_queue([*waiting, *(r.job for r in running)], platform, genie_rows=ranks)
    ctx = order_context(part, cluster, running, now, modeldb)
    carry = _carry(req.carry, cluster)
    return AdmitInput(PartitionRuntime(part, ctx), waiting, running, cluster, now, carry, estimate)


def request_from_json(obj: object, where: str = "queue", source: str = "") -> pb.AdmitRequest:
    """A JSON queue description (the AdmitRequest message in protobuf's JSON mapping) as a request;
    field names as in the proto or in lowerCamelCase, unknown fields refused."""
    if not isinstance(obj, dict):
        raise InvalidInput(where, source or type(obj).__name__, "expected a JSON object (an AdmitRequest)")
    try:
        return json_format.ParseDict(obj, pb.AdmitRequest())
    except json_format.ParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__  # the rest lists every field
        raise InvalidInput(where, source, first) from None


# ---- the response ----------------------------------------------------------------------------------


def _allocation_spec(alloc: Allocation | None, cluster: ClusterState) -> pb.AllocationSpec:
    if alloc is None:
        return pb.AllocationSpec()
    return pb.AllocationSpec(
        grants=[
            pb.GrantSpec(
                node=cluster.nodes[g.node].name, gpu_ids=g.gpu_ids, cpu_milli=g.cpu_milli, memory_mib=g.memory_mib
            )
            for g in alloc.grants
        ]
    )


def _carry_spec(carry: Carry, cluster: ClusterState) -> pb.CarrySpec:
    out = pb.CarrySpec(max_queue_len=carry.max_queue_len)
    r = carry.reservation
    if r is not None:
        out.reservation.CopyFrom(
            pb.ReservationSpec(
                job_id=r.job_id,
                start=r.start,
                latest=r.latest,
                allocation=_allocation_spec(r.allocation, cluster),
                backfilled=r.backfilled,
            )
        )
    return out


@overload
def _allowance(x: float) -> float: ...
@overload
def _allowance(x: None) -> None: ...
def _allowance(x: float | None) -> float | None:
    # GENIE gives NaN for jobs it cannot model: they may wait forever
    return None if x is None else (math.inf if math.isnan(x) else x)


def admit_response(res: AdmissionResult, inp: AdmitInput) -> pb.AdmitResponse:
    cl = inp.cluster
    out = pb.AdmitResponse(
        preemptions=[pb.PreemptDecision(job_id=p.job.id, reason=p.reason) for p in res.preemptions],
        carry=_carry_spec(res.carry, cl),
        order=res.order,
        policy=inp.runtime.partition.policy,
    )
    for s in res.starts:
        st = out.starts.add(job_id=s.job.id, allocation=_allocation_spec(s.allocation, cl), backfilled=s.backfilled)
        if s.shape is not None:
            st.d_node, st.d_gpn = s.shape.d_node, s.shape.d_gpn
    for w in res.waiting:
        wr = out.waiting.add(
            job_id=w.job.id, code=w.code, message=w.message, position=w.position, needs=w.needs, blocking=w.blocking
        )
        if w.waiting_allowance is not None:
            wr.waiting_allowance = _allowance(w.waiting_allowance)
    return out


def explain_queue_response(res: AdmissionResult, inp: AdmitInput) -> pb.ExplainQueueResponse:
    """Every job of the policy's order with the pass's decision for it (a pass run with explain)."""
    cl = inp.cluster
    starts = {s.job.id: s for s in res.starts}
    preempted = {p.job.id: p.reason for p in res.preemptions}
    waits = {w.job.id: w for w in res.waiting}
    out = pb.ExplainQueueResponse(carry=_carry_spec(res.carry, cl), policy=inp.runtime.partition.policy)
    for pos, job_id in enumerate(res.order):
        e = out.jobs.add(job_id=job_id, position=pos)
        if job_id in starts:
            s = starts[job_id]
            e.decision = "backfill" if s.backfilled else "start"
            e.allocation.CopyFrom(_allocation_spec(s.allocation, cl))
            if s.shape is not None:
                e.d_node, e.d_gpn = s.shape.d_node, s.shape.d_gpn
        elif job_id in waits:
            w = waits[job_id]
            e.decision, e.code, e.message, e.needs, e.blocking = "wait", w.code, w.message, w.needs, w.blocking
            if w.waiting_allowance is not None:
                e.waiting_allowance = _allowance(w.waiting_allowance)
        elif job_id in preempted:
            e.decision, e.message = "preempt", preempted[job_id]
        else:  # a running job the preemptive pass keeps
            e.decision = "keep"
    return out


def response_json(msg: Any) -> dict[str, Any]:
    """A response as JSON (protobuf's mapping, the proto's field names; ±Infinity as strings)."""
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)
