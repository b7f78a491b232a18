"""The operator's API calls (kubernetes client, raw JSON lists), so the reconciler reads like its rules.

Every write is idempotent or tolerant of having been done already: a create that meets AlreadyExists,
a delete that meets NotFound and a status merge patch all succeed, so a restarted operator may redo
whatever it had started.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, cast

import orjson
from qosmos.operator.crds import GROUP, LABEL_FINISHED, LABEL_INFERENCE, LABEL_JOB, RETIRED_FIELD, VERSION

if TYPE_CHECKING:
    from kubernetes.client import V1ObjectMeta
    from qosmos.operator.lifecycle import Disruption

log = logging.getLogger("qosmos.operator")

BOUND = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
GANG_PODS = f"{LABEL_JOB},!{LABEL_FINISHED}"  # DLJob pods (but those an older operator retired with the label)
LIVE = "status.phase!=Succeeded,status.phase!=Failed"  # the gang pods' watch: a pod leaves it when it finishes
NOT_RETIRED = f"{RETIRED_FIELD}!=true"  # the DLJobs' watch: a DLJob leaves it with the write that retires it
EVENT_BUFFER = 10_000  # Events waiting to be written; beyond it new ones are dropped


class Raw(Protocol):
    """A reply asked for with ``_preload_content=False``: urllib3's response, unread (the client's
    annotations name the model it would otherwise have built, or ``object``)."""

    @property
    def data(self) -> bytes: ...

    def read(self) -> bytes: ...

    def release_conn(self) -> None: ...


class Selectors(TypedDict):
    """The selectors of a list or watch, as the client's keyword arguments."""

    label_selector: str
    field_selector: NotRequired[str]


def _done(resp: Any) -> None:
    """Read and release a raw response: the connection goes back to the pool, and no model object is
    built from the reply (the client's deserialisation costs more CPU than the request itself)."""
    resp.read()
    resp.release_conn()


class OwnWrites:
    """The resourceVersions of the operator's own recent writes (status, labels, created or ungated
    pods; each reply went into the caches): a watch event carrying one of them is the echo of a write the pass
    already mirrored, not news (bounded, oldest dropped; set/deque operations are atomic under the
    GIL, and a miss only costs a pass)."""

    def __init__(self, keep: int = 20_000) -> None:
        self._order: collections.deque[str] = collections.deque()
        self._seen: set[str] = set()
        self.keep = keep

    def add(self, rv: str | None) -> None:
        if rv is None:
            return
        self._seen.add(rv)
        self._order.append(rv)
        while len(self._order) > self.keep:
            self._seen.discard(self._order.popleft())

    def __contains__(self, rv: object) -> bool:
        return rv in self._seen


def _version(obj: Any) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else None
    return str(rv) if rv is not None else None


class Stale(Exception):
    """A write made on a version of the object that is no longer the current one (HTTP 409)."""


