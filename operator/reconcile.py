"""One reconcile pass of the operator, in two halves (issue 21 §2): :class:`Planner` decides and
:class:`~qosmos.operator.writes.Applier` writes. ``Reconciler.run_pass`` reads a :class:`Snapshot`
(every object the pass needs, in one list each; new pod templates dry-run), ``Planner.plan(snapshot,
now)`` returns the writes (pure: no client, no clock, no threads), the applier executes them. Level-
triggered and stateless between passes (the objects are the truth), so a restarted operator continues
where the last one stopped.

Order of a plan (its stages; the sequences of one stage are applied side by side):
1. nodes: each in the first VirtualCluster (by name) whose nodeSelector matches; label
   ``qosmos.io/vc`` kept in sync (the extender reads it);
2. admitted gangs: pods of the current attempt created (gated) and ungated, pods of earlier
   attempts deleted; all pods Running -> Running, all Succeeded -> Succeeded (duration observed for
   QSSF), a Failed pod -> the gang is recreated (``status.restarts`` + 1) up to backoffLimit, then
   Failed; the run policy (suspend, deadlines, TTL), start deadlines and node loss;
3. admission per VirtualCluster (``core.admission.admit``, the function the simulator calls), each
   within its quota; VirtualClusters of one cohort (``spec.cohort``) are given to each other's pass
   (``core.cohorts``): it places on the union of their nodes, borrows the others' idle quota and
   reclaims lent GPUs by preempting borrowers, all decided by the core. A start is one sequence: the
   DLJob's status FIRST (phase Admitted, placement; only into the version the decision read), then the
   gang's pods gated with the extender's annotations and its headless Service, then the gates all
   together; preempted jobs go back to Queued (the service of their run folded into their status);
   every waiting job gets the core's reason as its ``Admitted=False`` condition. Preemptive policies
   see the running jobs' service as of the partition's latest event (``qosmos.operator.service``), as
   the simulator's event loop does;
4. the VirtualClusters' statuses;
5. the lifecycles' writes of step 2 that only record (Running, Succeeded, their Events): nothing waits
   for them, so the admissions do not wait for them either (a DLJob with a later write in the pass
   keeps its order: its records go with that write).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from qosmos.extender.admission_api import order_context
from qosmos.extender.cache import LABEL_GPU_MODEL, PodInfo, pod_info
from qosmos.extender.core import genie
from qosmos.extender.core.admission import (
    AdmissionResult,
    Partition,
    PartitionRuntime,
    RunningJob,
    WaitReason,
    admit,
)
from qosmos.extender.core.backfill import allocation_latency, expected_run, task_latency
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.cohorts import CohortMember, nominal_of, quota_state
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.failures import consecutive_failures, kept_run, node_lost_at, restart_delay
from qosmos.extender.core.forecast import Forecast, forecast
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.quota import accounting
from qosmos.extender.core.services import ServiceReplica, place_services
from qosmos.extender.core.types import Allocation, Job, SubmissionPredictions
from qosmos.operator import metrics
from qosmos.operator.ces import AWAKE, power_state
from qosmos.operator.crds import (
    LABEL_FINISHED,
    LABEL_JOB,
    LABEL_VC,
    CleanPodPolicy,
    DLJobPhase,
    DLJobSpec,
    FailureAction,
    VirtualClusterSpec,
)
from qosmos.operator.durations import Durations
from qosmos.operator.inference import pending_replica
from qosmos.operator.kube import Kube
from qosmos.operator.lifecycle import (
    DISRUPTIONS,
    Disruption,
    disruption,
    exit_codes,
    failure_action,
    not_ready_since,
    ready_since,
    start_deadline,
    started,
    termination_message,
    unstarted_nodes,
    waiting_reasons,
)
from qosmos.operator.service import TurnClock, as_of_last_event, latest_event
from qosmos.operator.translate import (
    ANN_CARRY,
    GATE,
    LABEL_ATTEMPT,
    NO_VC,
    Gang,
    allowed_nodes,
    assign_nodes,
    attempt_of,
    book_cordoned,
    book_gang,
    book_pods,
    carry_from_json,
    carry_to_json,
    constraints_of,
    core_nodes,
    gang_pods,
    has_headless_service,
    headless_service,
    job_from_dljob,
    key_of,
    meta,
    parse_time,
    pod_name,
    probe_gang,
    rank0_address,
    rfc3339,
    run_start,
    segment_start,
    service_status,
    taints_narrow,
    unusable_because,
)
from qosmos.operator.writes import (
    AnnotateVC,
    Applier,
    CreatePod,
    DeleteDLJob,
    DeletePod,
    EnsureService,
    Event,
    LabelDLJob,
    LabelNode,
    PatchStatus,
    PatchVCStatus,
    Plan,
    Recorder,
    Ungate,
    records_only,
)

log = logging.getLogger("qosmos.operator")

ANN_VC_MANAGED = "qosmos.io/vc-managed"  # on a node: its qosmos.io/vc label is the operator's
ADMITTED = "Admitted"  # the condition type saying whether (and why not) a DLJob is admitted
ACTIVE = (DLJobPhase.ADMITTED.value, DLJobPhase.RUNNING.value)
FINISHED = (DLJobPhase.SUCCEEDED.value, DLJobPhase.FAILED.value)
ALLOWANCE_STEP_S = 10  # a waiting allowance is rewritten when it moved by this much (it moves every second)
OLDEST_WAIT_STEP_S = 10
# a pass due when a waiting job's decision changes with time alone (AdmissionResult.revisit_at) runs this
# much after that instant: the core's times are relative to the pass, and Unix times round to ~2e-7 s
REVISIT_AFTER = 1e-5
MAX_FORECAST_JOBS = 500  # queues longer than this get no ETA (the forecast is a pass per event)
FORECAST_WORK = 20_000  # job decisions one forecast may make (queue length summed over its passes)
# ... and all of a pass's forecasts together: the VirtualClusters forecast longest ago go first, the
# others keep the ETAs their statuses hold (30 queues of ~500 jobs made the forecasts 45 % of a pass)
FORECAST_PASS_WORK = 60_000
ETA_STEP_S = 30
REFRESH_S = 30  # drifting numbers of a queued DLJob's status are rewritten at most this often
# ... and at most this many such refreshes a pass (the stalest first): with 2,000 jobs queued, passes
# longer than REFRESH_S (their writes included) would otherwise make every job's refresh due every pass
DRIFT_WRITES = 100
# ... refilled at this rate (a token bucket of DRIFT_WRITES): 100 a pass was a fifth of every busy pass's
# writes in Kueue's scenario (passes of 4-8 s), spent on numbers no decision reads
DRIFT_WRITES_PER_S = 5.0
NEAR_HEAD = 10  # a position coming below this is written at once (as is the head, 0)
# A DLJob's first status beyond its queue's NEAR_HEAD positions (Queued, reason, position, ETA) comes from
# a bucket of FIRST_WRITES refilled at FIRST_WRITES_PER_S, the front of every queue first: in Kueue's
# file (15,000 DLJobs within a minute) the first passes were 37-51 s of 2,400-4,100 first statuses each
# while every queue admitted one job a pass; a job admitted before its turn never needs one.
FIRST_WRITES = 200
FIRST_WRITES_PER_S = 20.0


@functools.cache
def reason_of(code: str) -> str:
    """A WaitReason code as a condition reason (CamelCase: no-fit -> NoFit)."""
    return "".join(p.capitalize() for p in code.replace("_", "-").split("-")) or "Waiting"


def condition(status: str, reason: str, message: str, now: float, old: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The Admitted condition; its transition time moves only when its status does."""
    prev = next((c for c in old or [] if c.get("type") == ADMITTED), None)
    since = prev["lastTransitionTime"] if prev and prev.get("status") == status else rfc3339(now)
    return {"type": ADMITTED, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}


def _run_end(dl: DL, now: float) -> float:
    """Where the current run segment ends when its gang stops now: at ``status.stalledSince`` when a node
    of it stopped being Ready before (its pods there ran no further), else now."""
    stalled = parse_time(dl.status.get("stalledSince"))
    return now if stalled is None else min(stalled, now)


def _same_condition(old: list[dict[str, Any]] | None, new: dict[str, Any]) -> bool:
    prev = next((c for c in old or [] if c.get("type") == ADMITTED), None)
    return prev is not None and all(prev.get(k) == new[k] for k in ("status", "reason", "message"))


@dataclass(slots=True)
class DL:
    """A DLJob of this pass: the object, its spec, and its core Job."""

    obj: dict[str, Any]
    spec: DLJobSpec
    job: Job

    @property
    def status(self) -> dict[str, Any]:
        return self.obj.get("status") or {}

    @property
    def phase(self) -> str | None:  # read ~20 times per DLJob per pass: no call through status
        st = self.obj.get("status")
        return st.get("phase") if st else None

    @property
    def name(self) -> str:
        return str(meta(self.obj)["name"])

    @property
    def namespace(self) -> str:
        return str(meta(self.obj).get("namespace", "default"))

    @property
    def uid(self) -> str:
        """Its uid (its job id where an object has none, as in tests): what outlives a re-creation's name."""
        return str(meta(self.obj).get("uid") or self.job.id)


@dataclass(slots=True)
class PassReport:
    """What one pass did (tests and logs)."""

    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    pods_created: int = 0
    replicas_booked: int = 0  # InferenceService replica pods not bound yet, booked before the queues
    writes: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds of read, plan, apply, ... (the log line)
    status_writes: dict[str, int] = field(default_factory=dict)  # DLJob status patches planned, by why (the log line)
    wake_at: float | None = None  # the earliest turn end of a running job (preemptive policies): pass then
    terminating: int = 0  # gang pods no current gang owns that still hold devices (booked until gone)
    vc_of: dict[str, str] = field(default_factory=dict)  # admitted job -> its VirtualCluster (metrics)

    def wake(self, at: float) -> None:
        """Ask for a pass at ``at`` (a turn end, a restart's back-off)."""
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)


@dataclass(slots=True)
class Snapshot:
    """What one pass reads, as read (the plan's only input besides the clock and its memory): the
    DLJobs already parsed (one validation each), the objects otherwise untouched."""

    vcs: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    jobs: list[DL]
    pods: list[dict[str, Any]]  # gang pods
    pending: list[dict[str, Any]] = field(default_factory=list)  # inference replica pods not bound yet
    others: list[dict[str, Any]] = field(default_factory=list)  # other bound, non-terminal pods
    # gang pods gone after a disruption (a drain's eviction, ...): namespace/name -> how
    disrupted: dict[str, Disruption] = field(default_factory=dict)
    # the apiserver selects DLJobs by status.retired: a finished one retires in its finishing status
    # write; otherwise (Kubernetes 1.30, an older CRD) by the label qosmos.io/finished, one write more
    retire_in_status: bool = False


Parsed = dict[str, tuple[str, DLJobSpec, Job]]
"""uid -> (resourceVersion, spec, Job) of the DLJobs parsed last pass (:func:`parse_dljobs`)."""


def parse_dljobs(objs: list[dict[str, Any]], parsed: Parsed | None = None) -> list[DL]:
    """The DLJobs as the pass's domain objects; one the model refuses is skipped, saying why.

    ``parsed``: what the last pass parsed, reused for an object whose resourceVersion has not moved
    (with ~12,000 DLJobs queued, validating every spec each pass was a quarter of the operator's
    CPU) and updated to this pass's. A plan never changes a snapshot's spec or Job (it works
    on :func:`_own` copies), so sharing them between passes is safe."""
    jobs: list[DL] = []
    seen: Parsed = {}
    for obj in objs:
        m = meta(obj)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        hit = parsed.get(uid) if parsed is not None and uid and rv else None
        if hit is not None and hit[0] == rv:
            spec, job = hit[1], hit[2]
        else:
            try:
                spec = DLJobSpec.model_validate(obj.get("spec") or {})
                job = job_from_dljob(obj, spec=spec)
            except (ValueError, InvalidInput) as exc:
                log.warning("DLJob %s skipped: %s", key_of(obj), exc)
                metrics.ERRORS.labels("translate").inc()
                continue
        if uid and rv:
            seen[uid] = (rv, spec, job)
        jobs.append(DL(obj, spec, job))
    if parsed is not None:
        parsed.clear()
        parsed.update(seen)
    return jobs


def _field_copier(cls: type[Job]) -> Callable[[Job], Job]:
    """A field-for-field copy of a slotted dataclass, without its ``__init__`` (``dataclasses.replace``
    re-validates every field in ``__post_init__``), compiled as dataclasses compiles its own methods:
    the plan copies every DLJob's Job twice a pass, and a loop of setattr calls was a quarter of a
    plan's time with 15,000 DLJobs queued (``benchmarks/plan_at_scale.py``)."""
    names = [f.name for f in dataclasses.fields(cls)]
    src = "def copy(job):\n    out = new(cls)\n" + "".join(f"    out.{n} = job.{n}\n" for n in names)
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec(src + "    return out\n", scope)
    return scope["copy"]  # type: ignore[no-any-return]


