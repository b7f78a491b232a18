"""The InferenceService controller (issue 12 §2): SODA's hardware-aware inference placer, live (seed 002 §V-D).

Every pass, for each InferenceService: the query rate (the annotation ``qosmos.io/qps``, or a Prometheus
instant query), its spec resolved to the core's :class:`InferenceSpec` (``core.inference.resolve_spec``:
bs_gpu from the model database unless profiled, CPU serving from SODA's measurements unless profiled) and
the placer's carried :class:`InferenceState`, read back from the object's status, go into the core's
:func:`~qosmos.extender.core.inference.decide` — the function ``qosmos simulate inference`` replays. The
thresholds come from the model's measured inference profile (``qosmos profile inference``; the node's GPU
model ``spec.gpuModel`` first, else the nearest) unless the spec overrides them. Switching ahead of the
load (issue 23 §3, ``spec.forecast``): the observed rates are kept per ``periodSeconds`` in memory (a
restarted operator starts a new history), a :class:`~qosmos.predictors.qps_forecast.QpsForecaster`
gives the upper band over ``readySeconds`` plus one period, and ``decide`` plans for it; the band is
written to the status (``forecastQPS``) beside the rate, so every decision can be replayed. Its
answer (mode, replicas) is written to the status FIRST (a restarted operator continues from it: the
objects are the truth), then the replica pods follow it. Nothing is decided here.

Replicas are pods the operator owns (``<service>-<gpu|cpu>-<i>``, label ``qosmos.io/inference=<service>``,
scheduled by qosmos-scheduler): a GPU replica requests one ``nvidia.com/gpu``; a CPU replica requests
``spec.cpu.coresPerReplica`` cores and no GPU, on a GPU node (SODA serves on the spare CPU of GPU nodes).
Never a gap in serving: the replicas of the old mode go only once the wanted number of new ones is
Ready; a scale-in keeps the Ready replicas. Replicas that serve nothing (not Ready) of the old mode go
at once, so a switch that is switched back never waits on pods that cannot start.

SODA's rules with training jobs: "when many CPU jobs are queuing, and the GPU resource array is idle,
we still choose GPU" is ``decide(prefer_gpu=...)``, observed here from the DLJobs and the nodes. The
replicas skip the DLJob queues (they go to the scheduler at once), and a bound replica holds its GPU or
cores in the admission cycle's books (the reconcile pass books every bound non-DLJob pod), so no DLJob is
admitted onto what the service holds.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge
from qosmos.extender.cache import GPU_RESOURCE, hard_rule_terms, pod_info, require_node_terms
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference import (
    Decision,
    InferenceSpec,
    InferenceState,
    Mode,
    Reason,
    decide,
    forecast_horizon_s,
    resolve_spec,
)
from qosmos.extender.core.inference_profiles import InferenceProfiles
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.services import ServiceReplica
from qosmos.operator import metrics
from qosmos.operator.crds import (
    ANN_QPS,
    API_VERSION,
    GROUP,
    LABEL_INFERENCE,
    VERSION,
    InferenceServiceSpec,
)
from qosmos.operator.kube import Kube
from qosmos.operator.lifecycle import not_ready_since
from qosmos.operator.translate import DEFAULT_IMAGE, SCHEDULER_NAME, meta, parse_time

log = logging.getLogger("qosmos.operator")

PLURAL = "inferenceservices"
KIND = "InferenceService"
LABEL_MODE = "qosmos.io/inference-mode"  # gpu | cpu: which set a replica belongs to
GPU_NODE_LABELS = ("nvidia.com/gpu.product", "qosmos.io/gpu-model")  # a node with either is a GPU node
PROMETHEUS_TIMEOUT_S = 3.0
# SODA §V-D2: "when many CPU jobs are queuing, and the GPU resource array is idle, we still choose GPU".
# Many: this many CPU DLJobs waiting for resources (their Admitted=False reason says so).
CPU_JOBS_QUEUED_FOR_GPU = 2
RESOURCE_WAITS = ("NoFit", "Head", "BehindHead", "Reserved")
PREFER_GPU_REFRESH_S = 5.0
QPS_DIGITS = 6  # the rate is rounded before deciding, so the status holds exactly what decide() saw

SWITCHES = Counter("qosmos_operator_inference_switches_total", "CPU/GPU switches", ["namespace", "name"])
LOST = Counter(
    "qosmos_operator_inference_replicas_lost_total", "replicas replaced: their node not Ready", ["namespace", "name"]
)
REPLICAS = Gauge("qosmos_operator_inference_replicas", "replicas wanted", ["namespace", "name", "mode"])
OBSERVED_QPS = Gauge("qosmos_operator_inference_qps", "query rate of the last decision", ["namespace", "name"])


# --------------------------------------------------------------------------- times


def stamp(t: float) -> str:
    """RFC 3339 with microseconds: the placer's times (a wait of 5 s must not round to whole seconds)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def quantize(t: float) -> float:
    """``t`` as its status stamp reads back, so a decision is made on exactly the time it records."""
    back = parse_time(stamp(t))
    assert back is not None
    return back