class Kube:
    def __init__(self, api_client: Any, namespace: str | None = None, own: OwnWrites | None = None) -> None:
        from kubernetes import client

        self.api = api_client
        self.namespace = namespace
        self.own = own if own is not None else OwnWrites()
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        # whether the apiserver selects DLJobs by status.retired (None: not known yet, see dljob_selectors)
        self.retire_in_status: bool | None = None
        self._events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue(maxsize=EVENT_BUFFER)
        threading.Thread(target=self._record_events, name="qosmos-events", daemon=True).start()

    # ---- what a write returned (the informers' write-through: CachedKube) -----------------------
    def _keeps(self) -> bool:
        """Whether the writes' replies are wanted (parsed); a plain Kube only releases them."""
        return False

    def _wrote(self, resource: str, obj: dict[str, Any] | None) -> None:
        """The object as a write of ours left it (the apiserver's reply)."""

    def _deleted(self, resource: str, namespace: str, name: str) -> None:
        """An object a write of ours deleted at once."""

    def _parsed(self, resp: Any) -> dict[str, Any] | None:
        """The reply's object when the writes' replies are wanted; None (released unread) otherwise."""
        if not self._keeps():
            _done(resp)
            return None
        try:
            return dict(orjson.loads(resp.read()))
        finally:
            resp.release_conn()

    def _reply(self, resource: str, resp: Any) -> None:
        obj = self._parsed(resp)
        if obj is not None:
            self._echoed(resource, obj)

    # ---- reads (raw JSON: cheap on thousands of objects) ----------------------------------------
    def _items(self, resp: Any) -> list[dict[str, Any]]:
        return list(orjson.loads(resp.data).get("items") or [])  # lists of 1,000s of objects: orjson

    def virtual_clusters(self) -> list[dict[str, Any]]:
        return self._items(
            self.custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters", _preload_content=False)
        )

    def dljobs(self) -> list[dict[str, Any]]:
        """The working set: every DLJob but the retired ones (the apiserver filters them out, so a pass
        does not grow with history)."""
        return self._items(self._list_dljobs(**self.dljob_selectors(), _preload_content=False))

    def _list_dljobs(self, **kw: Any) -> Any:
        """A DLJob list in the operator's namespace, or in all of them."""
        if self.namespace:
            return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "dljobs", **kw)
        return self.custom.list_cluster_custom_object(GROUP, VERSION, "dljobs", **kw)

    def dljob_selectors(self) -> Selectors:
        """The selectors of the working set's list and watch: DLJobs neither labelled
        ``qosmos.io/finished`` (by an operator that could not select by status) nor ``status.retired``.
        The first call that finds the CRD asks the apiserver whether it selects DLJobs by
        ``status.retired`` (a CRD of Kubernetes 1.31 or later with its ``selectableFields``); where it does
        not, the label alone retires them (:attr:`retire_in_status` False)."""
        if self.retire_in_status is None:
            self.retire_in_status = self._selects_retired()
        sel: Selectors = {"label_selector": f"!{LABEL_FINISHED}"}
        if self.retire_in_status:
            sel["field_selector"] = NOT_RETIRED
        return sel

    def _selects_retired(self) -> bool | None:
        """True when a list selecting ``status.retired`` is served; False when it is refused (400: field
        label not supported); None when DLJobs are not served (their CRD not installed yet)."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self._list_dljobs(field_selector=NOT_RETIRED, limit=1, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 400:
                log.warning(
                    "DLJobs are retired with the label %s (one more write per finished DLJob): the apiserver "
                    "cannot select them by %s (%s); Kubernetes 1.31 or later and the current CRD can",
                    LABEL_FINISHED, RETIRED_FIELD, exc.reason,
                )  # fmt: skip
                return False
            raise
        _done(resp)
        return True

    def label_dljob(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        """Merge ``labels`` into a DLJob's metadata (a metadata-only write: the spec rule passes at once)."""
        self._reply(
            "dljobs",
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "dljobs", name, {"metadata": {"labels": labels}}, _preload_content=False
            ),
        )

    def nodes(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_node(_preload_content=False))

    def _own_pods(self, labels: str, fields: str | None = None) -> list[dict[str, Any]]:
        """Pods matching the selectors in the operator's namespace, or in all of them."""
        kw: dict[str, Any] = {"label_selector": labels, "_preload_content": False}
        if fields:
            kw["field_selector"] = fields
        if self.namespace:
            return self._items(self.core.list_namespaced_pod(self.namespace, **kw))
        return self._items(self.core.list_pod_for_all_namespaces(**kw))

    def gang_pods(self) -> list[dict[str, Any]]:
        """Pods of DLJobs (label qosmos.io/job), bound or not, finished or not, in the operator's
        namespace(s). This listing keeps every finished pod; the operator's watch caches keep a finished
        pod only while its DLJob is in the working set (``qosmos.operator.informers.GangPods``)."""
        return self._own_pods(GANG_PODS)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One pod as it is now; None when it is gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp = cast(Raw, self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            return dict(orjson.loads(resp.read()))
        finally:
            resp.release_conn()

    def disrupted_pods(self) -> dict[str, Disruption]:
        """Gang pods (``namespace/name``) that are gone, deleted by a disruption (a drain's eviction, ...),
        with how. A listing cannot tell (the pods are gone): the watch caches can (``CachedKube``)."""
        return {}

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Every pod of one DLJob, finished ones included."""
        return self._items(
            self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB}={job}", _preload_content=False)
        )

    def recover_pods(self, jobs: list[tuple[str, str]]) -> None:
        """Find the finished pods of these (namespace, name) DLJobs that the reads would miss. Nothing to
        do here: :meth:`gang_pods` lists finished pods too (the watch caches do not keep them; see
        ``qosmos.operator.informers.GangPods``)."""

    def other_bound_pods(self) -> list[dict[str, Any]]:
        """Bound, unfinished pods that are not DLJob pods (they hold node resources too)."""
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=BOUND, label_selector="!qosmos.io/job", _preload_content=False
        )
        return self._items(resp)

    def pending_replica_pods(self) -> list[dict[str, Any]]:
        """InferenceService replica pods not bound yet: the pass books them before the queues (SODA)."""
        return self._own_pods(LABEL_INFERENCE, "spec.nodeName=,status.phase=Pending")

    def replica_pods(self) -> list[dict[str, Any]]:
        """Every InferenceService replica pod (label qosmos.io/inference) in the operator's namespace(s)."""
        return self._own_pods(LABEL_INFERENCE)

    def inference_services(self) -> list[dict[str, Any]]:
        """The InferenceServices; ApiException 404 when their CRD is not installed."""
        if self.namespace:
            resp = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "inferenceservices", _preload_content=False
            )
        else:
            resp = self.custom.list_cluster_custom_object(GROUP, VERSION, "inferenceservices", _preload_content=False)
        return self._items(resp)

    def patch_inference_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        obj = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "inferenceservices", name, {"status": status}
        )
        self._echoed("inferenceservices", obj)

    # ---- writes -------------------------------------------------------------------------------
    def patch_dljob_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        """Merge ``status`` in; with ``resource_version`` only into that version of the object (the
        apiserver's optimistic concurrency: :class:`Stale` when it changed since it was read). Returns
        the object's new resourceVersion."""
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            resp = cast(
                Raw,
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, "dljobs", name, body, _preload_content=False
                ),
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Stale(f"DLJob {namespace}/{name} changed since resourceVersion {resource_version}") from exc
            raise
        try:
            obj = orjson.loads(resp.read())
        finally:
            resp.release_conn()
        return self._echoed("dljobs", obj)

    def delete_dljob(self, namespace: str, name: str) -> None:
        """Delete a DLJob (its ttlSecondsAfterFinished passed); the garbage collector takes its pods."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "dljobs", name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._deleted("dljobs", namespace, name)

    def _echoed(self, resource: str, obj: Any) -> str | None:
        """A write of a pass (status, labels, a created or ungated pod): its watch event is this write's
        echo, not news, and the cache takes the reply. Returns the new resourceVersion."""
        rv = _version(obj)
        self.own.add(rv)
        self._wrote(resource, obj if isinstance(obj, dict) else None)
        return rv

    def patch_vc_status(self, name: str, status: dict[str, Any]) -> None:
        self._echoed(
            "virtualclusters",
            self.custom.patch_cluster_custom_object_status(GROUP, VERSION, "virtualclusters", name, {"status": status}),
        )

    def annotate_vc(self, name: str, annotations: dict[str, str | None]) -> None:
        self._echoed(
            "virtualclusters",
            self.custom.patch_cluster_custom_object(
                GROUP, VERSION, "virtualclusters", name, {"metadata": {"annotations": annotations}}
            ),
        )

    def label_node(self, name: str, labels: dict[str, str | None], annotations: dict[str, str | None]) -> None:
        self._reply(
            "nodes",
            self.core.patch_node(
                name, {"metadata": {"labels": labels, "annotations": annotations}}, _preload_content=False
            ),
        )

    def create_pod(self, pod: dict[str, Any]) -> bool:
        """True when created, False when it exists already (a restart redoing its work)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._reply(
                "pods",
                self.core.create_namespaced_pod(
                    pod["metadata"]["namespace"],
                    pod,  # type: ignore[arg-type]  # the client validates the JSON into its model
                    _preload_content=False,
                ),
            )
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def dry_run_pod(self, pod: dict[str, Any]) -> str | None:
        """A server-side dry run of creating ``pod`` (validation and every admission plugin and webhook,
        nothing stored): None when the apiserver would take it, else its refusal in its own words.
        A ResourceQuota refusal is not the template's fault (it may pass later): also None."""
        from kubernetes.client.exceptions import ApiException

        try:
            _done(
                self.core.create_namespaced_pod(
                    pod["metadata"]["namespace"],
                    pod,  # type: ignore[arg-type]  # the client validates the JSON into its model
                    dry_run="All",
                    _preload_content=False,
                )
            )
            return None
        except ApiException as exc:
            message = api_message(exc)
            if exc.status == 409 or (exc.status == 403 and "exceeded quota" in message):
                return None
            if exc.status in (400, 403, 422):
                return message
            raise

    def create_service(self, service: dict[str, Any]) -> bool:
        """True when created, False when a Service of that name exists already (ours from an earlier
        attempt or pass, or someone else's: :meth:`service` tells)."""
        from kubernetes.client.exceptions import ApiException

        try:
            _done(
                self.core.create_namespaced_service(
                    service["metadata"]["namespace"],
                    service,  # type: ignore[arg-type]  # the client validates the JSON into its model
                    _preload_content=False,
                )
            )
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Service as raw JSON; None when there is none."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp = cast(Raw, self.core.read_namespaced_service(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(orjson.loads(resp.data))

    def ungate(self, namespace: str, name: str, gates: list[dict[str, Any]]) -> None:
        """Replace the pod's scheduling gates by ``gates`` (the template's own, without ours)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._reply(
                "pods",
                self.core.patch_namespaced_pod(
                    name,
                    namespace,
                    [{"op": "replace", "path": "/spec/schedulingGates", "value": gates}],
                    _preload_content=False,
                ),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete with the pod's own ``terminationGracePeriodSeconds`` (SIGTERM, time to checkpoint)
        unless ``grace_seconds`` is given; the pod then holds its devices until the kubelet is done."""
        from kubernetes.client.exceptions import ApiException

        kw: dict[str, Any] = {} if grace_seconds is None else {"grace_period_seconds": grace_seconds}
        try:
            resp = self.core.delete_namespaced_pod(name, namespace, _preload_content=False, **kw)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._deleted("pods", namespace, name)
            return
        obj = self._parsed(resp)
        if obj is None:
            return
        if (obj.get("metadata") or {}).get("deletionGracePeriodSeconds"):
            self._wrote("pods", obj)  # terminating, holding its devices until its kubelet is done
        else:  # gone at once (not on a node, or finished: the apiserver's grace period 0)
            self._deleted("pods", namespace, name)

    def event(
        self, obj: Mapping[str, Any], reason: str, message: str, kind: str = "DLJob", type_: str = "Normal"
    ) -> None:
        """A Kubernetes Event on a DLJob (best effort: an event lost is only a line in `describe`)."""
        from datetime import UTC, datetime

        m = obj.get("metadata") or {}
        ns = m.get("namespace", "default")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{m.get('name', 'dljob')}.", "namespace": ns},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": kind,
                "name": m.get("name"),
                "namespace": ns,
                "uid": m.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": "qosmos-operator"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._events.put_nowait((ns, body))
        except queue.Full:  # a burst beyond the buffer: dropped, as client-go's recorder drops
            log.debug("event %s on %s/%s dropped: the event buffer is full", reason, ns, m.get("name"))

    def _record_events(self) -> None:
        """Writes the queued Events in order, off the pass's path: an admission then costs the status
        patch and the pods, not a third round trip (client-go's recorder is asynchronous too)."""
        while True:
            ns, body = self._events.get()
            try:
                _done(
                    self.core.create_namespaced_event(
                        ns,
                        body,  # type: ignore[arg-type]  # the client validates the JSON into its model
                        _preload_content=False,
                    )
                )
            except Exception as exc:  # best effort, said in the log
                log.debug("event %s on %s not written: %s", body.get("reason"), ns, exc)
            finally:
                self._events.task_done()

    def flush_events(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event is written (or ``timeout`` s): True when none is left."""
        deadline = time.monotonic() + timeout
        while self._events.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._events.unfinished_tasks

    # ---- the duration history (QSSF) ----------------------------------------------------------
    def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def update_config_map(
        self,
        namespace: str,
        name: str,
        update: Callable[[dict[str, str] | None], dict[str, str]],
        attempts: int = 5,
    ) -> dict[str, str]:
        """Read, change and write a ConfigMap's data that peering replicas share, as a compare-and-swap:
        ``update`` gets what the ConfigMap holds (None: there is none) and returns the data to write;
        the write names the resourceVersion read, so a peer's write in between fails it (409) and
        ``update`` is called again on the newer data (a peer's create or delete alike). The data
        written; :class:`Conflict` after ``attempts`` lost races."""
        from kubernetes.client.exceptions import ApiException

        for _ in range(attempts):
            try:
                cm = self.core.read_namespaced_config_map(name, namespace)
                current: dict[str, str] | None = dict(cm.data or {})
                version = cast("V1ObjectMeta", cm.metadata).resource_version  # a read object has its metadata
            except ApiException as exc:
                if exc.status != 404:
                    raise
                current = version = None
            data = update(current)
            try:
                if version is None:  # 409 AlreadyExists when a peer created it meanwhile
                    meta = {"name": name, "namespace": namespace}
                    self.core.create_namespaced_config_map(
                        namespace,
                        {  # type: ignore[arg-type]  # the client validates the JSON into its model
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": meta,
                            "data": data,
                        },
                    )
                else:  # 409 Conflict when a peer wrote it meanwhile, 404 when it was deleted
                    self.core.patch_namespaced_config_map(
                        name, namespace, {"metadata": {"resourceVersion": version}, "data": data}
                    )
                return data
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise
                log.debug("ConfigMap %s/%s changed under this write, read again: %s", namespace, name, exc.reason)
        raise Conflict(f"ConfigMap {namespace}/{name} changed under each of {attempts} writes")


class Conflict(RuntimeError):
    """A compare-and-swap write that lost every race it ran."""


def api_message(exc: Any) -> str:
    """The apiserver's own message of a refused request (its Status body), else the exception's text."""
    try:
        return str(orjson.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", "") or exc)
