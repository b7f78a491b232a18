"""Watch caches (informers) for what a reconcile pass reads: one LIST per collection when the operator
starts, then a WATCH from that list's resourceVersion, so a pass reads memory instead of the apiserver.

Each collection is a :class:`Store` fed by a :class:`Reflector` (a thread: list, watch with bookmarks,
re-watch from the last resourceVersion seen when a stream ends, list again on 410 Gone). The pass's
own writes are written through into the stores from the apiserver's replies (read-your-writes): the
next pass must see the GPUs its predecessor booked even when the watch has not delivered that write
yet, or it would book them twice (an admission's precondition protects its own job, not another job
placed on the same GPUs).

Ordering uses resourceVersions as the integers etcd makes them (the watch delivers events in that
order; the apiserver documents them as opaque, so an object whose version is not an integer is never
written through: its watch event is then the only update). Two rules keep a write-through and the
stream from undoing each other:

* a write-through is taken only when its version is beyond what the stream has delivered (otherwise
  the stream has delivered that write or something later already);
* a watch event replaces an object only when it is not older than the one stored (an event still in
  flight from before the write cannot undo it).

What the stores hold mirrors the server-side selectors, so retired DLJobs (``status.retired``, or the
label ``qosmos.io/finished`` where the apiserver cannot select by status) and pods of no concern never
enter memory: the pass's time and memory do not grow with history.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import orjson
from qosmos.operator import metrics
from qosmos.operator.crds import GROUP, LABEL_FINISHED, LABEL_INFERENCE, LABEL_JOB, VERSION
from qosmos.operator.kube import BOUND, GANG_PODS, LIVE, Kube
from qosmos.operator.lifecycle import Disruption, disruption

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger("qosmos.operator")

WATCH_S = 300  # the server ends a watch after this; the reflector re-watches from where it was
ABSENT_S = 10.0  # a collection whose CRD is not installed (404) is empty, and listed again after this
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)  # between failed lists/watches, then 5 s
FINISHED = ("Succeeded", "Failed")

Obj = dict[str, Any]
OnEvent = Callable[[str, str, Obj], None]  # (store name, event type, object)


def version(obj: Obj) -> int | None:
    """The object's resourceVersion as etcd's revision; None when it is not an integer."""
    rv: Any = (obj.get("metadata") or {}).get("resourceVersion")  # JSON: a string, or anything
    try:
        return int(rv)
    except (TypeError, ValueError):
        return None


def key_of(obj: Obj) -> str:
    m = obj.get("metadata") or {}
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


class Store:
    """One watched collection, keyed by namespace/name. ``selects`` is the server-side selector of its
    watch, applied to written-through objects (a DLJob labelled finished leaves the store at once)."""

    def __init__(self, name: str, selects: Callable[[Obj], bool] = lambda _: True) -> None:
        self.name = name
        self.selects = selects
        self.rv = 0  # the stream's position: the latest list, event or bookmark version delivered
        self.synced = threading.Event()
        self.lists = 0  # how often the collection was listed (1 + relists)
        self.absent = False  # its list answered 404 (its CRD not installed): empty until it appears
        self._objs: dict[str, Obj] = {}
        self._gone: set[str] = set()  # deleted by the operator, its DELETED event not seen yet
        self._lock = threading.Lock()

    def items(self) -> list[Obj]:
        """The objects as of now. The caller must not change them (the planner copies what it changes)."""
        with self._lock:
            return list(self._objs.values())

    def __len__(self) -> int:
        return len(self._objs)

    def get(self, key: str) -> Obj | None:
        return self._objs.get(key)

    # ---- the stream ---------------------------------------------------------------------------
    def replace(self, items: Iterable[Obj], rv: int) -> None:
        """A (re)list at version ``rv``. Written-through objects newer than the list stay (the watch
        from ``rv`` will deliver their events)."""
        with self._lock:
            objs = {key_of(o): o for o in items}
            for k, o in self._objs.items():
                v = version(o)
                if k not in objs and v is not None and v > rv:
                    objs[k] = o
            self._objs, self._gone = objs, set()
            self.rv = rv
            self.lists += 1
            self.absent = False
        self.synced.set()

    def missing(self) -> None:
        """Its list answered 404: the resource is not served (a CRD not installed). Empty, and synced:
        a pass must not wait for a collection that does not exist."""
        with self._lock:
            self._objs, self._gone, self.absent = {}, set(), True
        self.synced.set()

    def event(self, type_: str, obj: Obj) -> bool:
        """A watch event (ADDED, MODIFIED, DELETED); False when it was older than what is stored."""
        k, v = key_of(obj), version(obj)
        with self._lock:
            if v is not None:
                self.rv = max(self.rv, v)
            if type_ == "DELETED":
                self._gone.discard(k)
                self._drop(k, v)
                return True
            if k in self._gone:  # deleted by us; this event is from before the delete
                return False
            have = self._objs.get(k)
            hv = version(have) if have is not None else None
            if hv is not None and v is not None and hv > v:
                return False
            self._objs[k] = obj
            return True

    def _drop(self, k: str, v: int | None) -> None:
        """Removed as of version ``v`` (under the lock): unless what is stored is newer."""
        have = self._objs.get(k)
        hv = version(have) if have is not None else None
        if have is not None and (v is None or hv is None or hv <= v):
            del self._objs[k]

    def bookmark(self, rv: int) -> None:
        with self._lock:
            self.rv = max(self.rv, rv)

    # ---- the operator's own writes ------------------------------------------------------------
    def wrote(self, obj: Obj) -> bool:
        """The object as the apiserver returned it to a write of ours; True when taken."""
        k, v = key_of(obj), version(obj)
        with self._lock:
            if v is None or v <= self.rv:  # the stream delivered this write (or later) already
                return False
            have = self._objs.get(k)
            hv = version(have) if have is not None else None
            if hv is not None and hv >= v:
                return False
            self._gone.discard(k)
            if self.selects(obj):
                self._objs[k] = obj
            else:
                self._objs.pop(k, None)
            return True

    def deleted(self, key: str) -> None:
        """The object was deleted by a write of ours (gone at once, not terminating)."""
        with self._lock:
            if self._objs.pop(key, None) is not None:
                self._gone.add(key)


class GangPods(Store):
    """The DLJob pods' store. Its watch selects unfinished pods only (``kube.LIVE``), so pods that
    finished long ago never reach memory and no write is needed to retire them. A pod that finishes
    leaves the watch, which reports that as DELETED with the pod's last unfinished state; the store
    then reads the pod (``fetch``, one GET, on its own threads: a stream that waited for each GET fell
    behind a burst of finishes) and keeps it, finished, so the pass sees how it ended (phase, exit
    codes, finish time); until the GET answers, the pod stays as it was last seen. A read that fails is
    retried. A finished pod stays until its DLJob leaves the working set (:meth:`prune`) or the
    operator deletes it. Pods that finished while no watch ran (the operator down, a relist after 410)
    are found by :meth:`recover_jobs`, one list per DLJob that may have them."""

    def __init__(
        self,
        name: str,
        selects: Callable[[Obj], bool],
        fetch: Callable[[str, str], Obj | None],
        on_change: Callable[[Obj], None] | None = None,
    ) -> None:
        super().__init__(name, selects)
        self.fetch = fetch
        self.on_change = on_change  # a pod read after it left the watch (the pass's news)
        self.recovered_at = 0  # the list (``lists``) the last recover_jobs() ran after
        self.stopped = threading.Event()
        self._reading: dict[str, int | None] = {}  # pods being read: key -> version of the DELETED event
        # pods deleted after a disruption (a drain's eviction, ...): key -> (DLJob, reason), while their
        # DLJob is in the working set; a pass that missed the pod terminating still sees why it went
        self._disrupted: dict[str, tuple[str, Disruption]] = {}
        self._readers = ThreadPoolExecutor(8, thread_name_prefix="qosmos-finished")  # threads made on demand

    def event(self, type_: str, obj: Obj) -> bool:
        k = key_of(obj)
        if type_ != "DELETED" or k in self._gone:
            self._reading.pop(k, None)  # a later event decides (the pod was made again, or deleted by us)
            return super().event(type_, obj)
        with self._lock:
            v = version(obj)
            if v is not None:
                self.rv = max(self.rv, v)
            self._reading[k] = v
        m = obj.get("metadata") or {}
        self._readers.submit(self._read, k, v, str(m.get("namespace", "")), str(m.get("name", "")), obj)
        return True

    def _read(self, k: str, v: int | None, namespace: str, name: str, last: Obj) -> None:
        failures = 0
        while not self.stopped.is_set():
            try:
                now = self.fetch(namespace, name)
                break
            except Exception as exc:
                failures += 1
                metrics.ERRORS.labels("watch").inc()
                log.warning("pod %s left the watch and could not be read (%s); again", k, exc)
                self.stopped.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
        else:
            return
        with self._lock:
            if k not in self._reading or self._reading[k] != v:
                return  # a later event or write decided meanwhile
            del self._reading[k]
            if now is not None and _finished(now):  # finished, not deleted: kept as it ended
                have = self._objs.get(k)
                hv, nv = version(have) if have is not None else None, version(now)
                if hv is None or nv is None or nv >= hv:
                    self._objs[k] = now
            else:
                if now is None and (why := disruption(last)) is not None:
                    self._disrupted[k] = (_job_key(last), why)
                self._drop(k, v)
        if self.on_change is not None:
            self.on_change(now if now is not None else last)

    def settle(self, timeout: float = 10.0) -> bool:
        """True once no pod is being read (tests)."""
        deadline = time.monotonic() + timeout
        while self._reading and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._reading

    def deleted(self, key: str) -> None:
        self._reading.pop(key, None)
        super().deleted(key)

    def wrote(self, obj: Obj) -> bool:
        taken = super().wrote(obj)
        if taken:
            self._reading.pop(key_of(obj), None)
        return taken

    def replace(self, items: Iterable[Obj], rv: int) -> None:
        """A relist holds no finished pod: those stored stay, as do those being read (recover_jobs()
        adds what the gap missed); a pod listed again was made again."""
        listed = list(items)
        names = {key_of(o) for o in listed}
        with self._lock:
            kept = [o for k, o in self._objs.items() if k not in names and (_finished(o) or k in self._reading)]
            for k in names:
                self._reading.pop(k, None)
        super().replace([*listed, *kept], rv)

    def prune(self, jobs: set[str]) -> None:
        """Finished pods, and disrupted ones' reasons, whose DLJob (``namespace/name``) is not among
        ``jobs`` go."""
        with self._lock:
            for k, o in list(self._objs.items()):
                if _finished(o) and _job_key(o) not in jobs:
                    del self._objs[k]
            self._disrupted = {k: jw for k, jw in self._disrupted.items() if jw[0] in jobs}

    def disrupted(self) -> dict[str, Disruption]:
        """The pods (``namespace/name``) a disruption deleted (:func:`disruption`), with how."""
        with self._lock:
            return {k: jw[1] for k, jw in self._disrupted.items()}

    def recover_jobs(self, jobs: list[tuple[str, str]], job_pods: Callable[[str, str], list[Obj]]) -> None:
        """After the first list and every relist: the finished pods of ``jobs`` ((namespace, name) of
        the DLJobs that may have some), one ``job_pods`` list each, side by side. Between lists the
        watch reports every finish, so this is not repeated."""
        at = self.lists
        if at != self.recovered_at and jobs:
            with ThreadPoolExecutor(8, thread_name_prefix="qosmos-recover") as pool:
                for pods in pool.map(lambda j: job_pods(*j), jobs):
                    self.recover(pods)
        self.recovered_at = at

    def recover(self, pods: Iterable[Obj]) -> None:
        """Finished pods listed by their DLJob: kept unless the store has a newer state."""
        with self._lock:
            for o in pods:
                k, v = key_of(o), version(o)
                have = self._objs.get(k)
                hv = version(have) if have is not None else None
                if _finished(o) and self.selects(o) and k not in self._gone and (hv is None or (v or 0) > hv):
                    self._objs[k] = o


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED


def _job_key(pod: Obj) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace', '')}/{(m.get('labels') or {}).get(LABEL_JOB, '')}"


class Reflector:
    """Keeps a :class:`Store` in step with the apiserver: list, then watch from the list's version;
    a watch that ends is resumed from the stream's position, one refused with 410 Gone (the version
    was compacted away) lists again."""

    def __init__(
        self,
        store: Store,
        list_fn: Callable[[], tuple[list[Obj], int]],
        watch_fn: Callable[[int], Iterator[Obj]],
        on_event: OnEvent | None = None,
    ) -> None:
        self.store = store
        self.list_fn = list_fn
        self.watch_fn = watch_fn
        self.on_event = on_event
        self.stopped = threading.Event()
        self.relist = True

    def run(self) -> None:
        failures = 0
        while not self.stopped.is_set():
            try:
                if self.relist:
                    try:
                        items, rv = self.list_fn()
                    except Exception as exc:
                        if getattr(exc, "status", None) != 404:
                            raise
                        if not self.store.absent:
                            log.warning("%s are not served (no CRD?): empty until they are", self.store.name)
                        self.store.missing()
                        self.stopped.wait(ABSENT_S)
                        continue
                    appeared = self.store.absent
                    self.store.replace(items, rv)
                    self.relist = False
                    if self.on_event is not None and (self.store.lists > 1 or appeared):  # what changed is unknown
                        self.on_event(self.store.name, "RELIST", {})
                for ev in self.watch_fn(self.store.rv):
                    failures = 0
                    if self.stopped.is_set():
                        return
                    self._one(ev)
                    if self.relist:
                        break
            except Exception as exc:
                if self.stopped.is_set():
                    return
                if getattr(exc, "status", None) == 410:
                    self.relist = True
                    continue
                failures += 1
                metrics.ERRORS.labels("watch").inc()
                log.warning("watch of %s failed (%s); resuming", self.store.name, exc)
                self.stopped.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])

    def _one(self, ev: Obj) -> None:
        type_, obj = str(ev.get("type")), ev.get("object") or {}
        if type_ == "BOOKMARK":
            v = version(obj)
            if v is not None:
                self.store.bookmark(v)
        elif type_ == "ERROR":
            if obj.get("code") == 410:  # Expired: the stream's version is gone from the watch cache
                log.info("watch of %s expired at %s; listing again", self.store.name, self.store.rv)
                self.relist = True
            else:
                raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        elif self.store.event(type_, obj) and self.on_event is not None:
            self.on_event(self.store.name, type_, obj)


def _bound(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in FINISHED


class Informers:
    """The operator's watch caches: VirtualClusters, InferenceServices, nodes, DLJobs of the working set (not retired),
    DLJob pods, InferenceService replica pods, and other bound unfinished pods (they hold node
    resources too); :class:`CachedKube` serves the reads of :class:`~qosmos.operator.kube.Kube`
    from them."""

    def __init__(self, kube: Kube, on_event: OnEvent | None = None) -> None:
        ns = kube.namespace
        self.vcs = Store("virtualclusters")
        self.services = Store("inferenceservices")
        self.nodes_ = Store("nodes")
        self.dljobs_ = Store(
            "dljobs", lambda o: LABEL_FINISHED not in _labels(o) and not (kube.retire_in_status and _retired(o))
        )
        self.gang = GangPods(
            "pods",
            lambda o: LABEL_JOB in _labels(o) and LABEL_FINISHED not in _labels(o),
            kube.pod,
            None if on_event is None else lambda o: on_event("pods", "FINISHED", o),
        )
        self.replicas = Store("replica-pods", lambda o: LABEL_INFERENCE in _labels(o))
        self.others = Store(
            "other-pods", lambda o: _bound(o) and LABEL_JOB not in _labels(o) and LABEL_INFERENCE not in _labels(o)
        )
        custom, core = kube.custom, kube.core

        def dljobs(**more: Any) -> Any:
            sel = kube.dljob_selectors()  # the same for a list and the watch that follows it
            if ns:
                return custom.list_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", **sel, **more)
            return custom.list_cluster_custom_object(GROUP, VERSION, "dljobs", **sel, **more)

        def pods(labels: str, **sel: Any) -> Callable[..., Any]:
            if ns:
                return lambda **more: core.list_namespaced_pod(ns, label_selector=labels, **sel, **more)
            return lambda **more: core.list_pod_for_all_namespaces(label_selector=labels, **sel, **more)

        def services(**more: Any) -> Any:
            if ns:
                return custom.list_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", **more)
            return custom.list_cluster_custom_object(GROUP, VERSION, "inferenceservices", **more)

        sources: list[tuple[Store, Callable[..., Any]]] = [
            (self.vcs, lambda **more: custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters", **more)),
            (self.services, services),
            (self.nodes_, lambda **more: core.list_node(**more)),
            (self.dljobs_, dljobs),
            (self.gang, pods(GANG_PODS, field_selector=LIVE)),
            (self.replicas, pods(LABEL_INFERENCE)),
            (
                self.others,
                lambda **more: core.list_pod_for_all_namespaces(
                    field_selector=BOUND, label_selector=f"!{LABEL_JOB},!{LABEL_INFERENCE}", **more
                ),
            ),
        ]
        self.reflectors = [Reflector(s, _lister(call), _watcher(call), on_event) for s, call in sources]
        self._threads: list[threading.Thread] = []

    @property
    def stores(self) -> list[Store]:
        return [r.store for r in self.reflectors]

    def start(self) -> None:
        for r in self.reflectors:
            t = threading.Thread(target=r.run, name=f"qosmos-watch-{r.store.name}", daemon=True)
            t.start()
            self._threads.append(t)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every store has its first list."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for s in self.stores:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not s.synced.wait(left):
                return False
        return True

    def stop(self) -> None:
        self.gang.stopped.set()
        for r in self.reflectors:
            r.stopped.set()
        for t in self._threads:
            t.join(timeout=1.0)

    def gang_pods(self) -> list[Obj]:
        """The DLJob pods: unfinished ones, and the finished pods of the working set's DLJobs (a retired
        DLJob's go with it)."""
        self.gang.prune({key_of(o) for o in self.dljobs_.items()})
        return self.gang.items()

    # ---- write-through ------------------------------------------------------------------------
    def wrote(self, resource: str, obj: Obj) -> None:
        for s in self._of(resource):
            s.wrote(obj)

    def deleted(self, resource: str, key: str) -> None:
        for s in self._of(resource):
            s.deleted(key)

    def _of(self, resource: str) -> list[Store]:
        return {
            "virtualclusters": [self.vcs],
            "inferenceservices": [self.services],
            "nodes": [self.nodes_],
            "dljobs": [self.dljobs_],
            "pods": [self.gang, self.replicas, self.others],
        }.get(resource, [])


