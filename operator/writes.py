"""What a reconcile pass intends to write (issue 21 §2): typed write records that the pure
:meth:`qosmos.operator.reconcile.Planner.plan` returns, and the :class:`Applier` that executes them.

A plan is a list of stages run one after another (node labels, the gangs' lifecycles, each
VirtualCluster's admissions, ...); a stage holds sequences, one per object or gang, that run side by
side, each in its own order: a DLJob's status before its pods, its pods before their gates. A
sequence stops at its first failed write: a refused precondition (:class:`~qosmos.operator.kube.Stale`,
another writer changed the DLJob after the pass read it) writes nothing more for it and asks for the
next pass at once; a pod the apiserver refuses (422) is remembered for the next plan, which fails the
DLJob with the apiserver's words (``Applied.refused``). Writes are idempotent: a pod or Service that
exists already counts as created.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Sequence_
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qosmos.operator import metrics
from qosmos.operator.kube import Stale, api_message

if TYPE_CHECKING:
    from qosmos.operator.kube import Kube

log = logging.getLogger("qosmos.operator")


# ---- the records ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Named:
    """A namespaced object a write is about."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class PatchStatus(_Named):
    """A DLJob status merge patch; ``precondition``: only into the version the plan read (its
    ``resource_version``, or what this apply's earlier write to it returned)."""

    status: Mapping[str, Any]
    resource_version: str | None = None
    precondition: bool = False
    why: str = ""  # what it writes (admitted, running, succeeded, wait, drift, ...): the pass's log line


@dataclass(frozen=True, slots=True)
class CreatePod:
    pod: Mapping[str, Any]
    job: str  # the DLJob's key (namespace/name): a refusal is remembered under it
    attempt: tuple[str, int]  # (DLJob uid, attempt): a refusal fails only this attempt's gang


@dataclass(frozen=True, slots=True)
class Ungate(_Named):
    """Scheduling gates of one pod after the qosmos gate is removed (a gang's in parallel: no half gang
    bound for longer than one round trip)."""

    gates: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class DeletePod(_Named):
    """Deleted with the pod's own grace period."""


@dataclass(frozen=True, slots=True)
class EnsureService:
    """The DLJob's headless Service: created, or found. One of that name owned by another object is
    said in a Warning Event on ``owner`` (``conflict`` is the message)."""

    service: Mapping[str, Any]
    owner: Mapping[str, Any]
    conflict: str
    uid: str  # remembered as existing once applied (``Applied.services``)


@dataclass(frozen=True, slots=True)
class DeleteDLJob(_Named):
    """Deleted (its TTL after finishing ran out); the garbage collector takes its pods."""


@dataclass(frozen=True, slots=True)
class LabelDLJob(_Named):
    labels: Mapping[str, str | None]
    optional: bool = False  # an optimisation (retiring a finished DLJob): a failure is only logged


@dataclass(frozen=True, slots=True)
class LabelNode:
    name: str
    labels: Mapping[str, str | None]
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class PatchVCStatus:
    name: str
    status: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AnnotateVC:
    name: str
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class Event:
    obj: Mapping[str, Any]
    reason: str
    message: str
    kind: str = "DLJob"
    type: str = "Normal"


Write = (
    PatchStatus
    | CreatePod
    | Ungate
    | DeletePod
    | EnsureService
    | DeleteDLJob
    | LabelDLJob
    | LabelNode
    | PatchVCStatus
    | AnnotateVC
    | Event
)


_PARALLEL: dict[type, str] = {CreatePod: "create", EnsureService: "create", Ungate: "ungate"}


@dataclass(frozen=True, slots=True)
class Sequence:
    """Writes applied in order; ``admits``: the DLJob key whose admission they write (counted as admitted
    only once its preconditioned status patch is accepted)."""

    writes: tuple[Write, ...]
    admits: str | None = None


@dataclass(slots=True)
class Plan:
    """Stages of sequences (see the module docstring)."""

    stages: list[list[Sequence]] = field(default_factory=list)

    def writes(self) -> list[Write]:
        """Every write, in plan order (tests)."""
        return [w for stage in self.stages for s in stage for w in s.writes]