# --------------------------------------------------------------------------- CRD <-> core


def spec_of(spec: InferenceServiceSpec, db: ModelDB, profiles: InferenceProfiles | None = None) -> InferenceSpec:
    """The core's spec of an InferenceService (``resolve_spec``: the overrides of the spec, then the measured
    inference profiles — None: the built-in ones — then the model database and SODA's rates). Raises
    InvalidInput (an unknown model, a target no GPU meets)."""
    return resolve_spec(
        spec.model_type,
        spec.qos_target_ms,
        db=db,
        gpu_switch_batch=spec.gpu_switch_batch,
        cpu_cores_per_replica=spec.cpu.cores_per_replica,
        cpu_max_batch=spec.cpu.max_batch,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        cpu_max_replicas=spec.cpu.max_replicas,
        scale_out_threshold=spec.scale_out_threshold,
        hysteresis=spec.hysteresis,
        switch_cooldown_s=spec.switch_cooldown_seconds,
        scale_in_after_s=spec.scale_in_after_seconds,
        scale_out_after_s=spec.scale_out_after_seconds,
        inference_profiles=profiles,
        gpu_model=spec.gpu_model,
    )


@dataclass(slots=True)
class RateHistory:
    """Observed query rates per ``period_s`` slot (the largest seen in a slot; a slot without a sample
    repeats the last), oldest first, at most ``limit`` slots: what the forecaster learns from."""

    period_s: float
    limit: int = 2000
    start: float | None = None
    slots: list[float] = field(default_factory=list)

    def observe(self, now: float, qps: float) -> None:
        i = -1 if self.start is None else int((now - self.start) // self.period_s)
        if self.start is None or i < len(self.slots) - 1:  # the first sample, or a clock that went back
            self.start, self.slots = now, [qps]
            return
        if i == len(self.slots) - 1:
            self.slots[-1] = max(self.slots[-1], qps)
        else:
            self.slots.extend([self.slots[-1]] * (i - len(self.slots)))
            self.slots.append(qps)
        if len(self.slots) > self.limit:
            cut = len(self.slots) - self.limit
            del self.slots[:cut]
            self.start += cut * self.period_s


def forecaster_for(fc: Any) -> Any:
    """A forecaster for an InferenceService's ``spec.forecast`` (horizon: the start-up plus one period)."""
    from qosmos.predictors.qps_forecast import QpsForecaster

    horizon = max(1, math.ceil(forecast_horizon_s(fc.ready_seconds, fc.period_seconds) / fc.period_seconds - 1e-9))
    return QpsForecaster(horizon=horizon, quantile=fc.quantile)


def state_of(status: Mapping[str, Any] | None) -> InferenceState | None:
    """The placer's carried state from the status; None for a service not decided yet."""
    st = status or {}
    mode, replicas = st.get("mode"), st.get("replicas")
    if mode not in (Mode.GPU.value, Mode.CPU.value) or not isinstance(replicas, int) or replicas < 0:
        return None
    return InferenceState(
        Mode(mode),
        replicas,
        last_switch_s=parse_time(st.get("lastSwitchTime")),
        switches=int(st.get("switches") or 0),
        up_since=parse_time(st.get("loadUpSince")),
        down_since=parse_time(st.get("loadDownSince")),
    )


def state_status(state: InferenceState) -> dict[str, Any]:
    """The status fields holding ``state`` (None removes a field in a merge patch)."""

    def t(x: float | None) -> str | None:
        return None if x is None else stamp(x)

    return {
        "mode": state.mode.value,
        "replicas": state.replicas,
        "lastSwitchTime": t(state.last_switch_s),
        "switches": state.switches,
        "loadUpSince": t(state.up_since),
        "loadDownSince": t(state.down_since),
    }


def serving_status(spec: InferenceSpec) -> dict[str, Any]:
    return {
        "gpuSwitchBatch": spec.gpu_switch_batch,
        "gpuReplicaQPS": round(spec.gpu.capacity_qps, 3),
        "cpuMaxBatch": spec.cpu.batch if spec.cpu is not None else 0,
        "cpuReplicaQPS": round(spec.cpu.capacity_qps, 3) if spec.cpu is not None else 0.0,
    }


# --------------------------------------------------------------------------- the load


class LoadError(Exception):
    """The query rate could not be read (said in the LoadObserved condition)."""


@dataclass(frozen=True, slots=True)
class Load:
    qps: float | None  # None: unknown
    source: str  # Annotation | Prometheus
    error: str = ""


def annotation_load(obj: Mapping[str, Any]) -> Load:
    raw = (meta(obj).get("annotations") or {}).get(ANN_QPS)
    if raw is None:
        return Load(None, "Annotation", f"no annotation {ANN_QPS} (queries per second) and no spec.load.prometheus")
    try:
        q = float(raw)
    except ValueError:
        q = math.nan
    if not (math.isfinite(q) and q >= 0):
        return Load(None, "Annotation", f"annotation {ANN_QPS}: {raw!r} is not a number of queries per second >= 0")
    return Load(q, "Annotation")


def parse_prometheus(body: bytes) -> float:
    """The rate of a Prometheus ``/api/v1/query`` answer: a scalar, or the sum of an instant vector (an
    empty vector is 0 queries/s: no series, no queries)."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise LoadError(f"Prometheus answered no JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise LoadError(f"Prometheus: {err or 'status is not success'}")
    data: Any = doc.get("data") or {}  # JSON as sent: a malformed result is refused below
    kind, result = data.get("resultType"), data.get("result")
    try:
        if kind == "scalar":
            values = [float(result[1])]
        elif kind == "vector":
            values = [float(r["value"][1]) for r in result or []]
        else:
            raise LoadError(f"Prometheus: a {kind} result; the query must give an instant vector or a scalar")
    except (TypeError, KeyError, IndexError, ValueError):
        raise LoadError("Prometheus: a malformed result") from None
    total = math.fsum(values)
    if not (math.isfinite(total) and total >= 0):
        raise LoadError(f"Prometheus: the query gives {total}, not a rate >= 0")
    return total


def prometheus_qps(url: str, query: str, timeout: float = PROMETHEUS_TIMEOUT_S) -> float:
    """GET ``url``/api/v1/query?query=... (an instant query at the server's now) and parse it."""
    full = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    req = urllib.request.Request(full, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:  # Prometheus says why in a JSON body (400 bad_data, 422, 503)
        body = exc.read()
        try:
            why = json.loads(body).get("error") or exc.reason
        except (ValueError, AttributeError):
            why = exc.reason
        raise LoadError(f"Prometheus {exc.code}: {why}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LoadError(f"Prometheus at {url} unreachable: {getattr(exc, 'reason', exc)}") from None
    return parse_prometheus(body)


# --------------------------------------------------------------------------- replica pods


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica pod as the plan sees it."""

    name: str
    mode: Mode | None  # None: a pod of ours with an unknown mode label (deleted)
    index: int
    ready: bool
    terminating: bool = False
    finished: bool = False  # Succeeded or Failed: replaced
    lost: bool = False  # on a node that is not Ready: serves nothing to count on, replaced (as the simulator's)


def is_ready(pod: Mapping[str, Any]) -> bool:
    st = pod.get("status") or {}
    if meta(pod).get("deletionTimestamp") or st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def replica_of(pod: Mapping[str, Any], down: Container[str] = ()) -> Replica:
    """``down``: the nodes that are not Ready (a replica bound there is lost)."""
    m = meta(pod)
    label = ((m.get("labels") or {}).get(LABEL_MODE) or "").upper()
    mode = Mode(label) if label in (Mode.GPU.value, Mode.CPU.value) else None
    tail = str(m.get("name", "")).rsplit("-", 1)[-1]
    phase = (pod.get("status") or {}).get("phase")
    finished = phase in ("Succeeded", "Failed")
    lost = not finished and (pod.get("spec") or {}).get("nodeName") in down
    return Replica(
        name=str(m.get("name", "")),
        mode=mode,
        index=int(tail) if tail.isdigit() else -1,
        ready=is_ready(pod) and not lost,
        terminating=bool(m.get("deletionTimestamp")),
        finished=finished,
        lost=lost,
    )


@dataclass(slots=True)
class Plan:
    """Pod writes that bring the replicas to (mode, n) without a gap in serving."""

    create: list[tuple[Mode, int]] = field(default_factory=list)  # (mode, index)
    delete: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)  # Ready replicas of the old mode deleted (a subset of delete)
    ready_after: int = 0  # Ready replicas left once the deletes are done
    complete: bool = False  # exactly n Ready replicas of the mode, nothing else


def plan(mode: Mode, n: int, replicas: Sequence[Replica]) -> Plan:
    """What to create and delete so that ``n`` replicas serve in ``mode``.

    - Finished pods, lost ones (on a node that is not Ready: the simulator asks for them again when their
      node goes down) and pods of an unknown mode go; the missing replicas of ``mode`` are created under
      the lowest free indexes (a terminating pod keeps its name until it is gone).
    - A scale-in keeps the Ready replicas (then the lowest indexes): Ready ones stay Ready.
    - Replicas of the other mode go once ``n`` replicas of ``mode`` are Ready (never a gap in serving);
      those that are not Ready serve nothing and go at once.
    """
    out = Plan()
    live = [r for r in replicas if not r.terminating]
    gone = [r for r in live if r.finished or r.lost or r.mode is None]
    out.delete += [r.name for r in gone]
    live = [r for r in live if r not in gone]
    cur = sorted((r for r in live if r.mode is mode), key=lambda r: (not r.ready, r.index))
    other = [r for r in live if r.mode is not mode]
    keep, surplus = cur[:n], cur[n:]
    out.delete += [r.name for r in surplus]
    used = {r.index for r in replicas if r.mode is mode}
    i = 0
    for _ in range(n - len(keep)):
        while i in used:
            i += 1
        out.create.append((mode, i))
        used.add(i)
    ready_new = sum(r.ready for r in keep)
    if ready_new >= n:
        out.delete += [r.name for r in other]
        out.retired = [r.name for r in other if r.ready]
        out.ready_after = ready_new
    else:
        out.delete += [r.name for r in other if not r.ready]
        out.ready_after = ready_new + sum(r.ready for r in other)
    out.complete = ready_new >= n and not surplus and not other and len(keep) == n
    return out


def pending_replica(pod: Mapping[str, Any]) -> ServiceReplica:
    """An unbound replica pod as the core's ``place_services`` sees it: what it requests, when it was
    created (the older first), and a CPU replica confined to GPU nodes (its affinity says so too)."""
    info = pod_info(pod)
    m = meta(pod)
    labels = m.get("labels") or {}
    created = parse_time(m.get("creationTimestamp"))
    return ServiceReplica(
        id=info.key,
        service=f"{info.namespace}/{labels.get(LABEL_INFERENCE, '')}",
        since=created if created is not None else 0.0,
        gpus=info.gpus,
        cpu_milli=info.cpu_milli,
        memory_mib=info.memory_mib,
        gpu_nodes_only=(labels.get(LABEL_MODE) or "").upper() == Mode.CPU.value,
    )


def replica_name(service: str, mode: Mode, index: int) -> str:
    return f"{service}-{mode.value.lower()}-{index}"


def replica_pod(obj: Mapping[str, Any], spec: InferenceServiceSpec, mode: Mode, index: int) -> dict[str, Any]:
    """One replica: the template (labels and annotations copied), owned by the InferenceService, for the
    qosmos-scheduler; its first container requests one GPU (GPU mode) or the CPU replica's cores and no
    GPU (CPU mode, on a GPU node's spare CPU)."""
    m = meta(obj)
    name, ns = str(m["name"]), str(m.get("namespace", "default"))
    template = copy.deepcopy(spec.template or {})
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), LABEL_INFERENCE: name, LABEL_MODE: mode.value.lower()}
    pspec = copy.deepcopy(template.get("spec") or {})
    containers = pspec.get("containers") or [{"name": "serve", "image": DEFAULT_IMAGE}]
    res = containers[0].setdefault("resources", {})
    req = res.setdefault("requests", {})
    lim = res.setdefault("limits", {})
    if mode is Mode.GPU:
        req[GPU_RESOURCE] = lim[GPU_RESOURCE] = "1"
    else:
        for c in containers:  # a CPU replica holds no GPU, whatever the template asks
            for part in ("requests", "limits"):
                (c.get("resources") or {}).get(part, {}).pop(GPU_RESOURCE, None)
        req["cpu"] = str(spec.cpu.cores_per_replica)
        # SODA: CPU replicas use the spare cores of GPU nodes, whatever the template's own affinity says
        gpu_node = [{"matchExpressions": [{"key": k, "operator": "Exists"}]} for k in GPU_NODE_LABELS]
        pspec["affinity"] = require_node_terms(pspec.get("affinity"), gpu_node)
    # The extender's hard rules (VirtualCluster nodes, GPU models) as required node affinity too: with
    # the extender down (ignorable), kube-scheduler then loses placement quality, never correctness.
    hard = hard_rule_terms(labels, tmeta.get("annotations") or {})
    if hard:
        pspec["affinity"] = require_node_terms(pspec.get("affinity"), hard)
    pspec["containers"] = containers
    pspec["schedulerName"] = SCHEDULER_NAME
    owner = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": m.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": replica_name(name, mode, index),
            "namespace": ns,
            "labels": labels,
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner],
        },
        "spec": pspec,
    }