_copy_job = _field_copier(Job)


def _own(dl: DL) -> DL:
    """The plan's DL of a snapshot's DLJob: its own Job (the plan sets predictions and service on it)
    and the snapshot's object, which :meth:`Planner._patch` replaces with a new one rather than
    changes, so its status writes are mirrored here and never on the snapshot."""
    return DL(dl.obj, dl.spec, _copy_job(dl.job))


@dataclass(slots=True)
class Memory:
    """What the planner remembers between passes; none of it is a decision's only source (a restarted
    operator rebuilds it at the cost of some writes)."""

    refreshed: dict[str, float] = field(default_factory=dict)  # job id -> last wait-status write
    headless: set[str] = field(default_factory=set)  # DLJob uids whose headless Service exists
    # (namespace, digest of a DLJob spec) -> the apiserver's refusal of its pod's dry run (None: accepted)
    templates: dict[tuple[str, str], str | None] = field(default_factory=dict)
    specs: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)  # (uid, generation) -> that key
    refused: dict[tuple[str, int], str] = field(default_factory=dict)  # (uid, attempt) -> pod refused (422)
    turns: TurnClock = field(default_factory=TurnClock)  # turn ends under preemptive policies (a cache)
    # VirtualCluster -> its DLJobs not finished at the last pass: one gone since was deleted, an event
    active: dict[str, set[str]] = field(default_factory=dict)
    forecast_at: dict[str, float] = field(default_factory=dict)  # VirtualCluster -> its last ETA forecast
    drift: tuple[float, float] | None = None  # (time, drift refreshes left to spend then): the bucket
    first: tuple[float, float] | None = None  # (time, first statuses left to spend then): FIRST_WRITES
    # the nodes cordoned by others (kubectl cordon, drain; not CES) at the last pass: one cordoned or
    # uncordoned since is an event of every partition, as a drain's start and end are the simulator's
    cordoned: frozenset[str] | None = None


class _Etas(Protocol):
    """A VirtualCluster's ETA forecast (given a work cap) from ``books``, the cluster as its pass left it."""

    def __call__(self, max_work: int, books: ClusterState) -> Forecast: ...


@dataclass(frozen=True, slots=True)
class Waits:
    """A VirtualCluster's jobs left waiting by its admission pass: (DLJob, the core's reason, message),
    and its ETA forecast (given a work cap) if its policy has one."""

    vc: str
    etas: Callable[[int], Forecast] | None
    jobs: list[tuple[DL, WaitReason, str]]