def _retired(obj: Obj) -> bool:
    return bool((obj.get("status") or {}).get("retired"))


def _lister(call: Callable[..., Any]) -> Callable[[], tuple[list[Obj], int]]:
    def list_() -> tuple[list[Obj], int]:
        resp = call(_preload_content=False)
        body = orjson.loads(resp.data)
        rv = int((body.get("metadata") or {}).get("resourceVersion") or 0)
        return list(body.get("items") or []), rv

    return list_


def _watcher(call: Callable[..., Any]) -> Callable[[int], Iterator[Obj]]:
    from kubernetes.watch.watch import iter_resp_lines

    def watch(rv: int) -> Iterator[Obj]:
        resp = call(
            watch=True,
            resource_version=str(rv),
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_S,
            _preload_content=False,
            _request_timeout=(10, WATCH_S + 30),  # a silent connection is given up after that
        )
        try:
            for line in iter_resp_lines(resp):
                if line:
                    yield orjson.loads(line)
        finally:
            resp.release_conn()

    return watch


class CachedKube(Kube):
    """The operator's :class:`Kube` whose reads come from :class:`Informers` and whose writes are
    written through into them from the apiserver's replies."""

    def __init__(self, api_client: Any, namespace: str | None = None, **kw: Any) -> None:
        on_event: OnEvent | None = kw.pop("on_event", None)
        super().__init__(api_client, namespace, **kw)
        self.informers = Informers(self, on_event)

    # the reads a pass makes, from the stores
    def virtual_clusters(self) -> list[Obj]:
        return self.informers.vcs.items()

    def nodes(self) -> list[Obj]:
        return self.informers.nodes_.items()

    def dljobs(self) -> list[Obj]:
        return self.informers.dljobs_.items()

    def gang_pods(self) -> list[Obj]:
        return self.informers.gang_pods()

    def recover_pods(self, jobs: list[tuple[str, str]]) -> None:
        self.informers.gang.recover_jobs(jobs, self.job_pods)

    def disrupted_pods(self) -> dict[str, Disruption]:
        return self.informers.gang.disrupted()

    def pending_replica_pods(self) -> list[Obj]:
        return [
            p
            for p in self.informers.replicas.items()
            if not (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
        ]

    def other_bound_pods(self) -> list[Obj]:
        # one store per pod: a replica pod being bound is never in neither (two streams could miss it)
        return self.informers.others.items() + [p for p in self.informers.replicas.items() if _bound(p)]

    def replica_pods(self) -> list[Obj]:
        return self.informers.replicas.items()

    def inference_services(self) -> list[Obj]:
        if self.informers.services.absent:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=404, reason="InferenceServices are not served (CRD not installed)")
        return self.informers.services.items()

    def _wrote(self, resource: str, obj: Obj | None) -> None:
        if obj is not None:
            self.informers.wrote(resource, obj)

    def _deleted(self, resource: str, namespace: str, name: str) -> None:
        self.informers.deleted(resource, f"{namespace}/{name}")

    def _keeps(self) -> bool:
        return True


__all__ = ["CachedKube", "Informers", "Reflector", "Store", "key_of", "version"]