def records_only(writes: Sequence_[Write]) -> bool:
    """Writes that only record what happened (a status without a precondition, an Event, an optional
    label): nothing later in the plan waits for them, as a new gang waits for the pods a requeue
    deletes."""
    return all(
        (isinstance(w, PatchStatus) and not w.precondition)
        or isinstance(w, Event)
        or (isinstance(w, LabelDLJob) and w.optional)
        for w in writes
    )


class Recorder:
    """How the planner states writes: into the current stage, each under its sequence's key (writes of
    one key keep their order; keys of one stage run side by side). ``stage()`` starts the next stage;
    ``stage(defer=...)`` holds the sequences it picks back until the plan's last stage, so that the
    stages between them (the admissions) start sooner. A held key that gets writes in a later stage
    goes there, its held writes first: its order is kept."""

    def __init__(self) -> None:
        self.plan = Plan()
        self._cur: dict[str, list[Write]] = {}
        self._admits: dict[str, str] = {}
        self._held: dict[str, list[Write]] = {}

    def add(self, key: str, *writes: Write, admits: str | None = None) -> None:
        cur = self._cur.get(key)
        if cur is None:
            cur = self._cur[key] = self._held.pop(key, [])
        cur.extend(writes)
        if admits is not None:
            self._admits[key] = admits

    def stage(self, defer: Callable[[list[Write]], bool] | None = None) -> None:
        if defer is not None:
            for k in [k for k, ws in self._cur.items() if ws and k not in self._admits and defer(ws)]:
                self._held[k] = self._cur.pop(k)
        if self._cur:
            self.plan.stages.append([Sequence(tuple(ws), self._admits.get(k)) for k, ws in self._cur.items() if ws])
        self._cur, self._admits = {}, {}

    def done(self) -> Plan:
        self.stage()
        if self._held:  # after every other stage: nothing waits for them
            self.plan.stages.append([Sequence(tuple(ws)) for ws in self._held.values()])
            self._held = {}
        return self.plan


# ---- the applier ------------------------------------------------------------------------------
@dataclass(slots=True)
class Applied:
    writes: int = 0
    pods_created: int = 0
    admitted: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # DLJobs whose preconditioned write was refused
    refused: dict[tuple[str, int], str] = field(default_factory=dict)  # (uid, attempt) -> the apiserver's words
    services: set[str] = field(default_factory=set)  # DLJob uids whose headless Service exists
    stage_s: list[float] = field(default_factory=list)  # seconds each stage took (the pass's log line)