# --------------------------------------------------------------------------- SODA with training jobs


def soda_prefers_gpu(
    dljobs: Sequence[Mapping[str, Any]], nodes: Callable[[], Sequence[Mapping[str, Any]]], pods: Callable[[], Any]
) -> bool:
    """SODA §V-D2: serve on GPU while CPU jobs queue for resources and a GPU idles (nodes and bound pods
    are read only when CPU jobs do queue)."""
    waiting = 0
    for j in dljobs:
        st = j.get("status") or {}
        if (j.get("spec") or {}).get("kind") != "cpu" or st.get("phase") not in (None, "Queued"):
            continue
        cond: Mapping[str, Any] = next((c for c in st.get("conditions") or [] if c.get("type") == "Admitted"), {})
        waiting += cond.get("reason") in RESOURCE_WAITS
    return waiting >= CPU_JOBS_QUEUED_FOR_GPU and idle_gpus(nodes(), pods()) > 0


def idle_gpus(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> int:
    """GPUs of schedulable nodes that no bound, unfinished pod requests."""
    total = 0
    names = set()
    for n in nodes:
        if (n.get("spec") or {}).get("unschedulable"):
            continue
        alloc = (n.get("status") or {}).get("allocatable") or {}
        try:
            total += int(alloc.get(GPU_RESOURCE, 0))
        except (TypeError, ValueError):
            continue
        names.add(meta(n).get("name"))
    used = 0
    for p in pods:
        try:
            info = pod_info(p)
        except InvalidInput:
            continue
        if info.node_name in names and not info.terminal:
            used += info.gpus
    return max(total - used, 0)


# --------------------------------------------------------------------------- the controller


@dataclass(slots=True)
class InferenceReport:
    """What one pass did (logs and tests)."""

    services: int = 0
    decisions: dict[str, Decision] = field(default_factory=dict)  # namespace/name -> the pass's decision
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    writes: int = 0
    wake_at: float | None = None  # a waiting change, a cooldown's end or the next Prometheus sample

    def wake(self, t: float | None) -> None:
        if t is not None and math.isfinite(t):
            self.wake_at = t if self.wake_at is None else min(self.wake_at, t)


def _condition(ctype: str, status: str, reason: str, message: str, now: float, old: Any) -> dict[str, Any]:
    prev = next((c for c in old or [] if c.get("type") == ctype), None)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == status else stamp(now)[:19] + "Z"
    return {"type": ctype, "status": status, "reason": reason, "message": message[:4000], "lastTransitionTime": since}


def _same_conditions(old: Any, new: list[dict[str, Any]]) -> bool:
    have = {c.get("type"): c for c in old or []}
    return all(
        c["type"] in have and all(have[c["type"]].get(k) == c[k] for k in ("status", "reason", "message")) for c in new
    )


def _conditions(
    state: InferenceState,
    load: Load,
    todo: Plan,
    replicas: Sequence[Replica],
    now: float,
    old: Any,
) -> list[dict[str, Any]]:
    mode = state.mode.value
    if todo.ready_after > 0:
        ready = ("True", "Serving", f"{todo.ready_after} Ready replica(s)")
    else:
        ready = ("False", "NoReadyReplicas", f"waiting for {state.replicas} {mode} replica(s) to be Ready")
    if todo.complete:
        progressing = ("False", "Complete", f"{state.replicas} {mode} replica(s) Ready")
    else:
        starting = sum(1 for r in replicas if r.mode is state.mode and not r.ready and not r.terminating)
        ready_now = sum(1 for r in replicas if r.mode is state.mode and r.ready and not r.terminating)
        old_ready = sum(1 for r in replicas if r.mode not in (state.mode, None) and r.ready and not r.terminating)
        why = "Switching" if old_ready else "Scaling"
        msg = f"{ready_now}/{state.replicas} {mode} replica(s) Ready, {starting} starting"
        if old_ready:
            msg += f"; {old_ready} replica(s) of the other mode serve until then"
        progressing = ("True", why, msg)
    if load.qps is not None:
        observed = ("True", load.source, f"{load.qps:.6g} queries/s from the {load.source.lower()}")
    else:
        observed = ("False", f"{load.source}Unavailable", load.error)
    return [
        _condition("Ready", *ready, now, old),
        _condition("Progressing", *progressing, now, old),
        _condition("LoadObserved", *observed, now, old),
    ]


@dataclass(frozen=True, slots=True)
class Step:
    """One service's pass, decided: the core's decision (None when the load is unknown and a state is
    carried), the state to serve, the pod plan, the status to hold, and whether it differs from the one
    held (a write is due)."""

    decision: Decision | None
    state: InferenceState
    plan: Plan
    status: dict[str, Any]
    changed: bool


def step(
    core: InferenceSpec,
    have: Mapping[str, Any],
    load: Load,
    now: float,
    replicas: Sequence[Replica],
    prefer_gpu: bool = False,
    generation: int | None = None,
    forecast_qps: float | None = None,
) -> Step:
    """Decide (the core's ``decide`` on the carried state read from the status ``have``) and plan the pods.
    ``now`` must be quantized (:func:`quantize`) so that the status records the exact time decided on.
    ``forecast_qps``: the forecast band to plan for (rounded like the rate, and recorded as ``forecastQPS``).

    The status changes (a write is due) when anything but ``observedAt`` and the conditions' times
    differs: a pass that decides as the last one did writes nothing."""
    state = state_of(have)
    status: dict[str, Any] = {}
    decision: Decision | None = None
    if load.qps is not None:
        qps = round(load.qps, QPS_DIGITS)
        band = None if forecast_qps is None else round(forecast_qps, QPS_DIGITS)
        decision = decide(core, state, qps, now, prefer_gpu=prefer_gpu, forecast_qps=band)
        status |= {"observedQPS": qps, "observedAt": stamp(now), "forecastQPS": band}
    elif state is None:  # a new service whose load is unknown: the safe mode, at its minimum
        decision = decide(core, None, 0.0, now, prefer_gpu=True)
    if decision is not None:
        state = decision.state
        status |= {
            "targetMode": decision.target_mode.value,
            "targetReplicas": decision.target_replicas,
            "reason": decision.reason.value,
            "message": decision.message[:1024],
        }
    assert state is not None  # decided above, or carried from the status
    if decision is None:
        status |= {"reason": "hold", "message": f"load unknown: {load.error}; {state.replicas} {state.mode} kept"}
    status |= state_status(state)
    todo = plan(state.mode, state.replicas, replicas)
    status["readyReplicas"] = todo.ready_after
    status["serving"] = serving_status(core)
    status["observedGeneration"] = generation
    status["conditions"] = _conditions(state, load, todo, replicas, now, have.get("conditions"))
    changed = any(have.get(k) != v for k, v in status.items() if k not in ("observedAt", "conditions"))
    changed |= not _same_conditions(have.get("conditions"), status["conditions"])
    return Step(decision, state, todo, status, changed)


def _default_profiles() -> InferenceProfiles:
    """The built-in inference profiles overlaid with the model database file's ($QOSMOS_MODELDB, else
    ~/.config/qosmos/models.json when present); a file that cannot be read leaves the built-ins."""
    from qosmos.predictors.inference_profiles import load_inference_profiles

    try:
        return load_inference_profiles()
    except (InvalidInput, OSError):
        log.exception("the model database's inference profiles could not be read: the built-in ones serve")
        return InferenceProfiles.builtin()


class InferenceController:
    """One pass over every InferenceService. Holds only caches (resolved specs, Prometheus samples)."""

    def __init__(
        self,
        kube: Kube,
        modeldb: ModelDB | None = None,
        clock: Callable[[], float] = time.time,
        fetch: Callable[[str, str], float] = prometheus_qps,
        inference_profiles: InferenceProfiles | None = None,
    ) -> None:
        self.kube = kube
        self.db = modeldb or ModelDB.builtin()
        self.profiles = inference_profiles if inference_profiles is not None else _default_profiles()
        # key -> (forecast spec, rates, forecaster, the band the status held when the history began)
        self._history: dict[str, tuple[str, RateHistory, Any, float | None]] = {}
        self.clock = clock
        self.fetch = fetch
        self._specs: dict[str, tuple[str, InferenceSpec | InvalidInput]] = {}
        self._samples: dict[str, tuple[float, Load]] = {}  # namespace/name -> (sampled at, load)
        self._missing_crd = False
        self._refusals: dict[str, str] = {}  # namespace/name -> the last refusal of a replica pod, said once
        self._prefer: tuple[float, bool] | None = None  # (read at, SODA's GPU preference)

    # ---- reads ----------------------------------------------------------------------------------
    def _services(self) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        try:
            services = self.kube.inference_services()
        except ApiException as exc:
            if exc.status == 404:  # the CRD is not installed: nothing to serve
                if not self._missing_crd:
                    log.warning("InferenceService CRD not installed: the inference controller idles")
                self._missing_crd = True
                return []
            raise
        self._missing_crd = False
        return services

    def _replica_pods(self) -> list[dict[str, Any]]:
        return self.kube.replica_pods()

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.kube.patch_inference_status(namespace, name, status)

    def _spec(self, key: str, spec: InferenceServiceSpec) -> InferenceSpec:
        text = spec.model_dump_json()
        hit = self._specs.get(key)
        if hit is None or hit[0] != text:
            try:
                hit = (text, spec_of(spec, self.db, self.profiles))
            except InvalidInput as exc:
                hit = (text, exc)
            self._specs[key] = hit
        if isinstance(hit[1], InvalidInput):
            raise hit[1]
        return hit[1]

    def _load(
        self, key: str, obj: Mapping[str, Any], spec: InferenceServiceSpec, now: float, rep: InferenceReport
    ) -> Load:
        prom = spec.load.prometheus if spec.load is not None else None
        if prom is None:
            self._samples.pop(key, None)
            return annotation_load(obj)
        last = self._samples.get(key)
        if last is not None and now - last[0] < prom.interval_seconds:
            rep.wake(last[0] + prom.interval_seconds)
            return last[1]
        try:
            load = Load(self.fetch(prom.url, prom.query), "Prometheus")
        except LoadError as exc:
            load = Load(None, "Prometheus", str(exc))
        self._samples[key] = (now, load)
        rep.wake(now + prom.interval_seconds)
        return load

    # ---- the pass -------------------------------------------------------------------------------
    def run_pass(self) -> InferenceReport:
        rep = InferenceReport()
        services = self._services()
        rep.services = len(services)
        if not services:
            self._specs.clear()
            self._samples.clear()
            return rep
        pods_by: dict[str, list[dict[str, Any]]] = {}
        for p in self._replica_pods():
            m = meta(p)
            owner = f"{m.get('namespace', 'default')}/{(m.get('labels') or {}).get(LABEL_INFERENCE, '')}"
            pods_by.setdefault(owner, []).append(p)
        prefer_gpu: bool | None = None  # read once a service can serve on CPU
        now = self.clock()  # (a node's readiness: the decisions quantize their own)
        down = (
            {str(meta(n)["name"]) for n in self.kube.nodes() if not_ready_since(n, now) is not None}
            if pods_by
            else set()
        )
        keys = set()
        for obj in services:
            m = meta(obj)
            key = f"{m.get('namespace', 'default')}/{m.get('name', '')}"
            keys.add(key)
            if m.get("deletionTimestamp"):
                continue  # the garbage collector takes its pods
            try:
                spec = InferenceServiceSpec.model_validate(obj.get("spec") or {})
            except ValueError as exc:  # the CRD refuses bad specs; an older object may still be one
                self._invalid(obj, f"spec: {exc}", rep)
                continue
            try:
                core = self._spec(key, spec)
            except InvalidInput as exc:
                self._invalid(obj, str(exc), rep)
                continue
            if prefer_gpu is None and core.cpu is not None:
                prefer_gpu = self._prefers_gpu(self.clock())
            try:
                self._service(obj, key, spec, core, pods_by.get(key, []), down, bool(prefer_gpu), rep)
            except Exception:  # one service's trouble must not stop the others
                metrics.ERRORS.labels("inference").inc()
                log.exception("InferenceService %s: pass failed (retried next pass)", key)
        self._specs = {k: v for k, v in self._specs.items() if k in keys}
        self._samples = {k: v for k, v in self._samples.items() if k in keys}
        self._history = {k: v for k, v in self._history.items() if k in keys}
        return rep

    def _prefers_gpu(self, now: float) -> bool:
        """SODA's GPU preference, read at most every ``PREFER_GPU_REFRESH_S`` (queues move slowly; a pass
        runs on every event, and the DLJob list can be long)."""
        if self._prefer is not None and now - self._prefer[0] < PREFER_GPU_REFRESH_S:
            return self._prefer[1]
        try:
            prefer = soda_prefers_gpu(
                self.kube.dljobs(), self.kube.nodes, lambda: self.kube.gang_pods() + self.kube.other_bound_pods()
            )
        except Exception:  # advice only: without it the placer follows the load alone
            metrics.ERRORS.labels("inference").inc()
            log.exception("reading the DLJob queues for SODA's GPU preference failed")
            prefer = False
        self._prefer = (now, prefer)
        return prefer

    def _service(
        self,
        obj: dict[str, Any],
        key: str,
        spec: InferenceServiceSpec,
        core: InferenceSpec,
        pods: list[dict[str, Any]],
        down: Container[str],
        prefer_gpu: bool,
        rep: InferenceReport,
    ) -> None:
        """``down``: the nodes that are not Ready (their replicas are lost and replaced)."""
        from kubernetes.client.exceptions import ApiException

        m = meta(obj)
        ns, name = str(m.get("namespace", "default")), str(m["name"])
        have: dict[str, Any] = obj.get("status") or {}
        now = quantize(self.clock())
        load = self._load(key, obj, spec, now, rep)
        band = self._forecast(key, spec, load, now, have)
        replicas = [replica_of(p, down) for p in pods]
        out = step(core, have, load, now, replicas, prefer_gpu, m.get("generation"), band)
        decision, state, todo, status = out.decision, out.state, out.plan, out.status
        if decision is not None:
            rep.decisions[key] = decision
            rep.wake(decision.retry_at)

        # the decision is written first: a restart continues from it, and the pods follow it
        if out.changed:
            self._patch_status(ns, name, status)
            rep.writes += 1
        self._events(obj, have, decision, load, todo, state)
        lost = [  # (once: a pod deleted already is terminating)
            f"{r.name} on {(p.get('spec') or {}).get('nodeName')}"
            for r, p in zip(replicas, pods, strict=True)
            if r.lost and r.name in todo.delete
        ]
        if lost:
            self.kube.event(obj, "ReplicaLost", f"node not Ready: {', '.join(lost)} replaced", KIND, "Warning")
            LOST.labels(ns, name).inc(len(lost))
        OBSERVED_QPS.labels(ns, name).set(status.get("observedQPS", have.get("observedQPS")) or 0.0)
        for mode in Mode:
            REPLICAS.labels(ns, name, mode.value).set(state.replicas if mode is state.mode else 0)

        for mode, index in todo.create:
            pod = replica_pod(obj, spec, mode, index)
            try:
                if self.kube.create_pod(pod):
                    rep.created.append(pod["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 422:
                    raise
                self._refused(obj, key, exc)  # a template the apiserver refuses: said once, retried each pass
                break
            rep.writes += 1
        for pod_name in todo.delete:
            self.kube.delete_pod(ns, pod_name)
            rep.deleted.append(pod_name)
            rep.writes += 1

    def _forecast(
        self, key: str, spec: InferenceServiceSpec, load: Load, now: float, have: Mapping[str, Any]
    ) -> float | None:
        """The rate history's newest sample and the forecast band over the start-up plus one period
        (None when the spec turns forecasting off or the load is unknown). A history begun with a band in
        the status (a restarted operator) keeps that band as a floor for its first ``fallback_window``
        slots: a restart does not forget the load it planned for."""
        fc = spec.forecast
        if not fc.enabled:
            self._history.pop(key, None)
            return None
        if load.qps is None:
            return None
        text = fc.model_dump_json()
        held = self._history.get(key)
        if held is None or held[0] != text:
            prev = have.get("forecastQPS")
            floor = float(prev) if isinstance(prev, int | float) and math.isfinite(prev) and prev >= 0 else None
            held = (text, RateHistory(fc.period_seconds), forecaster_for(fc), floor)
            self._history[key] = held
        _, history, forecaster, floor = held
        history.observe(now, round(load.qps, QPS_DIGITS))
        try:
            band = float(forecaster.upper(history.slots))
            if floor is not None and len(history.slots) < forecaster.fallback_window:
                band = max(band, floor)
            return band
        except InvalidInput:  # advice only: without it the placer follows the observed rate
            metrics.ERRORS.labels("inference").inc()
            log.exception("InferenceService %s: forecast failed", key)
            return None

    def _events(
        self,
        obj: dict[str, Any],
        have: Mapping[str, Any],
        decision: Decision | None,
        load: Load,
        todo: Plan,
        state: InferenceState,
    ) -> None:
        """Events on switches, scales, retired replicas, saturation and an unreadable load (on change only)."""
        m = meta(obj)
        ns, name = m.get("namespace", "default"), m.get("name")
        old_mode, old_n = have.get("mode"), have.get("replicas")
        if decision is not None:
            if old_mode is None:
                self.kube.event(obj, "Started", decision.message, KIND)
            elif decision.switched:
                reason = "SwitchedToCPU" if decision.mode is Mode.CPU else "SwitchedToGPU"
                self.kube.event(obj, reason, decision.message, KIND)
                SWITCHES.labels(ns, name).inc()
                log.info("InferenceService %s/%s: %s", ns, name, decision.message)
            elif old_n is not None and decision.replicas != old_n:
                reason = "ScaledOut" if decision.replicas > old_n else "ScaledIn"
                self.kube.event(obj, reason, decision.message, KIND)
                log.info("InferenceService %s/%s: %s", ns, name, decision.message)
            if decision.reason is Reason.SATURATED and have.get("reason") != Reason.SATURATED.value:
                self.kube.event(obj, "Saturated", decision.message, KIND, "Warning")
        if todo.retired:
            msg = f"{len(todo.retired)} replica(s) removed: {state.replicas} {state.mode} replica(s) are Ready"
            self.kube.event(obj, "Retired", msg, KIND)
        was: Mapping[str, Any] = next((c for c in have.get("conditions") or [] if c.get("type") == "LoadObserved"), {})
        if load.qps is None and was.get("status") != "False":
            self.kube.event(obj, "LoadUnavailable", load.error, KIND, "Warning")

    def _refused(self, obj: dict[str, Any], key: str, exc: Any) -> None:
        try:
            msg = str(json.loads(exc.body or "{}").get("message", exc))
        except ValueError:
            msg = str(exc)
        metrics.ERRORS.labels("inference").inc()
        if self._refusals.get(key) != msg:
            self._refusals[key] = msg
            self.kube.event(obj, "InvalidPod", f"replica pod refused: {msg}", KIND, "Warning")
            log.warning("InferenceService %s: replica pod refused: %s", key, msg)

    def _invalid(self, obj: dict[str, Any], why: str, rep: InferenceReport) -> None:
        """A spec the core cannot serve (an unknown model, a target no GPU meets): said on the object."""
        m = meta(obj)
        have = obj.get("status") or {}
        now = self.clock()
        cond = _condition("Ready", "False", "InvalidSpec", why, now, have.get("conditions"))
        if _same_conditions(have.get("conditions"), [cond]):
            return
        self._patch_status(str(m.get("namespace", "default")), str(m["name"]), {"conditions": [cond]})
        self.kube.event(obj, "InvalidSpec", why, KIND, "Warning")
        rep.writes += 1


# --------------------------------------------------------------------------- the runner's hooks


def register(registry: Any, poke: Callable[..., Any]) -> None:
    """kopf's handler: an InferenceService changed -> a pass (its replica pods are watched by the
    operator's informers, ``qosmos.operator.informers``)."""
    import kopf

    kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)(poke)


async def tick(ctl: InferenceController) -> float | None:
    """One pass in a worker thread; returns when the next is due (None: on events and the timer only)."""
    try:
        rep = await asyncio.to_thread(ctl.run_pass)
    except Exception:
        metrics.ERRORS.labels("inference").inc()
        log.exception("inference pass failed; retrying")
        return time.time() + 1.0
    return rep.wake_at


def soonest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


__all__ = [
    "KIND",
    "LABEL_MODE",
    "PLURAL",
    "InferenceController",
    "InferenceReport",
    "Load",
    "LoadError",
    "Plan",
    "RateHistory",
    "Replica",
    "Step",
    "annotation_load",
    "forecaster_for",
    "idle_gpus",
    "parse_prometheus",
    "pending_replica",
    "plan",
    "prometheus_qps",
    "quantize",
    "register",
    "replica_of",
    "replica_pod",
    "serving_status",
    "soda_prefers_gpu",
    "soonest",
    "spec_of",
    "stamp",
    "state_of",
    "state_status",
    "step",
    "tick",
]