class Planner:
    """Every decision of a pass: :meth:`plan` turns a :class:`Snapshot` and the time into the writes that
    make the objects follow them (:mod:`qosmos.operator.writes`). No client, no clock, no threads. Its
    caches (policy runtimes, GENIE tables) change no decision; its :class:`Memory` holds what earlier
    passes learnt from the apiserver (template verdicts, refused pods, existing Services) and when each
    queued job's status was last refreshed."""

    def __init__(self, modeldb: ModelDB | None = None, durations: Durations | None = None) -> None:
        self.modeldb = modeldb or ModelDB.builtin()
        self.durations = durations or Durations(None)
        # QSSF's run times, predicted when a DLJob is first seen and kept (the simulator's rule)
        self.predictions = SubmissionPredictions(self.durations)
        self.memory = Memory()
        self._runtimes: dict[str, tuple[Partition, PartitionRuntime]] = {}
        self._node_vc: dict[str, str] = {}  # node -> its VirtualCluster, as of this pass
        self._nodes: Mapping[str, Mapping[str, Any]] = {}  # node name -> the Node, as of this pass
        self._unusable: dict[str, list[str]] = {}  # VirtualCluster -> "node (why)" of its nodes taking nothing new
        self._w = Recorder()
        self._deleted: set[str] = set()  # pods deleted in the current plan (each once)
        self._leaving: set[str] = set()  # nodes with a pod terminating (as of the pass, and its deletions)
        self._drift: list[tuple[float, DL, dict[str, Any]]] = []  # (last write, job, drift-only patch)
        self._first: list[tuple[int, DL, dict[str, Any]]] = []  # (queue position, job, its first status)
        self._waits: list[Waits] = []  # each VirtualCluster's jobs left waiting this pass, for _write_waits
        self._retire_in_status = False  # the pass's Snapshot.retire_in_status
        self._disruptions: Mapping[str, Disruption] = {}  # the pass's Snapshot.disrupted
        self._waiting: dict[str, list[Job]] = {}  # VirtualCluster -> its waiting jobs (until a phase moves)

    def templates_to_probe(self, snap: Snapshot) -> list[tuple[tuple[str, str], dict[str, Any]]]:
        """Waiting DLJobs whose template has no verdict yet: (key, one pod of its gang) to dry-run, one per
        distinct key (DLJobs applied from one manifest under different names are asked once)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for dl in snap.jobs:
            if dl.phase not in (None, DLJobPhase.QUEUED.value):
                continue
            key = self._template_key(dl)
            if key not in self.memory.templates and key not in out:
                try:
                    out[key] = gang_pods(dl.obj, probe_gang(dl.spec), attempt_of(dl.status))[0]
                except Exception as exc:  # not the template's fault: no verdict, asked again next pass
                    log.warning("dry run of %s's pod template not made: %s", dl.job.id, exc)
        return list(out.items())

    def _template_key(self, dl: DL) -> tuple[str, str]:
        """(namespace, digest of the DLJob's spec): the apiserver's verdict on a pod template depends on
        the template, the spec's shape of the gang and the namespace's admission (LimitRanges, Pod
        Security, webhooks), not on the job's name; a new spec generation is another key. Digests are
        remembered per (uid, generation): a pass does not re-serialise every waiting spec."""
        ident = _spec_ident(dl)
        key = self.memory.specs.get(ident)
        if key is None:
            text = json.dumps(dl.obj.get("spec") or {}, sort_keys=True, separators=(",", ":"))
            key = self.memory.specs[ident] = (dl.namespace, hashlib.sha256(text.encode()).hexdigest())
        return key

    # ------------------------------------------------------------------------------------------
    def plan(self, snap: Snapshot, now: float) -> tuple[Plan, PassReport]:
        """The pass's writes, in stages (see the module docstring for the order), and what it decided."""
        rep = PassReport()
        self._w = Recorder()
        self._deleted = set()
        self._drift = []
        self._first = []
        self._waits = []
        self._retire_in_status = snap.retire_in_status
        self._disruptions = snap.disrupted
        self._waiting = {}
        self._events: dict[str, float] = {}  # VirtualCluster -> its own latest event (status.lastEventTime)
        self._lost_at: dict[str, float] = {}  # VirtualCluster -> its latest lifecycle requeue (NodeLost, Disrupted)
        self._lost: set[str] = set()  # jobs this pass's lifecycle requeued (a node of theirs lost, a disruption)
        jobs = [_own(dl) for dl in snap.jobs]
        self.predictions.retain({dl.uid for dl in jobs if dl.phase not in FINISHED})
        nodes, pods, others = snap.nodes, snap.pods, snap.others
        # nodes where a pod is still terminating (and, as the pass deletes more, those too): a new gang's
        # pods are created there only once they are gone (see _ensure_gang)
        self._leaving = {n for p in [*pods, *others] if meta(p).get("deletionTimestamp") and (n := _holding(p))}

        vc_specs: dict[str, VirtualClusterSpec] = {}
        for v in snap.vcs:
            try:
                vc_specs[meta(v)["name"]] = VirtualClusterSpec.model_validate(v.get("spec") or {})
            except ValueError as exc:  # the CRD refuses bad specs; an older object may still be one
                log.warning("VirtualCluster %s skipped: %s", meta(v).get("name"), exc)
        vcs = [v for v in snap.vcs if meta(v)["name"] in vc_specs]
        assignment = assign_nodes(nodes, vcs)
        self._node_vc = assignment  # a gang pod on a cohort member's node is labelled with its VC
        self._sync_node_labels(nodes, assignment, set(vc_specs))
        self._w.stage()  # labels first: the extender reads them when the gangs' pods are scheduled

        pods_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in pods:
            m = meta(p)
            pods_of[f"{m.get('namespace', 'default')}/{(m.get('labels') or {}).get(LABEL_JOB, '')}"].append(p)

        # 2. admitted gangs: each writes only its own DLJob and pods (sequences side by side)
        by_name = {str(meta(n)["name"]): n for n in nodes}
        self._nodes = by_name  # (a GENIE task's work left is counted on its node's GPU model: _fold)
        self._unusable = _unusable_by_vc(by_name, assignment)
        gone = {dl.job.id for dl in jobs if self._run_policy(dl, pods_of.get(dl.job.id, []), now, rep)}
        jobs = [dl for dl in jobs if dl.job.id not in gone]
        for dl in jobs:
            if dl.phase not in ACTIVE:
                continue
            try:
                vc = vc_specs.get(dl.spec.virtual_cluster) or VirtualClusterSpec()
                self._lifecycle(dl, pods_of.get(dl.job.id, []), now, rep, by_name, vc)
            except Exception:  # one DLJob's trouble must not stop the others
                metrics.ERRORS.labels("job").inc()
                log.exception("DLJob %s: its lifecycle was not decided (next pass)", dl.job.id)
        for dl in jobs:  # pods of finished or requeued DLJobs that still run are stopped
            if dl.phase not in ACTIVE and not (
                dl.phase in FINISHED and dl.spec.clean_pod_policy is CleanPodPolicy.NONE
            ):
                for p in pods_of.get(dl.job.id, []):
                    if meta(p).get("deletionTimestamp"):
                        continue  # terminating already: its grace period runs
                    if dl.phase is None or dl.phase == DLJobPhase.QUEUED.value or _phase(p) not in FINISHED:
                        self._stop(dl, p)

        self._retire([dl for dl in jobs if dl.phase in FINISHED], pods_of)

        # the cluster: nodes, other pods, every admitted gang
        try:
            cluster = ClusterState(core_nodes(nodes, assignment)) if nodes else None
        except InvalidInput as exc:
            log.warning("nodes skipped: %s", exc)
            cluster = None
        infos: list[PodInfo] = []
        for p in others:
            try:
                infos.append(pod_info(p))
            except InvalidInput:
                continue
        invalid = self._check_templates([dl for dl in jobs if dl.phase in (None, DLJobPhase.QUEUED.value)], now)
        invalid |= self._suspended([dl for dl in jobs if dl.phase in (None, DLJobPhase.QUEUED.value)], now)
        by_vc: dict[str, list[DL]] = defaultdict(list)
        for dl in jobs:
            if dl.job.id not in invalid:  # held out of its queue until its template is fixed
                by_vc[dl.spec.virtual_cluster].append(dl)
        running: dict[str, list[RunningJob]] = defaultdict(list)
        # job -> node -> pods of its gang's placement booked there with no pod of its current attempt bound: a
        # restarted gang's (or a requeued one's placed there again) earlier pods still on the node hold
        # those very slots (its new pods are created once they are gone), booked once, as the simulator's
        # failed gang keeps its allocation through its back-off
        unfilled: dict[str, Counter[str]] = {}
        if cluster is not None:
            book_pods(cluster, infos)
            for dl in jobs:
                if dl.phase in ACTIVE:
                    gang = Gang.of_status(dl.status)
                    if gang is None:
                        continue
                    bound = _bound_nodes(pods_of.get(dl.job.id, []), attempt_of(dl.status))
                    unfilled[dl.job.id] = Counter(gang.node_names) - Counter(bound.values())
                    alloc = book_gang(cluster, gang, dl.spec, bound)
                    start = run_start(dl.status) or now
                    predicted = self._predicted(dl, now)
                    running[dl.spec.virtual_cluster].append(self._running(dl.job, start, alloc, predicted, cluster))
            book_cordoned(cluster, nodes)  # after the gangs: what runs there stays booked as theirs
            self._services(snap.pending, {i.key for i in infos}, jobs, running, cluster, now, rep)
            # gang pods that hold devices but are no current gang's: terminating ones of a requeued or
            # restarted job, and those of a deleted or orphaned DLJob (--cascade=orphan), stay booked
            # until the kubelet is done with them; no gang is placed on those devices before. Booked after
            # the services: a replica that preempted a job keeps the room it was given (kube-scheduler
            # binds it once the old pods are gone) instead of preempting another job every pass meanwhile
            current = {dl.job.id: attempt_of(dl.status) for dl in jobs if dl.phase in ACTIVE}
            ended = {dl.job.id for dl in jobs if dl.phase in FINISHED}
            held_by_leftovers = []
            for key, gang_of_key in pods_of.items():
                for p in gang_of_key:
                    if key in current and _attempt(p) == current[key]:
                        continue  # booked with its gang above
                    if (
                        key in ended or key in self._lost
                    ) and f"{key.split('/')[0]}/{meta(p)['name']}" in self._deleted:
                        # a gang that failed in this pass, or that it requeued (a lost node, a disruption), its pods
                        # stopped by it: its devices go to this pass's admissions (as the simulator frees
                        # them), as a preemption's victims' do; a gang placed there creates its pods once
                        # these are gone (_leaving)
                        continue
                    node = (p.get("spec") or {}).get("nodeName")
                    if node and _phase(p) not in FINISHED:
                        if unfilled.get(key, Counter())[node] > 0:
                            unfilled[key][node] -= 1  # an earlier attempt's pod in its gang's slot there
                            continue
                        try:
                            held_by_leftovers.append(pod_info(p))
                        except InvalidInput:
                            continue
            book_pods(cluster, held_by_leftovers)
            rep.terminating = len(held_by_leftovers)
            confine([dl for dl in jobs if dl.phase in (None, DLJobPhase.QUEUED.value)], nodes, cluster)

        # DLJobs naming a missing VirtualCluster wait, saying so
        for name, group in by_vc.items():
            if name not in vc_specs:
                for dl in group:
                    if dl.phase in (None, DLJobPhase.QUEUED.value):
                        self._wait_status(
                            dl,
                            "VirtualClusterMissing",
                            f"VirtualCluster {name} does not exist",
                            None,
                            None,
                            now,
                        )
        # the lifecycles' writes that free GPUs (requeues, deletions) before the admissions; those that only
        # record (Running, Succeeded, their Events) after every other stage: with a few hundred
        # admissions a pass on a busy apiserver, they delayed each new gang's pods by 1-5 s
        self._w.stage(defer=records_only)

        # each VirtualCluster's latest event (preemptive policies read service as of it; in a cohort, of
        # any member's), kept in its status: a retired DLJob's finish is not in the working set any more
        active: dict[str, set[str]] = {}

        def cohort_of(vc: str) -> str:  # (a VirtualCluster without one is a cohort of its own)
            return vc_specs[vc].cohort or f"/{vc}"

        waits = {cohort_of(n) for n in vc_specs if self._waiting_jobs(n, by_vc)}
        # a node going down or coming back is an event of every partition (the simulator passes them all),
        # a gang requeued because its node was lost one of its own; a node cordoned or uncordoned since the
        # last pass (a drain), now (the node says not when: a restarted operator sees none of those)
        moved = [t for n in nodes if (t := ready_since(n)) is not None and t <= now]
        cordoned = frozenset(
            meta(n)["name"] for n in nodes if (n.get("spec") or {}).get("unschedulable") and power_state(n) == AWAKE
        )
        if self.memory.cordoned is not None and cordoned != self.memory.cordoned:
            moved.append(now)
        self.memory.cordoned = cordoned
        for v in vcs:
            name = meta(v)["name"]
            group = by_vc.get(name, [])
            status = v.get("status") or {}
            since = max(
                [
                    t
                    for t in (parse_time(status.get("lastEventTime")), self._lost_at.get(name), *moved)
                    if t is not None
                ],
                default=None,
            )
            active[name] = {d.job.id for d in group if d.phase not in FINISHED}
            was = self.memory.active.get(name)
            if (was - {d.job.id for d in group}) if was is not None else deleted_since_count(status, group):
                since = now  # a DLJob deleted before it finished (the simulator's withdrawal): an event now
            got = latest_event(
                self._runtime(name, vc_specs[name]).policy,
                self.memory.turns,
                [(d.status, d.job) for d in group],
                running.get(name, []),
                now,
                since,
            )
            if got is not None:
                self._events[name], turn_end = got
                # a turn end is an event of the whole cohort: a pass is due then where any member has a
                # job waiting (one with nothing waiting, nor its mates, would decide nothing)
                if turn_end is not None and cohort_of(name) in waits:
                    rep.wake(turn_end)
        self.memory.active = active

        # 3. admission, one VirtualCluster at a time; a cohort's passes see each other's starts and
        # reclaims (a reclaimed job of another member leaves its ``running`` list and the cluster)
        all_jobs = {dl.job.id: dl for dl in jobs}
        for v in sorted(vcs, key=lambda v: meta(v)["name"]):
            name = meta(v)["name"]
            if cluster is None:
                break
            try:
                members = self._members(name, vc_specs, by_vc, running, now)
                self._admit_vc(v, vc_specs[name], by_vc.get(name, []), running, members, all_jobs, cluster, now, rep)
            except Exception:
                metrics.ERRORS.labels("admit").inc()
                log.exception("admission pass of VirtualCluster %s failed", name)
        self._write_waits(now)
        self._write_first(now)
        self._refresh_drift(now)
        self._w.stage()
        self._vc_statuses(vcs, vc_specs, by_vc, running, cluster, now)
        queued = {d.job.id for d in jobs if d.phase in (None, DLJobPhase.QUEUED.value)}
        mem = self.memory
        mem.refreshed = {k: v for k, v in mem.refreshed.items() if k in queued}
        mem.headless &= {d.uid for d in jobs if d.phase in ACTIVE}
        # a refused gang whose job was deleted or requeued before its lifecycle read the refusal
        live = {(d.uid, attempt_of(d.status)) for d in jobs if d.phase in ACTIVE}
        mem.refused = {k: v for k, v in mem.refused.items() if k in live}
        mem.turns.prune()
        mem.forecast_at = {k: v for k, v in mem.forecast_at.items() if k in vc_specs}
        return self._w.done(), rep

    # ---- run policy: suspend, activeDeadlineSeconds, ttlSecondsAfterFinished ---------------------
    def _delete_pod(self, dl: DL, name: str, node: str | None) -> None:
        """Delete a pod of ``dl`` with its grace period, once a pass (a pod stopped by a requeue is still
        in the pass's snapshot without its deletionTimestamp); its node, if any, now has a pod leaving."""
        key = f"{dl.namespace}/{name}"
        if key not in self._deleted:
            self._deleted.add(key)
            if node:
                self._leaving.add(node)
            self._w.add(dl.job.id, DeletePod(dl.namespace, name))

    def _stop(self, dl: DL, pod: Mapping[str, Any]) -> None:
        """:meth:`_delete_pod` of a pod object: its node has a pod leaving while it still holds devices."""
        self._delete_pod(dl, meta(pod)["name"], _holding(pod))

    def _event(self, dl: DL, reason: str, message: str, type_: str = "Normal") -> None:
        self._w.add(dl.job.id, Event(dl.obj, reason, message, "DLJob", type_))

    def _run_policy(self, dl: DL, pods: list[dict[str, Any]], now: float, rep: PassReport) -> bool:
        """The DLJob's run policy before its lifecycle; True when the DLJob was deleted (its TTL ran out).
        A finished DLJob goes ``ttlSecondsAfterFinished`` after its completionTime; an unfinished one
        past ``activeDeadlineSeconds`` from its creation is Failed (DeadlineExceeded), its pods stopped
        with their grace period; an admitted one with ``suspend`` is stopped the same way and requeued
        (:meth:`_suspended` then holds it). Each future deadline asks for a pass then."""
        spec = dl.spec
        if dl.phase in FINISHED:
            done = parse_time(dl.status.get("completionTime"))
            if spec.ttl_seconds_after_finished is None or done is None:
                return False
            if now < done + spec.ttl_seconds_after_finished:
                rep.wake(done + spec.ttl_seconds_after_finished)
                return False
            self._w.add(dl.job.id, DeleteDLJob(dl.namespace, dl.name))
            return True
        created = parse_time(meta(dl.obj).get("creationTimestamp"))
        if spec.active_deadline_seconds is not None and created is not None:
            end = created + spec.active_deadline_seconds
            if now >= end:
                why = f"activeDeadlineSeconds {spec.active_deadline_seconds} s since its creation passed"
                served = self._fold(dl, now) if dl.phase in ACTIVE else {}
                self._patch(dl, {"phase": DLJobPhase.FAILED.value, "completionTime": rfc3339(now), **served,
                                 "restartAfter": None, "queuePosition": None, "eta": None,
                                 "conditions": [condition("False", "DeadlineExceeded", why, now,
                                                          dl.status.get("conditions"))]})  # fmt: skip
                self._clean_pods(dl, pods)
                self._event(dl, "DeadlineExceeded", why, "Warning")
                metrics.FINISHED.labels(spec.virtual_cluster, "Failed").inc()
                rep.finished.append(dl.job.id)
                return False
            rep.wake(end)
        if spec.suspend and dl.phase in ACTIVE:
            self._requeue(dl, "spec.suspend is true: stopped (its pods get their grace period) until resumed",
                          now, rep, reason="Suspended")  # fmt: skip
        return False

    def _retire(self, finished: list[DL], pods_of: Mapping[str, list[dict[str, Any]]]) -> None:
        """Finished DLJobs with nothing left to do (no pod still running, no ttlSecondsAfterFinished to
        wait for) are retired: ``status.retired`` (a Succeeded gang's finishing write says it already), or,
        where the apiserver cannot select DLJobs by it, the label ``qosmos.io/finished``. The DLJob watch
        (and list) selects them no more, so a pass's work and the operator's memory do not grow with
        history. Their pods need no write: the pod watch selects unfinished pods only, and the caches
        drop a retired DLJob's finished pods (kept for ``kubectl logs``). A failed write is retried by
        the next pass."""
        for dl in finished:
            if dl.spec.ttl_seconds_after_finished is not None or dl.status.get("retired"):
                continue  # still the pass's to delete, or retired by its finishing write
            if any(_phase(p) not in FINISHED for p in pods_of.get(dl.job.id, [])):
                continue  # its pods are still being stopped (or kept running: cleanPodPolicy None)
            if self._retire_in_status:
                self._patch(dl, {"retired": True}, why="retired")
            else:  # an optimisation: a failed label leaves the job in the working set for now
                self._w.add(dl.job.id, LabelDLJob(dl.namespace, dl.name, {LABEL_FINISHED: "true"}, optional=True))

    def _suspended(self, waiting: list[DL], now: float) -> set[str]:
        """Waiting DLJobs with ``spec.suspend``: out of their queue, saying so (once)."""
        held = set()
        for dl in waiting:
            if not dl.spec.suspend:
                continue
            held.add(dl.job.id)
            self._hold(dl, "Suspended", "spec.suspend is true: not queued until it is false", now)
        return held

    def _hold(self, dl: DL, reason: str, message: str, now: float) -> bool:
        """A waiting DLJob kept out of its queue: Queued, ``Admitted=False`` with ``reason``, no position
        or ETA. Written only when that changes; True when written."""
        cond = condition("False", reason, message, now, dl.status.get("conditions"))
        if _same_condition(dl.status.get("conditions"), cond) and dl.phase == DLJobPhase.QUEUED.value:
            return False
        self._patch(dl, {"phase": DLJobPhase.QUEUED.value, "conditions": [cond], "queuePosition": None, "eta": None})
        return True

    # ---- templates -----------------------------------------------------------------------------
    def _check_templates(self, waiting: list[DL], now: float) -> set[str]:
        """A bad pod template is found when its DLJob is first seen, not hours later at admission: the
        pass's reader dry-runs one pod of the gang on the apiserver (validation, admission plugins,
        webhooks) once per spec generation (:meth:`templates_to_probe`, verdicts in ``memory.templates``).
        Refused: ``Admitted=False``, ``reason: InvalidTemplate`` with the apiserver's words, and the job
        stays out of its queue until an edit makes a new generation. No verdict yet (the dry run failed
        for another reason): it queues, and is asked again next pass."""
        keys = {dl.job.id: self._template_key(dl) for dl in waiting}
        # the verdicts of specs a job still waits with are kept (a restarted operator asks again, once)
        live = set(keys.values())
        self.memory.templates = {k: v for k, v in self.memory.templates.items() if k in live}
        idents = {_spec_ident(dl) for dl in waiting}
        self.memory.specs = {k: v for k, v in self.memory.specs.items() if k in idents}
        invalid: set[str] = set()
        for dl in waiting:
            refusal = self.memory.templates.get(keys[dl.job.id])
            if refusal is None:
                continue
            invalid.add(dl.job.id)
            message = f"its pod template is refused: {refusal}"
            if self._hold(dl, "InvalidTemplate", message, now):
                self._event(dl, "InvalidTemplate", message, "Warning")
        return invalid

    # ---- inference services first (SODA §V-D2) ---------------------------------------------------
    def _services(
        self,
        pending: list[dict[str, Any]],
        bound: set[str],
        jobs: list[DL],
        running: dict[str, list[RunningJob]],
        cluster: ClusterState,
        now: float,
        rep: PassReport,
    ) -> None:
        """Replica pods waiting for a node are booked before any queue is admitted (the core's
        ``place_services``), so no DLJob takes their room; where room lacks, the last-submitted training
        or CPU job there is preempted and waits at the head of its queue (``status.queueHead``)."""
        replicas: list[ServiceReplica] = []
        for p in pending:
            try:
                r = pending_replica(p)
            except InvalidInput as exc:
                log.warning("replica pod %s skipped: %s", meta(p).get("name"), exc)
                continue
            if r.id not in bound and not meta(p).get("deletionTimestamp"):
                replicas.append(r)
        if not replicas:
            return
        placed = place_services(replicas, [r for rs in running.values() for r in rs], cluster)
        rep.replicas_booked += len(placed.placed)
        by_id = {dl.job.id: dl for dl in jobs}
        for pr in placed.preemptions:  # already released on ``cluster`` by the core
            dl = by_id[pr.job.id]
            self._requeue(dl, pr.reason, now, rep, reason="PreemptedForInference", head=True)
            vc = dl.spec.virtual_cluster
            running[vc] = [r for r in running[vc] if r.job.id != pr.job.id]

    # ---- nodes --------------------------------------------------------------------------------
    def _sync_node_labels(self, nodes: list[dict[str, Any]], assignment: Mapping[str, str], names: set[str]) -> None:
        """``qosmos.io/vc`` on every node a VirtualCluster selects; removed again, once no VirtualCluster
        selects it, where the operator wrote it (annotation ``qosmos.io/vc-managed``) or where it names
        an existing VirtualCluster (a label written by others naming none is left alone)."""
        for n in nodes:
            m = meta(n)
            labels = m.get("labels") or {}
            managed = (m.get("annotations") or {}).get(ANN_VC_MANAGED) == "true"
            have = labels.get(LABEL_VC)
            want = assignment.get(m["name"], NO_VC)
            # independent writes (a new VirtualCluster over 1,523 nodes relabels them all): side by side
            if want and (have != want or not managed):
                self._w.add(f"node/{m['name']}", LabelNode(m["name"], {LABEL_VC: want}, {ANN_VC_MANAGED: "true"}))
            elif not want and have is not None and (managed or have in names):
                self._w.add(f"node/{m['name']}", LabelNode(m["name"], {LABEL_VC: None}, {ANN_VC_MANAGED: None}))

    # ---- gangs --------------------------------------------------------------------------------
    def _lifecycle(
        self,
        dl: DL,
        pods: list[dict[str, Any]],
        now: float,
        rep: PassReport,
        nodes: Mapping[str, dict[str, Any]],
        vc: VirtualClusterSpec,
    ) -> None:
        """An admitted DLJob: its pods follow its status, its status follows its pods. A gang whose node
        is gone, or NotReady past its nodeLostSeconds, goes back to the queue (its pods cannot run there;
        no restart is counted, the job did not fail) and the core places it anew; one not all Running
        within its startTimeoutSeconds goes back to the head of the queue (:meth:`_start_timeout`)."""
        st = dl.status
        attempt = attempt_of(st)
        refusal = self.memory.refused.pop((dl.uid, attempt), None)
        if refusal is not None:  # the apiserver refused its pods (the last apply): that fails it
            self._invalid_pod(dl, refusal, now)
            return
        gang = Gang.of_status(st)
        if gang is None:  # admitted without a placement: cannot happen from this operator; requeue
            self._requeue(dl, "admitted without a placement", now, rep)
            return
        lost = [n for n in gang.node_names if n not in nodes]
        if lost:
            self._requeue(dl, f"node {', '.join(lost)} of its placement is gone", now, rep, reason="NodeLost")
            return
        cur = {meta(p)["name"]: p for p in pods if _attempt(p) == attempt}
        want = [pod_name(dl.name, attempt, i) for i in range(len(gang.gpus))]  # names only: no manifests
        if self._node_lost(dl, gang, want, cur, nodes, vc, now, rep):
            return
        for p in pods:
            old = _attempt(p) != attempt and not (_attempt(p) == attempt - 1 and _phase(p) == "Failed")
            if old and not meta(p).get("deletionTimestamp"):
                # older attempts go (once); the last failed attempt's failed pods stay for kubectl logs
                self._stop(dl, p)
        if self._disrupted(dl, want, cur, now, rep):
            return
        phases = [_phase(cur[n]) if n in cur else None for n in want]
        if "Failed" in phases or (dl.phase == DLJobPhase.RUNNING.value and None in phases):
            self._failed(dl, [cur[n] for n in want if n in cur], now, rep)
            return
        if st.get("stalledSince") and not any(not_ready_since(nodes[n], now) is not None for n in gang.node_names):
            self._patch(dl, {"stalledSince": None}, why="stalled")  # its nodes are back and its pods run on
        if all(p == "Succeeded" for p in phases):
            end = max((_finished_at(cur[n]) or now for n in want), default=now)
            start = parse_time(st.get("startTime")) or parse_time(st.get("admittedAt")) or end
            done = {
                "phase": DLJobPhase.SUCCEEDED.value,
                "completionTime": rfc3339(end),
                "startTime": st.get("startTime") or rfc3339(start),
                **({"stalledSince": None} if st.get("stalledSince") else {}),
            }
            if self._retire_in_status and dl.spec.ttl_seconds_after_finished is None:
                done["retired"] = True  # nothing left to do (every pod finished): retired in this write
            self._patch(dl, done)
            # its run time: the finished segments' (preempted, restarted) and this last one
            self.durations.observe(dl.job, dl.job.executed + max(end - start, 0.0), end)
            self._clean_pods(dl, [cur[n] for n in want if n in cur])
            self._event(dl, "Succeeded", f"all {len(want)} pods succeeded")
            metrics.FINISHED.labels(dl.spec.virtual_cluster, "Succeeded").inc()
            rep.finished.append(dl.job.id)
            return
        if all(n in cur and started(cur[n]) for n in want) or (
            dl.phase == DLJobPhase.RUNNING.value and all(p in ("Running", "Succeeded") for p in phases)
        ):  # Running once every pod is Running and Ready; a readiness probe failing later changes nothing
            if dl.phase != DLJobPhase.RUNNING.value:
                self._patch(dl, {"phase": DLJobPhase.RUNNING.value, "startTime": rfc3339(now), "restartAfter": None})
                self._event(dl, "Running", f"all {len(want)} pods are running")
                created = parse_time(meta(dl.obj).get("creationTimestamp"))
                if created is not None:
                    metrics.APPLY_TO_RUNNING.observe(max(now - created, 0.0))
            return
        backoff = parse_time(st.get("restartAfter"))
        if not cur and backoff is not None and now < backoff and (cordoned := _cordoned(gang, nodes)):
            # its pods would be recreated where nothing new may go (kubectl drain): placed anew instead
            why = f"node {', '.join(cordoned)} of its placement was cordoned while it backed off after a failure"
            self._requeue(dl, why, now, rep, reason="Disrupted")
            self._requeued_at(dl, now)
            return
        if not cur and backoff is not None and now < backoff:  # a failed gang's back-off: recreated then
            rep.wake(backoff)
            return
        if dl.phase == DLJobPhase.ADMITTED.value:
            timeout = dl.spec.start_timeout_seconds or vc.start_timeout_seconds
            due = start_deadline(parse_time(st.get("admittedAt")), backoff, timeout)
            if due is not None and now >= due:
                self._start_timeout(dl, gang, want, [cur.get(n) for n in want], timeout, now, rep)
                return
            if due is not None:
                rep.wake(due)
        self._ensure_gang(dl, gang, attempt, cur)

    def _node_lost(
        self,
        dl: DL,
        gang: Gang,
        want: list[str],
        cur: Mapping[str, dict[str, Any]],
        nodes: Mapping[str, dict[str, Any]],
        vc: VirtualClusterSpec,
        now: float,
        rep: PassReport,
    ) -> bool:
        """Requeue the gang (reason NodeLost) when a node of its placement has not been Ready for its
        nodeLostSeconds, or sooner when a pod of it there already failed or went (the taint manager
        evicts pods from an unreachable node): that is the node's loss, not the job's failure. True
        when requeued; otherwise a pass is asked for when the grace ends."""
        grace = dl.spec.node_lost_seconds if dl.spec.node_lost_seconds is not None else vc.node_lost_seconds
        # (a pod that succeeded there before the node went is done: not lost with it)
        live = [n for name, n in zip(want, gang.node_names, strict=True) if _phase(cur.get(name) or {}) != "Succeeded"]
        down = {n: t for n in dict.fromkeys(live) if (t := not_ready_since(nodes[n], now)) is not None}
        if not down:
            return False
        # a pod there gone, or failed after its node went (evicted, lost with it); one that failed before
        # (or as) its node went failed on its own: a restart, as the simulator's failure before the outage
        hit = any(
            node in down
            and (
                name not in cur
                or (_phase(cur[name]) == "Failed" and ((end := _finished_at(cur[name])) is None or end > down[node]))
            )
            for name, node in zip(want, gang.node_names, strict=True)
        )
        first = min(down.values())
        if _failed_by([cur[n] for n in want if n in cur], first):
            # a pod of it failed before its node went: that failure first (a restart), the node's loss after
            return False
        # stalled without a break since its status says (a node of it down all along, another back since):
        # its run ends there; the grace counts from the nodes down now
        had = parse_time(dl.status.get("stalledSince"))
        stall = first if had is None else min(had, first)
        due = node_lost_at(first, grace, now if hit and dl.phase == DLJobPhase.RUNNING.value else math.inf)
        if now >= due:
            self._requeued_at(dl, due)
            names = [n for n, t in down.items() if now >= t + grace] or list(down)
            since = ", ".join(f"{n} since {rfc3339(down[n])}" for n in names)
            why = f"node not Ready ({since}; nodeLostSeconds {grace})"
            # the gang stalled when its first node went: neither the grace nor an eviction's wait ran it
            self._requeue(dl, why, now, rep, reason="NodeLost", stalled=stall)
            return True
        if had != stall:  # the run's end if it stops before the node is back
            self._patch(dl, {"stalledSince": rfc3339(stall)}, why="stalled")
        rep.wake(node_lost_at(first, grace))
        return False

    def _disrupted(
        self, dl: DL, want: list[str], cur: Mapping[str, dict[str, Any]], now: float, rep: PassReport
    ) -> bool:
        """Requeue the gang (reason Disrupted, no restart counted, its run kept as a graceful stop's) when a
        pod of it was disrupted by someone else (a drain's eviction, kube-scheduler's preemption, a NoExecute
        taint, the pod GC: :data:`~qosmos.operator.lifecycle.DISRUPTIONS`): that is not the job's failure,
        even when its other pods failed for the lost peer. A pod of it that failed on its own before (or as)
        the disruption came fails it first (a restart, counted), as the simulator's failure at a drain's
        instant comes first. True when requeued."""
        hits = []
        for name in want:
            d = disruption(cur[name]) if name in cur else self._disruptions.get(f"{dl.namespace}/{name}")
            if d is not None:
                hits.append((name, d))
        if not hits:
            return False
        first = min((d.since for _, d in hits if d.since is not None), default=None)
        if first is not None and _failed_by([p for n in want if (p := cur.get(n)) and disruption(p) is None], first):
            return False
        name, d = hits[0]
        why = f"pod {name} {DISRUPTIONS[d.reason]} ({d.reason}): not the job's failure, no restart counted"
        self._requeue(dl, why, now, rep, reason="Disrupted")
        self._requeued_at(dl, now)
        return True

    def _requeued_at(self, dl: DL, t: float) -> None:
        """A gang the lifecycle requeued at ``t`` (its node lost, a disruption): an event of its
        VirtualCluster then, as the simulator's requeue is one of its partition's, and its stopped pods'
        devices go to this pass's admissions, as the simulator frees them."""
        vc_name = dl.spec.virtual_cluster
        self._lost_at[vc_name] = max(self._lost_at.get(vc_name, -math.inf), t)
        self._lost.add(dl.job.id)

    def _start_timeout(
        self,
        dl: DL,
        gang: Gang,
        want: list[str],
        pods: list[dict[str, Any] | None],
        timeout: int,
        now: float,
        rep: PassReport,
    ) -> None:
        """The gang was not all Running within its start timeout (Kueue's waitForPodsReady): stopped and
        requeued at the head of its queue with its pods' waiting reasons, the nodes it did not start on
        avoided next time (``status.avoidNodes``); after backoffLimit such requeues, Failed. ``want``: the
        gang's pod names, ``pods`` those pods as read (None: not created)."""
        said = waiting_reasons([p for p in pods if p is not None])
        said += [f"{n}: not created" for n, p in zip(want, pods, strict=True) if p is None]
        by_node: dict[str, list[dict[str, Any]]] = {}
        for node, p in zip(gang.node_names, pods, strict=True):
            by_node.setdefault(node, []).extend([p] if p is not None else [])
        avoid = sorted(set(dl.status.get("avoidNodes") or ()) | set(unstarted_nodes(by_node)))
        n = int(dl.status.get("startTimeouts") or 0)
        why = f"not all {len(want)} pods Running within startTimeoutSeconds {timeout}: " + "; ".join(said)
        why = why[:4000]
        if n >= dl.spec.backoff_limit:
            served = self._fold(dl, now)
            why += f" (after {n} requeues: backoffLimit {dl.spec.backoff_limit})"
            self._patch(dl, {"phase": DLJobPhase.FAILED.value, "completionTime": rfc3339(now), **served,
                             "startTimeouts": n + 1, "avoidNodes": avoid or None, "restartAfter": None,
                             "conditions": [condition("False", "StartTimeout", why, now,
                                                      dl.status.get("conditions"))]})  # fmt: skip
            for p in pods:
                if p is not None and _phase(p) not in FINISHED:
                    self._stop(dl, p)
            self._event(dl, "StartTimeout", why, "Warning")
            metrics.FINISHED.labels(dl.spec.virtual_cluster, "Failed").inc()
            rep.finished.append(dl.job.id)
            return
        self._requeue(dl, why, now, rep, reason="StartTimeout", head=True,
                      extra={"startTimeouts": n + 1, "avoidNodes": avoid or None, "restartAfter": None})  # fmt: skip

    def _invalid_pod(self, dl: DL, msg: str, now: float) -> None:
        """The apiserver refused a pod of the gang (422, e.g. a template the dry run passed but the
        placement made invalid): the DLJob fails with its words."""
        self._patch(
            dl,
            {
                "phase": DLJobPhase.FAILED.value,
                "completionTime": rfc3339(now),
                "conditions": [condition("False", "InvalidPod", msg[:4000], now, dl.status.get("conditions"))],
            },
        )
        self._event(dl, "InvalidPod", msg, "Warning")
        metrics.FINISHED.labels(dl.spec.virtual_cluster, "Failed").inc()
        log.warning("DLJob %s failed: its pods are refused: %s", dl.job.id, msg)

    def _ensure_gang(self, dl: DL, gang: Gang, attempt: int, cur: Mapping[str, dict[str, Any]]) -> None:
        """Create the gang's missing pods (gated) and its headless Service, then remove the gate from every
        pod of the gang. A pod is never ungated before all its peers exist, so no half gang is ever
        scheduled (a gang of one pod is created without the gate and without a Service: its rank 0 is
        itself; at Kueue's scale the Service, Endpoints and EndpointSlice were 5 of its 21 writes)."""
        if not cur and self._leaving.intersection(gang.node_names):
            # the devices it was given are still held by pods terminating there (a preempted job's,
            # checkpointing in its grace period): no pod of it is pinned onto them before they are gone;
            # their deletion is a watch event, and the next pass creates the gang
            log.info("gang of %s waits for pods terminating on %s", dl.job.id, ", ".join(sorted(
                self._leaving.intersection(gang.node_names))))  # fmt: skip
            return
        manifests = gang_pods(dl.obj, gang, attempt, self._node_vc)
        uid, key = dl.uid, dl.job.id
        for pod in manifests:
            if pod["metadata"]["name"] not in cur:
                self._w.add(key, CreatePod(pod, key, (uid, attempt)))
        # the headless Service (rank 0's DNS name) with the pods, before any is ungated (side by side with
        # their creates); until it is known to exist it is asked for at every pass that finds the gang not
        # running yet (a failed create is retried, and holds the gates)
        if has_headless_service(len(manifests)) and uid not in self.memory.headless:
            svc = headless_service(dl.obj)
            conflict = (
                f"Service {svc['metadata']['name']} exists and is not this DLJob's: its pods' rendezvous address "
                f"{rank0_address(dl.name, dl.namespace)} resolves only if that Service is headless and selects "
                f"{LABEL_JOB}={dl.name}"
            )
            self._w.add(key, EnsureService(svc, dl.obj, conflict, uid))
        for pod in manifests:
            live = cur.get(pod["metadata"]["name"])
            gates = (live or pod)["spec"].get("schedulingGates") or []
            if any(g.get("name") == GATE for g in gates):
                # all at once (the applier sends a gang's gates in parallel): Kubernetes has no multi-object
                # write, and this keeps the time a pod may be bound while a peer is gated to one round trip
                self._w.add(
                    key, Ungate(dl.namespace, pod["metadata"]["name"], [g for g in gates if g.get("name") != GATE])
                )

    def _failed(self, dl: DL, pods: list[dict[str, Any]], now: float, rep: PassReport) -> None:
        """A failed (or lost) pod fails the gang. Its exit codes meet the podFailurePolicy first (FailJob:
        Failed at once; Ignore: recreated, not counted); otherwise recreated up to backoffLimit after a
        back-off (``restartAfter``: 10 s doubling, up to 6 min, reset after a run over 10 min), then
        Failed. The failed pods stay for ``kubectl logs`` (running peers are deleted with their grace
        period); the service the failed gang received is folded into the status."""
        failed_pods = [p for p in pods if _phase(p) == "Failed"]
        failed = meta(failed_pods[0])["name"] if failed_pods else "a pod"
        codes = exit_codes(failed_pods)
        action, decided_by = failure_action(dl.spec.pod_failure_policy, codes)
        shown = decided_by or (codes[0] if codes else None)  # the rule's code, else the first
        what = f"{failed} failed" + (f" (container {shown[0]} exited {shown[1]})" if shown else "")
        said = termination_message(failed_pods)
        if said is not None:
            what += f": {said}"
        restarts = int(dl.status.get("restarts") or 0)
        if action is not FailureAction.FAIL_JOB and (
            action is FailureAction.IGNORE or restarts < dl.spec.backoff_limit
        ):
            started = parse_time(dl.status.get("startTime"))
            end = _run_end(dl, now)
            k = consecutive_failures(
                int(dl.status.get("consecutiveFailures") or 0), None if started is None else end - started
            )
            delay = restart_delay(k)
            served = self._fold(dl, end, graceful=False)
            lost = _lost(dl, served)  # (before the patch folds it into the status)
            counted = action is FailureAction.COUNT
            patch: dict[str, Any] = {"phase": DLJobPhase.ADMITTED.value, "startTime": None, **served,
                                     "consecutiveFailures": k, "restartAfter": rfc3339(now + delay),
                                     "lastFailureTime": rfc3339(now), "stalledSince": None}  # fmt: skip
            if counted:
                patch["restarts"] = restarts + 1
            else:
                patch["ignoredFailures"] = int(dl.status.get("ignoredFailures") or 0) + 1
            self._patch(dl, patch)
            for p in pods:
                if _phase(p) not in FINISHED:
                    self._stop(dl, p)
            count = f"{restarts + 1}/{dl.spec.backoff_limit}" if counted else "not counted: podFailurePolicy Ignore"
            self._event(dl, "Restarted", f"{what}: gang recreated in {delay:.0f} s ({count}){lost}")
            rep.restarted.append(dl.job.id)
            rep.wake(now + delay)
            return
        why = (
            "podFailurePolicy FailJob"
            if action is FailureAction.FAIL_JOB
            else f"after {restarts} restarts (backoffLimit)"
        )
        reason = "PodFailurePolicy" if action is FailureAction.FAIL_JOB else "BackoffLimitExceeded"
        self._patch(
            dl,
            {
                "phase": DLJobPhase.FAILED.value,
                "completionTime": rfc3339(now),
                "restartAfter": None,
                "lastFailureTime": rfc3339(now),
                "stalledSince": None,
                "conditions": [condition("False", reason, f"{what}: {why}", now, dl.status.get("conditions"))],
            },
        )
        self._clean_pods(dl, pods)
        self._event(dl, "Failed", f"{what}: {why}", "Warning")
        metrics.FINISHED.labels(dl.spec.virtual_cluster, "Failed").inc()
        rep.finished.append(dl.job.id)

    def _clean_pods(self, dl: DL, pods: list[dict[str, Any]]) -> None:
        """A finished DLJob's pods by its cleanPodPolicy: Running (running ones go, finished ones stay for
        kubectl logs), All, or None."""
        policy = dl.spec.clean_pod_policy
        for p in pods:
            if policy is CleanPodPolicy.ALL or (policy is CleanPodPolicy.RUNNING and _phase(p) not in FINISHED):
                self._stop(dl, p)

    def _requeue(
        self,
        dl: DL,
        why: str,
        now: float,
        rep: PassReport,
        at: float | None = None,
        reason: str = "Preempted",
        head: bool = False,
        extra: Mapping[str, Any] | None = None,
        stalled: float | None = None,
    ) -> None:
        """Back to the queue (preempted or reclaimed): placement dropped, pods deleted. The service of the
        run it stops is folded into its status before ``startTime`` goes, and ``queuedSince`` says when
        it went back: ``at``, the event the decision was made for (the simulator's preemption instant),
        else now. Its next gang is a new attempt (new pod names). A node lost (``reason`` NodeLost) gave
        its pods there no grace period to checkpoint in; ``stalled``: since when the run made no progress
        (its node stopped being Ready), where its run is counted to."""
        pods = self._placed_pods(dl)  # before the status drops the placement
        if stalled is None:  # preempted (or timed out) while a node of it is not Ready: no grace there either
            stalled = parse_time(dl.status.get("stalledSince"))
        end = now if stalled is None else min(stalled, now)  # (a stall before the segment's start: no run)
        served = self._fold(dl, end, graceful=reason != "NodeLost" and stalled is None)
        why += _lost(dl, served)
        self._patch(
            dl,
            {
                "phase": DLJobPhase.QUEUED.value,
                "placement": None,
                "admittedAt": None,
                "startTime": None,
                **served,
                "queuedSince": rfc3339(now if at is None else at),
                "preemptions": int(dl.status.get("preemptions") or 0) + 1,
                "queueHead": True if head else None,
                "stalledSince": None,
                "restartAfter": None,  # a failed gang's back-off was for the gang on that placement
                "conditions": [condition("False", reason, why, now, dl.status.get("conditions"))],
                **(extra or {}),
            },
        )
        for p, node in pods:
            self._delete_pod(dl, p, node)
        self._event(dl, reason, why, "Warning")
        rep.preempted.append(dl.job.id)
        # back in its queue as of now for this pass's admissions too (a NodeLost or timed-out gang's
        # requeue comes before them): the round-robin's and LAS's turn order, the simulator's ``enqueued``
        dl.job.enqueued = now if at is None else at

    def _running(
        self, job: Job, start: float, alloc: Allocation | None, predicted: float | None, cluster: ClusterState
    ) -> RunningJob:
        """An admitted DLJob as the pass sees it: expected to end after the rest of its run
        (``core.backfill.expected_run``: a requeued job resumes, as in the simulator)."""
        return RunningJob(job, start, start + expected_run(job, alloc, predicted, cluster, self.modeldb), alloc)

    def _fold(self, dl: DL, now: float, graceful: bool = True) -> dict[str, float]:
        """The status fields that fold the run segment ending now into the job's service (and a GENIE
        task's work left); the pass's Job follows (a job restarted and then preempted in one pass keeps
        both segments). A segment that ends without a grace period (``graceful`` false: a failed pod, a
        lost node) keeps the progress up to its last checkpoint only (``spec.checkpointIntervalSeconds``)."""
        start = segment_start(dl.status)
        ran = 0.0 if start is None else max(now - start, 0.0)
        kept = ran if graceful else kept_run(ran, dl.job.checkpoint_interval)
        served = service_status(dl.job, start, now, kept, float(dl.status.get("lostRunSeconds") or 0.0))
        if kept < ran:
            metrics.LOST_RUN.labels(dl.spec.virtual_cluster).inc(ran - kept)
        dl.job.attained = served["attainedServiceGpuSeconds"]
        dl.job.executed = served["executedSeconds"]
        gang = Gang.of_status(dl.status)
        if start is not None and gang is not None and dl.job.has_genie_task:
            shape = genie.run_shape(gang.per_node())  # the segment's shape on its first node's GPU model
            labels = meta(self._nodes.get(gang.node_names[0]) or {}).get("labels") or {}
            lat = task_latency(dl.job, shape, str(labels.get(LABEL_GPU_MODEL, "")), self.modeldb)
            if lat is not None:
                dl.job.work_left = genie.work_left_after(dl.job.work_left, kept, lat)
                served["workLeft"] = round(dl.job.work_left, 9)
        return served

    @staticmethod
    def _placed_pods(dl: DL) -> list[tuple[str, str]]:
        """(pod name, node it is pinned to) of the current gang, from the status."""
        gang = Gang.of_status(dl.status)
        if gang is None:
            return []
        return [(pod_name(dl.name, attempt_of(dl.status), i), n) for i, n in enumerate(gang.node_names)]

    # ---- cohorts -------------------------------------------------------------------------------
    def _members(
        self,
        name: str,
        specs: Mapping[str, VirtualClusterSpec],
        by_vc: Mapping[str, list[DL]],
        running: Mapping[str, list[RunningJob]],
        now: float,
    ) -> list[CohortMember]:
        """The other members of ``name``'s cohort as its pass needs them (``core.cohorts``): partition,
        running jobs on the pass's clock (now = 0: lost work and "submitted last" compare with its own)
        and waiting jobs (their demand keeps a member's idle quota from being lent). [] without a cohort."""
        cohort = specs[name].cohort
        if cohort is None:
            return []
        out = []
        for other, spec in sorted(specs.items()):
            if other == name or spec.cohort != cohort:
                continue
            held = [
                RunningJob(_on_pass_clock(r.job, now), r.start - now, r.expected_end - now, r.allocation)
                for r in running.get(other, [])
            ]
            out.append(CohortMember(self._runtime(other, spec).partition, held, self._waiting_jobs(other, by_vc)))
        return out

    def _waiting_jobs(self, vc: str, by_vc: Mapping[str, list[DL]]) -> list[Job]:
        """``vc``'s waiting jobs, kept until one of its DLJobs changes phase (:meth:`_patch`): each
        member of a cohort reads the others' for every admission pass of the cohort."""
        got = self._waiting.get(vc)
        if got is None:
            got = self._waiting[vc] = [d.job for d in by_vc.get(vc, []) if d.phase in (None, DLJobPhase.QUEUED.value)]
        return got

    # ---- admission ----------------------------------------------------------------------------
    def _runtime(self, name: str, spec: VirtualClusterSpec) -> PartitionRuntime:
        part = spec.partition(name)
        cached = self._runtimes.get(name)
        if cached is not None and cached[0] == part:
            return cached[1]
        rt = PartitionRuntime(part)
        self._runtimes[name] = (part, rt)
        return rt

    def _deadline(self, job: Job) -> float | None:
        """GENIE's deadline e = submit + ECT of the job's QoS class (Eq. 12), written once."""
        try:
            gpu_model = job.gpu_models[0] if job.gpu_models else ""  # the profile of the GPU model asked for
            due = genie.deadline(genie.Task.from_job(job), self.modeldb.get(job.model, gpu_model))
        except InvalidInput:  # an unknown model type: no deadline (SWAF then lets it wait)
            return None
        return due if math.isfinite(due) else None

    def _predicted(self, dl: DL, now: float) -> float | None:
        """QSSF's run time of a DLJob (queue order, backfilling's estimates, a running job's expected end):
        predicted when this replica first sees it and kept; after a restart the one its status shows."""
        shown = dl.status.get("predictedDurationSeconds")
        if shown is not None:
            self.predictions.seed(dl.uid, float(shown))
        return self._predict(dl.job, now, key=dl.uid)

    def _predict(self, job: Job, now: float, elapsed: float | None = None, *, key: str | None = None) -> float | None:
        """QSSF's run time of ``job`` (:meth:`_predicted`); with ``elapsed``: the ETA forecast's, given
        that it has run that long (seed 004 §VI-A, ``Durations.predict_run``)."""
        try:
            if elapsed is not None:
                return self.durations.predict_run(job, now, elapsed)
            return self.predictions.predict(job, now, key)
        except Exception:  # the predictor's failure: the job has no prediction (QSSF orders it last)
            metrics.ERRORS.labels("predict").inc()
            log.exception("duration prediction of %s failed", job.id)
            return None

    def _admit_vc(
        self,
        vc: dict[str, Any],
        spec: VirtualClusterSpec,
        group: list[DL],
        running_of: dict[str, list[RunningJob]],
        members: list[CohortMember],
        all_jobs: Mapping[str, DL],
        cluster: ClusterState,
        now: float,
        rep: PassReport,
    ) -> None:
        name = meta(vc)["name"]
        running = running_of[name]
        rt = self._runtime(name, spec)
        waiting_dl = [d for d in group if d.phase in (None, DLJobPhase.QUEUED.value)]
        for d in waiting_dl:  # QSSF's order, backfilling's estimates and the ETA forecast read them
            d.job.predicted_duration = self._predicted(d, now)
            # a live cluster has no oracle: what SJF reads as the duration is the prediction
            d.job.duration = d.job.predicted_duration
        metrics.QUEUE_LENGTH.labels(name).set(len(waiting_dl))
        oldest = max((now - d.job.submit_time for d in waiting_dl), default=0.0)
        metrics.OLDEST_WAIT.labels(name).set(oldest)
        if not waiting_dl:
            return
        served: dict[str, Job] = {}
        at = now
        if rt.policy.preemptive:  # SRTF, LAS, RR, MLFQ: the jobs' service as of the partition's last event
            cohort = [name, *(m.partition.name for m in members)]
            since = max((self._events[m] for m in cohort if m in self._events), default=None)
            view = as_of_last_event(
                rt.policy, self.memory.turns, [(d.status, d.job) for d in group], running, now, since
            )
            served, at = view.jobs, view.at
            if view.wake_at is not None:
                rep.wake(view.wake_at)

        # The core runs on times relative to this pass (now = 0): its messages then read "reserved to
        # start at 120 s" and waiting allowances are as GENIE defines them; Unix times stay out here.
        def core_job(job: Job) -> Job:
            return _on_pass_clock(served.get(job.id, job), now)

        # ties of the policy's order go by arrival, as in the simulator's queue (the apiserver lists by name):
        # a sorted policy's by submission, the others' by ``Job.arrival_order`` (when each entered the queue)
        if rt.policy.static:
            waiting_dl.sort(key=lambda d: (d.job.submit_time, d.job.id))
        else:
            waiting_dl.sort(key=lambda d: (*d.job.arrival_order, d.job.id))
        waiting = [core_job(d.job) for d in waiting_dl]
        held = [RunningJob(core_job(r.job), r.start - now, r.expected_end - now, r.allocation) for r in running]
        rt.ctx = order_context(rt.partition, cluster, held, 0.0, self.modeldb)
        carry = carry_from_json((meta(vc).get("annotations") or {}).get(ANN_CARRY), cluster, now)

        def estimate(job: Job, alloc: Allocation | None) -> float:  # a requeued job resumes: the rest of it
            return expected_run(job, alloc, job.predicted_duration, cluster, self.modeldb)

        heads = {d.job.id for d in waiting_dl if d.status.get("queueHead")}  # preempted for a service
        res = admit(
            rt, waiting, held, cluster, 0.0, carry=carry, estimate=estimate, explain=True, first=heads, cohort=members
        )
        if math.isfinite(res.revisit_at):  # a SWAF task's waiting allowance runs out: it is chosen anew then
            rep.wake(now + res.revisit_at + REVISIT_AFTER)

        def etas(max_work: int, books: ClusterState) -> Forecast:
            """Predicted starts of the jobs left waiting: the core's admission cycle run forward from
            ``books`` (the cluster once this pass's starts are booked, see _decided)."""
            if len(waiting) > MAX_FORECAST_JOBS:
                return Forecast({}, 0)
            started = {s.job.id for s in res.starts}
            gone = {p.job.id for p in res.preemptions}
            live = [r for r in held if r.job.id not in gone]
            live += [RunningJob(s.job, 0.0, estimate(s.job, s.allocation), s.allocation) for s in res.starts]
            rest = [j for j in waiting if j.id not in started]
            # GENIE tasks whose model gives their run (Eq. 4 at their shape: their expected end), not the history
            modeled = {
                r.job.id for r in live if allocation_latency(r.job, r.allocation, cluster, self.modeldb) is not None
            }

            def run_time(job: Job, elapsed: float) -> float | None:  # running jobs: given their elapsed time
                return None if job.id in modeled else self._predict(job, now, elapsed)

            def eta_estimate(job: Job, alloc: Allocation | None) -> float:
                return expected_run(job, alloc, self._predict(job, now, 0.0), books, self.modeldb)

            try:
                return forecast(
                    rt,
                    rest,
                    live,
                    books,
                    0.0,
                    eta_estimate,
                    carry=res.carry,
                    max_work=max_work,
                    run_time=run_time,
                    cohort=members,
                )
            except Exception:  # advice only: a failed forecast leaves the ETAs unset
                metrics.ERRORS.labels("forecast").inc()
                log.exception("ETA forecast of VirtualCluster %s failed", name)
                return Forecast({}, 0)

        by_id = all_jobs if members else {d.job.id: d for d in group}  # a reclaim stops other members' jobs
        self._decided(vc, res, by_id, running_of, cluster, now, rep, etas, at)

    def _decided(
        self,
        vc: dict[str, Any],
        res: AdmissionResult,
        by_id: Mapping[str, DL],
        running_of: dict[str, list[RunningJob]],
        cluster: ClusterState,
        now: float,
        rep: PassReport,
        etas: _Etas | None = None,
        at: float | None = None,
    ) -> None:
        name = meta(vc)["name"]
        running = running_of[name]
        for pr in res.preemptions:
            dl = by_id.get(pr.job.id)
            if dl is not None:
                # a reclaimed job of another cohort member: requeued now (``at`` is this VC's last event)
                vc_of = dl.spec.virtual_cluster
                self._requeue(dl, pr.reason, now, rep, at if vc_of == name else None)
                held = running_of.get(vc_of, [])
                gone = next((r for r in held if r.job.id == pr.job.id), None)
                if gone is not None:
                    held.remove(gone)
                    if gone.allocation is not None:
                        cluster.release(gone.allocation)
        for s in res.starts:
            dl = by_id[s.job.id]
            promised = parse_time(dl.status.get("eta"))
            if promised is not None:  # how far the last forecast was from the real start
                metrics.ETA_ERROR.observe(now - promised)
            gang = Gang.of_allocation(s.allocation, cluster).split(dl.spec.gpus_per_pod)
            if not gang.node_names:
                log.warning("start of %s without an allocation skipped", s.job.id)
                continue
            if s.allocation is not None:
                cluster.allocate(s.allocation)
            running.append(self._running(dl.job, now, s.allocation, dl.job.predicted_duration, cluster))
            # the gangs are independent: their write sequences run side by side (each in its own order)
            self._start_gang(dl, gang, s.backfilled, now)
            rep.admitted.append(dl.job.id)
            rep.vc_of[dl.job.id] = name
        if res.waiting:  # their statuses once every VirtualCluster has decided: the ETAs share a budget
            down = _unusable_text(self._unusable.get(name, []))
            waits = [
                (by_id[w.job.id], w, w.message + _confined_text(by_id[w.job.id], cluster) + down) for w in res.waiting
            ]
            # the books as this VirtualCluster left them: a later cohort member's reclaim must not show
            forecaster = None if etas is None else functools.partial(etas, books=cluster.copy())
            self._waits.append(Waits(name, forecaster, waits))
        text = carry_to_json(res.carry, cluster, now)
        if not _same_carry((meta(vc).get("annotations") or {}).get(ANN_CARRY), text):
            self._w.add(f"vc/{name}", AnnotateVC(name, {ANN_CARRY: text}))

    def _write_waits(self, now: float) -> None:
        """The waiting jobs' statuses, each VirtualCluster's with its ETA forecast while the pass's
        FORECAST_PASS_WORK lasts, the one forecast longest ago (or never) first; a VirtualCluster left
        over, or the jobs a forecast cut short by that budget did not reach, keep the ETAs they have."""
        budget = FORECAST_PASS_WORK
        for waits in sorted(self._waits, key=lambda x: (self.memory.forecast_at.get(x.vc, -math.inf), x.vc)):
            starts: dict[str, float] = {}
            keep = waits.etas is not None  # without a forecast the ETAs stand, unless it could never run
            if waits.etas is not None and budget > 0:
                cap = min(FORECAST_WORK, budget)
                fc = waits.etas(cap)
                budget -= fc.work
                self.memory.forecast_at[waits.vc] = now
                starts, keep = fc.starts, fc.work >= cap and cap < FORECAST_WORK
            for dl, w, message in waits.jobs:  # independent writes (side by side)
                start = starts.get(w.job.id)
                eta = None if start is None else now + start
                self._wait_status(dl, reason_of(w.code), message, w, eta, now, keep_eta=keep and start is None)

    def _start_gang(self, dl: DL, gang: Gang, backfilled: bool, now: float) -> None:
        """One admission's writes, in this order: the status, only into the version the decision read
        (a restart finds the placement there and finishes the gang from it; another writer's edit in
        between stops the sequence, and the next pass decides again), the gated pods with the extender's
        annotations and the Service, the gates."""
        placement = gang.placement().model_dump(by_alias=True, exclude_none=True)
        why = "backfilled behind the reserved head" if backfilled else "admitted by the VirtualCluster's queue"
        reason = "Backfilled" if backfilled else "Admitted"
        self._patch(
            dl,
            {
                "phase": DLJobPhase.ADMITTED.value,
                "placement": placement,
                "admittedAt": rfc3339(now),
                "queuePosition": None,
                "waitingAllowanceSeconds": None,
                "eta": None,
                "queueHead": None,
                "restarts": int(dl.status.get("restarts") or 0),
                "conditions": [condition("True", reason, why, now, dl.status.get("conditions"))],
            },
            precondition=True,
        )
        self._event(dl, "Admitted", f"{why}: {placement.get('shape')} on {', '.join(gang.node_names)}")
        self._ensure_gang(dl, gang, attempt_of(dl.status), {})

    def _wait_status(
        self,
        dl: DL,
        reason: str,
        message: str,
        w: WaitReason | None,
        eta: float | None,
        now: float,
        *,
        keep_eta: bool = False,
    ) -> None:
        """Queued with the core's reason (``keep_eta``: no forecast reached the job, its ETA stands).
        Written at once when something changes in kind (phase, reason, the head's message words, a first
        position, reaching or leaving the head, coming below ``NEAR_HEAD``), but a job's very first status
        beyond ``NEAR_HEAD`` comes from the FIRST_WRITES bucket; what drifts with every start and finish
        (free GPUs and the job waited behind in the message, other position moves, allowance, prediction
        and ETA, appearing or changing) is refreshed at most every ``REFRESH_S``: a 1,000-job queue must
        not cost 1,000 writes a pass, nor 30 queues 300."""
        st = dl.status
        cond = condition("False", reason, message, now, st.get("conditions"))
        now_patch: dict[str, Any] = {}
        later: dict[str, Any] = {}
        if st.get("phase") != DLJobPhase.QUEUED.value:
            now_patch["phase"] = DLJobPhase.QUEUED.value
        if _observed(dl, {}):  # a new spec (changed while queued) is answered at once
            now_patch["observedGeneration"] = meta(dl.obj).get("generation")
        if not _same_condition(st.get("conditions"), cond):
            prev: Mapping[str, Any] = next((c for c in st.get("conditions") or [] if c.get("type") == ADMITTED), {})
            # at the head (or without a position) the message's words count; behind it they name the
            # job it waits behind, which every admission of its queue changes: they drift
            head = w is None or w.position == 0
            same_kind = prev.get("reason") == reason and (
                not head or _words(prev.get("message", "")) == _words(message)
            )
            (later if same_kind else now_patch)["conditions"] = [cond]
        if w is not None:
            old_pos = st.get("queuePosition")
            if old_pos != w.position:
                # at once: the first position, reaching or leaving the head, coming near it; other moves drift.
                # Under churn (hundreds of starts a minute) every far position moves by a large fraction
                # each pass, and writing them all made the passes of a 2,000-job queue take 20-30 s of
                # status patches; near the head too, each admission moves NEAR_HEAD jobs of its queue, and
                # writing those at once was 300 of a pass's ~670 writes with 30 queues (Kueue's scenario)
                at_once = old_pos is None or 0 in (old_pos, w.position) or old_pos >= NEAR_HEAD > w.position
                (now_patch if at_once else later)["queuePosition"] = w.position
            a = w.waiting_allowance
            allowance = int(a) if a is not None and math.isfinite(a) else None
            old = st.get("waitingAllowanceSeconds")
            if (allowance is None) != (old is None):
                now_patch["waitingAllowanceSeconds"] = allowance
            elif allowance is not None and old is not None and abs(allowance - old) >= ALLOWANCE_STEP_S:
                later["waitingAllowanceSeconds"] = allowance
        pred = dl.job.predicted_duration
        old_pred = st.get("predictedDurationSeconds")
        # a prediction appearing drifts too: QSSF's first observation gives every queued job one at
        # once (15,000 status patches in one pass with Kueue's file), and no decision reads it back
        if pred is not None and (old_pred is None or abs(float(old_pred) - pred) >= max(1.0, 0.05 * pred)):
            later["predictedDurationSeconds"] = round(pred, 1)
        if not st.get("deadline") and dl.job.has_genie_task:
            due = self._deadline(dl.job)
            if due is not None:
                now_patch["deadline"] = rfc3339(due)
        want_eta = eta if eta is not None and math.isfinite(eta) else None
        old_eta = parse_time(st.get("eta"))
        # an ETA appearing or going drifts as well: the forecasts are bounded per pass, so their reach
        # moves, and QSSF's first observation gives every queued job an ETA at once
        if keep_eta:
            pass
        elif (want_eta is None) != (old_eta is None):
            later["eta"] = None if want_eta is None else rfc3339(want_eta)
        elif want_eta is not None and old_eta is not None and abs(want_eta - old_eta) >= ETA_STEP_S:
            later["eta"] = rfc3339(want_eta)
        last = self.memory.refreshed.get(dl.job.id, -math.inf)
        if later and now_patch:
            now_patch.update(later)
        elif later and now - last >= REFRESH_S:
            self._drift.append((last, dl, later))  # competes for the pass's DRIFT_WRITES
        if not now_patch:
            return
        if not st.get("phase") and w is not None and w.position >= NEAR_HEAD:
            self._first.append((w.position, dl, now_patch))  # competes for FIRST_WRITES
            return
        self.memory.refreshed[dl.job.id] = now
        self._patch(dl, now_patch, why="wait")

    def _write_first(self, now: float) -> None:
        """First statuses of jobs beyond their queue's NEAR_HEAD positions, the front of every queue
        first, as many as the FIRST_WRITES bucket holds; the rest are asked again next pass."""
        n, self.memory.first = _spend(self.memory.first, now, FIRST_WRITES, FIRST_WRITES_PER_S, len(self._first))
        self._first.sort(key=lambda f: (f[0], f[1].job.submit_time, f[1].job.id))
        for _, dl, patch in self._first[:n]:
            self.memory.refreshed[dl.job.id] = now
            self._patch(dl, patch, why="wait")

    def _refresh_drift(self, now: float) -> None:
        """The pass's drift-only refreshes, the stalest first, as many as the bucket holds (DRIFT_WRITES,
        refilled at DRIFT_WRITES_PER_S); the rest wait."""
        n, self.memory.drift = _spend(self.memory.drift, now, DRIFT_WRITES, DRIFT_WRITES_PER_S, len(self._drift))
        self._drift.sort(key=lambda d: (d[0], d[1].job.id))
        for _, dl, patch in self._drift[:n]:
            self.memory.refreshed[dl.job.id] = now
            self._patch(dl, patch, why="drift")
        self._drift = []

    def _vc_statuses(
        self,
        vcs: list[dict[str, Any]],
        specs: Mapping[str, VirtualClusterSpec],
        by_vc: Mapping[str, list[DL]],
        running: Mapping[str, list[RunningJob]],
        cluster: ClusterState | None,
        now: float,
    ) -> None:
        acct = self._cohort_accounting(specs, by_vc, running, cluster)
        for v in vcs:
            name = meta(v)["name"]
            group = by_vc.get(name, [])
            queued = [d for d in group if d.phase in (None, DLJobPhase.QUEUED.value)]
            # its own nodes' GPUs, not its cohort's (``capacity`` reads the shared union)
            total = cluster.own_gpus(name) if cluster is not None and cluster.vc_index(name) >= 0 else 0
            borrowed, lent = acct.get(name, (0, 0))
            oldest = int(max((now - d.job.submit_time for d in queued), default=0))
            want = {
                "gpus": {
                    "total": total,
                    "used": sum(_gpus(r) for r in running.get(name, [])),
                    "borrowed": borrowed,
                    "lent": lent,
                },
                "queued": len(queued),
                "running": len(running.get(name, [])),
                "oldestWaitSeconds": oldest,
                "observedGeneration": meta(v).get("generation"),
            }
            have = v.get("status") or {}
            # what a restarted operator compares with the DLJobs it finds (``deleted_since_count``): counted
            # anew whenever a DLJob joined or left the unfinished ones (those passes write the counts anyway)
            left = [d for d in group if d.phase not in FINISHED]
            counted = parse_time(have.get("activeJobsTime"))
            if have.get("activeJobs") != len(left) or counted is None or any(d.job.submit_time > counted for d in left):
                want["activeJobs"], want["activeJobsTime"] = len(left), rfc3339(now)
            at = self._events.get(name)
            if at is not None and at > (parse_time(have.get("lastEventTime")) or -math.inf):
                want["lastEventTime"] = rfc3339(at)
            ready = self._vc_ready(name, specs[name], total, cluster, now, have.get("conditions"))
            want["conditions"] = [ready]
            old_ready: Mapping[str, Any] = next(
                (c for c in have.get("conditions") or [] if c.get("type") == "Ready"), {}
            )
            changed = any(have.get(k) != want[k] for k in ("gpus", "queued", "running", "observedGeneration"))
            changed |= "lastEventTime" in want or "activeJobs" in want
            changed |= any(old_ready.get(k) != ready[k] for k in ("status", "reason", "message"))
            if changed or abs(int(have.get("oldestWaitSeconds") or 0) - oldest) >= OLDEST_WAIT_STEP_S:
                self._w.add(f"vc/{name}", PatchVCStatus(name, want))

    def _cohort_accounting(
        self,
        specs: Mapping[str, VirtualClusterSpec],
        by_vc: Mapping[str, list[DL]],
        running: Mapping[str, list[RunningJob]],
        cluster: ClusterState | None,
    ) -> dict[str, tuple[int, int]]:
        """(GPUs borrowed, GPUs lent) of each cohort member after the pass (``core.quota.accounting`` over
        each cohort's ``core.cohorts.quota_state``s); VirtualClusters without a cohort neither borrow nor
        lend."""
        if cluster is None:
            return {}
        cohorts: dict[str, list[str]] = defaultdict(list)
        for name, spec in specs.items():
            if spec.cohort is not None:
                cohorts[spec.cohort].append(name)
        out: dict[str, tuple[int, int]] = {}
        for names in cohorts.values():
            states = []
            for name in names:
                try:
                    part = self._runtime(name, specs[name]).partition
                except InvalidInput:  # a spec the core refuses: its pass said why
                    continue
                held = sum(_gpus(r) for r in running.get(name, []))
                waiting = [d.job for d in by_vc.get(name, []) if d.phase in (None, DLJobPhase.QUEUED.value)]
                states.append(quota_state(part, nominal_of(part, cluster), held, waiting))
            out.update(accounting(states))
        return out

    @staticmethod
    def _vc_ready(
        name: str,
        spec: VirtualClusterSpec,
        total: int,
        cluster: ClusterState | None,
        now: float,
        old: list[dict[str, Any]] | None,
    ) -> dict[str, Any]:
        """``Ready``: whether the VirtualCluster has nodes to admit onto (every policy of the core runs)."""
        nodes = int((cluster.vc_id == cluster.vc_index(name)).sum()) if cluster is not None and total else 0
        if cluster is None or cluster.vc_index(name) < 0:
            status, reason, msg = "False", "NoNodes", f"no node matches nodeSelector {spec.node_selector or '{}'}"
        else:
            status, reason, msg = "True", "NodesSelected", f"{nodes} node(s), {total} GPUs"
        prev = next((c for c in old or [] if c.get("type") == "Ready"), None)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == status else rfc3339(now)
        return {"type": "Ready", "status": status, "reason": reason, "message": msg, "lastTransitionTime": since}

    # ---- writes -------------------------------------------------------------------------------
    def _patch(self, dl: DL, status: dict[str, Any], precondition: bool = False, why: str | None = None) -> None:
        """A status merge patch, mirrored on the plan's copy of the object (a job that finished early in
        the pass frees its GPUs for the admissions later in the same pass); it carries the generation of
        the spec it was decided on (``observedGeneration``) when that moved. ``precondition``: written
        only into the version of the DLJob the decision read (the applier then stops the job's writes
        when another writer changed it since: the next pass re-reads and re-decides instead)."""
        status = _observed(dl, status)
        why = why or str(status.get("phase") or "other").lower()
        self._w.add(
            dl.job.id,
            PatchStatus(dl.namespace, dl.name, status, meta(dl.obj).get("resourceVersion"), precondition, why),
            admits=dl.job.id if precondition else None,
        )
        merged = {**dl.status, **status}
        dl.obj = {**dl.obj, "status": {k: v for k, v in merged.items() if v is not None}}  # a new object: see _own
        if "phase" in status:
            self._waiting.pop(dl.spec.virtual_cluster, None)


class Reconciler:
    """One pass: read a :class:`Snapshot` (the pass's only reads, plus the dry runs of new pod
    templates), :meth:`Planner.plan` it at the clock's time, and apply the writes
    (:class:`~qosmos.operator.writes.Applier`); what the apply learnt (a precondition refused, a pod
    refused, a Service that exists) goes into the planner's memory for the next pass."""

    def __init__(
        self,
        kube: Kube,
        modeldb: ModelDB | None = None,
        durations: Durations | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.durations = durations or Durations(kube)
        self.planner = Planner(modeldb, self.durations)
        self.clock = clock
        self.applier = Applier(kube)
        self._probes = ThreadPoolExecutor(max_workers=16, thread_name_prefix="qosmos-probe")
        self._parsed: Parsed = {}

    def read(self) -> Snapshot:
        vcs = self.kube.virtual_clusters()
        nodes = self.kube.nodes()
        dljobs = parse_dljobs(self.kube.dljobs(), self._parsed)
        # after the pod watch (re)listed: the finished pods of the running gangs (the list holds none)
        self.kube.recover_pods([(dl.namespace, dl.name) for dl in dljobs if dl.phase in ACTIVE])
        pods = self.kube.gang_pods()
        pending = self.kube.pending_replica_pods()  # before the bound ones: one binding between is seen bound
        others = self.kube.other_bound_pods()
        disrupted = self.kube.disrupted_pods()
        return Snapshot(vcs, nodes, dljobs, pods, pending, others, disrupted, bool(self.kube.retire_in_status))

    def probe(self, snap: Snapshot) -> None:
        """Server-side dry runs of one pod of each new template (side by side); a dry run that fails for
        another reason than the template (the apiserver unreachable) gives no verdict."""

        def one(item: tuple[tuple[str, str], dict[str, Any]]) -> tuple[tuple[str, str], str | None, bool]:
            key, pod = item
            try:
                return key, self.kube.dry_run_pod(pod), True
            except Exception as exc:
                log.warning("dry run of pod %s failed: %s", meta(pod).get("name"), exc)
                return key, None, False

        for key, refusal, decided in self._probes.map(one, self.planner.templates_to_probe(snap)):
            if decided:
                self.planner.memory.templates[key] = refusal

    def run_pass(self) -> PassReport:
        t0 = time.perf_counter()
        now = self.clock()
        snap = self.read()
        self.durations.load()
        t1 = time.perf_counter()
        self.probe(snap)
        t2 = time.perf_counter()
        plan, rep = self.planner.plan(snap, now)
        rep.status_writes = dict(Counter(w.why for w in plan.writes() if isinstance(w, PatchStatus)))
        t3 = time.perf_counter()
        done = self.applier.apply(plan)
        t4 = time.perf_counter()
        rep.writes, rep.pods_created = done.writes, done.pods_created
        written = set(done.admitted)
        rep.admitted = [k for k in rep.admitted if k in written]
        for k in rep.admitted:
            metrics.ADMISSIONS.labels(rep.vc_of.get(k, "")).inc()
        mem = self.planner.memory
        mem.headless |= done.services
        mem.refused.update(done.refused)
        if done.stale or done.refused:  # decided again at once, on what the apiserver has now
            rep.wake(now)
        self.durations.save(now)
        rep.seconds = time.perf_counter() - t0
        rep.phases = {
            "read": t1 - t0,
            "probe": t2 - t1,
            "plan": t3 - t2,
            "apply": t4 - t3,
            "save": t0 + rep.seconds - t4,
        }
        rep.phases.update({f"stage{i}": s for i, s in enumerate(done.stage_s)})
        metrics.PASS_SECONDS.observe(rep.seconds)
        return rep


def deleted_since_count(status: Mapping[str, Any], group: Sequence[DL]) -> bool:
    """Whether a DLJob unfinished when a pass last counted them (a VirtualCluster's ``status.activeJobs`` at
    ``activeJobsTime``) is gone from ``group``, its DLJobs now: deleted before it finished while no pass of
    this operator's watched (it restarted). Those created since are not of the count; those finished
    since were unfinished then."""
    count, at = status.get("activeJobs"), parse_time(status.get("activeJobsTime"))
    if count is None or at is None:
        return False
    alive = 0
    for d in group:
        if d.job.submit_time > at:
            continue
        if d.phase in FINISHED:
            done = parse_time(d.status.get("completionTime"))
            if done is None or done <= at:
                continue
        alive += 1
    return alive < int(count)


def confine(waiting: list[DL], nodes: list[dict[str, Any]], cluster: ClusterState) -> None:
    """Each waiting DLJob confined to the nodes its pod template allows (``Job.pool``, a node pool of the
    pass's cluster): its ``nodeSelector`` and required node affinity, and the NoSchedule/NoExecute taints
    it does not tolerate (``translate.template_allows``), so the core places it only where the scheduler
    will bind it; and away from the nodes its gang did not start on (``status.avoidNodes``) while another
    node of its VirtualCluster is allowed (on none but those, it tries them again). One pool per distinct
    constraint; none where every node is allowed."""
    tainted = any(taints_narrow(n) for n in nodes)
    pools: dict[tuple[str | None, bool, tuple[str, ...], str], str | None] = {}
    for dl in waiting:
        avoid = tuple(sorted(dl.status.get("avoidNodes") or ()))
        key = (constraints_of(dl.spec), dl.spec.gpus > 0, avoid, dl.job.vc if avoid else "")
        if key[0] is None and not tainted and not avoid:
            continue
        if key not in pools:
            mask = np.ones(len(cluster.nodes), dtype=bool)
            for obj, ok in zip(nodes, allowed_nodes(dl.spec, nodes), strict=True):
                i = cluster.index.get(str(meta(obj).get("name", "")))
                if i is not None:
                    mask[i] = ok
            away = mask.copy()
            away[[cluster.index[n] for n in avoid if n in cluster.index]] = False
            if (away & cluster.eligible(dl.job.vc)).any():
                mask = away
            name = None if mask.all() else f"template:{dl.job.id}"
            if name is not None:
                cluster.define_pool(name, mask)
            pools[key] = name
        dl.job.pool = pools[key]


def _confined_text(dl: DL, cluster: ClusterState) -> str:
    """What a waiting job's message adds when its template (or the nodes it did not start on) narrows
    its nodes."""
    job = dl.job
    if job.pool is None:
        return ""
    vc = cluster.eligible(job.vc)
    allowed = int((cluster.pools[job.pool] & vc).sum())
    what = "its pod template and status.avoidNodes allow" if dl.status.get("avoidNodes") else "its pod template allows"
    return f"; {what} {allowed} of the {int(vc.sum())} nodes of {job.vc}"


def _spec_ident(dl: DL) -> tuple[str, int]:
    """(uid, generation): one spec of one DLJob."""
    return dl.uid, int(meta(dl.obj).get("generation") or 0)


def _observed(dl: DL, status: dict[str, Any]) -> dict[str, Any]:
    """``status`` plus ``observedGeneration`` when the DLJob's generation is not the one its status names."""
    gen = meta(dl.obj).get("generation")
    if gen is None or dl.status.get("observedGeneration") == gen:
        return status
    return {**status, "observedGeneration": gen}


def _words(message: str) -> str:
    """A message without its numbers: what it says, not how many GPUs are free right now."""
    return re.sub(r"(?<![\w/.-])[-+]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.-])", "#", message)


def _same_carry(old: str | None, new: str) -> bool:
    """Equal but for the head's projected start (recomputed every pass; its latest start is what
    the carry is for), so an overdue head does not rewrite the annotation on every pass."""
    if old is None:
        return False
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return False
    for c in (a, b):
        if c.get("reservation"):
            c["reservation"].pop("start", None)
    return bool(a == b)


def _spend(
    bucket: tuple[float, float] | None, now: float, size: int, per_s: float, want: int
) -> tuple[int, tuple[float, float]]:
    """A token bucket of ``size`` refilled at ``per_s``, as (time, tokens left then); None: full. Returns
    how many of ``want`` it grants now, and the bucket after."""
    at, left = bucket or (now, float(size))
    left = min(float(size), left + max(now - at, 0.0) * per_s)
    n = min(want, int(left))
    return n, (now, left - n)


def _on_pass_clock(job: Job, now: float) -> Job:
    """``job`` on the core's clock of this pass (now = 0): its messages then read "reserved to start at
    120 s" and waiting allowances are as GENIE defines them; Unix times stay out of the core. A copy
    (``_copy_job``), not ``dataclasses.replace``: re-validating every queued job's fields each pass was
    a tenth of a busy plan's time (py-spy, Kueue's scenario)."""
    out = _copy_job(job)
    object.__setattr__(out, "submit_time", job.submit_time - now)
    object.__setattr__(out, "enqueued", job.enqueued - now)
    return out


def _gpus(r: RunningJob) -> int:
    """GPUs a running job holds (a GENIE policy may have chosen another count than requested)."""
    return r.allocation.gpus if r.allocation is not None else r.job.gpus


def _node(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def _holding(pod: Mapping[str, Any]) -> str | None:
    """The node whose devices the pod holds until it is gone (bound and not finished), else None."""
    return _node(pod) if _phase(pod) not in FINISHED else None


def _lost(dl: DL, served: Mapping[str, float]) -> str:
    """What a segment's fold lost since its last checkpoint, for the event and condition ('' if nothing)."""
    lost = served.get("lostRunSeconds", 0.0) - float(dl.status.get("lostRunSeconds") or 0.0)
    if lost <= 0:
        return ""
    every = dl.spec.checkpoint_interval_seconds
    since = f"every {every} s" if every else "none periodic"
    return f"; {lost:.0f} s of run since its last checkpoint lost (checkpoints: {since})"


def _cordoned(gang: Gang, nodes: Mapping[str, dict[str, Any]]) -> list[str]:
    """The nodes of the gang's placement that are cordoned (``spec.unschedulable``: kubectl cordon, drain)."""
    return [n for n in dict.fromkeys(gang.node_names) if (nodes[n].get("spec") or {}).get("unschedulable")]


def _unusable_by_vc(nodes: Mapping[str, Mapping[str, Any]], assignment: Mapping[str, str]) -> dict[str, list[str]]:
    """VirtualCluster -> "name (why)" of each of its nodes that takes nothing new now (a drain's cordon, a
    node not Ready, a node-state taint, CES asleep or waking), by name: once per pass, for the waits."""
    out: dict[str, list[str]] = defaultdict(list)
    for name, node in sorted(nodes.items()):
        state = power_state(node)
        why = f"{state} (CES)" if state != AWAKE else unusable_because(node)
        if why is not None:
            out[assignment.get(name, NO_VC)].append(f"{name} ({why})")
    return out


def _unusable_text(down: Sequence[str], shown: int = 3) -> str:
    """What a waiting job's message adds when nodes of its VirtualCluster take nothing new now: their GPUs
    count as not free, and a user asks why."""
    if not down:
        return ""
    more = f" and {len(down) - shown} more" if len(down) > shown else ""
    return f"; taking nothing new now: node {', '.join(down[:shown])}{more}"


def _failed_by(pods: Iterable[Mapping[str, Any]], t: float) -> bool:
    """A pod among these failed at or before ``t``: that failure comes first (a restart, counted), as the
    simulator takes a failure before a node event at one instant."""
    return any(_phase(p) == "Failed" and (end := _finished_at(p)) is not None and end <= t for p in pods)


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _attempt(pod: Mapping[str, Any]) -> int:
    try:
        return int((meta(pod).get("labels") or {}).get(LABEL_ATTEMPT, "0"))
    except ValueError:
        return -1


def _bound_nodes(pods: list[dict[str, Any]], attempt: int) -> dict[int, str]:
    """Pod index -> the node it is bound to, for the current attempt's pods."""
    out = {}
    for p in pods:
        if _attempt(p) != attempt or _phase(p) in FINISHED:
            continue
        node = (p.get("spec") or {}).get("nodeName")
        idx = meta(p)["name"].rsplit("-", 1)[-1]
        if node and idx.isdigit():
            out[int(idx)] = node
    return out


def _finished_at(pod: Mapping[str, Any]) -> float | None:
    ends = [
        parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    ends_f = [e for e in ends if e is not None]
    return max(ends_f) if ends_f else None


__all__ = [
    "ADMITTED",
    "Memory",
    "PassReport",
    "Planner",
    "Reconciler",
    "Snapshot",
    "condition",
    "parse_dljobs",
    "reason_of",
]