class Applier:
    """Executes a :class:`Plan` against the operator's ``Kube``; thread pools only here."""

    def __init__(self, kube: Kube, workers: int = 16) -> None:
        self.kube = kube
        self._seqs = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qosmos-apply")
        # parallel writes inside one sequence (a gang's gates): a separate pool cannot deadlock
        self._inner = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qosmos-write")

    def apply(self, plan: Plan) -> Applied:
        out = Applied()
        lock = threading.Lock()
        rv: dict[str, str] = {}  # DLJob key -> resourceVersion its last status write in this apply returned
        for stage in plan.stages:
            t0 = time.perf_counter()
            if len(stage) == 1:
                self._sequence(stage[0], out, rv, lock)
            else:
                list(self._seqs.map(lambda s: self._sequence(s, out, rv, lock), stage))
            out.stage_s.append(time.perf_counter() - t0)
        return out

    def _sequence(self, seq: Sequence, out: Applied, rv: dict[str, str], lock: threading.Lock) -> None:
        ws = seq.writes
        i = 0
        while i < len(ws):
            # a gang's creates (pods, Service), then its gates: each run of them side by side
            batch_of = _PARALLEL.get(type(ws[i]))
            j = i + 1
            while batch_of is not None and j < len(ws) and _PARALLEL.get(type(ws[j])) == batch_of:
                j += 1
            batch = ws[i:j]
            if len(batch) == 1:
                errors = [self._try(batch[0], seq, out, rv, lock)]
            else:
                errors = list(self._inner.map(lambda w: self._try(w, seq, out, rv, lock), batch))
            failed = next(((w, e) for w, e in zip(batch, errors, strict=True) if e is not None), None)
            if failed is not None:  # the rest of the sequence depends on it: the next pass retries
                self._failed(seq, failed[0], failed[1], out, lock)
                return
            i = j

    def _try(self, w: Write, seq: Sequence, out: Applied, rv: dict[str, str], lock: threading.Lock) -> Exception | None:
        try:
            self._one(w, seq, out, rv, lock)
        except Exception as exc:
            return exc
        return None

    @staticmethod
    def _failed(seq: Sequence, w: Write, exc: Exception, out: Applied, lock: threading.Lock) -> None:
        from kubernetes.client.exceptions import ApiException

        if isinstance(exc, Stale):  # another writer changed it after the pass read it: decided again
            log.info("%s; the next pass decides again", exc)
            with lock:
                out.stale.append(seq.admits or "")
            return
        if isinstance(w, CreatePod) and isinstance(exc, ApiException) and exc.status == 422:
            words = api_message(exc)
            with lock:
                out.refused[w.attempt] = words
            log.warning("DLJob %s: its pods are refused: %s", w.job, words)
        elif isinstance(w, LabelDLJob) and w.optional:
            metrics.ERRORS.labels("retire").inc()
            log.warning("%s/%s not retired from the working set: %s", w.namespace, w.name, exc)
        else:
            metrics.ERRORS.labels("apply").inc()
            log.warning("%s not written (retried next pass): %s", type(w).__name__, exc)

    def _one(self, w: Write, seq: Sequence, out: Applied, rv: dict[str, str], lock: threading.Lock) -> None:
        k = self.kube
        n = 1
        if isinstance(w, PatchStatus):
            key = f"{w.namespace}/{w.name}"
            version = (rv.get(key) or w.resource_version) if w.precondition else None
            got = k.patch_dljob_status(w.namespace, w.name, dict(w.status), version)
            if got is not None:
                with lock:
                    rv[key] = got
            if w.precondition and seq.admits is not None:
                with lock:
                    out.admitted.append(seq.admits)
        elif isinstance(w, CreatePod):
            if k.create_pod(dict(w.pod)):
                metrics.PODS_CREATED.inc()
                with lock:
                    out.pods_created += 1
        elif isinstance(w, Ungate):
            k.ungate(w.namespace, w.name, w.gates)
        elif isinstance(w, DeletePod):
            k.delete_pod(w.namespace, w.name)
        elif isinstance(w, EnsureService):
            self._service(w)
            with lock:
                out.services.add(w.uid)
        elif isinstance(w, DeleteDLJob):
            k.delete_dljob(w.namespace, w.name)
        elif isinstance(w, LabelDLJob):
            k.label_dljob(w.namespace, w.name, dict(w.labels))
        elif isinstance(w, LabelNode):
            k.label_node(w.name, dict(w.labels), dict(w.annotations))
        elif isinstance(w, PatchVCStatus):
            k.patch_vc_status(w.name, dict(w.status))
        elif isinstance(w, AnnotateVC):
            k.annotate_vc(w.name, dict(w.annotations))
        elif isinstance(w, Event):
            k.event(dict(w.obj), w.reason, w.message, w.kind, w.type)
            n = 0  # recorded asynchronously by Kube; not a write of the pass
        else:  # pragma: no cover - a new record type without its applier
            raise TypeError(f"no applier for {type(w).__name__}")
        with lock:
            out.writes += n

    def _service(self, w: EnsureService) -> None:
        svc = dict(w.service)
        if self.kube.create_service(svc):
            return
        md = svc["metadata"]
        have = self.kube.service(str(md.get("namespace", "default")), str(md["name"]))
        uid = (w.owner.get("metadata") or {}).get("uid")
        if have is not None and not any(
            o.get("uid") == uid for o in (have.get("metadata") or {}).get("ownerReferences") or []
        ):
            self.kube.event(dict(w.owner), "ServiceConflict", w.conflict, "DLJob", "Warning")
